"""Benchmark of the ComputeDomain controller on a real local control plane.

Starts etcd, kube-apiserver, KCM, scheduler and kwok with a simulated GB200 fleet (64 NVL72
racks = 1,152 nodes by default), runs our controller in this process, and measures:

1. projection latency: a ComputeDomainClique entry (full Update, NotReady→Ready, the way
   NVIDIA's daemon writes it) until the CD's ``status.nodes`` shows it, each change isolated
   (spaced by the status coalescing window);
2. burst: N CDs created at once until each has its three children and conditions, and the
   controller's API writes per CD; then all N deleted at once until they and their DaemonSets
   and daemon RCTs are gone;
3. end-to-end with the fleet simulator: M CDs x K StatefulSet workers until every CD is Ready,
   and the 409 conflicts the controller saw;
4. idle: controller writes over a quiet window while every kwok node heartbeats;
5. memory: process RSS before the controller starts and after it synced the fleet (and CDs);
   with ``--preload-cds N``, N CDs exist before it starts and start-up is timed until each has
   its conditions.

Everything runs in one event loop on a shared machine, so the figures are for comparison
within one run and against upstream's design limits, not absolute. Usage: ``hack/bench.sh
[--quick] [--racks N] [--cds N] ...``; prints a table and writes ``bench-results/<time>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from measures import ObjectWatch, now, proc_cpu_s, summary, watch_until
from soak import Soak
from upgrade import UpgradeUnderLoad
from versus import Versus
from versus import report as versus_report

from computedomain.api import constants as c
from computedomain.api.resources import CLIQUES, COMPUTE_DOMAINS
from computedomain.app import REPORTING_CONTROLLER, ControllerProcess
from computedomain.config import SETTINGS, ConfigError, environ, parse_settings
from computedomain.devcluster.clients import api_client_from_kubeconfig
from computedomain.devcluster.cluster import ensure_namespace, populate
from computedomain.devcluster.controlplane import ControlPlane, free_port
from computedomain.devcluster.harness import (
    WRITE_METHODS,
    RunningController,
    compute_domain,
    start_controller,
)
from computedomain.devcluster.processes import rss_mb
from computedomain.devcluster.workloads import STATEFULSETS, workload
from computedomain.observability.logging import configure_logging
from computedomain.runtime import resources as r
from computedomain.runtime.client import KubeClient
from computedomain.runtime.objects import condition, condition_true, labels, pod_ready
from computedomain.runtime.resources import Resource
from computedomain.sim.context import SimSettings
from computedomain.sim.faults import FaultSettings
from computedomain.sim.fleet import RACK_LABEL, FleetSpec, build_nodes
from computedomain.sim.simulator import Simulator

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO_ROOT / "bench-results"
PRELOAD_NAMESPACE = "bench-preload"
DRIVER_NAMESPACE = "nvidia-dra-driver-gpu"
PROJECTION_TARGET_S = 0.250
BURST_WRITES_TARGET = 5.0

# Upstream v0.4.0 figures (contract §17); no upstream binary runs here, so these are context.
UPSTREAM = {
    "status_poll_s": 2.0,
    "client_qps": 5.0,
    "client_burst": 10,
    "workers": 1,
    "job_256_pods_start_s": 8 * 60.0,
    "writes_per_cd_before_daemons": 5,
}

log = logging.getLogger("bench")
Obj = dict[str, Any]


# -- small helpers --------------------------------------------------------------------------------


def settled_rss_mb() -> float:
    gc.collect()
    return rss_mb()


async def bounded(calls: Iterable[Awaitable[Any]], limit: int = 64) -> None:
    """Await every call, at most ``limit`` at a time (a burst as many clients would send it)."""
    slots = asyncio.Semaphore(limit)

    async def one(call: Awaitable[Any]) -> None:
        async with slots:
            await call

    await asyncio.gather(*(one(call) for call in calls))


async def seconds_since(begin: float, tasks: Mapping[str, Awaitable[float]]) -> dict[str, float]:
    """Each watch's moment of success (``watch_until``), as seconds after ``begin``."""
    moments = await asyncio.gather(*tasks.values())
    return {key: moment - begin for key, moment in zip(tasks, moments, strict=True)}


def cd_ready(cd: Obj | None) -> bool:
    status = (cd or {}).get("status") or {}
    return status.get("status") == c.STATUS_READY and condition_true(cd, "Ready")


# -- what the controller writes, by resource ----------------------------------------------------


class WriteTally:
    """Counts the controller's write calls by verb and resource (the REST metric has neither).

    Wraps the bound write methods of the controller's own KubeClient instance; measurement only.
    """

    VERBS = ("create", "replace", "patch", "delete")

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def install(self, *clients: KubeClient) -> None:
        """The controller's client and the Event writer's (a copy with its own budget)."""
        for client in clients:
            for verb in self.VERBS:
                setattr(client, verb, self._wrap(verb, getattr(client, verb)))

    def _wrap(self, verb: str, call: Callable[..., Awaitable[Any]]) -> Callable[..., Any]:
        async def counted(res: Resource, *args: Any, **kwargs: Any) -> Any:
            sub = kwargs.get("subresource")
            self.counts[f"{verb} {res.plural}{'/' + sub if sub else ''}"] += 1
            return await call(res, *args, **kwargs)

        return counted

    def snapshot(self) -> Counter[str]:
        return Counter(self.counts)


# -- controller metrics --------------------------------------------------------------------------


@dataclass
class ControllerUnderTest:
    """The harness's in-process replica, plus what the benchmark reads of it."""

    running: RunningController
    tally: WriteTally

    @property
    def process(self) -> ControllerProcess:
        return self.running.process

    def writes_since(self, before: Counter[str], per: int) -> dict[str, float]:
        delta = self.tally.snapshot()
        delta.subtract(before)
        return {key: round(v / per, 2) for key, v in sorted(delta.items()) if v}

    def writes(self) -> float:
        return self.running.writes()

    def writes_by_method(self) -> dict[str, float]:
        return {
            method: self.running.requests(lambda sample, m=method: sample.get("method") == m)
            for method in sorted(WRITE_METHODS)
        }

    def reads(self) -> float:
        return self.running.requests(lambda sample: sample.get("method") == "GET")

    def conflicts(self) -> float:
        return self.running.requests(lambda sample: sample.get("code") == "409")

    def reconciles(self) -> float:
        return self.running.counter("controller_runtime_reconcile")

    def cache_sizes(self) -> dict[str, dict[str, int]]:
        """Objects and their JSON bytes per informer: what the RSS growth is made of."""
        sizes: dict[str, dict[str, int]] = {}
        for informer in self.process.caches.all:
            items = informer.store.list()
            name = getattr(informer, "name", None) or informer.__class__.__name__
            entry = sizes.setdefault(str(name), {"objects": 0, "json_bytes": 0})
            entry["objects"] += len(items)
            entry["json_bytes"] += sum(len(json.dumps(o, separators=(",", ":"))) for o in items)
        return sizes

    async def settle(self, quiet: float = 3.0, limit: float = 90.0) -> float:
        """Wait until the controller sent no write for `quiet` seconds; returns seconds waited.

        Reads the in-process counter (no API polling); bounded by `limit`.
        """
        begin = now()
        last, since = self.writes(), now()
        while now() - since < quiet and now() - begin < limit:
            await asyncio.sleep(0.25)
            current = self.writes()
            if current != last:
                last, since = current, now()
        return now() - begin

    async def shutdown(self) -> None:
        await self.running.shutdown()


