"""What NVIDIA's kubelet plugin would decide for a pod, as pure functions of cached objects.

The I/O side (``plugin.py``) gathers the pod, its claims, its node, the ComputeDomain and the
clique from informer caches, asks these functions what to do, does it, and asks again on the
next relevant event.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from computedomain.api import constants as c
from computedomain.api.claims import DriverConfig, driver_configs
from computedomain.runtime import objects

from .entries import CLIQUE_KEY, LEGACY_KEY, find_entry


@dataclass(frozen=True)
class ClaimRef:
    """A pod's claim: its name in the pod spec and the ResourceClaim object it resolved to."""

    pod_claim_name: str
    claim_name: str | None  # None until the resourceclaim controller reports it


def pod_claim_refs(pod: Mapping[str, Any]) -> list[ClaimRef]:
    """Resolve ``spec.resourceClaims`` to claim names.

    Template claims are found through ``status.resourceClaimStatuses``.
    """
    generated = {
        str(item.get("name")): item.get("resourceClaimName")
        for item in (pod.get("status") or {}).get("resourceClaimStatuses") or []
    }
    refs: list[ClaimRef] = []
    for item in (pod.get("spec") or {}).get("resourceClaims") or []:
        name = str(item.get("name", ""))
        direct = item.get("resourceClaimName")
        claim_name = direct if direct else generated.get(name)
        refs.append(ClaimRef(name, str(claim_name) if claim_name else None))
    return refs


