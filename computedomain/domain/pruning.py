"""Stale clique entries: an entry whose node runs no daemon pod of its domain any more (a lost
node, a daemon pod deleted with its node) would keep that node in ``status.nodes`` forever, since
NVIDIA's daemon removes only its own entry as it stops. The live reconcile of a domain whose
daemons use the cliques protocol removes such entries, after a grace period and a live check.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from computedomain.api import constants as c
from computedomain.api.resources import CLIQUES
from computedomain.api.v1beta1 import ComputeDomain, ComputeDomainClique
from computedomain.domain import projection
from computedomain.domain.context import ReconcileContext
from computedomain.domain.memory import PruningMemory
from computedomain.runtime import objects
from computedomain.runtime.client import ApiError
from computedomain.runtime.resources import PODS

log = logging.getLogger(__name__)

# A clique replaced under us (a daemon wrote its entry) is looked at again this soon.
CONFLICT_RETRY_SECONDS = 0.5


class CliquePruner:
    def __init__(self, ctx: ReconcileContext) -> None:
        self._ctx = ctx

    async def prune(self, cd: ComputeDomain, pods: Sequence[projection.DaemonPod]) -> float | None:
        """Drop clique entries whose node runs no daemon pod of this CD in that clique.

        An entry is pruned only after it stayed stale for the grace period: the pod cache may
        lag a daemon that has just written its entry. Returns when to look again, if needed.
        A clique written here is in the cache before the status is projected (read-your-writes),
        so the status of the same reconcile no longer shows the entries removed.
        """
        ctx, uid = self._ctx, cd.metadata.uid
        memory = ctx.memory_of(uid).pruning
        now = ctx.clock.now()
        wait: float | None = None
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
                        return CONFLICT_RETRY_SECONDS
                    raise
                ctx.caches.observe_write(CLIQUES, written)
                for node_name in due:
                    memory.stale_entry_since.pop((clique.metadata.name, node_name), None)
                log.info(
                    "Pruned stale clique entries",
                    extra={"clique": clique.metadata.name, "nodes": due},
                )
        for key in set(memory.stale_entry_since) - seen:
            del memory.stale_entry_since[key]
        return wait

    async def _still_stale(
        self,
        uid: str,
        clique: ComputeDomainClique,
        due: list[str],
        memory: PruningMemory,
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
