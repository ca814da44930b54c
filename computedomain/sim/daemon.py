"""The IMEX daemon of a daemon pod. ``DaemonContainer`` is what the simulator needs of any daemon
(its pod's status as a kubelet reports it, its life cycle); ``FakeImexDaemon``, the default, is one
coroutine per daemon pod doing what ``compute-domain-daemon run`` does to the API (contract §2.2,
§9.2, §13 steps 9-10, 14). NVIDIA's real binary is the other kind
(computedomain/devcluster/imexdaemon.py).

Not emulated by the fake: the IMEX process, ``nodes.cfg``/``/etc/hosts``, SIGUSR1, the CDI
environment.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from computedomain.api import constants as c
from computedomain.api.resources import CLIQUES, COMPUTE_DOMAINS
from computedomain.runtime import objects
from computedomain.runtime.client import ApiError
from computedomain.runtime.objects import pod_ready
from computedomain.runtime.resources import PODS

from .context import SimContext
from .decisions import node_clique_id
from .entries import (
    IndexExhaustedError,
    remove_clique_daemon,
    remove_legacy_node,
    typed_status_update,
    upsert_clique_daemon,
    upsert_legacy_node,
)
from .faults import DaemonFate
from .gates import DaemonGates, InvalidFeatureGatesError, container_env, max_nodes_from_env
from .podstatus import (
    ContainerPhase,
    PodState,
    needs_ready_resync,
    node_internal_ip,
    pod_status,
)
from .signals import clique_key, domain_key

log = logging.getLogger("computedomain.sim.daemon")

Entries = list[dict[str, Any]]
Mutation = Callable[[Sequence[dict[str, Any]]], Entries | None]

CONFLICT_BACKOFF_INITIAL = 0.005
CONFLICT_BACKOFF_MAX = 6.0


class DaemonContainer(abc.ABC):
    """The daemon container of one pod, as its node's kubelet runs it: ``run`` lives as long as
    the pod does (the simulator cancels it when the pod is gone, then calls ``stop``); the pod's
    status is written as the kubelet reports it, from the container's phase."""

    def __init__(self, ctx: SimContext, pod: dict[str, Any], domain_id: str) -> None:
        metadata = pod["metadata"]
        self.ctx = ctx
        self.namespace: str = metadata["namespace"]
        self.name: str = metadata["name"]
        self.uid: str = metadata["uid"]
        self.domain_id = domain_id
        self.node_name: str = pod["spec"]["nodeName"]
        self.ip: str | None = None
        self.restart_count = 0
        self.ready = False
        self._crash = asyncio.Event()
        # The container state last decided, and the lock that keeps status writes in order:
        # a write-back of the pod's readiness never overtakes a newer decision.
        self._phase: ContainerPhase | None = None
        self._phase_message = ""
        # The termination message and exit code of the container's last exit.
        self._exit_message = ""
        self._exit_code = 1
        self._status_lock = asyncio.Lock()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def request_crash(self) -> None:
        self._crash.set()

    @abc.abstractmethod
    async def run(self) -> None:
        """Run the container for as long as the pod exists (cancelled when it is gone)."""

    @abc.abstractmethod
    async def stop(self) -> None:
        """The pod is gone: end the container as a kubelet would."""

    # -- the pod --------------------------------------------------------------------------

    def _adopt_ip(self, pod: dict[str, Any]) -> bool:
        """Reuse the address a pod already carries (simulator restart); True if adopted."""
        current = (pod.get("status") or {}).get("podIP")
        if current and self.ctx.ipam.adopt(self.uid, current):
            self.ip = current
            return True
        self.ip = self.ctx.ipam.allocate(self.uid)
        return False

    @property
    def wants_ready(self) -> bool | None:
        """Whether the pod should show Ready; None before its first status write."""
        return None if self._phase is None else self._phase is ContainerPhase.READY

    async def resync_status(self) -> bool:
        """Write the last decided status back if the pod's readiness was changed by someone
        else (see ``needs_ready_resync``); True if it wrote."""
        async with self._status_lock:
            pod = self.ctx.pod(self.key)
            wanted = self.wants_ready
            if pod is None or self._phase is None or wanted is None:
                return False
            if not needs_ready_resync(pod, self.ctx.node(self.node_name), wanted_ready=wanted):
                return False
            log.info(
                "Re-asserting daemon pod status",
                extra={"pod": self.key, "node": self.node_name, "ready": wanted},
            )
            await self._write_pod_locked(self._phase, self._phase_message)
            return True

    async def _write_pod(self, phase: ContainerPhase, message: str = "") -> None:
        async with self._status_lock:
            self._phase, self._phase_message = phase, message
            await self._write_pod_locked(phase, message)

    async def _write_pod_locked(self, phase: ContainerPhase, message: str) -> None:
        pod = self.ctx.pod(self.key)
        if pod is None or self.ip is None:
            return
        state = PodState(
            pod_ip=self.ip,
            host_ip=node_internal_ip(self.ctx.node(self.node_name)),
            phase=phase,
            restart_count=self.restart_count,
            waiting_message=message,
            exit_message=self._exit_message if phase is ContainerPhase.CRASH_LOOP else "",
            exit_code=self._exit_code,
        )
        status = pod_status(pod, state, self.ctx.clock.wall())
        try:
            updated = await self.ctx.write(
                lambda: self.ctx.client.patch(
                    PODS, self.name, {"status": status}, self.namespace, subresource="status"
                )
            )
        except ApiError as error:
            if error.is_not_found:
                return
            raise
        self.ctx.observe("pods", updated)


