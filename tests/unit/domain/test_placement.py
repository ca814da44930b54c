"""The placement decision: recorded, else in use, else the most room that fits, else none."""

from __future__ import annotations

from typing import Any

from computedomain.api import constants as c
from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.domain.capacity import clique_capacity
from computedomain.domain.keys import CDKey
from computedomain.domain.placement import (
    CONDITION_PLACED,
    IN_USE,
    MOST_ROOM,
    NO_CLIQUE_FITS,
    NO_FIT_ANNOTATION,
    PLACEMENT_OPT_IN,
    RECORDED,
    RECORDED_CLIQUE_ANNOTATION,
    decide,
    opted_in,
    placed_condition,
    promised,
)
from tests.kit.world import NS, compute_domain, make_world, service_account


def node(name: str, clique: str | None, held: str = "") -> dict[str, Any]:
    labels = {c.GPU_CLIQUE_NODE_LABEL: clique} if clique else {}
    if held:
        labels[c.CD_LABEL] = held
    return {
        "metadata": {"name": name, "labels": labels},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def cd(
    name: str, num_nodes: int, *, recorded: str | None = None, nodes: list[str] | None = None
) -> dict[str, Any]:
    annotations = {RECORDED_CLIQUE_ANNOTATION: recorded} if recorded is not None else {}
    status = {"nodes": [{"name": f"n{i}", "cliqueID": cl} for i, cl in enumerate(nodes or [])]}
    return {
        "metadata": {"uid": f"uid-{name}", "namespace": "team", "name": name,
                     "annotations": annotations},
        "spec": {"numNodes": num_nodes},
        "status": status,
    }  # fmt: skip


def fleet(free: dict[str, int], held: dict[str, tuple[str, int]] | None = None) -> list[Any]:
    """``free`` nodes per clique, plus ``held``: clique -> (CD uid, nodes it holds there)."""
    nodes = [node(f"{cl}-f{i}", cl) for cl, n in free.items() for i in range(n)]
    for cl, (uid, n) in (held or {}).items():
        nodes += [node(f"{cl}-h{i}", cl, held=uid) for i in range(n)]
    return nodes


def test_the_clique_with_the_most_free_nodes_that_fits() -> None:
    rows = clique_capacity(fleet({"A.0": 3, "B.0": 10, "C.0": 6}), [])
    decision = decide(cd("job", 4), rows, [])
    assert (decision.clique, decision.reason) == ("B.0", MOST_ROOM)


def test_a_recorded_decision_is_kept_even_when_another_clique_has_more_room() -> None:
    rows = clique_capacity(fleet({"A.0": 3, "B.0": 10}), [])
    decision = decide(cd("job", 2, recorded="A.0"), rows, [])
    assert (decision.clique, decision.reason) == ("A.0", RECORDED)


def test_the_clique_the_domain_already_holds_nodes_in_wins() -> None:
    job = cd("job", 8)
    rows = clique_capacity(fleet({"A.0": 1, "B.0": 10}, {"A.0": ("uid-job", 2)}), [job])
    decision = decide(job, rows, [job])
    assert (decision.clique, decision.reason) == ("A.0", IN_USE)


def test_what_its_daemons_report_counts_when_no_node_is_labelled() -> None:
    job = cd("job", 8, nodes=["A.0"])
    rows = clique_capacity(fleet({"A.0": 1, "B.0": 10}), [job])
    assert decide(job, rows, [job]).clique == "A.0"


def test_nodes_promised_to_other_domains_are_not_free() -> None:
    # B.0 has 10 free nodes, but 8 are promised to "other", whose pods are not placed yet.
    other = cd("other", 8, recorded="B.0")
    rows = clique_capacity(fleet({"A.0": 6, "B.0": 10}), [other])
    assert promised(rows, [other], but="team/job") == {"B.0": 8}
    assert decide(cd("job", 5), rows, [other]).clique == "A.0"


def test_a_promise_shrinks_as_the_other_domain_takes_its_nodes() -> None:
    other = cd("other", 8, recorded="B.0")
    rows = clique_capacity(fleet({"A.0": 6, "B.0": 10}, {"B.0": ("uid-other", 8)}), [other])
    assert promised(rows, [other], but="team/job") == {}
    assert decide(cd("job", 5), rows, [other]).clique == "B.0"


def test_no_clique_fits_names_the_largest() -> None:
    rows = clique_capacity(fleet({"A.0": 3, "B.0": 4}), [])
    decision = decide(cd("job", 5), rows, [])
    assert (decision.clique, decision.reason) == (None, NO_CLIQUE_FITS)
    assert "the most, 4, are in clique B.0" in decision.message


def test_nodes_without_a_clique_label_never_form_one() -> None:
    rows = clique_capacity([node("x1", None), node("x2", None)], [])
    decision = decide(cd("job", 1), rows, [])
    assert decision.clique is None
    assert "no node has an NVLink clique label" in decision.message


def test_opt_in_by_namespace_label_or_domain_annotation() -> None:
    job = cd("job", 1)
    assert not opted_in(job, {})
    assert opted_in(job, {PLACEMENT_OPT_IN: "true"})
    job["metadata"]["annotations"][PLACEMENT_OPT_IN] = "true"
    assert opted_in(job, {})


async def test_the_reconciler_says_what_placement_decided_in_a_placed_condition() -> None:
    world = make_world()
    unplaced = {RECORDED_CLIQUE_ANNOTATION: "", NO_FIT_ANNOTATION: "no clique has 8 free nodes"}
    cd = world.client.add(COMPUTE_DOMAINS, compute_domain(annotations=unplaced))
    world.fill(cds=[cd], service_accounts=[service_account()])
    await world.reconcile(CDKey(NS, "cd"))
    conditions = world.client.objects[("computedomains", NS, "cd")]["status"]["conditions"]
    (placed,) = [x for x in conditions if x["type"] == CONDITION_PLACED]
    assert (placed["status"], placed["reason"]) == ("False", NO_CLIQUE_FITS)
    assert placed["message"].startswith("no clique has 8 free nodes")
    # The webhook's one Event says it; the condition's turn adds none.
    assert [e for e in world.recorder.events if e[1] == NO_CLIQUE_FITS] == []


def test_a_domain_never_placed_has_no_placed_condition() -> None:
    assert placed_condition({}) is None
    assert placed_condition({RECORDED_CLIQUE_ANNOTATION: "A.0"}) == (
        True,
        "CliqueChosen",
        "its workload pods are given a required node affinity to NVLink clique A.0 by the "
        "placement webhook",
    )


def test_the_owning_workload_sizes_the_job_when_larger_than_num_nodes() -> None:
    from computedomain.domain.placement import RECORDED_SIZE_ANNOTATION, job_size, workload_size

    statefulset = {"kind": "StatefulSet", "spec": {"replicas": 8}}
    job = {"kind": "Job", "spec": {"parallelism": 6, "completions": 4}}
    assert (workload_size(statefulset), workload_size(job), workload_size(None)) == (8, 4, None)
    assert workload_size({"kind": "Deployment", "spec": {"replicas": 3}}) is None
    assert job_size(cd("job", 0), workload=8) == 8
    assert job_size(cd("job", 10), workload=8) == 10
    # Recorded with the decision: what other CDs' decisions count as promised.
    recorded = cd("job", 0)
    recorded["metadata"]["annotations"][RECORDED_SIZE_ANNOTATION] = "8"
    assert job_size(recorded) == 8
    rows = clique_capacity(fleet({"A.0": 6, "B.0": 10}), [])
    decision = decide(cd("job", 0), rows, [], workload=8)
    assert (decision.clique, decision.size) == ("B.0", 8)


async def test_an_opted_in_domain_whose_pods_came_without_a_decision_says_so() -> None:
    from computedomain.domain.placement import NOT_PLACED
    from tests.kit.world import UID

    world = make_world()
    cd = world.client.add(COMPUTE_DOMAINS, compute_domain(annotations={PLACEMENT_OPT_IN: "true"}))
    held = node("n1", "A.0", held=UID)
    held["apiVersion"], held["kind"] = "v1", "Node"
    world.fill(cds=[cd], service_accounts=[service_account()], nodes=[held])
    await world.reconcile(CDKey(NS, "cd"))
    conditions = world.client.objects[("computedomains", NS, "cd")]["status"]["conditions"]
    (placed,) = [x for x in conditions if x["type"] == CONDITION_PLACED]
    assert (placed["status"], placed["reason"]) == ("False", NOT_PLACED)
    # Not opted in, or opted in with no node held yet: no Placed condition.
    assert placed_condition({PLACEMENT_OPT_IN: "true"}, has_nodes=False) is None
    assert placed_condition({}, has_nodes=True) is None
