"""Which Events a status change of a ComputeDomain is worth (pure).

A Warning is for a person to act on: it comes only when something is wrong or late, once per
problem, and its note (the condition's message) says what to do.

- a node that joins or leaves ``status.nodes``: ``NodeJoined`` / ``NodeLeft`` (Normal), with the
  Node as ``related``, so each node's join or leave is its own event series;
- a condition whose status or reason changed: an event for ``Ready`` always, and for a warning
  condition (``conditions.WARNING_CONDITIONS``) when it turns False. True, or a reason that is
  progress (``conditions.PROGRESS_REASONS``: waiting for the workload, daemons starting within
  their grace period, nodes still joining, deleting), is Normal, and a warning condition's
  progress is no event at all; anything else is a Warning. Ready often repeats a
  sub-condition's verdict word for word; one event says it;
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
)

NORMAL = "Normal"
WARNING = "Warning"
# Placement findings: true for the domain's whole life once seen, and the advice does not
# change, so a domain that flaps between sharing and not is told once.
ONCE_PER_DOMAIN = frozenset({MULTIPLE_CLIQUES, CLIQUE_SHARED})


@dataclass(frozen=True)
class EventSpec:
    """An Event to record about the CD; ``node`` names the Node it is related to, if any."""

    type: str
    reason: str
    action: str
    note: str
    node: str | None = None


def node_events(
    before: Iterable[ComputeDomainNode], after: Iterable[ComputeDomainNode]
) -> list[EventSpec]:
    old = {n.name: n for n in before}
    new = {n.name: n for n in after}
    joined = [
        EventSpec(
            NORMAL,
            "NodeJoined",
            "Join",
            f"Node {name} joined (clique {new[name].clique_id or 'none'})",
            node=name,
        )
        for name in sorted(new.keys() - old.keys())
    ]
    left = [
        EventSpec(NORMAL, "NodeLeft", "Leave", f"Node {name} left", node=name)
        for name in sorted(old.keys() - new.keys())
    ]
    return joined + left


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
        warn = new.status == "False" and new.type in WARNING_CONDITIONS and not healthy
        if new.type != "Ready" and not warn:
            continue
        if not healthy and new.reason in ONCE_PER_DOMAIN and new.reason in warned:
            continue
        event = EventSpec(
            NORMAL if healthy else WARNING,
            new.reason if new.status != "True" else "Ready",
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
