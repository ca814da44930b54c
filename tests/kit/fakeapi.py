"""An in-memory apiserver for unit tests: answers the calls the reconciler makes as the
apiserver would, and records each call with its body.

Like the apiserver it honours optimistic concurrency: a merge patch or an update that carries a
``metadata.resourceVersion`` other than the stored one is answered 409 Conflict, and every write
moves the stored object's resourceVersion on, except the one that removes the last finalizer of
an object being deleted: that deletes it and answers with the resourceVersion it had. Tests
assert on ``calls`` (``(verb, resource[/subresource], namespace/name)``, as
kubernetes/sample-controller's tests compare actions) and on ``bodies`` (what each call
sent), and may ``bump`` an object to play a writer that came in between.
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass, field
from typing import Any

from computedomain.runtime import objects
from computedomain.runtime.client import ApiError
from computedomain.runtime.resources import Resource

Obj = dict[str, Any]
Call = tuple[str, str, str]


@dataclass
class FakeApiServer:
    objects: dict[tuple[str, str, str], Obj] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    # What each call sent (None for reads and deletes), in the order of ``calls``.
    bodies: list[Any] = field(default_factory=list)
    _rv: Any = field(default_factory=lambda: itertools.count(100))
    # Status fields a status write drops, as an apiserver still serving an older CRD schema.
    pruned_status_fields: tuple[str, ...] = ()

    def add(self, res: Resource, obj: Obj) -> Obj:
        stored = copy.deepcopy(obj)
        stored.setdefault("apiVersion", res.api_version)
        stored.setdefault("kind", res.kind)
        meta = stored["metadata"]
        meta.setdefault("uid", f"uid-{meta['name']}")
        meta["resourceVersion"] = str(next(self._rv))
        self.objects[(res.plural, meta.get("namespace", ""), meta["name"])] = stored
        return copy.deepcopy(stored)

    def forget_calls(self) -> None:
        """Start a new record of calls and bodies."""
        self.calls.clear()
        self.bodies.clear()

    def bump(self, res: Resource, name: str, namespace: str | None = None) -> Obj:
        """Another writer changed the object: its resourceVersion moves on."""
        stored = self._stored(res, name, namespace)
        stored["metadata"]["resourceVersion"] = str(next(self._rv))
        return copy.deepcopy(stored)

    def _record(
        self, verb: str, res: Resource, ns: str | None, name: str, sub: str = "", body: Any = None
    ) -> None:
        plural = f"{res.plural}/{sub}" if sub else res.plural
        self.calls.append((verb, plural, f"{ns}/{name}" if ns else name))
        self.bodies.append(copy.deepcopy(body))

    def _stored(self, res: Resource, name: str, ns: str | None) -> Obj:
        try:
            return self.objects[(res.plural, ns or "", name)]
        except KeyError:
            raise ApiError(404, "NotFound", f"{res.plural} {name} not found") from None

    def _precondition(self, res: Resource, stored: Obj, sent: Any) -> None:
        wanted = ((sent or {}).get("metadata") or {}).get("resourceVersion")
        if wanted and wanted != stored["metadata"]["resourceVersion"]:
            name = stored["metadata"]["name"]
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {res.plural} "{name}": the object has been '
                "modified; please apply your changes to the latest version and try again",
            )

    async def create(self, res: Resource, body: Obj, namespace: str | None = None) -> Obj:
        name = body["metadata"]["name"]
        self._record("create", res, namespace, name, body=body)
        if (res.plural, namespace or "", name) in self.objects:
            raise ApiError(409, "AlreadyExists", f"{res.plural} {name} already exists")
        return self.add(res, {**body, "metadata": {**body["metadata"], "namespace": namespace}})

    async def get(self, res: Resource, name: str, namespace: str | None = None) -> Obj:
        self._record("get", res, namespace, name)
        return copy.deepcopy(self._stored(res, name, namespace))

    async def list(
        self,
        res: Resource,
        namespace: str | None = None,
        label_selector: str | None = None,
        metadata_only: bool = False,
    ) -> Obj:
        self._record("list", res, namespace, label_selector or "")
        key, _, value = (label_selector or "").partition("=")
        items = [
            copy.deepcopy(obj)
            for (plural, ns, _), obj in self.objects.items()
            if plural == res.plural
            and (namespace is None or ns == namespace)
            and (not key or objects.labels(obj).get(key) == value)
        ]
        return {"items": items, "metadata": {"resourceVersion": str(next(self._rv))}}

    async def delete(self, res: Resource, name: str, namespace: str | None = None) -> None:
        self._record("delete", res, namespace, name)
        stored = self._stored(res, name, namespace)
        stored["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"

    async def patch(
        self,
        res: Resource,
        name: str,
        patch: Any,
        namespace: str | None = None,
        patch_type: str = "merge",
        subresource: str | None = None,
    ) -> Obj:
        self._record("patch", res, namespace, name, subresource or "", body=patch)
        stored = self._stored(res, name, namespace)
        if patch_type == "json":
            for op in patch:
                _apply(stored, op)
        else:
            self._precondition(res, stored, patch)
            _merge(stored, {k: v for k, v in patch.items() if k != "metadata"})
        if subresource == "status":
            for pruned in self.pruned_status_fields:
                (stored.get("status") or {}).pop(pruned, None)
        if stored["metadata"].get("deletionTimestamp") and not stored["metadata"].get("finalizers"):
            # As the apiserver: the write that empties the finalizers of an object being
            # deleted deletes it instead, and answers with the object as it was before the
            # write (its resourceVersion unchanged) with the finalizers removed.
            del self.objects[(res.plural, namespace or "", name)]
            return copy.deepcopy(stored)
        stored["metadata"]["resourceVersion"] = str(next(self._rv))
        return copy.deepcopy(stored)

    async def replace(self, res: Resource, body: Obj, namespace: str | None = None) -> Obj:
        name = body["metadata"]["name"]
        self._record("replace", res, namespace, name, body=body)
        self._precondition(res, self._stored(res, name, namespace), body)
        return self.add(res, body)


def _merge(target: Obj, patch: Obj) -> None:
    """RFC 7386: null deletes, objects merge, everything else replaces."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict):
            if not isinstance(target.get(key), dict):
                target[key] = {}
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def _apply(obj: Obj, op: dict[str, Any]) -> None:
    *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"][1:].split("/")]
    target: Any = obj
    for part in parents:
        target = target[int(part)] if isinstance(target, list) else target[part]
    if op["op"] == "test":
        current = target[int(last)] if isinstance(target, list) else target.get(last)
        if current != op["value"]:
            raise ApiError(422, "Invalid", f"test failed at {op['path']}")
    elif op["op"] == "add" and last == "-":
        target.append(op["value"])
    elif op["op"] == "add":
        target[last] = op["value"]
    elif op["op"] == "remove":
        del target[int(last) if isinstance(target, list) else last]
