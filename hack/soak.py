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
  caches' differences from a fresh LIST), sampled every 10 s;
- its requests through the proxy (by verb, by verb and resource, by phase, by fault met), and
  per CD created.

With ``against_nvidia`` (``--soak-against nvidia``) the same soak runs twice, ours and then
NVIDIA's controller (the pinned v0.4.1 build, with its chart's environment), each behind a new
proxy with the same seed, on the same fleet and schedule of churn, faults and disturbances, and
the figures are given as ours ÷ NVIDIA's. NVIDIA's controller has no line protocol: its
convergence is the status one alone (every CD's status says what its cliques and daemon pods
say), which is also recorded for ours beside the stricter caches-and-status one.
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
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import aiohttp

from computedomain.api import constants as c
from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.devcluster.cluster import ensure_namespace
from computedomain.devcluster.controlplane import ControlPlane, free_port
from computedomain.devcluster.convergence import (
    names_left_by_deleted_cds,
    status_liars,
)
from computedomain.devcluster.faultproxy import WRITE_METHODS, Exchange, Faults, fault_proxy
from computedomain.devcluster.helm import find_helm
from computedomain.devcluster.processes import ChildProcess, rss_mb
from computedomain.devcluster.upstream import (
    COMPUTE_DOMAIN_VALUES,
    chart_controller_container,
    container_environment,
    find_upstream,
    start_nvidia_controller,
)
from computedomain.devcluster.workloads import Jobs
from computedomain.runtime import objects
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
# Once every CD is deleted, how long the controller gets to finalize them all.
FINALIZED_WITHIN_S = 120.0
CHILD = Path(__file__).with_name("soak_controller.py")
VERBS = ("GET", "LIST", "WATCH", "POST", "PATCH", "PUT", "DELETE")
# Answers that a client may retry: throttled, a 5xx, a reset mid-body.
RETRIABLE_FAULTS = ("throttle", "error-before", "error-after", "reset")