async def start_measured_controller(
    kubeconfig: Path, overrides: Mapping[str, str]
) -> ControllerUnderTest:
    tally = WriteTally()
    running = await start_controller(
        kubeconfig,
        DRIVER_NAMESPACE,
        # Clique entries of the latency phase have no daemon pod behind them; keep them.
        {**environ(orphan_grace_period="30m"), **overrides},
        wait_synced=300,
        log_verbosity=None,
        on_ready=lambda process: tally.install(process.client, process.recorder.client),
    )
    return ControllerUnderTest(running, tally)


# -- objects -------------------------------------------------------------------------------------


# -- phases --------------------------------------------------------------------------------------


@dataclass
class Bench:
    args: argparse.Namespace
    client: KubeClient
    kubeconfig: Path
    nodes: list[Obj]
    results: dict[str, Any] = field(default_factory=dict)
    controller: ControllerUnderTest | None = None

    @property
    def ctl(self) -> ControllerUnderTest:
        assert self.controller is not None
        return self.controller

    def say(self, text: str) -> None:
        _say(text)

    async def preload(self) -> None:
        """``--preload-cds`` CDs, created before the controller starts: the start-up meets them."""
        n = self.args.preload_cds
        if not n:
            return
        await ensure_namespace(self.client, PRELOAD_NAMESPACE)
        begin = now()
        await bounded(
            self.client.create(
                COMPUTE_DOMAINS, compute_domain(name, f"{name}-channel", 0), PRELOAD_NAMESPACE
            )
            for name in (f"preload-{i:04d}" for i in range(n))
        )
        self.say(f"preload: {n} CDs created in {now() - begin:.1f}s, before the controller")

    async def memory_and_start(self) -> None:
        baseline = settled_rss_mb()
        begin = now()
        preloaded = self.args.preload_cds
        reconciled = None
        if preloaded:  # start-up ends when every CD met at start has its conditions
            names = [f"preload-{i:04d}" for i in range(preloaded)]
            reconciled = asyncio.create_task(
                watch_until(
                    self.client,
                    COMPUTE_DOMAINS,
                    lambda objects: all(condition(objects.get(n), "Ready") for n in names),
                    namespace=PRELOAD_NAMESPACE,
                    within=900,
                    what="preloaded CDs' conditions",
                )
            )
        self.controller = await start_measured_controller(self.kubeconfig, self.args.overrides)
        synced = now() - begin
        all_reconciled = (await reconciled) - begin if reconciled is not None else None
        after_sync = settled_rss_mb()
        nodes = len(self.nodes)
        self.results["memory"] = {
            "rss_before_controller_mb": round(baseline, 1),
            "rss_after_fleet_sync_mb": round(after_sync, 1),
            "controller_fleet_mb": round(after_sync - baseline, 1),
            "per_node_kb": round((after_sync - baseline) * 1024 / nodes, 2),
            "nodes": nodes,
            "cache_sync_s": round(synced, 2),
            "cds_present_at_start": preloaded,
            "start_to_all_present_cds_reconciled_s": (
                round(all_reconciled, 2) if all_reconciled is not None else None
            ),
        }
        self.say(
            f"controller synced {nodes} nodes in {synced:.1f}s; RSS {baseline:.0f} → "
            f"{after_sync:.0f} MiB"
            + (f"; {preloaded} CDs present reconciled in {all_reconciled:.1f}s"
               if all_reconciled is not None else "")
        )  # fmt: skip

    async def burst(self) -> None:
        n = self.args.cds
        ns = "bench-burst"
        await ensure_namespace(self.client, ns)
        await self.ctl.settle(quiet=2.0, limit=30)
        writes_before, by_method_before = self.ctl.writes(), self.ctl.writes_by_method()
        conflicts_before, tally_before = self.ctl.conflicts(), self.ctl.tally.snapshot()
        uids: set[str] = set()
        names = [f"burst-{i:04d}" for i in range(n)]

        def has_children(target: str) -> Callable[[dict[str, Obj]], bool]:
            def check(objects: dict[str, Obj]) -> bool:
                if len(uids) < n:
                    return False
                seen = {
                    labels(o).get(c.CD_LABEL)
                    for o in objects.values()
                    if target == "" or labels(o).get(c.TARGET_LABEL) == target
                }
                return uids <= seen

            return check

        def cds_with_conditions(objects: dict[str, Obj]) -> bool:
            return all(bool(condition(objects.get(name), "Ready")) for name in names)

        def workload_rcts(objects: dict[str, Obj]) -> bool:
            return all(f"{name}-channel" in objects for name in names)

        requests_before, cpu_before = self.ctl.running.requests(), time.process_time()
        begin = now()
        waiters = {
            **self._driver_children(has_children(""), has_children(c.TARGET_DAEMON), ""),
            "workload_rcts": watch_until(
                self.client, r.RESOURCE_CLAIM_TEMPLATES, workload_rcts, namespace=ns, what="RCTs"
            ),
            "conditions": watch_until(
                self.client, COMPUTE_DOMAINS, cds_with_conditions, namespace=ns, what="conditions"
            ),
        }
        tasks = {key: asyncio.create_task(w) for key, w in waiters.items()}

        async def create(name: str) -> None:
            cd = await self.client.create(
                COMPUTE_DOMAINS, compute_domain(name, f"{name}-channel", 0), ns
            )
            uids.add(cd["metadata"]["uid"])

        await bounded(create(name) for name in names)
        created = now() - begin
        done = await seconds_since(begin, tasks)
        complete = max(done.values())
        writes_at_complete = self.ctl.writes() - writes_before
        requests_at_complete = self.ctl.running.requests() - requests_before
        cpu_at_complete = time.process_time() - cpu_before
        settle = await self.ctl.settle(quiet=3.0)
        writes = self.ctl.writes() - writes_before
        by_method = {
            m: (v - by_method_before[m]) / n for m, v in self.ctl.writes_by_method().items()
        }
        events, reasons = await self._count_events([ns, DRIVER_NAMESPACE])
        self.results["burst"] = {
            "cds": n,
            "creates_sent_s": round(created, 2),
            "all_children_and_conditions_s": round(complete, 2),
            "per_kind_s": {k: round(v, 2) for k, v in done.items()},
            "all_children_s": round(max(v for k, v in done.items() if k != "conditions"), 2),
            "cds_per_s": round(n / complete, 1),
            "writes_per_cd": round(writes / n, 2),
            "writes_per_cd_at_complete": round(writes_at_complete / n, 2),
            "writes_per_cd_by_method": {m: round(v, 2) for m, v in by_method.items()},
            "writes_per_cd_by_call": self.ctl.writes_since(tally_before, n),
            "event_objects_per_cd": round(events / n, 2),
            "event_reasons_per_cd": {k: round(v / n, 2) for k, v in sorted(reasons.items())},
            "writes_per_cd_excluding_events": round((writes - events) / n, 2),
            "conflicts_409": self.ctl.conflicts() - conflicts_before,
            "settle_s": round(settle, 1),
            "requests_per_s_until_complete": round(requests_at_complete / complete, 1),
            # this process: controller, watches of the benchmark; no simulator in this phase
            "process_cpu_s_until_complete": round(cpu_at_complete, 2),
        }
        self.say(
            f"burst: {n} CDs have their children in "
            f"{self.results['burst']['all_children_s']:.1f}s, complete in {complete:.1f}s, "
            f"{writes / n:.2f} writes/CD "
            f"({(writes - events) / n:.2f} without events)"
        )
        after = settled_rss_mb()
        memory = self.results["memory"]
        memory["rss_after_burst_mb"] = round(after, 1)
        memory["burst_cds_mb"] = round(after - memory["rss_after_fleet_sync_mb"], 1)
        memory["per_cd_kb"] = round((after - memory["rss_after_fleet_sync_mb"]) * 1024 / n, 1)
        memory["caches"] = self.ctl.cache_sizes()
        await self.delete_burst(ns, names, uids)

    def _driver_children(
        self,
        daemonsets: Callable[[dict[str, Obj]], bool],
        daemon_rcts: Callable[[dict[str, Obj]], bool],
        what: str,
    ) -> dict[str, Coroutine[Any, Any, float]]:
        """Watches of the CDs' DaemonSets and daemon RCTs in the driver namespace, until each
        check holds."""

        def until(
            res: Resource, check: Callable[[dict[str, Obj]], bool], kind: str
        ) -> Coroutine[Any, Any, float]:
            return watch_until(
                self.client,
                res,
                check,
                namespace=DRIVER_NAMESPACE,
                label_selector=c.CD_LABEL,
                what=kind + what,
            )

        return {
            "daemonsets": until(r.DAEMONSETS, daemonsets, "DaemonSets"),
            "daemon_rcts": until(r.RESOURCE_CLAIM_TEMPLATES, daemon_rcts, "daemon RCTs"),
        }

    async def delete_burst(self, ns: str, names: Sequence[str], uids: set[str]) -> None:
        """Delete every CD of the burst at once: until the CDs are gone (finalizer released)
        and until no DaemonSet or daemon RCT of theirs is left."""
        n = len(names)
        writes_before, requests_before = self.ctl.writes(), self.ctl.running.requests()

        def none_of_theirs(objects: dict[str, Obj]) -> bool:
            return not any(labels(o).get(c.CD_LABEL) in uids for o in objects.values())

        begin = now()
        waiters = {
            "cds": watch_until(
                self.client,
                COMPUTE_DOMAINS,
                lambda objects: not any(name in objects for name in names),
                namespace=ns,
                what="deleted CDs",
            ),
            **self._driver_children(none_of_theirs, none_of_theirs, " of deleted CDs"),
        }
        tasks = {key: asyncio.create_task(w) for key, w in waiters.items()}
        await bounded(self.client.delete(COMPUTE_DOMAINS, name, ns) for name in names)
        sent = now() - begin
        done = await seconds_since(begin, tasks)
        complete = max(done.values())
        requests = self.ctl.running.requests() - requests_before
        await self.ctl.settle(quiet=3.0)
        self.results["deletion"] = {
            "cds": n,
            "deletes_sent_s": round(sent, 2),
            "per_kind_s": {k: round(v, 2) for k, v in done.items()},
            "all_gone_s": round(complete, 2),
            "cds_per_s": round(n / complete, 1),
            "writes_per_cd": round((self.ctl.writes() - writes_before) / n, 2),
            "requests_per_s_until_gone": round(requests / complete, 1),
        }
        self.say(f"deletion: {n} CDs and their children gone in {complete:.1f}s")

    async def _count_events(self, namespaces: Sequence[str]) -> tuple[int, Counter[str]]:
        """Event objects our controller wrote, and how many by reason."""
        reasons: Counter[str] = Counter()
        for ns in namespaces:
            listing = await self.client.list(r.EVENTS, ns)
            for event in listing["items"]:
                if event.get("reportingController") == REPORTING_CONTROLLER:
                    reasons[str(event.get("reason"))] += 1
        return sum(reasons.values()), reasons

    async def projection(self) -> None:
        changes = self.args.changes
        ns = "bench-latency"
        await ensure_namespace(self.client, ns)
        entries_needed = math.ceil(changes / 2)
        fabric = [n for n in self.nodes if labels(n).get(c.GPU_CLIQUE_NODE_LABEL)]
        chosen = fabric[:entries_needed]
        cd = await self.client.create(
            COMPUTE_DOMAINS, compute_domain("latency", "latency-channel", len(chosen)), ns
        )
        uid = cd["metadata"]["uid"]
        await watch_until(
            self.client,
            COMPUTE_DOMAINS,
            lambda objs: bool(condition(objs.get("latency"), "Ready")),
            namespace=ns,
            what="latency CD status",
        )
        await self.ctl.settle(quiet=1.0, limit=30)
        cliques: dict[str, Obj] = {}
        latencies: list[float] = []
        put_latencies: list[float] = []
        # Status writes are coalesced per CD: a change within the window after a write waits
        # for the window's end. Each change here is isolated (the first after a quiet window),
        # as a clique flip is in production; a bring-up's burst is the e2e phase. Nothing to
        # watch for a quiet window: it is time passing.
        spacing = self.ctl.process.settings.reconciler.status_coalesce_window
        spacing = spacing + 0.05 if spacing > 0 else 0.0
        async with ObjectWatch(self.client, COMPUTE_DOMAINS, "latency", ns) as cd_watch:
            for i, node in enumerate(chosen):
                node_name = node["metadata"]["name"]
                clique_id = labels(node)[c.GPU_CLIQUE_NODE_LABEL]
                for status in (c.STATUS_NOT_READY, c.STATUS_READY):
                    if len(latencies) >= changes:
                        break
                    clique = cliques.get(clique_id)
                    entry = {
                        "nodeName": node_name,
                        "ipAddress": f"10.222.{i // 250}.{i % 250 + 1}",
                        "cliqueID": clique_id,
                        "index": sum(
                            1
                            for d in (clique or {}).get("daemons") or []
                            if d["nodeName"] != node_name
                        ),
                        "status": status,
                    }
                    sent = now()
                    if clique is None:
                        body = {
                            "apiVersion": c.API_VERSION,
                            "kind": c.CLIQUE_KIND,
                            "metadata": {
                                "name": c.clique_name(uid, clique_id),
                                "labels": {c.CD_LABEL: uid, c.CLIQUE_ID_LABEL: clique_id},
                            },
                            "daemons": [entry],
                        }
                        written = await self.client.create(CLIQUES, body, DRIVER_NAMESPACE)
                    else:
                        others = [d for d in clique["daemons"] if d["nodeName"] != node_name]
                        if status == c.STATUS_READY:
                            entry["index"] = next(
                                d["index"] for d in clique["daemons"] if d["nodeName"] == node_name
                            )
                        clique["daemons"] = [*others, entry]
                        written = await self.client.replace(CLIQUES, clique, DRIVER_NAMESPACE)
                    put_latencies.append(now() - sent)
                    cliques[clique_id] = written

                    def shows(obj: Obj | None, name: str = node_name, want: str = status) -> bool:
                        return any(
                            n.get("name") == name and n.get("status") == want
                            for n in ((obj or {}).get("status") or {}).get("nodes") or []
                        )

                    seen = await cd_watch.wait(shows, within=30)
                    latencies.append(seen - sent)
                    if spacing:
                        await asyncio.sleep(spacing)
        within = sum(1 for v in latencies if v <= PROJECTION_TARGET_S)
        self.results["projection"] = {
            "changes": len(latencies),
            "latency_s": {k: round(v, 4) if k != "n" else v for k, v in summary(latencies).items()},
            "clique_write_s": {
                k: round(v, 4) if k != "n" else v for k, v in summary(put_latencies).items()
            },
            "within_target": within,
            "target_s": PROJECTION_TARGET_S,
            "spacing_s": spacing,
        }
        stats = summary(latencies)
        self.say(
            f"projection: p50 {stats['p50'] * 1000:.0f} ms, p95 {stats['p95'] * 1000:.0f} ms, "
            f"max {stats['max'] * 1000:.0f} ms over {len(latencies)} changes"
        )

    async def end_to_end(self, simulator_client: KubeClient) -> None:
        m: int = self.args.jobs
        k: int = self.args.workers
        ns = "bench-e2e"
        await ensure_namespace(self.client, ns)
        settings = SimSettings(
            driver_namespace=DRIVER_NAMESPACE,
            faults=FaultSettings(),
            seed=self.args.seed,
        )
        simulator = Simulator(simulator_client, settings)
        sim_task = asyncio.create_task(simulator.run())
        await asyncio.wait_for(simulator.wait_ready(), timeout=120)
        await self.ctl.settle(quiet=2.0, limit=30)
        writes_before, conflicts_before = self.ctl.writes(), self.ctl.conflicts()
        tally_before = self.ctl.tally.snapshot()
        # Racks 0-1 hold the latency phase's clique entries; jobs take whole racks from 2 on.
        racks = sorted({labels(n).get(RACK_LABEL, "") for n in self.nodes} - {"", "none"})
        job_racks = racks[2 : 2 + m]
        if len(job_racks) < m:
            raise SystemExit(f"--jobs {m} needs {m + 2} racks, the fleet has {len(racks)}")
        names = [f"job-{i:02d}" for i in range(m)]
        ready_at: dict[str, float] = {}
        pods_ready_at: list[float] = []

        def all_cds_ready(objects: dict[str, Obj]) -> bool:
            for name in names:
                if name not in ready_at and cd_ready(objects.get(name)):
                    ready_at[name] = now()
            return len(ready_at) == m

        def all_pods_ready(objects: dict[str, Obj]) -> bool:
            ready = sum(1 for p in objects.values() if pod_ready(p))
            if ready == m * k and not pods_ready_at:
                pods_ready_at.append(now())
            return ready == m * k

        begin = now()
        cds_task = asyncio.create_task(
            watch_until(
                self.client,
                COMPUTE_DOMAINS,
                all_cds_ready,
                namespace=ns,
                within=self.args.e2e_timeout,
                what="all CDs Ready",
            )
        )
        pods_task = asyncio.create_task(
            watch_until(
                self.client,
                r.PODS,
                all_pods_ready,
                namespace=ns,
                within=self.args.e2e_timeout,
                what="all workers Ready",
            )
        )

        async def create_job(name: str, rack: str) -> None:
            await self.client.create(
                COMPUTE_DOMAINS, compute_domain(name, f"{name}-channel", k), ns
            )
            await self.client.create(
                STATEFULSETS, workload(name, k, rct_name=f"{name}-channel", racks=[rack]), ns
            )

        try:
            await asyncio.gather(
                *(create_job(n, rk) for n, rk in zip(names, job_racks, strict=True))
            )
            try:
                cds_done, pods_done = await asyncio.gather(cds_task, pods_task)
            except TimeoutError as error:
                # Record what did happen and go on, so the run still writes its JSON.
                cds_task.cancel()
                pods_task.cancel()
                self.results["end_to_end"] = {
                    "cds": m,
                    "workers_per_cd": k,
                    "timed_out": str(error),
                    "cds_ready": len(ready_at),
                    "conflicts_409": self.ctl.conflicts() - conflicts_before,
                }
                self.say(f"e2e: TIMED OUT ({error}); {len(ready_at)}/{m} CDs Ready")
                await self.idle()
                return
            per_cd = [t - begin for t in ready_at.values()]
            writes_e2e = self.ctl.writes() - writes_before
            conflicts = self.ctl.conflicts() - conflicts_before
            settle = await self.ctl.settle(quiet=3.0)
            self.results["end_to_end"] = {
                "cds": m,
                "workers_per_cd": k,
                "pods": m * k,
                "daemon_startup_delay_s": [
                    settings.faults.daemon_delay.low,
                    settings.faults.daemon_delay.high,
                ],
                "all_cds_ready_s": round(cds_done - begin, 2),
                "all_workers_ready_s": round(pods_done - begin, 2),
                "cd_ready_s": {
                    key: round(v, 2) if key != "n" else v for key, v in summary(per_cd).items()
                },
                "controller_writes_per_cd": round(writes_e2e / m, 1),
                "controller_writes_per_daemon": round(writes_e2e / (m * k), 2),
                # Each daemon changes state twice (joins NotReady, turns Ready); the 5 writes
                # per CD before any daemon (finalizer, 2 RCTs, DS, first status) are not theirs.
                "writes_per_daemon_state_change": round(
                    max(0.0, writes_e2e - 5 * m) / (2 * m * k), 2
                ),
                "writes_per_cd_by_call": self.ctl.writes_since(tally_before, m),
                "conflicts_409": conflicts,
                "conflicts_409_after_settle": self.ctl.conflicts() - conflicts_before,
                "settle_s": round(settle, 1),
            }
            self.say(
                f"e2e: {m} CDs x {k} workers Ready in {cds_done - begin:.1f}s "
                f"(workers {pods_done - begin:.1f}s), {conflicts:.0f} conflicts"
            )
            await self.idle()
        finally:
            sim_task.cancel()
            await asyncio.gather(sim_task, return_exceptions=True)

    async def idle(self) -> None:
        settle = await self.ctl.settle(quiet=5.0, limit=120)
        window = self.args.idle_seconds
        before = (self.ctl.writes(), self.ctl.reads(), self.ctl.reconciles())
        tally_before = self.ctl.tally.snapshot()
        self.say(f"idle: settled after {settle:.1f}s; counting writes for {window:.0f}s")
        await asyncio.sleep(window)
        after = (self.ctl.writes(), self.ctl.reads(), self.ctl.reconciles())
        self.results["idle"] = {
            "window_s": window,
            "settle_s": round(settle, 1),
            "writes": after[0] - before[0],
            "gets": after[1] - before[1],
            "reconciles": after[2] - before[2],
            "writes_by_call": self.ctl.writes_since(tally_before, 1),
            "nodes_heartbeating": len(self.nodes),
        }
        self.say(f"idle: {after[0] - before[0]:.0f} writes in {window:.0f}s")