def compute_domain_configs(claim: Mapping[str, Any]) -> list[DriverConfig]:
    """The compute-domain opaque configs of an allocated claim (empty if none or unallocated)."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return driver_configs(allocation.get("devices") or {})


def allocated_drivers(claim: Mapping[str, Any]) -> set[str]:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    return {str(result.get("driver", "")) for result in results}


def is_allocated(claim: Mapping[str, Any]) -> bool:
    return bool((claim.get("status") or {}).get("allocation"))


class PodRole(Enum):
    PENDING = "pending"  # a claim is not known or not allocated yet: ask again later
    GENERIC = "generic"  # no compute-domain device: start at once
    WORKLOAD = "workload"  # a channel claim
    DAEMON = "daemon"  # a daemon claim
    INVALID = "invalid"  # a compute-domain device NodePrepareResources would refuse


@dataclass(frozen=True)
class Classification:
    role: PodRole
    domain_id: str = ""
    claim_namespace: str = ""
    message: str = ""


def classify_pod(
    pod: Mapping[str, Any], claims: Mapping[str, Mapping[str, Any] | None]
) -> Classification:
    """Decide which side of the driver a pod is for, from its allocated claims.

    ``claims`` maps claim names (in the pod's namespace) to cached claims, or None if unseen.
    """
    namespace = objects.namespace(pod) or ""
    workload: DriverConfig | None = None
    daemon: DriverConfig | None = None
    for ref in pod_claim_refs(pod):
        if ref.claim_name is None:
            return Classification(
                PodRole.PENDING, message=f"claim {ref.pod_claim_name} not created"
            )
        claim = claims.get(ref.claim_name)
        if claim is None or not is_allocated(claim):
            return Classification(PodRole.PENDING, message=f"claim {ref.claim_name} not allocated")
        if c.DRIVER_NAME not in allocated_drivers(claim):
            continue
        configs = compute_domain_configs(claim)
        if not configs:
            return Classification(
                PodRole.INVALID,
                claim_namespace=namespace,
                message=f"claim {ref.claim_name}: {c.DRIVER_NAME} device without a config",
            )
        for config in configs:
            if not config.domain_id:
                return Classification(
                    PodRole.INVALID,
                    claim_namespace=namespace,
                    message=f"claim {ref.claim_name}: {config.kind} without domainID",
                )
            if config.kind == c.CHANNEL_CONFIG_KIND:
                workload = config
            elif config.kind == c.DAEMON_CONFIG_KIND:
                daemon = config
            else:
                return Classification(
                    PodRole.INVALID,
                    claim_namespace=namespace,
                    message=f"claim {ref.claim_name}: unknown config kind {config.kind!r}",
                )
    if daemon is not None:
        return Classification(PodRole.DAEMON, daemon.domain_id, namespace)
    if workload is not None:
        return Classification(PodRole.WORKLOAD, workload.domain_id, namespace)
    return Classification(PodRole.GENERIC)


def node_clique_id(node: Mapping[str, Any] | None) -> str:
    """The node's clique from its clique label; ``""`` means no NVLink fabric."""
    return str(objects.labels(node).get(c.GPU_CLIQUE_NODE_LABEL, ""))


def node_ready_in_domain(
    node_name: str,
    clique_id: str,
    clique: Mapping[str, Any] | None,
    cd: Mapping[str, Any] | None,
) -> bool:
    """The plugin's readiness check for its node (contract §9).

    The node's entry in clique ``<cdUID>.<cliqueID>`` decides. Without a clique (non-fabric
    nodes, or daemons speaking the legacy protocol) the plugin falls back to
    ``CD.status.nodes``.
    """
    if clique_id and clique is not None:
        entry = find_entry(clique.get("daemons"), CLIQUE_KEY, node_name)
        if entry is not None and entry.get("status") == c.STATUS_READY:
            return True
    nodes: Sequence[Mapping[str, Any]] = ((cd or {}).get("status") or {}).get("nodes") or []
    entry = find_entry(nodes, LEGACY_KEY, node_name)
    return entry is not None and entry.get("status") == c.STATUS_READY


class Action(Enum):
    WAIT_FOR_DOMAIN = "wait-for-domain"  # the CD is not (yet) in the cache
    FAIL = "fail"  # permanent: report on the pod, never release
    WAIT_FOR_NODE = "wait-for-node"  # the node serves another CD
    LABEL_NODE = "label-node"
    WAIT_FOR_DAEMON = "wait-for-daemon"
    RELEASE = "release"


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: str = ""
    message: str = ""


def decide_workload(
    *,
    node_name: str,
    node: Mapping[str, Any] | None,
    domain_id: str,
    claim_namespace: str,
    cd: Mapping[str, Any] | None,
    clique: Mapping[str, Any] | None,
    host_managed: bool = False,
) -> Decision:
    """The next step of NodePrepareResources for a channel claim.

    With host-managed IMEX (contract §18) the plugin asks the host's nvidia-imex through its
    socket (``nvidia-imex-ctl -q``) instead of waiting for a daemon: simulated as always
    healthy, so the claim is prepared at once, and no node is labelled (no DaemonSet to place).
    """
    if cd is None:
        return Decision(
            Action.WAIT_FOR_DOMAIN, "ComputeDomainNotFound", f"ComputeDomain {domain_id} not found"
        )
    cd_namespace = objects.namespace(cd) or ""
    if cd_namespace != claim_namespace:
        return Decision(
            Action.FAIL,
            "FailedPrepareDynamicResources",
            f"the ResourceClaim's namespace ({claim_namespace}) differs from the "
            f"ComputeDomain's namespace ({cd_namespace})",
        )
    if node is None:
        return Decision(Action.WAIT_FOR_NODE, "NodeNotFound", f"node {node_name} not found")
    if host_managed:
        return Decision(Action.RELEASE)
    current = objects.labels(node).get(c.CD_LABEL)
    if current is not None and current != domain_id:
        return Decision(
            Action.WAIT_FOR_NODE,
            "NodeInUse",
            f"node {node_name} is labelled for ComputeDomain {current}",
        )
    if current is None:
        return Decision(Action.LABEL_NODE)
    if not node_ready_in_domain(node_name, node_clique_id(node), clique, cd):
        return Decision(
            Action.WAIT_FOR_DAEMON, "NodeNotReady", "current node not ready in ComputeDomain"
        )
    return Decision(Action.RELEASE)
