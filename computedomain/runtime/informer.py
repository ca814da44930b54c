"""Reflector + indexed store (client-go ``tools/cache`` in miniature).

A consistent LIST (rv="") in pages of ``page_size`` fills the store, then WATCH from the list's
RV with bookmarks, a random 300-600 s server timeout and a 70 s client inactivity timeout. The
list is paged because the alternative, rv=0 from the watch cache, ignores ``limit`` (measured on
v1.36): one response with every object, which a 10,000-node fleet should not need; apiservers
since 1.34 serve the pages from the watch cache too. A continue token that expired mid-list
(410) starts the list over; a second expiry in the same list falls back to one unpaged list, as
client-go's pager does, so a slow list cannot chase compaction forever. A 410 on the watch
relists and delivers vanished objects as deletes carrying their last known state. A watch that
ends cleanly resumes from its RV at once. Failures back off 0.8 s -> 30 s with jitter (at least
a 429's ``Retry-After``); the backoff resets after 2 min of health, and after any watch that
delivered events, so a stream cut now and then costs one short delay, never a growing one.
Handler exceptions are logged and never stop the informer.

``metadata_only`` lists and watches PartialObjectMetadata (no spec or status: a Node's is
~3 KB instead of ~15 KB). ``unchanged(old, new)`` drops an update before the store and the
handlers when nothing the caller keeps changed (a Node heartbeat); the store then holds the last
version that mattered, and the watch still resumes from the newest RV.

``table`` (polling only) lists the server's Table with each row's metadata: an object is its
PartialObjectMetadata plus ``columns``, the cells ``kubectl get`` prints (a Node's status
column says Ready or NotReady, and SchedulingDisabled), for a few bytes more than metadata.

``poll_interval`` makes a polling informer: no watch, the same paged LIST every that many
seconds, replacing the store and delivering only real differences (an RV that did not move or
an ``unchanged`` update delivers nothing). It suits a large, busy collection whose changes
matter little and late (every Node's labels for inventory gauges): one LIST a minute costs far
less than a watch event per heartbeat. Objects fed in between (``feed``) that are newer than
the list are kept, and a deleted one is not brought back by an older list.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

import aiohttp

from computedomain.runtime.client import ApiError, KubeClient
from computedomain.runtime.clock import Clock, SystemClock
from computedomain.runtime.objects import object_key, resource_version
from computedomain.runtime.resources import Resource
from computedomain.runtime.store import Indexer, Obj, Store, is_newer

log = logging.getLogger(__name__)

Transform = Callable[[Obj], Obj]
Unchanged = Callable[[Obj, Obj], bool]

DEFAULT_PAGE_SIZE = 500  # client-go's pager default
# How long a deletion the watch has passed is still remembered (see _forget_passed_deletions).
TOMBSTONE_GRACE_SECONDS = 60.0


def strip_managed_fields(obj: Obj) -> Obj:
    """A transform dropping ``metadata.managedFields`` (large, and never read by controllers)."""
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        metadata.pop("managedFields", None)
    return obj


class EventHandler(Protocol):
    def on_add(self, obj: Obj) -> None: ...
    def on_update(self, old: Obj, new: Obj) -> None: ...
    def on_delete(self, obj: Obj) -> None: ...


@dataclass
class FunctionHandler:
    """An ``EventHandler`` built from optional callables."""

    add: Callable[[Obj], None] | None = None
    update: Callable[[Obj, Obj], None] | None = None
    delete: Callable[[Obj], None] | None = None

    def on_add(self, obj: Obj) -> None:
        if self.add is not None:
            self.add(obj)

    def on_update(self, old: Obj, new: Obj) -> None:
        if self.update is not None:
            self.update(old, new)

    def on_delete(self, obj: Obj) -> None:
        if self.delete is not None:
            self.delete(obj)


class Backoff:
    """Exponential backoff with jitter that resets after a period without failures."""

    def __init__(
        self,
        clock: Clock,
        initial: float = 0.8,
        maximum: float = 30.0,
        factor: float = 2.0,
        jitter: float = 1.0,
        reset_after: float = 120.0,
        rng: random.Random | None = None,
    ) -> None:
        self._clock = clock
        self.initial = initial
        self.maximum = maximum
        self.factor = factor
        self.jitter = jitter
        self.reset_after = reset_after
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not cryptography
        self._current = initial
        self._last_failure: float | None = None

    def reset(self) -> None:
        """Progress was made: the next failure starts from the initial delay again."""
        self._current = self.initial
        self._last_failure = None

    def next_delay(self) -> float:
        now = self._clock.now()
        if self._last_failure is not None and now - self._last_failure > self.reset_after:
            self._current = self.initial
        self._last_failure = now
        delay = self._current
        self._current = min(self._current * self.factor, self.maximum)
        return delay * (1.0 + self._rng.random() * self.jitter) if self.jitter else delay


class _RelistNeededError(Exception):
    """The watch cannot resume from our RV: list again."""


class Informer:
    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        transform: Transform | None = None,
        indexers: Mapping[str, Indexer] | None = None,
        clock: Clock | None = None,
        name: str | None = None,
        watch_timeout: tuple[int, int] = (300, 600),
        inactivity_timeout: float = 70.0,
        rng: random.Random | None = None,
        metadata_only: bool = False,
        unchanged: Unchanged | None = None,
        page_size: int | None = DEFAULT_PAGE_SIZE,
        poll_interval: float | None = None,
        table: bool = False,
    ) -> None:
        if table and poll_interval is None:
            raise ValueError("a Table informer polls: give poll_interval")
        self.client = client
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.transform = transform
        self.clock = clock or SystemClock()
        self.name = name or resource.plural
        self.watch_timeout = watch_timeout
        self.inactivity_timeout = inactivity_timeout
        self.metadata_only = metadata_only
        self.table = table
        self.unchanged = unchanged
        self.page_size = page_size
        self.poll_interval = poll_interval
        self.store = Store(indexers)
        self._handlers: list[EventHandler] = []
        self._rng = rng or random.Random()  # noqa: S311 - spreading reconnects, not crypto
        self._backoff = Backoff(self.clock, rng=self._rng)
        self._synced = asyncio.Event()
        # Polling: deletions fed in since the last list, which an older list must not undo.
        self._fed_deletions: dict[str, Obj] = {}
        self._resource_version: str | None = None
        # Deletions the store remembers are forgotten once the watch has passed them for
        # TOMBSTONE_GRACE_SECONDS: the RV it had reached at the previous pass, and when.
        self._tombstone_mark = ""
        self._tombstone_marked_at = self.clock.now()
        self._last_error: str | None = None
        self.relists = 0
        # LIST requests sent, pages included (tests read it).
        self.list_requests = 0
        # Why this informer does not list or watch (``disable``), or None.
        self.unavailable: str | None = None

    # -- public -----------------------------------------------------------------------------

    def add_handler(self, handler: EventHandler) -> None:
        """Register a handler; objects already in the store are delivered as adds."""
        self._handlers.append(handler)
        for obj in self.store.list():
            self._call(handler.on_add, obj)

    @property
    def has_synced(self) -> bool:
        return self._synced.is_set()

    def disable(self, why: str) -> None:
        """Never list or watch (``why``: this identity may not; a 403 would be retried
        forever). The store stays empty and counts as synced: its readers must ask
        ``unavailable`` before taking an empty store for "none exist"."""
        self.unavailable = why
        self._synced.set()

    async def wait_synced(self) -> None:
        await self._synced.wait()

    @property
    def resource_version(self) -> str | None:
        """The RV the next watch resumes from (advanced by events and bookmarks)."""
        return self._resource_version

    async def run(self) -> None:
        """List then watch until cancelled (or list every ``poll_interval`` seconds). A
        restarted ``run`` resumes from the last RV. A disabled informer returns at once."""
        while self.unavailable is None:
            try:
                if self.poll_interval is not None:
                    await self._list()
                    await self.clock.sleep(self.poll_interval)
                    continue
                if self._resource_version is None:
                    await self._list()
                await self._watch()
                # A watch that ended cleanly (its timeout, an idle or a proxy's close) resumes
                # from the last RV at once: waiting would leave the cache that far behind.
                continue
            except asyncio.CancelledError:
                raise
            except _RelistNeededError:
                self._resource_version = None
                self.relists += 1
                continue
            except ApiError as error:
                self._log_failure(error)
                retry_after = error.retry_after
            except (aiohttp.ClientError, TimeoutError, OSError) as error:
                self._log_failure(error)
                retry_after = None
            except Exception as error:
                log.exception(
                    "Informer failed unexpectedly", extra={"informer": self.name, "err": str(error)}
                )
                retry_after = None
            await self.clock.sleep(max(self._backoff.next_delay(), retry_after or 0.0))

    # -- list / watch -----------------------------------------------------------------------

    @property
    def last_error(self) -> str | None:
        """Why the last list or watch failed, until a list succeeds (for /readyz)."""
        return self._last_error

    def _log_failure(self, error: BaseException) -> None:
        self._last_error = str(error) or type(error).__name__
        if isinstance(error, ApiError) and error.is_forbidden and self.namespace:
            self._last_error += (
                f" (does namespace {self.namespace} exist, with this controller's Role in it?)"
            )
        if isinstance(error, ApiError) and error.is_not_found:
            # A 404 on a collection: the server does not serve this resource at all.
            log.warning(
                "Informer list/watch failed: the server does not serve %s (is its "
                "CustomResourceDefinition installed?)",
                self.resource.path(),
                extra={"informer": self.name, "err": str(error) or "404"},
            )
            return
        log.warning(
            "Informer list/watch failed",
            extra={"informer": self.name, "err": str(error) or type(error).__name__},
        )

    def _prepare(self, obj: Obj) -> Obj:
        if self.metadata_only or self.table:
            # A PartialObjectMetadata stands for the resource's object: keep its kind.
            obj["apiVersion"], obj["kind"] = self.resource.api_version, self.resource.kind
        else:
            obj.setdefault("apiVersion", self.resource.api_version)
            obj.setdefault("kind", self.resource.kind)
        return self.transform(obj) if self.transform is not None else obj

    async def _list(self) -> None:
        items, list_rv = await self._list_pages()
        self._replace(items, list_rv)
        log.debug(
            "Listed objects",
            extra={"informer": self.name, "count": len(items), "resourceVersion": list_rv},
        )

    async def _list_pages(self) -> tuple[list[Obj], str]:
        """Every object (prepared page by page, so raw pages do not pile up) and the list's
        RV. Nothing reaches the store before the last page: a partial list would delete."""
        items: list[Obj] = []
        token: str | None = None
        limit, expired = self.page_size, 0
        while True:
            self.list_requests += 1
            try:
                page = await self.client.list(
                    self.resource,
                    namespace=self.namespace,
                    label_selector=self.label_selector,
                    field_selector=self.field_selector,
                    # No resourceVersion: the most recent (consistent) list; a continue token
                    # carries the first page's RV.
                    limit=limit,
                    continue_token=token,
                    metadata_only=self.metadata_only,
                    table=self.table,
                )
            except ApiError as error:
                if not (error.is_gone and token):
                    raise
                expired += 1
                log.info(
                    "List continuation expired, listing again",
                    extra={"informer": self.name, "err": str(error), "paged": expired < 2},
                )
                items, token = [], None
                if expired >= 2:
                    limit = None
                continue
            items.extend(map(self._prepare, page.get("items") or []))
            token = (page.get("metadata") or {}).get("continue") or None
            if token is None:
                return items, resource_version(page)

    # -- what the reflector delivers; public so tests can feed the informer without an API ---

    def feed_list(self, items: list[Obj], list_resource_version: str = "") -> None:
        """A LIST result: make the store equal ``items``, deliver the difference to handlers,
        resume watching from ``list_resource_version``, and count as synced."""
        self._replace([self._prepare(obj) for obj in items], list_resource_version)

    def _replace(self, prepared: list[Obj], list_resource_version: str) -> None:
        seen: set[str] = set()
        marker = {"metadata": {"resourceVersion": list_resource_version}}
        for obj in prepared:
            key = object_key(obj)
            deleted = self._fed_deletions.get(key)
            if deleted is not None and not is_newer(obj, deleted):
                continue  # listed before the deletion we were told of
            seen.add(key)
            self._apply_upsert(obj)
        self._fed_deletions.clear()
        for key in sorted(set(self.store.keys()) - seen):
            held = self.store.get(key)
            if list_resource_version and held is not None and is_newer(held, marker):
                continue  # fed in after the list was taken: not gone
            tombstone = self.store.remove(key)
            if tombstone is not None:
                self._notify_delete(tombstone)
        self._resource_version = list_resource_version
        self._last_error = None
        self._synced.set()
        self._forget_passed_deletions()

    async def _watch(self) -> None:
        low, high = self.watch_timeout
        timeout_seconds = self._rng.randint(low, high)
        started = self.clock.now()
        events = 0
        try:
            async for event_type, obj in self.client.watch(
                self.resource,
                namespace=self.namespace,
                label_selector=self.label_selector,
                field_selector=self.field_selector,
                resource_version=self._resource_version,
                timeout_seconds=timeout_seconds,
                allow_bookmarks=True,
                inactivity_timeout=self.inactivity_timeout,
                metadata_only=self.metadata_only,
            ):
                events += 1
                self.feed(event_type, obj)
                if events == 1:
                    # The stream works: a failure after this (a reset, a cut connection) is a
                    # new one, not one more of a series, so it starts from the first delay.
                    self._backoff.reset()
        except ApiError as error:
            if error.is_gone or "too large resource version" in error.message.lower():
                log.info(
                    "Watch expired, relisting",
                    extra={"informer": self.name, "err": str(error)},
                )
                raise _RelistNeededError from error
            raise
        except TimeoutError:
            # The inactivity timeout also fires on quiet, healthy watches (the apiserver sends
            # bookmarks only when its cache for this resource moved): reconnect from the same RV
            # at once, without backoff; a timeout before that long is a real failure.
            if self.clock.now() - started < self.inactivity_timeout:
                raise
            log.debug("Watch idle, reconnecting", extra={"informer": self.name})
            return
        if events == 0 and self.clock.now() - started < 1.0:
            # The server closed an empty watch at once: do not spin.
            await self.clock.sleep(self._backoff.next_delay())

    def feed(self, event_type: str, obj: Obj) -> None:
        """One watch event (ADDED, MODIFIED, DELETED or BOOKMARK), as the watch delivers it."""
        rv = resource_version(obj)
        if event_type == "BOOKMARK":
            if rv:
                self._resource_version = rv
                self._forget_passed_deletions()
            return
        obj = self._prepare(obj)
        if event_type in ("ADDED", "MODIFIED"):
            # Skipped when older than a deletion our own write already showed.
            if not self.store.is_deleted_since(obj):
                self._apply_upsert(obj)
        elif event_type == "DELETED":
            if self.poll_interval is not None:
                self._fed_deletions[object_key(obj)] = obj
            old = self.store.remove(object_key(obj), obj)
            self._notify_delete(obj if old is None or is_newer(obj, old) else old)
        else:
            log.warning(
                "Ignored unknown watch event", extra={"informer": self.name, "type": event_type}
            )
        if rv:
            self._resource_version = rv
            self._forget_passed_deletions()

    def _forget_passed_deletions(self) -> None:
        """Every TOMBSTONE_GRACE_SECONDS: forget the deletions at or before the RV the watch
        had reached one period ago (a late response to our own write may still come within
        the period; an event that old cannot come after the watch passed it)."""
        now = self.clock.now()
        if now - self._tombstone_marked_at < TOMBSTONE_GRACE_SECONDS:
            return
        if self._tombstone_mark:
            self.store.forget_deletions_through(self._tombstone_mark)
        self._tombstone_mark = self._resource_version or ""
        self._tombstone_marked_at = now

    def _apply_upsert(self, obj: Obj) -> None:
        old = self.store.get(object_key(obj))
        if old is None:
            self.store.upsert(obj)
            self._notify(lambda handler: handler.on_add(obj))
            return
        # Unchanged RV (a re-list or our own observed write) or older than what we hold.
        if not is_newer(obj, old):
            return
        if self.unchanged is not None and self.unchanged(old, obj):
            return
        self.store.upsert(obj)
        self._notify(lambda handler: handler.on_update(old, obj))

    def _notify_delete(self, obj: Obj) -> None:
        self._notify(lambda handler: handler.on_delete(obj))

    def _notify(self, deliver: Callable[[EventHandler], None]) -> None:
        for handler in self._handlers:
            try:
                deliver(handler)
            except Exception:
                log.exception("Event handler failed", extra={"informer": self.name})

    def _call(self, method: Callable[[Obj], None], obj: Obj) -> None:
        try:
            method(obj)
        except Exception:
            log.exception("Event handler failed", extra={"informer": self.name})
