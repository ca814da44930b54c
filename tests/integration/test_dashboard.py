"""Every query of the Grafana dashboard, against a real Prometheus scraping the controller.

The controller (leader election on, so the leader gauges exist) reconciles three
ComputeDomains while the simulator runs the fleet: one Ready with a workload, one idle
(NotReady, `WaitingForWorkload`), and one stuck deleting (its DaemonSet held by a foreign
finalizer). Then the dashboard's variable queries are resolved through Prometheus's label API,
every panel target is evaluated the way Grafana does (range queries for graphs, instant ones
for tables) with the variables substituted, and the test fails when an expression names a
metric the controller's /metrics does not export (`up` is Prometheus's own) or returns no
series.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio.client import ApiClient
from prometheus_client.parser import text_string_to_metric_families

from computedomain.api import constants as c
from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.devcluster.harness import Controllers
from computedomain.devcluster.watching import watch_object
from computedomain.runtime import resources as r
from computedomain.runtime.client import ApiError, KubeClient
from computedomain.sim.context import SimSettings
from computedomain.sim.faults import DelayRange, FaultSettings
from computedomain.sim.simulator import Simulator
from tests.kit.controllers import (
    CD_LABEL_PATH,
    create_cd,
    stop_after_cleanup,
    wait_children,
    workload_pod,
)
from tests.kit.prometheus import RunningPrometheus, free_fabric_node, wait_ready
from tests.kit.promql import metric_names

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "manifests" / "dashboards" / "computedomain.json"
HOLD = "computedomain.test/hold"
# Series Prometheus makes itself rather than scraping them.
PROMETHEUS_OWN = frozenset({"up", "scrape_duration_seconds", "scrape_samples_scraped"})
# What Grafana substitutes for its built-in variables (the scrape interval here is 1 s).
BUILTINS = {"$__rate_interval": "1m", "$__interval": "5s", "$__range": "5m"}


def load_dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def substitute(expr: str, values: dict[str, str]) -> str:
    for name, value in BUILTINS.items():
        expr = expr.replace(name, value)
    for name, value in values.items():
        expr = expr.replace("${" + name + "}", value).replace("$" + name, value)
    leftover = re.findall(r"\$\{?\w+", expr)
    assert not leftover, f"unknown variables {leftover} in {expr}"
    return expr


async def api(session: aiohttp.ClientSession, url: str, **params: str) -> Any:
    async with session.get(url, params=params) as response:
        body: dict[str, Any] = await response.json()
    assert body["status"] == "success", f"{url} {params}: {body}"
    return body["data"]


async def resolve_variables(
    prom: RunningPrometheus, session: aiohttp.ClientSession, dashboard: dict[str, Any]
) -> dict[str, list[str]]:
    """Each query variable's values, as Grafana gets them (label_values through the label
    API), the earlier variables substituted into the later ones' selectors."""
    resolved: dict[str, list[str]] = {}
    chosen: dict[str, str] = {}
    for variable in dashboard["templating"]["list"]:
        if variable["type"] != "query":
            continue
        match = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", variable["query"])
        assert match, f"variable {variable['name']}: {variable['query']}"
        selector, label = substitute(match.group(1), chosen), match.group(2)
        values = await api(
            session, f"{prom.url}/api/v1/label/{label}/values", **{"match[]": selector}
        )
        resolved[variable["name"]] = values
        chosen[variable["name"]] = (
            variable.get("allValue", ".*")
            if variable.get("includeAll")
            else (values[0] if values else "")
        )
    return resolved