class FakeImexDaemon(DaemonContainer):
    """The emulated daemon: what NVIDIA's daemon does to the API, without its process."""

    def __init__(self, ctx: SimContext, pod: dict[str, Any], domain_id: str) -> None:
        super().__init__(ctx, pod, domain_id)
        self.clique_id = ""
        self.gates = DaemonGates()
        self.max_nodes = c.DEFAULT_MAX_NODES_PER_IMEX_DOMAIN
        # Where our entry was written last: removal on pod deletion goes there.
        self._wrote_clique = False
        self._wrote_legacy = False

    @property
    def clique_name(self) -> str:
        return c.clique_name(self.domain_id, self.clique_id)

    # -- life cycle -----------------------------------------------------------------------

    async def run(self) -> None:
        pod = self.ctx.pod(self.key)
        if pod is None:
            return
        env = container_env(pod, c.DAEMON_CONTAINER) or container_env(pod)
        self.max_nodes = max_nodes_from_env(env)
        self.clique_id = node_clique_id(self.ctx.node(self.node_name))
        self.restart_count = _restart_count(pod)
        resumed = self._adopt_ip(pod)
        try:
            self.gates = DaemonGates.from_env(env.get(c.FEATURE_GATES_ENV))
            gates_error = (
                "" if self.gates.valid else "ComputeDomainCliques requires IMEXDaemonsWithDNSNames"
            )
        except InvalidFeatureGatesError as error:
            gates_error = str(error)
        if not (resumed and pod_ready(pod)):
            await self._write_pod(ContainerPhase.STARTING)
        await self._label_pod()
        if gates_error:
            # The binary refuses to start: a crash loop that never ends.
            await self._write_pod(
                ContainerPhase.CRASH_LOOP, f"invalid feature gates: {gates_error}"
            )
            await self.ctx.report(
                pod, "Warning", "BackOff", f"invalid feature gates: {gates_error}"
            )
            await asyncio.Event().wait()
        fate = self.ctx.planner.daemon_fate(self.node_name, self.uid)
        if fate.fail_start is not None:
            # The container exits before it joins, and kubelet restarts it with a back-off
            # forever; the termination message is the daemon's last word (#289).
            self._exit_message = fate.fail_start
            self.restart_count = max(self.restart_count, 1)
            await self._write_pod(ContainerPhase.CRASH_LOOP)
            await self.ctx.report(pod, "Warning", "BackOff", "Back-off restarting failed container")
            await asyncio.Event().wait()
        already_ready = resumed and pod_ready(pod)
        while True:
            await self._start_container(fate, already_ready)
            already_ready = False
            crashed = await self._run_until_crash(fate)
            if not crashed:
                return
            self.restart_count += 1
            self.ready = False
            await self._write_pod(ContainerPhase.CRASH_LOOP)
            await self.ctx.clock.sleep(fate.restart_delay)
            # The restarted container comes back with a new address (contract §13, failure paths).
            self.ip = self.ctx.ipam.reallocate(self.uid)
            await self._write_pod(ContainerPhase.STARTING)
            fate = self.ctx.planner.daemon_fate(self.node_name, self.uid)

    async def _start_container(self, fate: DaemonFate, already_ready: bool) -> None:
        status = c.STATUS_READY if already_ready else c.STATUS_NOT_READY
        await self._join(status)
        if fate.never_ready:
            await self._write_pod(ContainerPhase.STARTING)
            pod = self.ctx.pod(self.key)
            if pod is not None:
                await self.ctx.report(
                    pod,
                    "Warning",
                    "Unhealthy",
                    "Startup probe failed: nvidia-imex-ctl -q did not print READY",
                )
            await asyncio.Event().wait()
        if already_ready:
            self.ready = True
            self._phase = ContainerPhase.READY
            return
        await self.ctx.clock.sleep(fate.start_delay)
        if not self.gates.dns_names and self.clique_id:
            await self._wait_for_all_peers()
        await self._write_pod(ContainerPhase.READY)
        self.ready = True
        await self._join(c.STATUS_READY)
        self.ctx.daemon_ready(self.node_name)

    async def _run_until_crash(self, fate: DaemonFate) -> bool:
        """Block while healthy; True when the container crashed (fault timer or request)."""
        keeper = asyncio.create_task(self._keep_membership(), name=f"membership {self.key}")
        try:
            waits: list[Any] = [self._crash.wait()]
            if fate.crash_after is not None:
                waits.append(self.ctx.clock.sleep(fate.crash_after))
            if self.gates.cliques and self.clique_id:
                waits.append(keeper)  # never returns; its error ends the container
            await _first(*waits)
            if keeper.done() and not keeper.cancelled():
                keeper.result()
        finally:
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper
        self._crash.clear()
        return True

    async def _keep_membership(self) -> None:
        """While the container runs, put our clique entry back whenever it is gone from a clique
        that still exists, as NVIDIA's daemon does on every update of its clique: it inserts
        itself again at the lowest free index, ``NotReady`` (its pod manager sets ``Ready`` only
        on the pod's next change, which the simulator does not make). So an entry removed under
        a live daemon comes back, possibly with another index (upstream #1440, #1418)."""
        if not (self.gates.cliques and self.clique_id):
            return
        key = clique_key(self.namespace, self.clique_name)
        while True:
            with self.ctx.signals.listen([key]) as waiter:
                clique = self.ctx.clique(self.namespace, self.clique_name)
                daemons = (clique or {}).get("daemons") or []
                if clique is not None and not any(
                    d.get("nodeName") == self.node_name for d in daemons
                ):
                    log.info(
                        "Own clique entry gone: inserting it again",
                        extra={"pod": self.key, "clique": self.clique_name},
                    )
                    await self._join(c.STATUS_NOT_READY)
                    continue
                await waiter.wait(self.ctx.settings.recheck_interval)

    async def _wait_for_all_peers(self) -> None:
        """IP mode (DNS names off): IMEX starts only once ``len(status.nodes) == numNodes``."""
        while True:
            with self.ctx.signals.listen([domain_key(self.domain_id)]) as waiter:
                cd = self.ctx.compute_domain(self.domain_id) or {}
                wanted = int((cd.get("spec") or {}).get("numNodes") or 0)
                if len((cd.get("status") or {}).get("nodes") or []) >= wanted:
                    return
                await waiter.wait(self.ctx.settings.recheck_interval)

    async def stop(self) -> None:
        """The pod is gone: remove our entry (matched by node name and IP), as on SIGTERM."""
        if self.ip is None:
            return
        ip = self.ip
        if self._wrote_clique:
            await self._update_clique(
                lambda daemons: remove_clique_daemon(
                    daemons, node_name=self.node_name, ip_address=ip
                ),
                create=False,
            )
        if self._wrote_legacy:
            await self._update_legacy(
                lambda nodes: remove_legacy_node(nodes, node_name=self.node_name, ip_address=ip)
            )

    # -- membership -----------------------------------------------------------------------

    async def _join(self, status: str) -> None:
        """Upsert our entry; waits (crash-looping) while the clique has no free index."""
        if not self.clique_id:
            return  # non-fabric: no clique and no entry; the controller projects the pod
        assert self.ip is not None
        ip = self.ip

        def upsert(entries: Sequence[dict[str, Any]]) -> Entries | None:
            if self.gates.cliques:
                return upsert_clique_daemon(
                    entries,
                    node_name=self.node_name,
                    ip_address=ip,
                    clique_id=self.clique_id,
                    max_nodes=self.max_nodes,
                    status=status,
                )
            return upsert_legacy_node(
                entries,
                node_name=self.node_name,
                ip_address=ip,
                clique_id=self.clique_id,
                max_nodes=self.max_nodes,
                status=status,
            )

        while True:
            watch = (
                clique_key(self.namespace, self.clique_name)
                if self.gates.cliques
                else domain_key(self.domain_id)
            )
            with self.ctx.signals.listen([watch]) as waiter:
                try:
                    if self.gates.cliques:
                        self._wrote_clique = True
                        await self._update_clique(upsert, create=True)
                    else:
                        self._wrote_legacy = True
                        await self._update_legacy(upsert)
                    return
                except IndexExhaustedError as error:
                    log.warning(
                        "IMEX domain full",
                        extra={"pod": self.key, "clique": self.clique_name, "err": str(error)},
                    )
                    await self._write_pod(ContainerPhase.CRASH_LOOP, str(error))
                    await waiter.wait(self.ctx.settings.recheck_interval)

    async def _update_clique(self, mutate: Mutation, *, create: bool) -> None:
        """Read-modify-write of ``daemons[]`` with a full Update; 409s back off 5 ms → 6 s."""
        ctx = self.ctx
        obj = ctx.clique(self.namespace, self.clique_name)
        delay = CONFLICT_BACKOFF_INITIAL
        while True:
            try:
                if obj is None:
                    if not create:
                        return
                    daemons = mutate([])
                    created = await ctx.write(
                        partial(
                            ctx.client.create,
                            CLIQUES,
                            self._new_clique(daemons or []),
                            self.namespace,
                        )
                    )
                    ctx.observe("cliques", created)
                    return
                body = self._clique_update(obj, mutate)
                if body is None:
                    return
                updated = await ctx.write(
                    partial(ctx.client.replace, CLIQUES, body, self.namespace)
                )
                ctx.observe("cliques", updated)
                return
            except ApiError as error:
                if not (error.is_conflict or error.is_already_exists or error.is_not_found):
                    raise
            await ctx.clock.sleep(delay * (0.5 + ctx.rng.random()))
            delay = min(delay * 2, CONFLICT_BACKOFF_MAX)
            obj = await self._fetch(CLIQUES, self.clique_name)

    def _clique_update(self, obj: dict[str, Any], mutate: Mutation) -> dict[str, Any] | None:
        daemons = mutate(obj.get("daemons") or [])
        owners: list[dict[str, Any]] = list(obj["metadata"].get("ownerReferences") or [])
        owner_missing = not any(owner.get("uid") == self.uid for owner in owners)
        if daemons is None and not owner_missing:
            return None
        body = {**obj, "metadata": dict(obj["metadata"])}
        if daemons is not None:
            body["daemons"] = daemons
        if owner_missing:
            body["metadata"]["ownerReferences"] = [*owners, self._owner_reference()]
        return body

    def _new_clique(self, daemons: Entries) -> dict[str, Any]:
        return {
            "apiVersion": c.API_VERSION,
            "kind": c.CLIQUE_KIND,
            "metadata": {
                "name": self.clique_name,
                "namespace": self.namespace,
                "labels": {c.CD_LABEL: self.domain_id, c.CLIQUE_ID_LABEL: self.clique_id},
                "ownerReferences": [self._owner_reference()],
            },
            "daemons": daemons,
        }

    def _owner_reference(self) -> dict[str, Any]:
        # Plain ownership (no controller flag): GC deletes the clique after its last daemon pod.
        return {"apiVersion": "v1", "kind": "Pod", "name": self.name, "uid": self.uid}

    async def _update_legacy(self, mutate: Mutation) -> None:
        """Gate off: PUT the CD's status as a typed Go ``UpdateStatus`` would."""
        ctx = self.ctx
        delay = CONFLICT_BACKOFF_INITIAL
        cd = ctx.compute_domain(self.domain_id)
        while True:
            if cd is None:
                with ctx.signals.listen([domain_key(self.domain_id)]) as waiter:
                    cd = ctx.compute_domain(self.domain_id)
                    if cd is None:
                        await waiter.wait(ctx.settings.recheck_interval)
                        continue
            nodes = mutate(((cd.get("status") or {}).get("nodes")) or [])
            if nodes is None:
                return
            body = typed_status_update(cd, nodes)
            namespace = cd["metadata"]["namespace"]
            try:
                updated = await ctx.write(
                    partial(
                        ctx.client.replace, COMPUTE_DOMAINS, body, namespace, subresource="status"
                    )
                )
                ctx.observe("computedomains", updated)
                return
            except ApiError as error:
                if error.is_not_found:
                    return  # the CD is gone; nothing to record
                if not (error.is_conflict or error.is_invalid):
                    raise
                log.debug(
                    "CD status write refused, retrying", extra={"pod": self.key, "err": str(error)}
                )
            await ctx.clock.sleep(delay * (0.5 + ctx.rng.random()))
            delay = min(delay * 2, CONFLICT_BACKOFF_MAX)
            cd = await self._fetch(COMPUTE_DOMAINS, cd["metadata"]["name"], namespace)

    async def _fetch(
        self, resource: Any, name: str, namespace: str | None = None
    ) -> dict[str, Any] | None:
        try:
            return await self.ctx.client.get(resource, name, namespace or self.namespace)
        except ApiError as error:
            if error.is_not_found:
                return None
            raise

    async def _label_pod(self) -> None:
        pod = self.ctx.pod(self.key)
        labels = objects.labels(pod)
        if labels.get(c.CLIQUE_ID_LABEL) == self.clique_id and c.CLIQUE_ID_LABEL in labels:
            return
        patch = {"metadata": {"labels": {c.CLIQUE_ID_LABEL: self.clique_id}}}
        try:
            updated = await self.ctx.write(
                lambda: self.ctx.client.patch(PODS, self.name, patch, self.namespace)
            )
        except ApiError as error:
            if error.is_not_found:
                return
            raise
        self.ctx.observe("pods", updated)


def _restart_count(pod: dict[str, Any]) -> int:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        return int(status.get("restartCount") or 0)
    return 0


async def _first(*awaitables: Any) -> None:
    tasks = [asyncio.ensure_future(item) for item in awaitables]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            if not task.done():
                task.cancel()
