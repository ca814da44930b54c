"""A deduplicating, rate-limited, delaying priority work queue (client-go ``workqueue``).

Keys wait in ``dirty`` until handed out and sit in ``processing`` until ``done``. Adding a
waiting key is a no-op (bursts collapse into one reconcile); adding a key being processed
marks it dirty, and ``done`` puts it back. So a key is never handed out twice at once.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections import Counter as Tally
from collections.abc import Hashable
from typing import Generic, TypeVar

from prometheus_client import CollectorRegistry

from computedomain.runtime.clock import Clock, SystemClock, wait_event
from computedomain.runtime.metrics import RuntimeMetrics
from computedomain.runtime.ratelimit import TokenBucket

LOW_PRIORITY = -100
"""Priority for adds caused by an informer's initial list, so real changes go first."""

_MAX_EXPONENT = 62

K = TypeVar("K", bound=Hashable)
"""A queue's key type: any hashable value (the controller's are typed keys; str() names one)."""


class RateLimiter(Generic[K]):
    """Per-item exponential backoff max'ed with an overall token bucket.

    controller-runtime's default: ``5 ms * 2^failures`` capped at 1000 s, and 10 qps / burst 100.
    """

    def __init__(
        self,
        base_delay: float = 0.005,
        max_delay: float = 1000.0,
        qps: float = 10.0,
        burst: int = 100,
        clock: Clock | None = None,
    ) -> None:
        self.base_delay = base_delay
        self.max_delay = max_delay
        self._bucket = TokenBucket(qps, burst, clock)
        self._failures: dict[K, int] = {}

    def when(self, key: K) -> float:
        """The delay before ``key`` may be retried; counts one more failure for it."""
        failures = self._failures.get(key, 0)
        self._failures[key] = failures + 1
        exponent = min(failures, _MAX_EXPONENT)
        backoff = min(self.base_delay * (2.0**exponent), self.max_delay)
        return max(backoff, self._bucket.reserve())

    def forget(self, key: K) -> None:
        self._failures.pop(key, None)

    def num_requeues(self, key: K) -> int:
        return self._failures.get(key, 0)


