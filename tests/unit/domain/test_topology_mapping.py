"""Clique inventory from Node labels, and object → CD UID mapping for the event handlers."""

from typing import Any

import pytest

from computedomain.api import constants as c
from computedomain.domain.caches import uids_of_labelled
from computedomain.domain.capacity import clique_capacity
from computedomain.domain.labels import (
    cd_uid_of,
    cd_uids_of_clique,
    clique_id_of_clique,
    split_clique_name,
)
from computedomain.domain.topology import (
    LABEL_MISSING,
    CliqueInventory,
    clique_of,
    cliques_spanned,
    missing_label_clique,
    reported_cliques,
    shared_cliques,
)
from computedomain.domain.watches import uids_of_change

UID = "0b7c3f4e-2a1d-4c5b-9e8f-6a7b8c9d0e1f"


def k8s_node(
    name: str,
    clique: str | None = None,
    cd: str | None = None,
    *,
    ready: bool = True,
    cordoned: bool = False,
) -> dict[str, Any]:
    labels: dict[str, str] = {}
    if clique is not None:
        labels[c.GPU_CLIQUE_NODE_LABEL] = clique
    if cd is not None:
        labels[c.CD_LABEL] = cd
    return {
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": {"unschedulable": cordoned},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


@pytest.mark.parametrize(("labels_clique", "expected"), [("u.1", "u.1"), ("", None), (None, None)])
def test_clique_of(labels_clique: str | None, expected: str | None) -> None:
    assert clique_of(k8s_node("n", labels_clique)) == expected


def test_inventory() -> None:
    inventory = CliqueInventory.from_nodes(
        [
            k8s_node("a1", "rack.a", cd="cd1"),
            k8s_node("a2", "rack.a", cd="cd2"),
            k8s_node("a3", "rack.a"),
            k8s_node("a4", "rack.a", ready=False),
            k8s_node("a5", "rack.a", cordoned=True),
            k8s_node("b1", "rack.b", cd="cd1"),
            k8s_node("x", None, cd="cd3"),
        ]
    )
    assert inventory.nodes_by_clique == {
        "rack.a": frozenset({"a1", "a2", "a3", "a4", "a5"}),
        "rack.b": frozenset({"b1"}),
    }
    assert inventory.domains_in("rack.a") == {"cd1", "cd2"}
    assert inventory.free_nodes("rack.a") == frozenset({"a3", "a4", "a5"})  # serving no CD
    assert inventory.domain_cliques() == {"cd1": {"rack.a", "rack.b"}, "cd2": {"rack.a"}}
    assert shared_cliques(inventory.domain_cliques()) == {"rack.a": {"cd1", "cd2"}}
    # What the metric says: free is Ready, schedulable and held by none (a4 NotReady, a5
    # cordoned), as kubectl cdom cliques counts it.
    assert inventory.usage() == {
        "rack.a": {"total": 5, "ready": 3, "held": 2, "free": 1},
        "rack.b": {"total": 1, "ready": 1, "held": 1, "free": 0},
    }


def test_the_metric_and_kubectl_cdom_cliques_count_alike() -> None:
    nodes = [
        k8s_node("a1", "rack.a", cd="uid-1"),
        k8s_node("a2", "rack.a", ready=False, cd="uid-1"),
        k8s_node("a3", "rack.a", cordoned=True),
        k8s_node("a4", "rack.a"),
        k8s_node("b1", "rack.b", ready=False),
    ]
    rows = {row.clique: row for row in clique_capacity(nodes, [])}
    for clique, counts in CliqueInventory.from_nodes(nodes).usage().items():
        row = rows[clique]
        assert counts == {
            "total": row.nodes,
            "ready": row.ready,
            "held": row.held,
            "free": row.free,
        }, clique


def domain(uid: str, *entries: tuple[str, str]) -> dict[str, Any]:
    """A CD whose daemons report (node, clique) in status.nodes."""
    nodes = [
        {"name": n, "ipAddress": "10.0.0.1", "cliqueID": cl, "index": 0, "status": "Ready"}
        for n, cl in entries
    ]
    return {"metadata": {"uid": uid, "name": uid, "namespace": "ns"}, "status": {"nodes": nodes}}


def test_reported_cliques_are_the_daemons_entries_with_a_clique() -> None:
    domains = [
        domain("cd1", ("a1", "rack.a"), ("x", "")),  # x: no NVLink fabric, no clique
        domain("cd2", ("a1", "rack.a"), ("b1", "rack.b")),
        {"metadata": {"name": "no-uid"}, "status": {"nodes": [{"name": "z", "cliqueID": "r"}]}},
        {"metadata": {"uid": "cd3"}},  # no status yet
    ]
    assert reported_cliques(domains) == {
        ("a1", "cd1"): "rack.a",
        ("a1", "cd2"): "rack.a",
        ("b1", "cd2"): "rack.b",
    }


def test_a_node_whose_label_is_missing_keeps_the_clique_its_holders_daemon_reports() -> None:
    reported = reported_cliques([domain("cd1", ("a1", "rack.a"), ("a2", "rack.a"))])
    # Held by cd1, whose daemon on it reports rack.a: label-missing, in rack.a.
    assert missing_label_clique(k8s_node("a1", None, cd="cd1"), reported) == "rack.a"
    # Labelled: nothing is missing.
    assert missing_label_clique(k8s_node("a1", "rack.a", cd="cd1"), reported) is None
    # Held by another domain than the one whose (stale) entry names it: not its report.
    assert missing_label_clique(k8s_node("a2", None, cd="cd9"), reported) is None
    # Held by no domain: only a label seen before says it is in a clique.
    assert missing_label_clique(k8s_node("a2", None), reported) is None
    assert missing_label_clique(k8s_node("a2", None), reported, {"a2": "rack.a"}) == "rack.a"
    # Never labelled, never reported: a node without NVLink, not a missing label.
    assert missing_label_clique(k8s_node("cpu", None), reported, {"a2": "rack.a"}) is None


def test_label_missing_nodes_are_counted_apart_not_dropped() -> None:
    """NVIDIA's kubelet plugin removed the label from a1 (held by cd1) and a3 (free) while it
    restarts; cpu never had one."""
    labelled = CliqueInventory.from_nodes(
        [
            k8s_node("a1", "rack.a", cd="cd1"),
            k8s_node("a2", "rack.a", cd="cd2"),
            k8s_node("a3", "rack.a"),
            k8s_node("cpu", None),
        ]
    )
    before = labelled.known_cliques()
    assert before == {"a1": "rack.a", "a2": "rack.a", "a3": "rack.a"}
    reported = reported_cliques([domain("cd1", ("a1", "rack.a")), domain("cd2", ("a2", "rack.a"))])
    gap = [
        k8s_node("a1", None, cd="cd1"),
        k8s_node("a2", "rack.a", cd="cd2"),
        k8s_node("a3", None),
        k8s_node("cpu", None),
    ]
    inventory = CliqueInventory.from_nodes(gap, reported, before)
    assert inventory.label_missing == {"a1": "rack.a", "a3": "rack.a"}
    assert inventory.usage() == {
        "rack.a": {"total": 1, "ready": 1, "held": 1, "free": 0},
        LABEL_MISSING: {"total": 2, "ready": 2, "held": 1, "free": 1},
    }
    # Still in their clique for the sharing findings; no room for a job pinned by the label.
    assert inventory.members("rack.a") == frozenset({"a1", "a2", "a3"})
    assert inventory.domains_in("rack.a") == {"cd1", "cd2"}
    assert inventory.domain_cliques() == {"cd1": {"rack.a"}, "cd2": {"rack.a"}}
    assert inventory.free_nodes("rack.a") == frozenset()
    # Remembered from one inventory to the next, also without a report (a3), as long as the
    # node is listed; the first inventory of a process knows only the reports.
    assert inventory.known_cliques() == before
    assert CliqueInventory.from_nodes(gap, reported).label_missing == {"a1": "rack.a"}
    assert CliqueInventory.from_nodes(gap[1:], reported, before).known_cliques() == {
        "a2": "rack.a",
        "a3": "rack.a",
    }
    # The label is back: all as before.
    back = CliqueInventory.from_nodes(
        [k8s_node("a1", "rack.a", cd="cd1"), *gap[1:2], k8s_node("a3", "rack.a"), gap[3]],
        reported,
        inventory.known_cliques(),
    )
    assert back == labelled


def test_the_metric_and_kubectl_cdom_cliques_count_label_missing_nodes_alike() -> None:
    domains = [domain("uid-1", ("a1", "rack.a"), ("a2", "rack.a"))]
    nodes = [
        k8s_node("a1", None, cd="uid-1"),
        k8s_node("a2", None, ready=False, cd="uid-1"),
        k8s_node("a3", "rack.a"),
    ]
    rows = {row.clique: row for row in clique_capacity(nodes, domains)}
    usage = CliqueInventory.from_nodes(nodes, reported_cliques(domains)).usage()
    assert set(usage) == {"rack.a", LABEL_MISSING}
    for clique, counts in usage.items():
        row = rows[clique]
        assert counts == {
            "total": row.nodes,
            "ready": row.ready,
            "held": row.held,
            "free": row.free,
        }, clique


def test_cliques_spanned_accepts_mapping_or_lookup() -> None:
    nodes = {
        "a": k8s_node("a", "rack.a"),
        "b": k8s_node("b", "rack.b"),
        "c": k8s_node("c", ""),
    }
    assert cliques_spanned(["a", "b", "c", "unknown"], nodes) == {"rack.a", "rack.b"}
    assert cliques_spanned(["a"], nodes.get) == {"rack.a"}
    assert cliques_spanned([], nodes) == set()


def test_shared_cliques_ignores_single_users() -> None:
    assert shared_cliques({"x": {"r1"}, "y": {"r2"}}) == {}
    assert shared_cliques({"x": {"r1", "r2"}, "y": {"r2"}, "z": {"r2"}}) == {"r2": {"x", "y", "z"}}


# --- mapping --------------------------------------------------------------------------------


def labelled(kind: str, name: str, **labels: str) -> dict[str, Any]:
    return {"kind": kind, "metadata": {"name": name, "namespace": "nvidia", "labels": labels}}


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (f"{UID}.cluster.7", (UID, "cluster.7")),
        (f"{UID}.", None),
        (UID, None),
        (".x", None),
    ],
)
def test_split_clique_name(name: str, expected: tuple[str, str] | None) -> None:
    assert split_clique_name(name) == expected