# -- the controller as a process of its own: start-up, RSS, idle CPU ------------------------------

# The variant without Node watches: the same controller whose Node informer selects nothing. A
# measuring instrument only (it cannot tell lost nodes), to split idle CPU into Node heartbeats
# and the rest.
NO_NODE_WATCH = """
import asyncio, os, signal
from computedomain.app import run_controller
from computedomain.config import parse_settings
from computedomain.observability.logging import configure_logging

async def main():
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    async def ready(process):
        for informer in (process.caches.nodes, process.caches.labelled_nodes):
            informer.label_selector = "bench.computedomain.dev/no-node-watch"
    configure_logging(log_format="text", verbosity=0)
    await run_controller(parse_settings([], dict(os.environ)), stop, on_ready=ready)

asyncio.run(main())
"""


def metric_total(text: str, name: str) -> float:
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name) and not line.startswith("#")
    )


async def scrape(client: KubeClient, port: int) -> str:
    session = client.session
    try:
        async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
            return await response.text() if response.status == 200 else ""
    except OSError:
        return ""


async def measure_process(
    client: KubeClient,
    kubeconfig: Path,
    variant: str,
    idle_window: float,
    overrides: Mapping[str, str],
) -> dict[str, Any]:
    """Spawn the controller (``python -m computedomain``, or the no-Node-watch variant),
    time its start to the first reconcile, its RSS then and once settled, and its CPU over an
    idle window. Leader election off, as in NVIDIA's measured deployment (contract §20)."""
    port = free_port()
    env = {
        **os.environ,
        **environ(
            image_name=c.NVIDIA_DRIVER_IMAGE,
            namespace=DRIVER_NAMESPACE,
            kubeconfig=str(kubeconfig),
            leader_election_enabled="false",
            http_endpoint=f"127.0.0.1:{port}",
            probe_address="127.0.0.1:0",
            orphan_grace_period="30m",
        ),
        **overrides,
    }
    argv = [sys.executable, "-m", "computedomain"]
    if variant == "no-node-watch":
        argv = [sys.executable, "-c", NO_NODE_WATCH]
    log_path = Path(tempfile.gettempdir()) / f"computedomain-bench-{variant}-{os.getpid()}.log"
    begin, spawned_at = now(), time.time()
    with log_path.open("wb") as out:
        child = await asyncio.create_subprocess_exec(
            *argv, stdout=out, stderr=subprocess.STDOUT, env=env
        )
    try:
        startup = rss_start = None
        while now() - begin < 120 and child.returncode is None:
            text = await scrape(client, port)
            if metric_total(text, "controller_runtime_reconcile_total") > 0:
                startup, rss_start = now() - begin, rss_mb(child.pid)
                break
            await asyncio.sleep(0.02)
        if startup is None or rss_start is None:
            raise SystemExit(f"controller ({variant}) did not reconcile: see {log_path}")
        # Settled: no reconcile for 5 s.
        last, since = -1.0, now()
        while now() - since < 5.0 and now() - begin < 300:
            await asyncio.sleep(0.5)
            total = metric_total(await scrape(client, port), "controller_runtime_reconcile_total")
            if total != last:
                last, since = total, now()
        gc_settled = rss_mb(child.pid)
        cpu_before = proc_cpu_s(child.pid)
        await asyncio.sleep(idle_window)
        cpu = proc_cpu_s(child.pid) - cpu_before
        return {
            "variant": variant,
            "startup_to_first_reconcile_s": round(startup, 2),
            "startup_phases_s": startup_phases(log_path, spawned_at, startup),
            "rss_at_first_reconcile_mb": round(rss_start, 1),
            "rss_settled_mb": round(gc_settled, 1),
            "idle_window_s": idle_window,
            "idle_cpu_s": round(cpu, 3),
            "idle_cpu_s_per_60s": round(cpu * 60.0 / idle_window, 3),
        }
    finally:
        child.terminate()
        try:
            await asyncio.wait_for(child.wait(), timeout=20)
        except TimeoutError:
            child.kill()
            await child.wait()


