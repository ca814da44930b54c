"""How the informer comes back after a watch ends (issue 18): at once after a clean end, after
one short delay (never a growing one) when a stream that delivered is cut, and never sooner
than a 429's Retry-After. Time is a FakeClock: a reconnect that waits shows as no new watch."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest

from computedomain.observability.health import CheckFailedError, informers_synced
from computedomain.runtime.client import ApiError
from computedomain.runtime.informer import Informer
from computedomain.runtime.resources import NODES, PODS
from tests.kit.clock import FakeClock, settle

Obj = dict[str, Any]


def node(name: str, rv: int) -> Obj:
    return {"metadata": {"name": name, "resourceVersion": str(rv)}}


@dataclass
class ScriptedWatches:
    """Each watch delivers one new MODIFIED event, then ends as ``ending`` says: None returns
    (a clean end), an exception is raised. ``watches`` records each watch's resourceVersion."""

    ending: Callable[[int], BaseException | None]
    watches: list[str | None] = field(default_factory=list)

    async def list(self, res: Any, **kwargs: Any) -> Obj:
        return {"metadata": {"resourceVersion": "10", "continue": ""}, "items": [node("a", 10)]}

    async def watch(self, res: Any, **kwargs: Any) -> AsyncIterator[tuple[str, Obj]]:
        self.watches.append(kwargs.get("resource_version"))
        number = len(self.watches)
        ending = self.ending(number)
        if isinstance(ending, ApiError) and ending.is_too_many_requests:
            raise ending  # refused before any event
        yield "MODIFIED", node("a", 10 + number)
        if ending is not None:
            raise ending
        if number >= 50:
            await asyncio.Event().wait()


async def started(client: ScriptedWatches) -> tuple[Informer, FakeClock, asyncio.Task[None]]:
    clock = FakeClock()
    informer = Informer(client, NODES, clock=clock, rng=random.Random(1))  # type: ignore[arg-type]
    task = asyncio.create_task(informer.run())
    await settle()
    return informer, clock, task


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_clean_end_of_a_watch_resumes_at_once_from_the_last_event() -> None:
    client = ScriptedWatches(ending=lambda number: None)
    informer, _, task = await started(client)
    try:
        # No time passed on the clock, yet every watch was followed by the next one, each
        # from the last event's RV, until the script's last (50th) watch stayed open.
        assert len(client.watches) == 50
        assert client.watches[:4] == ["10", "11", "12", "13"]
        assert client.watches[-1] == "59"
        assert informer.resource_version == "60"
    finally:
        await stop(task)


async def test_streams_cut_after_delivering_reconnect_after_one_short_delay_each() -> None:
    """A reset after events is a new failure, not one more of a series: the delay stays at
    the first step (0.8 s, up to 1.6 s with jitter) however many cuts follow."""
    client = ScriptedWatches(ending=lambda number: aiohttp.ClientPayloadError("reset"))
    _, clock, task = await started(client)
    try:
        for _ in range(8):
            before = len(client.watches)
            await clock.advance(1.6)
            assert len(client.watches) > before, f"no reconnect within 1.6 s after cut {before}"
        # Each resumed from the last event it delivered.
        assert client.watches == [str(10 + n) for n in range(len(client.watches))]
    finally:
        await stop(task)


async def test_a_throttled_watch_waits_for_retry_after() -> None:
    throttled = ApiError(429, "TooManyRequests", "slow down", retry_after=5.0)
    client = ScriptedWatches(ending=lambda number: throttled if number == 1 else None)
    _, clock, task = await started(client)
    try:
        assert len(client.watches) == 1
        await clock.advance(4.9)  # the backoff alone (0.8-1.6 s) would have retried by now
        assert len(client.watches) == 1
        await clock.advance(0.2)
        assert len(client.watches) > 1
    finally:
        await stop(task)


class ForbiddenLists:
    async def list(self, res: Any, **kwargs: Any) -> Obj:
        raise ApiError(403, "Forbidden", 'pods is forbidden: cannot list in "does-not-exist"')


async def test_readyz_says_why_an_informer_has_not_synced() -> None:
    """NAMESPACE=does-not-exist: the informers there never list (403 until someone makes the
    namespace and the Role); /readyz/informers names each with the apiserver's reason."""
    informer = Informer(
        ForbiddenLists(),  # type: ignore[arg-type]
        PODS,
        namespace="does-not-exist",
        clock=FakeClock(),
        name="pods/does-not-exist",
    )
    task = asyncio.create_task(informer.run())
    await settle()
    try:
        with pytest.raises(CheckFailedError) as failed:
            informers_synced([informer])()
        reason = str(failed.value)
        assert reason.startswith("informers not synced: pods/does-not-exist (403 Forbidden")
        assert "does namespace does-not-exist exist" in reason
    finally:
        await stop(task)
