"""Which workload pods keep a CD waiting, and why, in their own words (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from computedomain.domain.workload import (
    WorkloadPodProblem,
    claim_templates,
    holds_its_claims,
    not_started_words,
    pods_holding,
    scan_workload_pods,
)
from computedomain.runtime.clock import format_time

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
GRACE = 300.0
UNSCHEDULABLE = (
    "0/4 nodes are available: 4 node(s) didn't match Pod's node affinity/selector. "
    "preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling."
)


def pod(
    name: str = "job-0",
    template: str = "channel",
    age: float = 600.0,
    phase: str = "Pending",
    node: str | None = None,
    conditions: list[dict[str, Any]] | None = None,
    containers: list[dict[str, Any]] | None = None,
    init_containers: list[dict[str, Any]] | None = None,
    **meta: Any,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "resourceClaims": [{"name": "imex", "resourceClaimTemplateName": template}],
        "containers": [{"name": "worker", "image": "job:1"}],
    }
    if node:
        spec["nodeName"] = node
    status: dict[str, Any] = {"phase": phase, "conditions": conditions or []}
    if containers is not None:
        status["containerStatuses"] = containers
    if init_containers is not None:
        status["initContainerStatuses"] = init_containers
    created = format_time(NOW - timedelta(seconds=age))
    return {
        "metadata": {"name": name, "namespace": "team", "creationTimestamp": created, **meta},
        "spec": spec,
        "status": status,
    }


def unschedulable(**kw: Any) -> dict[str, Any]:
    scheduled = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": UNSCHEDULABLE,
    }
    return pod(conditions=[scheduled], **kw)


def waiting(container: str, reason: str, message: str | None = None) -> dict[str, Any]:
    state: dict[str, Any] = {"reason": reason}
    if message:
        state["message"] = message
    return {"name": container, "state": {"waiting": state}, "ready": False, "restartCount": 0}


def test_a_pod_uses_the_templates_its_resource_claims_name() -> None:
    assert claim_templates(pod(template="channel")) == {"channel"}
    old_form = {
        "spec": {"resourceClaims": [{"name": "x", "source": {"resourceClaimTemplateName": "t"}}]}
    }
    assert claim_templates(old_form) == {"t"}
    named_claim = {"spec": {"resourceClaims": [{"name": "x", "resourceClaimName": "shared"}]}}
    assert claim_templates(named_claim) == set()
    assert claim_templates({"spec": {}}) == set()


def test_an_unschedulable_pod_says_the_schedulers_words() -> None:
    assert not_started_words(unschedulable()) == f"Unschedulable: {UNSCHEDULABLE}"


def test_a_gated_pod_and_a_pod_no_scheduler_looked_at() -> None:
    gated = pod(
        conditions=[{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]
    )
    assert not_started_words(gated) == "SchedulingGated"
    assert not_started_words(pod()) == (
        "not scheduled, and no scheduler has said why (is its scheduler running?)"
    )


def test_an_image_pull_back_off_names_the_container_and_the_node() -> None:
    message = 'Back-off pulling image "registry.example/job:1": ErrImagePull: not found'
    stuck = pod(
        node="gb200-r01-n03",
        containers=[waiting("worker", "ImagePullBackOff", message)],
        init_containers=[waiting("setup", "ErrImagePull", "rpc error: not found")],
    )
    # Init containers run first: theirs is the error that holds the pod.
    assert not_started_words(stuck) == (
        "ErrImagePull (container setup): rpc error: not found on node gb200-r01-n03"
    )
    stuck["status"]["initContainerStatuses"] = []
    assert not_started_words(stuck) == (
        f"ImagePullBackOff (container worker): {message} on node gb200-r01-n03"
    )


def test_container_creating_points_at_the_kubelets_events() -> None:
    """A DRA prepare error is an Event on the pod, not in the pod: the words say where."""
    stuck = pod(
        node="gb200-r01-n03",
        containers=[waiting("worker", "ContainerCreating")],
        conditions=[{"type": "PodReadyToStartContainers", "status": "False"}],
    )
    words = not_started_words(stuck)
    assert words.startswith(
        "ContainerCreating on node gb200-r01-n03 (PodReadyToStartContainers False): the kubelet "
        "has not prepared its ResourceClaims or created its sandbox"
    )
    assert "FailedPrepareDynamicResources" in words
    # An older kubelet without the condition: the same words without it.
    stuck["status"]["conditions"] = []
    assert not_started_words(stuck).startswith("ContainerCreating on node gb200-r01-n03: ")


def test_long_messages_are_cut() -> None:
    long = pod(
        conditions=[
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "x" * 500,
            }
        ]
    )
    assert len(not_started_words(long)) == len("Unschedulable: ") + 200


def test_the_scan_keeps_the_templates_pending_pods_past_the_grace_period() -> None:
    pods = [
        unschedulable(name="job-1"),
        unschedulable(name="job-0"),
        unschedulable(name="other", template="another-channel"),
        unschedulable(name="running", phase="Running"),
        unschedulable(name="going", deletionTimestamp=format_time(NOW)),
        unschedulable(name="young", age=GRACE - 40),
    ]
    scan = scan_workload_pods(pods, "channel", NOW, GRACE)
    words = f"Unschedulable: {UNSCHEDULABLE}"
    assert scan.problems == (WorkloadPodProblem("job-0", words), WorkloadPodProblem("job-1", words))
    # The young one outlives the grace period in 40 s: the next look is worth taking then.
    assert scan.due == pytest.approx(40)


def test_a_scan_of_young_pods_only_finds_nothing_yet() -> None:
    scan = scan_workload_pods(
        [unschedulable(age=10), unschedulable(age=100)], "channel", NOW, GRACE
    )
    assert scan.problems == ()
    assert scan.due == pytest.approx(GRACE - 100)
    empty = scan_workload_pods([], "channel", NOW, GRACE)
    assert (empty.problems, empty.due) == ((), None)


def running(container: str) -> dict[str, Any]:
    return {"name": container, "state": {"running": {"startedAt": "2026-03-01T11:59:00Z"}}}


@pytest.mark.parametrize(
    ("case", "workload_pod", "holds"),
    [
        ("running", pod(phase="Running", node="n1"), True),
        (
            "terminating, containers not stopped yet",
            pod(phase="Running", node="n1", deletionTimestamp=format_time(NOW)),
            True,
        ),
        (
            "pending, an init container running",
            pod(node="n1", init_containers=[running("setup")]),
            True,
        ),
        ("pending, a container already running", pod(node="n1", containers=[running("w")]), True),
        ("pending on its node, nothing started", pod(node="n1", containers=[]), False),
        (
            "pending, being deleted before anything started",
            pod(node="n1", deletionTimestamp=format_time(NOW)),
            False,
        ),
        ("never scheduled", pod(), False),
        ("succeeded (its claim still reserved)", pod(phase="Succeeded", node="n1"), False),
        ("failed, being deleted", pod(phase="Failed", node="n1", deletionTimestamp="x"), False),
    ],
)
def test_which_pods_still_hold_their_claims(
    case: str, workload_pod: dict[str, Any], holds: bool
) -> None:
    assert holds_its_claims(workload_pod) is holds, case
    assert pods_holding([workload_pod], "channel") == (["job-0"] if holds else [])
    assert pods_holding([workload_pod], "other") == []
