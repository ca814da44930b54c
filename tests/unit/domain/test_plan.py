"""The live path's plans as whole values, sample-controller style: each test states the world
(pre-filled caches), observes the CD once and compares the entire ``Plan`` (finalizer,
children) or ``StatusPlan`` (patch, Events, requeue, memory) with the one expected; what the
executors then write is asserted call by call in ``test_reconciler*``."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from computedomain.api import constants as c
from computedomain.api.resources import CLIQUES, COMPUTE_DOMAINS
from computedomain.api.v1beta1 import Condition
from computedomain.domain.childkinds import CHILD, ChildKind
from computedomain.domain.conditions import ChildState, ChildStatus
from computedomain.domain.keys import CDKey
from computedomain.domain.plan import (
    FOREIGN_RECHECK_SECONDS,
    GRACE_MARGIN_SECONDS,
    SPEC_MISSING,
    Create,
    Plan,
    StatusPlan,
    plan_live,
)
from computedomain.domain.snapshot import DomainSnapshot
from computedomain.domain.transitions import EventSpec
from computedomain.runtime import resources as r
from computedomain.runtime.clock import format_time
from tests.kit.world import (
    DAEMON,
    DRIVER_NS,
    NS,
    SETTINGS,
    UID,
    World,
    compute_domain,
    labelled,
    service_account,
    with_children,
)
from tests.unit.domain.test_reconciler_coalescing import CLIQUE_ID, clique, daemon_pod, node

KEY = CDKey(NS, "cd")
# The CD's only child at its own name in the driver namespace (no UID label: not ours).
FOREIGN_DS = (r.DAEMONSETS.plural, DRIVER_NS, DAEMON)


def creates(snapshot: DomainSnapshot, *kinds: ChildKind) -> tuple[Create, ...]:
    """The creates of ``kinds``, each with its builder's body for this CD (the bodies' bytes
    are ``test_desired``'s; here: which kinds, in which order, from which inputs)."""
    assert snapshot.inputs is not None
    return tuple(
        Create(kind, CHILD[kind].resource, CHILD[kind].build(snapshot.cd, snapshot.inputs))
        for kind in kinds
    )


def test_a_new_cd_plans_the_finalizer_then_every_child(world: World) -> None:
    cd = world.client.add(COMPUTE_DOMAINS, compute_domain())
    world.fill(cds=[cd], service_accounts=[service_account()])
    snapshot = world.observe(KEY)

    assert plan_live(snapshot, {}, world.clock.now()) == Plan(
        finalizer=[
            {
                "op": "test",
                "path": "/metadata/resourceVersion",
                "value": cd["metadata"]["resourceVersion"],
            },
            {"op": "add", "path": "/metadata/finalizers", "value": [c.FINALIZER]},
        ],
        creates=creates(
            snapshot,
            ChildKind.DAEMON_CLAIM_TEMPLATE,
            ChildKind.DAEMON_SET,
            ChildKind.WORKLOAD_CLAIM_TEMPLATE,
        ),
    )


def test_steady_state_plans_nothing(world: World) -> None:
    world.fill(**with_children(world), service_accounts=[service_account()])
    snapshot = world.observe(KEY)

    plan = plan_live(snapshot, {}, world.clock.now())

    every_child_ok = {
        kind: ChildState(ChildStatus.OK)
        for kind in (
            ChildKind.DAEMON_CLAIM_TEMPLATE,
            ChildKind.DAEMON_SET,
            ChildKind.WORKLOAD_CLAIM_TEMPLATE,
        )
    }
    assert plan == Plan(known=every_child_ok)
    assert not plan.writes
    assert snapshot.inputs is None  # nothing to build: the daemon image is not even looked up


def test_a_daemon_joining_plans_no_child_write(world: World) -> None:
    stores = with_children(world)
    pod = labelled(f"{DAEMON}-n1", DRIVER_NS)
    pod["spec"] = {"nodeName": "n1"}
    world.fill(**stores, pods=[pod], service_accounts=[service_account()])
    snapshot = world.observe(KEY)

    # Its status changes (written by ``status``, not planned yet); its children do not.
    assert [p.name for p in snapshot.pods] == [f"{DAEMON}-n1"]
    assert not plan_live(snapshot, {}, world.clock.now()).writes


def test_a_child_refused_lately_is_not_created_again_until_the_recheck(world: World) -> None:
    stores = with_children(world)
    stores["daemonsets"] = []  # a foreign DaemonSet at its name: the label-selected cache misses it
    world.fill(**stores, service_accounts=[service_account()])
    snapshot = world.observe(KEY)
    now = world.clock.now()
    refused = {FOREIGN_DS: (now - 1.0, "advice given then")}

    assert plan_live(snapshot, refused, now) == Plan(
        known={
            ChildKind.DAEMON_CLAIM_TEMPLATE: ChildState(ChildStatus.OK),
            ChildKind.DAEMON_SET: ChildState(ChildStatus.FOREIGN, "advice given then"),
            ChildKind.WORKLOAD_CLAIM_TEMPLATE: ChildState(ChildStatus.OK),
        },
        requeue_after=FOREIGN_RECHECK_SECONDS,
    )
    # The recheck is due: the create is tried again (its answer decides).
    later = now - 1.0 + FOREIGN_RECHECK_SECONDS
    assert plan_live(snapshot, refused, later).creates == creates(snapshot, ChildKind.DAEMON_SET)


