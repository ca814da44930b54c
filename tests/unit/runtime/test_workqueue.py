import asyncio

import pytest
from prometheus_client import CollectorRegistry

from computedomain.runtime.metrics import RuntimeMetrics
from computedomain.runtime.workqueue import LOW_PRIORITY, RateLimiter, WorkQueue
from tests.kit.clock import FakeClock, settle


def make_queue(
    clock: FakeClock | None = None,
) -> tuple[WorkQueue[str], FakeClock, CollectorRegistry]:
    clock = clock or FakeClock()
    registry = CollectorRegistry()
    queue: WorkQueue[str] = WorkQueue("test", clock=clock, metrics=RuntimeMetrics(registry))
    return queue, clock, registry


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, {"name": "test", "controller": "test", **labels})


def test_per_item_backoff_doubles_from_5ms_and_caps_at_1000s() -> None:
    limiter: RateLimiter[str] = RateLimiter(qps=1e9, burst=10**9, clock=FakeClock())
    delays = [limiter.when("a") for _ in range(20)]
    assert delays[:4] == pytest.approx([0.005, 0.01, 0.02, 0.04])
    assert delays[17] == pytest.approx(655.36)
    assert delays[18] == 1000.0
    assert delays[19] == 1000.0
    assert limiter.num_requeues("a") == 20
    assert limiter.when("b") == pytest.approx(0.005)


def test_forget_resets_the_backoff() -> None:
    limiter: RateLimiter[str] = RateLimiter(clock=FakeClock())
    for _ in range(5):
        limiter.when("a")
    limiter.forget("a")
    assert limiter.num_requeues("a") == 0
    assert limiter.when("a") == pytest.approx(0.005)


def test_huge_failure_counts_do_not_overflow() -> None:
    limiter: RateLimiter[str] = RateLimiter(qps=1e9, burst=10**9, clock=FakeClock())
    for _ in range(2000):
        delay = limiter.when("a")
    assert delay == 1000.0


def test_token_bucket_dominates_once_the_burst_is_spent() -> None:
    limiter: RateLimiter[str] = RateLimiter(qps=10, burst=100, clock=FakeClock())
    delays = [limiter.when(f"key-{i}") for i in range(102)]
    assert delays[:100] == pytest.approx([0.005] * 100)
    assert delays[100] == pytest.approx(0.1)
    assert delays[101] == pytest.approx(0.2)


async def test_adding_a_waiting_key_is_deduplicated() -> None:
    queue, _, registry = make_queue()
    queue.add("a")
    queue.add("a")
    queue.add("b")
    assert queue.len() == 2
    assert await queue.get() == "a"
    assert await queue.get() == "b"
    assert sample(registry, "workqueue_adds_total") == 2


async def test_key_is_never_handed_out_twice_at_once() -> None:
    queue, _, _ = make_queue()
    queue.add("a")
    assert await queue.get() == "a"
    queue.add("a")
    second = asyncio.create_task(queue.get())
    await settle()
    assert not second.done(), "a key being processed must not be handed out again"
    queue.done("a")
    assert await second == "a"


async def test_add_during_processing_requeues_once_after_done() -> None:
    queue, _, _ = make_queue()
    queue.add("a")
    await queue.get()
    queue.add("a")
    queue.add("a")
    assert queue.len() == 0
    queue.done("a")
    assert queue.len() == 1
    assert await queue.get() == "a"
    queue.done("a")
    assert queue.len() == 0


async def test_add_after_waits_on_the_clock() -> None:
    queue, clock, registry = make_queue()
    queue.add_after("a", 5)
    assert (queue.len(), queue.delayed) == (0, 1)
    getter = asyncio.create_task(queue.get())
    await clock.advance(4.9)
    assert not getter.done()
    await clock.advance(0.2)
    assert await getter == "a"
    assert queue.delayed == 0
    assert sample(registry, "workqueue_retries_total") == 1


