"""Workloads for the lab: StatefulSets of pods that each consume a ComputeDomain's channel
claim, one per node, pinned to racks or named nodes (the tests, the benchmark's soak)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from computedomain.runtime.resources import Resource
from computedomain.sim.fleet import RACK_LABEL

WORKLOAD_IMAGE = "registry.k8s.io/pause:3.10"
WORKLOAD_LABEL = "e2e.computedomain.dev/workload"
STATEFULSETS = Resource("apps", "v1", "statefulsets", "StatefulSet", namespaced=True)


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
