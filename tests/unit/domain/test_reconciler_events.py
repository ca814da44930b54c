"""Events a person acts on (issue 12.1), through the reconciler: a daemon still starting is no
Warning, one late after the grace period is exactly one (the reconciler comes back at the
deadline by itself), and a template-name clash is one Warning whose advice can be followed."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import pytest

from computedomain.api import constants as c
from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.domain.keys import CDKey
from computedomain.runtime import objects
from computedomain.runtime import resources as r
from computedomain.runtime.clock import format_time
from tests.kit.world import (
    DAEMON,
    DRIVER_NS,
    NS,
    SETTINGS,
    World,
    compute_domain,
    labelled,
    make_world,
    service_account,
    with_children,
)

GRACE = 120.0
KEY = CDKey(NS, "cd")
OTHER_UID = "5d1ad1b8-3c3a-4a8e-9d47-0b2cde000002"


@dataclass
class NoteRecorder:
    """Every recorded Event as (type, reason, note)."""

    events: list[tuple[str, str, str]] = field(default_factory=list)

    def record(
        self, regarding: Any, type: str, reason: str, action: str, note: str, **_: Any
    ) -> bool:
        self.events.append((type, reason, note))
        return True

    def warnings(self) -> list[tuple[str, str]]:
        return [(reason, note) for kind, reason, note in self.events if kind == "Warning"]


@pytest.fixture
def world() -> World:
    settings = dataclasses.replace(SETTINGS, daemon_ready_grace_period=GRACE)
    return make_world(settings, recorder=NoteRecorder())


def recorder(world: World) -> NoteRecorder:
    assert isinstance(world.recorder, NoteRecorder)
    return world.recorder


def stored_condition(world: World, kind: str) -> dict[str, Any]:
    return dict(objects.condition(world.client.objects[("computedomains", NS, "cd")], kind))


def starting_daemon_pod(since: str) -> dict[str, Any]:
    """A daemon pod whose container runs but has not passed its startup probe since ``since``."""
    pod = labelled(f"{DAEMON}-abcde", DRIVER_NS)
    pod["metadata"]["creationTimestamp"] = since
    pod["spec"] = {"nodeName": "n1"}
    pod["status"] = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": since}],
        "containerStatuses": [{"name": c.DAEMON_CONTAINER, "started": False, "ready": False}],
    }
    return pod


async def test_a_starting_daemon_is_no_warning_until_its_grace_period_ends(world: World) -> None:
    pod = starting_daemon_pod(format_time(world.clock.wall()))
    world.fill(**with_children(world), pods=[pod], service_accounts=[service_account()])

    result = await world.reconcile(KEY)

    # Normal start: no Warning, and the reconciler comes back when the grace period ends. A new
    # CD's first verdict is progress: the condition says it, no Event.
    assert recorder(world).warnings() == []
    assert recorder(world).events == []
    assert stored_condition(world, "DaemonsReady")["reason"] == "DaemonsStarting"
    assert result.requeue_after == pytest.approx(GRACE + 0.1)

    await world.clock.advance(60)
    result = await world.reconcile(KEY)
    assert world.client.calls == []  # nothing changed, nothing written
    assert recorder(world).warnings() == []
    assert result.requeue_after == pytest.approx(GRACE - 60 + 0.1)

    await world.clock.advance(result.requeue_after or 0)
    await world.reconcile(KEY)
    (warning,) = recorder(world).warnings()
    reason, note = warning
    assert reason == "DaemonsNotReady"
    assert "n1: not joined yet (StartupProbeNotPassed)" in note
    assert f"kubectl -n {DRIVER_NS} logs {DAEMON}-abcde -c {c.DAEMON_CONTAINER}" in note
    assert stored_condition(world, "DaemonsReady")["reason"] == "DaemonsNotReady"
    assert stored_condition(world, "Ready")["reason"] == "DaemonsNotReady"

    # Still late: the same problem is not told twice.
    await world.clock.advance(600)
    assert (await world.reconcile(KEY)).requeue_after is None
    assert len(recorder(world).warnings()) == 1


async def test_a_daemon_that_outlived_its_grace_period_is_late_at_once(world: World) -> None:
    """The clock is the pod's own: a controller that starts (or takes over) late says so at
    once, with no Normal start in between."""
    pod = starting_daemon_pod(format_time(world.clock.wall()))
    await world.clock.advance(GRACE + 1)
    world.fill(**with_children(world), pods=[pod], service_accounts=[service_account()])

    assert (await world.reconcile(KEY)).requeue_after is None
    assert [reason for reason, _ in recorder(world).warnings()] == ["DaemonsNotReady"]


async def test_a_template_name_clash_is_one_warning_with_advice_that_works(world: World) -> None:
    # Another CD in the namespace already uses the channel template name "channel".
    first = {"name": "first", "namespace": NS, "uid": OTHER_UID}
    other = world.client.add(COMPUTE_DOMAINS, {**compute_domain(), "metadata": first})
    taken = world.client.add(
        r.RESOURCE_CLAIM_TEMPLATES,
        labelled("channel", NS, OTHER_UID, **{c.TARGET_LABEL: c.TARGET_WORKLOAD}),
    )
    cd = world.client.add(COMPUTE_DOMAINS, compute_domain())
    world.fill(cds=[cd, other], rcts=[taken], service_accounts=[service_account()])

    result = await world.reconcile(KEY)

    (warning,) = recorder(world).warnings()
    reason, note = warning
    assert reason == "ForeignObject"
    assert f"ResourceClaimTemplate {NS}/channel belongs to ComputeDomain {NS}/first" in note
    assert "delete this ComputeDomain and create it again with another" in note
    assert "spec.channel.resourceClaimTemplate.name" in note
    assert "rename" not in note  # the spec is immutable
    assert stored_condition(world, "Ready")["reason"] == "ForeignObject"
    assert result.requeue_after == 60.0

    # Re-checked a minute later, still taken: the condition stands, no second Warning.
    await world.clock.advance(60)
    await world.reconcile(KEY)
    assert ("create", "resourceclaimtemplates", f"{NS}/channel") in world.client.calls
    assert len(recorder(world).warnings()) == 1
    assert world.client.objects[("resourceclaimtemplates", NS, "channel")] == taken  # untouched


async def test_a_foreign_template_of_nobody_may_also_be_deleted(world: World) -> None:
    unlabelled = {"metadata": {"name": "channel", "namespace": NS}}
    stray = world.client.add(r.RESOURCE_CLAIM_TEMPLATES, unlabelled)
    cd = world.client.add(COMPUTE_DOMAINS, compute_domain())
    world.fill(cds=[cd], service_accounts=[service_account()])

    await world.reconcile(KEY)

    (warning,) = recorder(world).warnings()
    assert warning[0] == "ForeignObject"
    assert f"ResourceClaimTemplate {NS}/channel exists and was not made for" in warning[1]
    assert "or delete that ResourceClaimTemplate if nothing uses it" in warning[1]
    assert world.client.objects[("resourceclaimtemplates", NS, "channel")] == stray  # untouched
