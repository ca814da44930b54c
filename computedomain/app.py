"""Wires the controller process together: client, caches, queue, reconciler, election, server.

Caches run in every replica (a warm standby); only the leader runs reconcile workers, the
periodic sweep and the event writer, so only the leader writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from computedomain.admission.webhook import PlacementWebhook
from computedomain.config import Settings
from computedomain.domain import permissions
from computedomain.domain.caches import Caches, build_caches
from computedomain.domain.coexistence import CoexistenceMonitor
from computedomain.domain.keys import CDKey, QueueKey
from computedomain.domain.reconciler import ComputeDomainReconciler
from computedomain.domain.topology import CliqueInventory, reported_cliques
from computedomain.domain.watches import EventRouter, wire
from computedomain.observability.health import (
    CheckFailedError,
    Flag,
    HealthChecks,
    informers_synced,
    ping,
)
from computedomain.observability.logging import bind, reconcile_fields
from computedomain.observability.metrics import DomainMetrics
from computedomain.observability.server import ObservabilityServer
from computedomain.runtime.access import Access
from computedomain.runtime.client import KubeClient, load_client
from computedomain.runtime.clock import Clock, SystemClock
from computedomain.runtime.controller import Controller, Result
from computedomain.runtime.credentials import ResolverRun
from computedomain.runtime.events import EventRecorder
from computedomain.runtime.heap import release_free_heap_every
from computedomain.runtime.identity import new_identity
from computedomain.runtime.metrics import RuntimeMetrics
from computedomain.runtime.ratelimit import TokenBucket
from computedomain.runtime.workqueue import LOW_PRIORITY, WorkQueue

log = logging.getLogger(__name__)

CONTROLLER_NAME = "computedomain"
REPORTING_CONTROLLER = "resource.nvidia.com/computedomain-controller"
FIELD_MANAGER = "computedomain-controller"
INVENTORY_INTERVAL = 5.0
# The C heap's free pages go back to the system this often (see runtime/heap.py).
HEAP_RELEASE_INTERVAL = 60.0
# The Event writer's own budget (client-go's event broadcaster allows bursts of 25, then
# refills slowly); one writer task sends them one at a time anyway.
EVENT_QPS = 10.0
EVENT_BURST = 25


@dataclass
class ControllerProcess:
    """One controller replica. `run()` returns on shutdown; raises if leadership is lost."""

    settings: Settings
    client: KubeClient
    registry: CollectorRegistry
    runtime_metrics: RuntimeMetrics
    clock: Clock

    def __post_init__(self) -> None:
        s = self.settings
        self.domain_metrics = DomainMetrics(self.registry)
        self.caches: Caches = build_caches(
            self.client,
            driver_namespace=s.driver_namespace,
            additional_namespaces=s.reconciler.additional_namespaces,
            node_inventory_interval=s.node_inventory_resync_interval,
            nvidia_controller_selectors=s.nvidia_controller_selectors,
        )
        self.queue: WorkQueue[QueueKey] = WorkQueue(
            CONTROLLER_NAME, metrics=self.runtime_metrics, clock=self.clock
        )
        self.recorder = EventRecorder(
            # Events have a budget of their own: a burst of new CDs spends the client's on
            # children and status, never waiting behind its own Events.
            self.client.with_rate_limiter(TokenBucket(EVENT_QPS, EVENT_BURST, self.clock)),
            REPORTING_CONTROLLER,
            f"{REPORTING_CONTROLLER.split('/')[-1]}-{s.pod_name}"[:128],
            clock=self.clock,
            metrics=self.runtime_metrics,
        )

        # While NVIDIA's controller runs, reconciles write nothing (they check first), and a
        # write already on its way when the stand-by begins is refused here.
        def standing_by() -> str:
            return self.coexistence.standing_by

        # What this identity may do, reviewed at the start of `run` (domain/permissions.py).
        self.access = Access()
        self.reconciler = ComputeDomainReconciler(
            self.client.with_write_guard(standing_by),
            self.caches,
            s.reconciler,
            self.recorder,
            self.domain_metrics,
            self.clock,
            backlog=self.queue.len,
            standing_by=standing_by,
            access=self.access,
        )
        self.controller = Controller(
            CONTROLLER_NAME,
            self.queue,
            self._reconcile_with_log_fields,
            workers=s.workers,
            timeout=s.reconcile_timeout,
            metrics=self.runtime_metrics,
        )
        self.router = EventRouter(self.caches, self.queue, s.reconciler.orphan_grace_period)
        self.coexistence = CoexistenceMonitor(
            self.recorder,
            self.domain_metrics,
            requeue_all=self._requeue_all,
            selectors=s.nvidia_controller_selectors,
            own_lease=(s.lease_namespace, s.lease_name) if s.leader_election else None,
            daemon_image=s.reconciler.daemon.image,
            driver_namespace=s.driver_namespace,
            namespaces=s.reconciler.additional_namespaces,
        )
        wire(self.router, self.coexistence)
        self.shutting_down = Flag("shutting down", up=True)
        self.healthz = HealthChecks("healthz")
        self.healthz.add("ping", ping)
        self.readyz = HealthChecks("readyz")
        self.readyz.add("informers", informers_synced(self.caches.all))
        self.readyz.add("shutdown", self.shutting_down)
        self.readyz.add("crds", self._crds_installed)
        self.server = ObservabilityServer(
            self.registry,
            healthz=self.healthz,
            readyz=self.readyz,
            metrics_address=s.metrics_address or "",
            probe_address=s.probe_address or "",
            metrics_path=s.metrics_path,
        )
        self.identity = new_identity(s.pod_name)
        self.leading = asyncio.Event()
        # Opt-in (PLACEMENT_WEBHOOK_ADDRESS): served by every replica, leader or not.
        self.webhook = (
            PlacementWebhook(
                s,
                self.client,
                self.caches,
                self.runtime_metrics,
                self.clock,
                REPORTING_CONTROLLER,
                self.domain_metrics,
            )
            if s.placement_webhook_address
            else None
        )

    def _requeue_all(self) -> None:
        """Every CD, and every orphan the caches know (what a stand-by left waiting)."""
        self.router.enqueue_all()
        for key in self.reconciler.sweeper.orphans():
            self.queue.add(key)

    def _crds_installed(self) -> bool:
        if self.coexistence.crd_problem:
            raise CheckFailedError(self.coexistence.crd_problem)
        return True

    async def _reconcile_with_log_fields(self, key: QueueKey) -> Result:
        namespace, name = (key.namespace, key.name) if isinstance(key, CDKey) else ("", str(key))
        with bind(**reconcile_fields(CONTROLLER_NAME, namespace, name)):
            return await self.reconciler.reconcile(key)

    async def run(self, stop: asyncio.Event) -> None:
        await self.server.start()
        try:
            await self._review_permissions()
            if self.webhook is not None:
                await self.webhook.start()
            async with asyncio.TaskGroup() as group:
                informer_tasks = [group.create_task(inf.run()) for inf in self.caches.all]
                if self.webhook is not None:
                    informer_tasks.append(group.create_task(self.webhook.run()))
                informer_tasks.append(group.create_task(self._report_missing_crds()))
                informer_tasks.append(group.create_task(self._release_free_heap()))
                work = group.create_task(self._elect_and_work())
                await stop.wait()
                log.info("Shutting down")
                self.shutting_down.clear()
                work.cancel()
                for task in informer_tasks:
                    task.cancel()
        finally:
            if self.webhook is not None:
                await self.webhook.stop()
            await self.server.stop()

    async def _review_permissions(self) -> None:
        """Before any informer lists: which writes go by update, whether Events are recorded,
        which optional informers run, and one line for what is missing (permissions.py)."""
        s = self.settings
        await permissions.review(
            # Reviews are not writes (no fence), and not worth the client's budget.
            self.client.unfenced().with_rate_limiter(None),
            self.access,
            self.caches,
            self.recorder,
            s.reconciler.managed_namespaces,
            s.lease_namespace if s.leader_election else None,
        )

    async def _elect_and_work(self) -> None:
        s = self.settings
        if not s.leader_election:
            await self._work()
            return
        from computedomain.runtime.leaderelection import LeaderElector

        elector = LeaderElector(
            self.client.unfenced(),
            s.lease_namespace,
            s.lease_name,
            self.identity,
            lease_duration=s.lease_duration,
            renew_deadline=s.renew_deadline,
            retry_period=s.retry_period,
            clock=self.clock,
            metrics=self.runtime_metrics,
            restart_prefix=f"{s.pod_name}-",
        )
        # Every other write (reconciles, events) needs proof of leadership at send time; the
        # elector counts the refused ones and says so once.
        self.client.write_fence = elector.write_fence
        await elector.run(self._work)

    async def _work(self) -> None:
        """Leader-only part: wait for the caches, then reconcile, sweep and record events."""
        self.leading.set()
        log.info("Started leading", extra={"identity": self.identity})
        try:
            await self._wait_synced()
            self.coexistence.set_leading(True)
            async with asyncio.TaskGroup() as group:
                group.create_task(self.recorder.run())
                group.create_task(self.controller.run())
                group.create_task(
                    self.reconciler.sweeper.sweep_forever(
                        self.queue.add, self.settings.orphan_sweep_interval
                    )
                )
                group.create_task(self._inventory_forever())
        finally:
            self.coexistence.set_leading(False)
            self.leading.clear()
            self.queue.shutdown(drain=False)

    async def _release_free_heap(self) -> None:
        """Decoding the first LISTs leaves more free heap than the caches keep, and churn frees
        as much as it allocates (leader or not): released once synced, then periodically."""
        await self.caches.wait_synced()
        await release_free_heap_every(self.clock, HEAP_RELEASE_INTERVAL)

    async def _report_missing_crds(self) -> None:
        """An absent CRD sends no watch event: look once both CRD informers have listed."""
        await asyncio.gather(self.caches.crds.wait_synced(), self.caches.clique_crds.wait_synced())
        self.coexistence.crds_present(self.caches.missing_crds())

    async def _wait_synced(self) -> None:
        await self.caches.wait_synced()
        # Everything listed so far gets one reconcile; the queue deduplicates.
        self.router.enqueue_all(priority=LOW_PRIORITY)

    async def _inventory_forever(self) -> None:
        """Clique inventory gauges from node labels, on a short period; recomputed only when
        the Node or ComputeDomain store changed (a poll that found nothing new, or idle, costs
        nothing). A node whose clique label went missing (NVIDIA's kubelet plugin removes it
        while it restarts) is counted as label-missing while its domain's daemon reports its
        clique or since this process saw it labelled, not dropped."""
        nodes, cds = self.caches.nodes.store, self.caches.cds
        seen: tuple[int, int] | None = None
        known: dict[str, str] = {}
        while True:
            if (nodes.generation, cds.generation) != seen:
                seen = (nodes.generation, cds.generation)
                inventory = CliqueInventory.from_nodes(
                    nodes.list(), reported_cliques(cds.list()), known
                )
                known = inventory.known_cliques()
                self.domain_metrics.set_clique_inventory(inventory.usage())
            await self.clock.sleep(INVENTORY_INTERVAL)


async def run_controller(
    settings: Settings,
    stop: asyncio.Event,
    *,
    registry: CollectorRegistry | None = None,
    on_ready: Callable[[ControllerProcess], Awaitable[None]] | None = None,
    resolver: ResolverRun | None = None,
) -> None:
    """Builds a client from `settings` and runs one replica until `stop` is set.

    ``resolver``: the credential child for ``settings.kubeconfig``, if the caller started it.
    """
    registry = registry or CollectorRegistry()
    runtime_metrics = RuntimeMetrics(registry)
    client = await load_client(
        settings.kubeconfig,
        settings.kube_api_qps,
        settings.kube_api_burst,
        field_manager=FIELD_MANAGER,
        metrics=runtime_metrics,
        resolver=resolver,
    )
    try:
        process = ControllerProcess(settings, client, registry, runtime_metrics, SystemClock())
        if on_ready is not None:
            await on_ready(process)
        await process.run(stop)
    finally:
        with contextlib.suppress(Exception):
            await client.close()


__all__ = ["ControllerProcess", "run_controller"]
