"""``kubectl cdom describe NAME``: a ComputeDomain's whole chain on one screen and the first broken
link in it, named, with what to do. Pure: ``Chain`` holds what was listed; ``first_broken_link``
walks it in the order a domain comes up (controller → children → workload → node → daemon →
clique → Ready), so the link it names is the one to fix first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from computedomain.api import constants as c
from computedomain.api.claims import driver_configs
from computedomain.domain.childkinds import CHILDREN, ChildKind
from computedomain.domain.nvidiacontroller import (
    nvidia_deployment_of,
    running_nvidia_controllers,
    shares_lease,
)
from computedomain.runtime.objects import condition, condition_true

Obj = dict[str, Any]
# Events shown per object: the latest few say what happened last.
EVENTS_PER_OBJECT = 3


@dataclass
class Chain:
    """What the cluster holds for one ComputeDomain (see main.py for how it is listed)."""

    cd: Obj
    # Each child kind (childkinds) → the domain's children of that kind.
    children: dict[ChildKind, list[Obj]] = field(default_factory=dict)
    daemon_pods: list[Obj] = field(default_factory=list)
    cliques: list[Obj] = field(default_factory=list)
    workload_pods: list[Obj] = field(default_factory=list)
    nodes: list[Obj] = field(default_factory=list)  # nodes labelled for this domain
    # ResourceClaims of other namespaces whose channel config names this domain.
    foreign_claims: list[Obj] = field(default_factory=list)
    nvidia_controller_pods: list[Obj] = field(default_factory=list)  # running or not
    # The Lease ours leads on: one of NVIDIA's pods electing on it waits while ours leads.
    own_lease: tuple[str, str] | None = None
    events: list[Obj] = field(default_factory=list)  # of every object above
    # The last lines of the first daemon that is not Ready (its previous run's after a
    # restart), when the kubelet serves them: where a real daemon's own words are.
    daemon_log: str = ""
    # What RBAC refused to list (e.g. "nodes"): empty above, and named in one line.
    not_shown: list[str] = field(default_factory=list)

    @property
    def namespace(self) -> str:
        return str(self.cd["metadata"]["namespace"])

    @property
    def name(self) -> str:
        return str(self.cd["metadata"]["name"])

    @property
    def daemonsets(self) -> list[Obj]:
        return self.children.get(ChildKind.DAEMON_SET, [])

    @property
    def template_name(self) -> str:
        channel = (self.cd.get("spec") or {}).get("channel") or {}
        return str((channel.get("resourceClaimTemplate") or {}).get("name") or "")


@dataclass(frozen=True)
class Finding:
    link: str  # which link of the chain
    problem: str
    fix: str


def channel_domain_ids(claim: Mapping[str, Any]) -> set[str]:
    """The ComputeDomain UIDs whose channel a ResourceClaim asks for (its opaque channel configs
    for NVIDIA's driver; a daemon's claim, in the driver namespace, names its domain too)."""
    devices = ((claim.get("spec") or {}).get("devices")) or {}
    return {
        config.domain_id
        for config in driver_configs(devices)
        if config.kind == c.CHANNEL_CONFIG_KIND and config.domain_id
    }


def _claim_pod(claim: Mapping[str, Any]) -> str:
    for owner in (claim.get("metadata") or {}).get("ownerReferences") or []:
        if owner.get("kind") == "Pod":
            return str(owner.get("name"))
    return ""


def regarding(event: Mapping[str, Any]) -> tuple[str, str]:
    """(kind, name) of the object an ``events.k8s.io/v1`` Event is about."""
    about = event.get("regarding") or {}
    return str(about.get("kind", "")), str(about.get("name", ""))


def container_problem(pod: Mapping[str, Any], container: str = c.DAEMON_CONTAINER) -> str:
    """Why a pod's container is not ready, in its own words (waiting reason and message, or the
    last exit); "" when nothing is said."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    status = next(
        (s for s in statuses if s.get("name") == container), statuses[0] if statuses else {}
    )
    waiting = (status.get("state") or {}).get("waiting") or {}
    last = (status.get("lastState") or {}).get("terminated") or {}
    parts = []
    if waiting:
        parts.append(": ".join(p for p in (waiting.get("reason"), waiting.get("message")) if p))
    if last:
        words = (last.get("reason"), f"exit code {last.get('exitCode')}", last.get("message"))
        parts.append("last exit " + ", ".join(str(p) for p in words if p))
    if not parts:
        phase = (pod.get("status") or {}).get("phase") or "unknown"
        scheduled = condition(pod, "PodScheduled")
        if scheduled.get("status") == "False":
            return f"not scheduled: {scheduled.get('message') or scheduled.get('reason')}"
        if (status.get("state") or {}).get("running") is not None:
            # The daemon's probes run `compute-domain-daemon check` (nvidia-imex-ctl -q).
            return "running, but its probe has not passed (the local IMEX daemon is not READY)"
        return f"phase {phase}, not Ready"
    return "; ".join(parts)


