import asyncio
import logging
from collections.abc import Awaitable, Callable

import pytest
from prometheus_client import CollectorRegistry

from computedomain.runtime.client import ApiError
from computedomain.runtime.controller import (
    Controller,
    Result,
    TerminalError,
    reconcile_id,
)
from computedomain.runtime.errors import FENCED_REASON
from computedomain.runtime.metrics import RuntimeMetrics
from computedomain.runtime.workqueue import WorkQueue
from tests.kit.clock import FakeClock, settle


class Harness:
    def __init__(
        self,
        reconcile: Callable[[str], Awaitable[Result | None]],
        workers: int = 2,
        timeout: float | None = 60.0,
    ) -> None:
        self.clock = FakeClock()
        self.registry = CollectorRegistry()
        metrics = RuntimeMetrics(self.registry)
        self.queue: WorkQueue[str] = WorkQueue("ctl", clock=self.clock, metrics=metrics)
        self.controller = Controller(
            "ctl", self.queue, reconcile, workers=workers, timeout=timeout, metrics=metrics
        )

    def total(self, result: str) -> float | None:
        return self.registry.get_sample_value(
            "controller_runtime_reconcile_total", {"controller": "ctl", "result": result}
        )

    def counter(self, name: str) -> float | None:
        return self.registry.get_sample_value(name, {"controller": "ctl"})

    async def process(self, key: str) -> None:
        self.queue.add(key)
        taken = await self.queue.get()
        assert taken == key
        try:
            await self.controller.process(key)
        finally:
            self.queue.done(key)


async def test_success_forgets_and_counts() -> None:
    async def reconcile(key: str) -> Result:
        return Result()

    harness = Harness(reconcile)
    harness.queue.rate_limiter.when("ns/a")
    await harness.process("ns/a")
    assert harness.total("success") == 1
    assert harness.total("error") == 0
    assert harness.queue.num_requeues("ns/a") == 0
    assert harness.queue.len() == 0


async def test_requeue_after_forgets_and_adds_after_the_delay() -> None:
    async def reconcile(key: str) -> Result:
        return Result(requeue_after=30)

    harness = Harness(reconcile)
    harness.queue.rate_limiter.when("ns/a")
    await harness.process("ns/a")
    assert harness.total("requeue_after") == 1
    assert harness.queue.num_requeues("ns/a") == 0
    getter = asyncio.create_task(harness.queue.get())
    await harness.clock.advance(29)
    assert not getter.done()
    await harness.clock.advance(1)
    assert await getter == "ns/a"


async def test_requeue_adds_rate_limited() -> None:
    async def reconcile(key: str) -> Result:
        return Result(requeue=True)

    harness = Harness(reconcile)
    await harness.process("ns/a")
    assert harness.total("requeue") == 1
    assert harness.queue.num_requeues("ns/a") == 1


async def test_expected_error_requeues_with_backoff_without_a_panic() -> None:
    async def reconcile(key: str) -> Result:
        raise ApiError(409, "Conflict", "stale")

    harness = Harness(reconcile)
    await harness.process("ns/a")
    assert harness.total("error") == 1
    assert harness.counter("controller_runtime_reconcile_errors_total") == 1
    assert harness.counter("controller_runtime_reconcile_panics_total") == 0
    assert harness.queue.num_requeues("ns/a") == 1


async def test_an_api_error_with_retry_after_is_not_retried_sooner() -> None:
    """A 429 the client did not wait out itself (its Retry-After was too long to hold a
    worker) comes back no sooner than the server asked, whatever the backoff says."""

    async def reconcile(key: str) -> Result:
        raise ApiError(429, "TooManyRequests", "slow down", retry_after=30.0)

    harness = Harness(reconcile)
    await harness.process("ns/a")
    assert harness.total("error") == 1
    assert harness.queue.delayed == 1
    assert harness.queue.delayed_within(29.9) == 0
    assert harness.queue.delayed_within(30.0) == 1


