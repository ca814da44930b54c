"""Which Events a status change of a ComputeDomain is worth (pure).

- a node that joins or leaves ``status.nodes``: ``NodeJoined`` / ``NodeLeft`` (Normal), with the
  Node as ``related``, so each node's join or leave is its own event series;
- a condition whose status or reason changed: an event for ``Ready`` always, and for a warning
  condition (``conditions.WARNING_CONDITIONS``) when it turns False. Healthy (True, or a CD
  waiting for its workload, where every new CD starts) is Normal, anything else a Warning.
  Ready often repeats a sub-condition's verdict word for word; one event says it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from computedomain.api.v1beta1 import ComputeDomainNode, Condition
from computedomain.domain.conditions import WARNING_CONDITIONS

NORMAL = "Normal"
WARNING = "Warning"


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


def condition_events(before: Sequence[Condition], after: Sequence[Condition]) -> list[EventSpec]:
    old = {x.type: x for x in before}
    events: list[EventSpec] = []
    for new in after:
        prior = old.get(new.type)
        if prior is not None and prior.status == new.status and prior.reason == new.reason:
            continue
        warn = new.status == "False" and new.type in WARNING_CONDITIONS
        if new.type != "Ready" and not warn:
            continue
        healthy = new.status == "True" or new.reason == "WaitingForWorkload"
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
) -> list[EventSpec]:
    """Every Event one status change is worth, nodes first, in a stable order."""
    return node_events(nodes_before, nodes_after) + condition_events(
        conditions_before, conditions_after
    )
