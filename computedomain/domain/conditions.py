"""Conditions of a ComputeDomain, pure: the truth that ``status.status`` cannot tell.

Upstream's global status is Ready with zero nodes (#767) and never says why a domain is stuck
(#289). Our conditions (positive polarity, in status.conditions) do:

- ``Ready``: at least one daemon joined, every daemon ready, numNodes reached, children fine.
- ``ChildrenReady``: each child kind (``childkinds``: the daemon RCT, the DaemonSet and the
  workload RCT) exists and is ours, and the daemon ServiceAccount the DaemonSet names exists
  (#586: it comes with NVIDIA's chart).
- ``DaemonsReady``: every daemon pod of the domain has joined and is ready. While no daemon has
  been not ready for longer than the grace period the reason is ``DaemonsStarting`` (a normal
  start, or a new node joining); after it, ``DaemonsNotReady``, which is worth a Warning.
- ``SingleClique``: the domain's nodes lie in one NVLink clique (IMEX spans no more, #804).
- ``ExclusiveClique``: no other domain uses the same clique (#892).

With host-managed IMEX (contract §18) no daemon, clique or node label exists, so only
``Ready`` and ``ChildrenReady`` are set, and Ready means what upstream's ``status.status``
means there: the CD was admitted and its workload claim template exists. The host's nvidia-imex
health is the kubelet plugin's to check, at claim prepare, through the host's IMEX socket.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from computedomain.api import constants as c
from computedomain.api.v1beta1 import ComputeDomainNode, Condition, ConditionStatus
from computedomain.domain import childkinds
from computedomain.domain.childkinds import Child, ChildKind
from computedomain.domain.placement import CONDITION_PLACED
from computedomain.domain.projection import DaemonPod, plural
from computedomain.domain.workload import WorkloadPodProblem

TRUE: ConditionStatus = "True"
FALSE: ConditionStatus = "False"
UNKNOWN: ConditionStatus = "Unknown"

# A False value of these deserves a Warning event, unless its reason is progress.
WARNING_CONDITIONS = frozenset(
    {
        c.CONDITION_CHILDREN_READY,
        c.CONDITION_DAEMONS_READY,
        c.CONDITION_SINGLE_CLIQUE,
        c.CONDITION_EXCLUSIVE_CLIQUE,
    }
)

# The daemon ServiceAccount is missing (#586).
DAEMON_SA_MISSING = "DaemonServiceAccountMissing"
INVALID_SPEC = "InvalidSpec"
DAEMONS_STARTING = "DaemonsStarting"
DAEMONS_NOT_READY = "DaemonsNotReady"
WAITING_FOR_WORKLOAD = "WaitingForWorkload"
# Waiting for the workload, and workload pods of the channel template have been Pending past
# the grace period: what they say is why no daemon joins.
WORKLOAD_PODS_NOT_STARTING = "WorkloadPodsNotStarting"
TOO_FEW_NODES = "TooFewNodes"
DELETING = "Deleting"
MULTIPLE_CLIQUES = "MultipleCliques"
CLIQUE_SHARED = "CliqueShared"
HOST_MANAGED = "HostManagedIMEX"
# The reasons of a True verdict: each its own word, never a condition type's (kubectl shows
# type and reason side by side, and an Event carries the reason alone).
ALL_NODES_JOINED = "AllNodesJoined"
CHILDREN_EXIST = "ChildrenExist"
DAEMONS_JOINED = "DaemonsJoined"
ONE_CLIQUE = "OneClique"
CLIQUE_NOT_SHARED = "CliqueNotShared"
# hostManaged, yet a DaemonSet or daemon RCT made in driverManaged mode still exists.
DRIVER_MANAGED_LEFTOVERS = "DriverManagedLeftovers"
# A condition that is not True for one of these reasons is on its way, not wrong: a new CD
# waiting for its workload, daemons within their grace period, nodes still joining
# (spec.numNodes is informational, contract §14), a deletion someone asked for.
PROGRESS_REASONS = frozenset(
    {WAITING_FOR_WORKLOAD, DAEMONS_STARTING, TOO_FEW_NODES, DELETING, "NoDaemons", "NotChecked"}
)

# How many nodes or pods a message names before summarising the rest.
_MAX_LISTED = 5


class ChildStatus(enum.Enum):
    OK = "Ok"
    CREATING = "Creating"
    MISSING = "Missing"
    FOREIGN = "Foreign"
    # The CD itself cannot work (e.g. no spec): nothing is created for it.
    INVALID = "Invalid"


@dataclass(frozen=True)
class ChildState:
    status: ChildStatus
    message: str = ""


@dataclass(frozen=True, kw_only=True)
class DomainView:
    """Everything the conditions of one CD depend on."""

    nodes: Sequence[ComputeDomainNode] = ()
    pods: Sequence[DaemonPod] = ()
    num_nodes: int = 0
    # What was checked (the spec, each child) → its state.
    children: Mapping[ChildKind, ChildState] = field(default_factory=dict)
    # Cliques the domain's nodes span by their clique labels (set by GPU Feature Discovery
    # or NVIDIA's kubelet plugin; missing for a while when the plugin restarts), counting only
    # nodes no daemon reports a clique for: a daemon's report is what IMEX uses, also when the
    # plugin's re-read has relabelled its node since.
    cliques: Collection[str] = frozenset()
    # Clique → other CDs (namespace/name) using nodes of that clique.
    shared_cliques: Mapping[str, Collection[str]] = field(default_factory=dict)
    deleting: bool = False
    # Deleting: the workload pods still using the channel, which the IMEX daemons stay for.
    workload_holders: tuple[str, ...] = ()
    # namespace/name of the daemon ServiceAccount when it does not exist; None when it does.
    missing_service_account: str | None = None
    # Joined nodes whose Node is gone or NotReady → why; their daemons never count as ready.
    lost_nodes: Mapping[str, str] = field(default_factory=dict)
    # Nodes one NVLink clique holds (MAX_NODES_PER_IMEX_DOMAIN): what fits in one clique.
    clique_size: int = c.DEFAULT_MAX_NODES_PER_IMEX_DOMAIN
    # Nodes labelled for this CD by the kubelet plugin or joined: where the job runs so far.
    members: Collection[str] = frozenset()
    # Host-managed IMEX (§18): the workload RCT is the only child.
    host_managed: bool = False
    # hostManaged only: "<Kind> <namespace>/<name>" of children driverManaged made, left alone.
    leftovers: Sequence[str] = ()
    # The channel ResourceClaimTemplate's name, and its workload pods Pending past the grace
    # period with why (``workload``); only looked for while the CD waits for its workload.
    workload_template: str = ""
    workload_problems: Sequence[WorkloadPodProblem] = ()
    # What the placement webhook decided (placement.placed_condition), if it placed the CD.
    placement: tuple[bool, str, str] | None = None

    @property
    def invalid(self) -> str | None:
        """Why the CD cannot work at all, or None."""
        found = [s.message for s in self.children.values() if s.status is ChildStatus.INVALID]
        return "; ".join(found) if found else None


def set_condition(
    conditions: Iterable[Condition], new: Condition, now: datetime
) -> list[Condition]:
    """Insert or update ``new`` with apimachinery's SetStatusCondition semantics.

    lastTransitionTime becomes ``now`` only when the condition is new or its status flips;
    reason, message and observedGeneration always follow ``new``.
    """
    result: list[Condition] = []
    found = False
    for existing in conditions:
        if existing.type != new.type:
            result.append(existing)
            continue
        found = True
        since = now if existing.status != new.status else existing.last_transition_time
        result.append(new.model_copy(update={"last_transition_time": since}))
    if not found:
        result.append(new.model_copy(update={"last_transition_time": now}))
    return result


def listing(items: Sequence[str], limit: int = _MAX_LISTED) -> str:
    """The first ``limit`` items, comma-separated, then how many more (messages stay short)."""
    shown = ", ".join(items[:limit])
    rest = len(items) - limit
    return f"{shown} and {rest} more" if rest > 0 else shown


@dataclass(frozen=True)
class _Verdict:
    status: ConditionStatus
    reason: str
    message: str


def _children_verdict(view: DomainView) -> _Verdict:
    if view.deleting:
        return _Verdict(FALSE, "Deleting", "The ComputeDomain is being deleted")
    if not view.children:
        return _Verdict(UNKNOWN, "NotChecked", "Children not checked yet")
    if view.invalid:
        return _Verdict(FALSE, INVALID_SPEC, view.invalid)
    foreign = [
        s.message or k.display
        for k, s in sorted(view.children.items())
        if s.status is ChildStatus.FOREIGN
    ]
    if foreign:
        return _Verdict(FALSE, "ForeignObject", "; ".join(foreign))
    if view.missing_service_account:
        return _Verdict(
            FALSE,
            DAEMON_SA_MISSING,
            f"ServiceAccount {view.missing_service_account} does not exist: the daemon "
            "DaemonSet cannot create daemon pods until it does (NVIDIA's Helm chart or "
            "manifests/rbac installs it)",
        )
    pending = [
        f"{k.display} {s.status.value.lower()}" + (f" ({s.message})" if s.message else "")
        for k, s in sorted(view.children.items())
        if s.status is not ChildStatus.OK
    ]
    if pending:
        return _Verdict(FALSE, "ChildrenNotReady", "; ".join(pending))
    return _Verdict(TRUE, CHILDREN_EXIST, _exist(childkinds.in_mode(view.host_managed)))


def _exist(kinds: Sequence[Child]) -> str:
    """``<A>, <b> and <c> exist``, by the kinds' display names."""
    text = childkinds.sentence(kinds)
    return f"{text[:1].upper()}{text[1:]} {'exists' if len(kinds) == 1 else 'exist'}"


