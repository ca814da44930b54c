"""An in-memory apiserver for unit tests: answers the calls the reconciler makes as the
apiserver would, and records each call with its body.

Like the apiserver it honours optimistic concurrency: a merge patch or an update that carries a
``metadata.resourceVersion`` other than the stored one is answered 409 Conflict, and every write
moves the stored object's resourceVersion on, except the one (patch or update) that removes the
last finalizer of an object being deleted: that deletes it and answers with the
resourceVersion it had. Tests
assert on ``calls`` (``(verb, resource[/subresource], namespace/name)``, as
kubernetes/sample-controller's tests compare actions) and on ``bodies`` (what each call
sent), and may ``bump`` an object to play a writer that came in between.

It also lists and watches as an informer needs: LIST pages (``limit``, a ``continue`` token that
``expire_continue`` makes answer 410 once), PartialObjectMetadata for ``metadata_only``, and a
WATCH from a resourceVersion that streams every later write (410 Expired from before
``compact``'s mark), until ``end_watches`` ends each stream cleanly. Label selectors of every
form (``k``, ``!k``, ``=``, ``!=``, ``in``, ``notin``; an unparsable one is a 400) and field
selectors apply as the apiserver applies them; a merge patch changes metadata too; a JSON patch
applies whole or not at all; a DELETE removes an object without finalizers at once and only
marks one with them. tests/integration/test_fakeapi_agrees.py sends the same requests to the
real apiserver and to this one and compares the answers. ``refuse`` answers any call
with an error (an outage, a 429 with Retry-After, RBAC's 403: ``denied``), after recording it.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import re
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from computedomain.runtime import objects
from computedomain.runtime.client import ApiError
from computedomain.runtime.resources import Resource

Obj = dict[str, Any]
Call = tuple[str, str, str]
Key = tuple[str, str, str]


@dataclass
class FakeApiServer:
    objects: dict[tuple[str, str, str], Obj] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    # What each call sent (None for reads and deletes), in the order of ``calls``.
    bodies: list[Any] = field(default_factory=list)
    # The query of each call (a LIST's page, a WATCH's resourceVersion; {} for the others).
    params: list[dict[str, Any]] = field(default_factory=list)
    _rv: Any = field(default_factory=lambda: itertools.count(100))
    # Status fields a status write drops, as an apiserver still serving an older CRD schema.
    pruned_status_fields: tuple[str, ...] = ()
    # (verb, resource) -> the error that call is answered with, or None to serve it.
    refuse: Callable[[str, Resource], ApiError | None] | None = None
    # Every stored version of each object, oldest first (``history``).
    versions: dict[Key, list[Obj]] = field(default_factory=dict)
    # Continue tokens answered 410 Expired, once each.
    expire_continue: list[str] = field(default_factory=list)
    # Each write as a watch event: (resourceVersion, type, plural, object).
    _changes: list[tuple[int, str, str, Obj]] = field(default_factory=list)
    # Set (and replaced) on every write and ``end_watches``: what a waiting watch awaits.
    _tick: asyncio.Event = field(default_factory=asyncio.Event)
    _compacted: int = 0
    _watch_generation: int = 0

    def add(self, res: Resource, obj: Obj) -> Obj:
        stored = copy.deepcopy(obj)
        stored.setdefault("apiVersion", res.api_version)
        stored.setdefault("kind", res.kind)
        meta = stored["metadata"]
        meta.setdefault("uid", f"uid-{meta['name']}")
        key = (res.plural, meta.get("namespace") or "", meta["name"])
        self._stored_as(key, "MODIFIED" if key in self.objects else "ADDED", stored)
        return copy.deepcopy(stored)

    def _stored_as(self, key: Key, event: str, stored: Obj) -> None:
        """A write: a new resourceVersion, the version kept, the watch told."""
        rv = next(self._rv)
        stored["metadata"]["resourceVersion"] = str(rv)
        if event == "DELETED":
            self.objects.pop(key, None)
        else:
            self.objects[key] = stored
        self.versions.setdefault(key, []).append(copy.deepcopy(stored))
        self._changes.append((rv, event, key[0], copy.deepcopy(stored)))
        self._notify()

    def _notify(self) -> None:
        self._tick.set()
        self._tick = asyncio.Event()

    def history(self, res: Resource, name: str, namespace: str | None = None) -> list[Obj]:
        """Every version the object was stored with, oldest first."""
        return copy.deepcopy(self.versions.get((res.plural, namespace or "", name), []))

    def compact(self) -> None:
        """As an etcd compaction: a watch from any resourceVersion before now answers 410."""
        self._compacted = int(self._latest())

    def end_watches(self) -> None:
        """Every open watch ends cleanly, as the apiserver's timeout ends one."""
        self._watch_generation += 1
        self._notify()

    def remove(self, res: Resource, name: str, namespace: str | None = None) -> None:
        """The object is gone (deleted by someone, no finalizer held it): watches see it."""
        key = (res.plural, namespace or "", name)
        self._stored_as(key, "DELETED", self._stored(res, name, namespace))

    @property
    def latest(self) -> str:
        """The resourceVersion of the newest write: what a LIST now would answer."""
        return self._latest()

    def _latest(self) -> str:
        return str(self._changes[-1][0]) if self._changes else "99"

    def forget_calls(self) -> None:
        """Start a new record of calls and bodies."""
        self.calls.clear()
        self.bodies.clear()
        self.params.clear()

    def bump(self, res: Resource, name: str, namespace: str | None = None) -> Obj:
        """Another writer changed the object (edit ``objects`` first to say how): its
        resourceVersion moves on, and watches see it."""
        stored = self._stored(res, name, namespace)
        self._stored_as((res.plural, namespace or "", name), "MODIFIED", stored)
        return copy.deepcopy(stored)

    def _record(
        self,
        verb: str,
        res: Resource,
        ns: str | None,
        name: str,
        sub: str = "",
        body: Any = None,
        params: dict[str, Any] | None = None,
    ) -> None:
        plural = f"{res.plural}/{sub}" if sub else res.plural
        self.calls.append((verb, plural, f"{ns}/{name}" if ns else name))
        self.bodies.append(copy.deepcopy(body))
        self.params.append(params or {})
        refused = self.refuse(verb, res) if self.refuse is not None else None
        if refused is not None:
            raise refused

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
        limit: int | None = None,
        continue_token: str | None = None,
        **more: Any,
    ) -> Obj:
        """One LIST, or one page of ``limit`` items (the continue token is the next offset)."""
        await asyncio.sleep(0)  # a round trip, as the watch's
        query = {"limit": limit, "continue_token": continue_token, "metadata_only": metadata_only}
        query["resource_version"] = more.get("resource_version")
        if more.get("field_selector"):
            query["field_selector"] = more["field_selector"]
        self._record("list", res, namespace, label_selector or "", params=query)
        if continue_token in self.expire_continue:
            self.expire_continue.remove(continue_token)
            raise ApiError(410, "Expired", "The provided continue parameter is too old")
        items = [
            _partial(obj) if metadata_only else copy.deepcopy(obj)
            for (plural, ns, _), obj in sorted(self.objects.items())
            if plural == res.plural
            and _selected(obj, ns, namespace, label_selector, more.get("field_selector"))
        ]
        start = int(continue_token or 0)
        end = len(items) if limit is None else start + limit
        token = str(end) if end < len(items) else ""
        return {
            "items": items[start:end],
            "metadata": {"resourceVersion": self._latest(), "continue": token},
        }

    async def watch(
        self,
        res: Resource,
        namespace: str | None = None,
        label_selector: str | None = None,
        resource_version: str | None = None,
        metadata_only: bool = False,
        field_selector: str | None = None,
        **_: Any,
    ) -> AsyncIterator[tuple[str, Obj]]:
        """Every write after ``resource_version``, then each later one as it comes, until
        ``end_watches``; 410 Expired from before the last ``compact``."""
        await asyncio.sleep(0)  # a round trip: a client retrying at once still lets others run
        query = {"resource_version": resource_version, "metadata_only": metadata_only}
        self._record("watch", res, namespace, resource_version or "", params=query)
        since = int(resource_version or self._latest())
        if since < self._compacted:
            raise ApiError(410, "Expired", f"too old resource version: {since}")
        generation = self._watch_generation
        while generation == self._watch_generation:
            tick = self._tick
            for rv, event, plural, obj in [c for c in self._changes if c[0] > since]:
                since = rv
                meta = obj["metadata"]
                if plural == res.plural and _selected(
                    obj, meta.get("namespace") or "", namespace, label_selector, field_selector
                ):
                    yield event, _partial(obj) if metadata_only else copy.deepcopy(obj)
            if generation == self._watch_generation and self._latest() == str(since):
                await tick.wait()

    async def delete(self, res: Resource, name: str, namespace: str | None = None) -> None:
        """As the apiserver: an object without finalizers is gone at once; one with finalizers
        is marked (deletionTimestamp, a new resourceVersion) until they are removed."""
        self._record("delete", res, namespace, name)
        stored = self._stored(res, name, namespace)
        key = (res.plural, namespace or "", name)
        if not stored["metadata"].get("finalizers"):
            self._stored_as(key, "DELETED", stored)
        elif not stored["metadata"].get("deletionTimestamp"):
            stored["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
            self._stored_as(key, "MODIFIED", stored)

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
        # A patch applies whole or not at all (a failed test op leaves the object as it was).
        stored = copy.deepcopy(self._stored(res, name, namespace))
        if patch_type == "json":
            for op in patch:
                _apply(stored, op)
        else:
            self._precondition(res, stored, patch)
            _merge(stored, _writable(patch, subresource))
        self.objects[(res.plural, namespace or "", name)] = stored
        if subresource == "status":
            for pruned in self.pruned_status_fields:
                (stored.get("status") or {}).pop(pruned, None)
        if stored["metadata"].get("deletionTimestamp") and not stored["metadata"].get("finalizers"):
            # As the apiserver: the write that empties the finalizers of an object being
            # deleted deletes it instead, and answers with the object as it was before the
            # write (its resourceVersion unchanged) with the finalizers removed.
            answer = copy.deepcopy(stored)
            self._stored_as((res.plural, namespace or "", name), "DELETED", stored)
            return answer
        self._stored_as((res.plural, namespace or "", name), "MODIFIED", stored)
        return copy.deepcopy(stored)

    async def replace(
        self, res: Resource, body: Obj, namespace: str | None = None, subresource: str | None = None
    ) -> Obj:
        """An update: the whole object, refused (409) unless it carries the stored
        resourceVersion. As the apiserver, a ``status`` update changes only the status, an
        update of the object keeps the stored status, and an update that removes the last
        finalizer of an object being deleted deletes it."""
        name = body["metadata"]["name"]
        self._record("replace", res, namespace, name, subresource or "", body=body)
        stored = self._stored(res, name, namespace)
        self._precondition(res, stored, body)
        if subresource == "status":
            updated = {**copy.deepcopy(stored), "status": copy.deepcopy(body.get("status"))}
            for pruned in self.pruned_status_fields:
                (updated.get("status") or {}).pop(pruned, None)
        else:
            updated = {
                **copy.deepcopy(body),
                "metadata": {**body["metadata"], "namespace": namespace},
            }
            if "status" in stored:
                updated["status"] = copy.deepcopy(stored["status"])
        meta = updated["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            answer = copy.deepcopy(updated)
            self._stored_as((res.plural, namespace or "", name), "DELETED", updated)
            return answer
        return self.add(res, updated)


def denied(verb: str, res: Resource) -> ApiError:
    """The 403 the apiserver's authorizer answers when RBAC does not grant ``verb``."""
    return ApiError(
        403,
        "Forbidden",
        f'{res.plural}.{res.group} is forbidden: User "system:serviceaccount:ns:sa" cannot '
        f'{verb} resource "{res.plural}" in API group "{res.group}" at the cluster scope',
    )


def _selected(
    obj: Obj,
    ns: str,
    namespace: str | None,
    label_selector: str | None,
    field_selector: str | None = None,
) -> bool:
    return (
        (namespace is None or ns == namespace)
        and label_selector_matches(label_selector or "", objects.labels(obj))
        and _fields_match(field_selector or "", obj)
    )


# One requirement of a label selector, as the apiserver parses it: `k`, `!k`, `k=v`, `k==v`,
# `k!=v`, `k in (a,b)`, `k notin (a,b)`.
_REQUIREMENT = re.compile(
    r"\s*(?:!(?P<absent>[^\s!=,()]+)"
    r"|(?P<key>[^\s!=,()]+)\s*(?:(?P<op>==|=|!=)\s*(?P<value>[^\s,()]*)"
    r"|\s+(?P<set>in|notin)\s*\((?P<values>[^)]*)\))?)\s*(?:,|$)"
)


def label_selector_matches(selector: str, labels: Mapping[str, Any]) -> bool:
    """Whether ``labels`` match ``selector`` (every requirement, comma = and); a selector the
    apiserver would refuse raises, so a test cannot pass on one it never parsed."""
    pos = 0
    while pos < len(selector):
        term = _REQUIREMENT.match(selector, pos)
        if term is None or term.end() == pos:
            raise ApiError(400, "BadRequest", f"unable to parse requirement: {selector[pos:]!r}")
        pos = term.end()
        if term["absent"]:
            if term["absent"] in labels:
                return False
            continue
        key, value = term["key"], labels.get(term["key"])
        if term["op"] in ("=", "=="):
            ok = value == term["value"]
        elif term["op"] == "!=":
            ok = value != term["value"]
        elif term["set"]:
            allowed = {v.strip() for v in term["values"].split(",")}
            ok = value in allowed if term["set"] == "in" else value not in allowed
        else:
            ok = key in labels
        if not ok:
            return False
    return True


def _fields_match(selector: str, obj: Obj) -> bool:
    """Field selectors (`path=value`, `path==value`, `path!=value`, comma = and) on the object's
    fields, as the apiserver applies the ones each resource supports (ours: metadata.name,
    metadata.namespace, a pod's status.phase and spec.nodeName)."""
    for term in filter(None, selector.split(",")):
        negate = "!=" in term
        path, _, wanted = term.partition("!=" if negate else "=")
        wanted = wanted.removeprefix("=")
        value: Any = obj
        for part in path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if ((value or "") == wanted) == negate:
            return False
    return True


def _writable(patch: Obj, subresource: str | None) -> Obj:
    """What a merge patch may change: its metadata but the resourceVersion precondition and
    the identity fields; on the status subresource, the status only."""
    if subresource == "status":
        return {"status": patch["status"]} if "status" in patch else {}
    meta = {
        k: v
        for k, v in (patch.get("metadata") or {}).items()
        if k not in ("resourceVersion", "name", "namespace", "uid", "creationTimestamp")
    }
    body = {k: v for k, v in patch.items() if k != "metadata"}
    return {**body, "metadata": meta} if meta else body


def _partial(obj: Obj) -> Obj:
    """What a metadata-only request answers: PartialObjectMetadata."""
    return {
        "apiVersion": "meta.k8s.io/v1",
        "kind": "PartialObjectMetadata",
        "metadata": copy.deepcopy(obj["metadata"]),
    }


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
