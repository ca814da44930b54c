"""What the simulated node components share: settings, caches, the write budget, pod IPs."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp

from computedomain.api import constants as c
from computedomain.runtime import objects
from computedomain.runtime.client import ApiError, KubeClient
from computedomain.runtime.clock import Clock, format_microtime
from computedomain.runtime.informer import Informer
from computedomain.runtime.objects import object_key
from computedomain.runtime.resources import EVENTS

from .faults import FaultPlanner, FaultSettings
from .ipam import DEFAULT_POD_CIDR, PodIPAllocator
from .signals import Signals

log = logging.getLogger("computedomain.sim")


DEFAULT_DRIVER_NAMESPACE = "nvidia-dra-driver-gpu"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
NODE_NOT_READY_LABEL = "node-not-ready.stage.kwok.x-k8s.io"

T = TypeVar("T")


@dataclass(frozen=True)
class SimSettings:
    driver_namespace: str = DEFAULT_DRIVER_NAMESPACE
    """Where the IMEX daemons run and their cliques live (NVIDIA's chart namespace)."""
    pod_cidr: str = DEFAULT_POD_CIDR
    """Addresses for the pods the simulator runs (disjoint from kwok's --cidr)."""
    faults: FaultSettings = field(default_factory=FaultSettings)
    max_concurrent_writes: int = 16
    """Upper bound on API writes in flight, across every simulated node."""
    recheck_interval: float = 30.0
    """Safety net: a waiting pod re-reads the caches this often even without an event."""
    only_kwok_nodes: bool = True
    """Act only on pods bound to nodes annotated ``kwok.x-k8s.io/node=fake``."""
    seed: int | None = None
    """Seed of every random choice (delays, faults, jitter); None means random."""
    imex_mode: str = c.IMEX_MODE_DRIVER
    """``hostManaged``: play the plugin of contract §18, which asks the host's nvidia-imex
    (simulated healthy) instead of waiting for IMEX daemons; no node label, no daemon."""

    @property
    def host_managed(self) -> bool:
        return self.imex_mode == c.IMEX_MODE_HOST


class SimContext:
    """Shared state of one simulator run, handed to the fake plugin and daemons."""

    def __init__(
        self,
        client: KubeClient,
        settings: SimSettings,
        clock: Clock,
        informers: Mapping[str, Informer],
    ) -> None:
        self.client = client
        self.settings = settings
        self.clock = clock
        self.rng = random.Random(settings.seed)  # noqa: S311 - simulation, not cryptography
        self.planner = FaultPlanner(settings.faults, self.rng)
        self.ipam = PodIPAllocator(settings.pod_cidr)
        self.signals = Signals(clock)
        self.informers = informers
        self._write_slots = asyncio.Semaphore(settings.max_concurrent_writes)
        self._reported: set[tuple[str, str]] = set()
        self._last_event_nanos = 0
        self.observers: dict[str, Callable[[dict[str, Any] | None, dict[str, Any]], None]] = {}
        self.on_daemon_ready: Callable[[str], None] | None = None

    def daemon_ready(self, node_name: str) -> None:
        if self.on_daemon_ready is not None:
            self.on_daemon_ready(node_name)

    # -- caches ---------------------------------------------------------------------------

    def pod(self, key: str) -> dict[str, Any] | None:
        return self.informers["pods"].store.get(key)

    def node(self, name: str) -> dict[str, Any] | None:
        return self.informers["nodes"].store.get(name)

    def claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.informers["claims"].store.get(f"{namespace}/{name}")

    def compute_domain(self, uid: str) -> dict[str, Any] | None:
        found = self.informers["computedomains"].store.by_index("uid", uid)
        return found[0] if found else None

    def clique(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.informers["cliques"].store.get(f"{namespace}/{name}")

    def observe(self, informer: str, obj: dict[str, Any]) -> None:
        """Put the answer of our own write into the cache and run our handler for it.

        The watch event for that write will carry the same RV and be skipped, so without this
        the signals that follow the change would never fire.
        """
        store = self.informers[informer].store
        old = store.get(object_key(obj))
        if store.observe_write(obj):
            observer = self.observers.get(informer)
            if observer is not None:
                observer(old, obj)

    # -- writes ---------------------------------------------------------------------------

    async def write(self, call: Callable[[], Awaitable[T]]) -> T:
        """Run one API write within the global concurrency bound.

        Throttling (429) and transient failures are retried here; every other error reaches
        the caller, which knows whether it is final.
        """
        delay = 0.05
        while True:
            try:
                async with self._write_slots:
                    return await call()
            except ApiError as error:
                if error.is_too_many_requests:
                    await self.clock.sleep(error.retry_after or delay)
                elif error.status >= 500 or error.status == 0:
                    await self.clock.sleep(delay)
                else:
                    raise
            except (aiohttp.ClientError, TimeoutError) as error:
                log.warning("API write failed, retrying", extra={"err": str(error)})
                await self.clock.sleep(delay)
            delay = min(delay * 2, 5.0)

    async def report(
        self, pod: Mapping[str, Any], event_type: str, reason: str, note: str, *, once: bool = True
    ) -> None:
        """Record an event on a pod as the kubelet of its node would (once per reason)."""
        metadata = objects.meta(pod)
        uid = str(metadata.get("uid", ""))
        if once:
            if (uid, reason) in self._reported:
                return
            self._reported.add((uid, reason))
        node_name = str((pod.get("spec") or {}).get("nodeName", ""))
        namespace = str(metadata.get("namespace", "default"))
        body = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            # Named as client-go's recorder names them: a generateName ending in "." is refused.
            "metadata": {"name": self._event_name(metadata), "namespace": namespace},
            "eventTime": format_microtime(self.clock.wall()),
            "reportingController": "kubelet",
            "reportingInstance": node_name or "computedomain-sim",
            "action": "Prepare" if reason.startswith("Failed") else "Probe",
            "reason": reason,
            "type": event_type,
            "note": note[:1024],
            "regarding": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": metadata.get("name"),
                "namespace": namespace,
                "uid": uid,
            },
        }
        try:
            await self.write(lambda: self.client.create(EVENTS, body, namespace))
        except ApiError as error:
            log.warning("Could not record event", extra={"reason": reason, "err": str(error)})

    def _event_name(self, metadata: Mapping[str, Any]) -> str:
        """``<pod>.<hex nanoseconds>``, unique within this process."""
        nanos = max(int(self.clock.wall().timestamp() * 1e9), self._last_event_nanos + 1)
        self._last_event_nanos = nanos
        return f"{metadata.get('name', 'pod')}.{nanos:x}"

    def forget_pod(self, uid: str) -> None:
        self._reported = {item for item in self._reported if item[0] != uid}
        self.ipam.release(uid)
