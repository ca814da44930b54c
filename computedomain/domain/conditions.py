"""Conditions of a ComputeDomain, pure: the truth that ``status.status`` cannot tell.

Upstream's global status is Ready with zero nodes (#767) and never says why a domain is stuck
(#289). Our conditions (positive polarity, in status.conditions) do:

- ``Ready``: at least one daemon joined, every daemon ready, numNodes reached, children fine.
- ``ChildrenReady``: the daemon RCT, the DaemonSet and the workload RCT exist and are ours, and
  the daemon ServiceAccount the DaemonSet names exists (#586: it comes with NVIDIA's chart).
- ``DaemonsReady``: every daemon pod of the domain has joined and is ready.
- ``SingleClique``: the domain's nodes lie in one NVLink clique (IMEX spans no more, #804).
- ``ExclusiveClique``: no other domain uses the same clique (#892).
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from computedomain.api import constants as c
from computedomain.api.v1beta1 import ComputeDomainNode, Condition, ConditionStatus
from computedomain.domain.projection import DaemonPod

TRUE: ConditionStatus = "True"
FALSE: ConditionStatus = "False"
UNKNOWN: ConditionStatus = "Unknown"

# A False value of these deserves a Warning event.
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

# How many nodes or pods a message names before summarising the rest.
_MAX_LISTED = 5


class ChildStatus(enum.Enum):
    OK = "Ok"
    CREATING = "Creating"
    CREATED = "Creating"  # just created; the cache has not shown it yet
    MISSING = "Missing"
    FOREIGN = "Foreign"
    # The CD itself cannot work (e.g. no spec): nothing is created for it.
    INVALID = "Invalid"


@dataclass(frozen=True)
class ChildState:
    status: ChildStatus
    message: str = ""


# Display names for the reconciler's child keys.
_CHILD_NAMES = {
    "spec": "spec",
    "daemonClaimTemplate": "daemon ResourceClaimTemplate",
    "daemonSet": "daemon DaemonSet",
    "workloadClaimTemplate": "workload ResourceClaimTemplate",
}


@dataclass(frozen=True, kw_only=True)
class DomainView:
    """Everything the conditions of one CD depend on."""

    nodes: Sequence[ComputeDomainNode] = ()
    pods: Sequence[DaemonPod] = ()
    num_nodes: int = 0
    # Child key (daemonClaimTemplate, daemonSet, workloadClaimTemplate) → state.
    children: Mapping[str, ChildState] = field(default_factory=dict)
    # GFD cliques the domain's nodes span.
    cliques: Collection[str] = frozenset()
    # Clique → other CDs (namespace/name) using nodes of that clique.
    shared_cliques: Mapping[str, Collection[str]] = field(default_factory=dict)
    deleting: bool = False
    # namespace/name of the daemon ServiceAccount when it does not exist; None when it does.
    missing_service_account: str | None = None
    # Joined nodes whose Node is gone or NotReady → why; their daemons never count as ready.
    lost_nodes: Mapping[str, str] = field(default_factory=dict)

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


def _listing(items: Sequence[str]) -> str:
    shown = ", ".join(items[:_MAX_LISTED])
    rest = len(items) - _MAX_LISTED
    return f"{shown} and {rest} more" if rest > 0 else shown


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


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
        s.message or _CHILD_NAMES.get(k, k)
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
        f"{_CHILD_NAMES.get(k, k)} {s.status.value.lower()}"
        + (f" ({s.message})" if s.message else "")
        for k, s in sorted(view.children.items())
        if s.status is not ChildStatus.OK
    ]
    if pending:
        return _Verdict(FALSE, "ChildrenNotReady", "; ".join(pending))
    return _Verdict(TRUE, "ChildrenReady", "Daemon DaemonSet and both ResourceClaimTemplates exist")


def _daemon_problems(view: DomainView) -> list[str]:
    """``<node or pod>: <reason>`` for every daemon that is not (yet) a ready member."""
    joined = {n.name: n for n in view.nodes}
    pod_by_node: dict[str, DaemonPod] = {}
    problems: list[str] = []
    for pod in sorted(view.pods, key=lambda p: (p.node_name or "", p.deleting, p.name)):
        if pod.node_name is None:
            problems.append(f"pod {pod.name}: {pod.describe_problem() or 'Pending'}")
        else:
            pod_by_node.setdefault(pod.node_name, pod)
    for node_name, lost in sorted(view.lost_nodes.items()):
        problems.append(f"{node_name}: {lost}")
    for node_name, pod in sorted(pod_by_node.items()):
        if node_name in view.lost_nodes:
            continue
        entry = joined.get(node_name)
        if entry is not None and entry.status == c.STATUS_READY and pod.ready:
            continue
        problem = pod.describe_problem()
        if entry is None:
            problem = f"not joined yet ({problem})" if problem else "not joined yet"
        problems.append(f"{node_name}: {problem or 'daemon reports NotReady'}")
    for name, entry in sorted(joined.items()):
        if name in view.lost_nodes:
            continue
        if name not in pod_by_node and entry.status != c.STATUS_READY:
            problems.append(f"{name}: NotReady (no daemon pod seen)")
    return problems


def _daemons_verdict(view: DomainView, problems: list[str]) -> _Verdict:
    joined, total = len(view.nodes), max(len(view.nodes), _daemon_count(view))
    if problems:
        ready = max(0, total - len(problems))
        return _Verdict(
            FALSE,
            "DaemonsNotReady",
            f"{ready} of {_plural(total, 'daemon')} ready; {_listing(problems)}",
        )
    if joined == 0:
        return _Verdict(
            UNKNOWN,
            "NoDaemons",
            "No IMEX daemon yet: daemons start on nodes where a workload pod using the "
            "channel ResourceClaimTemplate is scheduled",
        )
    return _Verdict(TRUE, "DaemonsReady", f"{_plural(joined, 'daemon')} joined and ready")


def _daemon_count(view: DomainView) -> int:
    return len({p.node_name or f"pod/{p.name}" for p in view.pods} | {n.name for n in view.nodes})


def _ready_verdict(view: DomainView, children: _Verdict, daemons: _Verdict) -> _Verdict:
    if view.deleting:
        remaining = sorted(p.name for p in view.pods)
        detail = (
            f"; waiting for {_plural(len(remaining), 'daemon pod')} to terminate: "
            f"{_listing(remaining)}"
            if remaining
            else ""
        )
        return _Verdict(FALSE, "Deleting", f"The ComputeDomain is being deleted{detail}")
    if children.reason in ("ForeignObject", DAEMON_SA_MISSING, INVALID_SPEC):
        return _Verdict(FALSE, children.reason, children.message)
    if children.status != TRUE:
        return _Verdict(FALSE, "ChildrenNotReady", children.message)
    if not view.nodes and not view.pods:
        return _Verdict(
            FALSE,
            "WaitingForWorkload",
            "No IMEX daemon has joined: start a workload pod that references the channel "
            "ResourceClaimTemplate",
        )
    if daemons.status != TRUE:
        return _Verdict(FALSE, "DaemonsNotReady", daemons.message)
    if len(view.nodes) < view.num_nodes:
        return _Verdict(
            FALSE,
            "TooFewNodes",
            f"{len(view.nodes)} of {view.num_nodes} expected nodes joined (spec.numNodes)",
        )
    daemons_text = _plural(len(view.nodes), "daemon")
    cliques_text = _plural(len(_all_cliques(view)), "clique")
    return _Verdict(TRUE, "Ready", f"{daemons_text} ready in {cliques_text}")


def _all_cliques(view: DomainView) -> set[str]:
    return set(view.cliques) | {n.clique_id for n in view.nodes if n.clique_id}


def _single_clique_verdict(view: DomainView) -> _Verdict:
    cliques = sorted(_all_cliques(view))
    if not cliques:
        if view.nodes:
            return _Verdict(UNKNOWN, "NoCliqueLabels", "The domain's nodes carry no NVLink clique")
        return _Verdict(UNKNOWN, "NoNodes", "No nodes yet")
    if len(cliques) == 1:
        return _Verdict(TRUE, "SingleClique", f"All nodes are in clique {cliques[0]}")
    return _Verdict(
        FALSE,
        "MultipleCliques",
        f"Nodes span {len(cliques)} NVLink cliques ({_listing(cliques)}); IMEX connects only "
        f"nodes of one clique: pin the workload with a required pod affinity on "
        f"{c.GPU_CLIQUE_NODE_LABEL}",
    )


def _exclusive_clique_verdict(view: DomainView) -> _Verdict:
    shared = {k: sorted(v) for k, v in view.shared_cliques.items() if v}
    if shared:
        parts = [f"clique {k} with {_listing(v)}" for k, v in sorted(shared.items())]
        return _Verdict(
            FALSE,
            "CliqueShared",
            f"Sharing {'; '.join(parts)}; two ComputeDomains in one NVLink clique can fail "
            "CUDA memory sharing (CUDA_ERROR_NOT_SUPPORTED)",
        )
    if not _all_cliques(view):
        return _Verdict(UNKNOWN, "NoNodes", "No clique in use yet")
    return _Verdict(TRUE, "ExclusiveClique", "No other ComputeDomain uses these cliques")


def conditions_for(
    view: DomainView,
    generation: int,
    now: datetime,
    previous: Iterable[Condition] = (),
) -> list[Condition]:
    """All our conditions for ``view``, merged into ``previous`` with apimachinery semantics.

    Conditions of types we do not own are kept after ours, within the CRD's maxItems.
    """
    children = _children_verdict(view)
    daemons = _daemons_verdict(view, _daemon_problems(view))
    verdicts = {
        c.CONDITION_READY: _ready_verdict(view, children, daemons),
        c.CONDITION_CHILDREN_READY: children,
        c.CONDITION_DAEMONS_READY: daemons,
        c.CONDITION_SINGLE_CLIQUE: _single_clique_verdict(view),
        c.CONDITION_EXCLUSIVE_CLIQUE: _exclusive_clique_verdict(view),
    }
    merged = list(previous)
    for kind in c.CONDITION_TYPES:
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
