"""The in-process scenarios of ``hack/bench.py``: the controller under test in this process
(with a tally of its writes by resource) and the phases that measure it (projection latency,
burst, end to end with the fleet simulator, idle writes, memory)."""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import logging
import math
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from measures import ObjectWatch, now, summary, watch_until

from computedomain.api import constants as c
from computedomain.api.resources import CLIQUES, COMPUTE_DOMAINS
from computedomain.app import REPORTING_CONTROLLER, ControllerProcess
from computedomain.config import environ
from computedomain.devcluster.cluster import ensure_namespace
from computedomain.devcluster.harness import (
    WRITE_METHODS,
    RunningController,
    compute_domain,
    start_controller,
)
from computedomain.devcluster.processes import rss_mb
from computedomain.devcluster.workloads import STATEFULSETS, workload
from computedomain.runtime import resources as r
from computedomain.runtime.client import KubeClient
from computedomain.runtime.objects import condition, condition_true, labels, pod_ready
from computedomain.runtime.resources import Resource
from computedomain.sim.context import SimSettings
from computedomain.sim.faults import FaultSettings
from computedomain.sim.fleet import RACK_LABEL
from computedomain.sim.simulator import Simulator

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO_ROOT / "docs" / "benchmark-results"
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


def say(text: str) -> None:
    """A progress line, timestamped."""
    print(f"[{datetime.now(UTC):%H:%M:%S}] {text}", flush=True)


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

    def install(self, *clients: object) -> None:
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
        def sent_with(method: str) -> Callable[[Mapping[str, str]], bool]:
            return lambda sample: sample.get("method") == method

        return {
            method: self.running.requests(sent_with(method)) for method in sorted(WRITE_METHODS)
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
        say(text)

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
        tally_before = self.ctl.tally.snapshot()

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
            "writes_per_cd_by_call": self.ctl.writes_since(tally_before, n),
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
