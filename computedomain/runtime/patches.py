"""JSON patches (RFC 6902) that change one finalizer or one label, guarded by a ``test``.

A ``test`` makes the apiserver refuse the patch (422) when the object moved under us, so a
finalizer list that changed or a label that now names someone else is never clobbered.
``apply`` makes the same change to an object read, with the same refusals, for a write by
update where ``patch`` is not granted (``updates.Patcher``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from computedomain.runtime.errors import ApiError
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


# -- the same change, applied here (for an update where patch is not granted) ------------------


def _unescape(part: str) -> str:
    return part.replace("~1", "/").replace("~0", "~")


def _invalid(patch: Any, why: str) -> ApiError:
    """What the apiserver answers for a JSON patch that does not apply (422 Invalid)."""
    return ApiError(422, "Invalid", f"the patch {patch!r} does not apply: {why}")


def _apply_op(obj: dict[str, Any], op: Mapping[str, Any], patch: Any) -> None:
    path = str(op.get("path", ""))
    if not path.startswith("/"):
        raise _invalid(patch, f"path {path!r} is not a JSON pointer")
    *parents, last = (_unescape(part) for part in path[1:].split("/"))
    target: Any = obj
    kind, ok = op.get("op"), True
    try:
        for part in parents:
            target = target[int(part)] if isinstance(target, list) else target[part]
        if isinstance(target, list):
            index = len(target) if (kind == "add" and last == "-") else int(last)
            if not 0 <= index <= len(target) - (0 if kind == "add" else 1):
                raise IndexError(index)
            if kind == "test":
                ok = target[index] == op.get("value")
            elif kind == "add":
                target.insert(index, copy.deepcopy(op.get("value")))
            elif kind == "remove":
                del target[index]
            elif kind == "replace":
                target[index] = copy.deepcopy(op.get("value"))
        elif isinstance(target, dict):
            if kind in ("test", "remove", "replace") and last not in target:
                raise KeyError(last)
            if kind == "test":
                ok = target[last] == op.get("value")
            elif kind in ("add", "replace"):
                target[last] = copy.deepcopy(op.get("value"))
            elif kind == "remove":
                del target[last]
        else:
            raise KeyError(last)
    except (KeyError, IndexError, ValueError, TypeError):
        raise _invalid(patch, f"{path} does not exist") from None
    if kind not in ("test", "add", "remove", "replace"):
        raise _invalid(patch, f"op {kind!r} is not supported here")
    if kind == "test" and not ok:
        raise _invalid(patch, f"test failed at {path}")


def _merge(target: dict[str, Any], patch: Mapping[str, Any]) -> None:
    """RFC 7386: null deletes, objects merge, anything else replaces."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, Mapping):
            if not isinstance(target.get(key), dict):
                target[key] = {}
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def pinned_version(patch: Any, patch_type: str) -> str | None:
    """The resourceVersion a patch insists on (a JSON patch's ``test`` of it, a merge patch's
    ``metadata.resourceVersion``): its change was made from that version and no other."""
    if patch_type == "json":
        for op in patch:
            if op.get("op") == "test" and op.get("path") == "/metadata/resourceVersion":
                return str(op.get("value"))
        return None
    if patch_type == "merge" and isinstance(patch, Mapping):
        version = (patch.get("metadata") or {}).get("resourceVersion")
        return str(version) if version else None
    return None


def apply(obj: Mapping[str, Any], patch: Any, patch_type: str) -> dict[str, Any]:
    """``obj`` changed as the apiserver would change it for this JSON or merge patch (``obj``
    itself untouched). A JSON patch that does not apply raises the apiserver's 422; a patch
    pinned to another resourceVersion than ``obj``'s raises its 409 Conflict."""
    pinned = pinned_version(patch, patch_type)
    current = str(meta(obj).get("resourceVersion") or "")
    if pinned is not None and pinned != current:
        raise ApiError(
            409,
            "Conflict",
            f"the object has been modified (resourceVersion {current}, the change was made "
            f"from {pinned})",
        )
    changed = copy.deepcopy(dict(obj))
    if patch_type == "json":
        for op in patch:
            _apply_op(changed, op, patch)
    elif patch_type == "merge":
        _merge(changed, patch)
    else:
        raise ValueError(f"{patch_type} patches cannot be applied here")
    return changed