@dataclass(frozen=True)
class _Problem:
    """One daemon that is not (yet) a ready member, and since when that holds: ``since`` None
    means unknown (the DaemonsReady condition's own clock applies); ``at_once`` problems are
    wrong from the start (the daemon's Node is gone or NotReady)."""

    text: str
    since: datetime | None = None
    at_once: bool = False
    pod: DaemonPod | None = None


def _daemon_problems(view: DomainView) -> list[_Problem]:
    """``<node or pod>: <reason>`` for every daemon that is not (yet) a ready member."""
    joined = {n.name: n for n in view.nodes}
    pod_by_node: dict[str, DaemonPod] = {}
    problems: list[_Problem] = []
    for pod in sorted(view.pods, key=lambda p: (p.node_name or "", p.deleting, p.name)):
        if pod.node_name is None:
            text = f"pod {pod.name}: {pod.describe_problem() or 'Pending'}"
            problems.append(_Problem(text, pod.ready_changed_at, pod=pod))
        else:
            pod_by_node.setdefault(pod.node_name, pod)
    for node_name, lost in sorted(view.lost_nodes.items()):
        problems.append(_Problem(f"{node_name}: {lost}", at_once=True))
    for node_name, pod in sorted(pod_by_node.items()):
        if node_name in view.lost_nodes:
            continue
        entry = joined.get(node_name)
        if entry is not None and entry.status == c.STATUS_READY and pod.ready:
            continue
        problem = pod.describe_problem()
        if entry is None:
            problem = f"not joined yet ({problem})" if problem else "not joined yet"
        text = f"{node_name}: {problem or 'daemon reports NotReady'}"
        problems.append(_Problem(text, pod.ready_changed_at, pod=pod))
    for name, entry in sorted(joined.items()):
        if name in view.lost_nodes:
            continue
        if name not in pod_by_node and entry.status != c.STATUS_READY:
            problems.append(_Problem(f"{name}: NotReady (no daemon pod seen)"))
    return problems


