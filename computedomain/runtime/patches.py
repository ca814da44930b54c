"""JSON patches (RFC 6902) that change one finalizer or one label, guarded by a ``test``.

A ``test`` makes the apiserver refuse the patch (422) when the object moved under us, so a
finalizer list that changed or a label that now names someone else is never clobbered.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from computedomain.runtime.objects import meta

Patch = list[dict[str, Any]]


def pointer(*parts: str) -> str:
    """A JSON pointer to ``parts`` (``~`` and ``/`` escaped as RFC 6901 says)."""
    return "".join("/" + part.replace("~", "~0").replace("/", "~1") for part in parts)


def add_finalizer(obj: Mapping[str, Any], finalizer: str, *, guard_rv: bool = True) -> Patch | None:
    """Adds ``finalizer``; None when present. ``guard_rv`` tests the resourceVersion first."""
    finalizers = meta(obj).get("finalizers")
    if finalizers and finalizer in finalizers:
        return None
    patch: Patch = []
    if guard_rv:
        rv = meta(obj)["resourceVersion"]
        patch.append({"op": "test", "path": "/metadata/resourceVersion", "value": rv})
    if finalizers:
        patch.append({"op": "add", "path": "/metadata/finalizers/-", "value": finalizer})
    else:
        patch.append({"op": "add", "path": "/metadata/finalizers", "value": [finalizer]})
    return patch


def remove_finalizer(obj: Mapping[str, Any], finalizer: str) -> Patch | None:
    """Removes ``finalizer`` at the index it has in ``obj``; None when absent."""
    finalizers = list(meta(obj).get("finalizers") or [])
    if finalizer not in finalizers:
        return None
    path = f"/metadata/finalizers/{finalizers.index(finalizer)}"
    return [{"op": "test", "path": path, "value": finalizer}, {"op": "remove", "path": path}]


def remove_label_if(key: str, value: str) -> Patch:
    """Removes label ``key`` only while it still has ``value``."""
    path = pointer("metadata", "labels", key)
    return [{"op": "test", "path": path, "value": value}, {"op": "remove", "path": path}]
