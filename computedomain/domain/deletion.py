"""Deleting a ComputeDomain (contract §10.1): children, node labels, then our finalizer.

Each step stands on its own and is idempotent, so nothing hangs: a DaemonSet removed by hand
does not block the claim templates, a label that moved to another CD is left alone, and daemon
pods get a bounded time to stop. The orphan sweeper reuses the first two steps.

Before the first step, a CD whose workload pods still run (Running: a job draining, or
deleted with its CD at once) keeps everything, its IMEX daemons above all, until those pods have
stopped or WORKLOAD_RELEASE_TIMEOUT has passed: IMEX pulled from under a running CUDA process
fails it (error 719). NVIDIA's controller does not wait. The pods are read as ``workload_check``
reads them (one LIST of the CD's namespace from the watch cache, each poll while it waits); the
controller watches no workload pod.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from computedomain.api import constants as c
from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.api.v1beta1 import ComputeDomain
from computedomain.domain.caches import BY_CD
from computedomain.domain.context import DELETION_POLL_SECONDS, ReconcileContext
from computedomain.domain.memory import DeletionMemory
from computedomain.domain.observe import observe
from computedomain.domain.projection import plural
from computedomain.domain.status import StatusWriter
from computedomain.domain.workload import pods_holding
from computedomain.runtime import objects, patches
from computedomain.runtime import resources as r
from computedomain.runtime.client import ApiError
from computedomain.runtime.clock import parse_time
from computedomain.runtime.controller import Result
from computedomain.runtime.event_types import NORMAL, WARNING
from computedomain.runtime.resources import Resource

log = logging.getLogger(__name__)

# While workload pods still use a deleted CD's channel, how often their namespace is read again:
# as often as the daemon pods are looked at, so the IMEX daemons go soon after the last pod stops.
WORKLOAD_RELEASE_POLL_SECONDS = DELETION_POLL_SECONDS
# The pods that may be using IMEX: those not done (running ones also while being deleted:
# draining; Pending ones with an init container running); workload.holds_its_claims decides.
NOT_DONE = "status.phase!=Succeeded,status.phase!=Failed"


class Cleanup:
    """Removes what names a CD UID: its children and its node labels."""

    def __init__(self, ctx: ReconcileContext) -> None:
        self._ctx = ctx

    async def remove_children_of(self, uid: str, regarding: Mapping[str, Any] | None = None) -> int:
        """Delete every child labelled with ``uid`` and strip our finalizer from each.

        Returns how many children are still visible (deleted but not yet gone from the caches).
        Each child is handled on its own, so a DaemonSet removed by hand never blocks the RCTs.
        """
        ctx = self._ctx
        targets = ctx.caches.children_to_delete(uid)  # in childkinds' deletion order
        gone = ctx.memory_of(uid).deletion.children_gone
        remaining = 0
        # One Event per pass names every child it deleted (as `Created` names those it made):
        # three Events per CD said what one says. Recorded also when a later call fails.
        deleted_now: list[tuple[str, dict[str, Any]]] = []
        try:
            for res, child in targets:
                remaining += 1
                if objects.uid(child) in gone:
                    continue  # known gone; its watch event has not reached the cache yet
                if await self._remove(res, child, gone):
                    what = f"{res.kind} {objects.object_key(child)}"
                    deleted_now.append((what, objects.reference(child, res)))
        finally:
            if regarding is not None:
                ctx.record_children(regarding, "Deleted", deleted_now)
        return remaining

    async def _remove(self, res: Resource, child: dict[str, Any], gone: set[str]) -> bool:
        """Delete ``child`` (unless already deleting) and strip our finalizer from it; whether
        this call issued its delete. A child found gone joins ``gone``."""
        ctx = self._ctx
        name, namespace = objects.name(child), objects.namespace(child)
        issued_delete = not objects.meta(child).get("deletionTimestamp")
        try:
            if issued_delete:
                deleted = await ctx.client.delete(res, name, namespace)
                if deleted is not None and objects.meta(deleted).get("deletionTimestamp"):
                    # Kept by a finalizer: the cache learns it is going, so a retried
                    # pass does not delete it again.
                    ctx.caches.observe_write(res, deleted)
                    child = deleted
            patch = patches.remove_finalizer(child, c.FINALIZER)
            if patch is not None:
                # By update (no patch granted), read whole first: the caches trim children.
                written = await ctx.patcher.patch(res, name, patch, namespace, patch_type="json")
                ctx.caches.observe_write(res, written)
        except ApiError as err:
            if err.is_not_found:
                gone.add(objects.uid(child) or "")
                return False
            if err.is_invalid:  # finalizer list changed under us; next pass re-reads
                return False
            raise
        return issued_delete

    async def remove_node_labels(self, uid: str) -> int:
        """Strip the CD label from Nodes still naming ``uid``, only while it still names ``uid``.

        Uses a live, label-selected LIST (the cache may lag a label the plugin just set; names
        are all it needs, so metadata only) and a JSON patch guarded by a ``test``, so a label
        that moved to another CD is left alone (by update: checked on the Node read, which is
        PUT with its resourceVersion).
        """
        ctx = self._ctx
        memory = ctx.memory_of(uid).deletion
        if memory.node_labels_cleared and not ctx.caches.nodes.store.by_index(BY_CD, uid):
            # A live LIST already found none, and the labelled-Node watch has seen no new one
            # since: a retried pass does not list again.
            return 0
        listing = await ctx.client.list(
            r.NODES, label_selector=f"{c.CD_LABEL}={uid}", metadata_only=True
        )
        memory.node_labels_cleared = not listing.get("items")
        removed = 0
        for node in listing.get("items") or []:
            patch = patches.remove_label_if(c.CD_LABEL, uid)
            try:
                # By update (no patch granted): the Node is read whole, its label checked there.
                written = await ctx.patcher.patch(
                    r.NODES, objects.name(node), patch, patch_type="json"
                )
            except ApiError as err:
                if err.is_not_found or err.is_invalid:
                    continue  # gone, or the label now belongs to someone else
                raise
            ctx.caches.observe_write(r.NODES, written)
            removed += 1
        return removed


class Finalizer:
    def __init__(self, ctx: ReconcileContext, cleanup: Cleanup, status: StatusWriter) -> None:
        self._ctx = ctx
        self._cleanup = cleanup
        self._status = status

    async def finalize(self, cd: ComputeDomain, obj: dict[str, Any]) -> Result:
        """Contract §10.1 order, each step on its own and idempotent, never hanging."""
        ctx = self._ctx
        if c.FINALIZER not in (cd.metadata.finalizers or []):
            return Result()
        uid = cd.metadata.uid
        deleted_at = parse_time(cd.metadata.deletion_timestamp or "")
        ctx.metrics.observe_deletion_started(
            cd.metadata.namespace, cd.metadata.name, deleted_at.timestamp()
        )
        waited = (ctx.clock.wall() - deleted_at).total_seconds()
        holders = await self._workload_still_running(cd, obj, waited)
        if holders:
            await self._status.update(
                observe(ctx, obj), {}, deleting=True, workload_holders=holders
            )
            left = ctx.settings.workload_release_timeout - waited
            return Result(requeue_after=max(0.0, min(WORKLOAD_RELEASE_POLL_SECONDS, left)))
        # Every child goes, also a DaemonSet or daemon RCT left from driverManaged mode: the
        # CD's deletion is what releases them (hostManaged never deletes them on a live CD).
        removed = await self._cleanup.remove_children_of(uid, regarding=obj)
        if not ctx.settings.host_managed or ctx.caches.nodes.store.by_index(BY_CD, uid):
            # hostManaged: nobody labels Nodes for a CD (no DaemonSet to place), so the cache
            # is asked first and the live LIST is spent only on a label from driverManaged.
            await self._cleanup.remove_node_labels(uid)

        pods = ctx.caches.pods_of(uid)
        # Daemon pods get DAEMON_POD_WAIT_TIMEOUT from the moment their DaemonSet could go, not
        # from the deletion's start: a wait for the workload came first.
        released_at = ctx.memory_of(uid).deletion.workload_released_at
        if released_at is not None and released_at > deleted_at:
            waited = (ctx.clock.wall() - released_at).total_seconds()
        if pods and waited < ctx.settings.daemon_pod_wait_timeout:
            # Keep the CD while its daemon pods stop, so the plugin can still resolve it (#380).
            await self._status.update(observe(ctx, obj), {}, deleting=True)
            return Result(requeue_after=DELETION_POLL_SECONDS)
        if pods:
            names = ", ".join(sorted(objects.name(p) or "?" for p in pods))
            ctx.recorder.record(
                obj,
                WARNING,
                "DaemonPodsStuck",
                "Delete",
                f"Daemon pods still present after {waited:.0f}s, removing the finalizer "
                f"anyway: {names}",
            )
        if removed:
            # Children are deleted but still visible in the caches; their events requeue us.
            return Result(requeue_after=DELETION_POLL_SECONDS)

        patch = patches.remove_finalizer(obj, c.FINALIZER)
        if patch is not None:
            try:
                # The CD leaves the cache now, not at its DELETED event: a pass meanwhile
                # would find it still finalizing and list Nodes and patch it again.
                written = await ctx.patch_cd(cd, obj, patch, patch_type="json")
                ctx.caches.observe_write(COMPUTE_DOMAINS, written)
            except ApiError as err:
                if err.is_not_found:
                    pass
                elif err.is_invalid:
                    return Result(requeue=True)  # finalizers moved; re-read from the cache
                else:
                    raise
        ctx.recorder.record(obj, NORMAL, "CleanedUp", "Delete", "Removed all children")
        ctx.metrics.forget_domain(cd.metadata.namespace, cd.metadata.name)
        ctx.forget(uid)
        log.info("Finalized ComputeDomain", extra={"uid": uid})
        return Result()

    async def _workload_still_running(
        self, cd: ComputeDomain, obj: Mapping[str, Any], waited: float
    ) -> tuple[str, ...]:
        """The workload pods the deletion waits for now (none: go on). Read until one look
        finds none, the timeout passes, or a LIST fails (a deletion never hangs on a read);
        then never again for this CD."""
        ctx = self._ctx
        memory = ctx.memory_of(cd.metadata.uid).deletion
        timeout = ctx.settings.workload_release_timeout
        if memory.workload_released or timeout <= 0 or ctx.settings.host_managed or not cd.spec:
            return ()
        template = cd.spec.channel.resource_claim_template.name
        namespace = cd.metadata.namespace
        try:
            listed = await ctx.client.list(
                r.PODS, namespace=namespace, field_selector=NOT_DONE, resource_version="0"
            )
        except ApiError as err:
            log.warning(
                "Could not list the workload pods of a deleted ComputeDomain; not waiting for them",
                extra={"computeDomain": f"{namespace}/{cd.metadata.name}", "err": str(err)},
            )
            self._released(memory)
            return ()
        holders = tuple(pods_holding(listed.get("items") or [], template))
        if holders and waited < timeout:
            if not memory.workload_wait_announced:
                memory.workload_wait_announced = True
                ctx.recorder.record(
                    obj,
                    NORMAL,
                    "WaitingForWorkloadPods",
                    "Delete",
                    f"IMEX daemons stay while {_pods(holders)} still {_use(holders)} "
                    "ResourceClaimTemplate "
                    f"{template} (at most {timeout:.0f}s): {', '.join(holders)}",
                )
            return holders
        if holders:
            ctx.recorder.record(
                obj,
                WARNING,
                "WorkloadPodsStillRunning",
                "Delete",
                f"{_pods(holders)} still {_use(holders)} ResourceClaimTemplate {template} after "
                f"{waited:.0f}s; removing the IMEX daemons anyway: {', '.join(holders)}",
            )
        self._released(memory)
        return ()

    def _released(self, memory: DeletionMemory) -> None:
        memory.workload_released = True
        if memory.workload_wait_announced:  # it waited: the daemon pods' time starts now
            memory.workload_released_at = self._ctx.clock.wall()


def _pods(names: tuple[str, ...]) -> str:
    return plural(len(names), "workload pod")


def _use(names: tuple[str, ...]) -> str:
    return "uses" if len(names) == 1 else "use"
