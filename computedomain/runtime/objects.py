"""Readers of Kubernetes objects as plain dicts (the JSON the apiserver sent).

The one home of these accessors: every layer reads metadata through them, so a missing or
malformed ``metadata`` or ``labels`` is handled once, the same way everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from computedomain.runtime.resources import Resource

_EMPTY: Mapping[str, Any] = MappingProxyType({})


def meta(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """``metadata``, or an empty mapping when absent or malformed."""
    value = (obj or _EMPTY).get("metadata")
    return value if isinstance(value, Mapping) else _EMPTY


def labels(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """``metadata.labels``, or an empty mapping."""
    value = meta(obj).get("labels")
    return value if isinstance(value, Mapping) else _EMPTY


def label(obj: Mapping[str, Any] | None, key: str) -> str | None:
    """The label's value when it is a non-empty string, else None."""
    value = labels(obj).get(key)
    return value if isinstance(value, str) and value else None


def name(obj: Mapping[str, Any] | None) -> str:
    return str(meta(obj).get("name") or "")


def namespace(obj: Mapping[str, Any] | None) -> str | None:
    value = meta(obj).get("namespace")
    return str(value) if value else None


def uid(obj: Mapping[str, Any] | None) -> str | None:
    value = meta(obj).get("uid")
    return str(value) if value else None


def resource_version(obj: Mapping[str, Any] | None) -> str:
    return str(meta(obj).get("resourceVersion") or "")


def condition_true(obj: Mapping[str, Any] | None, ctype: str) -> bool:
    """The object's ``ctype`` condition is True (a Pod's or Node's Ready, a CD's Ready)."""
    return condition(obj, ctype).get("status") == "True"


def pod_ready(pod: Mapping[str, Any] | None) -> bool:
    """The pod's Ready condition is True (its containers passed their readiness probes)."""
    return condition_true(pod, "Ready")


def condition(obj: Mapping[str, Any] | None, ctype: str) -> Mapping[str, Any]:
    """The ``status.conditions`` entry of type ``ctype``, or an empty mapping."""
    status = (obj or _EMPTY).get("status")
    for cond in (status.get("conditions") if isinstance(status, Mapping) else None) or []:
        if isinstance(cond, Mapping) and cond.get("type") == ctype:
            return cond
    return _EMPTY


def object_key(obj: Mapping[str, Any] | None) -> str:
    """``namespace/name``, or ``name`` for cluster-scoped objects (the informer store's key)."""
    ns = namespace(obj)
    return f"{ns}/{name(obj)}" if ns else name(obj)


def reference(obj: Mapping[str, Any], res: Resource) -> dict[str, Any]:
    """An ObjectReference to ``obj`` (for an event's ``related``)."""
    m = meta(obj)
    ref = {"apiVersion": res.api_version, "kind": res.kind, "name": m.get("name")}
    for key in ("namespace", "uid", "resourceVersion"):
        if m.get(key):
            ref[key] = m[key]
    return ref