class SoakController(Protocol):
    """A controller process of the soak: ours (``ControllerChild``) or NVIDIA's."""

    @property
    def pid(self) -> int: ...

    @property
    def incarnation(self) -> int: ...

    async def cache_differences(self) -> list[str] | None: ...

    async def live_memory(self) -> dict[str, Any]: ...

    async def kill(self) -> None: ...


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

    async def cache_differences(self) -> list[str] | None:
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
class NvidiaChild:
    """NVIDIA's controller as its chart's container runs it, reached through the proxy. It has
    no line protocol: its caches and memory cannot be asked about, only its RSS seen."""

    process: ChildProcess
    incarnation: int
    killed: bool = False

    @property
    def pid(self) -> int:
        return self.process.pid

    async def exited(self) -> int:
        """Its exit code, once it exits."""
        assert self.process.popen is not None
        return await asyncio.to_thread(self.process.popen.wait)

    async def cache_differences(self) -> list[str] | None:
        return None  # not known: only what it wrote can be checked

    async def live_memory(self) -> dict[str, Any]:
        return {}

    async def kill(self) -> None:
        """SIGKILL, as for ours."""
        self.killed = True
        if self.process.alive():
            os.kill(self.pid, signal.SIGKILL)
        await asyncio.to_thread(self.process.stop, 0)


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
    # Ours, then NVIDIA's controller under the same soak, each figure also as ours ÷ NVIDIA's.
    against_nvidia: bool = False
    # NVIDIA's client rate limit (QPS, burst); None: its chart's (5, 10).
    nvidia_rate: tuple[float, int] | None = None
    rng: random.Random = field(init=False)
    hold: int = field(init=False)
    jobs: Jobs = field(init=False)
    # (seconds into the run, controller incarnation, its RSS in MiB, this process's RSS,
    # the controller's own account of its memory (``live_memory``): empty when it could not
    # answer, e.g. being killed)
    rss: list[tuple[float, int, float, float, dict[str, Any]]] = field(default_factory=list)
    controller: SoakController | None = None
    # Exits of NVIDIA's controller that the soak did not cause, each restarted at once (its
    # v0.4.1 can die of a concurrent map write in its status metrics, and its Deployment's
    # kubelet would restart it): [seconds into the soak, exit code].
    crashes: list[tuple[float, int]] = field(default_factory=list)
    # Set by _replace once a killed controller's replacement runs (what _restart_on_crash awaits).
    replaced: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        # CDs alive at once: about a fifth of the fleet's nodes busy (1-4 nodes each).
        self.hold = max(10, len(self.nodes) // 12)

    async def run(self) -> dict[str, Any]:
        ours = await self._soak(nvidia=False)
        if not self.against_nvidia:
            return ours
        theirs = await self._soak(nvidia=True)
        return {"ours": ours, "nvidia": theirs, "ours_over_nvidia": ours_over(ours, theirs)}

    def _nvidia_starter(
        self, proxied: Path, log: Path
    ) -> Callable[[int], Awaitable[SoakController]]:
        """Starts NVIDIA's controller (v0.4.1) with its chart's environment (QPS 5, burst 10,
        no leader election; ``nvidia_rate`` overrides the rate), against the proxy."""
        build = find_upstream(build=True)
        container = chart_controller_container(
            find_helm(), build, self.driver_namespace, COMPUTE_DOMAIN_VALUES
        )
        env = container_environment(
            container, "dra-driver-nvidia-gpu-controller-0", self.driver_namespace
        )

        if self.nvidia_rate is not None:
            env.update(
                KUBE_API_QPS=f"{self.nvidia_rate[0]:g}", KUBE_API_BURST=str(self.nvidia_rate[1])
            )

        async def start(incarnation: int) -> SoakController:
            process = start_nvidia_controller(
                build, proxied, container, {**env, "HTTP_ENDPOINT": f"127.0.0.1:{free_port()}"}, log
            )
            return NvidiaChild(process, incarnation)

        return start

    async def _soak(self, *, nvidia: bool) -> dict[str, Any]:
        """One soak of one controller: the same churn, faults and disturbances for the seed."""
        self.rng = random.Random(self.seed)  # noqa: S311 - a reproducible churn
        self.jobs = Jobs(self.client, NAMESPACE, self.nodes, self.rng)
        self.rss = []
        await ensure_namespace(self.client, NAMESPACE)
        settings = SimSettings(
            driver_namespace=self.driver_namespace, faults=FaultSettings(), seed=self.seed
        )
        simulator = Simulator(self.sim_client, settings)
        sim_task = asyncio.create_task(simulator.run())
        await asyncio.wait_for(simulator.wait_ready(), timeout=120)
        env = {"ORPHAN_GRACE_PERIOD": "5s", **self.overrides}
        who = "nvidia" if nvidia else "controller"
        log = Path(tempfile.gettempdir()) / f"computedomain-soak-{who}-{os.getpid()}.log"
        async with fault_proxy(self.kubeconfig, self.pki_dir, seed=self.seed) as proxy:
            proxied = proxy.kubeconfig(self.kubeconfig.parent / "soak-proxied.kubeconfig")

            async def start_ours(incarnation: int) -> SoakController:
                return await ControllerChild.start(
                    incarnation, proxied, self.kubeconfig, self.driver_namespace, env, log
                )

            start = self._nvidia_starter(proxied, log) if nvidia else start_ours

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
            self.crashes = []
            keeper = asyncio.create_task(self._restart_on_crash(start, begin)) if nvidia else None
            faults_from = faults_until = None
            try:
                while (elapsed := time.monotonic() - begin) < self.seconds:
                    share = elapsed / self.seconds
                    faulty = self.fault_window[0] <= share < self.fault_window[1]
                    proxy.faults = Faults.hostile() if faulty else Faults.none()
                    if faulty:
                        faults_from = faults_from or time.monotonic()
                        faults_until = time.monotonic()
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
                converged, status_converged = await self._converge(self.controller, quiet_since)
                converged_at = time.monotonic()
                faults = sorted({x.fault for x in proxy.exchanges if x.fault})
                gaps = proxy.retry_gaps("throttle")
                early = sum(1 for gap in gaps if gap < 0.95)
                for name in sorted(self.jobs.held):
                    await self.jobs.delete(name)
                orphans = await self._orphans()
                # Up to here: the controller's work for every CD created, their deletion too.
                exchanges = list(proxy.exchanges)
            finally:
                for task in (sampler, keeper):
                    if task is not None:
                        task.cancel()
                        await asyncio.gather(task, return_exceptions=True)
                if replacing is not None:  # an error mid-replacement: the new one stops too
                    await asyncio.gather(replacing, return_exceptions=True)
                await self.controller.kill()
                sim_task.cancel()
                await asyncio.gather(sim_task, return_exceptions=True)
        last = [(t, mb, probe) for t, inc, mb, _, probe in self.rss if inc == restarts and mb > 0]
        result: dict[str, Any] = {
            "seconds": self.seconds,
            "cds_created": created,
            "cds_deleted_during_churn": deleted,
            "cds_alive_at_once_up_to": self.hold,
            "controller_kills": restarts,
            "controller_crashes_restarted": [[round(t, 1), code] for t, code in self.crashes],
            "kill_window": self.kill_window,
            "apiserver_restarts": restarted,
            "etcd_compactions": compacted,
            "fault_window": list(self.fault_window),
            "faults_seen": faults,
            "requests_through_proxy": len(proxy.exchanges),
            "throttled": sum(1 for x in proxy.exchanges if x.fault == "throttle"),
            "retries_before_retry_after": early,
            "controller": self._nvidia_title() if nvidia else "ours",
            "convergence_s": converged,
            "status_convergence_s": status_converged,
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
            "requests": request_figures(
                exchanges,
                created,
                {
                    "before_faults": faults_from or quiet_since,
                    "under_faults": faults_until or quiet_since,
                    "clean_churn": quiet_since,
                    "convergence": converged_at,
                    "deletion": float("inf"),
                },
            ),
        }
        first, peak, final = (
            (last[0][1], max(mb for _, mb, _ in last), last[-1][1]) if last else (0, 0, 0)
        )
        blocks = [live for _, _, probe in last if (live := probe.get("blocks", 0))]
        live_text = (
            f"live blocks {blocks[0]:,} / {max(blocks):,} / {blocks[-1]:,}" if blocks else "no live"
        )
        per_cd = result["requests"]["per_cd"]
        self.say(
            f"soak ({result['controller']}): {created} CDs over {self.seconds:.0f}s, "
            f"{per_cd['requests']:g} requests and {per_cd['writes']:g} writes per CD, "
            f"{result['requests']['cds_served']} CDs served (a DaemonSet created), "
            f"status converged {status_converged} s after the faults, "
            f"{restarts} kills, converged "
            f"{converged if converged is not None else 'NEVER'} s after the last fault, "
            f"{len(orphans)} orphans, last controller's RSS {first:.0f} / {peak:.0f} / "
            f"{final:.0f} MiB, {live_text} (first / max / last over "
            f"{result['last_controller_lived_s']:.0f} s); "
            f"controller log {log}"
        )
        top = list(result["requests"]["by_verb_and_resource"].items())[:12]
        self.say(f"soak ({result['controller']}): requests by verb and resource: {top}")
        return result

    async def _replace(
        self, start: Callable[[int], Awaitable[SoakController]], incarnation: int
    ) -> None:
        """SIGKILL the controller and start the next one (its RSS is sampled from then on)."""
        assert self.controller is not None
        await self.controller.kill()
        self.controller = await start(incarnation)
        self.replaced.set()

    def _nvidia_title(self) -> str:
        qps, burst = self.nvidia_rate or (5, 10)
        return f"nvidia v0.4.1 (its chart's environment, QPS {qps:g} / burst {burst})"

    async def _restart_on_crash(
        self, start: Callable[[int], Awaitable[SoakController]], begin: float
    ) -> None:
        """Start NVIDIA's controller again whenever it exits on its own, as its Deployment's
        kubelet would (without the kubelet's back-off: the soak is short)."""
        while True:
            controller = self.controller
            assert isinstance(controller, NvidiaChild)
            code = await controller.exited()
            if controller.killed or controller is not self.controller:
                # A kill of the soak's: wait until _replace has started its replacement.
                while self.controller is controller:
                    self.replaced.clear()
                    await self.replaced.wait()
                continue
            self.crashes.append((time.monotonic() - begin, code))
            self.say(f"soak: NVIDIA's controller exited ({code}), started again")
            self.controller = await start(controller.incarnation)

    async def _unserved(self) -> list[str]:
        """Live CDs without their DaemonSet, their workload's claim template or a
        ``status.status``: a controller behind the churn has not served them yet, and their
        status (no node, no clique) would otherwise pass for true."""
        cds = (await self.client.list(COMPUTE_DOMAINS, NAMESPACE))["items"]
        daemonsets = (
            await self.client.list(r.DAEMONSETS, self.driver_namespace, label_selector=c.CD_LABEL)
        )["items"]
        served = {objects.labels(ds).get(c.CD_LABEL) for ds in daemonsets}
        templates = {
            objects.name(rct)
            for rct in (await self.client.list(r.RESOURCE_CLAIM_TEMPLATES, NAMESPACE))["items"]
        }
        problems = []
        for cd in cds:
            if objects.meta(cd).get("deletionTimestamp"):
                continue
            channel = ((cd.get("spec") or {}).get("channel") or {}).get(
                "resourceClaimTemplate"
            ) or {}
            if objects.uid(cd) not in served or channel.get("name") not in templates:
                problems.append(f"{objects.name(cd)}: children not all created")
            elif not (cd.get("status") or {}).get("status"):
                problems.append(f"{objects.name(cd)}: no status.status")
        return problems

    async def _orphans(self) -> list[str]:
        """What still names a CD once all are deleted; a CD the controller never finalized
        (NVIDIA's, once a delete of a child met a fault) is named as such, and ends the wait."""
        try:
            return await names_left_by_deleted_cds(
                self.client, NAMESPACE, finalized_within=FINALIZED_WITHIN_S
            )
        except TimeoutError:
            left = (await self.client.list(COMPUTE_DOMAINS, NAMESPACE))["items"]
            return [
                f"ComputeDomain {NAMESPACE}/{cd['metadata']['name']} never finalized" for cd in left
            ]

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

    async def _converge(
        self, controller: SoakController, since: float
    ) -> tuple[float | None, float | None]:
        """Seconds from ``since`` until its caches equal a fresh LIST and every status is true,
        and until every status is true (the one figure that NVIDIA's controller has: its
        caches cannot be asked, so its first figure is its status one). Either also needs every
        live CD served: its children created and a ``status.status`` written."""
        deadline = since + 300
        status_at: float | None = None
        while time.monotonic() < deadline:
            liars = await status_liars(self.client, NAMESPACE, self.driver_namespace)
            liars += await self._unserved()
            if not liars and status_at is None:
                status_at = round(time.monotonic() - since, 1)
            problems = liars + (await controller.cache_differences() or [])
            if not problems:
                return round(time.monotonic() - since, 1), status_at
            await asyncio.sleep(0.5)  # polling caches and LISTs: no watch tells this
        self.say(f"soak: NOT converged after 300 s: {'; '.join(problems[:5])}")
        return None, status_at


def request_figures(
    exchanges: Sequence[Exchange], cds: int, phases_until: Mapping[str, float]
) -> dict[str, Any]:
    """The controller's requests through the proxy: in all and per CD created, by verb, by verb
    and resource, by phase (each phase up to the moment given, in order), the answers that a
    client may retry (429, 5xx, reset) and how many of those it sent again."""
    by_verb = Counter(x.verb for x in exchanges)
    writes = sum(1 for x in exchanges if x.method in WRITE_METHODS)

    def phase(exchange: Exchange) -> str:
        return next(name for name, until in phases_until.items() if exchange.arrived < until)

    def tally(items: Iterable[str]) -> dict[str, int]:
        return dict(Counter(items).most_common())

    retriable = [x for x in exchanges if x.fault in RETRIABLE_FAULTS]
    sent_again = 0
    for index, first in enumerate(exchanges):
        if first.fault in RETRIABLE_FAULTS and any(
            (later.method, later.path, later.body) == (first.method, first.path, first.body)
            and later.arrived >= first.answered
            for later in exchanges[index + 1 : index + 200]
        ):
            sent_again += 1
    # A CD the controller served: its DaemonSet was created (a 5xx after the apiserver acted,
    # or a reset mid-answer, still created it). A controller that falls behind the churn
    # (NVIDIA's at QPS 5) never serves a CD deleted before its turn, and sends nothing for it.
    served = sum(
        1
        for x in exchanges
        if x.verb == "POST"
        and x.resource == "daemonsets"
        and (x.status == 201 or x.fault == "error-after")
    )

    def per(count: int, cds: int) -> float:
        return round(count / max(1, cds), 2)

    return {
        "total": len(exchanges),
        "writes": writes,
        "cds_served": served,
        "by_verb": {verb: by_verb.get(verb, 0) for verb in VERBS},
        "per_cd": {
            "requests": per(len(exchanges), cds),
            "writes": per(writes, cds),
            **{verb: per(by_verb.get(verb, 0), cds) for verb in VERBS},
        },
        "per_cd_served": {
            "requests": per(len(exchanges), served),
            "writes": per(writes, served),
            **{verb: per(by_verb.get(verb, 0), served) for verb in VERBS},
        },
        "by_verb_and_resource": tally(f"{x.verb} {x.resource}" for x in exchanges),
        "by_phase": {
            name: dict(tally(x.verb for x in exchanges if phase(x) == name))
            for name in phases_until
        },
        "by_phase_and_resource": {
            name: dict(tally(f"{x.verb} {x.resource}" for x in exchanges if phase(x) == name))
            for name in phases_until
        },
        "answered": tally(x.fault or str(x.status) for x in exchanges),
        "retriable_answers": len(retriable),
        "retriable_answers_sent_again": sent_again,
    }


def ours_over(ours: Mapping[str, Any], theirs: Mapping[str, Any]) -> dict[str, float | None]:
    """Ours ÷ NVIDIA's for requests and writes per CD (in all and by verb) and convergence:
    below 1, ours sends fewer, converges sooner."""

    def ratio(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None or b == 0 else round(a / b, 2)

    mine, its = ours["requests"]["per_cd"], theirs["requests"]["per_cd"]
    mine_served, its_served = ours["requests"]["per_cd_served"], theirs["requests"]["per_cd_served"]
    return {
        **{f"{key}_per_cd": ratio(mine[key], its[key]) for key in mine},
        **{f"{key}_per_cd_served": ratio(mine_served[key], its_served[key]) for key in mine_served},
        "cds_served": ratio(ours["requests"]["cds_served"], theirs["requests"]["cds_served"]),
        "status_convergence": ratio(ours["status_convergence_s"], theirs["status_convergence_s"]),
    }
