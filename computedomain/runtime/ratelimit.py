"""A token bucket in the style of golang.org/x/time/rate ``Reserve``.

Reservations may drive the balance negative: the caller is told how long to wait for its
token instead of being refused, which is what both the client and the workqueue need.
"""

from __future__ import annotations

from computedomain.runtime.clock import Clock, SystemClock


class TokenBucket:
    # The Event recorder keeps one per event key, thousands under churn: no __dict__ each.
    __slots__ = ("_clock", "_last", "_tokens", "burst", "qps")

    def __init__(self, qps: float, burst: int, clock: Clock | None = None) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError("qps must be positive and burst at least 1")
        self.qps = qps
        self.burst = burst
        self._clock = clock or SystemClock()
        self._tokens = float(burst)
        self._last = self._clock.now()

    def _refill(self) -> None:
        now = self._clock.now()
        self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
        self._last = now

    def allow(self) -> bool:
        """Take a token only if one is available now."""
        self._refill()
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True

    @property
    def full(self) -> bool:
        """True when the whole burst is available again (the bucket carries no history)."""
        self._refill()
        return self._tokens >= self.burst

    def reserve(self) -> float:
        """Take one token; return the seconds to wait before it may be used (0 if available)."""
        self._refill()
        self._tokens -= 1.0
        if self._tokens >= 0:
            return 0.0
        return -self._tokens / self.qps

    async def acquire(self) -> None:
        """Wait until a token is ours."""
        delay = self.reserve()
        if delay > 0:
            await self._clock.sleep(delay)
