"""What this process may do, reviewed once (runtime/access.py)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from computedomain.runtime import resources as r
from computedomain.runtime.access import REVIEWS_IN_FLIGHT, Access, Permission
from computedomain.runtime.client import ApiError
from tests.kit.rbac import Reviewer

RULES = [
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "update"]},
    {
        "apiGroups": ["apiextensions.k8s.io"],
        "resources": ["customresourcedefinitions"],
        "resourceNames": ["a.example.com"],
        "verbs": ["list"],
    },
]
ROLE = [{"apiGroups": ["apps"], "resources": ["daemonsets"], "verbs": ["patch"]}]
NODE_PATCH = Permission("patch", r.NODES)
NODE_UPDATE = Permission("update", r.NODES)
DS_PATCH = Permission("patch", r.DAEMONSETS, namespace="driver")
CRD_A = Permission("list", r.CUSTOM_RESOURCE_DEFINITIONS, name="a.example.com")
CRD_B = Permission("list", r.CUSTOM_RESOURCE_DEFINITIONS, name="b.example.com")


async def test_the_answers_decide_and_what_was_not_asked_counts_as_granted() -> None:
    reviewer = Reviewer(RULES, ROLE, ["driver"])
    access = Access()
    await access.review(reviewer, [NODE_PATCH, NODE_UPDATE, DS_PATCH, CRD_A, CRD_B, NODE_PATCH])

    assert len(reviewer.reviews) == 5  # each permission once
    assert reviewer.reviews[2] == {
        "verb": "patch",
        "group": "apps",
        "version": "v1",
        "resource": "daemonsets",
        "namespace": "driver",
    }
    assert access.denied([NODE_PATCH, NODE_UPDATE, DS_PATCH, CRD_A, CRD_B]) == [NODE_PATCH, CRD_B]
    assert access.allows(Permission("delete", r.NODES))  # never asked
    # A namespace not reviewed on its own takes the answer for every namespace.
    access.deny(Permission("patch", r.DAEMONSETS))
    assert not access.allows(Permission("patch", r.DAEMONSETS, namespace="elsewhere"))
    assert access.allows(DS_PATCH)


async def test_reviews_that_cannot_be_had_leave_everything_granted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reviewer = Reviewer(RULES, refuse=ApiError(403, "Forbidden", "no reviews for you"))
    access = Access()
    with caplog.at_level(logging.WARNING):
        await access.review(reviewer, [NODE_PATCH, CRD_B])
    assert access.denied([NODE_PATCH, CRD_B]) == []
    assert len(caplog.records) == 1  # one line, not one per permission
    assert "selfsubjectaccessreviews" in caplog.records[0].getMessage()


def test_a_permission_reads_as_rbac_would_name_it() -> None:
    assert str(Permission("patch", r.NODES)) == "patch nodes"
    assert str(Permission("create", r.EVENTS)) == "create events.events.k8s.io in every namespace"
    assert str(DS_PATCH) == "patch daemonsets.apps in namespace driver"
    assert str(CRD_A) == "list customresourcedefinitions.apiextensions.k8s.io a.example.com"


def test_only_the_authorizers_403_is_a_denial() -> None:
    rbac = ApiError(
        403,
        "Forbidden",
        'nodes "n1" is forbidden: User "system:serviceaccount:x:y" cannot patch resource '
        '"nodes" in API group "" at the cluster scope',
    )
    terminating = ApiError(
        403,
        "Forbidden",
        "unable to create new content in namespace x because it is being terminated",
    )
    assert rbac.is_denied
    assert not terminating.is_denied
    assert not ApiError(404, "NotFound", rbac.message).is_denied


async def test_reviews_are_sent_a_few_at_a_time() -> None:
    """All at once opened a connection each and the process kept their memory for its life."""
    in_flight, most = 0, 0
    release = asyncio.Event()

    class Slow:
        async def create(self, res: Any, body: dict[str, Any], namespace: str | None = None) -> Any:
            nonlocal in_flight, most
            in_flight += 1
            most = max(most, in_flight)
            await release.wait()
            in_flight -= 1
            return {"status": {"allowed": True}}

    wanted = [Permission("get", r.NODES, namespace=f"ns-{index}") for index in range(20)]
    review = asyncio.create_task(Access().review(Slow(), wanted))
    for _ in range(5):
        await asyncio.sleep(0)  # let every review that may start, start
    assert most == REVIEWS_IN_FLIGHT
    release.set()
    await review
