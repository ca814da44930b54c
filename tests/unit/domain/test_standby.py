"""Issue 17: while NVIDIA's controller runs, the reconciler writes nothing (no finalizer, child,
status, clique, node label; not on deletion, not for orphans), records nothing on the CD (the
stand-by is reported once, on the CRD: test_coexistence.py), and does all of it once NVIDIA's
controller is gone. Exact API calls, as in test_reconciler.py."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from computedomain.api import constants as c
from computedomain.api.resources import CLIQUES, COMPUTE_DOMAINS
from computedomain.domain.keys import CDKey, OrphanKey
from computedomain.runtime import resources as r
from computedomain.runtime.clock import format_time
from computedomain.runtime.controller import Result
from tests.kit.world import (
    DAEMON,
    DRIVER_NS,
    GHOST,
    NS,
    UID,
    World,
    clique_of_cd,
    compute_domain,
    daemon_entry,
    labelled,
    make_world,
    service_account,
    waiting_for_workload,
    with_children,
)
from tests.unit.domain.test_reconciler import NEW_CD_CALLS

WHY = "NVIDIA's ComputeDomain controller runs beside this one (pod x/y), so this one stands by"


@dataclass
class NvidiaController:
    """What the CoexistenceMonitor says: a reason while NVIDIA's controller runs."""

    running: bool = True

    def standing_by(self) -> str:
        return WHY if self.running else ""


@pytest.fixture
def nvidia() -> NvidiaController:
    return NvidiaController()


@pytest.fixture
def world(nvidia: NvidiaController) -> World:
    return make_world(standing_by=nvidia.standing_by)


def writes(world: World) -> list[tuple[str, str, str]]:
    return [call for call in world.client.calls if call[0] not in ("get", "list")]


async def test_a_new_cd_gets_nothing_while_standing_by_and_everything_after(
    world: World, nvidia: NvidiaController
) -> None:
    cd = world.client.add(COMPUTE_DOMAINS, compute_domain())
    world.fill(cds=[cd], service_accounts=[service_account()])

    for _ in range(3):  # however often it is woken
        assert await world.reconcile(CDKey(NS, "cd")) == Result()
        assert world.client.calls == []
    assert world.recorder.events == []  # a cluster's state: said once, on the CRD

    nvidia.running = False
    assert await world.reconcile(CDKey(NS, "cd")) == waiting_for_workload()
    assert world.client.calls == NEW_CD_CALLS
    assert ("Normal", "Resumed") not in world.recorder.events

    # A second stand-by: nothing written, nothing recorded on the CD.
    nvidia.running = True
    seen = len(world.recorder.events)
    await world.reconcile(CDKey(NS, "cd"))
    await world.reconcile(CDKey(NS, "cd"))
    assert world.client.calls == []
    assert world.recorder.events[seen:] == []


async def test_a_running_cd_keeps_its_status_cliques_and_children_as_nvidia_writes_them(
    world: World, nvidia: NvidiaController
) -> None:
    """Its DaemonSet deleted, a stale clique entry to prune, a status that lags: each would be
    a write; none is while standing by."""
    stores = with_children(world)
    stores["daemonsets"] = []
    world.client.objects.pop(("daemonsets", DRIVER_NS, DAEMON))
    stale = daemon_entry("gone-node", "10.0.0.9", c.STATUS_NOT_READY)
    clique = world.client.add(CLIQUES, clique_of_cd("rack0.0", [stale]))
    world.fill(**stores, cliques=[clique], service_accounts=[service_account()])

    assert await world.reconcile(CDKey(NS, "cd")) == Result()
    assert world.client.calls == []

    nvidia.running = False
    await world.reconcile(CDKey(NS, "cd"))
    assert ("create", "daemonsets", f"{DRIVER_NS}/{DAEMON}") in world.client.calls
    assert ("patch", "computedomains/status", f"{NS}/cd") in world.client.calls


async def test_a_deleted_cd_is_left_to_nvidias_controller_then_finalized(
    world: World, nvidia: NvidiaController
) -> None:
    """Same finalizer name: removing it, or the children and node labels it guards, while
    NVIDIA's controller cleans up too would make two writers of the same deletion."""
    deleted_at = format_time(world.clock.wall())
    stores = with_children(world)
    world.client.objects[("computedomains", NS, "cd")]["metadata"]["deletionTimestamp"] = deleted_at
    stores["cds"] = [world.client.objects[("computedomains", NS, "cd")]]
    node = world.client.add(r.NODES, {"metadata": {"name": "n1", "labels": {c.CD_LABEL: UID}}})
    world.fill(**stores, nodes=[node], service_accounts=[service_account()])

    assert await world.reconcile(CDKey(NS, "cd")) == Result()
    assert world.client.calls == []
    cd = world.client.objects[("computedomains", NS, "cd")]
    assert cd["metadata"]["finalizers"] == [c.FINALIZER]

    nvidia.running = False
    await world.reconcile(CDKey(NS, "cd"))
    assert ("delete", "daemonsets", f"{DRIVER_NS}/{DAEMON}") in world.client.calls
    assert ("patch", "nodes", "n1") in world.client.calls


async def test_orphans_wait_for_the_end_of_the_stand_by(
    world: World, nvidia: NvidiaController
) -> None:
    daemonset = world.client.add(r.DAEMONSETS, labelled(c.daemon_name(GHOST), DRIVER_NS, GHOST))
    world.fill(daemonsets=[daemonset], service_accounts=[service_account()])
    key = OrphanKey(GHOST)
    await world.clock.advance(60)

    assert await world.reconcile(key) == Result()
    assert world.client.calls == []  # not even the live LIST
    assert world.recorder.events == []

    nvidia.running = False
    assert await world.reconcile(key) == Result(requeue_after=5.0)  # the grace period first
    await world.clock.advance(5)
    await world.reconcile(key)
    assert writes(world) == [
        ("delete", "daemonsets", f"{DRIVER_NS}/{c.daemon_name(GHOST)}"),
        ("patch", "daemonsets", f"{DRIVER_NS}/{c.daemon_name(GHOST)}"),
    ]