def first_unready_daemon(chain: Chain) -> Obj | None:
    """The daemon pod of the first labelled node (in the order describe walks them) that is
    not Ready: the one whose log is worth reading."""
    daemons_by_node = {p["spec"].get("nodeName"): p for p in chain.daemon_pods}
    for node in chain.nodes:
        daemon = daemons_by_node.get(node["metadata"]["name"])
        if daemon is not None and not condition_true(daemon, "Ready"):
            return daemon
    return None


_ERROR_WORDS = ("error", "fail", "fatal", "panic")


def log_line(log: str, limit: int = 200) -> str:
    """The line of a log tail that says most: the last that speaks of an error, else the last."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    if not lines:
        return ""
    errors = [line for line in lines if any(word in line.lower() for word in _ERROR_WORDS)]
    line = (errors or lines)[-1]
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _warnings(chain: Chain, kind: str, name: str) -> list[Obj]:
    return [e for e in chain.events if e.get("type") == "Warning" and regarding(e) == (kind, name)]


def _event_text(event: Mapping[str, Any]) -> str:
    return str(event.get("note") or "")


def first_broken_link(chain: Chain) -> Finding | None:
    """The first link of the chain that is broken, or None when the domain is Ready."""
    cd, ns = chain.cd, chain.namespace
    ready = condition(cd, c.CONDITION_READY)
    if (cd["metadata"].get("deletionTimestamp")) is not None:
        return Finding(
            "ComputeDomain",
            "it is being deleted; the controller holds its finalizer until its children and node "
            "labels are gone",
            "wait; if it stays, read the controller's log and the runbook "
            "ComputeDomainStuckDeleting",
        )
    writers = [
        pod
        for pod in running_nvidia_controllers(chain.nvidia_controller_pods)
        if not shares_lease(pod, chain.own_lease)
    ]
    if writers:
        pod = writers[0]
        pod_ns, pod_name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        return Finding(
            "controller",
            f"NVIDIA's controller runs (pod {pod_ns}/{pod_name}): ours stands by and writes "
            "nothing, so the conditions shown are ours from before it started, and NVIDIA's "
            "controller manages this domain",
            f"kubectl -n {pod_ns} scale deployment {nvidia_deployment_of(pod)} --replicas=0, "
            "and controller.replicas=0 in NVIDIA's Helm values (`kubectl cdom doctor`)",
        )
    if not ready:
        return Finding(
            "controller",
            "the ComputeDomain has no conditions: no controller of ours has reconciled it (not "
            "running, not leading, standing by beside NVIDIA's, or the CRD prunes our status "
            "fields)",
            "check the controller's pods and their log; `kubectl get crd computedomains."
            "resource.nvidia.com -o yaml` must list status.conditions",
        )
    if ready.get("status") == "True":
        return _clique_finding(chain)
    children = condition(cd, c.CONDITION_CHILDREN_READY)
    if children.get("status") == "False":
        return Finding(
            "children",
            f"{children.get('reason')}: {children.get('message')}",
            "the message names the child and what to do (docs/runbooks.md, ComputeDomainNotReady)",
        )
    if chain.foreign_claims:
        claim = chain.foreign_claims[0]
        claim_ns, claim_name = claim["metadata"]["namespace"], claim["metadata"]["name"]
        owner = _claim_pod(claim)
        return Finding(
            f"workload claim {claim_ns}/{claim_name}",
            f"a claim in namespace {claim_ns}{f' (pod {owner})' if owner else ''} asks for this "
            f"domain, whose namespace is {ns}: NVIDIA's kubelet plugin refuses it, so that pod "
            "never starts",
            f"run the workload in namespace {ns} with resourceClaimTemplateName: "
            f"{chain.template_name} (a copy of the template elsewhere does not work)",
        )
    if not chain.workload_pods:
        return Finding(
            "workload",
            f"no pod uses the channel ResourceClaimTemplate {ns}/{chain.template_name}: the "
            "domain waits for its workload (nothing is wrong if the job has not started)",
            f"start the job with resourceClaimTemplateName: {chain.template_name} in "
            f"namespace {ns}",
        )
    for pod in chain.workload_pods:
        if not (pod.get("spec") or {}).get("nodeName"):
            scheduled = condition(pod, "PodScheduled")
            return Finding(
                f"workload pod {ns}/{pod['metadata']['name']}",
                f"not scheduled: {scheduled.get('message') or 'no node chosen yet'}",
                "free nodes in one clique: `kubectl cdom cliques --fits N`",
            )
    daemons_by_node = {p["spec"].get("nodeName"): p for p in chain.daemon_pods}
    for node in chain.nodes:
        node_name = node["metadata"]["name"]
        daemon = daemons_by_node.get(node_name)
        if daemon is None:
            where = chain.daemonsets[0]["metadata"]["namespace"] if chain.daemonsets else "?"
            daemonset = c.daemon_name(chain.cd["metadata"]["uid"])
            return Finding(
                f"IMEX daemon on {node_name}",
                "the node is labelled for this domain but has no daemon pod",
                f"kubectl -n {where} describe daemonset {daemonset} (its Events say why a pod "
                "was not made, e.g. a missing ServiceAccount)",
            )
        if not condition_true(daemon, "Ready"):
            pod_ns, pod_name = daemon["metadata"]["namespace"], daemon["metadata"]["name"]
            said = log_line(chain.daemon_log)
            return Finding(
                f"IMEX daemon {pod_ns}/{pod_name} on {node_name}",
                f"not Ready: {container_problem(daemon)}" + (f"; its log: {said}" if said else ""),
                f"kubectl -n {pod_ns} logs {pod_name} -c {c.DAEMON_CONTAINER} (--previous after "
                "a restart)",
            )
    entries = {
        d.get("nodeName"): d for clique in chain.cliques for d in clique.get("daemons") or []
    }
    for node in chain.nodes:
        node_name = node["metadata"]["name"]
        clique = (node["metadata"].get("labels") or {}).get(c.GPU_CLIQUE_NODE_LABEL)
        entry = entries.get(node_name)
        if clique and chain.cliques and (entry is None or entry.get("status") != c.STATUS_READY):
            state = "no entry" if entry is None else f"entry {entry.get('status')}"
            return Finding(
                f"clique {clique}",
                f"{node_name}: {state} in the domain's clique, though its daemon pod is Ready",
                "the daemon's log says why it did not write Ready; a daemon writes its entry "
                "again when it restarts",
            )
    # A pod whose claim the kubelet plugin refuses (e.g. a claim in another namespace than the
    # domain's) never gets its node labelled, so no daemon link above names it: its Events do.
    # Checked last: a pod waiting for its node's daemon has Warning Events too.
    for pod in chain.workload_pods:
        warnings = _warnings(chain, "Pod", pod["metadata"]["name"])
        if warnings and not condition_true(pod, "Ready"):
            return Finding(
                f"workload pod {ns}/{pod['metadata']['name']}",
                f"{warnings[-1].get('reason')}: {_event_text(warnings[-1])}",
                "fix what the Event says (a claim of another namespace's domain, a missing "
                "DeviceClass); `kubectl describe pod` shows every Event",
            )
    return Finding(
        "Ready",
        f"{ready.get('reason')}: {ready.get('message')}",
        "the message names what is at fault (docs/runbooks.md, ComputeDomainNotReady)",
    )


def _clique_finding(chain: Chain) -> Finding | None:
    """A Ready domain that is not one NVLink domain of its own: split over cliques, or sharing
    one with another domain."""
    for ctype in (c.CONDITION_SINGLE_CLIQUE, c.CONDITION_EXCLUSIVE_CLIQUE):
        found = condition(chain.cd, ctype)
        if found.get("status") == "False":
            return Finding(
                "cliques",
                f"{found.get('reason')}: {found.get('message')}",
                "`kubectl cdom cliques --fits N` shows where N free nodes share one clique",
            )
    return None


def render(chain: Chain, finding: Finding | None) -> str:
    cd = chain.cd
    meta = cd["metadata"]
    ready = condition(cd, c.CONDITION_READY)
    status = cd.get("status") or {}
    lines = [
        f"ComputeDomain {chain.namespace}/{chain.name}  uid {meta.get('uid')}",
        f"  Ready: {ready.get('status', '-')} ({ready.get('reason', 'no conditions')})"
        f"   status.status: {status.get('status', '-')}"
        f"   numNodes: {(cd.get('spec') or {}).get('numNodes', 0)}",
        "Children:",
    ]
    for child in CHILDREN:
        found = chain.children.get(child.kind, [])
        for obj in found:
            where = f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"
            lines.append(f"  {child.resource.kind} {where}: {child.summary(obj)}")
        if not found and child.in_mode(host_managed=True):
            # A kind every domain has, in every IMEX mode: its absence is news. (Where the
            # daemons' children live, the driver namespace, is not known here.)
            namespace, name = child.locate(cd, "?")
            lines.append(f"  {child.resource.kind} {namespace}/{name}: missing")
    entries = {
        d.get("nodeName"): d for clique in chain.cliques for d in clique.get("daemons") or []
    }
    daemons_by_node = {p["spec"].get("nodeName"): p for p in chain.daemon_pods}
    hidden = "nodes" in chain.not_shown
    lines.append("Nodes: not shown" if hidden else f"Nodes ({len(chain.nodes)}):")
    for node in sorted(chain.nodes, key=lambda n: n["metadata"]["name"]):
        node_name = node["metadata"]["name"]
        clique = (node["metadata"].get("labels") or {}).get(c.GPU_CLIQUE_NODE_LABEL) or "-"
        pod = daemons_by_node.get(node_name)
        daemon = "no daemon pod"
        if pod is not None:
            daemon = (
                "daemon Ready"
                if condition_true(pod, "Ready")
                else f"daemon {container_problem(pod)}"
            )
        entry = entries.get(node_name)
        state = f"entry {entry.get('status')} #{entry.get('index')}" if entry else "no entry"
        lines.append(f"  {node_name}  clique {clique}  {daemon}  {state}")
    lines.append(f"Workload pods ({len(chain.workload_pods)}):")
    for pod in sorted(chain.workload_pods, key=lambda p: p["metadata"]["name"]):
        phase = (pod.get("status") or {}).get("phase", "?")
        where = (pod.get("spec") or {}).get("nodeName") or "unscheduled"
        ready_word = "Ready" if condition_true(pod, "Ready") else "not Ready"
        lines.append(f"  {pod['metadata']['name']}  {phase} {ready_word}  on {where}")
    recent = _recent_events(chain.events)
    if recent:
        lines.append("Events:")
        lines += [f"  {line}" for line in recent]
    if chain.not_shown:
        lines.append(f"not shown (forbidden): {', '.join(chain.not_shown)}")
    if finding is None:
        lines.append("No broken link: the domain is Ready.")
    else:
        lines.append(f"First broken link: {finding.link}")
        lines.append(f"  {finding.problem}")
        lines.append(f"  What to do: {finding.fix}")
    return "\n".join(lines)


def _recent_events(events: Sequence[Obj]) -> list[str]:
    per_object: dict[tuple[str, str], list[Obj]] = {}
    for event in events:
        per_object.setdefault(regarding(event), []).append(event)
    lines = []
    for (kind, name), items in sorted(per_object.items()):
        items.sort(key=_event_time)
        for event in items[-EVENTS_PER_OBJECT:]:
            lines.append(
                f"{kind} {name}: {event.get('type')} {event.get('reason')}: {_event_text(event)}"
            )
    return lines


def _event_time(event: Mapping[str, Any]) -> str:
    series = event.get("series") or {}
    return str(
        series.get("lastObservedTime")
        or event.get("eventTime")
        or event.get("deprecatedLastTimestamp")
        or ""
    )
