"""The informer's indexed store (client-go ``cache.Indexer`` in miniature).

Objects by ``namespace/name`` with secondary indexes; read-your-writes through
``observe_write``; deleted keys remember their last RV so a late response cannot resurrect them.
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from computedomain.runtime.objects import meta, object_key, resource_version

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Indexer = Callable[[Obj], Iterable[str]]


def _rv_number(obj: Mapping[str, Any]) -> int | None:
    # RVs are opaque; comparing them as integers is an etcd detail used only as a heuristic.
    try:
        return int(resource_version(obj))
    except ValueError:
        return None


def is_newer(candidate: Mapping[str, Any], current: Mapping[str, Any] | None) -> bool:
    """True when ``candidate`` has a strictly higher (integer) RV than ``current``."""
    if current is None:
        return True
    new, old = _rv_number(candidate), _rv_number(current)
    if new is None or old is None:
        return resource_version(candidate) != resource_version(current)
    return new > old


MAX_DELETED_REMEMBERED = 10_000


class Store:
    """Objects by key, with secondary indexes. Readers must not mutate what they get."""

    def __init__(self, indexers: Mapping[str, Indexer] | None = None) -> None:
        self._items: dict[str, Obj] = {}
        # Last RV seen per deleted key, so a late read-your-writes response cannot resurrect it.
        # Only the RV: a whole object per deleted key grew a churning controller by ~35 MiB.
        self._deleted: dict[str, Obj] = {}
        self._indexers: dict[str, Indexer] = dict(indexers or {})
        self._indices: dict[str, dict[str, set[str]]] = {name: {} for name in self._indexers}
        # Bumped by every change: a reader can skip recomputing over an unchanged store.
        self.generation = 0

    def get(self, key: str) -> Obj | None:
        return self._items.get(key)

    def list(self) -> list[Obj]:
        return list(self._items.values())

    def keys(self) -> builtins.list[str]:
        return list(self._items)

    def by_index(self, index: str, value: str) -> builtins.list[Obj]:
        keys = self._indices[index].get(value, set())
        return [self._items[key] for key in sorted(keys)]

    def index_values(self, index: str) -> builtins.list[str]:
        return list(self._indices[index])

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def observe_write(self, obj: Obj) -> bool:
        """Read-your-writes: store the response of our own write if it is newer.

        Returns True when the store changed. The watch event for the same write then arrives
        with an unchanged RV and is skipped. A response that removed the last finalizer of an
        object being deleted removes it here too: the apiserver deleted it as it answered.
        """
        key = object_key(obj)
        metadata = meta(obj)
        known = self._items.get(key) or self._deleted.get(key)
        if metadata.get("deletionTimestamp") and not metadata.get("finalizers"):
            # That answer carries the resourceVersion the object had (the apiserver deleted
            # instead of writing), so it is often the very version this store holds.
            if known is not None and is_newer(known, obj):
                return False
            return self.remove(key, obj) is not None
        if not is_newer(obj, known):
            return False
        self.upsert(obj)
        return True

    def forget_deletions_through(self, resource_version: str) -> None:
        """Drop the remembered deletions at or before ``resource_version``.

        The informer calls this with an RV its watch passed a while ago: no event or write
        response that old can still arrive for a key deleted then, so remembering it only
        costs memory (a churning controller otherwise held up to ``MAX_DELETED_REMEMBERED``
        of them per store).
        """
        passed = {"metadata": {"resourceVersion": resource_version}}
        for key in [k for k, tombstone in self._deleted.items() if not is_newer(tombstone, passed)]:
            del self._deleted[key]

    @property
    def remembered_deletions(self) -> int:
        return len(self._deleted)

    def is_deleted_since(self, obj: Mapping[str, Any]) -> bool:
        """True when ``obj``'s key was deleted at or after ``obj``'s RV: it is a stale copy."""
        deleted = self._deleted.get(object_key(obj))
        return deleted is not None and not is_newer(obj, deleted)

    def upsert(self, obj: Obj) -> Obj | None:
        key = object_key(obj)
        old = self._items.get(key)
        if old is not None:
            self._unindex(key, old)
        self.generation += 1
        self._items[key] = obj
        self._index(key, obj)
        return old

    def remove(self, key: str, last: Obj | None = None) -> Obj | None:
        """Drop ``key``; ``last`` (the DELETED event's object) guards against resurrection."""
        old = self._items.pop(key, None)
        if last is not None or old is not None:
            if len(self._deleted) >= MAX_DELETED_REMEMBERED:
                self._deleted.clear()
            gone: Obj = last if last is not None else old  # type: ignore[assignment]
            self._deleted[key] = {"metadata": {"resourceVersion": resource_version(gone)}}
        if old is not None:
            self.generation += 1
            self._unindex(key, old)
        return old

    def _index(self, key: str, obj: Obj) -> None:
        for name, indexer in self._indexers.items():
            try:
                values = list(indexer(obj))
            except Exception:
                log.exception("Indexer failed", extra={"index": name, "key": key})
                continue
            for value in values:
                self._indices[name].setdefault(value, set()).add(key)

    def _unindex(self, key: str, obj: Obj) -> None:
        for name, indexer in self._indexers.items():
            try:
                values = list(indexer(obj))
            except Exception:
                values = [v for v, keys in self._indices[name].items() if key in keys]
            for value in values:
                keys = self._indices[name].get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del self._indices[name][value]
