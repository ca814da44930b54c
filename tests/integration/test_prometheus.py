"""A real Prometheus scrapes the in-process controller while the simulator drives a CD to Ready;
PromQL over its HTTP API sees the domain and runtime metrics the dashboard and alerts use.

Prometheus is Debian's package (hack/promtool-test.sh installs it when missing, as root). The
test is skipped, with the reason, only when it cannot be installed; on CI it must run.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

import aiohttp
import pytest
from kubernetes_asyncio.client import ApiClient

from computedomain.api import constants as c
from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.devcluster.watching import watch_object
from computedomain.runtime import resources as r
from computedomain.runtime.client import ApiError, KubeClient
from computedomain.sim.context import SimSettings
from computedomain.sim.faults import DelayRange, FaultSettings
from computedomain.sim.simulator import Simulator
from tests.kit.controllers import (
    CD_LABEL_PATH,
    WORKLOAD_IMAGE,
    controllers_for,
    create_cd,
    stop_after_cleanup,
)
from tests.kit.prometheus import RunningPrometheus, free_fabric_node, wait_ready

pytestmark = pytest.mark.integration


async def test_prometheus_scrapes_domain_and_runtime_metrics(
    prometheus: RunningPrometheus,
    metrics_port: int,
    kube: KubeClient,
    api_client: ApiClient,
    kubeconfig_path: Path,
    namespace: str,
    driver_namespace: str,
    fleet_nodes: list[str],
) -> None:
    factory = controllers_for(kubeconfig_path, driver_namespace)
    simulator = Simulator(
        KubeClient.from_api_client(api_client, field_manager="computedomain-sim"),
        SimSettings(
            driver_namespace=driver_namespace,
            faults=FaultSettings(daemon_delay=DelayRange.fixed(0.2)),
            seed=5,
            recheck_interval=5.0,
        ),
    )
    sim_task = asyncio.create_task(simulator.run())
    node = ""
    try:
        async with aiohttp.ClientSession() as session:
            await wait_ready(prometheus, session)
            await factory.start(HTTP_ENDPOINT=f"127.0.0.1:{metrics_port}")
            async with asyncio.timeout(30):
                await simulator.wait_ready()
            node = await free_fabric_node(kube, fleet_nodes)
            await create_cd(kube, namespace, "scraped", rct_name="channel", num_nodes=1)
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "worker"},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": node},
                    "resourceClaims": [{"name": "channel", "resourceClaimTemplateName": "channel"}],
                    "containers": [
                        {
                            "name": "work",
                            "image": WORKLOAD_IMAGE,
                            "resources": {"claims": [{"name": "channel"}]},
                        }
                    ],
                },
            }
            await kube.create(r.PODS, pod, namespace)
            await watch_object(
                kube,
                COMPUTE_DOMAINS,
                "scraped",
                lambda cd: ((cd or {}).get("status") or {}).get("status") == c.STATUS_READY,
                namespace=namespace,
                within=60,
                what="CD Ready",
            )

            ready = await prometheus.until_result(
                session,
                'computedomain_status_condition{condition="Ready",status="true",'
                f'namespace="{namespace}",name="scraped"}} == 1',
            )
            assert ready[0]["metric"]["job"] == "computedomain-controller"
            assert ready[0]["value"][1] == "1"
            reconciles = await prometheus.until_result(
                session, 'sum(controller_runtime_reconcile_total{controller="computedomain"})'
            )
            assert float(reconciles[0]["value"][1]) >= 1
            info = await prometheus.until_result(
                session, 'nvidia_dra_compute_domain_info{status="Ready"} >= 1'
            )
            assert info[0]["metric"]["status"] == "Ready"
            up = await prometheus.query(session, 'up{job="computedomain-controller"}')
            assert [series["value"][1] for series in up] == ["1"]
    finally:
        with contextlib.suppress(ApiError):
            await kube.delete(r.PODS, "worker", namespace)
        await stop_after_cleanup(factory, kube, namespace)
        sim_task.cancel()
        await asyncio.gather(sim_task, return_exceptions=True)
        if node:
            with contextlib.suppress(ApiError):
                current = await kube.get(r.NODES, node)
                if c.CD_LABEL in (current["metadata"].get("labels") or {}):
                    await kube.patch(
                        r.NODES, node, [{"op": "remove", "path": CD_LABEL_PATH}], patch_type="json"
                    )
