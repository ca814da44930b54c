"""The index witness of tests/kit/indexes.py: what it calls a problem, and what it does not."""

from __future__ import annotations

from typing import Any

from computedomain.api import constants as c
from tests.kit.indexes import IndexLedger

CD = "cd-uid"
CLIQUE = "uuid.0"


def _pod(uid: str, node: str, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"uid": uid, "name": uid, "labels": {c.CD_LABEL: CD}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta, "spec": {"nodeName": node}}


def _clique(*entries: tuple[str, int]) -> dict[str, Any]:
    return {
        "metadata": {"name": f"{CD}.{CLIQUE}", "labels": {c.CD_LABEL: CD}},
        "daemons": [
            {"nodeName": node, "index": index, "cliqueID": CLIQUE, "ipAddress": "10.0.0.1"}
            for node, index in entries
        ],
    }


def test_a_swap_between_live_nodes_is_found() -> None:
    ledger = IndexLedger()
    ledger.pod("ADDED", _pod("a", "n1"), 0.0)
    ledger.pod("ADDED", _pod("b", "n2"), 0.0)
    ledger.clique("ADDED", _clique(("n1", 0), ("n2", 1)), 1.0)
    ledger.clique("MODIFIED", _clique(), 2.0)  # pruned under live daemons
    ledger.clique("MODIFIED", _clique(("n2", 0)), 2.1)
    ledger.clique("MODIFIED", _clique(("n2", 0), ("n1", 1)), 2.2)
    assert ledger.swaps() == [
        f"clique {CD}.{CLIQUE}: index of live node n2 changed 1 -> 0",
        f"clique {CD}.{CLIQUE}: index of live node n1 changed 0 -> 1",
    ]
    assert len(ledger.problems()) == 4  # the two removals as well


def test_a_replaced_pod_may_take_another_index() -> None:
    ledger = IndexLedger()
    ledger.pod("ADDED", _pod("a", "n1"), 0.0)
    ledger.pod("ADDED", _pod("b", "n2"), 0.0)
    ledger.clique("ADDED", _clique(("n1", 0), ("n2", 1)), 1.0)
    ledger.pod("MODIFIED", _pod("a", "n1", deleting=True), 2.0)
    ledger.clique("MODIFIED", _clique(("n2", 1)), 2.1)
    ledger.pod("DELETED", _pod("a", "n1", deleting=True), 2.2)
    ledger.clique("MODIFIED", _clique(("n2", 1)), 2.3)
    ledger.pod("ADDED", _pod("c", "n1"), 3.0)
    ledger.clique("MODIFIED", _clique(("n2", 1), ("n1", 0)), 3.5)
    ledger.clique("MODIFIED", _clique(("n2", 1), ("n1", 0), ("n3", 2)), 4.0)
    assert ledger.problems() == []


def test_a_node_listed_twice_or_an_index_held_twice_is_found() -> None:
    ledger = IndexLedger()
    ledger.clique("ADDED", _clique(("n1", 0), ("n1", 1), ("n2", 1)), 1.0)
    assert ledger.problems() == [
        f"clique {CD}.{CLIQUE}: node n1 listed 2 times",
        f"clique {CD}.{CLIQUE}: index 1 of clique '{CLIQUE}' held by ['n1', 'n2']",
    ]


def test_a_moved_node_is_one_entry_per_clique_in_the_status() -> None:
    ledger = IndexLedger()
    ledger.pod("ADDED", _pod("a", "n1"), 0.0)
    cd: dict[str, Any] = {
        "metadata": {"uid": CD, "name": "x", "namespace": "ns"},
        "status": {"nodes": [{"name": "n1", "cliqueID": "uuid.0", "index": 3}]},
    }
    ledger.compute_domain("ADDED", cd, 1.0)
    cd["status"]["nodes"] = [
        {"name": "n1", "cliqueID": "uuid.0", "index": 3},
        {"name": "n1", "cliqueID": "uuid.1", "index": 0},
    ]
    ledger.compute_domain("MODIFIED", cd, 2.0)
    assert ledger.problems() == ["status ns/x: node n1 listed 2 times"]
