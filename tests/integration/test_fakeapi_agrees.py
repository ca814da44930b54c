"""The unit tests' apiserver (tests/kit/fakeapi.py) answers as the real one where the controller
relies on it: the same requests, sent to both, get the same answers. Label selectors of every
form the code sends (exists, equality, set-based), field selectors, merge patches that touch
metadata, a JSON patch whose test fails (all or nothing), a stale resourceVersion (409), and
deletion with and without finalizers."""

from __future__ import annotations

from typing import Any

from computedomain.runtime.client import ApiError, KubeClient
from computedomain.runtime.resources import Resource
from tests.kit.fakeapi import FakeApiServer

CONFIG_MAPS = Resource("", "v1", "configmaps", "ConfigMap", namespaced=True)
FINALIZER = "example.com/hold"
LABELS = {
    "a": {"app": "x", "tier": "web"},
    "b": {"app": "y"},
    "c": {"tier": "db"},
    "d": {},
}
SELECTORS = [
    "app",
    "!app",
    "app=x",
    "app==x",
    "app!=x",
    "app in (x,y)",
    "app notin (x)",
    "app,tier=web",
    "tier in (db), !app",
]
FIELD_SELECTORS = ["metadata.name=b", "metadata.name!=b"]

Api = KubeClient | FakeApiServer


async def status_of(call: Any) -> int:
    try:
        await call
    except ApiError as err:
        return err.status
    return 200


async def scenario(api: Api, namespace: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for name, labels in LABELS.items():
        body = {"metadata": {"name": name, "labels": labels}, "data": {"k": "v"}}
        await api.create(CONFIG_MAPS, body, namespace)

    async def names(labels: str | None = None, fields: str | None = None) -> list[str]:
        listed = await api.list(
            CONFIG_MAPS, namespace, label_selector=labels, field_selector=fields
        )
        # Only ours: the real namespace also holds the kube-root-ca.crt ConfigMap.
        return sorted(n for item in listed["items"] if (n := item["metadata"]["name"]) in LABELS)

    for selector in SELECTORS:
        seen[f"labels {selector}"] = await names(labels=selector)
    for selector in FIELD_SELECTORS:
        seen[f"fields {selector}"] = await names(fields=selector)

    # A merge patch changes metadata too (labels, annotations, finalizers).
    patch = {"metadata": {"labels": {"app": None, "team": "t"}, "annotations": {"n": "1"}}}
    patched = await api.patch(CONFIG_MAPS, "a", patch, namespace)
    seen["merge metadata"] = (patched["metadata"].get("labels"), patched["metadata"]["annotations"])

    # A JSON patch applies whole or not at all.
    ops = [
        {"op": "add", "path": "/metadata/labels/added", "value": "yes"},
        {"op": "test", "path": "/metadata/labels/app", "value": "nope"},
    ]
    seen["json patch, failed test"] = await status_of(
        api.patch(CONFIG_MAPS, "b", ops, namespace, patch_type="json")
    )
    seen["after the failed test"] = (await api.get(CONFIG_MAPS, "b", namespace))["metadata"][
        "labels"
    ]

    # A stale resourceVersion is a conflict.
    stale = {"metadata": {"resourceVersion": "1"}, "data": {"k": "w"}}
    seen["stale merge patch"] = await status_of(api.patch(CONFIG_MAPS, "c", stale, namespace))

    # Deletion: gone at once without finalizers; marked, then gone when the last one goes.
    await api.delete(CONFIG_MAPS, "d", namespace)
    seen["deleted, no finalizer"] = await status_of(api.get(CONFIG_MAPS, "d", namespace))
    held = {"metadata": {"finalizers": [FINALIZER]}}
    await api.patch(CONFIG_MAPS, "c", held, namespace)
    await api.delete(CONFIG_MAPS, "c", namespace)
    marked = await api.get(CONFIG_MAPS, "c", namespace)
    seen["deleted, finalizer held"] = (
        "deletionTimestamp" in marked["metadata"],
        marked["metadata"]["finalizers"],
    )
    release = [
        {"op": "test", "path": "/metadata/finalizers/0", "value": FINALIZER},
        {"op": "remove", "path": "/metadata/finalizers/0"},
    ]
    await api.patch(CONFIG_MAPS, "c", release, namespace, patch_type="json")
    seen["finalizer released"] = await status_of(api.get(CONFIG_MAPS, "c", namespace))
    return seen


async def test_the_fake_apiserver_answers_as_the_real_one(kube: KubeClient, namespace: str) -> None:
    real = await scenario(kube, namespace)
    fake = await scenario(FakeApiServer(), namespace)
    assert fake == real
    # The answers themselves, so both agreeing on nothing could not pass.
    assert real["labels app"] == ["a", "b"]
    assert real["labels !app"] == ["c", "d"]
    assert real["labels app notin (x)"] == ["b", "c", "d"]
    assert real["json patch, failed test"] == 422
    assert real["stale merge patch"] == 409
    assert real["deleted, no finalizer"] == 404
    assert real["deleted, finalizer held"] == (True, [FINALIZER])
    assert real["finalizer released"] == 404
