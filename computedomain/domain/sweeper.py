"""Orphans: children and node labels naming a CD UID that no ComputeDomain has any more.

They appear when a CD was deleted (its finalizer removed by hand, or while no controller ran).
An informer event about such an object enqueues an ``OrphanKey`` on sight (``watches``); the
periodic sweep here finds the rest. Either way ``reconcile`` acts only after every cache
synced and the UID stayed unknown for the grace period, and confirms with a live LIST: our
cache may lag a brand-new CD.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.domain.context import DELETION_POLL_SECONDS, ReconcileContext
from computedomain.domain.deletion import Cleanup
from computedomain.domain.keys import OrphanKey
from computedomain.runtime import objects
from computedomain.runtime.controller import Result

log = logging.getLogger(__name__)


class OrphanSweeper:
    def __init__(self, ctx: ReconcileContext, cleanup: Cleanup) -> None:
        self._ctx = ctx
        self._cleanup = cleanup
        # UID -> monotonic time it was first seen without a CD.
        self._seen: dict[str, float] = {}

    def orphans(self) -> list[OrphanKey]:
        """Every CD UID some cached child, pod, clique or Node names but no cached CD has."""
        caches = self._ctx.caches
        return [OrphanKey(uid) for uid in sorted(caches.labelled_uids() - caches.known_uids())]

    async def sweep_forever(self, enqueue: Callable[[OrphanKey], None], interval: float) -> None:
        """Periodic orphan sweep: covers CDs deleted while no controller was running."""
        while True:
            for key in self.orphans():
                enqueue(key)
            await self._ctx.clock.sleep(interval)

    async def reconcile(self, key: OrphanKey) -> Result:
        ctx, uid = self._ctx, key.uid
        if ctx.caches.cds_of(uid):
            self._seen.pop(uid, None)
            return Result()
        if not ctx.caches.synced:
            return Result(requeue_after=1.0)
        now = ctx.clock.now()
        first = self._seen.setdefault(uid, now)
        remaining = ctx.settings.orphan_grace_period - (now - first)
        if remaining > 0:
            return Result(requeue_after=remaining)
        # The UIDs are all this needs: metadata only, not every CD's spec and status.
        live = await ctx.client.list(COMPUTE_DOMAINS, metadata_only=True)
        if any(objects.uid(item) == uid for item in live.get("items") or []):
            self._seen.pop(uid, None)
            return Result()
        children = await self._cleanup.remove_children_of(uid)
        labels = await self._cleanup.remove_node_labels(uid)
        if children + labels:
            ctx.metrics.inc_orphan_cleanup("children" if children else "nodeLabels")
            log.info(
                "Removed orphans of a deleted ComputeDomain",
                extra={"uid": uid, "children": children, "nodeLabels": labels},
            )
        if children:
            return Result(requeue_after=DELETION_POLL_SECONDS)
        self._seen.pop(uid, None)
        ctx.forget(uid)
        return Result()
