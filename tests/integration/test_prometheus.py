"""A real Prometheus scrapes the in-process controller while the simulator drives a CD to Ready;
PromQL over its HTTP API sees the domain and runtime metrics the dashboard and alerts use.

Prometheus is Debian's package (hack/promtool-test.sh installs it when missing, as root). The
test is skipped, with the reason, only when it cannot be installed; on CI it must run.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from kubernetes_asyncio.client import ApiClient

from computedomain.api import constants as c
from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.devcluster.controlplane import free_port
from computedomain.devcluster.watching import watch_object
from computedomain.runtime import resources as r
from computedomain.runtime.client import ApiError, KubeClient
from computedomain.sim.context import SimSettings
from computedomain.sim.faults import DelayRange, FaultSettings
from computedomain.sim.simulator import Simulator
from tests.kit.controllers import (
    CD_LABEL_PATH,
    WORKLOAD_IMAGE,
    allocated_pools,
    controllers_for,
    create_cd,
    stop_after_cleanup,
)

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def prometheus_binary() -> str:
    """Debian's prometheus, installed through hack/promtool-test.sh when missing."""
    found = shutil.which("prometheus")
    if found is None:
        result = subprocess.run(
            ["bash", str(ROOT / "hack" / "promtool-test.sh")],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        found = shutil.which("prometheus")
        if found is None:
            message = f"Prometheus could not be installed: {result.stderr.strip()[-500:]}"
            if os.environ.get("CI", "").lower() == "true":
                pytest.fail(message)
            pytest.skip(message)
    return found


@dataclass
class RunningPrometheus:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    async def query(self, session: aiohttp.ClientSession, promql: str) -> list[dict[str, Any]]:
        async with session.get(f"{self.url}/api/v1/query", params={"query": promql}) as response:
            body: dict[str, Any] = await response.json()
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    async def until_result(
        self, session: aiohttp.ClientSession, promql: str, timeout: float = 30.0
    ) -> list[dict[str, Any]]:
        """Re-runs the query until it returns a series (Prometheus has no watch to await)."""
        try:
            async with asyncio.timeout(timeout):
                while True:
                    if result := await self.query(session, promql):
                        return result
                    await asyncio.sleep(0.5)
        except TimeoutError:
            targets = await self.targets(session)
            raise AssertionError(
                f"no series for {promql} within {timeout:.0f}s; targets: {targets}"
            ) from None

    async def targets(self, session: aiohttp.ClientSession) -> Any:
        async with session.get(f"{self.url}/api/v1/targets") as response:
            return [
                {k: t.get(k) for k in ("scrapeUrl", "health", "lastError")}
                for t in (await response.json())["data"]["activeTargets"]
            ]


@pytest.fixture
def metrics_port() -> int:
    return free_port()


@pytest.fixture
def prometheus(metrics_port: int, tmp_path: Path) -> Iterator[RunningPrometheus]:
    binary = prometheus_binary()
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {
                "job_name": "computedomain-controller",
                "scrape_interval": "1s",
                "scrape_timeout": "900ms",
                "metrics_path": "/metrics",
                "static_configs": [{"targets": [f"127.0.0.1:{metrics_port}"]}],
            }
        ],
    }
    config_file = tmp_path / "prometheus.yml"
    config_file.write_text(yaml.safe_dump(config))
    web_port = free_port()
    log = tmp_path / "prometheus.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                binary,
                f"--config.file={config_file}",
                f"--storage.tsdb.path={tmp_path / 'data'}",
                f"--web.listen-address=127.0.0.1:{web_port}",
                "--storage.tsdb.retention.time=1h",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        yield RunningPrometheus(f"http://127.0.0.1:{web_port}", process, log)
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


async def wait_ready(prom: RunningPrometheus, session: aiohttp.ClientSession) -> None:
    async with asyncio.timeout(60):
        while True:
            if prom.process.poll() is not None:
                raise AssertionError(f"prometheus exited: {prom.log.read_text()[-2000:]}")
            with contextlib.suppress(aiohttp.ClientError):
                async with session.get(f"{prom.url}/-/ready") as response:
                    if response.status == 200:
                        return
            await asyncio.sleep(0.2)


async def free_fabric_node(kube: KubeClient, fleet_nodes: list[str]) -> str:
    busy = await allocated_pools(kube)
    nodes = {n["metadata"]["name"]: n for n in (await kube.list(r.NODES))["items"]}
    fabric = [n for n in fleet_nodes if nodes[n]["metadata"]["labels"].get(c.GPU_CLIQUE_NODE_LABEL)]
    # From the middle of the fleet: other modules start at its ends.
    for name in fabric[len(fabric) // 3 :] + fabric[: len(fabric) // 3]:
        if name not in busy and c.CD_LABEL not in nodes[name]["metadata"]["labels"]:
            return name
    raise AssertionError("no free fabric node left in the test fleet")


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
