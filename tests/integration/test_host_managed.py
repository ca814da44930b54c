"""hostManaged IMEX (contract §18) end to end: our controller with IMEX_MODE=hostManaged and the
fleet simulator playing the plugin that asks the host's IMEX instead of daemons. The CD turns
Ready, the workload runs, and no DaemonSet, daemon RCT, node label or clique ever exists:
watches record everything of those kinds from before the CD is created to after it is gone."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from computedomain.api import constants as c
from computedomain.api.resources import CLIQUES, COMPUTE_DOMAINS
from computedomain.devcluster.watching import Objects, watch_objects
from computedomain.runtime import resources as r
from computedomain.runtime.client import KubeClient
from computedomain.runtime.objects import condition
from computedomain.runtime.resources import Resource
from tests.integration.e2e_harness import STATEFULSETS, EndToEnd, pod_running, workload

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

HOST_ENV = {"IMEX_MODE": c.IMEX_MODE_HOST, "FEATURE_GATES": f"{c.GATE_HOST_MANAGED_IMEX}=true"}


def recorder(
    kube: KubeClient, res: Resource, seen: set[str], *, describe: Callable[[Any], str], **where: Any
) -> asyncio.Task[Any]:
    """A watch that never ends by itself and adds ``describe(obj)`` of every object it sees."""

    def check(objects: Objects) -> None:
        seen.update(describe(obj) for obj in objects.values())

    return asyncio.create_task(watch_objects(kube, res, check, within=280, what="", **where))


def named(kind: str) -> Callable[[Any], str]:
    return lambda obj: f"{kind} {obj['metadata']['name']}"


def labelled_node(obj: Any) -> str:
    return f"Node {obj['metadata']['name']} labelled {obj['metadata']['labels'][c.CD_LABEL]}"


async def test_host_managed_domain_runs_its_workload_without_daemons(e2e: EndToEnd) -> None:
    # The driver namespace is this test's own: anything of these kinds in it is a defect.
    seen: set[str] = set()
    watches = [
        recorder(e2e.kube, res, seen, describe=named(res.kind), namespace=e2e.driver_namespace)
        for res in (r.DAEMONSETS, r.RESOURCE_CLAIM_TEMPLATES, CLIQUES, r.PODS)
    ]
    watches.append(
        recorder(e2e.kube, r.NODES, seen, describe=labelled_node, label_selector=c.CD_LABEL)
    )
    try:
        await e2e.start_controller(**HOST_ENV)
        await e2e.start_simulator(imex_mode=c.IMEX_MODE_HOST)
        cd = await e2e.create_cd("host", num_nodes=2)
        uid = cd["metadata"]["uid"]
        await e2e.run_workload(workload("workers", 2, racks=["r03"]))

        ready = await e2e.cd_until(
            "host",
            lambda o: (condition(o, "Ready") or {}).get("status") == "True",
            "Ready=True",
        )
        assert ready is not None
        assert ready["status"]["status"] == c.STATUS_READY
        assert condition(ready, "Ready")["reason"] == "HostManagedIMEX"
        assert {x["type"] for x in ready["status"]["conditions"]} == {"Ready", "ChildrenReady"}
        assert "nodeCount" not in ready["status"]
        await e2e.workload_pods(
            "workers",
            lambda pods: len(pods) == 2 and all(pod_running(p) for p in pods.values()),
            "2 Running",
        )
        rct = await e2e.kube.get(r.RESOURCE_CLAIM_TEMPLATES, "imex-channel-0", e2e.namespace)
        config = rct["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]
        assert (config["domainID"], config["allocationMode"]) == (uid, c.ALLOCATION_SINGLE)

        # Deletion: the workload first, then the CD; it leaves nothing behind.
        await e2e.kube.delete(STATEFULSETS, "workers", e2e.namespace)
        await e2e.pods_gone()
        await e2e.kube.delete(COMPUTE_DOMAINS, "host", e2e.namespace)
        await e2e.cd_until("host", lambda o: o is None, "finalized and gone")
        await watch_objects(
            e2e.kube,
            r.RESOURCE_CLAIM_TEMPLATES,
            lambda rcts: not rcts,
            namespace=e2e.namespace,
            what="workload RCT gone",
        )
    finally:
        for task in watches:
            task.cancel()
        await asyncio.gather(*watches, return_exceptions=True)
    assert seen == set(), f"hostManaged made what only driverManaged makes: {sorted(seen)}"
