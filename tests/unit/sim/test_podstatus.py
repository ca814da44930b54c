from datetime import UTC, datetime, timedelta
from typing import Any

from computedomain.runtime.objects import pod_ready
from computedomain.sim.podstatus import (
    ContainerPhase,
    PodState,
    node_internal_ip,
    pod_status,
)

NOW = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)


def pod(status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
        "spec": {"containers": [{"name": "main", "image": "img"}]},
        "status": status or {"phase": "Pending"},
    }


def conditions(status: dict[str, Any]) -> dict[str, str]:
    return {cond["type"]: cond["status"] for cond in status["conditions"]}


def test_ready_pod_status_is_running_with_all_conditions_true() -> None:
    status = pod_status(pod(), PodState("10.200.0.1", "10.127.0.1", ContainerPhase.READY), NOW)
    assert status["phase"] == "Running"
    assert status["podIP"] == "10.200.0.1"
    assert status["podIPs"] == [{"ip": "10.200.0.1"}]
    assert status["hostIP"] == "10.127.0.1"
    assert set(conditions(status).values()) == {"True"}
    assert {"PodScheduled", "Initialized", "ContainersReady", "Ready"} <= set(conditions(status))
    (container,) = status["containerStatuses"]
    assert container["ready"] is True
    assert "running" in container["state"]
    assert pod_ready({"status": status})


def test_starting_pod_is_running_but_not_ready() -> None:
    status = pod_status(pod(), PodState("ip", "host", ContainerPhase.STARTING), NOW)
    assert conditions(status)["Ready"] == "False"
    assert conditions(status)["ContainersReady"] == "False"
    ready = next(cond for cond in status["conditions"] if cond["type"] == "Ready")
    assert ready["reason"] == "ContainersNotReady"
    assert status["containerStatuses"][0]["started"] is False
    assert not pod_ready({"status": status})


def test_crash_loop_reports_waiting_and_last_termination() -> None:
    status = pod_status(
        pod(), PodState("ip", "host", ContainerPhase.CRASH_LOOP, restart_count=1), NOW
    )
    (container,) = status["containerStatuses"]
    assert container["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert container["lastState"]["terminated"]["exitCode"] == 1
    assert container["restartCount"] == 1
    assert "message" not in container["lastState"]["terminated"]


def test_crash_loop_carries_the_exit_message() -> None:
    state = PodState("ip", "host", ContainerPhase.CRASH_LOOP, restart_count=1, exit_message="boom")
    (container,) = pod_status(pod(), state, NOW)["containerStatuses"]
    assert container["lastState"]["terminated"]["message"] == "boom"


def test_transition_time_moves_only_when_the_status_flips() -> None:
    first = pod_status(pod(), PodState("ip", "host", ContainerPhase.STARTING), NOW)
    later = NOW + timedelta(seconds=30)
    second = pod_status(pod(first), PodState("ip", "host", ContainerPhase.READY), later)
    by_type = {cond["type"]: cond["lastTransitionTime"] for cond in second["conditions"]}
    assert by_type["PodScheduled"] == "2025-01-01T12:00:00Z"
    assert by_type["Ready"] == "2025-01-01T12:00:30Z"
    assert second["startTime"] == "2025-01-01T12:00:00Z"


def test_node_internal_ip() -> None:
    node = {
        "status": {
            "addresses": [
                {"type": "Hostname", "address": "n"},
                {"type": "InternalIP", "address": "10.1.1.1"},
            ]
        }
    }
    assert node_internal_ip(node) == "10.1.1.1"
    assert node_internal_ip(None) == ""
