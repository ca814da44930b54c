"""Swap hazards: an installed CRD without our status fields, NVIDIA's controller beside ours."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from computedomain.domain.coexistence import (
    CoexistenceMonitor,
    concurrent_controller_message,
    crd_outdated_message,
    missing_status_fields,
    running_nvidia_controllers,
)

ROOT = Path(__file__).resolve().parents[3]
OUR_CRD = yaml.safe_load((ROOT / "crds/resource.nvidia.com_computedomains.yaml").read_text())
OURS_ONLY = ("conditions", "observedGeneration", "nodeCount", "readyNodeCount", "cliqueCount")


def nvidia_crd() -> dict[str, Any]:
    """Our CRD with the status schema cut back to NVIDIA's two fields."""
    crd = copy.deepcopy(OUR_CRD)
    for version in crd["spec"]["versions"]:
        status = version["schema"]["openAPIV3Schema"]["properties"]["status"]
        status["properties"] = {k: status["properties"][k] for k in ("status", "nodes")}
    return crd


def test_our_crd_misses_nothing() -> None:
    assert missing_status_fields(OUR_CRD) == ()


def test_nvidias_crd_misses_our_status_fields() -> None:
    assert missing_status_fields(nvidia_crd()) == OURS_ONLY


def test_absent_crd_or_preserved_status_reports_nothing() -> None:
    assert missing_status_fields(None) == ()
    crd = nvidia_crd()
    status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    status["x-kubernetes-preserve-unknown-fields"] = True
    assert missing_status_fields(crd) == ()


def test_outdated_message_names_fields_and_the_fix_on_one_line() -> None:
    message = crd_outdated_message(("conditions", "nodeCount"))
    assert "conditions, nodeCount" in message
    assert "kubectl apply --server-side --force-conflicts -f crds/" in message
    assert "\n" not in message


def pod(
    name: str,
    *,
    phase: str = "Running",
    labels: dict[str, str] | None = None,
    deleting: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "nvidia-dra-driver-gpu",
        "uid": f"uid-{name}",
        "labels": {"nvidia-dra-driver-gpu-component": "controller"} if labels is None else labels,
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-12-03T00:00:00Z"
    return {"metadata": meta, "status": {"phase": phase}}


def test_only_running_nvidia_controller_pods_count() -> None:
    pods = [
        pod("b"),
        pod("a"),
        pod("pending", phase="Pending"),
        pod("going", deleting=True),
        pod("plugin", labels={"nvidia-dra-driver-gpu-component": "kubelet-plugin"}),
        pod(
            "ours",
            labels={
                "nvidia-dra-driver-gpu-component": "controller",
                "app.kubernetes.io/name": "computedomain-controller",
            },
        ),
    ]
    assert [p["metadata"]["name"] for p in running_nvidia_controllers(pods)] == ["a", "b"]


def test_concurrent_message_says_what_to_do() -> None:
    message = concurrent_controller_message(pod("x"))
    assert "nvidia-dra-driver-gpu/x" in message
    assert "scale deployment dra-driver-nvidia-gpu-controller --replicas=0" in message
    assert "controller.replicas=0" in message


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def record(self, regarding: Any, type: str, reason: str, action: str, note: str) -> bool:
        self.events.append((regarding["metadata"]["name"], type, reason))
        return True


class Metrics:
    def __init__(self) -> None:
        self.missing = -1
        self.concurrent = -1

    def set_crd_missing_status_fields(self, count: int) -> None:
        self.missing = count

    def set_concurrent_controllers(self, count: int) -> None:
        self.concurrent = count


@pytest.fixture
def monitor_parts() -> tuple[CoexistenceMonitor, Recorder, Metrics, list[int]]:
    recorder, metrics, requeues = Recorder(), Metrics(), []
    monitor = CoexistenceMonitor(
        recorder,  # type: ignore[arg-type]
        metrics,
        requeue_all=lambda: requeues.append(1),
    )
    return monitor, recorder, metrics, requeues


def test_monitor_events_only_while_leading_once_per_pod(
    monitor_parts: tuple[CoexistenceMonitor, Recorder, Metrics, list[int]],
) -> None:
    monitor, recorder, metrics, _ = monitor_parts
    assert (metrics.missing, metrics.concurrent) == (0, 0)
    monitor.controller_pods_changed([pod("a")])
    assert metrics.concurrent == 1
    assert recorder.events == []  # a standby writes nothing
    monitor.set_leading(True)
    monitor.controller_pods_changed([pod("a")])
    monitor.controller_pods_changed([pod("a"), pod("b")])
    assert recorder.events == [
        ("a", "Warning", "ConcurrentController"),
        ("b", "Warning", "ConcurrentController"),
    ]
    monitor.controller_pods_changed([])
    assert metrics.concurrent == 0


def test_monitor_requeues_when_the_crd_changes(
    monitor_parts: tuple[CoexistenceMonitor, Recorder, Metrics, list[int]],
) -> None:
    monitor, _, metrics, requeues = monitor_parts
    monitor.crd_changed(OUR_CRD)
    assert requeues == []  # nothing changed from the assumed full schema
    monitor.crd_changed(nvidia_crd())
    assert (monitor.missing, metrics.missing, len(requeues)) == (OURS_ONLY, 5, 1)
    monitor.crd_changed(OUR_CRD)
    assert (monitor.missing, metrics.missing, len(requeues)) == ((), 0, 2)
