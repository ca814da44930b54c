"""An ``events.k8s.io/v1`` recorder with series aggregation (client-go ``tools/events``).

``record`` never blocks: it applies a per-key spam bound (burst 25, then one per 5 min; the
buckets of at most 4096 keys are kept, the least recently used forgotten first, as client-go
bounds its spam filter) and puts the event on a bounded queue (1000), dropping and counting on
overflow. ``run`` writes:
the first occurrence of an isomorphic event creates it, the second PATCHes ``series`` with
count 2, later counts are flushed periodically, and a series ends after 6 minutes of quiet.
The note is not part of the isomorphism key.

Where this identity may not create Events (RBAC written for another controller grants none),
the recorder says so once (``disable``: from the access reviewed at start, or at the first
create the authorizer refuses) and drops every later event (counted, reason ``forbidden``)
instead of sending requests that fail.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import aiohttp
from prometheus_client import CollectorRegistry

from computedomain.runtime import objects
from computedomain.runtime.client import ApiError
from computedomain.runtime.clock import Clock, SystemClock, format_microtime
from computedomain.runtime.metrics import RuntimeMetrics
from computedomain.runtime.ratelimit import TokenBucket
from computedomain.runtime.resources import EVENTS, Resource

log = logging.getLogger(__name__)

MAX_NOTE_BYTES = 1024
MAX_FIELD_LENGTH = 128
_REFERENCE_FIELDS = ("apiVersion", "kind", "namespace", "name", "uid", "fieldPath")
_TRANSIENT = (ApiError, aiohttp.ClientError, OSError, TimeoutError)

# An object reference as one string: a key lives as long as its spam bucket or series, and
# thousands are kept under churn, so it is one object rather than a tuple of pairs.
RefKey = str
SeriesKey = tuple[str, str, str, str, str, RefKey, RefKey]


class EventClient(Protocol):
    async def create(
        self, res: Resource, body: dict[str, Any], namespace: str | None = None
    ) -> dict[str, Any]: ...

    async def patch(
        self,
        res: Resource,
        name: str,
        patch: Any,
        namespace: str | None = None,
        patch_type: Literal["merge", "json", "apply", "strategic"] = "merge",
    ) -> dict[str, Any]: ...


def object_reference(obj: Mapping[str, Any]) -> dict[str, str]:
    """An ObjectReference for a full object (with ``metadata``) or an existing reference.

    The resourceVersion is left out on purpose: it would split every series per write.
    """
    if "metadata" in obj:
        metadata = objects.meta(obj)
        candidate = {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "namespace": metadata.get("namespace"),
            "name": metadata.get("name"),
            "uid": metadata.get("uid"),
        }
    else:
        candidate = {name: obj.get(name) for name in _REFERENCE_FIELDS}
    return {name: str(value) for name, value in candidate.items() if value}


def _ref_key(reference: Mapping[str, str] | None) -> RefKey:
    """The object a reference names: its UID (unique across kinds), with the field path when
    there is one; without a UID, every field."""
    ref = reference or {}
    if uid := ref.get("uid"):
        return f"{uid}#{ref['fieldPath']}" if ref.get("fieldPath") else uid
    return "\n".join(f"{name}={value}" for name, value in sorted(ref.items()))


def _truncate(text: str, limit: int = MAX_FIELD_LENGTH) -> str:
    return text if len(text) <= limit else text[:limit]


def _truncate_bytes(text: str, limit: int = MAX_NOTE_BYTES) -> str:
    encoded = text.encode()
    if len(encoded) <= limit:
        return text
    return encoded[:limit].decode(errors="ignore")


@dataclass
class _Pending:
    key: SeriesKey
    type: str
    reason: str
    action: str
    note: str
    regarding: dict[str, str]
    related: dict[str, str] | None
    observed_at: float


@dataclass(slots=True)  # thousands live at once under churn: no __dict__ each
class _Series:
    name: str
    namespace: str
    count: int
    last_observed: float
    last_observed_time: str
    flushed_count: int
    flushed_at: float


class EventRecorder:
    def __init__(
        self,
        client: EventClient,
        reporting_controller: str,
        reporting_instance: str,
        clock: Clock | None = None,
        metrics: RuntimeMetrics | None = None,
        queue_size: int = 1000,
        spam_burst: int = 25,
        spam_interval: float = 300.0,
        spam_keys: int = 4096,
        series_keys: int = 4096,
        series_refresh: float = 1800.0,
        series_quiet: float = 360.0,
        housekeeping_interval: float = 30.0,
        write_attempts: int = 3,
    ) -> None:
        self.client = client
        self.reporting_controller = _truncate(reporting_controller)
        self.reporting_instance = _truncate(reporting_instance)
        self.clock = clock or SystemClock()
        self.metrics = metrics or RuntimeMetrics(CollectorRegistry())
        self.spam_burst = spam_burst
        self.spam_interval = spam_interval
        self.spam_keys = spam_keys
        self.series_keys = series_keys
        self._spam_qps = 1.0 / spam_interval
        self.series_refresh = series_refresh
        self.series_quiet = series_quiet
        self.housekeeping_interval = housekeeping_interval
        self.write_attempts = write_attempts
        self.resource: Resource = EVENTS
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue(maxsize=queue_size)
        self._spam: dict[SeriesKey, TokenBucket] = {}
        self._series: dict[SeriesKey, _Series] = {}
        self._last_nanos = 0
        # Why Events cannot be written (set once), or None.
        self.disabled: str | None = None
        for reason in ("queue_full", "spam", "write_failed", "forbidden"):
            self.metrics.events_dropped_total.labels(reason=reason)

    def disable(self, why: str) -> None:
        """Events cannot be written (``why``: the permission missing): said once, and every
        event from now on is dropped without a request."""
        if self.disabled is not None:
            return
        self.disabled = why
        log.warning("Events are not recorded: %s", why)

    # -- producer side ----------------------------------------------------------------------

    def record(
        self,
        regarding: Mapping[str, Any],
        type: str,
        reason: str,
        action: str,
        note: str,
        related: Mapping[str, Any] | None = None,
    ) -> bool:
        """Queue an event; never blocks. False when it was dropped (spam bound, full queue, or
        Events not granted)."""
        if self.disabled is not None:
            self.metrics.events_dropped_total.labels(reason="forbidden").inc()
            return False
        regarding_ref = object_reference(regarding)
        related_ref = object_reference(related) if related is not None else None
        key: SeriesKey = (
            type,
            _truncate(action),
            _truncate(reason),
            self.reporting_controller,
            self.reporting_instance,
            _ref_key(regarding_ref),
            _ref_key(related_ref),
        )
        # Least recently used first: the key used now moves to the end.
        bucket = self._spam.pop(key, None)
        if bucket is None:
            bucket = TokenBucket(self._spam_qps, self.spam_burst, self.clock)
        self._spam[key] = bucket
        if len(self._spam) > self.spam_keys:
            # A bucket refills only one token per interval, so under churn (every new object's
            # events are new keys) time alone would keep thousands for many minutes.
            del self._spam[next(iter(self._spam))]
        if not bucket.allow():
            self._drop("spam", key)
            return False
        pending = _Pending(
            key=key,
            type=type,
            reason=_truncate(reason),
            action=_truncate(action),
            note=_truncate_bytes(note),
            regarding=regarding_ref,
            related=related_ref,
            observed_at=self.clock.now(),
        )
        try:
            self._queue.put_nowait(pending)
        except asyncio.QueueFull:
            self._drop("queue_full", key)
            return False
        return True

    def _drop(self, reason: str, key: SeriesKey) -> None:
        self.metrics.events_dropped_total.labels(reason=reason).inc()
        log.debug("Dropped event", extra={"dropReason": reason, "eventReason": key[2]})

    # -- writer side ------------------------------------------------------------------------

    async def run(self) -> None:
        """Write queued events until cancelled."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self._housekeeping())
            while True:
                pending = await self._queue.get()
                try:
                    await self._write(pending)
                finally:
                    self._queue.task_done()

    async def wait_idle(self) -> None:
        """Wait until every queued event has been written (or dropped)."""
        await self._queue.join()

    async def flush_series(self) -> None:
        """Write every series count not yet written, then forget series that went quiet."""
        now = self.clock.now()
        for key, series in list(self._series.items()):
            if series.count > series.flushed_count and series.count >= 2:
                await self._patch_series(series)
            if now - series.last_observed > self.series_quiet:
                del self._series[key]
        self._forget_idle_spam_buckets()

    def _forget_idle_spam_buckets(self) -> None:
        for key, bucket in list(self._spam.items()):
            if key not in self._series and bucket.full:
                del self._spam[key]

    async def _housekeeping(self) -> None:
        while True:
            await self.clock.sleep(self.housekeeping_interval)
            now = self.clock.now()
            for key, series in list(self._series.items()):
                stale_count = series.count > series.flushed_count
                if stale_count and now - series.flushed_at >= self.series_refresh:
                    await self._patch_series(series)
                if now - series.last_observed > self.series_quiet:
                    if series.count > series.flushed_count:
                        await self._patch_series(series)
                    self._series.pop(key, None)
            self._forget_idle_spam_buckets()

    async def _write(self, pending: _Pending) -> None:
        if self.disabled is not None:  # queued before the first create was refused
            self.metrics.events_dropped_total.labels(reason="forbidden").inc()
            return
        series = self._series.get(pending.key)
        now = self.clock.now()
        if series is not None and now - series.last_observed > self.series_quiet:
            self._series.pop(pending.key, None)
            series = None
        wall = format_microtime(self.clock.wall())
        if series is None:
            await self._create(pending, wall)
            return
        series.count += 1
        series.last_observed = now
        series.last_observed_time = wall
        self._series[pending.key] = self._series.pop(pending.key)  # most recently used last
        if series.flushed_count < 2:
            await self._patch_series(series, pending)

    async def _create(self, pending: _Pending, wall: str) -> None:
        namespace = pending.regarding.get("namespace") or "default"
        name = event_name(str(pending.regarding.get("name") or "unknown"), self._unique_nanos())
        body: dict[str, Any] = {
            "apiVersion": EVENTS.api_version,
            "kind": EVENTS.kind,
            "metadata": {"name": name, "namespace": namespace},
            "eventTime": wall,
            "reportingController": self.reporting_controller,
            "reportingInstance": self.reporting_instance,
            "action": pending.action,
            "reason": pending.reason,
            "type": pending.type,
            "note": pending.note,
            "regarding": pending.regarding,
        }
        if pending.related:
            body["related"] = pending.related
        created = await self._attempt(
            lambda: self.client.create(EVENTS, body, namespace), creating=True
        )
        if created is None:
            return
        now = self.clock.now()
        self._series[pending.key] = _Series(
            name=name,
            namespace=namespace,
            count=1,
            last_observed=now,
            last_observed_time=wall,
            flushed_count=1,
            flushed_at=now,
        )
        if len(self._series) > self.series_keys:
            # As client-go's aggregation cache (an LRU of 4,096): the least recently seen series
            # goes, its count written first; the next such event starts a new one.
            oldest_key = next(iter(self._series))
            oldest = self._series.pop(oldest_key)
            if oldest.count > oldest.flushed_count:
                await self._patch_series(oldest)

    async def _patch_series(self, series: _Series, pending: _Pending | None = None) -> None:
        patch = {"series": {"count": series.count, "lastObservedTime": series.last_observed_time}}
        count = series.count
        try:
            patched = await self._attempt(
                lambda: self.client.patch(
                    EVENTS, series.name, patch, series.namespace, patch_type="merge"
                ),
                reraise_not_found=True,
            )
        except ApiError:
            # The event expired (TTL) under us: start a fresh one.
            self._series = {k: v for k, v in self._series.items() if v is not series}
            if pending is not None:
                await self._create(pending, series.last_observed_time)
            return
        if patched is not None:
            series.flushed_count = count
            series.flushed_at = self.clock.now()

    async def _attempt(
        self, call: Any, reraise_not_found: bool = False, creating: bool = False
    ) -> dict[str, Any] | None:
        delay = 0.2
        for attempt in range(1, self.write_attempts + 1):
            retry_after = 0.0
            try:
                result: dict[str, Any] = await call()
                return result
            except ApiError as error:
                if error.is_not_found and reraise_not_found:
                    raise
                if error.is_fenced:
                    # Not leading any more (or not provably): retrying cannot help, and the
                    # leader election counts and reports the refused writes once.
                    break
                if error.is_already_exists and attempt > 1:
                    # Our own earlier attempt was written before its answer was lost (a 5xx
                    # after the fact, a reset): the names are unique, so this is that Event.
                    return {}
                if creating and error.is_denied:
                    self.disable(f"create {EVENTS.plural}.{EVENTS.group} is not granted ({error})")
                    self.metrics.events_dropped_total.labels(reason="forbidden").inc()
                    return None
                if error.is_invalid or error.is_forbidden or error.is_already_exists:
                    log.warning("Event rejected", extra={"err": str(error)})
                    break
                last_error: BaseException = error
                retry_after = error.retry_after or 0.0
            except _TRANSIENT as error:
                last_error = error
            if attempt < self.write_attempts:
                await self.clock.sleep(max(delay, retry_after))
                delay *= 2
            else:
                log.warning("Event write failed", extra={"err": str(last_error)})
        self.metrics.events_dropped_total.labels(reason="write_failed").inc()
        return None

    def _unique_nanos(self) -> int:
        nanos = int(self.clock.wall().timestamp() * 1_000_000_000)
        self._last_nanos = max(nanos, self._last_nanos + 1)
        return self._last_nanos


MAX_NAME_LENGTH = 253


def event_name(regarding: str, unique: int) -> str:
    """``<regarding name>.<unique hex>``, cut to a valid DNS subdomain: a 253-character object
    name plus the suffix would exceed the limit and the apiserver would refuse the Event."""
    suffix = f".{unique:x}"
    stem = regarding[: MAX_NAME_LENGTH - len(suffix)].rstrip(".-")
    return f"{stem or 'event'}{suffix}"
