"""The builders reproduce contract §7.2-7.4 field for field (golden files written by hand)."""

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from computedomain.api import constants as c
from computedomain.api.v1beta1 import ComputeDomain
from computedomain.config import parse_settings
from computedomain.domain.desired import (
    daemon_daemonset,
    daemon_resource_claim_template,
    feature_gates_env,
    workload_resource_claim_template,
)
from computedomain.domain.kubeletplugin import daemon_image
from computedomain.domain.settings import DaemonSettings

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "upstream"
SETTINGS = DaemonSettings(
    driver_namespace="nvidia-dra-driver-gpu",
    image="registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v0.4.0",
    log_verbosity=4,
)


def golden(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((FIXTURES / name).read_text())
    return loaded


@pytest.fixture
def cd() -> ComputeDomain:
    return ComputeDomain.model_validate(golden("computedomain.yaml"))


def test_daemon_rct_matches_contract(cd: ComputeDomain) -> None:
    assert daemon_resource_claim_template(cd, SETTINGS) == golden(
        "daemon-resourceclaimtemplate.yaml"
    )


def test_workload_rct_matches_contract(cd: ComputeDomain) -> None:
    assert workload_resource_claim_template(cd) == golden("workload-resourceclaimtemplate.yaml")


def test_workload_rct_carries_allocation_mode_all(cd: ComputeDomain) -> None:
    assert cd.spec is not None
    cd.spec.channel.allocation_mode = "All"
    params = workload_resource_claim_template(cd)["spec"]["spec"]["devices"]["config"][0]
    assert params["opaque"]["parameters"]["allocationMode"] == "All"


@pytest.mark.parametrize("asked", ["All", "Single"])
def test_host_managed_workload_rct_forces_allocation_mode_single(
    cd: ComputeDomain, asked: str
) -> None:
    # §18: one channel (0) per domain with host-managed IMEX, whatever the CD asks.
    assert cd.spec is not None
    cd.spec.channel.allocation_mode = asked  # type: ignore[assignment]
    built = workload_resource_claim_template(cd, host_managed=True)
    params = built["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]
    assert params["allocationMode"] == "Single"
    # Everything else is the driverManaged template's, byte for byte.
    cd.spec.channel.allocation_mode = "Single"
    assert built == workload_resource_claim_template(cd)


def test_daemonset_matches_contract(cd: ComputeDomain) -> None:
    assert daemon_daemonset(cd, SETTINGS) == golden("daemon-daemonset.yaml")


@pytest.mark.parametrize(
    "extra_env",
    [{}, {"CD_DAEMON_RESOURCES_JSON": "", "CD_DAEMON_PRIORITY_CLASS_NAME": ""}],
    ids=["unset", "empty"],
)
def test_daemonset_from_default_settings_is_nvidias(
    cd: ComputeDomain, extra_env: dict[str, str]
) -> None:
    """Unset (or empty) daemon knobs leave the DaemonSet byte-identical to NVIDIA's."""
    settings = parse_settings([], {"NAMESPACE": "nvidia-dra-driver-gpu", **extra_env})
    # No IMAGE_NAME and no kubelet plugin found: NVIDIA's image that the golden objects hold.
    image = daemon_image(settings.daemon.image, [], settings.driver_namespace)
    daemon = replace(settings.daemon, image=image)
    assert daemon_daemonset(cd, daemon) == golden("daemon-daemonset.yaml")


def test_daemonset_guaranteed_qos_from_resources_json(cd: ComputeDomain) -> None:
    env = {"CD_DAEMON_RESOURCES_JSON": '{"limits": {"cpu": 1, "memory": "512Mi"}}'}
    settings = parse_settings([], {"NAMESPACE": "nvidia-dra-driver-gpu", **env})
    (container,) = daemon_daemonset(cd, settings.daemon)["spec"]["template"]["spec"]["containers"]
    # Limits alone: the apiserver defaults requests to them, which makes the pod Guaranteed.
    assert container["resources"] == {
        "limits": {"cpu": "1", "memory": "512Mi"},
        "claims": [{"name": "compute-domain-daemon"}],
    }


def test_daemonset_optional_additions_only_when_set(cd: ComputeDomain) -> None:
    settings = DaemonSettings(
        driver_namespace="ns",
        image="img",
        log_verbosity=6,
        image_pull_secrets=("one", "two"),
        max_nodes_per_imex_domain=16,
        priority_class_name="system-node-critical",
        daemon_resources={"requests": {"cpu": "10m"}, "limits": {"memory": "256Mi"}},
    )
    ds = daemon_daemonset(cd, settings)
    pod = ds["spec"]["template"]["spec"]
    assert pod["imagePullSecrets"] == [{"name": "one"}, {"name": "two"}]
    assert pod["priorityClassName"] == "system-node-critical"
    (container,) = pod["containers"]
    assert container["resources"] == {
        "requests": {"cpu": "10m"},
        "limits": {"memory": "256Mi"},
        "claims": [{"name": "compute-domain-daemon"}],
    }
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["LOG_VERBOSITY"] == "6"
    assert env["MAX_NODES_PER_IMEX_DOMAIN"] == "16"

    plain = daemon_daemonset(cd, SETTINGS)["spec"]["template"]["spec"]
    assert "imagePullSecrets" not in plain
    assert "priorityClassName" not in plain


def test_daemonset_pod_names_fit_63_characters(cd: ComputeDomain) -> None:
    # A DS pod name is the DS name plus "-" and 5 characters.
    assert len(daemon_daemonset(cd, SETTINGS)["metadata"]["name"]) + 6 == 63


def test_builders_refuse_a_cd_without_uid() -> None:
    cd = ComputeDomain.model_validate(
        {"metadata": {"name": "x"}, "spec": {"channel": {"resourceClaimTemplate": {"name": "t"}}}}
    )
    with pytest.raises(ValueError, match="no UID"):
        daemon_daemonset(cd, SETTINGS)


def test_workload_rct_needs_a_spec() -> None:
    cd = ComputeDomain.model_validate({"metadata": {"name": "x", "namespace": "n", "uid": "u"}})
    with pytest.raises(ValueError, match="no spec"):
        workload_resource_claim_template(cd)


@pytest.mark.parametrize(
    ("gates", "expected"),
    [
        (dict(c.DEFAULT_FEATURE_GATES), "ComputeDomainCliques=true,IMEXDaemonsWithDNSNames=true,"),
        (
            {c.GATE_DNS_NAMES: True, c.GATE_CLIQUES: False},
            "ComputeDomainCliques=false,IMEXDaemonsWithDNSNames=true,",
        ),
        (
            {c.GATE_DNS_NAMES: False, c.GATE_CLIQUES: False},
            "ComputeDomainCliques=false,IMEXDaemonsWithDNSNames=false,",
        ),
        # A v25.8-style configuration that never mentions cliques.
        ({c.GATE_DNS_NAMES: True}, "IMEXDaemonsWithDNSNames=true,"),
        # Gates the daemon does not know are never passed on.
        ({c.GATE_CRASH_ON_FABRIC_ERRORS: True, "ContextualLogging": True, "MPSSupport": False}, ""),
        ({}, ""),
    ],
)
def test_feature_gates_env(gates: dict[str, bool], expected: str) -> None:
    assert feature_gates_env(gates) == expected


def test_feature_gates_env_refuses_cliques_without_dns_names() -> None:
    with pytest.raises(ValueError, match="requires"):
        feature_gates_env({c.GATE_CLIQUES: True, c.GATE_DNS_NAMES: False})


def test_empty_feature_gates_leave_the_env_var_out(cd: ComputeDomain) -> None:
    settings = DaemonSettings(driver_namespace="ns", image="i", log_verbosity=0, feature_gates={})
    (container,) = daemon_daemonset(cd, settings)["spec"]["template"]["spec"]["containers"]
    assert "FEATURE_GATES" not in {e["name"] for e in container["env"]}
