"""The soak scenario of ``hack/bench.sh --soak SECONDS`` (issue 18).

Our controller talks to the apiserver through the fault-injecting proxy
(``computedomain.devcluster.faultproxy``), the fleet simulator talks to it directly. For the
given time ComputeDomains with 1-4 node workloads are created and deleted; the proxy's faults
(latency, 429 + Retry-After, 500/503 before and after the apiserver acted, mid-body resets,
watch cuts) are on for the middle part of it, the apiserver is killed and started again and
etcd is compacted (every resuming watch then gets 410) within that part, and the controller is
killed (SIGKILL: no lease release, no drain) and started again at even intervals within the
first ``KILL_WINDOW`` of the run; the last one lives through the rest, so its memory is seen
under churn for minutes. Then:

- convergence: seconds from the last fault (faults off, last restart) until every informer's
  cache equals a fresh LIST and every CD's status says what its cliques and daemon pods say;
- orphans: after every CD is deleted, children, cliques and node labels still naming a CD;
- the controller's own RSS: it runs as a process of its own (``hack/soak_controller.py``: the
  controller plus a line protocol on stdin/stdout through which this process asks for its
  caches' differences from a fresh LIST), sampled every 10 s.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.devcluster.cluster import ensure_namespace
from computedomain.devcluster.controlplane import ControlPlane
from computedomain.devcluster.convergence import (
    names_left_by_deleted_cds,
    status_liars,
)
from computedomain.devcluster.faultproxy import Faults, fault_proxy
from computedomain.devcluster.processes import rss_mb
from computedomain.devcluster.workloads import Jobs
from computedomain.runtime import resources as r
from computedomain.runtime.client import ApiError, KubeClient
from computedomain.sim.context import SimSettings
from computedomain.sim.faults import FaultSettings
from computedomain.sim.simulator import Simulator

Obj = dict[str, Any]
NAMESPACE = "bench-soak"
# Faults are on from this share of the run to that one (by default); the rest runs clean.
FAULT_WINDOW = (0.15, 0.75)
# Controller kills fall within this first share of the run (by default); the last controller
# lives on through the rest.
KILL_WINDOW = 0.7
RSS_SAMPLE_EVERY_S = 10.0
# CDs created at once when the churn is behind its schedule.
BATCH = 8
CHILD = Path(__file__).with_name("soak_controller.py")


@dataclass
class ControllerChild:
    """One controller process of the soak (see ``serve_controller``), with its stderr in a log."""

    process: asyncio.subprocess.Process
    incarnation: int
    # One question at a time on its stdin: the RSS sampler asks beside the convergence check.
    asking: asyncio.Lock = field(default_factory=asyncio.Lock)

    @property
    def pid(self) -> int:
        return self.process.pid

    @classmethod
    async def start(
        cls, incarnation: int, proxied: Path, direct: Path, driver_namespace: str,
        env: Mapping[str, str], log: Path,
    ) -> ControllerChild:  # fmt: skip
        argv = [sys.executable, str(CHILD), str(proxied), str(direct), driver_namespace]
        argv += [f"{name}={value}" for name, value in env.items()]
        with log.open("ab") as err:
            process = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=err
            )
        child = cls(process, incarnation)
        if await child._line(60) != "built":
            raise RuntimeError(f"soak: controller {incarnation} did not start: see {log}")
        return child

    async def _line(self, within: float) -> str:
        assert self.process.stdout is not None
        line = await asyncio.wait_for(self.process.stdout.readline(), within)
        return line.decode().strip()

    async def cache_differences(self) -> list[str]:
        """What its informers' caches say unlike a fresh LIST (after waiting for their sync)."""
        answer: list[str] = json.loads(await self._ask("check", 180))
        return answer

    async def live_memory(self) -> dict[str, Any]:
        """Its memory now, untraced: Python's allocator's live blocks and arenas, the C heap
        (MiB mapped, used, free) and its Event recorder's keys (see ``soak_controller.py``)."""
        answer: dict[str, Any] = json.loads(await self._ask("live", 10))
        return answer

    async def _ask(self, question: str, within: float) -> str:
        assert self.process.stdin is not None
        async with self.asking:
            self.process.stdin.write(question.encode() + b"\n")
            await self.process.stdin.drain()
            return await self._line(within)

    async def kill(self) -> None:
        """SIGKILL, as the OOM killer or a node loss would: no lease release, no drain."""
        if self.process.returncode is None:
            self.process.send_signal(signal.SIGKILL)
        await self.process.wait()


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
    kill_window: float = KILL_WINDOW
    fault_window: tuple[float, float] = FAULT_WINDOW
    rng: random.Random = field(init=False)
    hold: int = field(init=False)
    jobs: Jobs = field(init=False)
    # (seconds into the run, controller incarnation, its RSS in MiB, this process's RSS,
    # the controller's own account of its memory (``live_memory``): empty when it could not
    # answer, e.g. being killed)
    rss: list[tuple[float, int, float, float, dict[str, Any]]] = field(default_factory=list)
    controller: ControllerChild | None = None

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)  # noqa: S311 - a reproducible churn
        self.jobs = Jobs(self.client, NAMESPACE, self.nodes, self.rng)
        # CDs alive at once: about a fifth of the fleet's nodes busy (1-4 nodes each).
        self.hold = max(10, len(self.nodes) // 12)

    async def run(self) -> dict[str, Any]:
        await ensure_namespace(self.client, NAMESPACE)
        settings = SimSettings(
            driver_namespace=self.driver_namespace, faults=FaultSettings(), seed=self.seed
        )
        simulator = Simulator(self.sim_client, settings)
        sim_task = asyncio.create_task(simulator.run())
        await asyncio.wait_for(simulator.wait_ready(), timeout=120)
        env = {"ORPHAN_GRACE_PERIOD": "5s", **self.overrides}
        log = Path(tempfile.gettempdir()) / f"computedomain-soak-controller-{os.getpid()}.log"
        async with fault_proxy(self.kubeconfig, self.pki_dir, seed=self.seed) as proxy:
            proxied = proxy.kubeconfig(self.kubeconfig.parent / "soak-proxied.kubeconfig")

            async def start(incarnation: int) -> ControllerChild:
                return await ControllerChild.start(
                    incarnation, proxied, self.kubeconfig, self.driver_namespace, env, log
                )

            self.controller = await start(0)
            begin = time.monotonic()
            created = deleted = restarts = serial = 0
            replacing: asyncio.Task[None] | None = None
            kill_every = self.seconds * self.kill_window / self.kills if self.kills else None
            next_kill = begin + kill_every / 2 if kill_every else None
            # Apiserver restarts and compactions fall inside the fault window, spread evenly.
            low, high = (self.seconds * share for share in self.fault_window)
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
                    faulty = self.fault_window[0] <= share < self.fault_window[1]
                    proxy.faults = Faults.hostile() if faulty else Faults.none()
                    if (
                        next_kill is not None
                        and restarts < self.kills
                        and time.monotonic() >= next_kill
                        and (replacing is None or replacing.done())
                    ):
                        # In the background: users go on while the controller is down.
                        restarts += 1
                        replacing = asyncio.create_task(self._replace(start, restarts))
                        next_kill += kill_every or 0
                    while disturbances and elapsed >= disturbances[0][0]:
                        _, what = disturbances.pop(0)
                        if what == "restart":
                            await self._restart_apiserver()
                            restarted += 1
                        else:
                            await self._compact()
                            compacted += 1
                    # On schedule: what a slow step (an apiserver restart, a slow API) held
                    # back is created at once, up to BATCH at a time, as many users would.
                    due = min(BATCH, int(elapsed / pace) + 1 - created, self.cds - created)
                    if due > 0:
                        sizes = [self.rng.choice((1, 2, 3, 4)) for _ in range(due)]
                        made = await asyncio.gather(
                            *(
                                self.jobs.create(f"soak-{serial + i:04d}", size)
                                for i, size in enumerate(sizes)
                            )
                        )
                        serial += due
                        created += sum(made)
                    held = sorted(self.jobs.held)
                    doomed = max(0, len(held) - self.hold) + (self.rng.random() < 0.4)
                    doomed = min(doomed, len(held))
                    if doomed:
                        victims = self.rng.sample(held, doomed)
                        await asyncio.gather(*(self.jobs.delete(name) for name in victims))
                        deleted += doomed
                    await asyncio.sleep(
                        max(0.0, begin + (int(elapsed / pace) + 1) * pace - time.monotonic())
                    )  # the churn's pace: time passing by design
                if replacing is not None:
                    await replacing
                proxy.faults = Faults.none()
                quiet_since = time.monotonic()
                converged = await self._converge(self.controller, quiet_since)
                faults = sorted({x.fault for x in proxy.exchanges if x.fault})
                gaps = proxy.retry_gaps("throttle")
                early = sum(1 for gap in gaps if gap < 0.95)
                for name in sorted(self.jobs.held):
                    await self.jobs.delete(name)
                orphans = await names_left_by_deleted_cds(self.client, NAMESPACE)
            finally:
                sampler.cancel()
                await asyncio.gather(sampler, return_exceptions=True)
                if replacing is not None:  # an error mid-replacement: the new one stops too
                    await asyncio.gather(replacing, return_exceptions=True)
                await self.controller.kill()
                sim_task.cancel()
                await asyncio.gather(sim_task, return_exceptions=True)
        last = [(t, mb, probe) for t, inc, mb, _, probe in self.rss if inc == restarts and mb > 0]
        result = {
            "seconds": self.seconds,
            "cds_created": created,
            "cds_deleted_during_churn": deleted,
            "cds_alive_at_once_up_to": self.hold,
            "controller_kills": restarts,
            "kill_window": self.kill_window,
            "apiserver_restarts": restarted,
            "etcd_compactions": compacted,
            "fault_window": list(self.fault_window),
            "faults_seen": faults,
            "requests_through_proxy": len(proxy.exchanges),
            "throttled": sum(1 for x in proxy.exchanges if x.fault == "throttle"),
            "retries_before_retry_after": early,
            "convergence_s": converged,
            "orphans": orphans,
            "rss_sample_every_s": RSS_SAMPLE_EVERY_S,
            # [seconds, incarnation, controller MiB, bench process MiB (simulator, proxy),
            #  the controller's account of its memory: allocator blocks and arenas, C heap
            #  MiB, Event recorder keys]
            "rss_samples": [
                [round(t, 1), inc, round(mb, 1), round(own, 1), probe]
                for t, inc, mb, own, probe in self.rss
            ],
            "last_controller_rss_mb": [round(mb, 1) for _, mb, _ in last],
            "last_controller_live_blocks": [probe.get("blocks", 0) for _, _, probe in last],
            "last_controller_pymalloc_arenas": [probe.get("arenas", 0) for _, _, probe in last],
            "last_controller_c_heap_mb": [probe.get("c_heap", {}) for _, _, probe in last],
            "last_controller_event_keys": [probe.get("event_keys", [0, 0]) for _, _, probe in last],
            "last_controller_lived_s": round(last[-1][0] - last[0][0], 1) if last else 0.0,
        }
        first, peak, final = (
            (last[0][1], max(mb for _, mb, _ in last), last[-1][1]) if last else (0, 0, 0)
        )
        blocks = [live for _, _, probe in last if (live := probe.get("blocks", 0))]
        live_text = (
            f"live blocks {blocks[0]:,} / {max(blocks):,} / {blocks[-1]:,}" if blocks else "no live"
        )
        self.say(
            f"soak: {created} CDs over {self.seconds:.0f}s, {restarts} kills, converged "
            f"{converged if converged is not None else 'NEVER'} s after the last fault, "
            f"{len(orphans)} orphans, last controller's RSS {first:.0f} / {peak:.0f} / "
            f"{final:.0f} MiB, {live_text} (first / max / last over "
            f"{result['last_controller_lived_s']:.0f} s); "
            f"controller log {log}"
        )
        return result

    async def _replace(
        self, start: Callable[[int], Awaitable[ControllerChild]], incarnation: int
    ) -> None:
        """SIGKILL the controller and start the next one (its RSS is sampled from then on)."""
        assert self.controller is not None
        await self.controller.kill()
        self.controller = await start(incarnation)

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
            if (controller := self.controller) is not None:
                at, mb, own = time.monotonic() - begin, rss_mb(controller.pid), rss_mb()
                try:
                    probe = await controller.live_memory()
                except (OSError, ValueError, TimeoutError, ConnectionError):
                    probe = {}  # killed or being replaced
                self.rss.append((at, controller.incarnation, mb, own, probe))
            await asyncio.sleep(RSS_SAMPLE_EVERY_S)

    async def _converge(self, controller: ControllerChild, since: float) -> float | None:
        deadline = since + 300
        while time.monotonic() < deadline:
            problems = await controller.cache_differences()
            problems += await status_liars(self.client, NAMESPACE, self.driver_namespace)
            if not problems:
                return round(time.monotonic() - since, 1)
            await asyncio.sleep(0.5)  # polling caches and LISTs: no watch tells this
        self.say(f"soak: NOT converged after 300 s: {'; '.join(problems[:5])}")
        return None
