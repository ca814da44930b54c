"""Injectable time: a monotonic clock, a UTC wall clock and sleep.

Everything time-dependent in the runtime takes a ``Clock`` so tests can drive it with the
test kit's ``FakeClock`` instead of waiting in real time.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
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
