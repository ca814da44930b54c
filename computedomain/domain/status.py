"""A ComputeDomain's status: projected from the caches, written only when it differs.

The projection (``projection``), the conditions (``conditions``) and the events a change is
worth (``transitions``) are pure; this module reads the caches, prunes stale clique entries,
writes ``status`` and reports metrics.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from computedomain.api import constants as c
from computedomain.api.resources import CLIQUES, COMPUTE_DOMAINS
from computedomain.api.v1beta1 import (
    ComputeDomain,
    ComputeDomainClique,
    ComputeDomainNode,
    Condition,
)
from computedomain.domain import coexistence, projection, topology
from computedomain.domain import conditions as cond
from computedomain.domain.caches import BY_CD, BY_GPU_CLIQUE
from computedomain.domain.conditions import ChildKind, ChildState, DomainView
from computedomain.domain.context import DomainMemory, ReconcileContext
from computedomain.domain.keys import CDKey
from computedomain.domain.transitions import ONCE_PER_DOMAIN, WARNING, transition_events
from computedomain.runtime import objects
from computedomain.runtime.client import ApiError
from computedomain.runtime.clock import parse_time
from computedomain.runtime.controller import Result
from computedomain.runtime.resources import PODS

log = logging.getLogger(__name__)


# A requeue at a grace deadline goes this much later, so the clock has surely passed it.
GRACE_MARGIN_SECONDS = 0.1
# While a CD's status keeps changing (a bring-up: daemons start over tens of seconds), its
# coalescing window doubles after each folded write, up to this many times the configured one.
MAX_WINDOW_FACTOR = 4


def _ready(conditions: Sequence[Condition]) -> str | None:
    return next((x.status for x in conditions if x.type == "Ready"), None)


class StatusWriter:
    def __init__(self, ctx: ReconcileContext) -> None:
        self._ctx = ctx

    def domain_view(
        self, cd: ComputeDomain, children: Mapping[ChildKind, ChildState], deleting: bool = False
    ) -> tuple[DomainView, list[ComputeDomainNode], bool]:
        """What the conditions are computed from, the projected nodes, and whether the CD's
        daemons speak the legacy protocol (they write ``status.nodes`` themselves)."""
        caches, uid = self._ctx.caches, cd.metadata.uid
        pods = [projection.daemon_pod_from_dict(p) for p in caches.pods_of(uid)]
        if self._ctx.settings.host_managed:
            return self._host_view(cd, children, deleting, pods), [], False
        cliques = [projection.clique_from_dict(cl) for cl in caches.cliques_of(uid)]
        daemonsets = caches.daemonsets_of(uid)
        legacy = (
            projection.uses_legacy_protocol(daemonsets[0])
            if daemonsets
            else not self._ctx.settings.cliques_enabled
        )
        current = list(cd.status.nodes or []) if cd.status else []
        nodes = projection.project_nodes(cliques, pods, legacy=legacy, current=current)
        lost = projection.lost_nodes(nodes, caches.node_ready)
        nodes = projection.discount_lost(nodes, lost)

        node_store = caches.nodes.store
        members = {n.name for n in nodes} | {
            objects.name(node) for node in node_store.by_index(BY_CD, uid)
        }
        spanned = topology.cliques_spanned(members, node_store.get)
        # Only the nodes of the cliques this CD spans: the whole fleet is not read per reconcile.
        inventory = topology.CliqueInventory.from_nodes(
            node for clique in spanned for node in node_store.by_index(BY_GPU_CLIQUE, clique)
        )
        shared: dict[str, frozenset[str]] = {}
        for clique in spanned:
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
        return view, nodes, legacy

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
            f"{kind} {objects.namespace(child)}/{objects.name(child)}"
            for kind, found in (
                ("DaemonSet", caches.daemonsets_of(uid)),
                ("ResourceClaimTemplate", caches.claim_templates_of(uid, c.TARGET_DAEMON)),
            )
            for child in found
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
    ) -> Result:
        ctx = self._ctx
        view, nodes, legacy = self.domain_view(cd, children, deleting)
        result = Result()
        if not legacy and not view.host_managed:
            wait, pruned = await self.prune_cliques(cd, view.pods)
            if wait is not None:
                result = Result(requeue_after=wait)
            if pruned:
                # The status this reconcile writes must not show the entries it just removed.
                view, nodes, legacy = self.domain_view(cd, children, deleting)

        memory = ctx.memory_of(cd.metadata.uid)
        missing_fields = ctx.caches.missing_status_fields()
        previous_status = cd.status
        if missing_fields:
            previous_conditions = memory.conditions
        else:
            previous_conditions = list(previous_status.conditions or []) if previous_status else []
        now, grace = ctx.clock.wall(), ctx.settings.daemon_ready_grace_period
        conditions = cond.conditions_for(
            view, cd.metadata.generation or 0, now, previous_conditions, grace
        )
        due = cond.daemons_due(view, now, grace, conditions)
        if due is not None:
            # Look again when a starting daemon outlives its grace period: then it is late.
            due += GRACE_MARGIN_SECONDS
            result = Result(requeue_after=min(due, result.requeue_after or due))
        counts: tuple[int | None, ...] = cond.status_counts(nodes, view.cliques)
        if view.host_managed:
            # Upstream's Ready: admitted and the workload RCT exists (§18). No daemon joins,
            # so the node and clique counts are absent (empty printer columns), not 0.
            workload = children.get(ChildKind.WORKLOAD_CLAIM_TEMPLATE)
            ok = workload is not None and workload.status is cond.ChildStatus.OK
            global_status = c.STATUS_READY if ok else c.STATUS_NOT_READY
            counts = (None, None, None)
        elif view.invalid:
            global_status = c.STATUS_NOT_READY
        else:
            global_status = projection.global_status(nodes, view.num_nodes)
        desired_status: dict[str, Any] = {
            "status": global_status,
            "nodes": [n.to_dict() for n in nodes] or None,
            "conditions": [x.to_dict() for x in conditions],
            "observedGeneration": cd.metadata.generation,
            "nodeCount": counts[0],
            "readyNodeCount": counts[1],
            "cliqueCount": counts[2],
        }
        self._observe_metrics(cd, view, conditions, nodes, desired_status["status"])
        if missing_fields:
            # Writing fields the apiserver prunes would differ from the stored status forever.
            # The CRD itself carries the one CRDOutdated Event (coexistence), not each CD.
            desired_status = {k: desired_status[k] for k in coexistence.UPSTREAM_STATUS_FIELDS}
        stored = dict(obj.get("status") or {})
        if projection.status_equal(stored, desired_status):
            if missing_fields and conditions != previous_conditions:
                # No write carries them, yet their transitions are still news.
                self._emit_transitions(obj, cd, previous_conditions, conditions, nodes)
                memory.conditions = conditions
            return result

        # A verdict a workload or a person waits on (Ready either way) and deletion go out now.
        flips = stored.get("status") != desired_status["status"]
        flips = flips or _ready(previous_conditions) != _ready(conditions)
        hold = None if deleting or flips else self._coalescing(memory)
        if hold is not None:
            # Folded into one write at the window's end; that reconcile recomputes from the
            # caches, so it carries whatever changed meanwhile.
            return Result(requeue_after=min(hold, result.requeue_after or hold))

        patch = {
            "metadata": {"resourceVersion": objects.resource_version(obj)},
            "status": desired_status,
        }
        try:
            written = await ctx.patch_cd(cd, patch, patch_type="merge", subresource="status")
        except ApiError as err:
            if err.is_conflict:
                # Someone (a legacy daemon) wrote in between; the watch event requeues us.
                return Result(requeue=True)
            if err.is_not_found:  # gone without our finalizer; orphan handling takes over
                return Result()
            raise
        ctx.caches.observe_write(COMPUTE_DOMAINS, written)
        self._wrote(memory)
        self._emit_transitions(obj, cd, previous_conditions, conditions, nodes)
        if missing_fields:
            # Only now reported: a held or failed write leaves their transitions to the next.
            memory.conditions = conditions
        elif not projection.status_equal(dict(written.get("status") or {}), desired_status):
            # Just after a CRD upgrade the apiserver may still prune with the old schema for a
            # moment. Nothing else would requeue this CD (the watch shows our own write), so
            # retry with backoff until the fields stick.
            log.info(
                "The apiserver dropped status fields; writing again",
                extra={"computeDomain": objects.object_key(obj)},
            )
            return Result(requeue=True)
        return result

    def _coalescing(self, memory: DomainMemory) -> float | None:
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

    def _wrote(self, memory: DomainMemory) -> None:
        """A status write went out: the next window is twice as long if this write folded held
        changes (they keep coming), up to ``MAX_WINDOW_FACTOR``, else the configured one."""
        base = self._ctx.settings.status_coalesce_window
        window = memory.status_window or base
        grown = min(window * 2, base * MAX_WINDOW_FACTOR)
        memory.status_window = grown if memory.status_held else base
        memory.status_held = False
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
        memory = ctx.memory_of(cd.metadata.uid)
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
            cliques=len(view.cliques),
            global_status=global_status,
            reasons={x.type: x.reason for x in conditions},
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
        warned = self._ctx.memory_of(cd.metadata.uid).warned_once
        for event in transition_events(old_nodes, nodes, before, after, warned):
            self._ctx.recorder.record(obj, event.type, event.reason, event.action, event.note)
            if event.type == WARNING and event.reason in ONCE_PER_DOMAIN:
                warned.add(event.reason)

    async def prune_cliques(
        self, cd: ComputeDomain, pods: Sequence[projection.DaemonPod]
    ) -> tuple[float | None, bool]:
        """Drop clique entries whose node runs no daemon pod of this CD in that clique.

        An entry is pruned only after it stayed stale for the grace period: the pod cache may
        lag a daemon that has just written its entry. Returns when to look again, if needed,
        and whether a clique was written.
        """
        ctx, uid = self._ctx, cd.metadata.uid
        memory = ctx.memory_of(uid)
        now = ctx.clock.now()
        wait: float | None = None
        pruned = False
        seen: set[tuple[str, str]] = set()
        live: dict[str, list[projection.DaemonPod]] = {}  # namespace -> listed once per pass
        for raw in ctx.caches.cliques_of(uid):
            clique = projection.clique_from_dict(raw)
            due = []
            for node_name in projection.stale_clique_entries(clique, pods):
                key = (clique.metadata.name, node_name)
                seen.add(key)
                since = memory.stale_entry_since.setdefault(key, now)
                remaining = ctx.settings.orphan_grace_period - (now - since)
                if remaining <= 0:
                    due.append(node_name)
                else:
                    wait = remaining if wait is None else min(wait, remaining)
            if due:
                due = await self._still_stale(uid, clique, due, memory, live)
            if due:
                body = dict(raw)
                body["daemons"] = [
                    d for d in raw.get("daemons") or [] if d.get("nodeName") not in due
                ]
                try:
                    written = await ctx.client.replace(CLIQUES, body, objects.namespace(raw))
                except ApiError as err:
                    if err.is_conflict or err.is_not_found:
                        return 0.5, pruned
                    raise
                ctx.caches.observe_write(CLIQUES, written)
                pruned = True
                for node_name in due:
                    memory.stale_entry_since.pop((clique.metadata.name, node_name), None)
                log.info(
                    "Pruned stale clique entries",
                    extra={"clique": clique.metadata.name, "nodes": due},
                )
        for key in set(memory.stale_entry_since) - seen:
            del memory.stale_entry_since[key]
        return wait, pruned

    async def _still_stale(
        self,
        uid: str,
        clique: ComputeDomainClique,
        due: list[str],
        memory: DomainMemory,
        live: dict[str, list[projection.DaemonPod]],
    ) -> list[str]:
        """The entries of ``due`` that no daemon pod backs in the apiserver either.

        Removing an entry is destructive (a live daemon does not write it again), and the pod
        cache may lag the clique cache by any amount after a cut watch: so the pods are
        listed live first (once per namespace and pass, in ``live``), and an entry a pod backs
        there starts its grace period over.
        """
        namespace = clique.metadata.namespace or ""
        if namespace not in live:
            listed = await self._ctx.client.list(
                PODS, namespace=namespace, label_selector=f"{c.CD_LABEL}={uid}"
            )
            live[namespace] = [projection.daemon_pod_from_dict(pod) for pod in listed["items"]]
        stale = set(projection.stale_clique_entries(clique, live[namespace]))
        for node_name in set(due) - stale:
            memory.stale_entry_since.pop((clique.metadata.name, node_name), None)
            log.info(
                "Kept a clique entry the pod cache does not back yet: its daemon pod exists",
                extra={"clique": clique.metadata.name, "node": node_name},
            )
        return [node_name for node_name in due if node_name in stale]
