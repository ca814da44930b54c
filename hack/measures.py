"""What the benchmark scenarios share (hack/bench.py, hack/versus.py): the moment a watched
condition held (list+watch, timed at the event's receipt), percentiles of observed samples, and a
process's CPU time."""

from __future__ import annotations

import asyncio
import math
import os
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from computedomain.devcluster.watching import watch_objects
from computedomain.runtime.client import ApiError, KubeClient
from computedomain.runtime.resources import Resource

Obj = dict[str, Any]


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (no interpolation: every figure is an observed sample)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100.0 * len(ordered)))
    return ordered[rank - 1]


def summary(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {}
    return {
        "n": len(values),
        "min": min(values),
        "p50": percentile(values, 50),
        "p95": percentile(values, 95),
        "p99": percentile(values, 99),
        "max": max(values),
        "mean": statistics.fmean(values),
    }


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of the process (all threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def now() -> float:
    return time.monotonic()


async def watch_until(
    client: KubeClient,
    res: Resource,
    check: Callable[[dict[str, Obj]], bool],
    *,
    namespace: str | None = None,
    label_selector: str | None = None,
    field_selector: str | None = None,
    within: float = 300.0,
    what: str = "",
) -> float:
    """Until `check(objects by name)` holds; returns the monotonic time of the event that
    satisfied it (taken inside the check, before any further I/O)."""
    satisfied_at: float = await watch_objects(
        client,
        res,
        lambda objects: check(objects) and now(),
        namespace=namespace,
        label_selector=label_selector,
        field_selector=field_selector,
        within=within,
        what=what,
    )
    return satisfied_at


class ObjectWatch:
    """Watches one object and lets callers await a predicate, timestamped at event receipt."""

    def __init__(self, client: KubeClient, res: Resource, name: str, namespace: str) -> None:
        self.client, self.res, self.name, self.namespace = client, res, name, namespace
        self.latest: Obj | None = None
        self.received_at = 0.0
        self._changed = asyncio.Condition()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> ObjectWatch:
        self.latest = await self.client.get(self.res, self.name, self.namespace)
        self.received_at = now()
        self._task = asyncio.create_task(self._run(self.latest["metadata"]["resourceVersion"]))
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self, rv: str) -> None:
        while True:
            try:
                async for kind, obj in self.client.watch(
                    self.res,
                    self.namespace,
                    field_selector=f"metadata.name={self.name}",
                    resource_version=rv,
                    timeout_seconds=600,
                ):
                    if kind == "BOOKMARK":
                        rv = obj["metadata"]["resourceVersion"]
                        continue
                    received = now()
                    rv = obj["metadata"]["resourceVersion"]
                    async with self._changed:
                        self.latest, self.received_at = obj, received
                        self._changed.notify_all()
            except ApiError as err:
                if not err.is_gone:
                    raise
                rv = (await self.client.get(self.res, self.name, self.namespace))["metadata"][
                    "resourceVersion"
                ]

    async def wait(self, predicate: Callable[[Obj | None], bool], within: float = 30.0) -> float:
        """Monotonic receipt time of the first state (current or later) satisfying it."""
        async with asyncio.timeout(within), self._changed:
            await self._changed.wait_for(lambda: predicate(self.latest))
            return self.received_at
