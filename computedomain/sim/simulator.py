"""Wiring: informers → signals and per-pod coroutines for the fake plugin and daemons."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Protocol

from computedomain.api.resources import CLIQUES, COMPUTE_DOMAINS
from computedomain.runtime import objects
from computedomain.runtime.client import ApiError, KubeClient
from computedomain.runtime.clock import Clock, SystemClock
from computedomain.runtime.informer import FunctionHandler, Informer, strip_managed_fields
from computedomain.runtime.resources import NODES, PODS, RESOURCE_CLAIMS

from .context import (
    KWOK_NODE_ANNOTATION,
    NODE_NOT_READY_LABEL,
    SimContext,
    SimSettings,
)
from .daemon import DaemonContainer, FakeImexDaemon
from .decisions import PodRole, classify_pod, pod_claim_refs
from .plugin import FakeKubeletPlugin
from .podstatus import ResyncBackoff, is_node_ready, needs_ready_resync
from .signals import claim_key, clique_key, domain_key, node_key, pod_key

# Makes the daemon container of a daemon pod: (context, pod, the CD's UID).
DaemonFactory = Callable[[SimContext, dict[str, Any], str], DaemonContainer]


class WorkloadKubelet(Protocol):
    """Who prepares and starts the workload pods of some nodes instead of the simulated plugin
    (e.g. a stand-in kubelet calling NVIDIA's real kubelet plugin over DRA gRPC)."""

    def serves(self, node_name: str) -> bool: ...

    async def start(self, pod: dict[str, Any]) -> None:
        """Returns once the pod runs (or is gone)."""

    async def stop(self, pod: dict[str, Any]) -> None:
        """The pod is gone: end its container and unprepare its claims."""


WorkloadKubeletFactory = Callable[[SimContext], WorkloadKubelet]
log = logging.getLogger("computedomain.sim")

Obj = dict[str, Any]


def _uid_index(obj: Obj) -> list[str]:
    found = objects.uid(obj)
    return [found] if found else []


def _node_name_index(obj: Obj) -> list[str]:
    node_name = (obj.get("spec") or {}).get("nodeName")
    return [node_name] if node_name else []


def changed_entries(old: Obj | None, new: Obj | None, path: tuple[str, ...], key: str) -> set[str]:
    """Names whose entry differs between two versions of a list-map (added, removed or changed)."""

    def entries(obj: Obj | None) -> dict[str, Any]:
        value: Any = obj or {}
        for part in path:
            value = (value or {}).get(part) if isinstance(value, dict) else None
        return {str(entry.get(key)): entry for entry in value or [] if isinstance(entry, dict)}

    before, after = entries(old), entries(new)
    return {name for name in before.keys() | after.keys() if before.get(name) != after.get(name)}


class Simulator:
    """Plays NVIDIA's compute-domain kubelet plugin and IMEX daemons for a kwok fleet.

    ``await Simulator(client, settings).run()`` runs until cancelled.
    """

    def __init__(
        self,
        client: KubeClient,
        settings: SimSettings | None = None,
        *,
        clock: Clock | None = None,
        daemon_factory: DaemonFactory = FakeImexDaemon,
        workload_kubelet: WorkloadKubeletFactory | None = None,
    ) -> None:
        self.settings = settings or SimSettings()
        # What runs in each daemon pod: the emulated daemon, or e.g. NVIDIA's binary.
        self.daemon_factory = daemon_factory
        self.clock = clock or SystemClock()
        informers = {
            "pods": Informer(
                client,
                PODS,
                field_selector="spec.nodeName!=",
                transform=strip_managed_fields,
                indexers={"node": _node_name_index},
                clock=self.clock,
                name="sim-pods",
            ),
            "nodes": Informer(
                client, NODES, transform=strip_managed_fields, clock=self.clock, name="sim-nodes"
            ),
            "claims": Informer(
                client,
                RESOURCE_CLAIMS,
                transform=strip_managed_fields,
                clock=self.clock,
                name="sim-claims",
            ),
            "computedomains": Informer(
                client,
                COMPUTE_DOMAINS,
                transform=strip_managed_fields,
                indexers={"uid": _uid_index},
                clock=self.clock,
                name="sim-computedomains",
            ),
            "cliques": Informer(
                client,
                CLIQUES,
                namespace=self.settings.driver_namespace,
                transform=strip_managed_fields,
                clock=self.clock,
                name="sim-cliques",
            ),
        }
        self.context = SimContext(client, self.settings, self.clock, informers)
        self.context.on_daemon_ready = self._daemon_ready
        self.plugin = FakeKubeletPlugin(self.context)
        # Off by default: the simulated plugin decides for every workload pod.
        self.workload_kubelet = workload_kubelet(self.context) if workload_kubelet else None
        self._pod_tasks: dict[str, asyncio.Task[None]] = {}
        self._daemons: dict[str, DaemonContainer] = {}
        self._background: set[asyncio.Task[None]] = set()
        # Write-backs of pod readiness (kubelet status manager): one in flight per pod UID.
        self._resyncing: set[str] = set()
        self._resync_backoff = ResyncBackoff()
        self._ready = asyncio.Event()

    # -- public ---------------------------------------------------------------------------

    async def run(self) -> None:
        informers = self.context.informers
        runners = [
            asyncio.create_task(inf.run(), name=f"informer-{n}") for n, inf in informers.items()
        ]
        try:
            await asyncio.gather(*(informer.wait_synced() for informer in informers.values()))
            self._install_handlers()
            self._ready.set()
            log.info("Simulator running", extra={"driverNamespace": self.settings.driver_namespace})
            await asyncio.gather(*runners)
        finally:
            tasks = [*runners, *self._pod_tasks.values(), *self._background]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def wait_ready(self) -> None:
        """Caches synced and handlers installed: from now on every pod is acted on."""
        await self._ready.wait()

    def daemon(self, node_name: str) -> DaemonContainer | None:
        for daemon in self._daemons.values():
            if daemon.node_name == node_name:
                return daemon
        return None

    def crash_daemon(self, node_name: str) -> bool:
        """Crash the daemon container on a node now; False if no daemon runs there."""
        daemon = self.daemon(node_name)
        if daemon is None:
            return False
        daemon.request_crash()
        return True

    async def set_node_not_ready(self, node_name: str) -> None:
        """Apply kwok's node-not-ready chaos label: the node's Ready condition turns False."""
        patch = {"metadata": {"labels": {NODE_NOT_READY_LABEL: "true"}}}
        await self.context.write(lambda: self.context.client.patch(NODES, node_name, patch))

    async def delete_node(self, node_name: str) -> None:
        with contextlib.suppress(ApiError):
            await self.context.write(lambda: self.context.client.delete(NODES, node_name))

    # -- handlers -------------------------------------------------------------------------

    def _install_handlers(self) -> None:
        informers = self.context.informers
        signals = self.context.signals
        observers = self.context.observers

        def on_node(old: Obj | None, new: Obj) -> None:
            name = new["metadata"]["name"]
            signals.notify(node_key(name))
            if is_node_ready(new) and not is_node_ready(old):
                # Back from NotReady (late heartbeat, a fault that ended): the node lifecycle
                # controller marked its pods not Ready, and nothing else will undo that.
                for pod in informers["pods"].store.by_index("node", name):
                    self._resync_if_needed(pod)

        def on_claim(old: Obj | None, new: Obj) -> None:
            signals.notify(claim_key(new["metadata"]["namespace"], new["metadata"]["name"]))

        def on_domain(old: Obj | None, new: Obj) -> None:
            signals.notify(domain_key(new["metadata"].get("uid", "")))
            changed = changed_entries(old, new, ("status", "nodes"), "name")
            signals.notify(*(node_key(name) for name in changed))

        def on_clique(old: Obj | None, new: Obj) -> None:
            metadata = new["metadata"]
            signals.notify(clique_key(metadata["namespace"], metadata["name"]))
            changed = changed_entries(old, new, ("daemons",), "nodeName")
            signals.notify(*(node_key(name) for name in changed))

        def on_pod(old: Obj | None, new: Obj) -> None:
            self._pod_changed(new)

        for name, handler in (
            ("nodes", on_node),
            ("claims", on_claim),
            ("computedomains", on_domain),
            ("cliques", on_clique),
            ("pods", on_pod),
        ):
            observers[name] = handler

            def deleted(obj: Obj, handler: Any = handler, name: str = name) -> None:
                if name == "pods":
                    self._pod_gone(obj)
                else:
                    handler(obj, {"metadata": obj.get("metadata", {})})

            def added(obj: Obj, handler: Any = handler) -> None:
                handler(None, obj)

            informers[name].add_handler(FunctionHandler(add=added, update=handler, delete=deleted))

    def _pod_changed(self, pod: Obj) -> None:
        metadata, spec = pod["metadata"], pod.get("spec") or {}
        node_name = spec.get("nodeName") or ""
        self.context.signals.notify(
            pod_key(metadata["namespace"], metadata["name"]), node_key(node_name)
        )
        if metadata.get("deletionTimestamp"):
            self._pod_gone(pod)
            return
        uid = metadata.get("uid", "")
        if uid in self._pod_tasks:
            self._resync_if_needed(pod)
            return
        if not spec.get("resourceClaims") or not node_name:
            return
        key = f"{metadata['namespace']}/{metadata['name']}"
        self._pod_tasks[uid] = asyncio.create_task(self._run_pod(key, uid), name=f"sim-pod-{key}")

    def _pod_gone(self, pod: Obj) -> None:
        metadata = pod["metadata"]
        self.context.signals.notify(
            pod_key(metadata["namespace"], metadata["name"]),
            node_key((pod.get("spec") or {}).get("nodeName") or ""),
        )
        task = self._pod_tasks.pop(metadata.get("uid", ""), None)
        if task is not None:
            self._spawn(self._clean_up(pod, task))

    async def _clean_up(self, pod: Obj, task: asyncio.Task[None]) -> None:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        uid = pod["metadata"].get("uid", "")
        daemon = self._daemons.pop(uid, None)
        try:
            if daemon is not None:
                await daemon.stop()
            kubelet = self._real_kubelet(pod)
            if kubelet is not None:
                await kubelet.stop(pod)
            await self.plugin.unprepare(pod)
        except ApiError as error:
            log.warning("Clean-up after pod deletion failed", extra={"pod": uid, "err": str(error)})
        finally:
            self.context.forget_pod(uid)
            self._resync_backoff.forget(uid)

    # -- per pod --------------------------------------------------------------------------

    async def _run_pod(self, key: str, uid: str) -> None:
        while True:
            try:
                await self._serve_pod(key, uid)
                return
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("Simulated pod failed; retrying", extra={"pod": key})
                await self.clock.sleep(1.0)

    async def _serve_pod(self, key: str, uid: str) -> None:
        ctx = self.context
        while True:
            pod = ctx.pod(key)
            if pod is None or pod["metadata"].get("uid") != uid:
                return
            namespace = pod["metadata"]["namespace"]
            node_name = pod["spec"]["nodeName"]
            refs = pod_claim_refs(pod)
            keys = [pod_key(namespace, pod["metadata"]["name"]), node_key(node_name)]
            keys += [claim_key(namespace, ref.claim_name) for ref in refs if ref.claim_name]
            with ctx.signals.listen(keys) as waiter:
                node = ctx.node(node_name)
                if node is None:
                    await waiter.wait(self.settings.recheck_interval)
                    continue
                if self.settings.only_kwok_nodes and not _is_kwok_node(node):
                    return
                claims = {
                    ref.claim_name: ctx.claim(namespace, ref.claim_name)
                    for ref in refs
                    if ref.claim_name
                }
                classification = classify_pod(pod, claims)
                if classification.role is PodRole.PENDING:
                    await waiter.wait(self.settings.recheck_interval)
                    continue
            break
        if classification.role is PodRole.GENERIC:
            await self.plugin.start_generic(pod)
        elif classification.role is PodRole.INVALID:
            await ctx.report(
                pod, "Warning", "FailedPrepareDynamicResources", classification.message
            )
        elif classification.role is PodRole.WORKLOAD:
            kubelet = self._real_kubelet(pod)
            if kubelet is None:
                await self.plugin.prepare_channel(key, classification)
            else:
                await kubelet.start(pod)
                self.plugin.released.add(uid)
        else:
            daemon = self._daemons.get(uid)
            if daemon is None:
                daemon = self.daemon_factory(ctx, pod, classification.domain_id)
                self._daemons[uid] = daemon
            await daemon.run()

    def _real_kubelet(self, pod: Obj) -> WorkloadKubelet | None:
        node_name = (pod.get("spec") or {}).get("nodeName") or ""
        kubelet = self.workload_kubelet
        return kubelet if kubelet is not None and kubelet.serves(node_name) else None

    # -- readiness write-back -------------------------------------------------------------

    def _wanted_ready(self, uid: str) -> bool | None:
        """What the simulator decided the pod's readiness is; None if it has not decided."""
        daemon = self._daemons.get(uid)
        if daemon is not None:
            return daemon.wants_ready
        return True if uid in self.plugin.released else None

    def _resync_if_needed(self, pod: Obj) -> None:
        """Write a managed pod's status back when its readiness disagrees with ours."""
        uid = pod["metadata"].get("uid", "")
        wanted = self._wanted_ready(uid)
        if wanted is None or uid in self._resyncing:
            return
        node = self.context.node((pod.get("spec") or {}).get("nodeName") or "")
        if not needs_ready_resync(pod, node, wanted_ready=wanted):
            return
        self._resyncing.add(uid)
        key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        self._spawn(self._resync(key, uid))

    async def _resync(self, key: str, uid: str) -> None:
        try:
            delay = self._resync_backoff.delay(uid, self.clock.now())
            if delay:
                await self.clock.sleep(delay)
            daemon = self._daemons.get(uid)
            if daemon is not None:
                wrote = await daemon.resync_status()
            else:
                wrote = await self.plugin.resync_status(key)
            if wrote:
                self._resync_backoff.record(uid, self.clock.now())
        except Exception:
            # A refused write would be refused again at once: back off before the next try.
            log.exception("Pod status write-back failed", extra={"pod": key})
            self._resync_backoff.record(uid, self.clock.now())
        finally:
            self._resyncing.discard(uid)
        # A change seen while we were busy was skipped: look once more at the latest pod.
        pod = self.context.pod(key)
        if pod is not None and pod["metadata"].get("uid") == uid:
            self._resync_if_needed(pod)

    # -- node faults ----------------------------------------------------------------------

    def _daemon_ready(self, node_name: str) -> None:
        fate = self.context.planner.node_fate(node_name)
        if fate.delete_after is not None:
            self._spawn(self._later(fate.delete_after, self.delete_node(node_name)))
        elif fate.not_ready_after is not None:
            self._spawn(self._later(fate.not_ready_after, self.set_node_not_ready(node_name)))

    async def _later(self, delay: float, action: Coroutine[Any, Any, None]) -> None:
        try:
            await self.clock.sleep(delay)
            await action
        finally:
            action.close()

    def _spawn(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)


def _is_kwok_node(node: Mapping[str, Any]) -> bool:
    annotations = objects.meta(node).get("annotations") or {}
    return annotations.get(KWOK_NODE_ANNOTATION) == "fake"
