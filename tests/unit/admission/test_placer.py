"""One clique per ComputeDomain, recorded once: under concurrent admissions, across replicas whose
caches disagree, and when another write comes between a read and the decision's write."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from computedomain.admission.ledger import LEDGER_NAME, PROMISES_ANNOTATION, Ledger
from computedomain.admission.placer import Placement, Placer
from computedomain.api import constants as c
from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.domain.caches import build_caches
from computedomain.domain.placement import (
    NO_CLIQUE_FITS,
    NO_FIT_ANNOTATION,
    PLACEMENT_OPT_IN,
    RECORDED_CLIQUE_ANNOTATION,
)
from tests.kit.fakeapi import FakeApiServer
from tests.kit.world import DRIVER_NS, NS, FakeRecorder

Obj = dict[str, Any]


def node(name: str, clique: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {c.GPU_CLIQUE_NODE_LABEL: clique}},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def fleet(**free: int) -> list[Obj]:
    """``A=3`` → three free nodes in clique A."""
    return [node(f"{clique}-{i}", clique) for clique, n in free.items() for i in range(n)]


def domain(name: str, num_nodes: int, opt_in: bool = True) -> Obj:
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.CD_KIND,
        "metadata": {
            "name": name, "namespace": NS, "uid": f"uid-{name}",
            "annotations": {PLACEMENT_OPT_IN: "true"} if opt_in else {},
        },
        "spec": {"numNodes": num_nodes, "channel": {"resourceClaimTemplate": {"name": name}}},
    }  # fmt: skip


def pod(template: str) -> Obj:
    return {"spec": {"resourceClaims": [{"name": "imex", "resourceClaimTemplateName": template}]}}


def replica(
    api: FakeApiServer, nodes: list[Obj], ledger: bool = False
) -> tuple[Placer, FakeRecorder]:
    """One controller replica's placer: its own caches, filled from ``api`` and ``nodes``;
    with ``ledger``, deciding through the placement ledger in ``api`` (several replicas)."""
    caches = build_caches(api, driver_namespace=DRIVER_NS)  # type: ignore[arg-type]
    for informer in caches.all:
        informer.feed_list([])
    caches.compute_domains.feed_list(
        [copy.deepcopy(o) for (plural, _, _), o in api.objects.items() if plural == c.CD_PLURAL]
    )
    caches.nodes.feed_list(nodes)
    recorder = FakeRecorder()
    decisions = Ledger(api, DRIVER_NS) if ledger else None  # type: ignore[arg-type]
    return Placer(api, caches, recorder, decisions), recorder  # type: ignore[arg-type]


def clique(placement: Placement | None) -> str | None:
    assert placement is not None, "the pod's domain was not found"
    return placement.clique


def stored(api: FakeApiServer, name: str) -> Obj:
    return api.objects[(c.CD_PLURAL, NS, name)]


async def test_the_decision_is_recorded_once_and_read_by_later_pods() -> None:
    api = FakeApiServer()
    api.add(COMPUTE_DOMAINS, domain("job", 4))
    placer, recorder = replica(api, fleet(A=3, B=6))
    first = await placer.place(NS, pod("job"), namespace_opted_in=False)
    assert clique(first) == "B"
    assert stored(api, "job")["metadata"]["annotations"][RECORDED_CLIQUE_ANNOTATION] == "B"
    patches = [call for call in api.calls if call[0] == "patch"]
    assert len(patches) == 1
    for _ in range(5):
        again = await placer.place(NS, pod("job"), namespace_opted_in=False)
        assert clique(again) == "B"
    assert [call for call in api.calls if call[0] == "patch"] == patches
    assert recorder.events == [("Normal", "Placed")]


async def test_pods_of_other_templates_and_of_domains_not_opted_in_are_left_alone() -> None:
    api = FakeApiServer()
    api.add(COMPUTE_DOMAINS, domain("job", 1, opt_in=False))
    placer, _ = replica(api, fleet(A=3))
    assert await placer.place(NS, pod("job"), namespace_opted_in=False) is None
    assert await placer.place(NS, pod("other"), namespace_opted_in=True) is None
    assert await placer.place(NS, {"spec": {}}, namespace_opted_in=True) is None
    placed = await placer.place(NS, pod("job"), namespace_opted_in=True)
    assert clique(placed) == "A"


async def test_a_clique_another_replica_recorded_wins_over_this_replicas_own_choice() -> None:
    api = FakeApiServer()
    api.add(COMPUTE_DOMAINS, domain("job", 2))
    # This replica's cache is from before the other replica's write: it would choose B.
    placer, recorder = replica(api, fleet(A=3, B=6))
    await api.patch(
        COMPUTE_DOMAINS, "job", {"metadata": {"annotations": {RECORDED_CLIQUE_ANNOTATION: "A"}}},
        namespace=NS,
    )  # fmt: skip
    placed = await placer.place(NS, pod("job"), namespace_opted_in=False)
    assert clique(placed) == "A"
    assert stored(api, "job")["metadata"]["annotations"][RECORDED_CLIQUE_ANNOTATION] == "A"
    assert recorder.events == []


async def test_concurrent_admissions_on_two_replicas_that_see_different_fleets_pick_one() -> None:
    api = FakeApiServer()
    api.add(COMPUTE_DOMAINS, domain("job", 2))
    # Their node caches disagree (one polled before B's nodes became free): alone, the first
    # would choose A, the second B.
    one, _ = replica(api, fleet(A=6, B=3))
    two, _ = replica(api, fleet(A=3, B=6))
    placements = await asyncio.gather(
        *(
            replica_.place(NS, pod("job"), namespace_opted_in=False)
            for _ in range(10)
            for replica_ in (one, two)
        )
    )
    cliques = {str(clique(p)) for p in placements}
    assert len(cliques) == 1, f"one job was placed in several cliques: {sorted(cliques)}"
    assert cliques == {stored(api, "job")["metadata"]["annotations"][RECORDED_CLIQUE_ANNOTATION]}


async def test_two_replicas_deciding_two_domains_at_once_never_promise_one_clique_twice() -> None:
    """Each replica's cache shows neither decision (their informers have not brought the
    annotations back): alone, each would give its domain clique A, with room for one job."""
    api = FakeApiServer()
    for name in ("first", "second"):
        api.add(COMPUTE_DOMAINS, domain(name, 5))
    one, _ = replica(api, fleet(A=6, B=5), ledger=True)
    two, _ = replica(api, fleet(A=6, B=5), ledger=True)
    placed = await asyncio.gather(
        one.place(NS, pod("first"), namespace_opted_in=False),
        two.place(NS, pod("second"), namespace_opted_in=False),
    )
    assert sorted(str(clique(p)) for p in placed) == ["A", "B"]
    for name, placement in zip(("first", "second"), placed, strict=True):
        annotations = stored(api, name)["metadata"]["annotations"]
        assert annotations[RECORDED_CLIQUE_ANNOTATION] == clique(placement)
    promises = api.objects[("leases", DRIVER_NS, LEDGER_NAME)]["metadata"]["annotations"]
    assert '"uid-first"' in promises[PROMISES_ANNOTATION]
    assert '"uid-second"' in promises[PROMISES_ANNOTATION]


async def test_a_ledger_written_between_the_read_and_the_promise_is_read_again() -> None:
    """The second replica read the ledger before the first wrote it: its write is refused
    (409) and it decides again with the first one's promise."""
    api = FakeApiServer()
    for name in ("first", "second"):
        api.add(COMPUTE_DOMAINS, domain(name, 5))
    one, _ = replica(api, fleet(A=6, B=5), ledger=True)
    two, _ = replica(api, fleet(A=6, B=5), ledger=True)
    ledger = Ledger(api, DRIVER_NS)  # type: ignore[arg-type]
    stale = await ledger.read()
    assert clique(await one.place(NS, pod("first"), namespace_opted_in=False)) == "A"
    assert not await ledger.promise(stale, "uid-second", f"{NS}/second", "A", 5)
    assert clique(await two.place(NS, pod("second"), namespace_opted_in=False)) == "B"


