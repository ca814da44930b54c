import pytest

from computedomain.sim.gates import (
    DaemonGates,
    InvalidFeatureGatesError,
    container_env,
    max_nodes_from_env,
    parse_feature_gates,
)


def test_parse_accepts_the_controllers_format_with_trailing_comma() -> None:
    assert parse_feature_gates("ComputeDomainCliques=false,IMEXDaemonsWithDNSNames=true,") == {
        "ComputeDomainCliques": False,
        "IMEXDaemonsWithDNSNames": True,
    }
    assert parse_feature_gates(None) == {}
    assert parse_feature_gates("") == {}


@pytest.mark.parametrize("value", ["ComputeDomainCliques", "A=yes", "=true"])
def test_parse_rejects_malformed_pairs(value: str) -> None:
    with pytest.raises(InvalidFeatureGatesError):
        parse_feature_gates(value)


def test_daemon_gates_default_to_v040_and_validate_the_combination() -> None:
    assert DaemonGates.from_env(None) == DaemonGates(dns_names=True, cliques=True)
    legacy = DaemonGates.from_env("ComputeDomainCliques=false,")
    assert legacy == DaemonGates(dns_names=True, cliques=False)
    assert legacy.valid
    ip_mode = DaemonGates.from_env("ComputeDomainCliques=false,IMEXDaemonsWithDNSNames=false,")
    assert ip_mode.valid
    assert not DaemonGates.from_env("IMEXDaemonsWithDNSNames=false,").valid


def test_container_env_reads_literal_values_only() -> None:
    pod = {
        "spec": {
            "containers": [
                {
                    "name": "compute-domain-daemon",
                    "env": [
                        {"name": "MAX_NODES_PER_IMEX_DOMAIN", "value": "4"},
                        {
                            "name": "NODE_NAME",
                            "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
                        },
                    ],
                }
            ]
        }
    }
    env = container_env(pod, "compute-domain-daemon")
    assert env == {"MAX_NODES_PER_IMEX_DOMAIN": "4"}
    assert max_nodes_from_env(env) == 4
    assert max_nodes_from_env({}) == 18
    assert max_nodes_from_env({"MAX_NODES_PER_IMEX_DOMAIN": "x"}) == 18
    assert container_env(pod, "other") == {}
