"""The fake compute-domain kubelet plugin: NodePrepareResources as seen from the API.

For each pod with DRA claims on a simulated node the plugin decides, from cached objects,
whether the pod may start (``decisions.py``), labels the node for the pod's ComputeDomain,
holds the pod until its node's IMEX daemon is Ready, then writes the pod's status as the
kubelet would. With host-managed IMEX (``SimSettings.imex_mode``) the host's IMEX is taken as
healthy: no label, no wait. Not emulated: CDI specs, the checkpoint, channel device nodes.
"""

from __future__ import annotations

import logging
from typing import Any

from computedomain.api import constants as c
from computedomain.runtime import patches
from computedomain.runtime.client import ApiError
from computedomain.runtime.objects import pod_ready
from computedomain.runtime.resources import NODES, PODS

from .context import SimContext
from .decisions import Action, Classification, decide_workload, node_clique_id
from .podstatus import (
    ContainerPhase,
    PodState,
    needs_ready_resync,
    node_internal_ip,
    pod_status,
)
from .signals import domain_key, node_key, pod_key

log = logging.getLogger("computedomain.sim.plugin")


class FakeKubeletPlugin:
    def __init__(self, ctx: SimContext) -> None:
        self.ctx = ctx
        # node -> {pod UID: CD UID} for prepared channel claims: the node label stays while any
        # of them remains (one unprepare per claim, the last one removes the label).
        self.prepared: dict[str, dict[str, str]] = {}
        # UIDs of pods started (written Running and Ready): their readiness is ours to keep.
        self.released: set[str] = set()

    async def start_generic(self, pod: dict[str, Any]) -> None:
        """A pod whose claims belong to other drivers: the generic DRA path starts it at once."""
        if not pod_ready(pod):
            await self.write_running(pod)
        self.released.add(pod["metadata"]["uid"])

    async def resync_status(self, key: str) -> bool:
        """Write a started pod Ready again if someone else marked it not Ready; True if it
        wrote. Not Ready is left alone while its node is not Ready (``needs_ready_resync``)."""
        pod = self.ctx.pod(key)
        if pod is None or pod["metadata"].get("uid") not in self.released:
            return False
        if not needs_ready_resync(pod, self.ctx.node(pod["spec"]["nodeName"]), wanted_ready=True):
            return False
        log.info("Re-asserting pod Ready", extra={"pod": key, "node": pod["spec"]["nodeName"]})
        await self.write_running(pod)
        return True

    async def prepare_channel(self, key: str, classification: Classification) -> None:
        """Hold the pod until its node is Ready in its ComputeDomain, then start it."""
        ctx = self.ctx
        domain_id = classification.domain_id
        last_reason = ""
        while True:
            pod = ctx.pod(key)
            if pod is None:
                return
            metadata, spec = pod["metadata"], pod["spec"]
            node_name = spec["nodeName"]
            listen = [pod_key(metadata["namespace"], metadata["name"]), node_key(node_name)]
            with ctx.signals.listen([*listen, domain_key(domain_id)]) as waiter:
                node = ctx.node(node_name)
                cd = ctx.compute_domain(domain_id)
                clique_id = node_clique_id(node)
                clique = (
                    ctx.clique(ctx.settings.driver_namespace, c.clique_name(domain_id, clique_id))
                    if clique_id
                    else None
                )
                decision = decide_workload(
                    node_name=node_name,
                    node=node,
                    domain_id=domain_id,
                    claim_namespace=classification.claim_namespace,
                    cd=cd,
                    clique=clique,
                    host_managed=ctx.settings.host_managed,
                )
                labelled = not ctx.settings.host_managed
                if labelled and decision.action in (Action.WAIT_FOR_DAEMON, Action.RELEASE):
                    self.prepared.setdefault(node_name, {})[metadata["uid"]] = domain_id
                if decision.reason != last_reason and decision.reason:
                    log.info(
                        "Holding pod",
                        extra={"pod": key, "node": node_name, "reason": decision.reason},
                    )
                last_reason = decision.reason
                if decision.action is Action.FAIL:
                    await ctx.report(pod, "Warning", decision.reason, decision.message)
                    return  # permanent: the kubelet would retry, but the answer never changes
                if decision.action is Action.RELEASE:
                    if not pod_ready(pod):
                        await self.write_running(pod)
                    self.released.add(metadata["uid"])
                    return
                if decision.action is Action.LABEL_NODE:
                    assert node is not None
                    await self._label_node(node, domain_id)
                    continue
                await waiter.wait(ctx.settings.recheck_interval)

    async def unprepare(self, pod: dict[str, Any]) -> None:
        """The pod is gone: drop the node label if no prepared claim of that CD remains."""
        node_name = (pod.get("spec") or {}).get("nodeName")
        uid = pod["metadata"].get("uid", "")
        self.released.discard(uid)
        users = self.prepared.get(node_name or "")
        if not node_name or users is None or uid not in users:
            return
        domain_id = users.pop(uid)
        if domain_id in users.values():
            return
        if not users:
            del self.prepared[node_name]
        patch = patches.remove_label_if(c.CD_LABEL, domain_id)
        try:
            updated = await self.ctx.write(
                lambda: self.ctx.client.patch(NODES, node_name, patch, patch_type="json")
            )
        except ApiError as error:
            # 422: the label already names another CD (or is gone); 404: the node is gone.
            if error.is_invalid or error.is_not_found:
                return
            raise
        self.ctx.observe("nodes", updated)

    async def _label_node(self, node: dict[str, Any], domain_id: str) -> None:
        """Set the CD label, conditional on the node not having changed since we read it."""
        metadata = node["metadata"]
        patch = {
            "metadata": {
                "resourceVersion": metadata.get("resourceVersion"),
                "labels": {c.CD_LABEL: domain_id},
            }
        }
        try:
            updated = await self.ctx.write(
                lambda: self.ctx.client.patch(NODES, metadata["name"], patch)
            )
        except ApiError as error:
            if error.is_conflict:
                # Somebody else wrote the node: fetch it and decide again.
                fresh = await self.ctx.client.get(NODES, metadata["name"])
                self.ctx.observe("nodes", fresh)
                return
            if error.is_not_found:
                return
            raise
        self.ctx.observe("nodes", updated)
        log.info("Labelled node", extra={"node": metadata["name"], "computeDomain": domain_id})

    async def write_running(self, pod: dict[str, Any]) -> None:
        metadata = pod["metadata"]
        ip = self.ctx.ipam.get(metadata["uid"])
        current = (pod.get("status") or {}).get("podIP")
        if ip is None and current and self.ctx.ipam.adopt(metadata["uid"], current):
            ip = current
        if ip is None:
            ip = self.ctx.ipam.allocate(metadata["uid"])
        state = PodState(
            pod_ip=ip,
            host_ip=node_internal_ip(self.ctx.node(pod["spec"]["nodeName"])),
            phase=ContainerPhase.READY,
        )
        status = pod_status(pod, state, self.ctx.clock.wall())
        try:
            updated = await self.ctx.write(
                lambda: self.ctx.client.patch(
                    PODS,
                    metadata["name"],
                    {"status": status},
                    metadata["namespace"],
                    subresource="status",
                )
            )
        except ApiError as error:
            if error.is_not_found:
                return
            raise
        self.ctx.observe("pods", updated)
        log.info(
            "Started pod", extra={"pod": f"{metadata['namespace']}/{metadata['name']}", "podIP": ip}
        )