async def test_a_write_refused_by_the_fence_logs_no_reconciler_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The replica cannot prove it leads: every key's writes are refused until it exits, and
    the leader election says so once; the key is still an error and retried."""

    async def reconcile(key: str) -> Result:
        raise ApiError(0, FENCED_REASON, "PATCH /api/v1/nodes/n: refused, leadership not proven")

    harness = Harness(reconcile)
    with caplog.at_level(logging.DEBUG, logger="computedomain"):
        for key in ("ns/a", "ns/b", "ns/c"):
            await harness.process(key)
    assert harness.total("error") == 3
    assert harness.queue.num_requeues("ns/a") == 1
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO] == []
    assert "Reconciler error" not in caplog.text


@pytest.mark.parametrize(
    "error",
    [
        ApiError(500, "InternalError", "etcd is down"),
        ApiError(0, "WriteRefused", "PATCH /x: refused, standing by"),  # not the fence
        ApiError(0, "", "no reason"),
    ],
    ids=["500", "write-guard", "status-0"],
)
async def test_any_other_api_error_still_logs_reconciler_error(
    caplog: pytest.LogCaptureFixture, error: ApiError
) -> None:
    async def reconcile(key: str) -> Result:
        raise error

    harness = Harness(reconcile)
    with caplog.at_level(logging.DEBUG, logger="computedomain"):
        await harness.process("ns/a")
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [r.getMessage() for r in errors] == ["Reconciler error"]
    assert errors[0].__dict__["err"] == str(error)
    assert harness.total("error") == 1


async def test_terminal_error_is_counted_and_not_retried() -> None:
    async def reconcile(key: str) -> Result:
        raise TerminalError("bad spec")

    harness = Harness(reconcile)
    harness.queue.rate_limiter.when("ns/a")
    await harness.process("ns/a")
    assert harness.total("error") == 1
    assert harness.counter("controller_runtime_terminal_reconcile_errors_total") == 1
    assert harness.queue.num_requeues("ns/a") == 0
    await harness.clock.advance(3600)
    assert harness.queue.len() == 0


async def test_unexpected_exception_counts_a_panic_and_is_handled_as_an_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def reconcile(key: str) -> Result:
        raise KeyError("bug")

    harness = Harness(reconcile)
    with caplog.at_level(logging.ERROR):
        await harness.process("ns/a")
    assert harness.counter("controller_runtime_reconcile_panics_total") == 1
    assert harness.counter("controller_runtime_reconcile_errors_total") == 1
    assert harness.total("error") == 1
    assert harness.queue.num_requeues("ns/a") == 1
    assert any(record.exc_info for record in caplog.records)


async def test_deadline_counts_a_timeout_and_requeues() -> None:
    async def reconcile(key: str) -> Result:
        await asyncio.Event().wait()
        return Result()

    harness = Harness(reconcile, timeout=0.01)
    await harness.process("ns/a")
    assert harness.counter("controller_runtime_reconcile_timeouts_total") == 1
    assert harness.total("error") == 1
    assert harness.queue.num_requeues("ns/a") == 1


async def test_timeout_error_raised_inside_reconcile_is_not_a_deadline() -> None:
    async def reconcile(key: str) -> Result:
        raise TimeoutError("socket read")

    harness = Harness(reconcile)
    await harness.process("ns/a")
    assert harness.counter("controller_runtime_reconcile_timeouts_total") == 0
    assert harness.total("error") == 1


async def test_reconcile_id_is_fresh_per_call_and_visible_inside() -> None:
    seen: list[tuple[str, str]] = []

    async def reconcile(key: str) -> Result:
        seen.append((reconcile_id.get(), key))
        return Result()

    harness = Harness(reconcile)
    await harness.process("ns/a")
    await harness.process("ns/a")
    assert seen[0][1] == "ns/a"
    assert len(seen[0][0]) == 36
    assert seen[0][0] != seen[1][0]
    assert reconcile_id.get() == ""


async def test_workers_run_keys_concurrently_but_never_the_same_key_twice() -> None:
    running: set[str] = set()
    peak = 0
    overlap = False
    release = asyncio.Event()
    calls: list[str] = []

    async def reconcile(key: str) -> Result:
        nonlocal peak, overlap
        overlap = overlap or key in running
        running.add(key)
        peak = max(peak, len(running))
        calls.append(key)
        await release.wait()
        running.discard(key)
        return Result()

    harness = Harness(reconcile, workers=3)
    runner = asyncio.create_task(harness.controller.run())
    for key in ("a", "b", "c"):
        harness.queue.add(key)
    await settle()
    harness.queue.add("a")
    await settle()
    assert peak == 3
    assert (
        harness.registry.get_sample_value(
            "controller_runtime_active_workers", {"controller": "ctl"}
        )
        == 3
    )
    release.set()
    await settle()
    assert not overlap
    assert sorted(calls) == ["a", "a", "b", "c"]
    harness.queue.shutdown()
    await asyncio.wait_for(runner, 1)


async def test_run_returns_when_the_queue_shuts_down() -> None:
    async def reconcile(key: str) -> Result:
        return Result()

    harness = Harness(reconcile, workers=2)
    runner = asyncio.create_task(harness.controller.run())
    await settle()
    harness.queue.shutdown()
    await asyncio.wait_for(runner, 1)


def test_sooner_takes_the_earlier_delay() -> None:
    assert Result().sooner(5.0) == Result(requeue_after=5.0)
    assert Result(requeue_after=2.0).sooner(5.0) == Result(requeue_after=2.0)
    assert Result(requeue_after=9.0).sooner(5.0) == Result(requeue_after=5.0)