# Log lines that mark the start-up phases, in order (JSON logs, the controller's default).
STARTUP_MARKS = {
    "Starting": "interpreter_and_settings",
    "Serving HTTP": "imports_and_credentials",
    "Started leading": "until_leading",
}


def startup_phases(log_path: Path, spawned_at: float, first_reconcile: float) -> dict[str, float]:
    """Seconds each start-up phase took, from the controller's own log timestamps; the last,
    ``lists_and_first_reconcile``, runs from leading (informers listing meanwhile) until the
    first reconcile was seen."""
    phases: dict[str, float] = {}
    previous = 0.0
    for line in log_path.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        phase = STARTUP_MARKS.get(entry.get("msg", ""))
        if phase is None or phase in phases:
            continue
        at = datetime.fromisoformat(entry["ts"].replace("Z", "+00:00")).timestamp() - spawned_at
        phases[phase], previous = round(at - previous, 2), at
    phases["lists_and_first_reconcile"] = round(first_reconcile - previous, 2)
    return phases


async def separate_process(bench: Bench) -> None:
    window = bench.args.idle_seconds
    overrides = bench.args.overrides
    with_nodes = await measure_process(
        bench.client, bench.kubeconfig, "controller", window, overrides
    )
    without = await measure_process(
        bench.client, bench.kubeconfig, "no-node-watch", window, overrides
    )
    ratio = with_nodes["idle_cpu_s"] / max(without["idle_cpu_s"], 0.001)
    bench.results["process"] = {
        "nodes": len(bench.nodes),
        "controller": with_nodes,
        "no_node_watch": without,
        "idle_cpu_ratio_node_watch": round(ratio, 2),
    }
    bench.say(
        f"process: first reconcile after {with_nodes['startup_to_first_reconcile_s']:.2f}s, "
        f"RSS {with_nodes['rss_at_first_reconcile_mb']:.0f} → "
        f"{with_nodes['rss_settled_mb']:.0f} MiB; idle CPU {with_nodes['idle_cpu_s']:.2f}s "
        f"in {window:.0f}s ({without['idle_cpu_s']:.2f}s without Node watches, x{ratio:.1f})"
    )