def _false_since(previous: Iterable[Condition], kind: str, now: datetime) -> datetime:
    """Since when ``kind`` has been False (now, if it is not False yet)."""
    for cond in previous:
        if cond.type == kind and cond.status == FALSE:
            return cond.last_transition_time
    return now


def _late_in(problem: _Problem, grace: float, now: datetime, clock: datetime) -> float:
    """Seconds until ``problem`` is late (0 or less: it is)."""
    if problem.at_once:
        return 0.0
    since = problem.since or clock
    return grace - (now - since).total_seconds()


def daemons_due(
    view: DomainView, now: datetime, grace: float, previous: Iterable[Condition] = ()
) -> float | None:
    """Seconds until the next daemon problem outlives the grace period and DaemonsReady turns
    from DaemonsStarting to DaemonsNotReady; None when nothing is waiting for that."""
    if view.host_managed:
        return None  # no DaemonsReady condition in this mode
    clock = _false_since(previous, c.CONDITION_DAEMONS_READY, now)
    pending = [
        left
        for problem in _daemon_problems(view)
        if (left := _late_in(problem, grace, now, clock)) > 0
    ]
    return min(pending) if pending else None


def _logs_hint(late: Sequence[_Problem]) -> str:
    """Where to read the first late daemon's own log (its previous run's after a restart)."""
    pod = next((p.pod for p in late if p.pod is not None), None)
    if pod is None:
        return ""
    previous = " --previous" if pod.restart_count else ""
    return f"; logs: kubectl -n {pod.namespace} logs {pod.name} -c {c.DAEMON_CONTAINER}{previous}"