async def test_a_domain_another_replica_promised_takes_that_clique() -> None:
    api = FakeApiServer()
    api.add(COMPUTE_DOMAINS, domain("job", 2))
    one, recorder = replica(api, fleet(A=3, B=6), ledger=True)
    ledger = Ledger(api, DRIVER_NS)  # type: ignore[arg-type]
    assert await ledger.promise(await ledger.read(), "uid-job", f"{NS}/job", "A", 2)
    assert clique(await one.place(NS, pod("job"), namespace_opted_in=False)) == "A"
    assert recorder.events == []  # the replica that promised it writes and announces it


async def test_nodes_promised_to_a_domain_decided_a_moment_ago_are_not_offered_again() -> None:
    api = FakeApiServer()
    for name in ("first", "second"):
        api.add(COMPUTE_DOMAINS, domain(name, 5))
    placer, _ = replica(api, fleet(A=6, B=5))
    first = await placer.place(NS, pod("first"), namespace_opted_in=False)
    # The informer has not brought "first"'s annotation back; the placer remembers it.
    second = await placer.place(NS, pod("second"), namespace_opted_in=False)
    assert (clique(first), clique(second)) == ("A", "B")


async def test_when_no_clique_fits_the_domain_says_so_once_and_pods_are_unplaced() -> None:
    api = FakeApiServer()
    api.add(COMPUTE_DOMAINS, domain("job", 8))
    placer, recorder = replica(api, fleet(A=3, B=4))
    for _ in range(3):
        placed = await placer.place(NS, pod("job"), namespace_opted_in=False)
        assert clique(placed) is None
    annotations = stored(api, "job")["metadata"]["annotations"]
    assert annotations[RECORDED_CLIQUE_ANNOTATION] == ""
    assert "the most, 4, are in clique B" in annotations[NO_FIT_ANNOTATION]
    assert recorder.events == [("Warning", NO_CLIQUE_FITS)]