# -- report --------------------------------------------------------------------------------------


def fmt_ms(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds * 1000:.0f} ms"


def report(results: dict[str, Any]) -> str:
    rows: list[tuple[str, str, str, str]] = []
    soak = results.get("soak")
    if soak:
        converged = soak["convergence_s"]
        rss = soak["last_controller_rss_mb"] or [0.0]
        rows += [
            (
                f"Soak: {soak['seconds']:.0f} s, CDs created / controller kills / apiserver "
                "restarts / compactions",
                f"{soak['cds_created']} / {soak['controller_kills']} / "
                f"{soak.get('apiserver_restarts', 0)} / {soak.get('etcd_compactions', 0)}",
                "",
                "",
            ),
            (
                "Soak: caches = LIST and status true, after the last fault",
                "NEVER (300 s)" if converged is None else f"{converged:.1f} s",
                "converges",
                "",
            ),
            ("Soak: orphans after every CD is deleted", str(len(soak["orphans"])), "0", ""),
            (
                "Soak: retries sooner than Retry-After",
                f"{soak['retries_before_retry_after']} of {soak['throttled']} throttled",
                "0",
                "",
            ),
            (
                f"Soak: last controller's RSS first / max / last over "
                f"{soak['last_controller_lived_s']:.0f} s of churn (its own process)",
                f"{rss[0]:.0f} / {max(rss):.0f} / {rss[-1]:.0f} MiB",
                "no growth",
                "",
            ),
        ]
        if live := [blocks for blocks in soak.get("last_controller_live_blocks", []) if blocks]:
            rows.append(
                (
                    "Soak: last controller's live allocator blocks first / max / last (thousands)",
                    f"{live[0] / 1000:,.0f} / {max(live) / 1000:,.0f} / {live[-1] / 1000:,.0f}",
                    "no growth",
                    "",
                )
            )
    upgrade = results.get("upgrade_under_load")
    if upgrade:
        daemons = upgrade["imex_daemons"]
        worst = upgrade["without_leader_max_s"]
        released = upgrade.get("after_release_max_s")
        rows += [
            (
                f"Upgrade: {upgrade['seconds']:.0f} s churn, CDs created / helm upgrade / "
                "rollback (--wait)",
                f"{upgrade['cds_created']} / {upgrade['helm_upgrade_s']:.1f} s / "
                f"{upgrade['helm_rollback_s']:.1f} s",
                "",
                "",
            ),
            (
                "Upgrade: writes inside another pod's writing span (pairs)",
                f"{upgrade['writes_inside_another_writers_span']} "
                f"({len(upgrade['overlapping_writer_pairs'])})",
                "0 (0)",
                "",
            ),
            (
                "Upgrade: leader handovers, max time without a leader (after a release)",
                f"{len(upgrade['leader_handovers'])}, "
                + ("—" if worst is None else f"{worst:.1f} s")
                + ("" if released is None else f" ({released:.1f} s)"),
                "",
                "",
            ),
            (
                "Upgrade: IMEX daemon pods replaced / restarted / DaemonSet patches "
                "(pods checked, both windows)",
                f"{daemons['pods_replaced']} / {daemons['restarts']} / "
                f"{daemons.get('daemonset_writes', 0)} (of {daemons['pods_checked']})",
                "0 / 0 / 0",
                "",
            ),
            ("Upgrade: orphans after every CD is deleted", str(len(upgrade["orphans"])), "0", ""),
        ]
    proj = results.get("projection", {})
    lat = proj.get("latency_s", {})
    if lat:
        rows.append(
            (
                "Projection clique→status.nodes p50 / p95 / p99 / max",
                f"{fmt_ms(lat['p50'])} / {fmt_ms(lat['p95'])} / "
                f"{fmt_ms(lat.get('p99'))} / {fmt_ms(lat['max'])}",
                f"≤ 250 ms ({proj['within_target']}/{proj['changes']} within)",
                "2 s poll: ~1 s mean, ≤ 2 s + write",
            )
        )
    burst = results.get("burst", {})
    if burst:
        n = burst["cds"]
        upstream_floor = n * UPSTREAM["writes_per_cd_before_daemons"] / UPSTREAM["client_qps"]
        if "all_children_s" in burst:
            rows.append(
                (
                    f"Burst: {n} CDs → all 3 children",
                    f"{burst['all_children_s']:.1f} s",
                    f"≤ {n * 4.2 / 100:.1f} s",
                    "4.2 s per 100 CDs at QPS 50 (issue 10)",
                )
            )
        rows.append(
            (
                f"Burst: {n} CDs → 3 children + conditions",
                f"{burst['all_children_and_conditions_s']:.1f} s",
                "",
                f"≥ {upstream_floor:.0f} s (QPS 5 floor)",
            )
        )
        rows.append(
            (
                "Burst: controller writes per CD",
                f"{burst['writes_per_cd']:.2f} "
                f"({burst['writes_per_cd_excluding_events']:.2f} w/o events)",
                "≤ 6",
                "6 (finalizer, 2 RCTs, DS, 2 status; §20)",
            )
        )
        if "requests_per_s_until_complete" in burst:
            rows.append(
                (
                    "Burst: controller's API requests per second until complete",
                    f"{burst['requests_per_s_until_complete']:.0f}",
                    "",
                    "",
                )
            )
    deletion = results.get("deletion", {})
    if deletion:
        rows.append(
            (
                f"Deletion: {deletion['cds']} CDs at once → CDs, DaemonSets, daemon RCTs gone",
                f"{deletion['all_gone_s']:.1f} s ({deletion['requests_per_s_until_gone']:.0f} "
                "requests/s)",
                "",
                "",
            )
        )
    e2e = results.get("end_to_end", {})
    if e2e.get("timed_out"):
        rows.append(("E2E", f"TIMED OUT: {e2e['cds_ready']}/{e2e['cds']} CDs Ready", "", ""))
    elif e2e:
        rows.append(
            (
                f"E2E: {e2e['cds']} CDs x {e2e['workers_per_cd']} workers → all CDs Ready",
                f"{e2e['all_cds_ready_s']:.1f} s (workers {e2e['all_workers_ready_s']:.1f} s)",
                "",
                "256-pod job ~8 min (#816)",
            )
        )
        rows.append(
            (
                "E2E: writes per daemon state change",
                f"{e2e['writes_per_daemon_state_change']:.2f}",
                "≤ 1.2",
                "1.0 (a status update each; no Events)",
            )
        )
        rows.append(
            ("E2E: 409 conflicts seen by the controller", f"{e2e['conflicts_409']:.0f}", "0", "")
        )
    idle = results.get("idle", {})
    if idle:
        rows.append(
            (
                f"Idle: writes in {idle['window_s']:.0f} s ({idle['nodes_heartbeating']} nodes)",
                f"{idle['writes']:.0f} (GETs {idle['gets']:.0f})",
                "0",
                "2 s poll; writes only on change",
            )
        )
    mem = results.get("memory", {})
    if mem.get("start_to_all_present_cds_reconciled_s") is not None:
        rows.append(
            (
                f"Start-up: {mem['cds_present_at_start']} CDs present → each has its conditions",
                f"{mem['start_to_all_present_cds_reconciled_s']:.1f} s "
                f"(caches synced {mem['cache_sync_s']:.1f} s)",
                "",
                "",
            )
        )
    if mem:
        rows.append(
            (
                f"Memory: RSS growth for {mem['nodes']} nodes",
                f"{mem['controller_fleet_mb']:.1f} MiB ({mem['per_node_kb']:.1f} KiB/node)",
                "",
                "full Node objects cached",
            )
        )
        if "burst_cds_mb" in mem:
            rows.append(
                (
                    f"Memory: RSS growth for {burst.get('cds', 0)} CDs + children",
                    f"{mem['burst_cds_mb']:.1f} MiB ({mem['per_cd_kb']:.1f} KiB/CD)",
                    "",
                    "",
                )
            )
    proc = results.get("process", {})
    if proc:
        ours, bare = proc["controller"], proc["no_node_watch"]
        rows.append(
            (
                "Process: start-up to first reconcile",
                f"{ours['startup_to_first_reconcile_s']:.2f} s",
                "≤ 1 s",
                "",
            )
        )
        phases = ours.get("startup_phases_s", {})
        rows.append(
            (
                "  of which: start, imports + credentials, lists",
                " / ".join(
                    f"{phases.get(key, 0.0):.2f}"
                    for key in (
                        "interpreter_and_settings",
                        "imports_and_credentials",
                        "lists_and_first_reconcile",
                    )
                )
                + " s",
                "",
                "",
            )
        )
        rows.append(
            (
                "Process: RSS at first reconcile → settled",
                f"{ours['rss_at_first_reconcile_mb']:.0f} → {ours['rss_settled_mb']:.0f} MiB",
                "≤ 60 MiB settled",
                "38 → 57 MiB (288 nodes, 100 CDs; §20)",
            )
        )
        rows.append(
            (
                f"Process: idle CPU in {ours['idle_window_s']:.0f} s ({proc['nodes']} nodes)",
                f"{ours['idle_cpu_s']:.2f} s ({bare['idle_cpu_s']:.2f} s w/o Node watch, "
                f"x{proc['idle_cpu_ratio_node_watch']:.1f})",
                "≤ 2x w/o Node watch",
                "0.06 s in 60 s (288 nodes)",
            )
        )
    headers = ("Measure", "Ours", "Target", "Upstream v0.4.0 (contract §17)")
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(headers)]
    lines = [" | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines.append("-+-".join("-" * w for w in widths))
    lines += [
        " | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows
    ]
    lines.append("")
    lines.append(
        "Upstream context: status projection polls every 2 s; client QPS 5 / burst 10; one "
        "worker; a 256-pod job takes ~8 min to start (#816). No upstream binary runs here."
    )
    return "\n".join(lines)


# -- main ----------------------------------------------------------------------------------------


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"{value} is not in (0, 1]")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--quick", action="store_true", help="smoke run: 8 racks, 20 CDs")
    parser.add_argument("--racks", type=int, help="NVL72 racks of 18 nodes (default 64)")
    parser.add_argument("--cds", type=int, help="CDs in the burst (default 200)")
    parser.add_argument("--changes", type=int, help="clique changes timed (default 50)")
    parser.add_argument(
        "--preload-cds",
        type=int,
        default=0,
        help="CDs created before the controller starts, kept through the run (default 0): "
        "start-up is then timed until each has its conditions",
    )
    parser.add_argument("--jobs", type=int, help="CDs in the end-to-end phase (default 16)")
    parser.add_argument("--workers", type=int, help="workers per end-to-end CD (default 8)")
    parser.add_argument("--idle-seconds", type=float, help="idle window (default 60)")
    parser.add_argument("--e2e-timeout", type=float, default=420.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--node-heartbeat",
        type=float,
        metavar="SECONDS",
        help="mean seconds between two status writes of one kwok Node (default kwok's 20-25 s; "
        "a real kubelet writes its status every 5 min when nothing changed: 300 for a large "
        "fleet, whose heartbeats would otherwise load this machine more than the controller)",
    )
    parser.add_argument(
        "--small-nodes",
        action="store_true",
        help="minimal Node objects (default: realistic 10-30 KB ones, like EKS GB200 nodes)",
    )
    parser.add_argument("--output", type=Path, help="JSON path (default bench-results/<time>.json)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a controller environment variable for every controller the run starts, e.g. "
        "--set KUBE_API_QPS=100 (repeatable; default: the controller's defaults)",
    )
    parser.add_argument(
        "--soak",
        type=float,
        metavar="SECONDS",
        help="run only the soak scenario (hack/soak.py) for this long: churn through the "
        "fault proxy, controller kills (SIGKILL) in the first 70%%, then convergence, "
        "orphans and the controller process's RSS",
    )
    parser.add_argument("--soak-cds", type=int, default=300, help="CDs created in the soak")
    parser.add_argument("--soak-kills", type=int, default=10, help="controller kills in the soak")
    parser.add_argument(
        "--soak-kill-window",
        type=_share,
        default=0.7,
        help="the kills fall within this first share of the soak (0 to 1, default 0.7); the last "
        "controller lives through the rest, so a small share shows its memory over a long churn",
    )
    parser.add_argument(
        "--soak-apiserver-restarts", type=int, default=3, help="apiserver restarts in the soak"
    )
    parser.add_argument(
        "--soak-compactions", type=int, default=1, help="etcd compactions in the soak (410s)"
    )
    parser.add_argument(
        "--upgrade-under-load",
        action="store_true",
        help="run only the upgrade scenario (hack/upgrade.py): our chart with two replicas, "
        "helm upgrade and rollback during a churn; writers, leaderless time, daemons, orphans",
    )
    parser.add_argument(
        "--upgrade-seconds",
        type=float,
        default=240.0,
        help="length of the churn in the upgrade scenario (default 240)",
    )
    parser.add_argument(
        "--against",
        choices=["nvidia"],
        help="instead of the phases above: NVIDIA's compute-domain-controller (the pinned build "
        "of hack/upstream/build.sh, at its default QPS 5/10 and at ours) and ours, one after "
        "the other on the same fleet, each as its own process, every figure also as a ratio "
        "(hack/versus.py); uses --cds, --changes (at most 17) and --idle-seconds",
    )
    parser.add_argument("-v", "--verbosity", type=int, default=-1, help="controller log level")
    return parser


