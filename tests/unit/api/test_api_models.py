"""Round trips of the wire models: aliases, defaults, index 0, strict opaque configs."""

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from computedomain.api import constants as c
from computedomain.api.v1beta1 import (
    ComputeDomain,
    ComputeDomainChannelConfig,
    ComputeDomainClique,
    ComputeDomainDaemonConfig,
    ComputeDomainNode,
    ComputeDomainStatus,
    Condition,
    ObjectMeta,
    format_time,
)

REPO = Path(__file__).resolve().parents[3]


def test_sample_parses_with_upstream_defaults() -> None:
    sample = yaml.safe_load((REPO / "manifests/samples/computedomain.yaml").read_text())
    cd = ComputeDomain.model_validate(sample)
    assert cd.name == "imex-channel-injection"
    assert cd.spec is not None
    assert cd.spec.num_nodes == 1
    assert cd.spec.channel.resource_claim_template.name == "imex-channel-0"
    assert cd.spec.channel.allocation_mode == "Single"


def test_num_nodes_defaults_to_zero_and_rejects_negative() -> None:
    body: dict[str, Any] = {"spec": {"channel": {"resourceClaimTemplate": {"name": "t"}}}}
    assert ComputeDomain.model_validate(body).num_nodes == 0
    body["spec"]["numNodes"] = -1
    with pytest.raises(ValidationError):
        ComputeDomain.model_validate(body)


def test_cd_without_spec_is_accepted() -> None:
    cd = ComputeDomain.model_validate({"metadata": {"name": "x", "uid": "u"}})
    assert cd.spec is None
    assert cd.num_nodes == 0


@pytest.mark.parametrize("index", [0, -1, 17])
def test_node_index_is_always_serialised(index: int) -> None:
    node = ComputeDomainNode(name="n1", ip_address="10.0.0.1", clique_id="", index=index)
    assert node.to_dict() == {
        "name": "n1",
        "ipAddress": "10.0.0.1",
        "cliqueID": "",
        "index": index,
        "status": "NotReady",
    }


def test_status_round_trip_keeps_wire_names_and_unknown_fields() -> None:
    wire = {
        "status": "Ready",
        "nodes": [
            {"name": "a", "ipAddress": "1.1.1.1", "cliqueID": "u.1", "index": 0, "status": "Ready"}
        ],
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "observedGeneration": 3,
                "lastTransitionTime": "2026-01-02T03:04:05Z",
                "reason": "DaemonsReady",
                "message": "",
            }
        ],
        "observedGeneration": 3,
        "nodeCount": 1,
        "readyNodeCount": 1,
        "cliqueCount": 1,
        "futureField": {"x": 1},
    }
    assert ComputeDomainStatus.model_validate(wire).to_dict() == wire


def test_missing_index_reads_as_zero_like_go() -> None:
    node = ComputeDomainNode.model_validate({"name": "a", "ipAddress": "i", "cliqueID": "c"})
    assert node.index == 0
    assert node.status == c.STATUS_NOT_READY


def test_condition_time_is_written_in_whole_utc_seconds() -> None:
    when = datetime(2026, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)
    cond = Condition(type="Ready", status="False", last_transition_time=when, reason="X")
    assert cond.to_dict()["lastTransitionTime"] == "2026-05-01T12:00:00Z"
    assert format_time(datetime(2026, 5, 1, 12, 0, 0)) == "2026-05-01T12:00:00Z"


def test_clique_parses_daemons_list() -> None:
    clique = ComputeDomainClique.model_validate(
        {
            "apiVersion": c.API_VERSION,
            "kind": c.CLIQUE_KIND,
            "metadata": {"name": "uid.clu.1", "namespace": "nvidia"},
            "daemons": [{"nodeName": "n", "ipAddress": "1.2.3.4", "cliqueID": "clu.1", "index": 0}],
        }
    )
    (daemon,) = clique.daemons
    assert (daemon.node_name, daemon.clique_id, daemon.index) == ("n", "clu.1", 0)
    assert clique.to_dict()["daemons"][0]["index"] == 0


def test_opaque_configs_are_exact() -> None:
    assert ComputeDomainChannelConfig(domain_id="u", allocation_mode="All").to_dict() == {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomainChannelConfig",
        "domainID": "u",
        "allocationMode": "All",
    }
    assert ComputeDomainDaemonConfig(domain_id="u").to_dict() == {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomainDaemonConfig",
        "domainID": "u",
    }


@pytest.mark.parametrize(
    "body",
    [
        {"kind": "ComputeDomainDaemonConfig", "domainID": "u", "extra": 1},
        {"kind": "ComputeDomainDaemonConfig", "domainID": ""},
        {"kind": "ComputeDomainChannelConfig", "domainID": "u"},
        {
            "apiVersion": "resource.nvidia.com/v1",
            "kind": "ComputeDomainDaemonConfig",
            "domainID": "u",
        },
    ],
)
def test_daemon_config_is_strict(body: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        ComputeDomainDaemonConfig.model_validate(body)


def test_unset_identity_is_empty_string_and_left_out_of_dumps() -> None:
    cd = ComputeDomain(metadata=ObjectMeta(name="x", namespace="team"))
    assert (cd.uid, cd.metadata.resource_version) == ("", "")
    assert cd.to_dict()["metadata"] == {"name": "x", "namespace": "team"}
    read = ComputeDomain.model_validate({"metadata": {"name": "x", "uid": "u", "generation": 0}})
    assert read.to_dict()["metadata"] == {"name": "x", "uid": "u", "generation": 0}
