"""Waiting on the real API: LIST, then WATCH from the listed resourceVersion, until a check
holds. Never sleeps, and cannot miss a change that lands between the two requests. Used by the
integration tests and the benchmark."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Any

from computedomain.runtime.client import ApiError, KubeClient
from computedomain.runtime.resources import Resource

Objects = dict[str, dict[str, Any]]
Predicate = Callable[[dict[str, Any] | None], bool]


def _key(obj: Mapping[str, Any], namespace: str | None) -> str:
    meta = obj["metadata"]
    if namespace is None and meta.get("namespace"):
        return f"{meta['namespace']}/{meta['name']}"
    return str(meta["name"])


def _summary(obj: Mapping[str, Any]) -> Any:
    # Enough to debug a timeout without pages of managedFields.
    if obj.get("kind") == "Event" or "regarding" in obj:
        return (obj.get("regarding", {}).get("kind"), obj.get("reason"), obj.get("note"))
    return {k: obj.get(k) for k in ("status", "daemons") if k in obj} or obj.get("metadata")


async def watch_objects(
    kube: KubeClient,
    res: Resource,
    check: Callable[[Objects], Any],
    *,
    namespace: str | None = None,
    label_selector: str | None = None,
    field_selector: str | None = None,
    within: float = 60.0,
    what: str = "",
) -> Any:
    """Until ``check(objects)`` is truthy, and returns that value. Objects are keyed by name,
    or by namespace/name when watching namespaced objects across all namespaces."""
    objects: Objects = {}
    try:
        async with asyncio.timeout(within):
            while True:
                try:
                    listing = await kube.list(
                        res, namespace, label_selector=label_selector, field_selector=field_selector
                    )
                except ApiError as err:
                    # A CRD just applied: its storage answers 429 until it is (re)initialized.
                    if not err.is_too_many_requests:
                        raise
                    await asyncio.sleep(err.retry_after or 0.2)
                    continue
                objects = {_key(o, namespace): o for o in listing["items"]}
                if result := check(objects):
                    return result
                try:
                    async for kind, obj in kube.watch(
                        res,
                        namespace,
                        label_selector=label_selector,
                        field_selector=field_selector,
                        resource_version=listing["metadata"]["resourceVersion"],
                        timeout_seconds=int(within) + 5,
                    ):
                        if kind == "BOOKMARK":
                            continue
                        if kind == "DELETED":
                            objects.pop(_key(obj, namespace), None)
                        else:
                            objects[_key(obj, namespace)] = obj
                        if result := check(objects):
                            return result
                except ApiError as err:
                    if not err.is_gone:  # 410: list again
                        raise
    except TimeoutError:
        summary = {name: _summary(obj) for name, obj in objects.items()}
        raise TimeoutError(f"timed out waiting for {what}; last seen: {summary}") from None


async def watch_object(
    kube: KubeClient,
    res: Resource,
    name: str,
    predicate: Predicate,
    *,
    namespace: str | None = None,
    within: float = 60.0,
    what: str = "",
) -> dict[str, Any] | None:
    """Until ``predicate(obj)`` holds for one object (None while it is absent); returns it."""
    found: list[dict[str, Any] | None] = []

    def check(objects: Objects) -> bool:
        obj = objects.get(name)
        if predicate(obj):
            found.append(obj)
            return True
        return False

    await watch_objects(
        kube,
        res,
        check,
        namespace=namespace,
        field_selector=f"metadata.name={name}",
        within=within,
        what=what or f"{res.kind} {name}",
    )
    return found[-1]


async def watch_present(
    kube: KubeClient,
    res: Resource,
    name: str,
    predicate: Callable[[dict[str, Any]], bool],
    *,
    namespace: str | None = None,
    within: float = 60.0,
    what: str = "",
) -> dict[str, Any]:
    """Until the object exists and ``predicate(obj)`` holds for it; returns it."""
    found = await watch_object(
        kube,
        res,
        name,
        lambda obj: obj is not None and predicate(obj),
        namespace=namespace,
        within=within,
        what=what,
    )
    assert found is not None  # only a present object satisfies the check
    return found