def resolve(args: argparse.Namespace, parser: argparse.ArgumentParser) -> argparse.Namespace:
    quick = {"racks": 8, "cds": 20, "changes": 20, "jobs": 4, "workers": 4, "idle_seconds": 15.0}
    full = {"racks": 64, "cds": 200, "changes": 50, "jobs": 16, "workers": 8, "idle_seconds": 60.0}
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.node_heartbeat is not None and args.node_heartbeat <= 0:
        parser.error(f"--node-heartbeat {args.node_heartbeat:g}: must be more than 0 seconds")
    if args.preload_cds < 0:
        parser.error(f"--preload-cds {args.preload_cds}: must be 0 or more")
    overrides: dict[str, str] = {}
    for item in args.overrides:
        name, sep, value = item.partition("=")
        if not sep or not name:
            parser.error(f"--set {item!r}: expected NAME=VALUE")
        if name not in {setting.env for setting in SETTINGS}:
            parser.error(f"--set {name}: not an environment variable the controller reads")
        overrides[name] = value
    try:
        controller_settings(overrides)
    except ConfigError as err:
        parser.error(f"--set: {err}")
    args.overrides = overrides
    return args


async def run(args: argparse.Namespace, cp: ControlPlane, started: float) -> dict[str, Any]:
    spec = FleetSpec(racks=args.racks, seed=args.seed, realistic=not args.small_nodes)
    setup: dict[str, float] = {f"control_plane_{k}_s": v for k, v in cp.timings.items()}
    api = await api_client_from_kubeconfig(cp.kubeconfig)
    sim_api = await api_client_from_kubeconfig(cp.kubeconfig)
    client = KubeClient.from_api_client(api, field_manager="bench")
    sim_client = KubeClient.from_api_client(sim_api, field_manager="computedomain-sim")
    controller: ControllerUnderTest | None = None
    try:
        begin = now()
        await populate(cp, spec, ready_timeout=600)
        setup["fleet_ready_s"] = round(now() - begin, 1)
        print(f"fleet: {spec.total_nodes} nodes Ready in {setup['fleet_ready_s']:.0f}s", flush=True)
        await ensure_namespace(client, DRIVER_NAMESPACE)
        if args.upgrade_under_load:  # the chart creates the daemon ServiceAccount
            return await run_upgrade(args, cp, api, client, sim_client, spec, started, setup)
        sa = {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": c.DAEMON_SERVICE_ACCOUNT},
        }
        await client.create(r.SERVICE_ACCOUNTS, sa, DRIVER_NAMESPACE)
        if args.soak is not None:
            return await run_soak(args, cp, client, sim_client, spec, started, setup)
        if args.against == "nvidia":
            versus = Versus(args, cp, api, client, sim_client, DRIVER_NAMESPACE, say=_say)
            return scenario_results(args, spec, started, setup, versus=await versus.run())
        bench = Bench(args, client, cp.kubeconfig, build_nodes(spec))
        await bench.preload()
        await bench.memory_and_start()
        controller = bench.controller
        await bench.burst()
        await bench.projection()
        await bench.end_to_end(sim_client)
        if controller is not None:
            await controller.shutdown()
            controller = None
        await separate_process(bench)
        return {
            "started": datetime.fromtimestamp(started, UTC).isoformat(timespec="seconds"),
            "duration_s": round(time.time() - started, 1),
            "command": "hack/bench.sh " + " ".join(_portable_args(sys.argv[1:])),
            "machine": machine(),
            "parameters": {
                k: getattr(args, k)
                for k in (
                    "quick",
                    "racks",
                    "cds",
                    "preload_cds",
                    "changes",
                    "jobs",
                    "workers",
                    "idle_seconds",
                    "node_heartbeat",
                )
            },
            "controller_settings": controller_settings(args.overrides),
            "setup": setup,
            "upstream": UPSTREAM,
            **bench.results,
        }
    finally:
        if controller is not None:
            await controller.shutdown()
        await client.close()
        await sim_client.close()


