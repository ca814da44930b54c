"""The controller runner: N workers taking keys from a WorkQueue and reconciling them.

Result semantics follow controller-runtime's ``reconcileHandler``: success forgets the key,
``requeue_after`` forgets and re-adds after the delay, ``requeue`` and errors re-add with rate
limiting (an API error's ``Retry-After`` is the least delay), a ``TerminalError`` is counted
and not retried. Unexpected exceptions (bugs) are
counted as panics and timeouts as timeouts; both are then handled as errors. A write refused by
the client's fence (``ApiError.is_fenced``) is an error too, but logs no ``Reconciler error``:
it says nothing about the key, and the leader election reports the refusals once.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import uuid
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

import aiohttp
from prometheus_client import CollectorRegistry

from computedomain.runtime.clock import Clock, SystemClock
from computedomain.runtime.errors import ApiError
from computedomain.runtime.metrics import RuntimeMetrics
from computedomain.runtime.workqueue import WorkQueue

log = logging.getLogger(__name__)

reconcile_id: contextvars.ContextVar[str] = contextvars.ContextVar("reconcile_id", default="")
"""A fresh uuid4 per reconcile call; loggers read it to tag every line of one reconcile."""
controller_name: contextvars.ContextVar[str] = contextvars.ContextVar("controller_name", default="")


@dataclass(frozen=True)
class Result:
    requeue_after: float | None = None
    requeue: bool = False

    def sooner(self, delay: float) -> Result:
        """Requeued after ``delay`` or after this result's own delay, whichever comes first."""
        return Result(requeue_after=min(delay, self.requeue_after or delay))


class TerminalError(Exception):
    """A reconcile error that retrying cannot fix (e.g. invalid user input): no requeue."""


class ReconcileError(Exception):
    """An expected, retryable reconcile failure (logged without a traceback)."""


EXPECTED_ERRORS: tuple[type[BaseException], ...] = (
    ApiError,
    ReconcileError,
    aiohttp.ClientError,
    OSError,
    TimeoutError,
)
"""Exceptions that are ordinary errors; anything else counts as a panic (a bug)."""

K = TypeVar("K", bound=Hashable)


class Controller(Generic[K]):
    """Workers reconciling the keys of one queue; a key's ``str()`` names it in logs."""

    def __init__(
        self,
        name: str,
        queue: WorkQueue[K],
        reconcile: Callable[[K], Awaitable[Result | None]],
        workers: int = 4,
        timeout: float | None = 60.0,
        metrics: RuntimeMetrics | None = None,
        clock: Clock | None = None,
        expected_errors: tuple[type[BaseException], ...] = EXPECTED_ERRORS,
    ) -> None:
        if workers < 1:
            raise ValueError("workers must be at least 1")
        self.name = name
        self.queue = queue
        self.reconcile = reconcile
        self.workers = workers
        self.timeout = timeout
        self.metrics = metrics or RuntimeMetrics(CollectorRegistry())
        self.clock = clock or SystemClock()
        self.expected_errors = expected_errors
        self.metrics.init_controller(name, workers)

    async def run(self) -> None:
        """Run the workers until the queue shuts down (or this task is cancelled)."""
        self.metrics.max_concurrent_reconciles.labels(controller=self.name).set(self.workers)
        async with asyncio.TaskGroup() as group:
            for index in range(self.workers):
                group.create_task(self._worker(), name=f"{self.name}-worker-{index}")

    async def _worker(self) -> None:
        while True:
            key = await self.queue.get()
            if key is None:
                return
            try:
                await self.process(key)
            finally:
                self.queue.done(key)

    async def process(self, key: K) -> None:
        """Reconcile one key and act on the outcome (the caller marks the key done)."""
        id_token = reconcile_id.set(str(uuid.uuid4()))
        name_token = controller_name.set(self.name)
        active = self.metrics.active_workers.labels(controller=self.name)
        active.inc()
        started = self.clock.now()
        try:
            await self._process_in_context(key)
        finally:
            self.metrics.reconcile_time_seconds.labels(controller=self.name).observe(
                max(0.0, self.clock.now() - started)
            )
            active.dec()
            reconcile_id.reset(id_token)
            controller_name.reset(name_token)

    async def _process_in_context(self, key: K) -> None:
        metrics = self.metrics
        name = self.name
        deadline = asyncio.timeout(self.timeout)
        try:
            async with deadline:
                result = await self.reconcile(key) or Result()
        except TerminalError as error:
            metrics.terminal_reconcile_errors_total.labels(controller=name).inc()
            metrics.reconcile_errors_total.labels(controller=name).inc()
            metrics.reconcile_total.labels(controller=name, result="error").inc()
            self.queue.forget(key)
            log.error("Reconciler error", extra=self._fields(key, error, terminal=True))
            return
        except TimeoutError as error:
            if deadline.expired():
                metrics.reconcile_timeouts_total.labels(controller=name).inc()
                log.error(
                    "Reconciler error",
                    extra=self._fields(key, f"reconcile exceeded its {self.timeout}s deadline"),
                )
            else:
                log.error("Reconciler error", extra=self._fields(key, error))
            self._requeue_after_error(key)
            return
        except self.expected_errors as error:
            if isinstance(error, ApiError) and error.is_fenced:
                # Not this key's fault: the replica cannot prove it leads, and every write of
                # every key is refused until it exits. The leader election says so once, with
                # the count (LeaderElector.write_fence); a line per key would bury it.
                log.debug("Reconcile's write refused by the fence", extra=self._fields(key, error))
            else:
                log.error("Reconciler error", extra=self._fields(key, error))
            retry_after = error.retry_after if isinstance(error, ApiError) else None
            self._requeue_after_error(key, retry_after)
            return
        except Exception as error:
            metrics.reconcile_panics_total.labels(controller=name).inc()
            log.exception("Observed a panic in reconciler", extra=self._fields(key, error))
            self._requeue_after_error(key)
            return

        if result.requeue_after is not None and result.requeue_after > 0:
            self.queue.forget(key)
            self.queue.add_after(key, result.requeue_after)
            metrics.reconcile_total.labels(controller=name, result="requeue_after").inc()
        elif result.requeue:
            self.queue.add_rate_limited(key)
            metrics.reconcile_total.labels(controller=name, result="requeue").inc()
        else:
            self.queue.forget(key)
            metrics.reconcile_total.labels(controller=name, result="success").inc()

    def _requeue_after_error(self, key: K, retry_after: float | None = None) -> None:
        """Back off; never sooner than a server's ``Retry-After`` (a 429 the client did not
        wait out itself)."""
        self.metrics.reconcile_errors_total.labels(controller=self.name).inc()
        self.metrics.reconcile_total.labels(controller=self.name, result="error").inc()
        self.queue.add_rate_limited(key, at_least=retry_after or 0.0)

    def _fields(
        self, key: K, error: BaseException | str, terminal: bool = False
    ) -> dict[str, object]:
        fields: dict[str, object] = {
            "controller": self.name,
            "key": str(key),
            "reconcileID": reconcile_id.get(),
            "err": str(error) or type(error).__name__,
        }
        if terminal:
            fields["terminal"] = True
        return fields
