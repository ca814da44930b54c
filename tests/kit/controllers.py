"""Our controller as the integration tests run it, and the objects they give it."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

from computedomain.api import constants as c
from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.config import environ
from computedomain.devcluster.harness import Controllers, RunningController, compute_domain
from computedomain.devcluster.watching import watch_object
from computedomain.devcluster.workloads import WORKLOAD_IMAGE as WORKLOAD_IMAGE
from computedomain.runtime import objects, patches
from computedomain.runtime import resources as r
from computedomain.runtime.client import ApiError, KubeClient

# Short timers, so orphans and deletions finish within a test.
TEST_ENV = environ(orphan_grace_period="1s", daemon_pod_wait_timeout="20s")
# JSON pointer to the CD label on a Node (for label patches in tests).
CD_LABEL_PATH = patches.pointer("metadata", "labels", c.CD_LABEL)


def controllers_for(kubeconfig: Path, driver_namespace: str) -> Controllers:
    """Replicas with the test timers; the caller stops them (``stop_all``)."""
    return Controllers(kubeconfig, driver_namespace, env=TEST_ENV)


async def create_cd(
    client: KubeClient,
    namespace: str,
    name: str,
    rct_name: str = "imex-channel-0",
    num_nodes: int = 0,
) -> dict[str, Any]:
    body = compute_domain(name, rct_name, num_nodes)
    return await client.create(COMPUTE_DOMAINS, body, namespace)


def workload_pod(name: str, node: str, template: str) -> dict[str, Any]:
    """A pod on ``node`` that consumes one channel claim from ``template``."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "resourceClaims": [{"name": "channel", "resourceClaimTemplateName": template}],
            "containers": [
                {
                    "name": "work",
                    "image": WORKLOAD_IMAGE,
                    "resources": {"claims": [{"name": "channel"}]},
                }
            ],
        },
    }


async def delete_cds(kube: KubeClient, namespace: str, within: float = 60.0) -> None:
    """Delete every CD in ``namespace`` and wait until each is gone (a running controller
    finalizes them), so no CD outlives its test."""
    names = [objects.name(cd) for cd in (await kube.list(COMPUTE_DOMAINS, namespace))["items"]]
    for name in names:
        with contextlib.suppress(ApiError):  # already gone
            await kube.delete(COMPUTE_DOMAINS, name, namespace)
    for name in names:
        await watch_object(
            kube, COMPUTE_DOMAINS, name, lambda o: o is None, namespace=namespace, within=within
        )


async def stop_after_cleanup(controllers: Controllers, kube: KubeClient, namespace: str) -> None:
    """End of a test: let a running replica finalize the test's CDs, then stop every replica."""
    if controllers.running:
        await delete_cds(kube, namespace)
    await controllers.stop_all()


async def wait_children(
    kube: KubeClient,
    cd: dict[str, Any],
    driver_namespace: str,
    rct_name: str = "imex-channel-0",
    within: float = 30.0,
) -> None:
    """Until the CD's DaemonSet, daemon RCT and workload RCT all exist."""
    daemon = c.daemon_name(cd["metadata"]["uid"])
    for res, ns, child in (
        (r.DAEMONSETS, driver_namespace, daemon),
        (r.RESOURCE_CLAIM_TEMPLATES, driver_namespace, daemon),
        (r.RESOURCE_CLAIM_TEMPLATES, cd["metadata"]["namespace"], rct_name),
    ):
        await watch_object(
            kube,
            res,
            child,
            lambda o: o is not None,
            namespace=ns,
            within=within,
            what=f"{res.kind} {child}",
        )


async def allocated_pools(kube: KubeClient) -> set[str]:
    """Nodes (DRA pools) with an allocated device: the fleet is shared between tests."""
    claims = await kube.list(r.RESOURCE_CLAIMS)
    return {
        result["pool"]
        for claim in claims["items"]
        for result in (
            ((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}
        ).get("results")
        or []
    }


def clique_gauges(controller: RunningController) -> dict[str, dict[str, int]]:
    """computedomain_clique_nodes as exported: clique -> state -> nodes."""
    counts: dict[str, dict[str, int]] = {}
    for metric in controller.registry.collect():
        for sample in metric.samples:
            if sample.name == "computedomain_clique_nodes":
                clique, state = sample.labels["clique"], sample.labels["state"]
                counts.setdefault(clique, {})[state] = int(sample.value)
    return counts