async def run_soak(
    args: argparse.Namespace,
    cp: ControlPlane,
    client: KubeClient,
    sim_client: KubeClient,
    spec: FleetSpec,
    started: float,
    setup: dict[str, float],
) -> dict[str, Any]:
    if cp.workdir is None:
        raise SystemExit("--soak needs the dev cluster (the proxy serves its certificate)")
    soak = Soak(
        client=client,
        sim_client=sim_client,
        kubeconfig=cp.kubeconfig,
        pki_dir=cp.workdir / "pki",
        driver_namespace=DRIVER_NAMESPACE,
        nodes=build_nodes(spec),
        overrides=args.overrides,
        seconds=args.soak,
        cds=args.soak_cds,
        kills=args.soak_kills,
        kill_window=args.soak_kill_window,
        seed=args.seed,
        control_plane=cp,
        apiserver_restarts=args.soak_apiserver_restarts,
        compactions=args.soak_compactions,
        say=_say,
    )
    soaked = await soak.run()  # first: the duration and load are taken after it ran
    return scenario_results(args, spec, started, setup, soak=soaked)


async def run_upgrade(
    args: argparse.Namespace,
    cp: ControlPlane,
    admin: Any,
    client: KubeClient,
    sim_client: KubeClient,
    spec: FleetSpec,
    started: float,
    setup: dict[str, float],
) -> dict[str, Any]:
    if cp.workdir is None:
        raise SystemExit("--upgrade-under-load needs the dev cluster (audit log, pod tokens)")
    scenario = UpgradeUnderLoad(
        client=client,
        sim_client=sim_client,
        admin=admin,
        control_plane=cp,
        driver_namespace=DRIVER_NAMESPACE,
        nodes=build_nodes(spec),
        overrides=args.overrides,
        seconds=args.upgrade_seconds,
        seed=args.seed,
        workdir=cp.workdir / "upgrade-pods",
        say=_say,
    )
    figures = await scenario.run()  # first: the duration and the load are the run's
    return scenario_results(args, spec, started, setup, upgrade_under_load=figures)


