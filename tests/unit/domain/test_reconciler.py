"""The reconciler against pre-filled caches and one recording fake client, in the style of
kubernetes/sample-controller's controller_test.go: each test states the world, reconciles one
key, and asserts the exact API calls (verb, resource, namespace/name) the reconciler made."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace
from datetime import timedelta
from typing import Any

from computedomain.api import constants as c
from computedomain.api.resources import CLIQUES, COMPUTE_DOMAINS
from computedomain.domain.children import FOREIGN_RECHECK_SECONDS
from computedomain.domain.keys import CDKey, OrphanKey
from computedomain.domain.reconciler import CHILDREN_FIRST_REQUEUE
from computedomain.runtime import resources as r
from computedomain.runtime.clock import format_time
from computedomain.runtime.controller import Result
from tests.kit.clock import settle
from tests.kit.world import (
    DAEMON,
    DRIVER_NS,
    GHOST,
    NS,
    SETTINGS,
    UID,
    World,
    clique_of_cd,
    compute_domain,
    daemon_entry,
    labelled,
    make_world,
    node_label_moves_after_the_list,
    service_account,
    waiting_for_workload,
    with_children,
)

# The body of every finalizer removal: only ours, only if it is still where it was read.
FINALIZER_REMOVED = [
    {"op": "test", "path": "/metadata/finalizers/0", "value": c.FINALIZER},
    {"op": "remove", "path": "/metadata/finalizers/0"},
]
# A deletion's first look: workload pods still running in the CD's namespace (none here).
WORKLOAD_LIST = ("list", "pods", f"{NS}/")
NEW_CD_CALLS = [
    ("patch", "computedomains", f"{NS}/cd"),  # the finalizer, before any child
    ("create", "resourceclaimtemplates", f"{DRIVER_NS}/{DAEMON}"),
    ("create", "daemonsets", f"{DRIVER_NS}/{DAEMON}"),
    ("create", "resourceclaimtemplates", f"{NS}/channel"),
    ("patch", "computedomains/status", f"{NS}/cd"),
]


async def test_new_cd_gets_finalizer_children_and_status(world: World) -> None:
    cd = world.client.add(COMPUTE_DOMAINS, compute_domain())
    world.fill(cds=[cd], service_accounts=[service_account()])

    assert await world.reconcile(CDKey(NS, "cd")) == waiting_for_workload()

    assert world.client.calls == NEW_CD_CALLS
    # One Event lists the three children (one write, not three); the first verdict (waiting for
    # the workload) is progress, which the condition says: no Event of its own.
    assert world.recorder.events == [("Normal", "Created")]
    assert world.recorder.notes[0] == (
        f"Created ResourceClaimTemplate {DRIVER_NS}/{DAEMON}, DaemonSet {DRIVER_NS}/{DAEMON}, "
        f"ResourceClaimTemplate {NS}/channel"
    )
    stored = world.client.objects[("computedomains", NS, "cd")]
    assert stored["metadata"]["finalizers"] == [c.FINALIZER]
    assert stored["status"]["status"] == c.STATUS_READY  # numNodes 0 (#767)
    # What was sent: the finalizer only onto the version read, the children labelled with
    # the CD, the status onto the version the finalizer write produced (the next one).
    finalizer, *children, status = world.client.bodies
    read = cd["metadata"]["resourceVersion"]
    assert finalizer == [
        {"op": "test", "path": "/metadata/resourceVersion", "value": read},
        {"op": "add", "path": "/metadata/finalizers", "value": [c.FINALIZER]},
    ]
    assert [(b["kind"], b["metadata"]["labels"][c.CD_LABEL]) for b in children] == [
        ("ResourceClaimTemplate", UID),
        ("DaemonSet", UID),
        ("ResourceClaimTemplate", UID),
    ]
    assert status["metadata"] == {"resourceVersion": str(int(read) + 1)}
    assert status["status"]["status"] == c.STATUS_READY


async def test_in_a_burst_children_come_before_the_first_status() -> None:
    """With other reconciles waiting, a new CD's first status goes behind them: a burst of new
    CDs gets every CD's children before any status write, with the same writes in total."""
    world = make_world(backlog=lambda: 3)
    cd = world.client.add(COMPUTE_DOMAINS, compute_domain())
    world.fill(cds=[cd], service_accounts=[service_account()])

    assert await world.reconcile(CDKey(NS, "cd")) == Result(requeue_after=CHILDREN_FIRST_REQUEUE)
    assert world.client.calls == NEW_CD_CALLS[:-1]
    assert world.recorder.events == [("Normal", "Created")]

    # Its turn again (the children are in the caches): the status, and nothing else.
    world.client.forget_calls()
    assert await world.reconcile(CDKey(NS, "cd")) == waiting_for_workload()
    assert world.client.calls == NEW_CD_CALLS[-1:]
    stored = world.client.objects[("computedomains", NS, "cd")]
    assert stored["status"]["status"] == c.STATUS_READY