def test_clique_maps_by_label_and_name() -> None:
    by_label = labelled(
        c.CLIQUE_KIND, f"{UID}.cl.1", **{c.CD_LABEL: UID, c.CLIQUE_ID_LABEL: "cl.1"}
    )
    assert cd_uids_of_clique(by_label) == [UID]
    assert clique_id_of_clique(by_label) == "cl.1"
    unlabelled = labelled(c.CLIQUE_KIND, f"{UID}.cl.1")
    assert cd_uids_of_clique(unlabelled) == [UID]
    assert clique_id_of_clique(unlabelled) == "cl.1"
    disagreeing = labelled(c.CLIQUE_KIND, "other.cl.1", **{c.CD_LABEL: UID})
    assert cd_uids_of_clique(disagreeing) == [UID, "other"]


def test_children_pods_and_nodes_map_by_label() -> None:
    assert cd_uid_of(labelled("DaemonSet", "ds", **{c.CD_LABEL: UID})) == UID
    assert cd_uid_of(labelled("Pod", "p", **{c.CD_LABEL: ""})) is None
    assert uids_of_labelled(labelled("Node", "n")) == []
    assert uids_of_labelled({"metadata": {"name": "no-labels"}}) == []


def test_update_wakes_old_and_new_owner() -> None:
    old = k8s_node("n", cd="cd-old")
    new = k8s_node("n", cd="cd-new")
    assert uids_of_change(uids_of_labelled, old, new) == ["cd-new", "cd-old"]
    assert uids_of_change(uids_of_labelled, old, k8s_node("n")) == ["cd-old"]
    assert uids_of_change(uids_of_labelled, None, new) == ["cd-new"]
    assert uids_of_change(uids_of_labelled, new, new) == ["cd-new"]
    renamed = labelled(c.CLIQUE_KIND, "other.cl.1", **{c.CD_LABEL: "other"})
    assert uids_of_change(cd_uids_of_clique, renamed, labelled(c.CLIQUE_KIND, f"{UID}.cl.1")) == [
        UID,
        "other",
    ]
