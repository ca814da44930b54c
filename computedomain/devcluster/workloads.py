"""Workloads for the lab: StatefulSets of pods that each consume a ComputeDomain's channel
claim, one per node, pinned to racks or named nodes (the tests, the benchmark), and ``Jobs``,
the pool of CDs with such workloads that the benchmark's churns create and delete."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.devcluster.harness import compute_domain
from computedomain.runtime import objects
from computedomain.runtime.client import ApiError, KubeClient
from computedomain.runtime.resources import STATEFULSETS as STATEFULSETS
from computedomain.sim.fleet import RACK_LABEL

WORKLOAD_IMAGE = "registry.k8s.io/pause:3.10"
WORKLOAD_LABEL = "e2e.computedomain.dev/workload"


def workload(
    name: str,
    replicas: int,
    *,
    rct_name: str = "imex-channel-0",
    racks: Sequence[str] = (),
    hostnames: Sequence[str] = (),
    spread_over_racks: bool = False,
) -> dict[str, Any]:
    """A StatefulSet whose pods each consume one channel claim, at most one pod per node."""
    expressions = []
    if racks:
        expressions.append({"key": RACK_LABEL, "operator": "In", "values": list(racks)})
    if hostnames:
        expressions.append(
            {"key": "kubernetes.io/hostname", "operator": "In", "values": list(hostnames)}
        )
    pod_spec: dict[str, Any] = {
        "affinity": {
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {
                            "matchExpressions": [{"key": WORKLOAD_LABEL, "operator": "Exists"}]
                        },
                        "topologyKey": "kubernetes.io/hostname",
                    }
                ]
            },
        },
        "containers": [
            {"name": "worker", "image": WORKLOAD_IMAGE, "resources": {"claims": [{"name": "imex"}]}}
        ],
        "resourceClaims": [{"name": "imex", "resourceClaimTemplateName": rct_name}],
        "terminationGracePeriodSeconds": 0,
    }
    if expressions:
        pod_spec["affinity"]["nodeAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": expressions}]
            }
        }
    if spread_over_racks:
        pod_spec["topologySpreadConstraints"] = [
            {
                "maxSkew": 1,
                "topologyKey": RACK_LABEL,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {WORKLOAD_LABEL: name}},
            }
        ]
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "serviceName": name,
            "replicas": replicas,
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {WORKLOAD_LABEL: name}},
            "template": {"metadata": {"labels": {WORKLOAD_LABEL: name}}, "spec": pod_spec},
        },
    }


@dataclass
class Jobs:
    """ComputeDomains with a workload each, on nodes of one rack no other job of this pool
    holds (the benchmark's churns). Writes ride out an apiserver restart: they are retried
    through 5xx, 429 and refused connections for up to ``patience`` seconds, and a create that
    meets AlreadyExists or a delete that meets NotFound counts as done."""

    client: KubeClient
    namespace: str
    nodes: Sequence[Mapping[str, Any]]
    rng: random.Random
    patience: float = 120.0
    free: dict[str, list[str]] = field(default_factory=dict)  # rack -> free node names
    held: dict[str, tuple[str, list[str]]] = field(default_factory=dict)  # CD -> rack, nodes

    def __post_init__(self) -> None:
        for node in self.nodes:
            rack = objects.labels(node).get(RACK_LABEL)
            if rack and rack != "none":
                self.free.setdefault(rack, []).append(objects.name(node))

    async def create(self, name: str, size: int) -> bool:
        """A CD ``name`` with a ``size``-node workload; False when no rack has that many free."""
        racks = [rack for rack, free in self.free.items() if len(free) >= size]
        if not racks:
            return False
        rack = self.rng.choice(sorted(racks))
        taken = [self.free[rack].pop() for _ in range(size)]
        self.held[name] = (rack, taken)
        cd = compute_domain(name, f"{name}-channel", 0)
        body = workload(name, size, rct_name=f"{name}-channel", hostnames=taken)
        await self._persist(lambda: self.client.create(COMPUTE_DOMAINS, cd, self.namespace))
        await self._persist(lambda: self.client.create(STATEFULSETS, body, self.namespace))
        return True

    async def delete(self, name: str) -> None:
        """The workload and the CD (which its controller then finalizes); the nodes are free."""
        rack, taken = self.held.pop(name)
        for res in (STATEFULSETS, COMPUTE_DOMAINS):
            await self._persist(
                lambda res=res: self.client.delete(  # type: ignore[misc]
                    res, name, self.namespace, propagation_policy="Background"
                )
            )
        self.free[rack].extend(taken)

    async def _persist(self, call: Callable[[], Awaitable[Any]]) -> None:
        deadline = time.monotonic() + self.patience
        while True:
            try:
                await call()
                return
            except ApiError as error:
                if error.is_already_exists or error.is_not_found:
                    return
                if time.monotonic() > deadline or not (
                    error.status >= 500 or error.is_too_many_requests
                ):
                    raise
            except (OSError, TimeoutError, aiohttp.ClientError):
                if time.monotonic() > deadline:
                    raise
            await asyncio.sleep(0.5)  # the apiserver has no watch to offer while it is down
