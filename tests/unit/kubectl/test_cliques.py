"""`kubectl cdom cliques`: capacity per NVLink clique from Nodes and ComputeDomains."""

from __future__ import annotations

from typing import Any

from computedomain.api import constants as c
from computedomain.domain.capacity import NO_CLIQUE, clique_capacity
from computedomain.domain.topology import LABEL_MISSING
from computedomain.kubectl.cliques import fits_message, table


def node(name: str, clique: str | None, *, ready: bool = True, held: str = "") -> dict[str, Any]:
    labels = {c.GPU_CLIQUE_NODE_LABEL: clique} if clique else {}
    if held:
        labels[c.CD_LABEL] = held
    status = "True" if ready else "False"
    return {
        "metadata": {"name": name, "labels": labels},
        "status": {"conditions": [{"type": "Ready", "status": status}]},
    }


def domain(uid: str, namespace: str, name: str) -> dict[str, Any]:
    return {"metadata": {"uid": uid, "namespace": namespace, "name": name}}


NODES = [
    node("a1", "A.0", held="uid-1"),
    node("a2", "A.0", held="uid-1"),
    node("a3", "A.0"),
    node("a4", "A.0", ready=False),
    node("b1", "B.0"),
    node("b2", "B.0"),
    node("b3", "B.0", held="uid-gone"),
    node("x1", None),
]
DOMAINS = [domain("uid-1", "team", "training")]


def test_rows_count_nodes_ready_held_and_free_per_clique() -> None:
    rows = {row.clique: row.as_dict() for row in clique_capacity(NODES, DOMAINS)}
    assert list(rows) == ["A.0", "B.0", NO_CLIQUE]
    assert rows["A.0"] == {
        "clique": "A.0",
        "nodes": 4,
        "ready": 3,
        "held": 2,
        "free": 1,
        "domains": {"team/training": 2},
        "freeNodes": ["a3"],
    }
    # A domain that no longer exists still holds its nodes until their label goes: by UID.
    assert rows["B.0"]["domains"] == {"uid-gone": 1}
    assert rows["B.0"]["free"] == 2
    assert rows[NO_CLIQUE]["free"] == 1


def test_a_cordoned_node_is_not_free() -> None:
    cordoned = node("a5", "A.0")
    cordoned["spec"] = {"unschedulable": True}
    (row,) = clique_capacity([cordoned], [])
    assert (row.ready, row.free) == (0, 0)


def test_a_job_fits_in_the_tightest_clique_that_has_room() -> None:
    rows = clique_capacity(NODES, DOMAINS)
    assert fits_message(rows, 1) == (
        True,
        "a 1-node job fits: clique A.0 has 1 free nodes (also: B.0)",
    )
    assert fits_message(rows, 2) == (True, "a 2-node job fits: clique B.0 has 2 free nodes")


def test_nodes_without_a_clique_never_make_a_job_fit() -> None:
    rows = clique_capacity(NODES, DOMAINS)
    fits, message = fits_message(rows, 3)
    assert not fits
    assert message == (
        "a 3-node job does not fit in one clique now: the most free nodes in one clique are 2 "
        "(clique B.0)"
    )
    assert fits_message(clique_capacity([node("x1", None)], []), 1) == (
        False,
        "a 1-node job does not fit: no node has an NVLink clique label",
    )


def test_the_table_has_a_header_and_a_row_per_clique() -> None:
    lines = table(clique_capacity(NODES, DOMAINS)).splitlines()
    assert lines[0].split() == ["CLIQUE", "NODES", "READY", "HELD", "FREE", "DOMAINS"]
    assert lines[1].split() == ["A.0", "4", "3", "2", "1", "team/training(2)"]
    assert lines[3].split() == [NO_CLIQUE, "1", "1", "0", "1", "-"]


def reporting(uid: str, namespace: str, name: str, *entries: tuple[str, str]) -> dict[str, Any]:
    """A domain whose daemons report (node, clique) in status.nodes."""
    cd = domain(uid, namespace, name)
    cd["status"] = {
        "nodes": [
            {"name": n, "ipAddress": "10.0.0.1", "cliqueID": cl, "index": 0, "status": "Ready"}
            for n, cl in entries
        ]
    }
    return cd


def test_nodes_whose_label_is_missing_have_a_row_of_their_own() -> None:
    """NVIDIA's kubelet plugin (v0.5) removes the label while it restarts: a1 and a2 lose it;
    their domain's daemons still report clique A.0. x1 never had one: still <none>."""
    domains = [reporting("uid-1", "team", "training", ("a1", "A.0"), ("a2", "A.0"))]
    gap = [node("a1", None, held="uid-1"), node("a2", None, held="uid-1"), *NODES[2:]]
    rows = {row.clique: row.as_dict() for row in clique_capacity(gap, domains)}
    assert list(rows) == ["A.0", "B.0", LABEL_MISSING, NO_CLIQUE]
    assert rows[LABEL_MISSING] == {
        "clique": LABEL_MISSING,
        "nodes": 2,
        "ready": 2,
        "held": 2,
        "free": 0,
        "domains": {"team/training": 2},
        "freeNodes": [],
    }
    assert (rows["A.0"]["nodes"], rows[NO_CLIQUE]["nodes"]) == (2, 1)
    lines = table(clique_capacity(gap, domains)).splitlines()
    assert lines[3].split() == ["<label", "missing>", "2", "2", "2", "0", "team/training(2)"]
    # Label-missing nodes are never where a job fits (a pod pinned by the label cannot land).
    free = [node("f1", None), node("f2", None)]
    domains.append(reporting("uid-2", "team", "done", ("f1", "C.0"), ("f2", "C.0")))
    rows_free = clique_capacity([node("f1", None, held="uid-2"), node("f2", None)], domains)
    assert [r.clique for r in rows_free] == [LABEL_MISSING, NO_CLIQUE]
    assert fits_message(rows_free, 1) == (
        False,
        "a 1-node job does not fit: no node has an NVLink clique label",
    )
    assert [r.clique for r in clique_capacity(free, [])] == [NO_CLIQUE]