def _daemons_verdict(
    view: DomainView,
    problems: list[_Problem],
    now: datetime,
    grace: float,
    previous: Iterable[Condition],
) -> _Verdict:
    joined, total = len(view.nodes), max(len(view.nodes), _daemon_count(view))
    if problems:
        clock = _false_since(previous, c.CONDITION_DAEMONS_READY, now)
        late = [p for p in problems if _late_in(p, grace, now, clock) <= 0]
        ready = max(0, total - len(problems))
        message = f"{ready} of {plural(total, 'daemon')} ready; " + listing(
            [p.text for p in problems]
        )
        if not late:
            return _Verdict(FALSE, DAEMONS_STARTING, message)
        return _Verdict(FALSE, DAEMONS_NOT_READY, message + _logs_hint(late))
    if joined == 0:
        return _Verdict(
            UNKNOWN,
            "NoDaemons",
            "No IMEX daemon yet: daemons start on nodes where a workload pod using the "
            "channel ResourceClaimTemplate is scheduled",
        )
    return _Verdict(TRUE, DAEMONS_JOINED, f"{plural(joined, 'daemon')} joined and ready")


def _daemon_count(view: DomainView) -> int:
    return len({p.node_name or f"pod/{p.name}" for p in view.pods} | {n.name for n in view.nodes})


def _ready_verdict(view: DomainView, children: _Verdict, daemons: _Verdict) -> _Verdict:
    if view.deleting and view.workload_holders:
        holders = view.workload_holders
        use = "uses" if len(holders) == 1 else "use"
        return _Verdict(
            FALSE,
            "Deleting",
            f"The ComputeDomain is being deleted; its IMEX daemons stay while "
            f"{plural(len(holders), 'workload pod')} still {use} its channel: {listing(holders)}",
        )
    if view.deleting:
        remaining = sorted(p.name for p in view.pods)
        detail = (
            f"; waiting for {plural(len(remaining), 'daemon pod')} to terminate: "
            f"{listing(remaining)}"
            if remaining
            else ""
        )
        return _Verdict(FALSE, "Deleting", f"The ComputeDomain is being deleted{detail}")
    if children.reason in ("ForeignObject", DAEMON_SA_MISSING, INVALID_SPEC):
        return _Verdict(FALSE, children.reason, children.message)
    if children.status != TRUE:
        return _Verdict(FALSE, "ChildrenNotReady", children.message)
    if not view.nodes and not view.pods:
        if view.workload_problems:
            return _Verdict(FALSE, WORKLOAD_PODS_NOT_STARTING, _workload_message(view))
        return _Verdict(
            FALSE,
            WAITING_FOR_WORKLOAD,
            "No IMEX daemon has joined: start a workload pod that references the channel "
            "ResourceClaimTemplate",
        )
    if daemons.status != TRUE:
        return _Verdict(FALSE, daemons.reason, daemons.message)
    if len(view.nodes) < view.num_nodes:
        return _Verdict(
            FALSE,
            TOO_FEW_NODES,
            f"{len(view.nodes)} of {view.num_nodes} expected nodes joined (spec.numNodes)",
        )
    daemons_text = plural(len(view.nodes), "daemon")
    cliques_text = plural(len(all_cliques(view)), "clique")
    return _Verdict(TRUE, ALL_NODES_JOINED, f"{daemons_text} ready in {cliques_text}")


def waits_for_workload(view: DomainView) -> bool:
    """Ready says ``WaitingForWorkload`` (or ``WorkloadPodsNotStarting``): the children are
    fine and no daemon pod or node exists yet. Only then are workload pods worth a look."""
    if view.host_managed or view.deleting or view.nodes or view.pods:
        return False
    return _children_verdict(view).status == TRUE


def _workload_message(view: DomainView) -> str:
    """The first stuck workload pod in its own words, then how many more."""
    problems = view.workload_problems
    first, more = problems[0], len(problems) - 1
    count = plural(len(problems), "workload pod")
    verb = "has" if len(problems) == 1 else "have"
    rest = f"; and {more} more" if more else ""
    return (
        f"No IMEX daemon has joined: {count} using ResourceClaimTemplate "
        f"{view.workload_template} {verb} not started: pod {first.pod}: {first.words}{rest}"
    )