def _say(text: str) -> None:
    print(f"[{datetime.now(UTC):%H:%M:%S}] {text}", flush=True)


def scenario_results(
    args: argparse.Namespace,
    spec: FleetSpec,
    started: float,
    setup: dict[str, float],
    **figures: Any,
) -> dict[str, Any]:
    """The JSON of a run of one scenario (--soak, --upgrade-under-load), taken once it ran."""
    return {
        "started": datetime.fromtimestamp(started, UTC).isoformat(timespec="seconds"),
        "duration_s": round(time.time() - started, 1),
        "command": "hack/bench.sh " + " ".join(_portable_args(sys.argv[1:])),
        "machine": machine(),
        "parameters": {"racks": args.racks, "nodes": spec.total_nodes},
        "controller_settings": controller_settings(args.overrides),
        "setup": setup,
        **figures,
    }


def controller_settings(overrides: Mapping[str, str]) -> dict[str, Any]:
    """What the run's controllers were set to: the figures that bound a burst, and any --set."""
    # Any existing file passes the kubeconfig check; the run's own is made later.
    settings = parse_settings([], {**environ(kubeconfig=__file__), **overrides})
    return {
        "kube_api_qps": settings.kube_api_qps,
        "kube_api_burst": settings.kube_api_burst,
        "workers": settings.workers,
        "overrides": dict(overrides),
    }


def _portable_args(argv: list[str]) -> list[str]:
    """The command line as recorded in the results: an --output path names only its file, so
    no machine's directories end up in the repository."""
    out: list[str] = []
    for arg in argv:
        if out and out[-1] == "--output":
            arg = f"bench-results/{Path(arg).name}"
        elif arg.startswith("--output="):
            arg = f"--output=bench-results/{Path(arg.split('=', 1)[1]).name}"
        out.append(arg)
    return out


def machine() -> dict[str, Any]:
    load = os.getloadavg()
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average_at_end": [round(x, 2) for x in load],
        "note": "2 cores shared with other work; compare ratios within one run",
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = resolve(parser.parse_args(argv), parser)
    configure_logging(log_format="text", verbosity=max(args.verbosity, 0))
    if args.verbosity < 0:
        logging.getLogger().setLevel(logging.WARNING)
    started = time.time()
    print(
        f"bench: {args.racks} racks ({args.racks * 18} nodes), {args.cds} CDs burst, "
        f"{args.changes} clique changes, {args.jobs}x{args.workers} e2e, "
        f"{args.idle_seconds:.0f}s idle",
        flush=True,
    )
    # Started from the main thread: the children die with the thread that spawned them.
    with ControlPlane.start(
        log=lambda line: print(f"devcluster: {line}", flush=True),
        node_heartbeat_s=args.node_heartbeat,
    ) as cp:
        results = asyncio.run(run(args, cp, started))
    print()
    print(versus_report(results["versus"]) if "versus" in results else report(results))
    stamp = datetime.fromtimestamp(started, UTC).strftime("%Y-%m-%dT%H%M%SZ")
    output = args.output or RESULTS_DIR / f"{stamp}{'-quick' if args.quick else ''}.json"
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(results, indent=2, sort_keys=False) + "\n")
    shown = output.relative_to(REPO_ROOT) if output.is_relative_to(REPO_ROOT) else output
    print(f"\nresults: {shown}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
