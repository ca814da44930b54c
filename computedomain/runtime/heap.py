"""Handing the C heap's free pages back to the operating system.

Decoding the first LISTs of every cache allocates far more than the caches keep, and a churn of
objects frees as much as it allocates. CPython frees that memory to the C library, which keeps
most of it mapped: glibc returns free pages only from the top of its heap, so under churn the
RSS creeps up while the live heap stays flat. ``malloc_trim(0)`` releases the free pages of
every arena: about 1.5-2 MiB of a ~62 MiB controller once its caches are synced (measured at
288 nodes and 100 CDs); under 0.2 ms when there is nothing to release, ~15 ms for 500 MB.
"""

from __future__ import annotations

import ctypes
import functools
import logging
from collections.abc import Callable

from computedomain.runtime.clock import Clock

log = logging.getLogger(__name__)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none (musl, macOS)."""
    try:
        # The process's own symbols: the C library is loaded already, nothing is searched for.
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    result: Callable[[int], int] = trim
    return result


def release_free_heap() -> bool:
    """Return the C heap's free pages to the operating system; True if the C library could."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    log.debug("Released free heap pages")
    return True


async def release_free_heap_every(clock: Clock, seconds: float) -> None:
    """Release now, then every ``seconds``: what a churn freed goes back between releases."""
    while release_free_heap():
        await clock.sleep(seconds)