def test_a_cd_without_spec_gets_the_finalizer_and_no_child(world: World) -> None:
    obj = compute_domain(finalizers=[c.FINALIZER])
    del obj["spec"]
    world.fill(cds=[world.client.add(COMPUTE_DOMAINS, obj)])

    assert plan_live(world.observe(KEY), {}, world.clock.now()) == Plan(
        known={ChildKind.SPEC: ChildState(ChildStatus.INVALID, SPEC_MISSING)}
    )


def stored_status(world: World) -> dict[str, Any]:
    return dict(world.client.objects[("computedomains", NS, "cd")]["status"])


async def a_cd_whose_status_was_written(world: World) -> None:
    """The CD, its children (its daemons speak the cliques protocol: the controller projects
    status.nodes) and Node n1; reconciled once, so its status is written and current."""
    daemonset = labelled(DAEMON, DRIVER_NS)
    env = [{"name": c.FEATURE_GATES_ENV, "value": f"{c.GATE_CLIQUES}=true"}]
    daemonset["spec"] = {
        "template": {"spec": {"containers": [{"name": c.DAEMON_CONTAINER, "env": env}]}}
    }
    world.fill(
        **with_children(world, daemonset), nodes=[node("n1")], service_accounts=[service_account()]
    )
    await world.reconcile(KEY)
    await world.clock.advance(30)  # past the coalescing window of that write


async def test_steady_state_plans_no_status_write_and_no_event(world: World) -> None:
    await a_cd_whose_status_was_written(world)
    status = stored_status(world)
    memory = world.reconciler.context.memory_of(UID).status

    assert await world.plan_status(KEY) == StatusPlan(
        # No nodes: sent as null, which the merge patch stored as no field (equal: no write).
        desired={**status, "nodes": None},
        conditions=[Condition.model_validate(x) for x in status["conditions"]],
        # Only the look at its workload pods once their grace period is over.
        requeue_after=SETTINGS.workload_start_grace_period - 30 + GRACE_MARGIN_SECONDS,
        memory=memory,
    )


async def test_a_daemon_joining_plans_one_status_patch_and_its_events(world: World) -> None:
    await a_cd_whose_status_was_written(world)
    before = stored_status(world)
    resource_version = world.caches.compute_domain(KEY)["metadata"]["resourceVersion"]  # type: ignore[index]
    memory = world.reconciler.context.memory_of(UID).status
    since = format_time(world.clock.wall())
    world.caches.daemon_pods[0].feed_list([world.client.add(r.PODS, daemon_pod("n1", True, since))])
    entries = {"n1": c.STATUS_READY}
    world.caches.cliques[0].feed_list([world.client.add(CLIQUES, clique(CLIQUE_ID, entries))])

    plan = await world.plan_status(KEY)

    joined = {
        "name": "n1",
        "ipAddress": "10.0.0.1",
        "cliqueID": CLIQUE_ID,
        "index": 0,
        "status": c.STATUS_READY,
    }
    desired = {
        **before,
        "status": c.STATUS_READY,
        "nodes": [joined],
        "conditions": [x.to_dict() for x in plan.conditions],
        "nodeCount": 1,
        "readyNodeCount": 1,
        "cliqueCount": 1,
    }
    assert [(x.type, x.status, x.reason) for x in plan.conditions] == [
        ("Ready", "True", "AllNodesJoined"),
        ("ChildrenReady", "True", "ChildrenExist"),
        ("DaemonsReady", "True", "DaemonsJoined"),
        ("SingleClique", "True", "OneClique"),
        ("ExclusiveClique", "True", "CliqueNotShared"),
    ]
    assert plan == StatusPlan(
        desired=desired,
        conditions=plan.conditions,
        patch={"metadata": {"resourceVersion": resource_version}, "status": desired},
        events=(
            EventSpec("Normal", "NodeJoined", "Join", f"Node n1 joined (clique {CLIQUE_ID})"),
            EventSpec("Normal", "AllNodesJoined", "Reconcile", "1 daemon ready in 1 clique"),
        ),
        memory=memory,  # unchanged unless the patch is written: then ``written``
        written=replace(memory, status_written_at=world.clock.now()),
    )


async def test_a_deletion_plans_its_status_patch_at_once_even_within_the_window(
    world: World,
) -> None:
    world.fill(**with_children(world), service_accounts=[service_account()])
    await world.reconcile(KEY)  # its status written just now: a live change would wait 1 s
    resource_version = world.caches.compute_domain(KEY)["metadata"]["resourceVersion"]  # type: ignore[index]
    memory = world.reconciler.context.memory_of(UID).status

    plan = await world.plan_status(KEY, deleting=True)

    assert [(x.type, x.status, x.reason) for x in plan.conditions] == [
        ("Ready", "False", "Deleting"),
        ("ChildrenReady", "False", "Deleting"),
        ("DaemonsReady", "Unknown", "NoDaemons"),
        ("SingleClique", "Unknown", "NoNodes"),
        ("ExclusiveClique", "Unknown", "NoNodes"),
    ]
    assert plan == StatusPlan(
        desired=plan.desired,
        conditions=plan.conditions,
        patch={"metadata": {"resourceVersion": resource_version}, "status": plan.desired},
        events=(
            EventSpec("Normal", "Deleting", "Reconcile", "The ComputeDomain is being deleted"),
        ),
        memory=memory,
        written=replace(memory, status_written_at=world.clock.now()),
    )
