"""A patch where RBAC grants it, else the same change by update (runtime/updates.py), against
the fake apiserver: the calls made, what each PUT carries, and the patch's own refusals."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from computedomain.runtime import patches
from computedomain.runtime import resources as r
from computedomain.runtime.access import Access, Permission
from computedomain.runtime.client import ApiError
from computedomain.runtime.resources import Resource
from computedomain.runtime.updates import Patcher
from tests.kit.fakeapi import FakeApiServer, denied

FIN = "resource.nvidia.com/computeDomain"
LABEL = "resource.nvidia.com/computeDomain"
NODE: dict[str, Any] = {"metadata": {"name": "n1", "labels": {LABEL: "uid-a", "zone": "z"}}}


def no_patch(*resources: Resource) -> Access:
    """RBAC as NVIDIA's: update, but no patch, on ``resources`` (and their status)."""
    access = Access()
    for res in resources:
        access.deny(Permission("patch", res))
        access.deny(Permission("patch", res, "status"))
    return access


@pytest.fixture
def api() -> FakeApiServer:
    return FakeApiServer()


async def test_where_patch_is_granted_it_is_one_patch(api: FakeApiServer) -> None:
    api.add(r.NODES, NODE)
    await Patcher(api).patch(
        r.NODES, "n1", patches.remove_label_if(LABEL, "uid-a"), patch_type="json"
    )
    assert api.calls == [("patch", "nodes", "n1")]


async def test_a_label_is_removed_by_update_checked_on_the_node_read(api: FakeApiServer) -> None:
    stored = api.add(r.NODES, NODE)
    patcher = Patcher(api, no_patch(r.NODES))

    written = await patcher.patch(
        r.NODES, "n1", patches.remove_label_if(LABEL, "uid-a"), patch_type="json"
    )

    assert api.calls == [("get", "nodes", "n1"), ("replace", "nodes", "n1")]
    sent = api.bodies[1]
    assert sent["metadata"]["resourceVersion"] == stored["metadata"]["resourceVersion"]
    assert sent["metadata"]["labels"] == {"zone": "z"}  # only our label went
    assert written["metadata"]["labels"] == {"zone": "z"}


async def test_a_label_that_names_another_cd_is_left_alone_by_update(api: FakeApiServer) -> None:
    api.add(r.NODES, NODE)
    with pytest.raises(ApiError) as refused:
        await Patcher(api, no_patch(r.NODES)).patch(
            r.NODES, "n1", patches.remove_label_if(LABEL, "uid-b"), patch_type="json"
        )
    assert refused.value.is_invalid  # the apiserver's answer to the patch's failed test
    assert api.calls == [("get", "nodes", "n1")]  # no PUT
    assert api.objects[("nodes", "", "n1")]["metadata"]["labels"][LABEL] == "uid-a"


async def test_a_409_on_the_put_is_retried_from_a_fresh_read(api: FakeApiServer) -> None:
    """A heartbeat moved the Node between the read and the PUT: read again, check again."""
    api.add(r.NODES, NODE)
    patcher = Patcher(api, no_patch(r.NODES))
    read = await api.get(r.NODES, "n1")
    api.objects[("nodes", "", "n1")]["metadata"]["labels"]["zone"] = "y"
    api.bump(r.NODES, "n1")
    api.forget_calls()

    await patcher.patch(
        r.NODES, "n1", patches.remove_label_if(LABEL, "uid-a"), patch_type="json", current=read
    )

    assert api.calls == [
        ("replace", "nodes", "n1"),  # 409: the read is stale
        ("get", "nodes", "n1"),
        ("replace", "nodes", "n1"),
    ]
    assert api.objects[("nodes", "", "n1")]["metadata"]["labels"] == {"zone": "y"}


async def test_a_409_with_the_label_now_someone_elses_removes_nothing(api: FakeApiServer) -> None:
    api.add(r.NODES, NODE)
    read = await api.get(r.NODES, "n1")
    api.objects[("nodes", "", "n1")]["metadata"]["labels"][LABEL] = "uid-b"
    api.bump(r.NODES, "n1")
    api.forget_calls()

    with pytest.raises(ApiError) as refused:
        await Patcher(api, no_patch(r.NODES)).patch(
            r.NODES, "n1", patches.remove_label_if(LABEL, "uid-a"), patch_type="json", current=read
        )
    assert refused.value.is_invalid
    assert api.calls == [("replace", "nodes", "n1"), ("get", "nodes", "n1")]
    assert api.objects[("nodes", "", "n1")]["metadata"]["labels"][LABEL] == "uid-b"


