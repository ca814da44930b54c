"""Wires the controller process together: client, caches, queue, reconciler, election, server.

Caches run in every replica (a warm standby); only the leader runs reconcile workers, the
periodic sweep and the event writer, so only the leader writes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from computedomain.api import constants as c
from computedomain.config import Settings
from computedomain.domain.caches import BY_CD, Caches, build_caches
from computedomain.domain.coexistence import CoexistenceMonitor
from computedomain.domain.desired import DaemonSettings
from computedomain.domain.handlers import EventRouter
from computedomain.domain.reconciler import (
    ComputeDomainReconciler,
    ReconcilerSettings,
    orphan_key,
)
from computedomain.observability.health import Flag, HealthChecks, informers_synced, ping
from computedomain.observability.logging import bind, reconcile_fields
from computedomain.observability.metrics import DomainMetrics
from computedomain.observability.server import ObservabilityServer
from computedomain.runtime.client import KubeClient, load_client
from computedomain.runtime.clock import Clock, SystemClock
from computedomain.runtime.controller import Controller, Result
from computedomain.runtime.events import EventRecorder
from computedomain.runtime.informer import FunctionHandler, Informer
from computedomain.runtime.metrics import RuntimeMetrics
from computedomain.runtime.workqueue import WorkQueue

log = logging.getLogger(__name__)

CONTROLLER_NAME = "computedomain"
REPORTING_CONTROLLER = "resource.nvidia.com/computedomain-controller"
FIELD_MANAGER = "computedomain-controller"
INVENTORY_INTERVAL = 5.0


def daemon_settings(settings: Settings) -> DaemonSettings:
    return DaemonSettings(
        driver_namespace=settings.driver_namespace,
        image=settings.image_name,
        image_pull_secrets=settings.image_pull_secret_names,
        log_verbosity=settings.daemon_log_verbosity,
        max_nodes_per_imex_domain=settings.max_nodes_per_imex_domain,
        feature_gates=dict(settings.feature_gates),
        priority_class_name=settings.daemon_priority_class_name,
    )


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
        self.caches: Caches = build_caches(self.client, s.managed_namespaces)
        self.queue = WorkQueue(CONTROLLER_NAME, metrics=self.runtime_metrics, clock=self.clock)
        self.recorder = EventRecorder(
            self.client,
            REPORTING_CONTROLLER,
            f"{REPORTING_CONTROLLER.split('/')[-1]}-{s.pod_name}"[:128],
            clock=self.clock,
        )
        self.reconciler = ComputeDomainReconciler(
            self.client,
            self.caches,
            ReconcilerSettings(
                daemon=daemon_settings(s),
                managed_namespaces=s.managed_namespaces,
                cliques_enabled=s.cliques_enabled,
                orphan_grace_period=s.orphan_grace_period,
                daemon_pod_wait_timeout=s.daemon_pod_wait_timeout,
            ),
            self.recorder,
            self.domain_metrics,
            self.clock,
        )
        self.controller = Controller(
            CONTROLLER_NAME,
            self.queue,
            self._reconcile_with_log_fields,
            workers=s.workers,
            timeout=s.reconcile_timeout,
            metrics=self.runtime_metrics,
        )
        self.coexistence = CoexistenceMonitor(
            self.recorder, self.domain_metrics, requeue_all=self._enqueue_all
        )
        self.router = EventRouter(
            self.caches, self.queue.add, self.queue.add_after, s.orphan_grace_period
        )
        self._wire_handlers()
        self.shutting_down = Flag("shutting down", up=True)
        self.healthz = HealthChecks("healthz")
        self.healthz.add("ping", ping)
        self.readyz = HealthChecks("readyz")
        self.readyz.add("informers", informers_synced(self.caches.all))
        self.readyz.add("shutdown", self.shutting_down)
        self.server = ObservabilityServer(
            self.registry,
            healthz=self.healthz,
            readyz=self.readyz,
            metrics_address=s.metrics_address or "",
            probe_address=s.probe_address or "",
            metrics_path=s.metrics_path,
        )
        self.identity = f"{s.pod_name}-{uuid.uuid4()}"
        self.leading = asyncio.Event()

    async def _reconcile_with_log_fields(self, key: str) -> Result:
        namespace, _, name = key.rpartition("/")
        with bind(**reconcile_fields(CONTROLLER_NAME, namespace, name)):
            return await self.reconciler.reconcile(key)

    def _enqueue_all(self, priority: int = 0) -> None:
        for cd in self.caches.cds.list():
            meta = cd.get("metadata") or {}
            self.queue.add(f"{meta.get('namespace')}/{meta.get('name')}", priority=priority)

    def _wire_handlers(self) -> None:
        router = self.router
        self.caches.compute_domains.add_handler(
            FunctionHandler(add=router.on_cd, update=router.on_cd_update, delete=router.on_cd)
        )
        labelled = FunctionHandler(
            add=router.on_labelled, update=router.on_labelled_update, delete=router.on_labelled
        )
        informers: list[Informer] = [
            *self.caches.daemonsets,
            self.caches.claim_templates,
            *self.caches.daemon_pods,
        ]
        for informer in informers:
            informer.add_handler(labelled)
        for informer in self.caches.cliques:
            informer.add_handler(
                FunctionHandler(
                    add=router.on_clique, update=router.on_clique_update, delete=router.on_clique
                )
            )
        self.caches.nodes.add_handler(
            FunctionHandler(
                add=router.on_node, update=router.on_node_update, delete=router.on_node_delete
            )
        )
        # Updates of the ServiceAccount change nothing we report.
        self.caches.service_accounts.add_handler(
            FunctionHandler(
                add=router.on_daemon_service_account, delete=router.on_daemon_service_account
            )
        )
        # Both look at the whole (tiny) store, whatever the event.
        for informer, changed in (
            (self.caches.crds, self._crd_changed),
            (self.caches.nvidia_controller_pods, self._nvidia_pods_changed),
        ):
            informer.add_handler(FunctionHandler(add=changed, update=changed, delete=changed))

    def _crd_changed(self, *_: object) -> None:
        self.coexistence.crd_changed(self.caches.compute_domain_crd())

    def _nvidia_pods_changed(self, *_: object) -> None:
        self.coexistence.controller_pods_changed(self.caches.nvidia_controller_pods.store.list())

    async def run(self, stop: asyncio.Event) -> None:
        await self.server.start()
        try:
            async with asyncio.TaskGroup() as group:
                informer_tasks = [group.create_task(inf.run()) for inf in self.caches.all]
                work = group.create_task(self._elect_and_work())
                await stop.wait()
                log.info("Shutting down")
                self.shutting_down.clear()
                work.cancel()
                for task in informer_tasks:
                    task.cancel()
        finally:
            await self.server.stop()

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
        # Every other write (reconciles, events) needs proof of leadership at send time.
        self.client.write_fence = elector.holds_lease
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
                group.create_task(self._sweep_forever())
                group.create_task(self._inventory_forever())
        finally:
            self.coexistence.set_leading(False)
            self.leading.clear()
            self.queue.shutdown(drain=False)

    async def _wait_synced(self) -> None:
        await asyncio.gather(*(inf.wait_synced() for inf in self.caches.all))
        # Everything listed so far gets one reconcile; the queue deduplicates.
        self._enqueue_all(priority=-100)

    async def _sweep_forever(self) -> None:
        """Periodic orphan sweep: covers CDs deleted while no controller was running."""
        while True:
            for uid in self.caches.labelled_uids() - self.caches.known_uids():
                self.queue.add(orphan_key(uid))
            await self.clock.sleep(self.settings.orphan_sweep_interval)

    async def _inventory_forever(self) -> None:
        """Clique inventory gauges from node labels; cheap, so recomputed on a short period."""
        while True:
            per_clique: Counter[str] = Counter()
            in_use: Counter[str] = Counter()
            for node in self.caches.nodes.store.list():
                labels = (node.get("metadata") or {}).get("labels") or {}
                clique = labels.get(c.GPU_CLIQUE_NODE_LABEL)
                if not clique:
                    continue
                per_clique[clique] += 1
                if labels.get(c.CD_LABEL):
                    in_use[clique] += 1
            self.domain_metrics.set_clique_inventory(per_clique, in_use)
            await self.clock.sleep(INVENTORY_INTERVAL)


async def run_controller(
    settings: Settings,
    stop: asyncio.Event,
    *,
    registry: CollectorRegistry | None = None,
    on_ready: Callable[[ControllerProcess], Awaitable[None]] | None = None,
) -> None:
    """Builds a client from `settings` and runs one replica until `stop` is set."""
    registry = registry or CollectorRegistry()
    runtime_metrics = RuntimeMetrics(registry)
    client = await load_client(
        settings.kubeconfig,
        settings.kube_api_qps,
        settings.kube_api_burst,
        field_manager=FIELD_MANAGER,
        metrics=runtime_metrics,
    )
    try:
        process = ControllerProcess(settings, client, registry, runtime_metrics, SystemClock())
        if on_ready is not None:
            await on_ready(process)
        await process.run(stop)
    finally:
        with contextlib.suppress(Exception):
            await client.close()


__all__ = ["BY_CD", "ControllerProcess", "daemon_settings", "run_controller"]
