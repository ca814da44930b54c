"""Runs our controller in the test's event loop against the real control plane, and waits on
objects through watches (never fixed sleeps)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.app import ControllerProcess, run_controller
from computedomain.config import parse_settings
from computedomain.devcluster.rest import eventually
from computedomain.devcluster.watching import Predicate, watch_object
from computedomain.observability.logging import configure_logging
from computedomain.runtime.client import KubeClient
from computedomain.runtime.resources import Resource

TEST_IMAGE = "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v0.4.0"
WRITE_METHODS = ("POST", "PUT", "PATCH", "DELETE")


@dataclass
class RunningController:
    process: ControllerProcess
    registry: CollectorRegistry
    stop: asyncio.Event
    task: asyncio.Task[None]

    def writes(self) -> float:
        """API write requests this replica has sent so far (rest_client_requests_total)."""
        total = 0.0
        for metric in self.registry.collect():
            if metric.name != "rest_client_requests":
                continue
            for sample in metric.samples:
                if sample.name.endswith("_total") and sample.labels.get("method") in WRITE_METHODS:
                    total += sample.value
        return total

    async def wait_idle(self) -> None:
        """Every enqueued or scheduled reconcile has run and every recorded event is written."""
        queue = self.process.queue

        async def quiet() -> bool:
            # Delayed keys count too: a requeue timer firing in the window could write.
            return len(queue) == 0 and not queue.processing and not queue.delayed

        await eventually(quiet, within=60, what="an empty work queue")
        await asyncio.wait_for(self.process.recorder.wait_idle(), 60)

    async def shutdown(self) -> None:
        self.stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(self.task, timeout=30)


@dataclass
class ControllerFactory:
    kubeconfig: Path
    driver_namespace: str
    running: list[RunningController] = field(default_factory=list)

    async def start(self, **env: str) -> RunningController:
        environ = {
            "IMAGE_NAME": TEST_IMAGE,
            "NAMESPACE": self.driver_namespace,
            "KUBECONFIG": str(self.kubeconfig),
            "LEADER_ELECTION_ENABLED": "false",
            "HTTP_ENDPOINT": "127.0.0.1:0",
            "PROBE_ADDRESS": "127.0.0.1:0",
            "ORPHAN_GRACE_PERIOD": "1s",
            "DAEMON_POD_WAIT_TIMEOUT": "20s",
            "LOG_FORMAT": "text",
            **env,
        }
        settings = parse_settings([], environ)
        configure_logging(log_format="text", verbosity=0)
        registry = CollectorRegistry()
        stop = asyncio.Event()
        ready: asyncio.Future[ControllerProcess] = asyncio.get_running_loop().create_future()

        async def on_ready(process: ControllerProcess) -> None:
            ready.set_result(process)

        task = asyncio.create_task(
            run_controller(settings, stop, registry=registry, on_ready=on_ready)
        )
        process = await asyncio.wait_for(asyncio.shield(ready), timeout=30)
        await asyncio.wait_for(
            asyncio.gather(*(inf.wait_synced() for inf in process.caches.all)), timeout=60
        )
        running = RunningController(process, registry, stop, task)
        self.running.append(running)
        return running

    async def stop_all(self) -> None:
        for running in self.running:
            await running.shutdown()
        self.running.clear()


async def watch_until(
    client: KubeClient,
    res: Resource,
    name: str,
    namespace: str | None,
    predicate: Predicate,
    *,
    timeout: float = 30.0,
    what: str = "",
) -> dict[str, Any] | None:
    """Until `predicate(obj)` holds for the object `name` (None once it is gone)."""
    return await watch_object(
        client, res, name, predicate, namespace=namespace, within=timeout, what=what
    )


async def create_cd(
    client: KubeClient,
    namespace: str,
    name: str,
    rct_name: str = "imex-channel-0",
    num_nodes: int = 0,
) -> dict[str, Any]:
    body = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": name},
        "spec": {"numNodes": num_nodes, "channel": {"resourceClaimTemplate": {"name": rct_name}}},
    }
    return await client.create(COMPUTE_DOMAINS, body, namespace)


@contextlib.asynccontextmanager
async def kube_client(api_client: Any) -> AsyncIterator[KubeClient]:
    yield KubeClient.from_api_client(api_client)
