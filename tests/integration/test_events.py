"""Events a person acts on (issue 12.1, 12.3), end to end: our controller and the fleet
simulator on the real control plane. A normal start records no Warning at all; each failure
records exactly one Warning whose note says what is wrong and what can be done.

The session fleet is shared (4 racks r00..r03 of 18 nodes): every test pins its workloads to
racks and cleans up while the controller still runs.
"""

from __future__ import annotations

from typing import Any

import pytest

from computedomain.api import constants as c
from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.app import REPORTING_CONTROLLER
from computedomain.runtime import resources as r
from computedomain.runtime.clock import parse_time
from computedomain.runtime.objects import condition
from computedomain.sim.faults import DEFAULT_FAIL_START_MESSAGE, FaultSettings
from tests.integration.e2e_harness import (
    FAST_DAEMONS,
    EndToEnd,
    cd_ready,
    pod_running,
    status_nodes,
    workload,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

Event = dict[str, Any]


def ours(events: list[Event]) -> list[Event]:
    return [e for e in events if e.get("reportingController") == REPORTING_CONTROLLER]


def warnings(events: list[Event]) -> list[Event]:
    return [e for e in ours(events) if e.get("type") == "Warning"]


def told(reason: str) -> Any:
    return lambda events: any(e.get("reason") == reason for e in warnings(events))


async def settled_events(e2e: EndToEnd, name: str) -> list[Event]:
    """The CD's Events once the controller has nothing left to reconcile now and has written
    every Event it recorded: what a person finds in `kubectl describe`. Timers set for later
    (a foreign object's recheck, a daemon's grace period) are not waited for."""
    for running in e2e.controllers.running:
        await running.wait_idle(timers=False)
    listed = await e2e.kube.list(r.EVENTS, e2e.namespace)
    return [e for e in listed["items"] if (e.get("regarding") or {}).get("name") == name]


def exactly_one(events: list[Event], reason: str) -> Event:
    """The one Warning of ``reason``, recorded once: no second Event, no series count."""
    found = [e for e in warnings(events) if e.get("reason") == reason]
    assert len(found) == 1, [(e["reason"], e["note"]) for e in warnings(events)]
    assert "series" not in found[0], found[0]["series"]
    print(f"Warning {reason}: {found[0]['note']}")
    return found[0]


async def test_a_normal_start_records_no_warning(e2e: EndToEnd) -> None:
    """As in the demo: a CD, a multi-node workload, IMEX daemons taking 0.5-3 s to start."""
    await e2e.start_controller()
    await e2e.start_simulator(FaultSettings())
    await e2e.create_cd("calm", num_nodes=3)
    await e2e.run_workload(workload("calm", 3, racks=["r01"]))
    await e2e.cd_until("calm", lambda o: cd_ready(o) and len(status_nodes(o)) == 3, "Ready")
    await e2e.workload_pods(
        "calm",
        lambda pods: len(pods) == 3 and all(pod_running(p) for p in pods.values()),
        "all Running",
    )
    await e2e.events_for(
        "calm",
        lambda es: any(e.get("reason") == "AllNodesJoined" for e in ours(es)),
        "the Normal AllNodesJoined event",
    )

    events = await settled_events(e2e, "calm")
    print("Events:", [(e["type"], e["reason"]) for e in ours(events)])
    assert [(e["reason"], e["note"]) for e in warnings(events)] == []
    reasons = {e["reason"] for e in ours(events)}
    assert {"Created", "NodeJoined", "AllNodesJoined"} <= reasons


async def test_a_daemon_never_ready_is_one_warning_after_the_grace_period(
    e2e: EndToEnd,
) -> None:
    stuck, fine = "gb200-r03-n01", "gb200-r03-n00"
    await e2e.start_controller(DAEMON_READY_GRACE_PERIOD="4s")
    await e2e.start_simulator(
        FaultSettings(daemon_delay=FAST_DAEMONS, never_ready_nodes=frozenset({stuck}))
    )
    await e2e.create_cd("stuck")
    await e2e.run_workload(workload("stuck", 2, hostnames=[stuck, fine]))
    await e2e.events_for("stuck", told("DaemonsNotReady"), "a DaemonsNotReady Warning")

    warning = exactly_one(await settled_events(e2e, "stuck"), "DaemonsNotReady")
    assert f"{stuck}: StartupProbeNotPassed" in warning["note"]
    assert fine not in warning["note"]
    assert f"logs: kubectl -n {e2e.driver_namespace} logs " in warning["note"]
    # Not before the grace period: measured from the stuck daemon pod's creation.
    pods = await e2e.kube.list(
        r.PODS, e2e.driver_namespace, field_selector=f"spec.nodeName={stuck}"
    )
    (pod,) = [p for p in pods["items"] if c.CD_LABEL in p["metadata"].get("labels", {})]
    created = parse_time(pod["metadata"]["creationTimestamp"])
    late_by = (parse_time(warning["eventTime"]) - created).total_seconds()
    assert late_by >= 4 - 1, late_by  # creationTimestamp has whole seconds
    cd = await e2e.kube.get(COMPUTE_DOMAINS, "stuck", e2e.namespace)
    assert condition(cd, "DaemonsReady")["reason"] == "DaemonsNotReady"
    assert condition(cd, "Ready")["reason"] == "DaemonsNotReady"


async def test_a_daemon_failing_at_start_is_told_in_its_own_words(e2e: EndToEnd) -> None:
    """#289: the daemon container's termination message reaches the condition and the Event."""
    broken = "gb200-r02-n05"
    await e2e.start_controller(DAEMON_READY_GRACE_PERIOD="2s")
    await e2e.start_simulator(
        FaultSettings(daemon_delay=FAST_DAEMONS, fail_start_nodes=frozenset({broken}))
    )
    await e2e.create_cd("broken")
    await e2e.run_workload(workload("broken", 1, hostnames=[broken]))
    await e2e.events_for("broken", told("DaemonsNotReady"), "a DaemonsNotReady Warning")

    warning = exactly_one(await settled_events(e2e, "broken"), "DaemonsNotReady")
    expected = (
        f"{broken}: not joined yet (CrashLoopBackOff (1 restart); last exit Error "
        f"(exit code 1): {DEFAULT_FAIL_START_MESSAGE})"
    )
    assert expected in warning["note"]
    assert warning["note"].endswith("-c compute-domain-daemon --previous")
    cd = await e2e.kube.get(COMPUTE_DOMAINS, "broken", e2e.namespace)
    assert expected in condition(cd, "DaemonsReady")["message"]


async def test_a_template_name_clash_is_one_warning_with_possible_advice(
    e2e: EndToEnd,
) -> None:
    await e2e.start_controller()
    await e2e.create_cd("first", rct_name="shared-channel")
    await e2e.cd_until(
        "first", lambda o: condition(o, "ChildrenReady").get("status") == "True", "children"
    )
    await e2e.create_cd("second", rct_name="shared-channel")
    await e2e.events_for("second", told("ForeignObject"), "a ForeignObject Warning")

    warning = exactly_one(await settled_events(e2e, "second"), "ForeignObject")
    assert (
        f"ResourceClaimTemplate {e2e.namespace}/shared-channel belongs to ComputeDomain "
        f"{e2e.namespace}/first" in warning["note"]
    )
    assert "delete this ComputeDomain and create it again with another" in warning["note"]
    assert "rename" not in warning["note"]
    assert warnings(await settled_events(e2e, "first")) == []


async def test_a_job_over_two_cliques_that_fits_one_is_told_to_pin(e2e: EndToEnd) -> None:
    await e2e.start_controller()
    await e2e.start_simulator(FaultSettings(daemon_delay=FAST_DAEMONS))
    await e2e.create_cd("small", num_nodes=2)
    await e2e.run_workload(workload("small", 2, racks=["r00", "r01"], spread_over_racks=True))
    await e2e.cd_until("small", lambda o: cd_ready(o) and len(status_nodes(o)) == 2, "Ready")
    await e2e.events_for("small", told("MultipleCliques"), "a MultipleCliques Warning")

    events = await settled_events(e2e, "small")
    warning = exactly_one(events, "MultipleCliques")
    assert "this job's 2 nodes fit in one (up to 18)" in warning["note"]
    assert "required pod affinity on topologyKey nvidia.com/gpu.clique" in warning["note"]
    assert [e["reason"] for e in warnings(events)] == ["MultipleCliques"]


async def test_a_job_larger_than_a_clique_is_told_what_that_means(e2e: EndToEnd) -> None:
    """24 nodes cannot fit an 18-node NVL72 rack: pinning is impossible, so the Warning says
    what spanning cliques means instead (numNodes 24, 4 of its nodes here)."""
    await e2e.start_controller()
    await e2e.start_simulator(FaultSettings(daemon_delay=FAST_DAEMONS))
    await e2e.create_cd("large", num_nodes=24)
    await e2e.run_workload(workload("large", 4, racks=["r02", "r03"], spread_over_racks=True))
    await e2e.cd_until("large", lambda o: len(status_nodes(o)) == 4, "4 nodes joined")
    await e2e.events_for("large", told("MultipleCliques"), "a MultipleCliques Warning")

    events = await settled_events(e2e, "large")
    warning = exactly_one(events, "MultipleCliques")
    assert "24 nodes cannot fit one clique (at most 18 nodes each)" in warning["note"]
    assert "works only between nodes of the same clique" in warning["note"]
    assert "pod affinity" not in warning["note"]
    # 4 of 24 nodes: not Ready, but that is progress (numNodes is informational), no Warning.
    assert [e["reason"] for e in warnings(events)] == ["MultipleCliques"]


async def test_two_domains_sharing_a_clique_are_each_told_once(e2e: EndToEnd) -> None:
    await e2e.start_controller()
    await e2e.start_simulator(FaultSettings(daemon_delay=FAST_DAEMONS))
    for name in ("left", "right"):
        await e2e.create_cd(name, rct_name=f"channel-{name}")
        await e2e.run_workload(workload(name, 2, rct_name=f"channel-{name}", racks=["r03"]))
    for name in ("left", "right"):
        await e2e.cd_until(name, cd_ready, "Ready")
        await e2e.events_for(name, told("CliqueShared"), "a CliqueShared Warning")
    for name, other in (("left", "right"), ("right", "left")):
        events = await settled_events(e2e, name)
        warning = exactly_one(events, "CliqueShared")
        assert f"{e2e.namespace}/{other}" in warning["note"]
        assert "give it a clique of its own" in warning["note"]
        assert [e["reason"] for e in warnings(events)] == ["CliqueShared"]


async def test_a_workload_pod_that_cannot_schedule_is_named_in_ready_and_one_warning(
    e2e: EndToEnd,
) -> None:
    """Issue 29.6: the CD's only workload pod asks for a node no one has, so no daemon ever
    joins. Past the grace period the controller reads the pod and says so in Ready, with the
    scheduler's words, and in one Warning (the alert ComputeDomainWorkloadNotStarting's signal)."""
    grace = 3.0
    await e2e.start_controller(
        WORKLOAD_START_GRACE_PERIOD=f"{grace:g}s", WORKLOAD_POD_CHECK_INTERVAL="1s"
    )
    cd = await e2e.create_cd("nowhere")
    await e2e.run_workload(workload("nowhere", 1, hostnames=["gb200-no-such-node"]))
    (pod,) = (
        await e2e.workload_pods(
            "nowhere",
            lambda pods: any(
                condition(p, "PodScheduled").get("status") == "False" for p in pods.values()
            ),
            "unschedulable",
        )
    ).values()
    name = pod["metadata"]["name"]

    def names_the_pod(obj: dict[str, Any] | None) -> bool:
        ready = condition(obj, "Ready")
        return ready.get("reason") == "WorkloadPodsNotStarting" and f"pod {name}: " in str(
            ready.get("message")
        )

    # Within the grace period and a few check intervals of the pod's creation.
    found = await e2e.cd_until("nowhere", names_the_pod, "Ready names the pod", within=grace + 20)
    ready = condition(found, "Ready")
    print(f"Ready: {ready['reason']}: {ready['message']}")
    assert ready["status"] == "False"
    assert (
        f"ResourceClaimTemplate {cd['spec']['channel']['resourceClaimTemplate']['name']}"
        in (ready["message"])
    )
    assert f"pod {name}: Unschedulable: " in ready["message"]
    created = parse_time(pod["metadata"]["creationTimestamp"])

    await e2e.events_for("nowhere", told("WorkloadPodsNotStarting"), "its Warning")
    warning = exactly_one(await settled_events(e2e, "nowhere"), "WorkloadPodsNotStarting")
    assert f"pod {name}: Unschedulable: " in warning["note"]
    late_by = (parse_time(warning["eventTime"]) - created).total_seconds()
    assert late_by >= grace - 1, late_by  # not before the grace period (whole seconds)