def all_cliques(view: DomainView) -> set[str]:
    """The cliques the domain uses: what its daemons report (which stays while a node's
    label is missing, or names another clique since the plugin's re-read), and the labels of
    the nodes not reported yet (``status.cliqueCount``, the clique gauge)."""
    return set(view.cliques) | {n.clique_id for n in view.nodes if n.clique_id}


def _nodes_seen(view: DomainView) -> int:
    """Nodes the job is known to run on: labelled, joined, or running a live daemon pod (a
    pod not yet scheduled, or leaving, names no node of the job)."""
    pods = {p.node_name for p in view.pods if p.node_name and not p.deleting}
    return len(set(view.members) | {n.name for n in view.nodes} | pods)


def _job_size(view: DomainView) -> int:
    """How many nodes the job needs, as far as is known: spec.numNodes, or the nodes seen
    when more."""
    return max(view.num_nodes, _nodes_seen(view))


def avoidable_clique_split(view: DomainView) -> bool:
    """The domain's nodes span more than one NVLink clique although the job fits in one
    (at most ``clique_size`` nodes): IMEX then shares GPU memory only within each part, and
    pinning the workload to one clique would mend it. A job larger than a clique spans
    cliques by design (SingleClique is False all the same, with other advice): not this."""
    return len(all_cliques(view)) > 1 and _job_size(view) <= view.clique_size


def _single_clique_verdict(view: DomainView) -> _Verdict:
    cliques = sorted(all_cliques(view))
    if not cliques:
        if view.nodes:
            return _Verdict(UNKNOWN, "NoCliqueLabels", "The domain's nodes carry no NVLink clique")
        return _Verdict(UNKNOWN, "NoNodes", "No nodes yet")
    if len(cliques) == 1:
        return _Verdict(TRUE, ONE_CLIQUE, f"All nodes are in clique {cliques[0]}")
    room, size = view.clique_size, _job_size(view)
    spans = f"Nodes span {len(cliques)} NVLink cliques ({listing(cliques)})"
    pin = (
        f"recreate the workload with a required pod affinity on topologyKey "
        f"{c.GPU_CLIQUE_NODE_LABEL} among its pods"
    )
    network = (
        "between cliques it must communicate over the network (e.g. NCCL over "
        "InfiniBand/RoCE/EFA), so keep each NVLink-heavy group of ranks (e.g. tensor "
        "parallelism) inside one clique"
    )
    if size > room:
        advice = (
            f"this job's {size} nodes cannot fit one clique (at most {room} nodes each). "
            f"Multi-node NVLink memory sharing (MNNVL, via IMEX) works only between nodes of "
            f"the same clique: {network}"
        )
    elif view.num_nodes > 0:
        advice = (
            f"IMEX shares GPU memory only between nodes of one clique, and this job's "
            f"{plural(size, 'node')} fit in one (up to {room}): {pin}"
        )
    else:
        advice = (
            f"IMEX shares GPU memory only between nodes of one clique (at most {room} nodes) "
            f"and spec.numNodes does not say how large this job is: if it needs at most "
            f"{room} nodes, {pin}; if it needs more, {network}"
        )
    return _Verdict(FALSE, MULTIPLE_CLIQUES, f"{spans}; {advice}")


def _exclusive_clique_verdict(view: DomainView) -> _Verdict:
    shared = {k: sorted(v) for k, v in view.shared_cliques.items() if v}
    if shared:
        parts = [f"clique {k} with {listing(v)}" for k, v in sorted(shared.items())]
        return _Verdict(
            FALSE,
            CLIQUE_SHARED,
            f"Sharing {'; '.join(parts)}; two ComputeDomains in one NVLink clique can fail "
            "CUDA memory sharing (cuMemSetAccess: CUDA_ERROR_NOT_SUPPORTED, #892): if this job "
            "shares GPU memory across nodes, give it a clique of its own, e.g. a required pod "
            f"anti-affinity on topologyKey {c.GPU_CLIQUE_NODE_LABEL} against the other jobs' "
            "pods",
        )
    if not all_cliques(view):
        return _Verdict(UNKNOWN, "NoNodes", "No clique in use yet")
    return _Verdict(TRUE, CLIQUE_NOT_SHARED, "No other ComputeDomain uses these cliques")


