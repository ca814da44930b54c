from typing import Any

import pytest

from computedomain.api import constants as c
from computedomain.sim.decisions import (
    Action,
    PodRole,
    classify_pod,
    decide_workload,
    node_ready_in_domain,
    pod_claim_refs,
)

UID = "0b7a4a8e-0000-4000-8000-000000000001"
OTHER_UID = "0b7a4a8e-0000-4000-8000-000000000002"
CLIQUE_ID = "3f0e1c2d-0000-4000-8000-00000000abcd.0"


def pod(
    claims: list[dict[str, Any]], statuses: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    return {
        "metadata": {"name": "w0", "namespace": "team"},
        "spec": {"nodeName": "n0", "resourceClaims": claims},
        "status": {"resourceClaimStatuses": statuses or []},
    }


def claim(driver: str, config: dict[str, Any] | None) -> dict[str, Any]:
    devices: dict[str, Any] = {
        "results": [{"request": "r", "driver": driver, "pool": "n0", "device": "channel-0"}]
    }
    if config is not None:
        devices["config"] = [
            {
                "source": "FromClaim",
                "requests": ["r"],
                "opaque": {"driver": driver, "parameters": config},
            }
        ]
    return {
        "metadata": {"name": "w0-ch", "namespace": "team"},
        "status": {"allocation": {"devices": devices}},
    }


def channel_config(uid: str = UID) -> dict[str, Any]:
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.CHANNEL_CONFIG_KIND,
        "domainID": uid,
        "allocationMode": "Single",
    }


TEMPLATE_POD = pod(
    [{"name": "ch", "resourceClaimTemplateName": "t"}],
    [{"name": "ch", "resourceClaimName": "w0-ch"}],
)


def test_claim_refs_resolve_templates_and_direct_claims() -> None:
    refs = pod_claim_refs(
        pod(
            [
                {"name": "a", "resourceClaimTemplateName": "t"},
                {"name": "b", "resourceClaimName": "shared"},
            ],
            [{"name": "a", "resourceClaimName": "gen-a"}],
        )
    )
    assert [(r.pod_claim_name, r.claim_name) for r in refs] == [("a", "gen-a"), ("b", "shared")]
    assert (
        pod_claim_refs(pod([{"name": "a", "resourceClaimTemplateName": "t"}]))[0].claim_name is None
    )


def test_classification_by_config_kind() -> None:
    workload = classify_pod(TEMPLATE_POD, {"w0-ch": claim(c.DRIVER_NAME, channel_config())})
    assert (workload.role, workload.domain_id, workload.claim_namespace) == (
        PodRole.WORKLOAD,
        UID,
        "team",
    )
    daemon_cfg = {"apiVersion": c.API_VERSION, "kind": c.DAEMON_CONFIG_KIND, "domainID": UID}
    assert (
        classify_pod(TEMPLATE_POD, {"w0-ch": claim(c.DRIVER_NAME, daemon_cfg)}).role
        is PodRole.DAEMON
    )
    assert (
        classify_pod(TEMPLATE_POD, {"w0-ch": claim("gpu.example.com", None)}).role
        is PodRole.GENERIC
    )


def test_classification_waits_for_unknown_or_unallocated_claims() -> None:
    assert classify_pod(TEMPLATE_POD, {}).role is PodRole.PENDING
    unallocated = {"metadata": {"name": "w0-ch"}, "status": {}}
    assert classify_pod(TEMPLATE_POD, {"w0-ch": unallocated}).role is PodRole.PENDING
    unresolved = pod([{"name": "ch", "resourceClaimTemplateName": "t"}])
    assert classify_pod(unresolved, {}).role is PodRole.PENDING


@pytest.mark.parametrize(
    "config",
    [None, {"kind": c.CHANNEL_CONFIG_KIND, "domainID": ""}, {"kind": "Surprise", "domainID": UID}],
)
def test_classification_flags_invalid_driver_configs(config: dict[str, Any] | None) -> None:
    assert (
        classify_pod(TEMPLATE_POD, {"w0-ch": claim(c.DRIVER_NAME, config)}).role is PodRole.INVALID
    )


