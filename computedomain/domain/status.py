"""A ComputeDomain's status: projected from the caches, written only when it differs.

The projection (``projection``), the conditions (``conditions``), the events a change is
worth (``transitions``) and the decision to write (``plan.plan_status``) are pure; this module
reads the caches into the view, applies the plan (writes ``status``, records its events) and
reports metrics.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from computedomain.api import constants as c
from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.api.v1beta1 import (
    ComputeDomain,
    ComputeDomainNode,
    Condition,
)
from computedomain.domain import childkinds, crdschema, placement, projection, topology
from computedomain.domain import conditions as cond
from computedomain.domain.caches import BY_CD, BY_GPU_CLIQUE
from computedomain.domain.childkinds import ChildKind
from computedomain.domain.conditions import ChildState, DomainView
from computedomain.domain.context import ReconcileContext
from computedomain.domain.keys import CDKey
from computedomain.domain.memory import StatusMemory
from computedomain.domain.modes import StatusMode
from computedomain.domain.plan import StatusPlan, plan_status
from computedomain.domain.snapshot import DomainSnapshot
from computedomain.domain.transitions import ONCE_PER_DOMAIN, EventSpec
from computedomain.domain.workload_check import WorkloadCheck
from computedomain.runtime import objects
from computedomain.runtime.client import ApiError
from computedomain.runtime.clock import parse_time
from computedomain.runtime.controller import Result
from computedomain.runtime.event_types import WARNING

log = logging.getLogger(__name__)


class StatusWriter:
    def __init__(self, ctx: ReconcileContext) -> None:
        self._ctx = ctx
        self._workload = WorkloadCheck(ctx)

    def domain_view(
        self,
        cd: ComputeDomain,
        children: Mapping[ChildKind, ChildState],
        mode: StatusMode,
        pods: list[projection.DaemonPod],
        deleting: bool = False,
    ) -> tuple[DomainView, list[ComputeDomainNode]]:
        """What the conditions are computed from, and the projected nodes."""
        caches, uid = self._ctx.caches, cd.metadata.uid
        if mode.host_managed:
            return self._host_view(cd, children, deleting, pods), []
        cliques = [projection.clique_from_dict(cl) for cl in caches.cliques_of(uid)]
        current = list(cd.status.nodes or []) if cd.status else []
        nodes = projection.project_nodes(cliques, pods, legacy=mode.legacy, current=current)
        lost = projection.lost_nodes(nodes, caches.node_ready)
        nodes = projection.discount_lost(nodes, lost)

        node_store = caches.nodes.store
        members = {n.name for n in nodes} | {
            objects.name(node) for node in node_store.by_index(BY_CD, uid)
        }
        # The cliques it uses: by its daemons' reports, which are what IMEX uses (they stay
        # while a label is missing, as NVIDIA's kubelet plugin removes it while it restarts,
        # and while a node relabelled by the plugin's re-read still runs its daemon in the old
        # clique), and by the labels of the nodes no daemon reports for yet.
        reporting = {n.name for n in nodes if n.clique_id}
        spanned = topology.cliques_spanned(members - reporting, node_store.get)
        in_use = spanned | {n.clique_id for n in nodes if n.clique_id}
        # Only the nodes of those cliques: the whole fleet is not read per reconcile. Nodes
        # whose label is missing now count in the clique their holder's daemon reports.
        reported: dict[tuple[str, str], str] = {}
        for clique in in_use:
            reported.update(caches.reported_in(clique))
        unlabelled = (
            node
            for node_name, _ in reported
            if (node := node_store.get(node_name)) is not None and topology.clique_of(node) is None
        )
        inventory = topology.CliqueInventory.from_nodes(
            itertools.chain(
                (node for clique in in_use for node in node_store.by_index(BY_GPU_CLIQUE, clique)),
                unlabelled,
            ),
            reported,
        )
        shared: dict[str, frozenset[str]] = {}
        for clique in in_use:
            names = frozenset(
                str(CDKey.of(other_cd))
                for other in inventory.domains_in(clique) - {uid}
                for other_cd in caches.cds_of(other)
            )
            if names:
                shared[clique] = names
        view = DomainView(
            nodes=tuple(nodes),
            pods=tuple(pods),
            num_nodes=cd.spec.num_nodes if cd.spec else 0,
            children=dict(children),
            cliques=frozenset(spanned),
            shared_cliques=shared,
            deleting=deleting,
            missing_service_account=caches.missing_daemon_service_account(),
            lost_nodes=lost,
            clique_size=self._ctx.settings.daemon.max_nodes_per_imex_domain,
            members=frozenset(members),
        )
        return view, nodes

    def _host_view(
        self,
        cd: ComputeDomain,
        children: Mapping[ChildKind, ChildState],
        deleting: bool,
        pods: Sequence[projection.DaemonPod],
    ) -> DomainView:
        """hostManaged (§18): no daemons, cliques or node labels to project; only what
        driverManaged left behind is worth naming (its pods delay a deletion, as ever)."""
        caches, uid = self._ctx.caches, cd.metadata.uid
        leftovers = [
            f"{kind.resource.kind} {objects.namespace(child)}/{objects.name(child)}"
            for kind in childkinds.CHILDREN
            if not kind.in_mode(host_managed=True)
            for child in caches.children_of(kind, uid)
        ]
        return DomainView(
            pods=tuple(pods),
            num_nodes=cd.spec.num_nodes if cd.spec else 0,
            children=dict(children),
            deleting=deleting,
            host_managed=True,
            leftovers=tuple(sorted(leftovers)),
        )

    async def observe(
        self,
        cd: ComputeDomain,
        children: Mapping[ChildKind, ChildState],
        mode: StatusMode,
        pods: list[projection.DaemonPod],
        deleting: bool = False,
        workload_holders: tuple[str, ...] = (),
    ) -> tuple[DomainView, list[ComputeDomainNode], float | None]:
        """What the status is planned from: the view, the projected nodes, and when the
        workload check looks again (it reads the CD's namespace's pods while the CD waits)."""
        view, nodes = self.domain_view(cd, children, mode, pods, deleting)
        if workload_holders:  # a deletion waits for them (deletion.py)
            view = replace(view, workload_holders=workload_holders)
        placed = placement.placed_condition(cd.metadata.annotations or {}, bool(view.members))
        if placed is not None:
            view = replace(view, placement=placed)
        # A CD waiting for its workload past the grace period: why its pods do not start.
        stuck, look_again = await self._workload.look(cd, cond.waits_for_workload(view))
        if stuck:
            template = cd.spec.channel.resource_claim_template.name if cd.spec else ""
            view = replace(view, workload_template=template, workload_problems=stuck)
        return view, nodes, look_again

    def plan(
        self,
        cd: ComputeDomain,
        obj: Mapping[str, Any],
        observed: tuple[DomainView, list[ComputeDomainNode], float | None],
        children: Mapping[ChildKind, ChildState],
        mode: StatusMode,
        deleting: bool = False,
    ) -> StatusPlan:
        """``plan_status`` over what ``observe`` found, this CD's memory and the clocks."""
        ctx = self._ctx
        view, nodes, look_again = observed
        return plan_status(
            cd=cd,
            stored=dict(obj.get("status") or {}),
            resource_version=objects.resource_version(obj),
            view=view,
            nodes=nodes,
            children=children,
            mode=mode,
            memory=ctx.memory_of(cd.metadata.uid).status,
            now=ctx.clock.now(),
            wall=ctx.clock.wall(),
            grace=ctx.settings.daemon_ready_grace_period,
            window=ctx.settings.status_coalesce_window,
            deleting=deleting,
            look_again=look_again,
        )

    async def update(
        self,
        snapshot: DomainSnapshot,
        children: Mapping[ChildKind, ChildState],
        deleting: bool = False,
        workload_holders: tuple[str, ...] = (),
    ) -> Result:
        """Observe, plan, act: the view, ``plan_status``, then its patch, metrics and events,
        in the snapshot's status mode, from its daemon pods."""
        ctx = self._ctx
        cd, obj, mode, pods = snapshot.cd, snapshot.obj, snapshot.mode, list(snapshot.pods)
        observed = await self.observe(cd, children, mode, pods, deleting, workload_holders)
        plan = self.plan(cd, obj, observed, children, mode, deleting)
        view, nodes, _ = observed
        self._observe_metrics(cd, view, plan.conditions, nodes, plan.desired["status"])
        memory = ctx.memory_of(cd.metadata.uid)
        result = Result(requeue_after=plan.requeue_after)
        if plan.patch is None or plan.written is None:
            memory.status = plan.memory
            self._emit(obj, plan.events, memory.status)
            return result
        written = await self._write(cd, obj, plan.patch)
        if isinstance(written, Result):
            return written
        # The next window starts when this write returned.
        memory.status = replace(plan.written, status_written_at=ctx.clock.now())
        self._emit(obj, plan.events, memory.status)
        if mode.upstream_only:
            return result
        if not projection.status_equal(dict(written.get("status") or {}), plan.desired):
            if not ctx.caches.crd_readable:
                self._learn_pruned(dict(written.get("status") or {}), plan.desired)
                memory.status.conditions = plan.conditions  # reported; in memory from now on
                return Result(requeue=True)
            # Just after a CRD upgrade the apiserver may still prune with the old schema for a
            # moment. Nothing else would requeue this CD (the watch shows our own write), so
            # retry with backoff until the fields stick.
            log.info(
                "The apiserver dropped status fields; writing again",
                extra={"computeDomain": objects.object_key(obj)},
            )
            return Result(requeue=True)
        return result

    def _learn_pruned(self, written: Mapping[str, Any], desired: Mapping[str, Any]) -> None:
        """The CRD cannot be read (its list/watch not granted): our fields the apiserver dropped
        from this write are those it prunes. Every CD's status is written as for an outdated
        CRD from now on (the next reconcile finds nothing to write), said once."""
        dropped = tuple(
            name
            for name in crdschema.OUR_STATUS_FIELDS
            if desired.get(name) is not None and name not in written
        )
        if dropped and dropped != self._ctx.pruned_status_fields:
            self._ctx.pruned_status_fields = dropped
            log.warning(
                "ComputeDomain CRD is outdated (learned from a status write, the CRD cannot be "
                "read): %s",
                crdschema.crd_outdated_message(dropped),
            )

    async def _write(
        self, cd: ComputeDomain, obj: Mapping[str, Any], patch: dict[str, Any]
    ) -> dict[str, Any] | Result:
        """The status patch, guarded by the version read. The written object, or the Result to
        return instead (a conflict requeues; a CD gone meanwhile needs nothing)."""
        try:
            written = await self._ctx.patch_cd(
                cd, obj, patch, patch_type="merge", subresource="status"
            )
        except ApiError as err:
            if err.is_conflict:
                # Someone (a legacy daemon) wrote in between; the watch event requeues us.
                return Result(requeue=True)
            if err.is_not_found:  # gone without our finalizer; orphan handling takes over
                return Result()
            raise
        self._ctx.caches.observe_write(COMPUTE_DOMAINS, written)
        return written

    def _observe_metrics(
        self,
        cd: ComputeDomain,
        view: DomainView,
        conditions: list[Condition],
        nodes: list[ComputeDomainNode],
        global_status: str,
    ) -> None:
        ctx = self._ctx
        memory = ctx.memory_of(cd.metadata.uid).metrics
        now = ctx.clock.now()
        by_status: dict[str, int] = {c.STATUS_READY: 0, c.STATUS_NOT_READY: 0}
        for node in nodes:
            status = node.status or c.STATUS_NOT_READY
            by_status[status] = by_status.get(status, 0) + 1
            first = memory.node_first_seen.setdefault(node.name, now)
            if node.status == c.STATUS_READY and first >= 0:
                ctx.metrics.observe_daemon_ready_latency(now - first)
                memory.node_first_seen[node.name] = -1.0  # observed once per join
        for gone in set(memory.node_first_seen) - {n.name for n in nodes}:
            del memory.node_first_seen[gone]
        by_type = {x.type: x.status for x in conditions}
        if by_type.get("Ready") == "True" and not memory.reported_ready:
            memory.reported_ready = True
            created = cd.metadata.creation_timestamp
            if created is not None:
                ctx.metrics.observe_time_to_ready(
                    max(0.0, (ctx.clock.wall() - parse_time(created)).total_seconds())
                )
        ctx.metrics.observe_domain(
            cd.metadata.namespace,
            cd.metadata.name,
            conditions=by_type,
            nodes_by_status=by_status,
            cliques=len(cond.all_cliques(view)),
            global_status=global_status,
            reasons={x.type: x.reason for x in conditions},
            clique_split=cond.avoidable_clique_split(view),
        )

    def _emit(
        self, obj: Mapping[str, Any], events: Sequence[EventSpec], memory: StatusMemory
    ) -> None:
        for event in events:
            self._ctx.recorder.record(obj, event.type, event.reason, event.action, event.note)
            if event.type == WARNING and event.reason in ONCE_PER_DOMAIN:
                memory.warned_once.add(event.reason)
