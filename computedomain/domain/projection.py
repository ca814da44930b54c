"""Projection of cliques and daemon pods into ``CD.status.nodes`` (contract §9), pure.

NVIDIA's kubelet plugin falls back to ``status.nodes`` when it cannot read its clique, and
nodes without NVLink fabric (cliqueID "") only ever start their workload through it, so the
content here is a MUST. The order of entries is not (it is a list-map keyed by name).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from computedomain.api import constants as c
from computedomain.api.v1beta1 import (
    ComputeDomainClique,
    ComputeDomainDaemonInfo,
    ComputeDomainNode,
    NodeStatus,
)
from computedomain.domain.labels import cd_uid_of, cd_uids_of_clique, clique_id_of_clique
from computedomain.runtime import objects
from computedomain.runtime.clock import parse_time
from computedomain.runtime.featuregates import parse_gates

_TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True, kw_only=True)
class DaemonPod:
    """What the controller needs of an IMEX daemon pod."""

    name: str
    namespace: str
    uid: str
    cd_uid: str | None
    node_name: str | None
    pod_ip: str | None
    # The pod's cliqueID label: None while the daemon has not labelled its pod yet,
    # "" on a node without NVLink fabric.
    clique_id: str | None
    ready: bool
    phase: str
    deleting: bool
    # Why the pod is not ready, from its conditions and the daemon container's state: waiting
    # now (reason, message), and the current or last termination (reason, exit code, message).
    started: bool | None = None
    waiting_reason: str | None = None
    waiting_message: str | None = None
    terminated_reason: str | None = None
    terminated_message: str | None = None
    exit_code: int | None = None
    restart_count: int = 0
    unschedulable: bool = False
    # The scheduler's message when unschedulable, else the pod's own status.message.
    message: str | None = None
    # When the pod's Ready condition last changed (else its creation): how long a daemon has
    # been not ready, for the grace before that is worth a Warning.
    ready_changed_at: datetime | None = None

    @property
    def non_fabric(self) -> bool:
        return self.clique_id == ""

    @property
    def live(self) -> bool:
        """Still a daemon that may hold a clique or status entry."""
        return self.phase not in _TERMINAL_PHASES

    def not_ready_reason(self) -> str | None:
        """A short CamelCase reason why this daemon is not Ready; None when it is."""
        if self.ready:
            return None
        if self.deleting:
            return "Terminating"
        if self.phase in _TERMINAL_PHASES:
            return self.terminated_reason or self.phase
        if self.unschedulable:
            return "Unschedulable"
        if self.waiting_reason:
            return self.waiting_reason
        if self.node_name is None:
            return "Pending"
        if self.started is False:
            return "StartupProbeNotPassed"
        if self.started:
            return "ReadinessProbeFailing"
        return "Pending" if self.phase == "Pending" else "NotReady"

    def describe_problem(self) -> str | None:
        """Why this daemon is not Ready in the daemon container's own words (#289):
        ``<reason> (<n> restarts): <waiting message>; last exit <reason> (exit code <n>):
        <termination message>``, each message at most ``MESSAGE_LIMIT`` characters."""
        reason = self.not_ready_reason()
        if reason is None:
            return None
        text = reason
        if self.restart_count:
            text += f" ({plural(self.restart_count, 'restart')})"
        exited = self.terminated_reason is not None or self.exit_code is not None
        detail = self.waiting_message
        if detail and detail.lower().startswith("back-off ") and exited:
            # kubelet's "back-off 40s restarting failed container=..." says nothing the restart
            # count does not; the exit below is what the daemon said.
            detail = None
        detail = detail or (self.message if reason in ("Unschedulable", self.phase) else None)
        if detail:
            text += f": {shorten(detail)}"
        if exited and reason != self.terminated_reason:
            code = f" (exit code {self.exit_code})" if self.exit_code is not None else ""
            text += f"; last exit {self.terminated_reason or 'Error'}{code}"
        elif exited and self.exit_code is not None:
            text += f" (exit code {self.exit_code})"
        if exited and self.terminated_message:
            text += f": {shorten(self.terminated_message)}"
        return text


# Longest container, scheduler or pod message quoted in a condition (Events hold 1 KiB).
MESSAGE_LIMIT = 200


def plural(count: int, word: str) -> str:
    """``1 node``, ``2 nodes``."""
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def shorten(text: str, limit: int = MESSAGE_LIMIT) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _daemon_container_status(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    for status in statuses:
        if status.get("name") == c.DAEMON_CONTAINER:
            return status  # type: ignore[no-any-return]
    return statuses[0] if statuses else {}


def daemon_pod_from_dict(pod: Mapping[str, Any]) -> DaemonPod:
    """Build the view from a pod dict as the informer holds it (tolerates trimmed pods)."""
    meta = objects.meta(pod)
    labels = objects.labels(pod)
    status = pod.get("status") or {}
    container = _daemon_container_status(pod)
    state = container.get("state") or {}
    waiting = state.get("waiting") or {}
    terminated = state.get("terminated") or (container.get("lastState") or {}).get("terminated")
    terminated = terminated or {}
    scheduled = objects.condition(pod, "PodScheduled")
    unschedulable = scheduled.get("status") == "False" and scheduled.get("reason") == (
        "Unschedulable"
    )
    message = (scheduled.get("message") if unschedulable else None) or status.get("message")
    exit_code = terminated.get("exitCode")
    clique_id = labels.get(c.CLIQUE_ID_LABEL)
    started = container.get("started")
    changed = objects.condition(pod, "Ready").get("lastTransitionTime") or meta.get(
        "creationTimestamp"
    )
    return DaemonPod(
        name=str(meta.get("name") or ""),
        namespace=str(meta.get("namespace") or ""),
        uid=str(meta.get("uid") or ""),
        cd_uid=cd_uid_of(pod),
        node_name=(pod.get("spec") or {}).get("nodeName") or None,
        pod_ip=status.get("podIP") or None,
        clique_id=clique_id if isinstance(clique_id, str) else None,
        ready=objects.condition_true(pod, "Ready"),
        phase=str(status.get("phase") or "Pending"),
        deleting=meta.get("deletionTimestamp") is not None,
        started=started if isinstance(started, bool) else None,
        waiting_reason=waiting.get("reason") or None,
        waiting_message=waiting.get("message") or None,
        terminated_reason=terminated.get("reason") or None,
        terminated_message=terminated.get("message") or None,
        exit_code=exit_code if isinstance(exit_code, int) else None,
        ready_changed_at=_time_or_none(changed),
        restart_count=int(container.get("restartCount") or 0),
        unschedulable=unschedulable,
        message=message or None,
    )


def _time_or_none(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return parse_time(value)
    except ValueError:
        return None


def clique_from_dict(obj: Mapping[str, Any]) -> ComputeDomainClique:
    return ComputeDomainClique.model_validate(obj)


def _node_from_daemon(daemon: ComputeDomainDaemonInfo) -> ComputeDomainNode:
    return ComputeDomainNode(
        name=daemon.node_name,
        ip_address=daemon.ip_address,
        clique_id=daemon.clique_id,
        index=daemon.index,
        status=daemon.status,
    )


def _non_fabric_nodes(pods: Iterable[DaemonPod]) -> list[ComputeDomainNode]:
    return [
        ComputeDomainNode(
            name=pod.node_name,
            ip_address=pod.pod_ip,
            clique_id="",
            index=c.NON_FABRIC_INDEX,
            status=c.STATUS_READY if pod.ready else c.STATUS_NOT_READY,
        )
        for pod in pods
        if pod.non_fabric and pod.node_name and pod.pod_ip
    ]


def _sort_key(node: ComputeDomainNode) -> tuple[str, int, str]:
    return (node.clique_id, node.index, node.name)


def _dedup(
    candidates: Iterable[ComputeDomainNode], pods: Sequence[DaemonPod]
) -> list[ComputeDomainNode]:
    """One entry per node name, so the list-map key can never be violated.

    Conflicts only arise from stale data; the entry agreeing with that node's current daemon
    pod wins (same IP, then same fabric kind), then a deterministic order.
    """
    # A terminating pod and its replacement may share a node: the replacement decides.
    ordered = sorted(pods, key=lambda p: not p.deleting)
    pod_by_node = {p.node_name: p for p in ordered if p.node_name}
    by_name: dict[str, list[ComputeDomainNode]] = {}
    for node in candidates:
        by_name.setdefault(node.name, []).append(node)

    def rank(node: ComputeDomainNode) -> tuple[bool, bool, tuple[str, int, str]]:
        pod = pod_by_node.get(node.name)
        same_ip = pod is not None and pod.pod_ip == node.ip_address
        same_kind = pod is not None and pod.non_fabric == (node.clique_id == "")
        return (not same_ip, not same_kind, _sort_key(node))

    chosen = [min(group, key=rank) for group in by_name.values()]
    return sorted(chosen, key=_sort_key)


def project_nodes(
    cliques: Iterable[ComputeDomainClique],
    pods: Iterable[DaemonPod],
    *,
    legacy: bool,
    current: Sequence[ComputeDomainNode] = (),
) -> list[ComputeDomainNode]:
    """The ``status.nodes`` a CD should carry.

    Cliques protocol (§9.1): every clique daemon entry plus one entry per non-fabric daemon
    pod with a node and an IP. Legacy protocol (§9.2): the daemons own their fabric entries in
    ``current``; keep those whose node still runs a live fabric daemon pod of this CD with that
    IP, drop the rest, and rebuild the non-fabric entries from pods. ``cliques`` and ``pods``
    must belong to this CD.
    """
    pods = list(pods)
    if legacy:
        live_fabric = {
            (p.node_name, p.pod_ip) for p in pods if p.live and not p.non_fabric and p.pod_ip
        }
        fabric = [
            node
            for node in current
            if node.clique_id != "" and (node.name, node.ip_address) in live_fabric
        ]
    else:
        fabric = [_node_from_daemon(d) for clique in cliques for d in clique.daemons]
    return _dedup([*fabric, *_non_fabric_nodes(pods)], pods)


def lost_nodes(
    nodes: Iterable[ComputeDomainNode], node_ready: Callable[[str], bool | None]
) -> dict[str, str]:
    """Joined nodes whose Node object is gone (``node_ready`` gives None) or not Ready, with
    why. A daemon's clique entry can outlive its node until garbage collection; we must not
    trust it."""
    lost: dict[str, str] = {}
    for node in nodes:
        ready = node_ready(node.name)
        if ready is None:
            lost[node.name] = "Node deleted"
        elif not ready:
            lost[node.name] = "Node NotReady"
    return lost


def discount_lost(
    nodes: Iterable[ComputeDomainNode], lost: Mapping[str, str]
) -> list[ComputeDomainNode]:
    """The entries of lost nodes reported NotReady, the others unchanged."""
    return [
        node.model_copy(update={"status": c.STATUS_NOT_READY}) if node.name in lost else node
        for node in nodes
    ]


def global_status(nodes: Sequence[ComputeDomainNode], num_nodes: int) -> NodeStatus:
    """Upstream ``status.status`` (§9.3): Ready with zero nodes when numNodes is 0 (#767)."""
    if len(nodes) < num_nodes or any(n.status != c.STATUS_READY for n in nodes):
        return c.STATUS_NOT_READY
    return c.STATUS_READY


def stale_clique_entries(clique: ComputeDomainClique, pods: Iterable[DaemonPod]) -> list[str]:
    """Node names of clique entries that no live daemon pod backs.

    Better than upstream (which accepted a daemon pod of any CD): only a pod of this clique's
    CD on that node counts, whose clique label is this clique's ID or not yet set (a restarted
    daemon that has not labelled itself must find its old entry and keep its index).
    """
    clique_obj = clique.model_dump(by_alias=True)
    uids = set(cd_uids_of_clique(clique_obj))
    clique_id = clique_id_of_clique(clique_obj)
    backed = {
        p.node_name
        for p in pods
        if p.live
        and p.node_name
        and p.cd_uid in uids
        and (p.clique_id is None or p.clique_id == clique_id)
    }
    return sorted({d.node_name for d in clique.daemons if d.node_name not in backed})


def _daemon_env(daemonset: Mapping[str, Any]) -> Iterable[Mapping[str, Any]]:
    spec = ((daemonset.get("spec") or {}).get("template") or {}).get("spec") or {}
    for container in spec.get("containers") or []:
        if container.get("name") == c.DAEMON_CONTAINER:
            return container.get("env") or []
    return []


def uses_legacy_protocol(daemonset: Mapping[str, Any]) -> bool:
    """Whether this DS's daemons write ``CD.status.nodes`` themselves (cliques gate off).

    The gates are baked into the DS's FEATURE_GATES at creation. A DS without the cliques gate
    predates it (v25.8 and older controllers), so its daemons speak the legacy protocol.
    """
    for env in _daemon_env(daemonset):
        if env.get("name") == c.FEATURE_GATES_ENV:
            gates = parse_gates(str(env.get("value") or ""), strict=False)
            return not gates.get(c.GATE_CLIQUES, False)
    return True


def _normalised_status(status: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in status.items() if v is not None}
    if "nodes" in out:
        out["nodes"] = sorted(out["nodes"], key=lambda n: n.get("name", ""))
    if not out.get("nodes"):
        out.pop("nodes", None)
    if "conditions" in out:
        out["conditions"] = sorted(out["conditions"], key=lambda x: x.get("type", ""))
    return out


def status_equal(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """Equal CD statuses: ``nodes`` and ``conditions`` are list-maps (order does not matter),
    and a field set to None, or an empty ``nodes``, equals an absent one."""
    return _normalised_status(current) == _normalised_status(wanted)
