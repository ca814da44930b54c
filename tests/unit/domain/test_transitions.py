"""The event-transition rules, as a table: (before, after) → the Events recorded."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from computedomain.api.v1beta1 import ComputeDomainNode, Condition
from computedomain.domain.transitions import EventSpec, transition_events

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def cond(ctype: str, status: str, reason: str, message: str = "") -> Condition:
    return Condition(
        type=ctype, status=status, reason=reason, message=message, last_transition_time=T0
    )


def node(name: str, clique: str = "c.1") -> ComputeDomainNode:
    return ComputeDomainNode.model_validate(
        {"name": name, "ipAddress": "10.0.0.1", "cliqueID": clique, "index": 0, "status": "Ready"}
    )


READY = cond("Ready", "True", "AllNodesJoined", "all daemons ready")
HOST_READY = cond("Ready", "True", "HostManagedIMEX", "admitted")
WAITING = cond("Ready", "False", "WaitingForWorkload", "no workload pod yet")
NOT_READY = cond("Ready", "False", "DaemonsNotReady", "n1: starting")
DAEMONS_NOT_READY = cond("DaemonsReady", "False", "DaemonsNotReady", "n1: starting")
DAEMONS_READY = cond("DaemonsReady", "True", "AllReady", "")
SHARED = cond("ExclusiveClique", "False", "CliqueShared", "c.1 also runs ns/other")
CHILDREN_OK = cond("ChildrenReady", "True", "AllCreated")
STARTING = cond("Ready", "False", "DaemonsStarting", "0 of 1 daemon ready; pod p: Pending")
DAEMONS_STARTING = cond(
    "DaemonsReady", "False", "DaemonsStarting", "0 of 1 daemon ready; pod p: Pending"
)
TOO_FEW = cond("Ready", "False", "TooFewNodes", "1 of 2 expected nodes joined")
DELETING = cond("Ready", "False", "Deleting", "being deleted")
CHILDREN_DELETING = cond("ChildrenReady", "False", "Deleting", "being deleted")
SPANS = cond("SingleClique", "False", "MultipleCliques", "Nodes span 2 NVLink cliques")
FOREIGN = cond("Ready", "False", "ForeignObject", "RCT ns/x belongs to ComputeDomain ns/y")
CHILDREN_FOREIGN = cond(
    "ChildrenReady", "False", "ForeignObject", "RCT ns/x belongs to ComputeDomain ns/y"
)


@pytest.mark.parametrize(
    ("before", "after", "events"),
    [
        pytest.param([], [WAITING], [], id="a new CD waits: Created and the condition say it"),
        pytest.param([], [FOREIGN], [EventSpec("Warning", "ForeignObject", "Reconcile",
                     "RCT ns/x belongs to ComputeDomain ns/y")],
                     id="a new CD's first verdict is a problem: Warning"),
        pytest.param([CHILDREN_OK], [CHILDREN_OK, WAITING], [EventSpec("Normal",
                     "WaitingForWorkload", "Reconcile", "no workload pod yet")],
                     id="a later verdict of progress: Normal"),
        pytest.param([WAITING], [WAITING], [], id="unchanged: nothing"),
        pytest.param([WAITING], [cond("Ready", "False", "WaitingForWorkload", "other words")], [],
                     id="only the message changed: nothing"),
        pytest.param([WAITING], [READY], [EventSpec("Normal", "AllNodesJoined", "Reconcile",
                     "all daemons ready")], id="Ready turns True: Normal, the condition's reason"),
        pytest.param([FOREIGN], [HOST_READY], [EventSpec("Normal", "HostManagedIMEX",
                     "Reconcile", "admitted")], id="host-managed Ready turns True: its reason"),
        pytest.param([READY], [NOT_READY], [EventSpec("Warning", "DaemonsNotReady", "Reconcile",
                     "n1: starting")], id="Ready turns False: Warning"),
        pytest.param([READY], [NOT_READY, DAEMONS_NOT_READY], [EventSpec("Warning",
                     "DaemonsNotReady", "Reconcile", "n1: starting")],
                     id="Ready repeating a sub-condition word for word: one event"),
        pytest.param([], [SHARED], [EventSpec("Warning", "CliqueShared", "Reconcile",
                     "c.1 also runs ns/other")], id="a warning condition turns False: Warning"),
        pytest.param([DAEMONS_NOT_READY], [DAEMONS_READY], [],
                     id="a warning condition turns True: nothing"),
        pytest.param([], [CHILDREN_OK], [], id="other conditions: nothing"),
        pytest.param([], [cond("Ready", "False", "", "")], [EventSpec("Warning", "", "Reconcile",
                     "")], id="no message: the reason is the note"),
        # Issue 12.1: a normal start is no Warning; daemons late after the grace period are.
        pytest.param([WAITING], [STARTING, DAEMONS_STARTING], [EventSpec("Normal",
                     "DaemonsStarting", "Reconcile", "0 of 1 daemon ready; pod p: Pending")],
                     id="daemons starting: Normal, and no DaemonsReady event"),
        pytest.param([STARTING, DAEMONS_STARTING], [NOT_READY, DAEMONS_NOT_READY], [EventSpec(
                     "Warning", "DaemonsNotReady", "Reconcile", "n1: starting")],
                     id="starting turns late: one Warning"),
        pytest.param([READY], [TOO_FEW], [EventSpec("Normal", "TooFewNodes", "Reconcile",
                     "1 of 2 expected nodes joined")], id="numNodes not reached: Normal"),
        pytest.param([READY, CHILDREN_OK], [DELETING, CHILDREN_DELETING], [EventSpec("Normal",
                     "Deleting", "Reconcile", "being deleted")],
                     id="a deletion someone asked for: one Normal"),
        pytest.param([WAITING], [FOREIGN, CHILDREN_FOREIGN], [EventSpec("Warning",
                     "ForeignObject", "Reconcile", "RCT ns/x belongs to ComputeDomain ns/y")],
                     id="a clash: one Warning for Ready and ChildrenReady"),
    ],
)  # fmt: skip
def test_condition_transitions(
    before: list[Condition], after: list[Condition], events: list[EventSpec]
) -> None:
    assert transition_events([], [], before, after) == events


@pytest.mark.parametrize(
    ("before", "after", "events"),
    [
        pytest.param([], [node("n1", "")], [
            EventSpec("Normal", "NodeJoined", "Join", "Node n1 joined (clique none)"),
        ], id="a lone join; no clique says none"),
        pytest.param([node("n0")], [node("n0"), node("n2"), node("n1")], [
            EventSpec("Normal", "NodeJoined", "Join", "Nodes n1, n2 joined (clique c.1)"),
        ], id="joins in one write: one Event, by name"),
        pytest.param([], [node("n2"), node("n1", "")], [
            EventSpec("Normal", "NodeJoined", "Join",
                      "2 nodes joined (clique c.1: n2; clique none: n1)"),
        ], id="joins across cliques: one Event, by clique"),
        pytest.param([], [node(f"n{i:02d}") for i in range(12)], [
            EventSpec("Normal", "NodeJoined", "Join", "Nodes n00, n01, n02, n03, n04, n05, n06, "
                      "n07, n08, n09 and 2 more joined (clique c.1)"),
        ], id="many joins: the first ten and how many more"),
        pytest.param([node("n1"), node("n2")], [node("n2")], [
            EventSpec("Normal", "NodeLeft", "Leave", "Node n1 left"),
        ], id="a leave"),
        pytest.param([node("n1"), node("n2"), node("n3")], [node("n2")], [
            EventSpec("Normal", "NodeLeft", "Leave", "Nodes n1, n3 left"),
        ], id="leaves in one write: one Event"),
        pytest.param([node("n1")], [node("n1", "c.2")], [], id="a node that stays: nothing"),
    ],
)  # fmt: skip
def test_node_transitions(
    before: list[ComputeDomainNode], after: list[ComputeDomainNode], events: list[EventSpec]
) -> None:
    assert transition_events(before, after, [], []) == events


@pytest.mark.parametrize("finding", [SHARED, SPANS], ids=["shared", "spans"])
def test_placement_findings_warn_once_per_domain(finding: Condition) -> None:
    (first,) = transition_events([], [], [], [finding])
    assert (first.type, first.reason) == ("Warning", finding.reason)
    # Once warned, the finding turning False again (it flapped) is not news.
    assert transition_events([], [], [], [finding], warned={finding.reason}) == []
    # Other warnings are not limited.
    assert transition_events([], [], [READY], [NOT_READY], warned={finding.reason}) != []


def test_nodes_come_before_conditions() -> None:
    events = transition_events([], [node("n1")], [CHILDREN_OK], [CHILDREN_OK, WAITING])
    assert [e.reason for e in events] == ["NodeJoined", "WaitingForWorkload"]
