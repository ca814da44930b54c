import asyncio

import pytest

from computedomain.runtime.ratelimit import TokenBucket
from tests.kit.clock import FakeClock


def test_burst_is_free_then_tokens_arrive_at_qps() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=10, burst=3, clock=clock)
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.reserve() == pytest.approx(0.1)
    assert bucket.reserve() == pytest.approx(0.2)


async def test_tokens_refill_up_to_burst_only() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=1, burst=2, clock=clock)
    bucket.reserve()
    bucket.reserve()
    await clock.advance(100)
    assert bucket.reserve() == 0.0
    assert bucket.reserve() == 0.0
    assert bucket.reserve() == pytest.approx(1.0)


async def test_acquire_sleeps_on_the_clock() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=2, burst=1, clock=clock)
    await bucket.acquire()
    waiter = asyncio.create_task(bucket.acquire())
    await clock.advance(0.4)
    assert not waiter.done()
    await clock.advance(0.1)
    assert waiter.done()


def test_invalid_parameters() -> None:
    with pytest.raises(ValueError, match="qps"):
        TokenBucket(qps=0, burst=1)
