"""Polling for things no watch can tell (a process's HTTP endpoint, a metric); API objects
are waited for with ``computedomain.devcluster.watching`` (list+watch, never sleeps)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def eventually(
    probe: Callable[[], Awaitable[T | None]],
    *,
    within: float,
    what: str,
    interval: float = 0.2,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """Poll ``probe`` until it returns something other than None/False; TimeoutError after
    ``within`` seconds, naming ``what`` and the last value seen."""
    deadline = clock() + within
    last: T | None = None
    while True:
        last = await probe()
        if last is not None and last is not False:
            return last
        if clock() >= deadline:
            raise TimeoutError(f"timed out after {within:.0f}s waiting for {what} (last: {last!r})")
        await asyncio.sleep(interval)
