"""hostManaged IMEX (contract §18) through the reconciler, with the exact API calls: per CD the
finalizer, the workload RCT (allocationMode Single) and status, nothing else; on deletion the
workload RCT, its finalizer, then the CD's. Children driverManaged left behind are reported,
never deleted while the CD lives, and go with the CD."""

from __future__ import annotations

import dataclasses

import pytest

from computedomain.api import constants as c
from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.domain.keys import CDKey
from computedomain.runtime import resources as r
from computedomain.runtime.clock import format_time
from computedomain.runtime.controller import Result
from tests.kit.world import (
    DAEMON,
    DRIVER_NS,
    NS,
    SETTINGS,
    UID,
    Obj,
    World,
    compute_domain,
    labelled,
    make_world,
)

HOST_SETTINGS = dataclasses.replace(SETTINGS, imex_mode=c.IMEX_MODE_HOST)
KEY = CDKey(NS, "cd")


@pytest.fixture
def world() -> World:
    return make_world(HOST_SETTINGS)


def all_mode_cd(**meta: object) -> Obj:
    cd = compute_domain(**meta)
    cd["spec"]["channel"]["allocationMode"] = c.ALLOCATION_ALL
    return cd


def workload_rct() -> Obj:
    return labelled("channel", NS, **{c.TARGET_LABEL: c.TARGET_WORKLOAD})


def driver_leftovers() -> tuple[Obj, Obj, Obj]:
    rct = labelled(DAEMON, DRIVER_NS, **{c.TARGET_LABEL: c.TARGET_DAEMON})
    return rct, labelled(DAEMON, DRIVER_NS), labelled(f"{DAEMON}-abcde", DRIVER_NS)


async def test_new_cd_gets_finalizer_workload_template_and_status_only(world: World) -> None:
    cd = world.client.add(COMPUTE_DOMAINS, all_mode_cd())
    world.fill(cds=[cd])  # no daemon ServiceAccount either: nothing here needs it

    assert await world.reconcile(KEY) == Result()

    assert world.client.calls == [
        ("patch", "computedomains", f"{NS}/cd"),  # the finalizer, before the child
        ("create", "resourceclaimtemplates", f"{NS}/channel"),
        ("patch", "computedomains/status", f"{NS}/cd"),
    ]
    rct = world.client.objects[("resourceclaimtemplates", NS, "channel")]
    params = rct["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]
    assert params["allocationMode"] == c.ALLOCATION_SINGLE  # the CD asked for All
    status = world.client.objects[("computedomains", NS, "cd")]["status"]
    assert status["status"] == c.STATUS_READY
    assert {x["type"]: (x["status"], x["reason"]) for x in status["conditions"]} == {
        "Ready": ("True", "HostManagedIMEX"),
        "ChildrenReady": ("True", "ChildrenExist"),
    }
    # No daemon ever joins: the printer columns' counts are absent, not a misleading 0.
    assert not {"nodes", "nodeCount", "readyNodeCount", "cliqueCount"} & status.keys()
    # A new CD's first verdict is an Event only when it is a Warning: Created says it all.
    assert world.recorder.events == [("Normal", "Created")]

    world.recorder.events.clear()
    assert await world.reconcile(KEY) == Result()
    assert world.client.calls == []  # steady state: no write
    assert world.recorder.events == []


async def test_driver_managed_leftovers_are_reported_not_deleted(world: World) -> None:
    cd = world.client.add(COMPUTE_DOMAINS, compute_domain(finalizers=[c.FINALIZER]))
    rct, daemonset, pod = driver_leftovers()
    rct, daemonset = (
        world.client.add(r.RESOURCE_CLAIM_TEMPLATES, rct),
        world.client.add(r.DAEMONSETS, daemonset),
    )
    workload = world.client.add(r.RESOURCE_CLAIM_TEMPLATES, workload_rct())
    world.fill(cds=[cd], rcts=[rct, workload], daemonsets=[daemonset], pods=[pod])

    assert await world.reconcile(KEY) == Result()

    assert world.client.calls == [("patch", "computedomains/status", f"{NS}/cd")]
    assert world.recorder.events == [("Warning", "DriverManagedLeftovers")]
    assert f"DaemonSet {DRIVER_NS}/{DAEMON}" in world.recorder.notes[0]
    status = world.client.objects[("computedomains", NS, "cd")]["status"]
    assert status["status"] == c.STATUS_READY  # upstream's meaning: the RCT exists
    for kind in (r.DAEMONSETS, r.RESOURCE_CLAIM_TEMPLATES):
        assert (
            "deletionTimestamp"
            not in world.client.objects[(kind.plural, DRIVER_NS, DAEMON)]["metadata"]
        )


async def test_deletion_removes_the_workload_template_then_the_finalizer(world: World) -> None:
    deleted_at = format_time(world.clock.wall())
    cd = world.client.add(
        COMPUTE_DOMAINS, compute_domain(finalizers=[c.FINALIZER], deletionTimestamp=deleted_at)
    )
    rct = world.client.add(r.RESOURCE_CLAIM_TEMPLATES, workload_rct())
    world.fill(cds=[cd], rcts=[rct])

    assert await world.reconcile(KEY) == Result(requeue_after=2.0)
    assert world.client.calls == [
        ("delete", "resourceclaimtemplates", f"{NS}/channel"),
        ("patch", "resourceclaimtemplates", f"{NS}/channel"),  # its finalizer
    ]  # no Node LIST: nobody labels Nodes for a CD in this mode

    world.caches.child_informers[r.RESOURCE_CLAIM_TEMPLATES][0].feed(
        "DELETED", rct
    )  # the watch says it is gone
    assert await world.reconcile(KEY) == Result()
    assert world.client.calls == [("patch", "computedomains", f"{NS}/cd")]
    assert world.client.bodies[0] == [
        {"op": "test", "path": "/metadata/finalizers/0", "value": c.FINALIZER},
        {"op": "remove", "path": "/metadata/finalizers/0"},
    ]
    assert ("computedomains", NS, "cd") not in world.client.objects  # gone with it


async def test_deletion_takes_driver_managed_leftovers_with_it(world: World) -> None:
    deleted_at = format_time(world.clock.wall())
    cd = world.client.add(
        COMPUTE_DOMAINS, compute_domain(finalizers=[c.FINALIZER], deletionTimestamp=deleted_at)
    )
    rct, daemonset, _ = driver_leftovers()
    rct, daemonset = (
        world.client.add(r.RESOURCE_CLAIM_TEMPLATES, rct),
        world.client.add(r.DAEMONSETS, daemonset),
    )
    node = world.client.add(r.NODES, {"metadata": {"name": "n1", "labels": {c.CD_LABEL: UID}}})
    world.fill(cds=[cd], rcts=[rct], daemonsets=[daemonset], nodes=[node])

    await world.reconcile(KEY)

    assert world.client.calls == [
        ("delete", "resourceclaimtemplates", f"{DRIVER_NS}/{DAEMON}"),
        ("patch", "resourceclaimtemplates", f"{DRIVER_NS}/{DAEMON}"),
        ("delete", "daemonsets", f"{DRIVER_NS}/{DAEMON}"),
        ("patch", "daemonsets", f"{DRIVER_NS}/{DAEMON}"),
        ("list", "nodes", f"{c.CD_LABEL}={UID}"),  # the cache shows a driverManaged label
        ("patch", "nodes", "n1"),
    ]
