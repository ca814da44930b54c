"""The one entry point that does I/O for a ComputeDomain: read caches, decide, write differences.

Level-triggered: a reconcile gets only a key, looks at the cached state of the CD and
everything labelled with its UID, and moves the world towards the desired state. It writes
nothing when nothing differs, so a steady state costs no API calls.

The work is split where its seams are:

- ``snapshot``: the CD and what the caches hold of it, read once (observe);
- ``plan``: the live path's writes (finalizer, children), decided from that (pure);
- ``children``: the executor of the creates (create, adopt, refuse a foreign object);
- ``status``: projection, conditions, clique pruning, the status write and its events;
- ``deletion``: children, node labels, then the finalizer;
- ``sweeper``: orphans of CDs that are gone.

While NVIDIA's controller runs (``standing_by`` gives a reason, see ``coexistence``) a
reconcile writes nothing, not even on deletion: NVIDIA's controller, which uses the same
finalizer, cleans up then. The stand-by is a cluster's state, reported once on the CRD
(``coexistence``), not on each CD.
"""

from __future__ import annotations

from collections.abc import Callable

from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.api.v1beta1 import ComputeDomain
from computedomain.domain.caches import Caches
from computedomain.domain.children import ChildMaker
from computedomain.domain.context import ReconcileContext
from computedomain.domain.deletion import Cleanup, Finalizer
from computedomain.domain.keys import OrphanKey, QueueKey
from computedomain.domain.observe import observe
from computedomain.domain.plan import plan_live
from computedomain.domain.ports import DomainMetricsSink
from computedomain.domain.pruning import CliquePruner
from computedomain.domain.settings import ReconcilerSettings
from computedomain.domain.snapshot import DomainSnapshot
from computedomain.domain.status import StatusWriter
from computedomain.domain.sweeper import OrphanSweeper
from computedomain.runtime import objects
from computedomain.runtime.access import Access
from computedomain.runtime.client import ApiError, KubeClient
from computedomain.runtime.clock import Clock, SystemClock
from computedomain.runtime.controller import Result
from computedomain.runtime.events import EventRecorder
from computedomain.runtime.updates import Patcher

# A requeue goes behind the keys already waiting (a delay of 0 would mean "no requeue").
CHILDREN_FIRST_REQUEUE = 0.001


class ComputeDomainReconciler:
    def __init__(
        self,
        client: KubeClient,
        caches: Caches,
        settings: ReconcilerSettings,
        recorder: EventRecorder,
        metrics: DomainMetricsSink,
        clock: Clock | None = None,
        backlog: Callable[[], int] | None = None,
        standing_by: Callable[[], str] = lambda: "",
        access: Access | None = None,
    ) -> None:
        """``backlog``: how many reconciles wait to start (the work queue's ready keys);
        ``standing_by``: why nothing may be written now (empty: write); ``access``: what this
        identity may do (``permissions``; where patch is not granted, writes go by update)."""
        self._standing_by = standing_by
        self._ctx = ReconcileContext(
            client, caches, settings, recorder, metrics, clock or SystemClock()
        )
        self._ctx.patcher = Patcher(client, access)
        if backlog is not None:
            self._ctx.backlog = backlog
        self._children = ChildMaker(self._ctx)
        self._status = StatusWriter(self._ctx)
        self._pruner = CliquePruner(self._ctx)
        self.cleanup = Cleanup(self._ctx)
        self._finalizer = Finalizer(self._ctx, self.cleanup, self._status)
        self.sweeper = OrphanSweeper(self._ctx, self.cleanup)

    # Its parts, for the unit tests that compare whole plans (tests/kit/world.py).
    @property
    def context(self) -> ReconcileContext:
        return self._ctx

    @property
    def children(self) -> ChildMaker:
        return self._children

    @property
    def status(self) -> StatusWriter:
        return self._status

    async def reconcile(self, key: QueueKey) -> Result:
        standing_by = self._standing_by()
        if isinstance(key, OrphanKey):
            # Orphans wait too: the end of the stand-by requeues them.
            return Result() if standing_by else await self.sweeper.reconcile(key)
        obj = self._ctx.caches.compute_domain(key)
        if obj is None:
            # Gone, also without our finalizer (removed by hand): its series go with it, and so
            # does what this process remembered of it: the UID last reconciled under this key,
            # and any other UID no cached CD has any more.
            self._ctx.metrics.forget_domain(key.namespace, key.name)
            if (last := self._ctx.uid_of_key.get(key)) is not None:
                self._ctx.forget(last)
            for uid in [uid for uid in self._ctx.memory if not self._ctx.caches.cds_of(uid)]:
                self._ctx.forget(uid)
            return Result()
        self._ctx.reconciling(key, objects.uid(obj) or "")
        if standing_by:
            return Result()
        if objects.meta(obj).get("deletionTimestamp"):
            return await self._finalizer.finalize(ComputeDomain.model_validate(obj), obj)
        return await self._reconcile_live(observe(self._ctx, obj))

    async def _reconcile_live(self, snapshot: DomainSnapshot) -> Result:
        """Observe (``snapshot``), plan (``plan_live``: finalizer, children), act; then the
        clique pruning, and the status (``StatusWriter.update``: observe the view, plan it with
        ``plan_status``, act)."""
        ctx = self._ctx
        plan = plan_live(snapshot, self._children.refused, ctx.clock.now())
        if plan.finalizer is not None:
            # Finalizer first: no child may exist that a deletion would not clean up.
            try:
                obj = await ctx.patch_cd(
                    snapshot.cd, snapshot.obj, plan.finalizer, patch_type="json"
                )
            except ApiError as err:
                if err.is_not_found:  # deleted since the cache saw it; the watch says so next
                    return Result()
                raise
            ctx.caches.observe_write(COMPUTE_DOMAINS, obj)
            snapshot = snapshot.rebased(obj)

        children, requeue, created = await self._children.act(snapshot, plan)
        if created and ctx.backlog() > 0:
            # Children first in a burst: this CD's first status waits behind the reconciles
            # queued now, so no CD's children wait for another's status (same writes, reordered).
            return Result(requeue_after=CHILDREN_FIRST_REQUEUE)
        # Before the status: what it projects must not show the entries removed now.
        if snapshot.mode.prunes_cliques:
            pruning = await self._pruner.prune(snapshot.cd, snapshot.pods)
        else:
            pruning = None
        result = await self._status.update(snapshot, children)
        if pruning is not None and not result.requeue:
            result = result.sooner(pruning)
        return result if requeue is None else result.sooner(requeue)