class WorkQueue(Generic[K]):
    def __init__(
        self,
        name: str,
        rate_limiter: RateLimiter[K] | None = None,
        clock: Clock | None = None,
        metrics: RuntimeMetrics | None = None,
    ) -> None:
        self.name = name
        self.clock = clock or SystemClock()
        self.rate_limiter: RateLimiter[K] = rate_limiter or RateLimiter(clock=self.clock)
        self.metrics = metrics or RuntimeMetrics(CollectorRegistry())
        self._sequence = itertools.count()
        # Ready keys: heap of (-priority, seq, key); _ready maps key -> its live (priority, seq).
        self._heap: list[tuple[int, int, K]] = []
        self._ready: dict[K, tuple[int, int]] = {}
        self._dirty: set[K] = set()
        self._dirty_priority: dict[K, int] = {}
        self._processing: dict[K, float] = {}
        self._added_at: dict[K, float] = {}
        # Delayed keys: heap of (ready_at, seq, key); _delayed maps key -> earliest ready_at.
        self._delayed_heap: list[tuple[float, int, K]] = []
        self._delayed: dict[K, tuple[float, int]] = {}
        self._depth: Tally[int] = Tally()
        self._changed = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._shutting_down = False
        self._drain = False

        self.metrics.init_queue(name)
        self._adds = self.metrics.workqueue_adds_total.labels(name=name, controller=name)
        self._retries = self.metrics.workqueue_retries_total.labels(name=name, controller=name)
        self._queue_duration = self.metrics.workqueue_queue_duration_seconds.labels(
            name=name, controller=name
        )
        self._work_duration = self.metrics.workqueue_work_duration_seconds.labels(
            name=name, controller=name
        )
        self.metrics.workqueue_unfinished_work_seconds.labels(
            name=name, controller=name
        ).set_function(self._unfinished_work)
        self.metrics.workqueue_longest_running_processor_seconds.labels(
            name=name, controller=name
        ).set_function(self._longest_running)
        self._set_depth(0)

    # -- adding -----------------------------------------------------------------------------

    def add(self, key: K, priority: int = 0) -> None:
        if self._shutting_down:
            return
        if key in self._dirty:
            self._raise_priority(key, priority)
            return
        self._adds.inc()
        self._dirty.add(key)
        self._dirty_priority[key] = priority
        self._added_at[key] = self.clock.now()
        if key in self._processing:
            return
        self._push_ready(key, priority)

    def add_after(self, key: K, delay: float, priority: int = 0) -> None:
        if self._shutting_down:
            return
        if delay <= 0:
            self.add(key, priority)
            return
        self._retries.inc()
        ready_at = self.clock.now() + delay
        existing = self._delayed.get(key)
        if existing is not None and existing[0] <= ready_at:
            return
        sequence = next(self._sequence)
        self._delayed[key] = (ready_at, sequence)
        heapq.heappush(self._delayed_heap, (ready_at, sequence, key))
        self._notify()

    def add_rate_limited(self, key: K, at_least: float = 0.0) -> None:
        """Re-add after the key's backoff, or ``at_least`` seconds if that is longer."""
        self.add_after(key, max(self.rate_limiter.when(key), at_least))

    def forget(self, key: K) -> None:
        self.rate_limiter.forget(key)

    def num_requeues(self, key: K) -> int:
        return self.rate_limiter.num_requeues(key)

    # -- taking -----------------------------------------------------------------------------

    async def get(self) -> K | None:
        """The next ready key, waiting as long as needed; None once the queue shuts down."""
        while True:
            self._promote_due()
            if self._shutting_down and not (self._drain and self._heap):
                return None
            key = self._pop_ready()
            if key is not None:
                return key
            changed = self._changed
            timeout = None
            if self._delayed_heap:
                timeout = self._delayed_heap[0][0] - self.clock.now()
            await wait_event(self.clock, changed, timeout)

    def done(self, key: K) -> None:
        started = self._processing.pop(key, None)
        if started is not None:
            self._work_duration.observe(max(0.0, self.clock.now() - started))
        if key in self._dirty and not self._shutting_down:
            self._push_ready(key, self._dirty_priority.get(key, 0))
        if not self._processing:
            self._idle.set()

    def len(self) -> int:
        """Keys ready to be handed out (not counting delayed or in-flight ones)."""
        return len(self._ready)

    def __len__(self) -> int:
        return self.len()

    @property
    def processing(self) -> int:
        return len(self._processing)

    @property
    def delayed(self) -> int:
        """Keys waiting for their add_after / backoff time."""
        return len(self._delayed)

    def delayed_within(self, seconds: float) -> int:
        """Delayed keys that become ready within ``seconds`` from now."""
        horizon = self.clock.now() + seconds
        return sum(1 for ready_at, _ in self._delayed.values() if ready_at <= horizon)

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    # -- shutdown ---------------------------------------------------------------------------

    def shutdown(self, drain: bool = False) -> None:
        """Stop taking adds and wake every ``get``.

        With ``drain`` the keys already ready are still handed out before ``get`` returns None;
        without it ``get`` returns None at once. Await ``drained()`` for in-flight keys.
        """
        self._shutting_down = True
        self._drain = drain
        self._delayed.clear()
        self._delayed_heap.clear()
        self._notify()

    async def drained(self) -> None:
        """Wait until no key is being processed."""
        await self._idle.wait()

    # -- internals --------------------------------------------------------------------------

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def _push_ready(self, key: K, priority: int) -> None:
        sequence = next(self._sequence)
        self._ready[key] = (priority, sequence)
        heapq.heappush(self._heap, (-priority, sequence, key))
        self._set_depth(priority, +1)
        self._notify()

    def _raise_priority(self, key: K, priority: int) -> None:
        if priority <= self._dirty_priority.get(key, priority):
            return
        self._dirty_priority[key] = priority
        current = self._ready.get(key)
        if current is not None:
            self._set_depth(current[0], -1)
            self._push_ready(key, priority)

    def _pop_ready(self) -> K | None:
        while self._heap:
            negative_priority, sequence, key = heapq.heappop(self._heap)
            if self._ready.get(key) != (-negative_priority, sequence):
                continue  # superseded by a higher-priority entry
            del self._ready[key]
            self._set_depth(-negative_priority, -1)
            self._dirty.discard(key)
            self._dirty_priority.pop(key, None)
            now = self.clock.now()
            added = self._added_at.pop(key, now)
            self._queue_duration.observe(max(0.0, now - added))
            self._processing[key] = now
            self._idle.clear()
            return key
        return None

    def _promote_due(self) -> None:
        now = self.clock.now()
        while self._delayed_heap and self._delayed_heap[0][0] <= now:
            ready_at, sequence, key = heapq.heappop(self._delayed_heap)
            if self._delayed.get(key) != (ready_at, sequence):
                continue
            del self._delayed[key]
            self.add(key)

    def _set_depth(self, priority: int, change: int = 0) -> None:
        self._depth[priority] += change
        self.metrics.workqueue_depth.labels(
            name=self.name, controller=self.name, priority=str(priority)
        ).set(self._depth[priority])

    def _unfinished_work(self) -> float:
        now = self.clock.now()
        return sum(now - started for started in self._processing.values())

    def _longest_running(self) -> float:
        if not self._processing:
            return 0.0
        return self.clock.now() - min(self._processing.values())