async def test_a_finalizer_is_removed_by_update_and_the_object_goes(api: FakeApiServer) -> None:
    body = {"metadata": {"name": "t", "namespace": "ns", "finalizers": ["other", FIN]}}
    stored = api.add(r.RESOURCE_CLAIM_TEMPLATES, body)
    stored["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    api.objects[("resourceclaimtemplates", "ns", "t")] = stored
    patcher = Patcher(api, no_patch(r.RESOURCE_CLAIM_TEMPLATES))

    # Only ours: "other" stays, so the object stays too.
    written = await patcher.patch(
        r.RESOURCE_CLAIM_TEMPLATES,
        "t",
        patches.remove_finalizer(stored, FIN),
        "ns",
        patch_type="json",
    )
    assert written["metadata"]["finalizers"] == ["other"]
    api.objects[("resourceclaimtemplates", "ns", "t")]["metadata"]["finalizers"] = [FIN]
    fresh = api.bump(r.RESOURCE_CLAIM_TEMPLATES, "t", "ns")
    await patcher.patch(
        r.RESOURCE_CLAIM_TEMPLATES,
        "t",
        patches.remove_finalizer(fresh, FIN),
        "ns",
        patch_type="json",
        current=fresh,
    )
    assert ("resourceclaimtemplates", "ns", "t") not in api.objects  # the last one: deleted


async def test_a_status_pinned_to_its_version_is_not_retried_after_a_409(
    api: FakeApiServer,
) -> None:
    """The status was computed from the version read: a 409 goes back to the caller (which
    recomputes from its caches), as the merge patch's own 409 would."""
    res = Resource("resource.nvidia.com", "v1beta1", "computedomains", "ComputeDomain", True)
    read = api.add(res, {"metadata": {"name": "cd", "namespace": "ns"}, "status": {"a": 1}})
    api.bump(res, "cd", "ns")
    api.forget_calls()
    patch = {"metadata": {"resourceVersion": read["metadata"]["resourceVersion"]}, "status": {}}

    with pytest.raises(ApiError) as conflict:
        await Patcher(api, no_patch(res)).patch(
            res, "cd", patch, "ns", patch_type="merge", subresource="status", current=read
        )
    assert conflict.value.is_conflict
    assert api.calls == [("replace", "computedomains/status", "ns/cd")]


async def test_a_patch_the_authorizer_refuses_switches_to_update_once(
    api: FakeApiServer, caplog: pytest.LogCaptureFixture
) -> None:
    """RBAC edited while running (or not reviewed): the 403 is met once, then updates."""
    api.add(r.NODES, NODE)
    api.add(r.NODES, {"metadata": {"name": "n2", "labels": {LABEL: "uid-a"}}})
    api.refuse = lambda verb, res: denied(verb, res) if verb == "patch" else None
    patcher = Patcher(api)

    with caplog.at_level(logging.WARNING):
        for node in ("n1", "n2"):
            await patcher.patch(
                r.NODES, node, patches.remove_label_if(LABEL, "uid-a"), patch_type="json"
            )

    assert api.calls == [
        ("patch", "nodes", "n1"),
        ("get", "nodes", "n1"),
        ("replace", "nodes", "n1"),
        ("get", "nodes", "n2"),
        ("replace", "nodes", "n2"),
    ]
    warnings = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING]
    assert warnings == ["Patch refused (patch nodes not granted): writing by update from now on"]


async def test_another_403_on_a_patch_is_the_callers(api: FakeApiServer) -> None:
    """Not the authorizer's (admission, a namespace being deleted): no update instead."""
    api.add(r.NODES, NODE)
    api.refuse = lambda verb, res: ApiError(403, "Forbidden", "admission webhook denied it")
    with pytest.raises(ApiError):
        await Patcher(api).patch(
            r.NODES, "n1", patches.remove_label_if(LABEL, "uid-a"), patch_type="json"
        )
    assert api.calls == [("patch", "nodes", "n1")]


# -- patches.apply: the apiserver's semantics, here ------------------------------------------------


def test_apply_adds_a_finalizer_to_a_list_or_makes_the_list() -> None:
    obj = {"metadata": {"name": "x", "resourceVersion": "5"}}
    first = patches.apply(obj, patches.add_finalizer(obj, "a"), "json")
    assert first["metadata"]["finalizers"] == ["a"]
    second = patches.apply(first, patches.add_finalizer(first, "b"), "json")
    assert second["metadata"]["finalizers"] == ["a", "b"]
    assert "finalizers" not in obj["metadata"]  # the object read is never changed


def test_apply_refuses_as_the_apiserver_does() -> None:
    obj = {"metadata": {"name": "x", "resourceVersion": "5", "finalizers": ["b", "a"]}}
    stale = {"metadata": {"name": "x", "resourceVersion": "4", "finalizers": ["a"]}}
    with pytest.raises(ApiError) as moved:  # the finalizer is no longer at the index read
        patches.apply(obj, patches.remove_finalizer(stale, "a"), "json")
    assert moved.value.is_invalid
    with pytest.raises(ApiError) as missing:  # removing what is not there
        patches.apply(obj, [{"op": "remove", "path": "/metadata/labels/x"}], "json")
    assert missing.value.is_invalid
    with pytest.raises(ApiError) as conflict:  # made from another version
        patches.apply(obj, patches.add_finalizer(stale, "c"), "json")
    assert conflict.value.is_conflict


def test_apply_merges_as_rfc_7386() -> None:
    obj = {"metadata": {"resourceVersion": "5"}, "status": {"a": 1, "b": {"c": 2}, "n": [1]}}
    merged = patches.apply(
        obj,
        {"metadata": {"resourceVersion": "5"}, "status": {"a": None, "b": {"d": 3}, "n": [2]}},
        "merge",
    )
    assert merged["status"] == {"b": {"c": 2, "d": 3}, "n": [2]}
