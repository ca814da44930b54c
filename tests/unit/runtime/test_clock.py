import asyncio
from datetime import UTC, datetime

from computedomain.runtime.clock import (
    SystemClock,
    format_microtime,
    format_time,
    parse_time,
    wait_event,
)
from tests.kit.clock import FakeClock


async def test_fake_clock_wakes_sleepers_in_deadline_order() -> None:
    clock = FakeClock()
    woke: list[tuple[str, float]] = []

    async def sleeper(name: str, seconds: float) -> None:
        await clock.sleep(seconds)
        woke.append((name, clock.now() - 1000.0))

    tasks = [asyncio.create_task(sleeper(n, s)) for n, s in (("c", 3), ("a", 1), ("b", 2))]
    await clock.advance(1.5)
    assert woke == [("a", 1.0)]
    await clock.advance(10)
    assert woke == [("a", 1.0), ("b", 2.0), ("c", 3.0)]
    assert clock.now() == 1011.5
    await asyncio.gather(*tasks)


async def test_fake_clock_runs_chained_sleeps_within_one_advance() -> None:
    clock = FakeClock()
    ticks: list[float] = []

    async def ticker() -> None:
        for _ in range(3):
            await clock.sleep(2)
            ticks.append(clock.now())

    task = asyncio.create_task(ticker())
    await clock.advance(5)
    assert ticks == [1002.0, 1004.0]
    await clock.advance(1)
    assert ticks == [1002.0, 1004.0, 1006.0]
    await task


async def test_fake_clock_wall_follows_monotonic() -> None:
    clock = FakeClock(wall_start=datetime(2025, 3, 1, tzinfo=UTC))
    await clock.advance(61.5)
    assert clock.wall() == datetime(2025, 3, 1, 0, 1, 1, 500000, tzinfo=UTC)


async def test_wait_event_times_out_on_the_fake_clock() -> None:
    clock = FakeClock()
    event = asyncio.Event()
    waiter = asyncio.create_task(wait_event(clock, event, 5))
    await clock.advance(4.9)
    assert not waiter.done()
    await clock.advance(0.2)
    assert waiter.done()
    assert await waiter is False


async def test_wait_event_returns_when_set() -> None:
    clock = FakeClock()
    event = asyncio.Event()
    waiter = asyncio.create_task(wait_event(clock, event, 5))
    await asyncio.sleep(0)
    event.set()
    assert await waiter is True
    assert clock.sleepers == 0


def test_microtime_always_has_six_fraction_digits() -> None:
    whole = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert format_microtime(whole) == "2025-01-02T03:04:05.000000Z"
    assert format_time(whole) == "2025-01-02T03:04:05Z"
    assert parse_time("2025-01-02T03:04:05.000000Z") == whole
    assert parse_time("2025-01-02T03:04:05Z") == whole


def test_system_clock_wall_is_utc_aware() -> None:
    assert SystemClock().wall().tzinfo is not None
