"""The live path's plan as a whole value, sample-controller style: each test states the world
(pre-filled caches), observes the CD once and compares the entire ``Plan`` with the one
expected; what the executor then writes is asserted call by call in ``test_reconciler*``."""

from __future__ import annotations

from computedomain.api import constants as c
from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.domain.childkinds import CHILD, ChildKind
from computedomain.domain.conditions import ChildState, ChildStatus
from computedomain.domain.keys import CDKey
from computedomain.domain.plan import (
    FOREIGN_RECHECK_SECONDS,
    SPEC_MISSING,
    Create,
    Plan,
    plan_live,
)
from computedomain.domain.snapshot import DomainSnapshot
from computedomain.runtime import resources as r
from tests.kit.world import (
    DAEMON,
    DRIVER_NS,
    NS,
    World,
    compute_domain,
    labelled,
    service_account,
    with_children,
)

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
