"""A clock for tests: time moves only when the test says so (the runtime takes any ``Clock``)."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from datetime import UTC, datetime, timedelta


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
