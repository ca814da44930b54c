"""The soak scenario of ``hack/bench.sh --soak SECONDS`` (issue 18).

Our controller talks to the apiserver through the fault-injecting proxy
(``computedomain.devcluster.faultproxy``), the fleet simulator talks to it directly. For the
given time ComputeDomains with 1-4 node workloads are created and deleted; the proxy's faults
(latency, 429 + Retry-After, 500/503 before and after the apiserver acted, mid-body resets,
watch cuts) are on for the middle part of it, the apiserver is killed and started again and
etcd is compacted (every resuming watch then gets 410) within that part, and the controller is
killed (its task cancelled, no lease release, no drain) and started again at even intervals.
Then:

- convergence: seconds from the last fault (faults off, last restart) until every informer's
  cache equals a fresh LIST and every CD's status says what its cliques and daemon pods say;
- orphans: after every CD is deleted, children, cliques and node labels still naming a CD;
- RSS of this process (controller, simulator and proxy together) sampled over the run.
"""

from __future__ import annotations

import asyncio
import gc
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.devcluster.cluster import ensure_namespace
from computedomain.devcluster.controlplane import ControlPlane
from computedomain.devcluster.convergence import (
    caches_differences,
    names_left_by_deleted_cds,
    status_liars,
)
from computedomain.devcluster.faultproxy import Faults, fault_proxy
from computedomain.devcluster.harness import RunningController, start_controller
from computedomain.devcluster.processes import rss_mb
from computedomain.devcluster.workloads import Jobs
from computedomain.runtime import resources as r
from computedomain.runtime.client import ApiError, KubeClient
from computedomain.runtime.informer import Informer
from computedomain.sim.context import SimSettings
from computedomain.sim.faults import FaultSettings
from computedomain.sim.simulator import Simulator

Obj = dict[str, Any]
NAMESPACE = "bench-soak"
# Faults are on from this share of the run to that one; the rest runs clean.
FAULT_WINDOW = (0.15, 0.75)


