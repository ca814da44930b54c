"""A CD whose workload pods cannot start says so (issue 29.6): after the grace period one LIST of
its namespace's Pending pods, at most once per check interval, names the first stuck pod in its
own words in Ready (WorkloadPodsNotStarting) and one Warning. Counted in API calls on a
FakeClock; a CD that has daemons, or waits less than the grace period, costs no LIST."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest

from computedomain.domain.deletion import NOT_DONE
from computedomain.domain.keys import CDKey
from computedomain.domain.plan import GRACE_MARGIN_SECONDS
from computedomain.domain.workload_check import IDLE_BACKOFF_FACTOR
from computedomain.runtime import objects
from computedomain.runtime import resources as r
from computedomain.runtime.client import ApiError
from computedomain.runtime.clock import format_time
from computedomain.runtime.resources import Resource
from tests.kit.world import (
    DAEMON,
    DRIVER_NS,
    NS,
    SETTINGS,
    World,
    labelled,
    make_world,
    service_account,
    with_children,
)

KEY = CDKey(NS, "cd")
GRACE = 300.0
INTERVAL = 60.0
POD_LIST = ("list", "pods", f"{NS}/")
STATUS_PATCH = ("patch", "computedomains/status", f"{NS}/cd")
SCHEDULER_SAYS = "0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector."


@pytest.fixture
def world() -> World:
    settings = dataclasses.replace(
        SETTINGS, workload_start_grace_period=GRACE, workload_pod_check_interval=INTERVAL
    )
    world = make_world(settings)
    world.fill(**with_children(world), service_accounts=[service_account()])
    return world


def unschedulable_pod(world: World, name: str, template: str = "channel") -> dict[str, Any]:
    """A workload pod of ``template`` created now, that the scheduler cannot place."""
    return world.client.add(
        r.PODS,
        {
            "metadata": {
                "name": name,
                "namespace": NS,
                "creationTimestamp": format_time(world.clock.wall() - timedelta(seconds=1)),
            },
            "spec": {"resourceClaims": [{"name": "imex", "resourceClaimTemplateName": template}]},
            "status": {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": SCHEDULER_SAYS,
                    }
                ],
            },
        },
    )


def ready(world: World) -> dict[str, Any]:
    stored = world.client.objects[("computedomains", NS, "cd")]
    return dict(objects.condition(stored, "Ready"))


async def test_stuck_pods_are_named_after_the_grace_period_and_listed_at_most_once_an_interval(
    world: World,
) -> None:
    first = await world.reconcile(KEY)
    assert first.requeue_after == pytest.approx(GRACE + GRACE_MARGIN_SECONDS)
    assert ready(world)["reason"] == "WaitingForWorkload"
    unschedulable_pod(world, "job-1")
    unschedulable_pod(world, "job-0")
    unschedulable_pod(world, "not-ours", template="another-channel")

    # Woken within the grace period (any event): no LIST, the timer stands.
    await world.clock.advance(GRACE / 2)
    assert (await world.reconcile(KEY)).requeue_after == pytest.approx(
        GRACE / 2 + GRACE_MARGIN_SECONDS
    )
    assert POD_LIST not in world.client.calls

    await world.clock.advance(GRACE / 2 + GRACE_MARGIN_SECONDS)
    result = await world.reconcile(KEY)
    # One LIST of the namespace's Pending pods, from the watch cache.
    assert world.client.calls == [POD_LIST, STATUS_PATCH]
    listed = world.client.params[0]
    assert (listed["field_selector"], listed["resource_version"]) == ("status.phase=Pending", "0")
    said = ready(world)
    assert (said["status"], said["reason"]) == ("False", "WorkloadPodsNotStarting")
    assert said["message"] == (
        "No IMEX daemon has joined: 2 workload pods using ResourceClaimTemplate channel have "
        f"not started: pod job-0: Unschedulable: {SCHEDULER_SAYS}; and 1 more"
    )
    # One Warning, with the same words.
    assert world.recorder.events[-1] == ("Warning", "WorkloadPodsNotStarting")
    assert world.recorder.notes[-1] == said["message"]
    assert result.requeue_after == pytest.approx(INTERVAL + GRACE_MARGIN_SECONDS)

    # Woken again within the interval: no LIST, nothing new to write or say.
    events = len(world.recorder.events)
    await world.clock.advance(INTERVAL / 2)
    await world.reconcile(KEY)
    assert world.client.calls == []
    # After it, one more LIST; the same words are no write and no second Warning.
    await world.clock.advance(INTERVAL / 2 + GRACE_MARGIN_SECONDS)
    await world.reconcile(KEY)
    assert world.client.calls == [POD_LIST]
    assert len(world.recorder.events) == events


async def test_pods_gone_or_started_take_the_words_back_and_the_lists_slow_down(
    world: World,
) -> None:
    await world.reconcile(KEY)
    unschedulable_pod(world, "job-0")
    await world.clock.advance(GRACE + GRACE_MARGIN_SECONDS)
    await world.reconcile(KEY)
    assert ready(world)["reason"] == "WorkloadPodsNotStarting"

    # The job is deleted: back to waiting, and a CD with no workload pod at all is looked at
    # less and less often (twice as long each time, up to IDLE_BACKOFF_FACTOR intervals).
    await world.client.delete(r.PODS, "job-0", NS)
    waits = []
    for _ in range(5):
        await world.clock.advance(INTERVAL * IDLE_BACKOFF_FACTOR + GRACE_MARGIN_SECONDS)
        result = await world.reconcile(KEY)
        assert world.client.calls[0] == POD_LIST
        waits.append(round(result.requeue_after or 0.0))
    assert ready(world)["reason"] == "WaitingForWorkload"
    assert waits == [60, 120, 240, 480, 480]


async def test_a_cd_with_daemons_never_lists_workload_pods(world: World) -> None:
    unschedulable_pod(world, "job-0")
    daemon = labelled(f"{DAEMON}-n1", DRIVER_NS)
    daemon["spec"] = {"nodeName": "n1"}
    daemon["status"] = {"phase": "Pending"}
    world.fill(
        **with_children(world),
        pods=[world.client.add(r.PODS, daemon)],
        service_accounts=[service_account()],
    )
    for _ in range(3):
        await world.reconcile(KEY)
        assert POD_LIST not in world.client.calls
        await world.clock.advance(GRACE)
    assert ready(world)["reason"] in ("DaemonsStarting", "DaemonsNotReady")


async def test_a_failed_list_keeps_the_cd_waiting_and_tries_again(world: World) -> None:
    def forbid(verb: str, res: Resource) -> ApiError | None:
        if (verb, res.plural) == ("list", "pods"):
            return ApiError(403, "Forbidden", "pods is forbidden")
        return None

    await world.reconcile(KEY)
    unschedulable_pod(world, "job-0")
    world.client.refuse = forbid
    await world.clock.advance(GRACE + GRACE_MARGIN_SECONDS)
    result = await world.reconcile(KEY)
    assert world.client.calls == [POD_LIST]
    assert ready(world)["reason"] == "WaitingForWorkload"
    assert result.requeue_after == pytest.approx(INTERVAL + GRACE_MARGIN_SECONDS)

    world.client.refuse = None
    await world.clock.advance(INTERVAL + GRACE_MARGIN_SECONDS)
    await world.reconcile(KEY)
    assert ready(world)["reason"] == "WorkloadPodsNotStarting"


async def test_deletion_forgets_the_workload(world: World) -> None:
    await world.reconcile(KEY)
    unschedulable_pod(world, "job-0")
    await world.clock.advance(GRACE + GRACE_MARGIN_SECONDS)
    await world.reconcile(KEY)
    assert ready(world)["reason"] == "WorkloadPodsNotStarting"

    stored = world.client.objects[("computedomains", NS, "cd")]
    stored["metadata"]["deletionTimestamp"] = format_time(world.clock.wall())
    world.fill(cds=[stored], service_accounts=[service_account()])
    await world.clock.advance(INTERVAL * 2)
    await world.reconcile(KEY)
    # Its one LIST of pods looks for workload pods not done (none holds its claims: job-0 was
    # never placed).
    pod_lists = [
        params["field_selector"]
        for call, params in zip(world.client.calls, world.client.params, strict=True)
        if call == POD_LIST
    ]
    assert pod_lists == [NOT_DONE]
    got = world.client.objects.get(("computedomains", NS, "cd"))
    assert got is None or ready(world)["reason"] == "Deleting"