async def test_a_domain_not_cached_yet_is_found_by_one_list() -> None:
    api = FakeApiServer()
    placer, _ = replica(api, fleet(A=3))
    api.add(COMPUTE_DOMAINS, domain("job", 1))
    placed = await placer.place(NS, pod("job"), namespace_opted_in=False)
    assert clique(placed) == "A"
    assert [call for call in api.calls if call[0] == "list"] == [
        ("list", "computedomains", f"{NS}/")
    ]


async def test_a_write_between_the_read_and_the_decision_is_retried_on_the_new_version() -> None:
    api = FakeApiServer()
    api.add(COMPUTE_DOMAINS, domain("job", 1))
    placer, _ = replica(api, fleet(A=3))
    api.bump(COMPUTE_DOMAINS, "job", NS)  # a status write the cache has not seen
    placed = await placer.place(NS, pod("job"), namespace_opted_in=False)
    assert clique(placed) == "A"
    verbs = [call[0] for call in api.calls]
    assert verbs == ["patch", "list", "patch"]


async def test_the_statefulset_owning_the_first_pod_sizes_the_job() -> None:
    from computedomain.domain.placement import RECORDED_SIZE_ANNOTATION
    from computedomain.runtime.resources import STATEFULSETS

    api = FakeApiServer()
    api.add(COMPUTE_DOMAINS, domain("job", 0))  # numNodes 0: the size is the workload's
    api.add(
        STATEFULSETS, {"metadata": {"name": "workers", "namespace": NS}, "spec": {"replicas": 5}}
    )
    placer, _ = replica(api, fleet(A=4, B=6))
    owned = pod("job")
    owned["metadata"] = {"ownerReferences": [
        {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "workers", "controller": True}
    ]}  # fmt: skip
    assert clique(await placer.place(NS, owned, namespace_opted_in=False)) == "B"
    assert stored(api, "job")["metadata"]["annotations"][RECORDED_SIZE_ANNOTATION] == "5"


async def test_an_owner_that_cannot_be_read_leaves_the_size_to_num_nodes() -> None:
    api = FakeApiServer()
    api.add(COMPUTE_DOMAINS, domain("job", 3))
    placer, _ = replica(api, fleet(A=4))
    owned = pod("job")
    owned["metadata"] = {"ownerReferences": [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "gone", "controller": True}
    ]}  # fmt: skip
    assert clique(await placer.place(NS, owned, namespace_opted_in=False)) == "A"


async def test_pods_of_a_domain_being_deleted_are_left_alone() -> None:
    api = FakeApiServer()
    deleting = domain("job", 1)
    deleting["metadata"]["deletionTimestamp"] = "2026-12-07T20:00:00Z"
    api.add(COMPUTE_DOMAINS, deleting)
    placer, _ = replica(api, fleet(A=3))
    assert await placer.place(NS, pod("job"), namespace_opted_in=True) is None
    assert [call for call in api.calls if call[0] == "patch"] == []