_HOST_READY_MESSAGE = (
    "Admitted and the workload ResourceClaimTemplate exists. IMEX is host-managed: each "
    "node's own nvidia-imex service provides the IMEX domain, this controller runs no IMEX "
    "daemon and does not see its health; the kubelet plugin checks it through the host's IMEX "
    "socket when it prepares a workload's channel claim"
)


def _host_children_verdict(view: DomainView) -> _Verdict:
    if view.children and view.leftovers and not view.deleting and not view.invalid:
        return _Verdict(
            FALSE,
            DRIVER_MANAGED_LEFTOVERS,
            f"IMEX is host-managed, yet {listing(view.leftovers)} made in driverManaged "
            "mode still exist; they are left alone, not deleted (their IMEX daemons may serve "
            "a running job and can conflict with the host's nvidia-imex): delete and recreate "
            "this ComputeDomain once its workload is done, or run the controller with "
            f"{c.IMEX_MODE_DRIVER} again",
        )
    children = _children_verdict(view)
    if children.status == TRUE:
        absent = [child for child in childkinds.CHILDREN if not child.in_mode(True)]
        return _Verdict(
            TRUE,
            CHILDREN_EXIST,
            f"{children.message} (host-managed IMEX: no {childkinds.sentence(absent, 'or')})",
        )
    return children


def _host_ready_verdict(view: DomainView, children: _Verdict) -> _Verdict:
    if view.deleting:
        return _ready_verdict(view, children, children)
    if children.status != TRUE:
        reason = children.reason if children.reason != "NotChecked" else "ChildrenNotReady"
        return _Verdict(FALSE, reason, children.message)
    return _Verdict(TRUE, HOST_MANAGED, _HOST_READY_MESSAGE)


def conditions_for(
    view: DomainView,
    generation: int,
    now: datetime,
    previous: Iterable[Condition] = (),
    daemon_grace: float = 0.0,
) -> list[Condition]:
    """All our conditions for ``view``, merged into ``previous`` with apimachinery semantics.

    A daemon not ready for ``daemon_grace`` seconds (by its pod's Ready transition) makes
    DaemonsReady ``DaemonsNotReady``; before that it is ``DaemonsStarting`` (``daemons_due``
    says when to look again). Conditions of types we do not own are kept after ours, within
    the CRD's maxItems.
    """
    previous = list(previous)
    verdicts: dict[str, _Verdict]
    if view.host_managed:
        children = _host_children_verdict(view)
        verdicts = {
            c.CONDITION_READY: _host_ready_verdict(view, children),
            c.CONDITION_CHILDREN_READY: children,
        }
        # Conditions about daemons and cliques could never become true here: drop ours
        # (e.g. from before a switch from driverManaged), keep everyone else's.
        dropped = set(c.CONDITION_TYPES) - set(verdicts)
        previous = [x for x in previous if x.type not in dropped]
    else:
        children = _children_verdict(view)
        daemons = _daemons_verdict(view, _daemon_problems(view), now, daemon_grace, previous)
        verdicts = {
            c.CONDITION_READY: _ready_verdict(view, children, daemons),
            c.CONDITION_CHILDREN_READY: children,
            c.CONDITION_DAEMONS_READY: daemons,
            c.CONDITION_SINGLE_CLIQUE: _single_clique_verdict(view),
            c.CONDITION_EXCLUSIVE_CLIQUE: _exclusive_clique_verdict(view),
        }
    if view.placement is not None:
        placed, reason, message = view.placement
        verdicts[CONDITION_PLACED] = _Verdict(TRUE if placed else FALSE, reason, message)
    merged = list(previous)
    for kind in verdicts:
        verdict = verdicts[kind]
        merged = set_condition(
            merged,
            Condition(
                type=kind,
                status=verdict.status,
                observed_generation=generation,
                last_transition_time=now,
                reason=verdict.reason,
                message=verdict.message,
            ),
            now,
        )
    ours = {kind: i for i, kind in enumerate(c.CONDITION_TYPES)}
    merged.sort(key=lambda cond: ours.get(cond.type, len(ours)))
    return merged[: c.MAX_CONDITIONS]


def status_counts(
    nodes: Sequence[ComputeDomainNode], cliques: Collection[str] = ()
) -> tuple[int, int, int]:
    """(nodeCount, readyNodeCount, cliqueCount) for the printer columns."""
    ready = sum(1 for n in nodes if n.status == c.STATUS_READY)
    spanned = set(cliques) | {n.clique_id for n in nodes if n.clique_id}
    return len(nodes), ready, len(spanned)
