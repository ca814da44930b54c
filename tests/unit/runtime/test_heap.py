"""release_free_heap: glibc's malloc_trim where there is one, nothing where there is none; and
release_free_heap_every, its period."""

from __future__ import annotations

import asyncio
import ctypes
import platform
from typing import Any

import pytest

from computedomain.runtime import heap
from tests.kit.clock import FakeClock, settle


@pytest.fixture(autouse=True)
def fresh_lookup() -> Any:
    heap._malloc_trim.cache_clear()
    yield
    heap._malloc_trim.cache_clear()


@pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only"
)
def test_glibc_releases() -> None:
    assert heap.release_free_heap() is True


def test_a_c_library_without_malloc_trim_is_a_no_op(monkeypatch: pytest.MonkeyPatch) -> None:
    class Musl:
        def __init__(self, name: str | None) -> None:
            pass

        def __getattr__(self, name: str) -> Any:
            raise AttributeError(name)

    monkeypatch.setattr(ctypes, "CDLL", Musl)
    assert heap.release_free_heap() is False


async def test_free_heap_is_released_at_once_then_every_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    trims: list[float] = []
    clock = FakeClock()

    def trim(pad: int) -> int:
        trims.append(clock.now())
        return 1

    monkeypatch.setattr(heap, "_malloc_trim", lambda: trim)
    releasing = asyncio.create_task(heap.release_free_heap_every(clock, 60.0))
    await settle()
    assert trims == [1000.0]
    await clock.advance(59.0)
    assert len(trims) == 1
    await clock.advance(1.0)
    await clock.advance(120.0)
    assert trims == [1000.0, 1060.0, 1120.0, 1180.0]
    releasing.cancel()
    with pytest.raises(asyncio.CancelledError):
        await releasing


async def test_without_malloc_trim_nothing_is_scheduled(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    monkeypatch.setattr(heap, "_malloc_trim", lambda: None)
    await asyncio.wait_for(heap.release_free_heap_every(clock, 60.0), 1.0)
    assert clock.sleepers == 0
