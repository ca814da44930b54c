"""When the simulator writes a pod's readiness back, as a kubelet's status manager would."""

from datetime import UTC, datetime
from typing import Any

import pytest

from computedomain.sim.podstatus import (
    ContainerPhase,
    PodState,
    ResyncBackoff,
    is_node_ready,
    needs_ready_resync,
    pod_status,
)

NOW = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)


def pod(status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
        "spec": {"containers": [{"name": "main", "image": "img"}]},
        "status": status or {"phase": "Pending"},
    }


def node(ready: str = "True", *, deleting: bool = False) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "n1"}
    if deleting:
        metadata["deletionTimestamp"] = "2025-01-01T12:00:00Z"
    return {
        "metadata": metadata,
        "status": {
            "conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": ready},
            ]
        },
    }


def running_pod(*, ready: bool) -> dict[str, Any]:
    phase = ContainerPhase.READY if ready else ContainerPhase.STARTING
    status = pod_status(pod(), PodState("10.200.0.1", "10.127.0.1", phase), NOW)
    return pod(status)


def marked_not_ready(ready_pod: dict[str, Any]) -> dict[str, Any]:
    """What kube-controller-manager's MarkPodsNotReady leaves: only Ready flips."""
    status = dict(ready_pod["status"])
    status["conditions"] = [
        {**cond, "status": "False"} if cond["type"] == "Ready" else cond
        for cond in status["conditions"]
    ]
    return {**ready_pod, "status": status}


def test_node_readiness_needs_ready_true_and_no_deletion() -> None:
    assert is_node_ready(node())
    assert not is_node_ready(node("False"))
    assert not is_node_ready(node("Unknown"))
    assert not is_node_ready(node(deleting=True))
    assert not is_node_ready({"metadata": {"name": "n1"}})
    assert not is_node_ready(None)


def test_pod_marked_not_ready_on_a_ready_node_is_written_back() -> None:
    stale = marked_not_ready(running_pod(ready=True))
    assert stale["status"]["containerStatuses"][0]["ready"] is True
    assert needs_ready_resync(stale, node(), wanted_ready=True)


def test_agreeing_readiness_is_left_alone() -> None:
    assert not needs_ready_resync(running_pod(ready=True), node(), wanted_ready=True)
    assert not needs_ready_resync(running_pod(ready=False), node(), wanted_ready=False)


@pytest.mark.parametrize(
    "unhealthy",
    [node("False"), node("Unknown"), node(deleting=True), None],
    ids=["not-ready", "unknown", "deleting", "gone"],
)
def test_readiness_is_not_reasserted_while_the_node_is_unhealthy(
    unhealthy: dict[str, Any] | None,
) -> None:
    stale = marked_not_ready(running_pod(ready=True))
    assert not needs_ready_resync(stale, unhealthy, wanted_ready=True)


def test_a_pod_held_not_ready_is_corrected_even_on_an_unhealthy_node() -> None:
    # A never-ready or crash-looping daemon shown Ready (an out-of-order write): nothing fights
    # the correction, so the node's state does not matter.
    shown_ready = running_pod(ready=True)
    assert needs_ready_resync(shown_ready, node(), wanted_ready=False)
    assert needs_ready_resync(shown_ready, node("False"), wanted_ready=False)


def test_deleting_or_unstarted_pods_are_left_alone() -> None:
    stale = marked_not_ready(running_pod(ready=True))
    stale["metadata"] = {**stale["metadata"], "deletionTimestamp": "2025-01-01T12:00:00Z"}
    assert not needs_ready_resync(stale, node(), wanted_ready=True)
    assert not needs_ready_resync(pod(), node(), wanted_ready=True)


def test_backoff_lets_the_first_write_back_go_at_once_and_spaces_out_repeats() -> None:
    backoff = ResyncBackoff(initial=1.0, maximum=4.0, quiet=60.0)
    assert backoff.delay("u1", 100.0) == 0.0
    delays = []
    now = 100.0
    for _ in range(5):
        delay = backoff.delay("u1", now)
        delays.append(delay)
        now += delay
        backoff.record("u1", now)
        now += 0.1  # another writer flips the pod right back
    assert delays == [0.0, 1.0, 2.0, 4.0, 4.0]
    assert backoff.delay("u2", now) == 0.0, "pods are spaced out independently"


def test_backoff_resets_after_a_quiet_period_and_on_forget() -> None:
    backoff = ResyncBackoff(initial=1.0, maximum=30.0, quiet=60.0)
    backoff.record("u1", 0.0)
    backoff.record("u1", 1.0)
    assert backoff.delay("u1", 2.0) == 2.0
    assert backoff.delay("u1", 61.0) == 0.0
    backoff.record("u1", 61.0)
    assert backoff.delay("u1", 62.0) == 1.0
    backoff.forget("u1")
    assert backoff.delay("u1", 62.0) == 0.0