def cd(namespace: str = "team", nodes: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "cd", "namespace": namespace, "uid": UID},
        "status": {"nodes": nodes or []},
    }


def node(label: str | None = None, clique_id: str | None = CLIQUE_ID) -> dict[str, Any]:
    labels: dict[str, str] = {}
    if label is not None:
        labels[c.CD_LABEL] = label
    if clique_id is not None:
        labels[c.GPU_CLIQUE_NODE_LABEL] = clique_id
    return {"metadata": {"name": "n0", "labels": labels}}


def clique(status: str) -> dict[str, Any]:
    return {
        "daemons": [
            {
                "nodeName": "n0",
                "ipAddress": "ip",
                "cliqueID": CLIQUE_ID,
                "index": 0,
                "status": status,
            }
        ]
    }


def decide(**overrides: Any) -> Action:
    arguments: dict[str, Any] = {
        "node_name": "n0",
        "node": node(UID),
        "domain_id": UID,
        "claim_namespace": "team",
        "cd": cd(),
        "clique": None,
    }
    arguments.update(overrides)
    return decide_workload(**arguments).action


def test_workload_waits_for_an_unknown_domain() -> None:
    assert decide(cd=None) is Action.WAIT_FOR_DOMAIN


def test_namespace_mismatch_is_permanent() -> None:
    decision = decide_workload(
        node_name="n0",
        node=node(),
        domain_id=UID,
        claim_namespace="elsewhere",
        cd=cd(),
        clique=None,
    )
    assert decision.action is Action.FAIL
    assert decision.reason == "FailedPrepareDynamicResources"
    assert "elsewhere" in decision.message


def test_node_of_another_domain_makes_the_pod_wait() -> None:
    assert decide(node=node(OTHER_UID)) is Action.WAIT_FOR_NODE


def test_unlabelled_node_gets_labelled() -> None:
    assert decide(node=node(None)) is Action.LABEL_NODE


def test_pod_is_held_until_the_clique_entry_is_ready() -> None:
    assert decide(clique=None) is Action.WAIT_FOR_DAEMON
    assert decide(clique=clique("NotReady")) is Action.WAIT_FOR_DAEMON
    assert decide(clique=clique("Ready")) is Action.RELEASE


def test_fallback_to_status_nodes_without_clique_or_fabric() -> None:
    ready_entry = {"name": "n0", "ipAddress": "ip", "cliqueID": "", "index": -1, "status": "Ready"}
    assert decide(node=node(UID, clique_id=None), cd=cd(nodes=[ready_entry])) is Action.RELEASE
    assert (
        decide(cd=cd(nodes=[ready_entry | {"cliqueID": CLIQUE_ID, "index": 0}])) is Action.RELEASE
    )
    assert decide(
        node=node(UID, clique_id=None), cd=cd(nodes=[ready_entry | {"status": "NotReady"}])
    ) is (Action.WAIT_FOR_DAEMON)


def test_readiness_ignores_other_nodes_entries() -> None:
    other = {"daemons": [{"nodeName": "n1", "status": "Ready"}]}
    assert not node_ready_in_domain("n0", CLIQUE_ID, other, cd())


def test_host_managed_releases_at_once_without_label_or_daemon() -> None:
    # Contract §18: the plugin asks the host's IMEX socket (simulated healthy), no daemon.
    assert decide(node=node(None), host_managed=True) is Action.RELEASE
    assert decide(clique=clique("NotReady"), host_managed=True) is Action.RELEASE
    # What the plugin checks before IMEX still holds.
    assert decide(cd=None, host_managed=True) is Action.WAIT_FOR_DOMAIN
    assert decide(claim_namespace="elsewhere", host_managed=True) is Action.FAIL