async def test_steady_state_makes_no_calls(world: World) -> None:
    cd = world.client.add(COMPUTE_DOMAINS, compute_domain())
    world.fill(cds=[cd], service_accounts=[service_account()])
    await world.reconcile(CDKey(NS, "cd"))  # its writes went into the caches (read-your-writes)
    world.recorder.events.clear()
    await world.clock.advance(30)

    # Only the timer that looks at its workload pods after the grace period (no call now).
    assert await world.reconcile(CDKey(NS, "cd")) == waiting_for_workload(waited=30)

    assert world.client.calls == []
    assert world.recorder.events == []


async def test_a_foreign_daemonset_is_refused_not_touched(world: World) -> None:
    cd = world.client.add(COMPUTE_DOMAINS, compute_domain())
    # Same name, no UID label: the label-selected cache does not even see it.
    world.client.add(r.DAEMONSETS, {"metadata": {"name": DAEMON, "namespace": DRIVER_NS}})
    world.fill(cds=[cd], service_accounts=[service_account()])

    result = await world.reconcile(CDKey(NS, "cd"))

    assert world.client.calls == [
        ("patch", "computedomains", f"{NS}/cd"),
        ("create", "resourceclaimtemplates", f"{DRIVER_NS}/{DAEMON}"),
        ("create", "daemonsets", f"{DRIVER_NS}/{DAEMON}"),
        ("get", "daemonsets", f"{DRIVER_NS}/{DAEMON}"),  # whose is it? not ours: left alone
        ("create", "resourceclaimtemplates", f"{NS}/channel"),
        ("patch", "computedomains/status", f"{NS}/cd"),
    ]
    assert world.client.bodies[0] == [  # the finalizer, on the version the cache saw
        {
            "op": "test",
            "path": "/metadata/resourceVersion",
            "value": cd["metadata"]["resourceVersion"],
        },
        {"op": "add", "path": "/metadata/finalizers", "value": [c.FINALIZER]},
    ]
    assert ("Warning", "ForeignObject") in world.recorder.events
    assert result.requeue_after == 60.0
    foreign = world.client.objects[("daemonsets", DRIVER_NS, DAEMON)]
    assert "labels" not in foreign["metadata"]
    assert "deletionTimestamp" not in foreign["metadata"]


