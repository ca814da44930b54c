"""Pod status documents as a kubelet would report them, for pods kwok leaves to the simulator."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any

from computedomain.runtime import objects
from computedomain.runtime.clock import format_time

CONDITION_TYPES = (
    "PodReadyToStartContainers",
    "Initialized",
    "Ready",
    "ContainersReady",
    "PodScheduled",
)


class ContainerPhase(Enum):
    READY = "ready"  # running, probes pass
    STARTING = "starting"  # running, startup probe not yet passed
    CRASH_LOOP = "crash-loop"  # exited with an error, waiting for the back-off


@dataclass(frozen=True)
class PodState:
    pod_ip: str
    host_ip: str
    phase: ContainerPhase
    restart_count: int = 0
    started_at: datetime | None = None
    waiting_message: str = ""
    # What the crashed container wrote to its termination log (lastState.terminated.message).
    exit_message: str = ""
    # Its last exit code (a real process's; the simulated daemon's failures exit 1).
    exit_code: int = 1


def container_id(pod_uid: str, container: str, restart_count: int) -> str:
    digest = hashlib.sha256(f"{pod_uid}/{container}/{restart_count}".encode()).hexdigest()
    return f"containerd://{digest}"


def _condition(conditions: Sequence[Mapping[str, Any]], kind: str) -> Mapping[str, Any] | None:
    for condition in conditions:
        if condition.get("type") == kind:
            return condition
    return None


def pod_status(pod: Mapping[str, Any], state: PodState, now: datetime) -> dict[str, Any]:
    """The full ``status`` for a Running pod (a merge patch replaces lists whole)."""
    spec = pod.get("spec") or {}
    metadata = objects.meta(pod)
    old_status = pod.get("status") or {}
    old_conditions: Sequence[Mapping[str, Any]] = old_status.get("conditions") or []
    stamp = format_time(now)
    started = format_time(state.started_at or now)
    ready = state.phase is ContainerPhase.READY
    names = [str(container.get("name", "")) for container in spec.get("containers") or []]
    unready = "" if ready else f"containers with unready status: [{' '.join(names)}]"

    wanted = {
        "PodReadyToStartContainers": (True, "", ""),
        "Initialized": (True, "", ""),
        "PodScheduled": (True, "", ""),
        "ContainersReady": (ready, "" if ready else "ContainersNotReady", unready),
        "Ready": (ready, "" if ready else "ContainersNotReady", unready),
    }
    conditions: list[dict[str, Any]] = []
    for kind in CONDITION_TYPES:
        value, reason, message = wanted[kind]
        status = "True" if value else "False"
        previous = _condition(old_conditions, kind)
        # lastTransitionTime moves only when the status flips, as the kubelet does it.
        transition = (
            previous.get("lastTransitionTime", stamp)
            if previous is not None and previous.get("status") == status
            else stamp
        )
        condition: dict[str, Any] = {
            "type": kind,
            "status": status,
            "lastProbeTime": None,
            "lastTransitionTime": transition,
        }
        if reason:
            condition["reason"] = reason
            condition["message"] = message
        conditions.append(condition)

    uid = str(metadata.get("uid", ""))
    statuses: list[dict[str, Any]] = []
    for container in spec.get("containers") or []:
        name = str(container.get("name", ""))
        entry: dict[str, Any] = {
            "name": name,
            "image": container.get("image", ""),
            "imageID": "",
            "restartCount": state.restart_count,
            "ready": ready,
        }
        if state.phase is ContainerPhase.CRASH_LOOP:
            entry["started"] = False
            entry["state"] = {
                "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": state.waiting_message
                    or f"back-off restarting failed container {name} in pod {metadata.get('name')}",
                }
            }
            entry["lastState"] = {
                "terminated": {
                    "exitCode": state.exit_code,
                    "reason": "Error",
                    "startedAt": started,
                    "finishedAt": stamp,
                    "containerID": container_id(uid, name, state.restart_count),
                }
            }
            if state.exit_message:
                entry["lastState"]["terminated"]["message"] = state.exit_message
        else:
            entry["started"] = ready
            entry["containerID"] = container_id(uid, name, state.restart_count)
            entry["state"] = {"running": {"startedAt": started}}
            if state.restart_count:
                entry["lastState"] = {
                    "terminated": {
                        "exitCode": state.exit_code,
                        "reason": "Error",
                        "containerID": container_id(uid, name, state.restart_count - 1),
                    }
                }
        statuses.append(entry)

    result: dict[str, Any] = {
        "phase": "Running",
        "conditions": conditions,
        "containerStatuses": statuses,
        "hostIP": state.host_ip,
        "hostIPs": [{"ip": state.host_ip}] if state.host_ip else [],
        "podIP": state.pod_ip,
        "podIPs": [{"ip": state.pod_ip}],
        "startTime": old_status.get("startTime") or stamp,
        "qosClass": old_status.get("qosClass") or "BestEffort",
    }
    return result


def node_internal_ip(node: Mapping[str, Any] | None) -> str:
    for address in ((node or {}).get("status") or {}).get("addresses") or []:
        if address.get("type") == "InternalIP":
            return str(address.get("address", ""))
    return ""


def is_node_ready(node: Mapping[str, Any] | None) -> bool:
    """Ready=True and not being deleted: only then does the node lifecycle controller leave its
    pods' Ready condition alone."""
    if node is None or objects.meta(node).get("deletionTimestamp"):
        return False
    condition = _condition((node.get("status") or {}).get("conditions") or [], "Ready")
    return condition is not None and condition.get("status") == "True"


def needs_ready_resync(
    pod: Mapping[str, Any], node: Mapping[str, Any] | None, *, wanted_ready: bool
) -> bool:
    """Whether the pod's Ready condition must be written back, as a kubelet's status manager
    would after someone else changed it (kube-controller-manager's MarkPodsNotReady).

    Readiness is only re-asserted on a Ready node: on any other, the node lifecycle controller
    marks the pod not Ready again at once, and the next node transition to Ready re-syncs.
    A pod the simulator holds not Ready is corrected wherever it runs, as nothing fights that.
    """
    if objects.meta(pod).get("deletionTimestamp"):
        return False
    if (pod.get("status") or {}).get("phase") != "Running":
        return False  # not started by us yet: the pod's own coroutine writes it first
    if objects.pod_ready(pod) == wanted_ready:
        return False
    return not wanted_ready or is_node_ready(node)


class ResyncBackoff:
    """Spaces out repeated write-backs of one pod: a loop with another writer stays bounded.

    The first re-sync after a quiet period goes at once; each further one within ``quiet``
    seconds of the last waits twice as long, from ``initial`` up to ``maximum``.
    """

    def __init__(self, initial: float = 1.0, maximum: float = 30.0, quiet: float = 60.0) -> None:
        self.initial = initial
        self.maximum = maximum
        self.quiet = quiet
        self._last: dict[str, tuple[float, float]] = {}  # uid -> (time of write, next delay)

    def delay(self, uid: str, now: float) -> float:
        last = self._last.get(uid)
        if last is None or now - last[0] >= self.quiet:
            return 0.0
        return last[1]

    def record(self, uid: str, now: float) -> None:
        last = self._last.get(uid)
        if last is None or now - last[0] >= self.quiet:
            self._last[uid] = (now, self.initial)
        else:
            self._last[uid] = (now, min(last[1] * 2, self.maximum))

    def forget(self, uid: str) -> None:
        self._last.pop(uid, None)
