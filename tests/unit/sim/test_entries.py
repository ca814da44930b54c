from typing import Any

import pytest

from computedomain.sim.entries import (
    IndexExhaustedError,
    lowest_free_index,
    remove_clique_daemon,
    remove_legacy_node,
    set_clique_daemon_status,
    typed_status_update,
    upsert_clique_daemon,
    upsert_legacy_node,
)

CLIQUE = "3f0e1c2d-0000-4000-8000-00000000abcd.0"
OTHER_CLIQUE = "11111111-2222-4333-8444-555555555555.0"


def daemon(
    node: str, index: int, ip: str = "10.200.0.1", status: str = "NotReady"
) -> dict[str, Any]:
    return {"nodeName": node, "ipAddress": ip, "cliqueID": CLIQUE, "index": index, "status": status}


@pytest.mark.parametrize(
    ("used", "expected"),
    [([], 0), ([0, 1, 2], 3), ([1, 2], 0), ([0, 2, 3], 1), ([3, 0, 1], 2)],
)
def test_lowest_free_index_refills_gaps(used: list[int], expected: int) -> None:
    assert lowest_free_index(used, 18) == expected


def test_lowest_free_index_fails_at_the_bound() -> None:
    assert lowest_free_index(range(17), 18) == 17
    with pytest.raises(IndexExhaustedError):
        lowest_free_index(range(18), 18)
    with pytest.raises(IndexExhaustedError):
        lowest_free_index([0, 1], 2)


def test_join_appends_with_the_lowest_free_index_and_not_ready() -> None:
    daemons = [daemon("n0", 0), daemon("n2", 2)]
    result = upsert_clique_daemon(
        daemons, node_name="n1", ip_address="10.200.0.9", clique_id=CLIQUE, max_nodes=18
    )
    assert result is not None
    assert result[-1] == {
        "nodeName": "n1",
        "ipAddress": "10.200.0.9",
        "cliqueID": CLIQUE,
        "index": 1,
        "status": "NotReady",
    }
    assert daemons == [daemon("n0", 0), daemon("n2", 2)]  # input untouched


def test_index_zero_is_written_explicitly() -> None:
    result = upsert_clique_daemon(
        [], node_name="n0", ip_address="ip", clique_id=CLIQUE, max_nodes=18
    )
    assert result is not None
    assert "index" in result[0]
    assert result[0]["index"] == 0


def test_restart_keeps_the_index_and_takes_the_new_ip() -> None:
    daemons = [daemon("n0", 0), daemon("n1", 5, ip="10.200.0.5", status="Ready")]
    result = upsert_clique_daemon(
        daemons, node_name="n1", ip_address="10.200.0.77", clique_id=CLIQUE, max_nodes=18
    )
    assert result is not None
    assert result[1] == daemon("n1", 5, ip="10.200.0.77", status="NotReady")
    assert len(result) == 2


def test_an_unchanged_entry_needs_no_write() -> None:
    daemons = [daemon("n0", 0)]
    assert (
        upsert_clique_daemon(
            daemons, node_name="n0", ip_address="10.200.0.1", clique_id=CLIQUE, max_nodes=18
        )
        is None
    )


def test_join_fails_when_the_clique_is_full() -> None:
    daemons = [daemon(f"n{i}", i) for i in range(2)]
    with pytest.raises(IndexExhaustedError):
        upsert_clique_daemon(daemons, node_name="n9", ip_address="x", clique_id=CLIQUE, max_nodes=2)
    # an existing member may still refresh its entry
    assert (
        upsert_clique_daemon(daemons, node_name="n1", ip_address="y", clique_id=CLIQUE, max_nodes=2)
        is not None
    )


def test_status_change_applies_only_to_the_entry_with_our_ip() -> None:
    daemons = [daemon("n0", 0, ip="10.200.0.1")]
    ready = set_clique_daemon_status(
        daemons, node_name="n0", ip_address="10.200.0.1", status="Ready"
    )
    assert ready == [daemon("n0", 0, status="Ready")]
    assert (
        set_clique_daemon_status(ready, node_name="n0", ip_address="10.200.0.1", status="Ready")
        is None
    )
    # a predecessor pod with another IP must not flip its successor's entry
    assert (
        set_clique_daemon_status(daemons, node_name="n0", ip_address="10.200.9.9", status="Ready")
        is None
    )


def test_removal_matches_node_and_ip() -> None:
    daemons = [daemon("n0", 0, ip="a"), daemon("n1", 1, ip="b")]
    assert remove_clique_daemon(daemons, node_name="n1", ip_address="b") == [
        daemon("n0", 0, ip="a")
    ]
    assert remove_clique_daemon(daemons, node_name="n1", ip_address="stale") is None
    assert remove_clique_daemon(daemons, node_name="n7", ip_address="b") is None


def legacy(name: str, clique: str, index: int, ip: str = "ip") -> dict[str, Any]:
    return {"name": name, "ipAddress": ip, "cliqueID": clique, "index": index, "status": "Ready"}


def test_legacy_index_is_scoped_to_the_same_clique() -> None:
    nodes = [legacy("a0", CLIQUE, 0), legacy("b0", OTHER_CLIQUE, 0), legacy("b1", OTHER_CLIQUE, 1)]
    result = upsert_legacy_node(
        nodes, node_name="a1", ip_address="ip2", clique_id=CLIQUE, max_nodes=18
    )
    assert result is not None
    assert result[-1]["index"] == 1
    other = upsert_legacy_node(
        nodes, node_name="b2", ip_address="ip3", clique_id=OTHER_CLIQUE, max_nodes=18
    )
    assert other is not None
    assert other[-1]["index"] == 2


def test_legacy_ignores_non_fabric_entries_when_counting() -> None:
    nodes = [{"name": "x", "ipAddress": "ip", "cliqueID": "", "index": -1, "status": "Ready"}]
    result = upsert_legacy_node(
        nodes, node_name="a0", ip_address="ip", clique_id=CLIQUE, max_nodes=1
    )
    assert result is not None
    assert result[-1]["index"] == 0
    assert remove_legacy_node(result, node_name="a0", ip_address="ip") == nodes


def test_typed_status_update_drops_fields_the_go_struct_does_not_know() -> None:
    cd = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": "cd", "namespace": "ns", "resourceVersion": "42", "uid": "u"},
        "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": "t"}}},
        "status": {
            "status": "NotReady",
            "nodes": [],
            "conditions": [{"type": "Ready", "status": "False"}],
            "observedGeneration": 3,
        },
    }
    nodes = [
        {
            "name": "n0",
            "ipAddress": "ip",
            "cliqueID": CLIQUE,
            "index": 0,
            "status": "NotReady",
            "extra": 1,
        }
    ]
    body = typed_status_update(cd, nodes)
    assert body["metadata"]["resourceVersion"] == "42"
    assert body["status"] == {
        "status": "NotReady",
        "nodes": [
            {"name": "n0", "ipAddress": "ip", "cliqueID": CLIQUE, "index": 0, "status": "NotReady"}
        ],
    }
    assert "conditions" in cd["status"]  # input untouched


def test_typed_status_update_sends_an_empty_global_status_when_none_was_written() -> None:
    body = typed_status_update({"metadata": {"name": "cd"}, "spec": {}}, [])
    assert body["status"] == {"status": "", "nodes": []}
