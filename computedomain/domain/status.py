"""A ComputeDomain's status: projected from the caches, written only when it differs.

The projection (``projection``), the conditions (``conditions``) and the events a change is
worth (``transitions``) are pure; this module reads the caches, prunes stale clique entries,
writes ``status`` and reports metrics.
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
from computedomain.domain import childkinds, coexistence, placement, projection, topology
from computedomain.domain import conditions as cond
from computedomain.domain.caches import BY_CD, BY_GPU_CLIQUE
from computedomain.domain.childkinds import ChildKind
from computedomain.domain.conditions import ChildState, DomainView
from computedomain.domain.context import ReconcileContext, StatusMemory
from computedomain.domain.keys import CDKey
from computedomain.domain.modes import StatusMode
from computedomain.domain.observe import status_mode
from computedomain.domain.transitions import ONCE_PER_DOMAIN, transition_events
from computedomain.domain.workload_check import WorkloadCheck
from computedomain.runtime import objects
from computedomain.runtime.client import ApiError
from computedomain.runtime.clock import parse_time
from computedomain.runtime.controller import Result
from computedomain.runtime.event_types import WARNING

log = logging.getLogger(__name__)


# A requeue at a grace deadline goes this much later, so the clock has surely passed it.
GRACE_MARGIN_SECONDS = 0.1
# While a CD's status keeps changing (a bring-up: daemons start over tens of seconds), its
# coalescing window doubles after each folded write, up to this many times the configured one.
MAX_WINDOW_FACTOR = 4


def _ready(conditions: Sequence[Condition]) -> str | None:
    return next((x.status for x in conditions if x.type == "Ready"), None)


def _healthy(ready: Condition | None) -> bool:
    return ready is not None and (ready.status == "True" or ready.reason in cond.PROGRESS_REASONS)


def _progress_only(
    stored: Mapping[str, Any],
    desired: Mapping[str, Any],
    previous: Sequence[Condition],
    conditions: Sequence[Condition],
) -> bool:
    """Only the conditions changed, Ready says the CD is on its way (a daemon starting within
    its grace period, waiting for the workload) and said nothing was wrong before: no node,
    count or global status moved, so no consumer acts on this write (the plugin reads
    status.nodes), and no problem is taken back."""
    ready = next((x for x in conditions if x.type == "Ready"), None)
    if ready is None or ready.status != "False" or ready.reason not in cond.PROGRESS_REASONS:
        return False
    if not _healthy(next((x for x in previous if x.type == "Ready"), None)):
        return False

    def rest(status: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in status.items() if k != "conditions"}

    return bool(stored) and projection.status_equal(rest(stored), rest(desired))


def desired_status(
    cd: ComputeDomain,
    view: DomainView,
    nodes: Sequence[ComputeDomainNode],
    conditions: Sequence[Condition],
    children: Mapping[ChildKind, ChildState],
    mode: StatusMode,
) -> dict[str, Any]:
    """The whole status this controller would write (before an outdated CRD cuts it down)."""
    counts: tuple[int | None, ...] = cond.status_counts(list(nodes), view.cliques)
    if mode.host_managed:
        # Upstream's Ready: admitted and the workload RCT (each child of this mode) exists
        # (§18). No daemon joins, so the node and clique counts are absent (empty printer
        # columns), not 0.
        ok = all(
            (state := children.get(kind.kind)) is not None and state.status is cond.ChildStatus.OK
            for kind in childkinds.in_mode(host_managed=True)
        )
        global_status = c.STATUS_READY if ok else c.STATUS_NOT_READY
        counts = (None, None, None)
    elif view.invalid:
        global_status = c.STATUS_NOT_READY
    else:
        global_status = projection.global_status(list(nodes), view.num_nodes)
    return {
        "status": global_status,
        "nodes": [n.to_dict() for n in nodes] or None,
        "conditions": [x.to_dict() for x in conditions],
        "observedGeneration": cd.metadata.generation,
        "nodeCount": counts[0],
        "readyNodeCount": counts[1],
        "cliqueCount": counts[2],
    }


def daemon_pods(ctx: ReconcileContext, cd: ComputeDomain) -> list[projection.DaemonPod]:
    """The CD's daemon pods as the cache holds them, projected (once per reconcile)."""
    return [projection.daemon_pod_from_dict(p) for p in ctx.caches.pods_of(cd.metadata.uid)]


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

    async def update(
        self,
        cd: ComputeDomain,
        obj: dict[str, Any],
        children: Mapping[ChildKind, ChildState],
        deleting: bool = False,
        mode: StatusMode | None = None,
        pods: list[projection.DaemonPod] | None = None,
        workload_holders: tuple[str, ...] = (),
    ) -> Result:
        """View, desired status, coalescing, write, events: in that order, for ``mode`` and the
        CD's daemon ``pods`` (given by the caller for the whole reconcile; else read here)."""
        ctx = self._ctx
        mode = mode or status_mode(ctx, cd)
        pods = daemon_pods(ctx, cd) if pods is None else pods
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
        memory = ctx.memory_of(cd.metadata.uid).status
        previous = self._previous_conditions(cd, memory, mode)
        now, grace = ctx.clock.wall(), ctx.settings.daemon_ready_grace_period
        conditions = cond.conditions_for(view, cd.metadata.generation or 0, now, previous, grace)
        result = Result()
        due = cond.daemons_due(view, now, grace, conditions)
        if due is not None:
            # Look again when a starting daemon outlives its grace period: then it is late.
            result = Result(requeue_after=due + GRACE_MARGIN_SECONDS)
        if look_again is not None:
            result = result.sooner(look_again + GRACE_MARGIN_SECONDS)
        desired = desired_status(cd, view, nodes, conditions, children, mode)
        self._observe_metrics(cd, view, conditions, nodes, desired["status"])
        if mode.upstream_only:
            # Writing fields the apiserver prunes would differ from the stored status forever.
            # The CRD itself carries the one CRDOutdated Event (coexistence), not each CD.
            desired = {k: desired[k] for k in coexistence.UPSTREAM_STATUS_FIELDS}
        stored = dict(obj.get("status") or {})
        if projection.status_equal(stored, desired):
            memory.progress_held_since = None  # what was held is moot: nothing to write
            if mode.upstream_only and conditions != previous:
                # No write carries them, yet their transitions are still news.
                self._emit_transitions(obj, cd, previous, conditions, nodes)
                memory.conditions = conditions
            return result

        # A verdict a workload or a person waits on (Ready either way) and deletion go out now;
        # a daemon starting that changed nothing but the conditions' words waits a window.
        flips = stored.get("status") != desired["status"]
        flips = flips or _ready(previous) != _ready(conditions)
        if deleting:
            hold = None
        elif _progress_only(stored, desired, previous, conditions):
            hold = self._progress_hold(memory)
        else:
            hold = None if flips else self._coalescing(memory)
        if hold is not None:
            # Folded into one write at the window's end; that reconcile recomputes from the
            # caches, so it carries whatever changed meanwhile.
            return result.sooner(hold)
        written = await self._write(cd, obj, desired)
        if isinstance(written, Result):
            return written
        self._wrote(memory)
        self._emit_transitions(obj, cd, previous, conditions, nodes)
        if mode.upstream_only:
            # Only now reported: a held or failed write leaves their transitions to the next.
            memory.conditions = conditions
        elif not projection.status_equal(dict(written.get("status") or {}), desired):
            if not ctx.caches.crd_readable:
                self._learn_pruned(dict(written.get("status") or {}), desired)
                memory.conditions = conditions  # reported; they live in memory from now on
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
            for name in coexistence.OUR_STATUS_FIELDS
            if desired.get(name) is not None and name not in written
        )
        if dropped and dropped != self._ctx.pruned_status_fields:
            self._ctx.pruned_status_fields = dropped
            log.warning(
                "ComputeDomain CRD is outdated (learned from a status write, the CRD cannot be "
                "read): %s",
                coexistence.crd_outdated_message(dropped),
            )

    @staticmethod
    def _previous_conditions(
        cd: ComputeDomain, memory: StatusMemory, mode: StatusMode
    ) -> list[Condition]:
        """The conditions the last write carried: in memory while the CRD prunes them."""
        if mode.upstream_only:
            return memory.conditions
        return list(cd.status.conditions or []) if cd.status else []

    async def _write(
        self, cd: ComputeDomain, obj: Mapping[str, Any], desired: dict[str, Any]
    ) -> dict[str, Any] | Result:
        """The status patch, guarded by the version read. The written object, or the Result to
        return instead (a conflict requeues; a CD gone meanwhile needs nothing)."""
        patch = {"metadata": {"resourceVersion": objects.resource_version(obj)}, "status": desired}
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

    def _coalescing(self, memory: StatusMemory) -> float | None:
        """How long a status change waits to be folded with the next ones, or None: write now.

        The first change after a quiet window goes out at once (an isolated change is not
        delayed); changes within the window after a write wait for its end, so a bring-up of
        many daemons costs a few status writes instead of several per daemon.
        """
        base, last = self._ctx.settings.status_coalesce_window, memory.status_written_at
        if base <= 0 or last is None:
            return None
        wait = last + (memory.status_window or base) - self._ctx.clock.now()
        if wait <= 0:
            return None
        memory.status_held = True
        return wait

    def _progress_hold(self, memory: StatusMemory) -> float | None:
        """How long a change of the conditions' words alone waits, or None: write now.

        A daemon pod seen before its daemon's clique entry (Ready False, DaemonsStarting) is
        news to nobody: the workload waits for the node's entry, which is written at once. Held
        one window from when it was first seen, it is folded into that entry's write; a daemon
        slower than the window still shows as starting, at most one window late.
        """
        base = self._ctx.settings.status_coalesce_window
        if base <= 0:
            return None
        now = self._ctx.clock.now()
        if memory.progress_held_since is None:
            memory.progress_held_since = now
        wait = max(memory.progress_held_since + base - now, self._coalescing(memory) or 0.0)
        return wait if wait > 0 else None

    def _wrote(self, memory: StatusMemory) -> None:
        """A status write went out: the next window is twice as long if this write folded held
        changes (they keep coming), up to ``MAX_WINDOW_FACTOR``, else the configured one."""
        base = self._ctx.settings.status_coalesce_window
        window = memory.status_window or base
        grown = min(window * 2, base * MAX_WINDOW_FACTOR)
        memory.status_window = grown if memory.status_held else base
        memory.status_held = False
        memory.progress_held_since = None
        memory.status_written_at = self._ctx.clock.now()

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

    def _emit_transitions(
        self,
        obj: Mapping[str, Any],
        cd: ComputeDomain,
        before: list[Condition],
        after: list[Condition],
        nodes: list[ComputeDomainNode],
    ) -> None:
        old_nodes = list(cd.status.nodes or []) if cd.status else []
        warned = self._ctx.memory_of(cd.metadata.uid).status.warned_once
        for event in transition_events(old_nodes, nodes, before, after, warned):
            self._ctx.recorder.record(obj, event.type, event.reason, event.action, event.note)
            if event.type == WARNING and event.reason in ONCE_PER_DOMAIN:
                warned.add(event.reason)
