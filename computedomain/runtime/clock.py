"""Injectable time: a monotonic clock, a UTC wall clock and sleep.

Everything time-dependent in the runtime takes a ``Clock`` so tests can drive it with
``FakeClock`` instead of waiting in real time.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol

MICROTIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"
RFC3339_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


class Clock(Protocol):
    def now(self) -> float:
        """Monotonic seconds; only differences are meaningful."""
        ...

    def wall(self) -> datetime:
        """The current UTC wall-clock time (timezone-aware)."""
        ...

    async def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now(self) -> float:
        return time.monotonic()

    def wall(self) -> datetime:
        return datetime.now(UTC)

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class FakeClock:
    """A clock that only moves when a test calls ``advance``.

    Sleepers wake in deadline order (ties in the order they went to sleep), and each wake-up
    is given a chance to run, and to go back to sleep, before time moves on to the next one.
    """

    def __init__(self, start: float = 1000.0, wall_start: datetime | None = None) -> None:
        self._now = start
        self._start = start
        self._wall_start = wall_start or datetime(2025, 1, 1, tzinfo=UTC)
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._sequence = itertools.count()

    def now(self) -> float:
        return self._now

    def wall(self) -> datetime:
        return self._wall_start + timedelta(seconds=self._now - self._start)

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._now + seconds, next(self._sequence), future))
        await future

    @property
    def sleepers(self) -> int:
        """How many coroutines are currently asleep on this clock."""
        return sum(1 for _, _, f in self._sleepers if not f.done())

    def freeze_for(self, seconds: float) -> None:
        """Move time forward without waking anyone: what a process sees after SIGSTOP/SIGCONT,
        a long GC pause or a frozen VM (its timers fire only once it runs again)."""
        self._now += seconds

    async def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds``, waking every sleeper whose deadline passes."""
        target = self._now + seconds
        await settle()
        while self._sleepers and self._sleepers[0][0] <= target:
            deadline, _, future = heapq.heappop(self._sleepers)
            self._now = max(self._now, deadline)
            if not future.done():
                future.set_result(None)
                await settle()
        self._now = target
        await settle()


async def settle(rounds: int = 20) -> None:
    """Let ready tasks run until the loop has had ``rounds`` turns."""
    for _ in range(rounds):
        await asyncio.sleep(0)


async def wait_event(clock: Clock, event: asyncio.Event, seconds: float | None) -> bool:
    """Wait for ``event`` or ``seconds`` on ``clock``; True when the event is set."""
    if event.is_set():
        return True
    if seconds is None:
        await event.wait()
        return True
    if seconds <= 0:
        return False
    waiter = asyncio.ensure_future(event.wait())
    sleeper = asyncio.ensure_future(clock.sleep(seconds))
    try:
        await asyncio.wait({waiter, sleeper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (waiter, sleeper):
            if not task.done():
                task.cancel()
    return event.is_set()


def format_microtime(moment: datetime) -> str:
    """MicroTime: UTC with exactly six fractional digits (kubernetes#94748)."""
    return moment.astimezone(UTC).strftime(MICROTIME_FORMAT)


def format_time(moment: datetime) -> str:
    """metav1.Time: RFC 3339 at second precision, UTC."""
    return moment.astimezone(UTC).strftime(RFC3339_FORMAT)


def parse_time(value: str) -> datetime:
    """Parse a metav1.Time or MicroTime string into an aware UTC datetime."""
    text = value.strip()
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    return datetime.fromisoformat(text).astimezone(UTC)
