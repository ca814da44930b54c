"""Plan: what one ComputeDomain's reconcile writes, decided from what was observed (pure).

Two plans, each read only from its arguments and applied by a small executor that handles the
apiserver's answers (a conflict, an AlreadyExists, a namespace being deleted) as before:

- ``plan_live`` (the ``snapshot`` observed once, the refusals this process remembers, the
  time) -> ``Plan``: our finalizer and the missing children; applied by the reconciler and
  ``children.ChildMaker.act``;
- ``plan_status`` (the CD, the view projected from the caches, the status writer's memory, the
  time) -> ``StatusPlan``: the status patch or why not now (equal, held for coalescing), the
  Events it is worth, when to look again, and the writer's memory after it; applied by
  ``status.StatusWriter.update``, after the children (their states are the creates' answers)
  and the clique pruning (its writes change the view).

A steady state plans nothing: an empty ``Plan`` and a ``StatusPlan`` without patch or Event.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from computedomain.api import constants as c
from computedomain.api.v1beta1 import ComputeDomain, ComputeDomainNode, Condition
from computedomain.domain import childkinds, projection
from computedomain.domain import conditions as cond
from computedomain.domain.childkinds import ChildKind
from computedomain.domain.conditions import ChildState, ChildStatus, DomainView
from computedomain.domain.memory import StatusMemory
from computedomain.domain.modes import UPSTREAM_STATUS_FIELDS, StatusMode
from computedomain.domain.snapshot import DomainSnapshot
from computedomain.domain.transitions import EventSpec, transition_events
from computedomain.runtime import patches
from computedomain.runtime.resources import Resource

SPEC_MISSING = (
    "spec is missing: a ComputeDomain needs spec.channel.resourceClaimTemplate.name (and "
    "optionally spec.numNodes); nothing is created for it until it has one"
)
# A refused (foreign) object is looked at again this often; until then no create is tried.
FOREIGN_RECHECK_SECONDS = 60.0
# A requeue at a grace deadline goes this much later, so the clock has surely passed it.
GRACE_MARGIN_SECONDS = 0.1
# While a CD's status keeps changing (a bring-up: daemons start over tens of seconds), its
# coalescing window doubles after each folded write, up to this many times the configured one.
MAX_WINDOW_FACTOR = 4

# (resource plural, namespace, name) of a refused object -> (monotonic time the refusal was
# last confirmed, the advice given then).
Refusals = Mapping[tuple[str, str, str], tuple[float, str]]


@dataclass(frozen=True)
class Create:
    kind: ChildKind
    resource: Resource
    body: dict[str, Any]

    @property
    def refusal_key(self) -> tuple[str, str, str]:
        meta = self.body["metadata"]
        return self.resource.plural, str(meta["namespace"]), str(meta["name"])


@dataclass(frozen=True)
class Plan:
    """The writes of one live reconcile, in the order they go out."""

    # Ours added to the CD's finalizers (a JSON patch guarded by the resourceVersion read),
    # before any child: no child may exist that a deletion would not clean up.
    finalizer: patches.Patch | None = None
    creates: tuple[Create, ...] = ()
    # What is known of each checked kind without a write: present, refused until the
    # recheck, or the spec invalid. A planned create's kind is absent (its answer decides).
    known: Mapping[ChildKind, ChildState] = field(default_factory=dict)
    # When to look again, whatever the writes answer (a refusal's recheck).
    requeue_after: float | None = None

    @property
    def writes(self) -> bool:
        return self.finalizer is not None or bool(self.creates)


def plan_live(snapshot: DomainSnapshot, refused: Refusals, now: float) -> Plan:
    """The finalizer and the children of a live CD: each kind of its IMEX mode that has no
    child of this CD is created, unless an object at its name was refused less than
    ``FOREIGN_RECHECK_SECONDS`` ago (then it stays refused with the advice given)."""
    finalizer = patches.add_finalizer(snapshot.obj, c.FINALIZER)
    cd = snapshot.cd
    if cd.spec is None:
        # The CRD admits a ComputeDomain without spec (as upstream); with no channel template
        # it cannot work, so no DaemonSet or claim template is made for it.
        return Plan(
            finalizer, known={ChildKind.SPEC: ChildState(ChildStatus.INVALID, SPEC_MISSING)}
        )
    known: dict[ChildKind, ChildState] = {}
    creates: list[Create] = []
    # Host-managed IMEX (§18): the workload RCT is the only child. A DaemonSet or daemon RCT
    # left from driverManaged is never deleted here (its daemons may serve a running job); the
    # conditions report it.
    for child in childkinds.in_mode(snapshot.mode.host_managed):
        if child.kind in snapshot.present:
            known[child.kind] = ChildState(ChildStatus.OK)
            continue
        assert snapshot.inputs is not None  # observed whenever a kind of this mode is missing
        create = Create(child.kind, child.resource, child.build(cd, snapshot.inputs))
        confirmed = refused.get(create.refusal_key)
        if confirmed is not None and now - confirmed[0] < FOREIGN_RECHECK_SECONDS:
            known[child.kind] = ChildState(ChildStatus.FOREIGN, confirmed[1])
        else:
            creates.append(create)
    blocked = any(state.status is ChildStatus.FOREIGN for state in known.values())
    return Plan(
        finalizer,
        tuple(creates),
        known,
        requeue_after=FOREIGN_RECHECK_SECONDS if blocked else None,
    )


def _ready(conditions: Sequence[Condition]) -> str | None:
    return next((x.status for x in conditions if x.type == "Ready"), None)


def _healthy(ready: Condition | None) -> bool:
    return ready is not None and (ready.status == "True" or ready.reason in cond.PROGRESS_REASONS)


def _progress_only(
    stored: Mapping[str, Any],
    desired: Mapping[str, Any],
    previous: Sequence[Condition],
    conditions: Sequence[Condition],
) -> bool:
    """Only the conditions changed, Ready says the CD is on its way (a daemon starting within
    its grace period, waiting for the workload) and said nothing was wrong before: no node,
    count or global status moved, so no consumer acts on this write (the plugin reads
    status.nodes), and no problem is taken back."""
    ready = next((x for x in conditions if x.type == "Ready"), None)
    if ready is None or ready.status != "False" or ready.reason not in cond.PROGRESS_REASONS:
        return False
    if not _healthy(next((x for x in previous if x.type == "Ready"), None)):
        return False

    def rest(status: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in status.items() if k != "conditions"}

    return bool(stored) and projection.status_equal(rest(stored), rest(desired))


def desired_status(
    cd: ComputeDomain,
    view: DomainView,
    nodes: Sequence[ComputeDomainNode],
    conditions: Sequence[Condition],
    children: Mapping[ChildKind, ChildState],
    mode: StatusMode,
) -> dict[str, Any]:
    """The whole status this controller would write (before an outdated CRD cuts it down)."""
    counts: tuple[int | None, ...] = cond.status_counts(list(nodes), view.cliques)
    if mode.host_managed:
        # Upstream's Ready: admitted and the workload RCT (each child of this mode) exists
        # (§18). No daemon joins, so the node and clique counts are absent (empty printer
        # columns), not 0.
        ok = all(
            (state := children.get(kind.kind)) is not None and state.status is cond.ChildStatus.OK
            for kind in childkinds.in_mode(host_managed=True)
        )
        global_status = c.STATUS_READY if ok else c.STATUS_NOT_READY
        counts = (None, None, None)
    elif view.invalid:
        global_status = c.STATUS_NOT_READY
    else:
        global_status = projection.global_status(list(nodes), view.num_nodes)
    return {
        "status": global_status,
        "nodes": [n.to_dict() for n in nodes] or None,
        "conditions": [x.to_dict() for x in conditions],
        "observedGeneration": cd.metadata.generation,
        "nodeCount": counts[0],
        "readyNodeCount": counts[1],
        "cliqueCount": counts[2],
    }


@dataclass(frozen=True, kw_only=True)
class StatusPlan:
    """The status of one reconcile: what to write, what to say, when to look again."""

    # The status this controller would write (cut to upstream's fields for an outdated CRD).
    desired: dict[str, Any]
    conditions: list[Condition]
    # The merge patch, guarded by the resourceVersion read; None: nothing to write now.
    patch: dict[str, Any] | None = None
    # Recorded once what they describe is reported: after the patch, or now without one.
    events: tuple[EventSpec, ...] = ()
    # When to look again (a starting daemon's grace deadline, the workload's next look, the end
    # of a hold); a written patch's answer may requeue sooner.
    requeue_after: float | None = None
    # The writer's memory after this plan, and after its patch once written (None: no patch).
    memory: StatusMemory
    written: StatusMemory | None = None


def plan_status(
    *,
    cd: ComputeDomain,
    stored: Mapping[str, Any],
    resource_version: str,
    view: DomainView,
    nodes: Sequence[ComputeDomainNode],
    children: Mapping[ChildKind, ChildState],
    mode: StatusMode,
    memory: StatusMemory,
    now: float,
    wall: datetime,
    grace: float,
    window: float,
    deleting: bool = False,
    look_again: float | None = None,
) -> StatusPlan:
    """The conditions from the ``view``, the desired status, and whether it goes out now:
    nothing when it equals the ``stored`` status; a verdict a workload or a person waits on
    (Ready either way) and deletion at once; a daemon starting that changed nothing but the
    conditions' words waits a ``window``; other changes within a window after a write wait for
    its end. ``stored`` and ``resource_version``: the CD's status and version as read (the
    patch is guarded by it); ``now``: the monotonic clock; ``wall``: the one conditions read."""
    previous = _previous_conditions(cd, memory, mode)
    conditions = cond.conditions_for(view, cd.metadata.generation or 0, wall, previous, grace)
    requeue: float | None = None
    due = cond.daemons_due(view, wall, grace, conditions)
    if due is not None:
        # Look again when a starting daemon outlives its grace period: then it is late.
        requeue = due + GRACE_MARGIN_SECONDS
    if look_again is not None:
        requeue = _sooner(requeue, look_again + GRACE_MARGIN_SECONDS)
    desired = desired_status(cd, view, nodes, conditions, children, mode)
    if mode.upstream_only:
        # Writing fields the apiserver prunes would differ from the stored status forever.
        # The CRD itself carries the one CRDOutdated Event (coexistence), not each CD.
        desired = {k: desired[k] for k in UPSTREAM_STATUS_FIELDS}
    old_nodes = list(cd.status.nodes or []) if cd.status else []
    events = tuple(transition_events(old_nodes, nodes, previous, conditions, memory.warned_once))
    if projection.status_equal(stored, desired):
        quiet = replace(memory, progress_held_since=None)  # what was held is moot
        if mode.upstream_only and conditions != previous:
            # No write carries them, yet their transitions are still news.
            return StatusPlan(
                desired=desired,
                conditions=conditions,
                events=events,
                requeue_after=requeue,
                memory=replace(quiet, conditions=conditions),
            )
        return StatusPlan(
            desired=desired, conditions=conditions, requeue_after=requeue, memory=quiet
        )

    flips = stored.get("status") != desired["status"]
    flips = flips or _ready(previous) != _ready(conditions)
    hold: float | None = None
    held = memory
    if deleting:
        pass  # what a deletion says goes out at once
    elif _progress_only(stored, desired, previous, conditions):
        hold, held = _progress_hold(memory, now, window)
    elif not flips:
        hold, held = _coalescing(memory, now, window)
    if hold is not None:
        # Folded into one write at the window's end; that reconcile recomputes from the
        # caches, so it carries whatever changed meanwhile.
        return StatusPlan(
            desired=desired,
            conditions=conditions,
            requeue_after=_sooner(requeue, hold),
            memory=held,
        )
    written = _wrote(memory, now, window)
    if mode.upstream_only:
        # Only once written: a held or failed write leaves their transitions to the next.
        written = replace(written, conditions=conditions)
    return StatusPlan(
        desired=desired,
        conditions=conditions,
        patch={"metadata": {"resourceVersion": resource_version}, "status": desired},
        events=events,
        requeue_after=requeue,
        memory=memory,
        written=written,
    )


def _sooner(current: float | None, delay: float) -> float:
    return delay if current is None else min(current, delay)


def _previous_conditions(
    cd: ComputeDomain, memory: StatusMemory, mode: StatusMode
) -> list[Condition]:
    """The conditions the last write carried: in memory while the CRD prunes them."""
    if mode.upstream_only:
        return memory.conditions
    return list(cd.status.conditions or []) if cd.status else []


def _coalescing(memory: StatusMemory, now: float, base: float) -> tuple[float | None, StatusMemory]:
    """How long a status change waits to be folded with the next ones (None: write now), and
    the memory after.

    The first change after a quiet window goes out at once (an isolated change is not
    delayed); changes within the window after a write wait for its end, so a bring-up of
    many daemons costs a few status writes instead of several per daemon.
    """
    last = memory.status_written_at
    if base <= 0 or last is None:
        return None, memory
    wait = last + (memory.status_window or base) - now
    if wait <= 0:
        return None, memory
    return wait, replace(memory, status_held=True)


def _progress_hold(
    memory: StatusMemory, now: float, base: float
) -> tuple[float | None, StatusMemory]:
    """How long a change of the conditions' words alone waits (None: write now), and the
    memory after.

    A daemon pod seen before its daemon's clique entry (Ready False, DaemonsStarting) is
    news to nobody: the workload waits for the node's entry, which is written at once. Held
    one window from when it was first seen, it is folded into that entry's write; a daemon
    slower than the window still shows as starting, at most one window late.
    """
    if base <= 0:
        return None, memory
    since = memory.progress_held_since if memory.progress_held_since is not None else now
    coalescing, held = _coalescing(memory, now, base)
    wait = max(since + base - now, coalescing or 0.0)
    if wait <= 0:
        return None, memory
    return wait, replace(held, progress_held_since=since)


def _wrote(memory: StatusMemory, now: float, base: float) -> StatusMemory:
    """After a status write: the next window is twice as long if this write folded held
    changes (they keep coming), up to ``MAX_WINDOW_FACTOR``, else the configured one."""
    window = memory.status_window or base
    grown = min(window * 2, base * MAX_WINDOW_FACTOR)
    return replace(
        memory,
        status_window=grown if memory.status_held else base,
        status_held=False,
        progress_held_since=None,
        status_written_at=now,
    )