@dataclass
class Soak:
    client: KubeClient
    sim_client: KubeClient
    kubeconfig: Path
    pki_dir: Path
    driver_namespace: str
    nodes: Sequence[Obj]
    overrides: Mapping[str, str]
    seconds: float
    cds: int
    kills: int
    seed: int
    control_plane: ControlPlane
    say: Callable[[str], None]
    apiserver_restarts: int = 3
    compactions: int = 1
    rng: random.Random = field(init=False)
    jobs: Jobs = field(init=False)
    rss: list[tuple[float, float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)  # noqa: S311 - a reproducible churn
        self.jobs = Jobs(self.client, NAMESPACE, self.nodes, self.rng)

    async def run(self) -> dict[str, Any]:
        await ensure_namespace(self.client, NAMESPACE)
        settings = SimSettings(
            driver_namespace=self.driver_namespace, faults=FaultSettings(), seed=self.seed
        )
        simulator = Simulator(self.sim_client, settings)
        sim_task = asyncio.create_task(simulator.run())
        await asyncio.wait_for(simulator.wait_ready(), timeout=120)
        env = {"ORPHAN_GRACE_PERIOD": "5s", **self.overrides}
        async with fault_proxy(self.kubeconfig, self.pki_dir, seed=self.seed) as proxy:
            proxied = proxy.kubeconfig(self.kubeconfig.parent / "soak-proxied.kubeconfig")
            controller = await self._start(proxied, env)
            begin = time.monotonic()
            created = deleted = restarts = 0
            kill_every = self.seconds / (self.kills + 1) if self.kills else None
            next_kill = begin + kill_every if kill_every else None
            # Apiserver restarts and compactions fall inside the fault window, spread evenly.
            low, high = (self.seconds * share for share in FAULT_WINDOW)
            disturbances = sorted(
                [(low + (high - low) * (i + 1) / (self.apiserver_restarts + 1), "restart")
                 for i in range(self.apiserver_restarts)]
                + [(low + (high - low) * (i + 0.5) / max(1, self.compactions), "compact")
                   for i in range(self.compactions)]
            )  # fmt: skip
            restarted = compacted = 0
            pace = self.seconds / max(1, self.cds)
            sampler = asyncio.create_task(self._sample_rss(begin))
            try:
                while (elapsed := time.monotonic() - begin) < self.seconds:
                    share = elapsed / self.seconds
                    faulty = FAULT_WINDOW[0] <= share < FAULT_WINDOW[1]
                    proxy.faults = Faults.hostile() if faulty else Faults.none()
                    if next_kill is not None and time.monotonic() >= next_kill:
                        controller.task.cancel()
                        await asyncio.gather(controller.task, return_exceptions=True)
                        controller = await self._start(proxied, env)
                        restarts += 1
                        next_kill += kill_every or 0
                    while disturbances and elapsed >= disturbances[0][0]:
                        _, what = disturbances.pop(0)
                        if what == "restart":
                            await self._restart_apiserver()
                            restarted += 1
                        else:
                            await self._compact()
                            compacted += 1
                    size = self.rng.choice((1, 2, 3, 4))
                    if created < self.cds and await self.jobs.create(f"soak-{created:04d}", size):
                        created += 1
                    held = self.jobs.held
                    if held and (len(held) > 40 or self.rng.random() < 0.4):
                        await self.jobs.delete(self.rng.choice(sorted(held)))
                        deleted += 1
                    await asyncio.sleep(pace)  # the churn's pace: time passing by design
                proxy.faults = Faults.none()
                quiet_since = time.monotonic()
                converged = await self._converge(controller, quiet_since)
                faults = sorted({x.fault for x in proxy.exchanges if x.fault})
                gaps = proxy.retry_gaps("throttle")
                early = sum(1 for gap in gaps if gap < 0.95)
                for name in sorted(self.jobs.held):
                    await self.jobs.delete(name)
                orphans = await names_left_by_deleted_cds(self.client, NAMESPACE)
            finally:
                sampler.cancel()
                controller.task.cancel()
                await asyncio.gather(controller.task, sampler, return_exceptions=True)
                sim_task.cancel()
                await asyncio.gather(sim_task, return_exceptions=True)
        gc.collect()
        # Killed controllers must leave nothing behind: the informers still alive now belong
        # to the last one (and the simulator), whatever the number of kills.
        live_informers = sum(1 for obj in gc.get_objects() if isinstance(obj, Informer))
        result = {
            "seconds": self.seconds,
            "live_informers_at_end": live_informers,
            "informers_per_controller": len(controller.process.caches.all),
            "cds_created": created,
            "cds_deleted_during_churn": deleted,
            "controller_kills": restarts,
            "apiserver_restarts": restarted,
            "etcd_compactions": compacted,
            "fault_window": list(FAULT_WINDOW),
            "faults_seen": faults,
            "requests_through_proxy": len(proxy.exchanges),
            "throttled": sum(1 for x in proxy.exchanges if x.fault == "throttle"),
            "retries_before_retry_after": early,
            "convergence_s": converged,
            "orphans": orphans,
            "rss_mb": [round(mb, 1) for _, mb in self.rss],
            "rss_sample_every_s": 10,
        }
        self.say(
            f"soak: {created} CDs over {self.seconds:.0f}s, {restarts} kills, converged "
            f"{converged if converged is not None else 'NEVER'} s after the last fault, "
            f"{len(orphans)} orphans, RSS {self.rss[0][1]:.0f} → {self.rss[-1][1]:.0f} MiB"
        )
        return result

    async def _start(self, kubeconfig: Path, env: Mapping[str, str]) -> RunningController:
        return await start_controller(
            kubeconfig, self.driver_namespace, env, wait_synced=None, log_verbosity=None
        )

    async def _restart_apiserver(self) -> None:
        """Kill the apiserver (1 s grace) and start it again; back once it answers. The event
        loop stops for the kill (the control plane's children belong to this thread)."""
        began = time.monotonic()
        self.control_plane.restart("kube-apiserver", grace=1.0)
        while True:
            try:  # our CRD's path is among the last an apiserver installs
                await self.client.list(COMPUTE_DOMAINS, NAMESPACE, limit=1)
                break
            except (ApiError, OSError, TimeoutError, aiohttp.ClientError):
                await asyncio.sleep(0.2)  # no watch answers while the apiserver is down
        self.say(f"soak: apiserver restarted, serving again after {time.monotonic() - began:.1f}s")

    async def _compact(self) -> None:
        """Compact etcd to now: every watch resuming from an older RV gets 410 and relists."""
        current = (await self.client.list(r.NAMESPACES, limit=1))["metadata"]["resourceVersion"]
        self.control_plane.compact_etcd(current)
        self.say(f"soak: etcd compacted to {current}")

    async def _sample_rss(self, begin: float) -> None:
        while True:
            self.rss.append((time.monotonic() - begin, rss_mb()))
            await asyncio.sleep(10)

    async def _converge(self, controller: RunningController, since: float) -> float | None:
        await controller.wait_synced(120)
        deadline = since + 300
        while time.monotonic() < deadline:
            problems = await caches_differences(controller.process.caches.all, self.client)
            problems += await status_liars(self.client, NAMESPACE, self.driver_namespace)
            if not problems:
                return round(time.monotonic() - since, 1)
            await asyncio.sleep(0.5)  # polling caches and LISTs: no watch tells this
        self.say(f"soak: NOT converged after 300 s: {'; '.join(problems[:5])}")
        return None
