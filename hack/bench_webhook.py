"""What the placement webhook costs (``hack/bench.sh --webhook-cost``), A/B in one run: the
same pods created with the webhook off (before) and on, each round against a fresh controller
process of its own.

A round: CDS ComputeDomains annotated for placement (numNodes NUM_NODES) in a namespace of its
own, the controller started (webhook on: serving 127.0.0.1 over TLS, a
MutatingWebhookConfiguration calling it by URL for that namespace, its CA written), settled;
then PODS_PER_CD pods per CD created one after the other, each using its CD's channel claim.
Each CREATE is timed as the client sees it (the apiserver's round trip, the webhook's call
within it); with the webhook on, its own histogram
``computedomain_placement_admission_duration_seconds`` is read from the controller's metrics.
The controller's RSS (settled before the pods, and after them) and its CPU time while the
pods are created are taken from /proc. The first pod of each CD waits for the clique's
decision to be written on the CD; the others are answered from the decision kept.

The pods select no node (a label no node has): they stay Pending, so the scheduler, kwok and
the claims' allocation add no load that differs between the rounds; admission is what is
measured. Rounds alternate off, on, off, on... on a noisy machine, so compare the ratios.
"""

from __future__ import annotations

import asyncio
import math
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench_process import metric_total, scrape, stop
from bench_scenarios import bounded
from measures import now, proc_cpu_s, summary

from computedomain.api import constants as c
from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.config import SETTINGS, environ
from computedomain.devcluster.cluster import ensure_namespace
from computedomain.devcluster.controlplane import free_port
from computedomain.devcluster.harness import compute_domain
from computedomain.devcluster.placement import (
    ca_bundle_written,
    webhook_configuration,
    webhook_environ,
    webhook_url,
)
from computedomain.devcluster.processes import rss_mb
from computedomain.devcluster.watching import watch_objects
from computedomain.devcluster.workloads import WORKLOAD_IMAGE
from computedomain.domain.placement import PLACEMENT_OPT_IN
from computedomain.runtime.client import ApiError, KubeClient
from computedomain.runtime.resources import (
    MUTATING_WEBHOOK_CONFIGURATIONS,
    NAMESPACES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    SECRETS,
    SERVICE_ACCOUNTS,
    Resource,
)

CDS = 20
NUM_NODES = 4
PODS_PER_CD = 6
HISTOGRAM = "computedomain_placement_admission_duration_seconds"
NO_NODE_LABEL = "bench.computedomain.dev/no-node"
CERTIFICATE_SECRET = str(next(s.default for s in SETTINGS if s.env == "PLACEMENT_WEBHOOK_SECRET"))


def pod(name: str, template: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {NO_NODE_LABEL: "true"},
            "resourceClaims": [{"name": "imex", "resourceClaimTemplateName": template}],
            "containers": [
                {"name": "worker", "image": WORKLOAD_IMAGE,
                 "resources": {"claims": [{"name": "imex"}]}}
            ],
            "terminationGracePeriodSeconds": 0,
        },
    }  # fmt: skip


def histogram_quantile(text: str, name: str, q: float) -> float | None:
    """As Prometheus' histogram_quantile over one scrape: linear within the bucket."""
    buckets: list[tuple[float, float]] = []
    for line in text.splitlines():
        if not line.startswith(f"{name}_bucket{{"):
            continue
        le = line.split('le="', 1)[1].split('"', 1)[0]
        buckets.append((math.inf if le == "+Inf" else float(le), float(line.rsplit(" ", 1)[1])))
    buckets.sort()
    if not buckets or buckets[-1][1] == 0:
        return None
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for upper, count in buckets:
        if count >= rank:
            if math.isinf(upper):
                return lower
            return lower + (upper - lower) * (rank - below) / max(count - below, 1e-9)
        lower, below = upper, count
    return None


