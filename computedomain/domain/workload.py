"""Why a ComputeDomain's workload pods do not start, from the pods themselves (pure).

A CD waits for its workload (``WaitingForWorkload``) until a workload pod using its channel
ResourceClaimTemplate is placed and the kubelet plugin prepares the claim: that labels the
pod's node and brings up the node's IMEX daemon. A workload pod that never gets that far keeps
the CD waiting forever, and the controller otherwise never looks at workload pods. So, for a CD
that has waited past its grace period, the pods of its namespace that are ``Pending`` (one LIST,
``workload_check``) are read here: those using the CD's template and Pending for longer than the
grace period, each with why it has not started, in its own words:

- not scheduled: the scheduler's ``PodScheduled`` condition (reason and message, e.g.
  ``Unschedulable: 0/4 nodes are available: ...``, or ``SchedulingGated``);
- a container waiting with an error: image pull (``ErrImagePull``, ``ImagePullBackOff``,
  ``InvalidImageName``) or container creation (``CreateContainerConfigError``, ...), with the
  kubelet's message;
- scheduled but stuck in ``ContainerCreating``: the kubelet has not prepared the pod's
  ResourceClaims or created its sandbox (``PodReadyToStartContainers`` False). The kubelet
  writes a DRA prepare error only to an Event on the pod (``FailedPrepareDynamicResources``),
  not to the pod object, so the words here point there.

By the kubelet's order (claims are prepared before images are pulled) a workload pod usually
reaches an image pull only once its node's daemon exists; a pull error is reported all the same
when it is what the pod says.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from computedomain.domain.projection import shorten
from computedomain.runtime import objects
from computedomain.runtime.clock import parse_time

# Container waiting reasons that only mean "not there yet", not an error.
_STARTING = frozenset({"ContainerCreating", "PodInitializing"})


@dataclass(frozen=True)
class WorkloadPodProblem:
    """One workload pod that has not started: its name and why, in its own words."""

    pod: str
    words: str


@dataclass(frozen=True)
class WorkloadScan:
    """What one look at a namespace's Pending pods found for one CD."""

    # Pods of the template Pending past the grace period, by name.
    problems: tuple[WorkloadPodProblem, ...] = ()
    # Seconds until a Pending pod of the template, younger than the grace period, outlives it
    # (None: there is none): the next look is worth taking then.
    due: float | None = None


def claim_templates(pod: Mapping[str, Any]) -> set[str]:
    """The ResourceClaimTemplates a pod's ``spec.resourceClaims`` name (v1; the
    ``source`` form of Kubernetes 1.30 and earlier too)."""
    names = set()
    for claim in (pod.get("spec") or {}).get("resourceClaims") or []:
        if not isinstance(claim, Mapping):
            continue
        source = claim.get("source")
        name = claim.get("resourceClaimTemplateName") or (
            source.get("resourceClaimTemplateName") if isinstance(source, Mapping) else None
        )
        if isinstance(name, str) and name:
            names.add(name)
    return names


def holds_its_claims(pod: Mapping[str, Any]) -> bool:
    """Whether a pod runs with the ResourceClaims it was given (allocated and reserved for it
    on its node), so may be using IMEX now:

    - ``Running``, also while being deleted (``deletionTimestamp`` set) until its containers
      have stopped: the drain a deletion must not cut IMEX under;
    - ``Pending`` on its node with a container running: an init container (one that names the
      channel, or a sidecar) runs while the pod is still Pending, after the kubelet prepared
      its claims.

    Not a pod Pending with nothing started (it uses no IMEX yet, and one that never starts
    must not hold a deletion), nor one ``Succeeded`` or ``Failed`` (its containers have
    stopped, although its claims stay reserved for it until it is gone)."""
    if not (pod.get("spec") or {}).get("nodeName"):
        return False
    status = pod.get("status") or {}
    phase = status.get("phase")
    if phase == "Running":
        return True
    if phase != "Pending":
        return False
    return any(
        "running" in (container.get("state") or {})
        for key in ("initContainerStatuses", "containerStatuses")
        for container in status.get(key) or []
    )


def pods_holding(pods: Iterable[Mapping[str, Any]], template: str) -> list[str]:
    """Names of the pods that use ``template`` (a CD's channel) and still hold their claims."""
    return sorted(
        objects.name(pod) or "?"
        for pod in pods
        if template in claim_templates(pod) and holds_its_claims(pod)
    )


def _waiting_error(pod: Mapping[str, Any]) -> str | None:
    """``<reason> (container <name>): <message>`` of the first container (init containers
    first) waiting for a reason other than starting, e.g. an image pull back-off."""
    status = pod.get("status") or {}
    for key in ("initContainerStatuses", "containerStatuses"):
        for container in status.get(key) or []:
            waiting = (container.get("state") or {}).get("waiting") or {}
            reason = waiting.get("reason")
            if not reason or reason in _STARTING:
                continue
            text = f"{reason} (container {container.get('name') or '?'})"
            message = waiting.get("message")
            return f"{text}: {shorten(message)}" if message else text
    return None


def not_started_words(pod: Mapping[str, Any]) -> str:
    """Why a Pending pod has not started, in its own words (see the module's docstring)."""
    node = (pod.get("spec") or {}).get("nodeName")
    if not node:
        scheduled = objects.condition(pod, "PodScheduled")
        if scheduled.get("status") == "False":
            reason = scheduled.get("reason") or "Unschedulable"
            message = scheduled.get("message")
            return f"{reason}: {shorten(message)}" if message else str(reason)
        return "not scheduled, and no scheduler has said why (is its scheduler running?)"
    error = _waiting_error(pod)
    if error is not None:
        return f"{error} on node {node}"
    ready_to_start = objects.condition(pod, "PodReadyToStartContainers").get("status")
    sandbox = " (PodReadyToStartContainers False)" if ready_to_start == "False" else ""
    return (
        f"ContainerCreating on node {node}{sandbox}: the kubelet has not prepared its "
        "ResourceClaims or created its sandbox; its Events say why (kubectl describe pod; a "
        "DRA prepare error is FailedPrepareDynamicResources)"
    )


def _pending_since(pod: Mapping[str, Any]) -> datetime | None:
    created = objects.meta(pod).get("creationTimestamp")
    if not isinstance(created, str) or not created:
        return None
    try:
        return parse_time(created)
    except ValueError:
        return None


def scan_workload_pods(
    pods: Iterable[Mapping[str, Any]], template: str, now: datetime, grace: float
) -> WorkloadScan:
    """The pods among ``pods`` that use ``template``, are Pending and not being deleted, and
    were created more than ``grace`` seconds before ``now``, each with its words (sorted by
    name); and when the next of the younger ones outlives the grace period."""
    problems: list[WorkloadPodProblem] = []
    due: float | None = None
    for pod in pods:
        if template not in claim_templates(pod):
            continue
        if (pod.get("status") or {}).get("phase", "Pending") != "Pending":
            continue
        if objects.meta(pod).get("deletionTimestamp"):
            continue
        since = _pending_since(pod)
        left = grace - (now - since).total_seconds() if since is not None else 0.0
        if left > 0:
            due = left if due is None else min(due, left)
            continue
        problems.append(WorkloadPodProblem(objects.name(pod), not_started_words(pod)))
    return WorkloadScan(tuple(sorted(problems, key=lambda p: p.pod)), due)