async def test_every_dashboard_query_returns_data_from_exported_metrics(
    prometheus: RunningPrometheus,
    metrics_port: int,
    kube: KubeClient,
    api_client: ApiClient,
    namespace: str,
    driver_namespace: str,
    fleet_nodes: list[str],
    controllers: Controllers,
) -> None:
    simulator = Simulator(
        KubeClient.from_api_client(api_client, field_manager="computedomain-sim"),
        SimSettings(
            driver_namespace=driver_namespace,
            faults=FaultSettings(daemon_delay=DelayRange.fixed(0.2)),
            seed=7,
            recheck_interval=5.0,
        ),
    )
    sim_task = asyncio.create_task(simulator.run())
    node, held = "", ""
    try:
        async with aiohttp.ClientSession() as session:
            await wait_ready(prometheus, session)
            await controllers.start(
                HTTP_ENDPOINT=f"127.0.0.1:{metrics_port}", LEADER_ELECTION_ENABLED="true"
            )
            async with asyncio.timeout(30):
                await simulator.wait_ready()
            node = await free_fabric_node(kube, fleet_nodes)

            await create_cd(kube, namespace, "ready", rct_name="channel", num_nodes=1)
            await kube.create(r.PODS, workload_pod("worker", node, "channel"), namespace)
            await create_cd(kube, namespace, "idle", rct_name="idle-channel")
            going = await create_cd(kube, namespace, "going", rct_name="going-channel")
            await wait_children(kube, going, driver_namespace, rct_name="going-channel")
            held = c.daemon_name(going["metadata"]["uid"])
            hold = [{"op": "add", "path": "/metadata/finalizers/-", "value": HOLD}]
            await kube.patch(r.DAEMONSETS, held, hold, driver_namespace, patch_type="json")
            await kube.delete(COMPUTE_DOMAINS, "going", namespace)
            await watch_object(
                kube,
                COMPUTE_DOMAINS,
                "ready",
                lambda cd: ((cd or {}).get("status") or {}).get("status") == c.STATUS_READY,
                namespace=namespace,
                within=60,
                what="CD Ready",
            )

            where = f'namespace="{namespace}"'
            for promql in (
                f'computedomain_status_condition{{{where}, name="ready", condition="Ready", '
                'status="true"} == 1',
                f'computedomain_status_condition_reason{{{where}, name="idle", condition="Ready", '
                'reason="WaitingForWorkload"}',
                f'computedomain_deletion_started_timestamp_seconds{{{where}, name="going"}}',
                "leader_election_master_status == 1",
            ):
                await prometheus.until_result(session, promql, timeout=60)
            # Every rate() window needs two samples of each series: wait for a second scrape.
            await prometheus.until_result(session, "min(count_over_time(up[1m])) >= 2")

            async with session.get(f"http://127.0.0.1:{metrics_port}/metrics") as response:
                exposition = await response.text()
            exported = {
                sample.name
                for family in text_string_to_metric_families(exposition)
                for sample in family.samples
            }

            dashboard = load_dashboard()
            variables = await resolve_variables(prometheus, session, dashboard)
            assert variables["job"] == ["computedomain-controller"], variables
            assert namespace in variables["namespace"], variables
            assert {"ready", "idle", "going"} <= set(variables["name"]), variables
            values = {"job": "computedomain-controller", "namespace": namespace, "name": ".*"}

            failures: list[str] = []
            evaluated = 0
            end = time.time()
            for panel in dashboard["panels"]:
                for target in panel.get("targets", []):
                    what = f"panel {panel['title']!r} target {target['refId']}"
                    expr = substitute(target["expr"], values)
                    unknown = metric_names(expr) - exported - PROMETHEUS_OWN
                    if unknown:
                        failures.append(f"{what}: metrics not exported: {sorted(unknown)}")
                        continue
                    if target.get("instant"):
                        data = await api(session, f"{prometheus.url}/api/v1/query", query=expr)
                    else:
                        data = await api(
                            session,
                            f"{prometheus.url}/api/v1/query_range",
                            query=expr,
                            start=str(end - 30),
                            end=str(end),
                            step="5",
                        )
                    evaluated += 1
                    if not data["result"]:
                        failures.append(f"{what}: no data for {expr}")
            assert not failures, "\n".join(failures)
            assert evaluated >= 30, evaluated
    finally:
        with contextlib.suppress(ApiError):
            await kube.delete(r.PODS, "worker", namespace)
        if held:
            with contextlib.suppress(ApiError):
                await kube.patch(
                    r.DAEMONSETS,
                    held,
                    {"metadata": {"finalizers": None}},
                    driver_namespace,
                    patch_type="merge",
                )
        await stop_after_cleanup(controllers, kube, namespace)  # the simulator still runs
        sim_task.cancel()
        await asyncio.gather(sim_task, return_exceptions=True)
        if node:
            with contextlib.suppress(ApiError):
                current = await kube.get(r.NODES, node)
                if c.CD_LABEL in (current["metadata"].get("labels") or {}):
                    await kube.patch(
                        r.NODES, node, [{"op": "remove", "path": CD_LABEL_PATH}], patch_type="json"
                    )
