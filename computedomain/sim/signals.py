"""Wake-ups keyed by name: informer handlers ``notify`` keys, simulated processes wait on them.

A waiter registers *before* it reads the caches and decides, so a change that lands between
the read and the wait is never lost (everything runs on one event loop).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from types import TracebackType

from computedomain.runtime.clock import Clock, wait_event


class Signals:
    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._waiters: dict[str, set[asyncio.Event]] = {}

    def notify(self, *keys: str) -> None:
        for key in keys:
            for event in self._waiters.pop(key, ()):
                event.set()

    def listen(self, keys: Iterable[str]) -> Waiter:
        return Waiter(self, tuple(keys))

    def _register(self, keys: tuple[str, ...], event: asyncio.Event) -> None:
        for key in keys:
            self._waiters.setdefault(key, set()).add(event)

    def _unregister(self, keys: tuple[str, ...], event: asyncio.Event) -> None:
        for key in keys:
            waiters = self._waiters.get(key)
            if waiters is not None:
                waiters.discard(event)
                if not waiters:
                    del self._waiters[key]

    @property
    def waiting(self) -> int:
        return len({id(event) for events in self._waiters.values() for event in events})


class Waiter:
    """``with signals.listen(keys) as waiter: <read, decide>; await waiter.wait(at_most)``."""

    def __init__(self, signals: Signals, keys: tuple[str, ...]) -> None:
        self._signals = signals
        self._keys = keys
        self._event = asyncio.Event()

    def __enter__(self) -> Waiter:
        self._signals._register(self._keys, self._event)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._signals._unregister(self._keys, self._event)

    async def wait(self, at_most: float | None = None) -> bool:
        """True when notified, False after ``at_most`` seconds (the caller re-checks either way)."""
        return await wait_event(self._signals._clock, self._event, at_most)


def pod_key(namespace: str, name: str) -> str:
    return f"pod:{namespace}/{name}"


def node_key(name: str) -> str:
    return f"node:{name}"


def domain_key(uid: str) -> str:
    return f"cd:{uid}"


def claim_key(namespace: str, name: str) -> str:
    return f"claim:{namespace}/{name}"


def clique_key(namespace: str, name: str) -> str:
    return f"clique:{namespace}/{name}"
