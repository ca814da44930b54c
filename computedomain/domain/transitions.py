"""Which Events a status change of a ComputeDomain is worth (pure).

A Warning is for a person to act on: it comes only when something is wrong or late, once per
problem, and its note (the condition's message) says what to do.

- nodes that join or leave ``status.nodes``: one ``NodeJoined`` and one ``NodeLeft`` (Normal) per
  status write, naming the nodes (at most ``NODES_LISTED``, then how many more). They are about
  the CD alone (no ``related`` Node), so they are isomorphic and the recorder folds later
  batches into the first Event's series: a bring-up of any size costs two Event writes (create,
  then count 2; later counts are flushed when the series goes quiet). ``status.nodes`` names
  every node;
- a condition whose status or reason changed: an event for ``Ready`` always (with its reason:
  ``AllNodesJoined`` when it turns True), and for a warning
  condition (``conditions.WARNING_CONDITIONS``) when it turns False. True, or a reason that is
  progress (``conditions.PROGRESS_REASONS``: waiting for the workload, daemons starting within
  their grace period, nodes still joining, deleting), is Normal, and a warning condition's
  progress is no event at all; anything else is a Warning. Ready often repeats a
  sub-condition's verdict word for word; one event says it. A new CD's first verdict is
  recorded only if it is a Warning: its progress (waiting for the workload) is what the
  ``Created`` Event and the condition already say;
- ``ONCE_PER_DOMAIN`` reasons (a domain spanning cliques, a clique shared with another domain)
  warn once per ComputeDomain: the caller passes the reasons it already warned about.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from computedomain.api.v1beta1 import ComputeDomainNode, Condition
from computedomain.domain.conditions import (
    CLIQUE_SHARED,
    MULTIPLE_CLIQUES,
    PROGRESS_REASONS,
    WARNING_CONDITIONS,
    listing,
)
from computedomain.runtime.event_types import NORMAL, WARNING

# Placement findings: true for the domain's whole life once seen, and the advice does not
# change, so a domain that flaps between sharing and not is told once.
ONCE_PER_DOMAIN = frozenset({MULTIPLE_CLIQUES, CLIQUE_SHARED})
# Node names one NodeJoined/NodeLeft note lists before "and N more" (notes stay short).
NODES_LISTED = 10


@dataclass(frozen=True)
class EventSpec:
    """An Event to record about the CD."""

    type: str
    reason: str
    action: str
    note: str


def _nodes(names: Sequence[str]) -> str:
    return f"Node {names[0]}" if len(names) == 1 else f"Nodes {listing(names, NODES_LISTED)}"


def node_events(
    before: Iterable[ComputeDomainNode], after: Iterable[ComputeDomainNode]
) -> list[EventSpec]:
    old = {n.name: n for n in before}
    new = {n.name: n for n in after}
    events: list[EventSpec] = []
    joined = sorted(new.keys() - old.keys())
    if joined:
        by_clique: dict[str, list[str]] = {}
        for name in joined:
            by_clique.setdefault(new[name].clique_id or "none", []).append(name)
        if len(by_clique) == 1:
            ((clique, names),) = by_clique.items()
            note = f"{_nodes(names)} joined (clique {clique})"
        else:
            where = "; ".join(
                f"clique {cl}: {listing(ns, NODES_LISTED)}" for cl, ns in sorted(by_clique.items())
            )
            note = f"{len(joined)} nodes joined ({where})"
        events.append(EventSpec(NORMAL, "NodeJoined", "Join", note))
    left = sorted(old.keys() - new.keys())
    if left:
        events.append(EventSpec(NORMAL, "NodeLeft", "Leave", f"{_nodes(left)} left"))
    return events


def condition_events(
    before: Sequence[Condition], after: Sequence[Condition], warned: Collection[str] = ()
) -> list[EventSpec]:
    old = {x.type: x for x in before}
    events: list[EventSpec] = []
    for new in after:
        prior = old.get(new.type)
        if prior is not None and prior.status == new.status and prior.reason == new.reason:
            continue
        healthy = new.status == "True" or new.reason in PROGRESS_REASONS
        if not before and healthy:
            continue  # a new CD's first verdict: only a Warning is news
        warn = new.status == "False" and new.type in WARNING_CONDITIONS and not healthy
        if new.type != "Ready" and not warn:
            continue
        if not healthy and new.reason in ONCE_PER_DOMAIN and new.reason in warned:
            continue
        event = EventSpec(
            NORMAL if healthy else WARNING,
            new.reason,  # the condition's own word: AllNodesJoined, HostManagedIMEX, a problem
            "Reconcile",
            new.message or new.reason,
        )
        if all(
            (e.type, e.reason, e.note) != (event.type, event.reason, event.note) for e in events
        ):
            events.append(event)
    return events


def transition_events(
    nodes_before: Iterable[ComputeDomainNode],
    nodes_after: Iterable[ComputeDomainNode],
    conditions_before: Sequence[Condition],
    conditions_after: Sequence[Condition],
    warned: Collection[str] = (),
) -> list[EventSpec]:
    """Every Event one status change is worth, nodes first, in a stable order. ``warned``:
    the ``ONCE_PER_DOMAIN`` reasons this domain has been warned about already."""
    return node_events(nodes_before, nodes_after) + condition_events(
        conditions_before, conditions_after, warned
    )