@dataclass
class WebhookCost:
    client: KubeClient
    kubeconfig: Path
    driver_namespace: str
    overrides: Mapping[str, str]
    rounds: int
    say: Callable[[str], None]

    async def run(self) -> dict[str, Any]:
        rounds = [
            await self.round(index, webhook=index % 2 == 1) for index in range(2 * self.rounds)
        ]
        off = [r for r in rounds if not r["webhook"]]
        on = [r for r in rounds if r["webhook"]]

        def pooled(group: list[dict[str, Any]]) -> dict[str, float]:
            return summary([s for r in group for s in r.pop("create_s")])

        def mean(group: list[dict[str, Any]], key: str) -> float:
            return float(sum(r[key] for r in group)) / len(group)

        figures: dict[str, Any] = {
            "cds_per_round": CDS,
            "pods_per_round": CDS * PODS_PER_CD,
            "num_nodes": NUM_NODES,
            "create_s": {"off": pooled(off), "on": pooled(on)},
            "rounds": rounds,
        }
        ratios = {
            f"create_{p}": figures["create_s"]["on"][p] / figures["create_s"]["off"][p]
            for p in ("p50", "p99")
        }
        for key in ("rss_settled_mb", "rss_after_pods_mb", "cpu_during_pods_s"):
            # Without the webhook the controller does nothing for these pods (0.00 s): no ratio.
            if mean(off, key) >= 0.01:
                ratios[key] = mean(on, key) / mean(off, key)
        figures["ratio_on_to_off"] = {k: round(v, 2) for k, v in ratios.items()}
        figures["extra_rss_mb"] = round(
            mean(on, "rss_after_pods_mb") - mean(off, "rss_after_pods_mb"), 1
        )
        figures["extra_cpu_s_per_pod"] = round(
            (mean(on, "cpu_during_pods_s") - mean(off, "cpu_during_pods_s")) / (CDS * PODS_PER_CD),
            5,
        )
        return figures

    async def round(self, index: int, webhook: bool) -> dict[str, Any]:
        variant = "on" if webhook else "off"
        namespace = f"bench-webhook-{index}-{variant}"
        configuration = f"bench-placement-{index}"
        await ensure_namespace(self.client, namespace)
        await watch_objects(
            self.client, SERVICE_ACCOUNTS, lambda sas: "default" in sas, namespace=namespace,
            within=60, what="the namespace's default ServiceAccount",
        )  # fmt: skip
        names = [f"job{i:02d}" for i in range(CDS)]
        for name in names:
            body = compute_domain(name, rct_name=name, num_nodes=NUM_NODES)
            body["metadata"]["annotations"] = {PLACEMENT_OPT_IN: "true"}
            await self.client.create(COMPUTE_DOMAINS, body, namespace)
        webhook_port, metrics_port = free_port(), free_port()
        extra: dict[str, str] = {}
        made_certificate = False
        if webhook:
            await self.client.create(
                MUTATING_WEBHOOK_CONFIGURATIONS,
                webhook_configuration(configuration, webhook_url(webhook_port), namespace),
            )
            # The replica that makes the certificate imports cryptography to do it; one that
            # finds it in the Secret (a later round's, every replica after the first) does not.
            made_certificate = not await self.exists(SECRETS, CERTIFICATE_SECRET)
            extra = webhook_environ(webhook_port, configuration)
        child, log_path = await self.spawn(metrics_port, extra, f"webhook-{variant}")
        try:
            # Settled: the CDs' claim templates made, then no reconcile for 3 s.
            await watch_objects(
                self.client, RESOURCE_CLAIM_TEMPLATES, lambda rcts: set(names) <= set(rcts),
                namespace=namespace, within=120, what=f"the {CDS} CDs' claim templates",
            )  # fmt: skip
            if webhook:
                await ca_bundle_written(self.client, configuration, within=60)
            await self.settle(metrics_port)
            rss_settled, cpu_before = rss_mb(child.pid), proc_cpu_s(child.pid)
            create_s: list[float] = []
            begin = now()
            for name in names:
                for i in range(PODS_PER_CD):
                    sent = now()
                    await self.client.create(PODS, pod(f"{name}-{i}", name), namespace)
                    create_s.append(now() - sent)
            window = now() - begin
            cpu = proc_cpu_s(child.pid) - cpu_before
            await self.settle(metrics_port)
            text = await scrape(self.client, metrics_port)
            result: dict[str, Any] = {
                "round": index,
                "webhook": webhook,
                "create_s": create_s,
                "create_p50_s": summary(create_s)["p50"],
                "create_p99_s": summary(create_s)["p99"],
                "window_s": round(window, 2),
                "rss_settled_mb": round(rss_settled, 1),
                "rss_after_pods_mb": round(rss_mb(child.pid), 1),
                "cpu_during_pods_s": round(cpu, 3),
            }
            if webhook:
                result["made_certificate"] = made_certificate
                placed = metric_total(
                    "\n".join(line for line in text.splitlines() if 'outcome="placed"' in line),
                    "computedomain_placement_admissions_total",
                )
                count = metric_total(text, f"{HISTOGRAM}_count")
                result["webhook_histogram"] = {
                    "count": count,
                    "placed": placed,
                    "mean_s": metric_total(text, f"{HISTOGRAM}_sum") / max(count, 1.0),
                    "p50_s": histogram_quantile(text, HISTOGRAM, 0.50),
                    "p99_s": histogram_quantile(text, HISTOGRAM, 0.99),
                }
            self.say(
                f"webhook {variant} (round {index}): {len(create_s)} pod CREATEs p50 "
                f"{result['create_p50_s'] * 1000:.1f} ms p99 {result['create_p99_s'] * 1000:.1f} "
                f"ms; controller RSS {result['rss_settled_mb']:.0f} → "
                f"{result['rss_after_pods_mb']:.0f} MiB, CPU {cpu:.2f} s in {window:.1f} s"
            )
            await self.clean_up(namespace, names)
        finally:
            if webhook:
                try:
                    await self.client.delete(MUTATING_WEBHOOK_CONFIGURATIONS, configuration)
                except ApiError as err:
                    if not err.is_not_found:
                        raise
            await stop(child)
            log_path.unlink(missing_ok=True)
        return result

    async def exists(self, res: Resource, name: str) -> bool:
        try:
            await self.client.get(res, name, self.driver_namespace)
        except ApiError as err:
            if err.is_not_found:
                return False
            raise
        return True

    async def spawn(
        self, metrics_port: int, extra: Mapping[str, str], name: str
    ) -> tuple[asyncio.subprocess.Process, Path]:
        env = {
            **os.environ,
            **environ(
                image_name=c.NVIDIA_DRIVER_IMAGE,
                namespace=self.driver_namespace,
                kubeconfig=str(self.kubeconfig),
                leader_election_enabled="false",
                http_endpoint=f"127.0.0.1:{metrics_port}",
                probe_address="127.0.0.1:0",
            ),
            **self.overrides,
            **extra,
        }
        log_path = Path(tempfile.gettempdir()) / f"computedomain-bench-{name}-{os.getpid()}.log"
        with log_path.open("wb") as out:
            child = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "computedomain", stdout=out, stderr=subprocess.STDOUT, env=env
            )
        return child, log_path

    async def settle(self, metrics_port: int, quiet: float = 3.0, within: float = 120.0) -> None:
        """Until the controller has reconciled and then not for ``quiet`` seconds."""
        begin, last, since = now(), -1.0, now()
        while now() - begin < within:
            total = metric_total(
                await scrape(self.client, metrics_port), "controller_runtime_reconcile_total"
            )
            if total != last:
                last, since = total, now()
            elif total > 0 and now() - since >= quiet:
                return
            await asyncio.sleep(0.5)
        raise SystemExit(f"the controller did not settle within {within:.0f}s")

    async def clean_up(self, namespace: str, names: list[str]) -> None:
        """Pods, then CDs (finalized by this round's controller, still running), then the
        namespace: the next round's controller must find only its own CDs."""
        await bounded(
            self.client.delete(PODS, f"{name}-{i}", namespace)
            for name in names
            for i in range(PODS_PER_CD)
        )
        for name in names:
            await self.client.delete(COMPUTE_DOMAINS, name, namespace)
        await watch_objects(
            self.client, COMPUTE_DOMAINS, lambda cds: not cds, namespace=namespace,
            within=120, what="the round's CDs finalized",
        )  # fmt: skip
        await self.client.delete(NAMESPACES, namespace)