async def test_add_after_keeps_the_earliest_deadline() -> None:
    queue, clock, _ = make_queue()
    queue.add_after("a", 10)
    queue.add_after("a", 2)
    queue.add_after("a", 7)
    getter = asyncio.create_task(queue.get())
    await clock.advance(2)
    assert await getter == "a"
    queue.done("a")
    await clock.advance(20)
    assert queue.len() == 0


async def test_delayed_within_counts_keys_due_by_then() -> None:
    queue, clock, _ = make_queue()
    queue.add_after("soon", 5)
    queue.add_after("later", 120)
    assert (queue.delayed, queue.delayed_within(60)) == (2, 1)
    getter = asyncio.create_task(queue.get())
    await clock.advance(5)
    assert await getter == "soon"
    queue.done("soon")
    assert (queue.delayed, queue.delayed_within(60)) == (1, 0)
    await clock.advance(60)
    assert (queue.delayed, queue.delayed_within(60)) == (1, 1)


async def test_add_rate_limited_uses_the_backoff() -> None:
    queue, clock, _ = make_queue()
    for expected in (0.005, 0.01, 0.02):
        queue.add_rate_limited("a")
        getter = asyncio.create_task(queue.get())
        await clock.advance(expected * 0.9)
        assert not getter.done()
        await clock.advance(expected * 0.2)
        assert await getter == "a"
        queue.done("a")
    assert queue.num_requeues("a") == 3
    queue.forget("a")
    assert queue.num_requeues("a") == 0


async def test_higher_priority_goes_first_and_fifo_within_a_priority() -> None:
    queue, _, registry = make_queue()
    queue.add("initial-1", priority=LOW_PRIORITY)
    queue.add("initial-2", priority=LOW_PRIORITY)
    queue.add("change-1")
    queue.add("change-2")
    assert sample(registry, "workqueue_depth", priority="-100") == 2
    assert sample(registry, "workqueue_depth", priority="0") == 2
    order = [await queue.get() for _ in range(4)]
    assert order == ["change-1", "change-2", "initial-1", "initial-2"]
    assert sample(registry, "workqueue_depth", priority="-100") == 0


async def test_re_adding_with_higher_priority_promotes_a_waiting_key() -> None:
    queue, _, registry = make_queue()
    queue.add("a", priority=LOW_PRIORITY)
    queue.add("b")
    queue.add("a", priority=10)
    assert queue.len() == 2
    assert await queue.get() == "a"
    assert await queue.get() == "b"
    assert sample(registry, "workqueue_depth", priority="-100") == 0
    assert sample(registry, "workqueue_depth", priority="10") == 0


async def test_shutdown_wakes_getters_and_refuses_adds() -> None:
    queue, _, _ = make_queue()
    getter = asyncio.create_task(queue.get())
    await settle()
    queue.shutdown()
    assert await getter is None
    queue.add("a")
    assert queue.len() == 0


async def test_shutdown_with_drain_hands_out_ready_keys_then_none() -> None:
    queue, _, _ = make_queue()
    queue.add("a")
    queue.add_after("later", 5)
    queue.shutdown(drain=True)
    assert await queue.get() == "a"
    assert await queue.get() is None


async def test_drained_waits_for_in_flight_keys() -> None:
    queue, _, _ = make_queue()
    queue.add("a")
    await queue.get()
    queue.shutdown(drain=True)
    waiter = asyncio.create_task(queue.drained())
    await settle()
    assert not waiter.done()
    queue.done("a")
    await asyncio.wait_for(waiter, 1)


async def test_durations_and_in_flight_gauges() -> None:
    queue, clock, registry = make_queue()
    queue.add("a")
    await clock.advance(3)
    await queue.get()
    await clock.advance(2)
    assert sample(registry, "workqueue_longest_running_processor_seconds") == 2
    assert sample(registry, "workqueue_unfinished_work_seconds") == 2
    queue.done("a")
    assert sample(registry, "workqueue_queue_duration_seconds_sum") == 3
    assert sample(registry, "workqueue_work_duration_seconds_sum") == 2
    assert sample(registry, "workqueue_longest_running_processor_seconds") == 0