async def test_a_refused_foreign_name_is_remembered_only_for_its_recheck_period(
    world: World,
) -> None:
    """The memo of refused names spares the apiserver a create per reconcile; a memo whose
    period is over is dropped when another refusal comes, so the memo of a CD deleted since
    does not stay for the life of the process."""
    first = world.client.add(COMPUTE_DOMAINS, compute_domain())
    world.client.add(r.DAEMONSETS, {"metadata": {"name": DAEMON, "namespace": DRIVER_NS}})
    world.fill(cds=[first], service_accounts=[service_account()])
    await world.reconcile(CDKey(NS, "cd"))
    memo = world.reconciler._children._foreign  # what this process keeps, not API state
    assert list(memo) == [("daemonsets", DRIVER_NS, DAEMON)]

    await world.clock.advance(FOREIGN_RECHECK_SECONDS)
    other = {**compute_domain(), "metadata": {**compute_domain()["metadata"], "name": "other"}}
    other["metadata"]["uid"] = GHOST
    other["spec"] = {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": "other"}}}
    world.client.add(
        r.DAEMONSETS, {"metadata": {"name": c.daemon_name(GHOST), "namespace": DRIVER_NS}}
    )
    world.fill(cds=[world.client.add(COMPUTE_DOMAINS, other)], service_accounts=[service_account()])
    await world.reconcile(CDKey(NS, "other"))
    assert list(memo) == [("daemonsets", DRIVER_NS, c.daemon_name(GHOST))]


async def test_a_cd_gone_from_the_cache_leaves_nothing_in_memory(world: World) -> None:
    """What the process remembers of a CD (status window, grace timers) goes with it, also
    when it left without our finalizer's pass (the finalizer removed by hand)."""
    stores = with_children(world)
    world.fill(service_accounts=[service_account()], **stores)
    await world.reconcile(CDKey(NS, "cd"))
    assert UID in world.reconciler._ctx.memory

    world.caches.compute_domains.feed_list([])
    assert await world.reconcile(CDKey(NS, "cd")) == Result()
    assert world.reconciler._ctx.memory == {}
    assert world.reconciler._ctx.uid_of_key == {}


async def test_a_cd_made_again_under_its_name_leaves_nothing_of_the_old_one(world: World) -> None:
    """Deleted and created again between two reconciles of its key (the queue held the key
    once for both events): the old UID's memory goes with the first look at the new CD, not
    only when some CD leaves the cache."""
    world.fill(service_accounts=[service_account()], **with_children(world))
    await world.reconcile(CDKey(NS, "cd"))
    assert list(world.reconciler._ctx.memory) == [UID]

    again = world.client.add(COMPUTE_DOMAINS, compute_domain(name="cd", uid=GHOST))
    world.caches.compute_domains.feed_list([again])
    await world.reconcile(CDKey(NS, "cd"))

    assert list(world.reconciler._ctx.memory) == [GHOST]


async def test_deletion_with_daemon_pods_removes_children_and_labels_then_waits(
    world: World,
) -> None:
    deleted_at = format_time(world.clock.wall())
    cd = world.client.add(
        COMPUTE_DOMAINS, compute_domain(finalizers=[c.FINALIZER], deletionTimestamp=deleted_at)
    )
    workload = world.client.add(
        r.RESOURCE_CLAIM_TEMPLATES,
        labelled("channel", NS, **{c.TARGET_LABEL: c.TARGET_WORKLOAD}),
    )
    daemon_rct = world.client.add(
        r.RESOURCE_CLAIM_TEMPLATES,
        labelled(DAEMON, DRIVER_NS, **{c.TARGET_LABEL: c.TARGET_DAEMON}),
    )
    daemonset = world.client.add(r.DAEMONSETS, labelled(DAEMON, DRIVER_NS))
    node = world.client.add(r.NODES, {"metadata": {"name": "n1", "labels": {c.CD_LABEL: UID}}})
    pod = labelled(f"{DAEMON}-abcde", DRIVER_NS)
    world.fill(
        cds=[cd],
        rcts=[workload, daemon_rct],
        daemonsets=[daemonset],
        pods=[pod],
        nodes=[node],
        service_accounts=[service_account()],
    )

    result = await world.reconcile(CDKey(NS, "cd"))

    assert world.client.calls == [
        WORKLOAD_LIST,
        ("delete", "resourceclaimtemplates", f"{NS}/channel"),  # the workload's first
        ("patch", "resourceclaimtemplates", f"{NS}/channel"),  # its finalizer
        ("delete", "resourceclaimtemplates", f"{DRIVER_NS}/{DAEMON}"),
        ("patch", "resourceclaimtemplates", f"{DRIVER_NS}/{DAEMON}"),
        ("delete", "daemonsets", f"{DRIVER_NS}/{DAEMON}"),
        ("patch", "daemonsets", f"{DRIVER_NS}/{DAEMON}"),
        ("list", "nodes", f"{c.CD_LABEL}={UID}"),  # live: the cache may lag the plugin
        ("patch", "nodes", "n1"),  # test-and-remove of the CD label
        ("patch", "computedomains/status", f"{NS}/cd"),  # Ready=False while pods stop
    ]
    # Each removal is conditional on what it removes (a test op first), never a blind write.
    label = "/metadata/labels/" + c.CD_LABEL.replace("/", "~1")
    assert world.client.bodies[1:9] == [
        None,
        FINALIZER_REMOVED,
        None,
        FINALIZER_REMOVED,
        None,
        FINALIZER_REMOVED,
        None,
        [{"op": "test", "path": label, "value": UID}, {"op": "remove", "path": label}],
    ]
    status = world.client.bodies[9]
    assert status["metadata"] == {"resourceVersion": cd["metadata"]["resourceVersion"]}
    assert [x["reason"] for x in status["status"]["conditions"]][:2] == ["Deleting", "Deleting"]
    assert result == Result(requeue_after=2.0)  # the CD keeps its finalizer for now
    assert world.client.objects[("computedomains", NS, "cd")]["metadata"]["finalizers"]
    assert c.CD_LABEL not in world.client.objects[("nodes", "", "n1")]["metadata"]["labels"]
    # One Event names the three children deleted (one write, not three).
    assert world.recorder.events == [("Normal", "Deleted")]
    assert world.recorder.notes == [
        f"Deleted ResourceClaimTemplate {NS}/channel, ResourceClaimTemplate {DRIVER_NS}/{DAEMON}, "
        f"DaemonSet {DRIVER_NS}/{DAEMON}"
    ]


def workload_pod(
    name: str, node: str | None = "n1", phase: str = "Running", status: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A pod of the CD's workload (its channel template), as the apiserver holds it."""
    claim = {"name": "channel", "resourceClaimTemplateName": "channel"}
    spec: dict[str, Any] = {"resourceClaims": [claim], **({"nodeName": node} if node else {})}
    return {
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
        "status": {"phase": phase, **(status or {})},
    }


RUNNING_INIT: dict[str, Any] = {
    "initContainerStatuses": [{"name": "setup", "state": {"running": {}}}]
}


async def test_a_deletion_keeps_the_imex_daemons_while_workload_pods_run_then_goes_on(
    world: World,
) -> None:
    """Running workload pods still use the channel: nothing is removed, the status
    names them, one Event says so; once they have stopped, the deletion goes on as ever."""
    stores = with_children(world)
    stores["cds"] = [
        world.client.add(
            COMPUTE_DOMAINS,
            compute_domain(
                finalizers=[c.FINALIZER], deletionTimestamp=format_time(world.clock.wall())
            ),
        )
    ]
    world.client.add(r.PODS, workload_pod("job-0"))
    world.client.add(r.PODS, workload_pod("job-1", phase="Succeeded"))  # done: holds nothing
    world.client.add(r.PODS, workload_pod("job-2", node=None, phase="Pending"))  # never placed
    world.client.add(r.PODS, workload_pod("job-3", phase="Pending"))  # placed, not running yet
    # Being deleted, still draining (its containers have not stopped): holds its claims.
    draining = workload_pod("job-4")
    draining["metadata"]["deletionTimestamp"] = format_time(world.clock.wall())
    world.client.add(r.PODS, draining)
    # Pending on its node, an init container running (after its claims were prepared).
    world.client.add(r.PODS, workload_pod("job-5", phase="Pending", status=RUNNING_INIT))
    world.client.add(r.PODS, workload_pod("job-6", phase="Failed"))  # stopped, still reserved
    world.fill(service_accounts=[service_account()], **stores)

    assert await world.reconcile(CDKey(NS, "cd")) == Result(requeue_after=2.0)
    assert world.client.calls == [WORKLOAD_LIST, ("patch", "computedomains/status", f"{NS}/cd")]
    ready = world.client.objects[("computedomains", NS, "cd")]["status"]["conditions"][0]
    assert (ready["reason"], ready["message"]) == (
        "Deleting",
        "The ComputeDomain is being deleted; its IMEX daemons stay while 3 workload pods still "
        "use its channel: job-0, job-4, job-5",
    )
    assert world.recorder.events == [("Normal", "WaitingForWorkloadPods")]

    await world.clock.advance(2)
    await world.reconcile(CDKey(NS, "cd"))
    assert world.client.calls == [WORKLOAD_LIST]  # still running: nothing new to write or say
    assert world.recorder.events == [("Normal", "WaitingForWorkloadPods")]

    for name in ("job-0", "job-4", "job-5"):  # they stopped
        world.client.remove(r.PODS, name, NS)
    await world.clock.advance(2)
    await world.reconcile(CDKey(NS, "cd"))
    assert world.client.calls[0] == WORKLOAD_LIST
    assert ("delete", "daemonsets", f"{DRIVER_NS}/{DAEMON}") in world.client.calls

    await world.reconcile(CDKey(NS, "cd"))
    assert WORKLOAD_LIST not in world.client.calls  # looked at until it found none, not after


async def test_workload_pods_still_running_at_workload_release_timeout_do_not_hold_it(
    world: World,
) -> None:
    deleted_at = world.clock.wall() - timedelta(seconds=SETTINGS.workload_release_timeout)
    stores = with_children(world)
    stores["cds"] = [
        world.client.add(
            COMPUTE_DOMAINS,
            compute_domain(finalizers=[c.FINALIZER], deletionTimestamp=format_time(deleted_at)),
        )
    ]
    world.client.add(r.PODS, workload_pod("job-0"))
    world.fill(service_accounts=[service_account()], **stores)

    await world.reconcile(CDKey(NS, "cd"))

    assert ("delete", "daemonsets", f"{DRIVER_NS}/{DAEMON}") in world.client.calls
    assert ("Warning", "WorkloadPodsStillRunning") in world.recorder.events
    assert world.recorder.notes[
        world.recorder.events.index(("Warning", "WorkloadPodsStillRunning"))
    ] == (
        "1 workload pod still uses ResourceClaimTemplate channel after 300s; removing the IMEX "
        "daemons anyway: job-0"
    )


async def test_daemon_pods_hold_the_finalizer_until_daemon_pod_wait_timeout_then_not(
    world: World,
) -> None:
    """DAEMON_POD_WAIT_TIMEOUT bounds the wait for daemon pods: before it the CD keeps its
    finalizer (NVIDIA's plugin can still resolve it); past it the finalizer goes anyway, with
    one DaemonPodsStuck Warning naming the pods, so a deletion never hangs on a dead node."""
    timeout = SETTINGS.daemon_pod_wait_timeout
    deleted_at = world.clock.wall() - timedelta(seconds=timeout - 1)
    cd = world.client.add(
        COMPUTE_DOMAINS,
        compute_domain(finalizers=[c.FINALIZER], deletionTimestamp=format_time(deleted_at)),
    )
    pod = labelled(f"{DAEMON}-abcde", DRIVER_NS)
    world.fill(cds=[cd], pods=[pod], service_accounts=[service_account()])

    assert await world.reconcile(CDKey(NS, "cd")) == Result(requeue_after=2.0)
    assert world.client.objects[("computedomains", NS, "cd")]["metadata"]["finalizers"]
    assert ("Warning", "DaemonPodsStuck") not in world.recorder.events

    await world.clock.advance(2)  # one second past the timeout
    world.client.calls.clear()
    assert await world.reconcile(CDKey(NS, "cd")) == Result()
    assert ("patch", "computedomains", f"{NS}/cd") in world.client.calls
    assert world.client.bodies[-1] == FINALIZER_REMOVED
    assert world.recorder.events.count(("Warning", "DaemonPodsStuck")) == 1
    assert (
        f"{DAEMON}-abcde"
        in world.recorder.notes[world.recorder.events.index(("Warning", "DaemonPodsStuck"))]
    )


async def test_a_retried_deletion_skips_what_is_already_gone(world: World) -> None:
    """The caches still show children the apiserver has deleted (their watch events are late)
    and the CD waits for a daemon pod: the next passes neither DELETE them again (each 404
    the first time) nor list Nodes again once a live LIST found none labelled."""
    deleted_at = format_time(world.clock.wall())
    cd = world.client.add(
        COMPUTE_DOMAINS, compute_domain(finalizers=[c.FINALIZER], deletionTimestamp=deleted_at)
    )
    late = {  # in the caches only
        "rcts": [
            labelled("channel", NS, uid=UID, **{c.TARGET_LABEL: c.TARGET_WORKLOAD}),
            labelled(DAEMON, DRIVER_NS, **{c.TARGET_LABEL: c.TARGET_DAEMON}),
        ],
        "daemonsets": [labelled(DAEMON, DRIVER_NS)],
    }
    for index, child in enumerate(late["rcts"] + late["daemonsets"]):
        child["metadata"]["uid"] = f"child-{index}"
    world.fill(
        cds=[cd],
        pods=[labelled(f"{DAEMON}-abcde", DRIVER_NS)],
        service_accounts=[service_account()],
        **late,
    )
    await world.reconcile(CDKey(NS, "cd"))
    assert [call[0] for call in world.client.calls].count("delete") == 3  # each answered 404
    assert ("list", "nodes", f"{c.CD_LABEL}={UID}") in world.client.calls

    for _ in range(3):
        await world.clock.advance(2.0)
        await world.reconcile(CDKey(NS, "cd"))
        assert not [call for call in world.client.calls if call[0] in ("delete", "list")]


async def test_a_node_label_that_moved_to_another_cd_after_the_list_is_left_alone(
    world: World,
) -> None:
    """Between the deletion's live LIST of labelled Nodes and its patch, the plugin gives the
    Node to another CD: the guarded patch is refused (422), the other CD's label stays, and the
    deletion goes on without counting that Node as cleared."""
    deleted_at = format_time(world.clock.wall())
    cd = world.client.add(
        COMPUTE_DOMAINS, compute_domain(finalizers=[c.FINALIZER], deletionTimestamp=deleted_at)
    )
    world.client.add(r.NODES, {"metadata": {"name": "n1", "labels": {c.CD_LABEL: UID}}})
    world.fill(cds=[cd], service_accounts=[service_account()])
    node_label_moves_after_the_list(world, "n1", GHOST)

    assert await world.reconcile(CDKey(NS, "cd")) == Result()

    assert world.client.calls == [
        WORKLOAD_LIST,
        ("list", "nodes", f"{c.CD_LABEL}={UID}"),
        ("patch", "nodes", "n1"),  # refused: its test op names UID, the label now GHOST
        ("patch", "computedomains", f"{NS}/cd"),  # the finalizer goes all the same
    ]
    assert world.client.objects[("nodes", "", "n1")]["metadata"]["labels"] == {c.CD_LABEL: GHOST}
    assert world.recorder.events.count(("Normal", "CleanedUp")) == 1


async def test_a_pass_after_the_finalizer_went_and_before_the_cds_deleted_event_writes_nothing(
    world: World,
) -> None:
    """Another event for the CD (a child's, a Node's) arrives between our finalizer removal and
    the CD's DELETED event: that pass must not list Nodes or patch the gone CD again."""
    deleted_at = format_time(world.clock.wall())
    cd = world.client.add(
        COMPUTE_DOMAINS, compute_domain(finalizers=[c.FINALIZER], deletionTimestamp=deleted_at)
    )
    world.fill(cds=[cd], service_accounts=[service_account()])
    assert await world.reconcile(CDKey(NS, "cd")) == Result()
    assert world.client.calls == [
        WORKLOAD_LIST,
        ("list", "nodes", f"{c.CD_LABEL}={UID}"),
        ("patch", "computedomains", f"{NS}/cd"),  # our finalizer, the last one
    ]

    assert await world.reconcile(CDKey(NS, "cd")) == Result()
    assert world.client.calls == []


async def test_an_orphan_is_removed_after_the_grace_period_and_a_live_check(
    world: World,
) -> None:
    daemonset = world.client.add(r.DAEMONSETS, labelled(c.daemon_name(GHOST), DRIVER_NS, GHOST))
    world.fill(daemonsets=[daemonset], service_accounts=[service_account()])
    key = OrphanKey(GHOST)

    assert await world.reconcile(key) == Result(requeue_after=5.0)
    assert world.client.calls == []  # seen, not yet acted on

    await world.clock.advance(5)
    result = await world.reconcile(key)

    assert world.client.calls == [
        ("list", "computedomains", ""),  # no CD has this UID, even live
        ("delete", "daemonsets", f"{DRIVER_NS}/{c.daemon_name(GHOST)}"),
        ("patch", "daemonsets", f"{DRIVER_NS}/{c.daemon_name(GHOST)}"),
        ("list", "nodes", f"{c.CD_LABEL}={GHOST}"),
    ]
    assert world.client.bodies == [None, None, FINALIZER_REMOVED, None]
    assert result == Result(requeue_after=2.0)  # until the DaemonSet leaves the cache
    assert world.recorder.events == []  # an orphan has no CD to report on


async def test_an_orphan_waits_for_every_cache_to_sync_before_its_grace_period_starts(
    world: World,
) -> None:
    """Until every cache has synced, a UID missing from the CD cache proves nothing (the CD
    may not be listed yet): the orphan is looked at again, untouched, and its grace period
    starts only once all caches have synced."""
    daemonset = world.client.add(r.DAEMONSETS, labelled(c.daemon_name(GHOST), DRIVER_NS, GHOST))
    world.caches.child_informers[r.DAEMONSETS][0].feed_list(
        [daemonset]
    )  # the CD cache has not listed yet
    key = OrphanKey(GHOST)

    assert await world.reconcile(key) == Result(requeue_after=1.0)
    await world.clock.advance(SETTINGS.orphan_grace_period + 1)
    assert await world.reconcile(key) == Result(requeue_after=1.0)
    assert world.client.calls == []

    world.fill(daemonsets=[daemonset], service_accounts=[service_account()])
    assert await world.reconcile(key) == Result(requeue_after=SETTINGS.orphan_grace_period)
    assert world.client.calls == []


async def test_the_periodic_sweep_enqueues_every_orphan_each_interval(world: World) -> None:
    """ORPHAN_SWEEP_INTERVAL: orphans no informer event names (a CD deleted while no
    controller ran) are enqueued at start and again each interval, never in between."""
    ghost_ds = world.client.add(r.DAEMONSETS, labelled(c.daemon_name(GHOST), DRIVER_NS, GHOST))
    cd, *_ = with_children(world)["cds"]
    world.fill(cds=[cd], daemonsets=[ghost_ds], service_accounts=[service_account()])
    enqueued: list[OrphanKey] = []
    sweep = asyncio.create_task(world.reconciler.sweeper.sweep_forever(enqueued.append, 60))
    try:
        await settle()
        assert enqueued == [OrphanKey(GHOST)]  # not the live CD's UID
        await world.clock.advance(59)
        assert enqueued == [OrphanKey(GHOST)]
        await world.clock.advance(1)
        assert enqueued == [OrphanKey(GHOST)] * 2
    finally:
        sweep.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sweep


async def test_a_cd_gone_from_the_cache_is_routine(world: World) -> None:
    world.fill()
    assert await world.reconcile(CDKey(NS, "gone")) == Result()
    assert world.client.calls == []


async def test_a_pruned_clique_entry_leaves_status_in_the_same_reconcile(world: World) -> None:
    """The status written after a prune must not show the entry just removed: otherwise the
    node leaves one reconcile late, and an entry re-added meanwhile never leaves at all."""
    cd = world.client.add(COMPUTE_DOMAINS, {**compute_domain(), "status": {"status": "Ready"}})
    clique_id = "rack0.0"
    ghost_entry = daemon_entry("ghost-node", "10.0.0.9", c.STATUS_NOT_READY)
    clique = world.client.add(CLIQUES, clique_of_cd(clique_id, [ghost_entry]))
    world.fill(cds=[cd], service_accounts=[service_account()], cliques=[clique])
    await world.reconcile(CDKey(NS, "cd"))  # children, status with the entry; stale from now on
    status = world.client.objects[("computedomains", NS, "cd")]["status"]
    assert [n["name"] for n in status["nodes"]] == ["ghost-node"]
    world.recorder.events.clear()

    await world.clock.advance(SETTINGS.orphan_grace_period)
    await world.reconcile(CDKey(NS, "cd"))

    assert world.client.calls == [
        ("list", "pods", f"{DRIVER_NS}/{c.CD_LABEL}={UID}"),  # the live check
        ("replace", "computedomaincliques", f"{DRIVER_NS}/{c.clique_name(UID, clique_id)}"),
        ("patch", "computedomains/status", f"{NS}/cd"),
    ]
    assert world.client.objects[("computedomains", NS, "cd")]["status"].get("nodes") is None
    assert ("Normal", "NodeLeft") in world.recorder.events


async def test_pruning_spares_an_entry_whose_daemon_pod_the_cache_has_not_seen(
    world: World,
) -> None:
    """After a cut watch the pod cache can lag the clique cache by any amount: an entry whose
    daemon pod exists in the apiserver is kept (a live daemon never writes it again), and its
    grace period starts over."""
    cd = world.client.add(COMPUTE_DOMAINS, {**compute_domain(), "status": {"status": "Ready"}})
    clique_id = "rack0.0"
    entry = daemon_entry("node-a", "10.0.0.7", c.STATUS_READY)
    clique = world.client.add(CLIQUES, clique_of_cd(clique_id, [entry]))
    pod = labelled("daemon-node-a", DRIVER_NS, **{c.CLIQUE_ID_LABEL: clique_id})
    pod["spec"] = {"nodeName": "node-a"}
    pod["status"] = {"phase": "Running", "podIP": "10.0.0.7"}
    world.client.add(r.PODS, pod)  # in the apiserver, not (yet) in the pod cache
    world.fill(cds=[cd], service_accounts=[service_account()], cliques=[clique])
    await world.reconcile(CDKey(NS, "cd"))

    await world.clock.advance(SETTINGS.orphan_grace_period)
    result = await world.reconcile(CDKey(NS, "cd"))

    assert world.client.calls == [("list", "pods", f"{DRIVER_NS}/{c.CD_LABEL}={UID}")]
    stored = world.client.objects[("computedomaincliques", DRIVER_NS, clique["metadata"]["name"])]
    assert stored["daemons"] == [entry]
    assert [
        n["name"] for n in world.client.objects[("computedomains", NS, "cd")]["status"]["nodes"]
    ] == ["node-a"]
    # Its grace period starts over: no prune (nor live check) before it has passed again.
    assert result.requeue_after is None or result.requeue_after > 0
    await world.clock.advance(SETTINGS.orphan_grace_period / 2)
    await world.reconcile(CDKey(NS, "cd"))
    assert world.client.calls == []


async def test_status_carries_the_generation_and_the_printer_column_counts(world: World) -> None:
    """observedGeneration is the generation the status was computed for; nodeCount,
    readyNodeCount and cliqueCount (kubectl get's Nodes, Ready-Nodes, Cliques) count the
    projected nodes, the Ready ones, and the cliques they span."""
    gates = {"name": c.FEATURE_GATES_ENV, "value": f"{c.GATE_CLIQUES}=true,"}
    container = {"name": c.DAEMON_CONTAINER, "env": [gates]}  # its daemons write cliques
    daemonset = labelled(DAEMON, DRIVER_NS)
    daemonset["spec"] = {"template": {"spec": {"containers": [container]}}}
    stores = with_children(world, daemonset)
    stores["cds"][0]["metadata"]["generation"] = 3
    daemons = {
        "rack0.0": [("node-a", "10.0.0.1", c.STATUS_READY), ("node-b", "10.0.0.2", "NotReady")],
        "rack1.0": [("node-c", "10.0.0.3", c.STATUS_READY)],
    }
    cliques, pods, nodes = [], [], []
    for clique_id, entries in daemons.items():
        cliques.append(
            world.client.add(
                CLIQUES, clique_of_cd(clique_id, [daemon_entry(*e, clique_id) for e in entries])
            )
        )
        for node, ip, _ in entries:
            pod = labelled(f"daemon-{node}", DRIVER_NS, **{c.CLIQUE_ID_LABEL: clique_id})
            pod["spec"] = {"nodeName": node}
            pod["status"] = {"phase": "Running", "podIP": ip}
            pods.append(pod)
            labels = {c.CD_LABEL: UID, c.GPU_CLIQUE_NODE_LABEL: clique_id}
            ready = {"conditions": [{"type": "Ready", "status": "True"}]}
            nodes.append({"metadata": {"name": node, "labels": labels}, "status": ready})
    world.fill(
        service_accounts=[service_account()], cliques=cliques, pods=pods, nodes=nodes, **stores
    )

    await world.reconcile(CDKey(NS, "cd"))

    status = world.client.objects[("computedomains", NS, "cd")]["status"]
    counts = [status[k] for k in ("nodeCount", "readyNodeCount", "cliqueCount")]
    assert (status["observedGeneration"], counts) == (3, [3, 2, 2])
    assert sorted(n["name"] for n in status["nodes"]) == ["node-a", "node-b", "node-c"]


async def test_a_status_write_on_a_stale_version_is_a_conflict_and_requeues(
    world: World,
) -> None:
    """Someone (a legacy daemon, a second controller) wrote the CD after our cache saw it: the
    status patch carries the cached resourceVersion, the apiserver answers 409, and the CD is
    requeued to be computed again from fresher data; nothing is announced meanwhile."""
    stores = with_children(world)
    world.fill(service_accounts=[service_account()], **stores)
    world.client.bump(COMPUTE_DOMAINS, "cd", NS)
    before = world.client.objects[("computedomains", NS, "cd")].get("status")

    result = await world.reconcile(CDKey(NS, "cd"))

    assert world.client.calls == [("patch", "computedomains/status", f"{NS}/cd")]
    (sent,) = world.client.bodies
    assert sent["metadata"] == {"resourceVersion": stores["cds"][0]["metadata"]["resourceVersion"]}
    assert result == Result(requeue=True)
    assert world.client.objects[("computedomains", NS, "cd")].get("status") == before
    assert world.recorder.events == []


async def test_a_prune_on_a_stale_clique_is_a_conflict_and_looks_again_soon(
    world: World,
) -> None:
    """A daemon updated its clique after our cache saw it: the prune (a full update with the
    cached resourceVersion) is refused with 409 and nothing of the daemon's write is lost; the
    CD is looked at again half a second later, from the newer clique."""
    cd = world.client.add(COMPUTE_DOMAINS, {**compute_domain(), "status": {"status": "Ready"}})
    clique_name = c.clique_name(UID, "rack0.0")
    entry = daemon_entry("gone", "10.0.0.9", c.STATUS_NOT_READY)
    clique = world.client.add(CLIQUES, clique_of_cd("rack0.0", [entry]))
    world.fill(cds=[cd], service_accounts=[service_account()], cliques=[clique])
    await world.reconcile(CDKey(NS, "cd"))
    await world.clock.advance(SETTINGS.orphan_grace_period)
    newer = world.client.bump(CLIQUES, clique_name, DRIVER_NS)

    result = await world.reconcile(CDKey(NS, "cd"))

    assert world.client.calls[:2] == [
        ("list", "pods", f"{DRIVER_NS}/{c.CD_LABEL}={UID}"),
        ("replace", "computedomaincliques", f"{DRIVER_NS}/{clique_name}"),
    ]
    assert world.client.bodies[1]["daemons"] == []  # what the prune wanted
    assert world.client.objects[("computedomaincliques", DRIVER_NS, clique_name)] == newer
    assert result.requeue_after == 0.5


async def test_one_live_pod_list_serves_every_clique_of_a_pass(world: World) -> None:
    """Two cliques with a stale entry each: the daemon pods are listed once, not per clique."""
    cd = world.client.add(COMPUTE_DOMAINS, {**compute_domain(), "status": {"status": "Ready"}})
    cliques = [
        world.client.add(
            CLIQUES,
            clique_of_cd(
                clique_id, [daemon_entry(node, "10.0.0.9", c.STATUS_NOT_READY, clique_id)]
            ),
        )
        for clique_id, node in (("rack0.0", "ghost-a"), ("rack1.0", "ghost-b"))
    ]
    world.fill(cds=[cd], service_accounts=[service_account()], cliques=cliques)
    await world.reconcile(CDKey(NS, "cd"))
    await world.clock.advance(SETTINGS.orphan_grace_period)

    await world.reconcile(CDKey(NS, "cd"))

    assert world.client.calls == [
        ("list", "pods", f"{DRIVER_NS}/{c.CD_LABEL}={UID}"),
        ("replace", "computedomaincliques", f"{DRIVER_NS}/{c.clique_name(UID, 'rack0.0')}"),
        ("replace", "computedomaincliques", f"{DRIVER_NS}/{c.clique_name(UID, 'rack1.0')}"),
        ("patch", "computedomains/status", f"{NS}/cd"),
    ]


async def test_without_image_name_new_daemons_get_the_kubelet_plugins_image() -> None:
    """IMAGE_NAME unset: the IMEX daemons run the driver image NVIDIA's kubelet plugin runs in
    the driver namespace (one release for both), not a release written into the controller."""
    unset = replace(SETTINGS, daemon=replace(SETTINGS.daemon, image=""))
    world = make_world(settings=unset)
    cd = world.client.add(COMPUTE_DOMAINS, compute_domain())
    world.fill(cds=[cd], service_accounts=[service_account()])
    upgraded = "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v0.4.1"
    plugin = {
        "metadata": {"name": "dra-driver-nvidia-gpu-kubelet-plugin", "namespace": DRIVER_NS},
        "spec": {
            "selector": {"matchLabels": {"dra-driver-nvidia-gpu-component": "kubelet-plugin"}},
            "template": {"spec": {"containers": [{"name": "compute-domains", "image": upgraded}]}},
        },
    }
    world.caches.nvidia_daemonsets.feed_list([plugin])

    await world.reconcile(CDKey(NS, "cd"))

    (daemonset,) = [
        b for b in world.client.bodies if isinstance(b, dict) and b.get("kind") == "DaemonSet"
    ]
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    assert container["image"] == upgraded
