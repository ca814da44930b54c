"""A daemon on a deleted or NotReady Node never counts as ready (issue 9.7), and a CD that
cannot work says what is missing (issue 9.6)."""

from __future__ import annotations

from computedomain.domain import projection
from computedomain.domain.childkinds import ChildKind
from computedomain.domain.conditions import ChildState, ChildStatus, conditions_for
from tests.unit.domain.test_conditions import OK_CHILDREN, T0, by_type, node, pod, view


def test_lost_nodes_are_named_and_discounted() -> None:
    nodes = [node("n1"), node("n2"), node("n3")]
    ready = {"n1": True, "n2": False}
    lost = projection.lost_nodes(nodes, ready.get)
    assert lost == {"n2": "Node NotReady", "n3": "Node deleted"}
    discounted = projection.discount_lost(nodes, lost)
    assert [(n.name, n.status) for n in discounted] == [
        ("n1", "Ready"),
        ("n2", "NotReady"),
        ("n3", "NotReady"),
    ]
    assert projection.global_status(discounted, 0) == "NotReady"


def test_daemons_on_lost_nodes_are_reported_by_their_node() -> None:
    lost = {"n2": "Node deleted"}
    nodes = projection.discount_lost([node("n1"), node("n2")], lost)
    conds = by_type(
        conditions_for(view(nodes=nodes, pods=[pod("n1"), pod("n2")], lost_nodes=lost), 1, T0, [])
    )
    assert conds["DaemonsReady"].status == "False"
    assert "1 of 2 daemons ready; n2: Node deleted" in conds["DaemonsReady"].message
    assert conds["Ready"].status == "False"


def test_a_cd_without_spec_is_invalid_and_says_what_is_missing() -> None:
    children = {ChildKind.SPEC: ChildState(ChildStatus.INVALID, "spec is missing: needs X")}
    conds = by_type(conditions_for(view(children=children), 1, T0, []))
    assert (conds["ChildrenReady"].status, conds["ChildrenReady"].reason) == (
        "False",
        "InvalidSpec",
    )
    assert (conds["Ready"].reason, conds["Ready"].message) == (
        "InvalidSpec",
        "spec is missing: needs X",
    )
    assert view(children=children).invalid == "spec is missing: needs X"
    assert view(children=OK_CHILDREN).invalid is None
