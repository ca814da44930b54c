"""Our controller in the caller's event loop against a real control plane, for the tests and
the benchmark: one replica (``start_controller``) or several (``Controllers``), with the API
requests it made read from its own ``rest_client_requests_total``."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from computedomain.api import constants as c
from computedomain.app import ControllerProcess, run_controller
from computedomain.config import environ, parse_settings
from computedomain.observability.logging import configure_logging

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
Labels = Mapping[str, str]
Obj = dict[str, Any]


@dataclass
class RunningController:
    process: ControllerProcess
    registry: CollectorRegistry
    stop: asyncio.Event
    task: asyncio.Task[None]

    def counter(self, name: str, where: Callable[[Labels], bool] = lambda _: True) -> float:
        """Sum of the ``<name>_total`` samples whose labels satisfy ``where``."""
        total = 0.0
        for metric in self.registry.collect():
            if metric.name == name:
                total += sum(
                    s.value for s in metric.samples if s.name.endswith("_total") and where(s.labels)
                )
        return total

    def requests(self, where: Callable[[Labels], bool] = lambda _: True) -> float:
        """API requests this replica sent (rest_client_requests_total) matching ``where``."""
        return self.counter("rest_client_requests", where)

    def writes(self) -> float:
        return self.requests(lambda labels: labels.get("method") in WRITE_METHODS)

    def forbidden(self) -> float:
        return self.requests(lambda labels: labels.get("code") == "403")

    async def wait_synced(self, within: float = 60.0) -> None:
        caches = self.process.caches.all
        await asyncio.wait_for(asyncio.gather(*(inf.wait_synced() for inf in caches)), within)

    async def wait_idle(self, within: float = 60.0, *, timers: bool = True) -> None:
        """Every enqueued reconcile, and (with ``timers``) every one scheduled within
        ``within`` seconds, has run, and every recorded event is written."""
        queue = self.process.queue
        horizon = within if timers else 0.0
        async with asyncio.timeout(within):
            # Delayed keys count too: a requeue timer firing in the window could write. A
            # timer beyond it (a daemon's grace period, 2 min, set while it started) cannot.
            while len(queue) or queue.processing or queue.delayed_within(horizon):  # noqa: ASYNC110
                await asyncio.sleep(0.2)  # polls an in-process queue, not the API
        await asyncio.wait_for(self.process.recorder.wait_idle(), within)

    async def shutdown(self, within: float = 30.0) -> None:
        self.stop.set()
        with contextlib.suppress(asyncio.CancelledError, TimeoutError):
            await asyncio.wait_for(self.task, timeout=within)


async def start_controller(
    kubeconfig: Path,
    driver_namespace: str,
    env: Mapping[str, str] | None = None,
    *,
    wait_synced: float | None = 60.0,
    log_verbosity: int | None = 0,
    on_ready: Callable[[ControllerProcess], None] | None = None,
) -> RunningController:
    """Start one replica: no leader election, listeners on free loopback ports, text logs, the
    test image; ``env`` (environment variable names) overrides any of it. Waits up to
    ``wait_synced`` seconds for its caches (None: return at once, e.g. when a verb is missing).
    ``log_verbosity`` None leaves logging as the caller set it up; ``on_ready`` sees the
    process before it starts."""
    base = environ(
        image_name=c.NVIDIA_DRIVER_IMAGE,
        namespace=driver_namespace,
        kubeconfig=str(kubeconfig),
        leader_election_enabled="false",
        http_endpoint="127.0.0.1:0",
        probe_address="127.0.0.1:0",
        log_format="text",
    )
    settings = parse_settings([], {**base, **(env or {})})
    if log_verbosity is not None:
        configure_logging(log_format="text", verbosity=log_verbosity)
    registry = CollectorRegistry()
    stop = asyncio.Event()
    ready: asyncio.Future[ControllerProcess] = asyncio.get_running_loop().create_future()

    async def started(process: ControllerProcess) -> None:
        if on_ready is not None:
            on_ready(process)
        ready.set_result(process)

    task = asyncio.create_task(run_controller(settings, stop, registry=registry, on_ready=started))
    waiting: list[asyncio.Future[Any]] = [ready, task]
    done, _ = await asyncio.wait(waiting, timeout=60, return_when=asyncio.FIRST_COMPLETED)
    if ready not in done:
        ready.cancel()
        if task in done:
            task.result()  # it failed before it was built: raise that
        raise TimeoutError("the controller was not built within 60s")
    running = RunningController(ready.result(), registry, stop, task)
    if wait_synced is not None:
        await running.wait_synced(wait_synced)
    return running


@dataclass
class Controllers:
    """Replicas started against one cluster and driver namespace; ``stop_all`` ends them."""

    kubeconfig: Path
    driver_namespace: str
    # Defaults for every replica (environment variable names), under each start's own.
    env: Mapping[str, str] = field(default_factory=dict)
    running: list[RunningController] = field(default_factory=list)

    async def start(self, **env: str) -> RunningController:
        started = await start_controller(
            self.kubeconfig, self.driver_namespace, {**self.env, **env}
        )
        self.running.append(started)
        return started

    async def stop_all(self) -> None:
        for running in self.running:
            await running.shutdown()
        self.running.clear()


def compute_domain(name: str, rct_name: str = "imex-channel-0", num_nodes: int = 0) -> Obj:
    """A ComputeDomain body, as a user would apply it."""
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.CD_KIND,
        "metadata": {"name": name},
        "spec": {"numNodes": num_nodes, "channel": {"resourceClaimTemplate": {"name": rct_name}}},
    }
