"""A real Prometheus (Debian's package) for the tests that scrape the controller: the
binary, a running instance scraping one port, and waiting for it to be ready.

Installed through hack/promtool-test.sh when missing; the tests using it are skipped, with the
reason, only when it cannot be installed, and on CI they must run.
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

from computedomain.api import constants as c
from computedomain.devcluster.controlplane import free_port
from computedomain.runtime import resources as r
from computedomain.runtime.client import KubeClient
from tests.kit.controllers import allocated_pools

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


@contextlib.contextmanager
def running_prometheus(metrics_port: int, tmp_path: Path) -> Iterator[RunningPrometheus]:
    """Prometheus scraping 127.0.0.1:``metrics_port`` every second, state under ``tmp_path``."""
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
