"""``hack/bench.sh --against nvidia``: NVIDIA's own ``compute-domain-controller`` (the pinned v0.4.1
build of hack/upstream/build.sh, with the environment its chart's Deployment renders) and ours, one
after the other on the same fleet in the same run, each as a process of its own, measured from
the outside by the same watches, so that every figure can be given as a ratio:

- start: from spawning the process until a ComputeDomain created at that moment has its
  ``status.status`` (RSS then);
- burst: N ComputeDomains created at once until all three children of each exist, and until each
  has ``status.status``; then all deleted until they and their DaemonSets and daemon claim
  templates are gone;
- daemon change to status: the fleet simulator's (emulated) daemons join one at a time as a
  workload scales up; from the moment a watch on the clique sees a daemon's entry Ready until a
  watch on the ComputeDomain sees that node Ready in ``status.nodes``;
- writes per CD and per daemon change, from the apiserver's audit log (each contender runs as a
  ServiceAccount of its own, bound to cluster-admin);
- idle CPU over a quiet window, and RSS at start and once settled.

NVIDIA's controller runs twice: at its chart's default client rate limit (QPS 5, burst 10) and at
ours (QPS 100, burst 200). Leader election is off for all three, as in NVIDIA's chart default.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes_asyncio.client import ApiClient
from measures import ObjectWatch, now, proc_cpu_s, summary, watch_until

from computedomain.api import constants as c
from computedomain.api.resources import CLIQUES, COMPUTE_DOMAINS
from computedomain.config import environ
from computedomain.devcluster.audit import AuditLog, service_account_user, tally
from computedomain.devcluster.clients import (
    cluster_admin_binding,
    request_service_account_token,
    token_kubeconfig,
)
from computedomain.devcluster.cluster import ensure_namespace
from computedomain.devcluster.controlplane import ControlPlane, free_port
from computedomain.devcluster.harness import compute_domain
from computedomain.devcluster.helm import find_helm
from computedomain.devcluster.processes import ChildProcess, rss_mb, spawn
from computedomain.devcluster.upstream import (
    COMPUTE_DOMAIN_VALUES,
    chart_controller_container,
    container_environment,
    find_upstream,
    start_nvidia_controller,
)
from computedomain.devcluster.workloads import STATEFULSETS, workload
from computedomain.runtime import resources as r
from computedomain.runtime.client import ApiError, KubeClient
from computedomain.runtime.objects import labels
from computedomain.runtime.resources import Resource
from computedomain.sim.context import SimSettings
from computedomain.sim.faults import DelayRange, FaultSettings
from computedomain.sim.simulator import Simulator

Obj = dict[str, Any]
CLUSTER_ROLE_BINDINGS = Resource(
    "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False
)
# Audit-log verbs that change something.
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection"}
QUIET_S = 3.0
RACK_NODES = 18


@dataclass(frozen=True)
class Contender:
    key: str
    title: str
    nvidia: bool
    qps: float
    burst: int


CONTENDERS = (
    Contender("nvidia-qps5", "NVIDIA v0.4.1, QPS 5/10 (its default)", True, 5, 10),
    Contender("nvidia-qps100", "NVIDIA v0.4.1, QPS 100/200 (ours)", True, 100, 200),
    Contender("ours", "ours, QPS 100/200 (default)", False, 100, 200),
)


# A burst's phases at NVIDIA's default rate limit take minutes (5 at 1,152 nodes).
PHASE_LIMIT_S = 900.0


class Versus:
    def __init__(
        self,
        args: Any,
        cp: ControlPlane,
        admin: ApiClient,
        client: KubeClient,
        sim_client: KubeClient,
        driver_namespace: str,
        say: Callable[[str], None],
    ) -> None:
        self.args = args
        self.cp = cp
        self.admin = admin
        self.client = client
        self.sim_client = sim_client
        self.driver_namespace = driver_namespace
        self.say = say
        assert cp.audit_log is not None, "--against needs the local control plane's audit log"
        self.audit = AuditLog(cp.audit_log)
        assert cp.workdir is not None, "--against needs the local control plane"
        self.workdir = cp.workdir / "versus"
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.build = find_upstream(build=True)

    async def run(self) -> dict[str, Any]:
        results: dict[str, Any] = {}
        simulator = Simulator(
            self.sim_client,
            SimSettings(
                driver_namespace=self.driver_namespace,
                faults=FaultSettings(daemon_delay=DelayRange(0.2, 0.5)),
                seed=self.args.seed,
            ),
        )
        sim_task = asyncio.create_task(simulator.run())
        await simulator.wait_ready()
        try:
            for contender in CONTENDERS:
                self.say(f"versus: {contender.title}")
                results[contender.key] = await self.measure(contender)
        finally:
            sim_task.cancel()
            await asyncio.gather(sim_task, return_exceptions=True)
        ours = results["ours"]
        results["ratios"] = {
            key: ratios(results[key], ours) for key in results if key.startswith("nvidia")
        }
        return results

    # -- one contender ------------------------------------------------------------------------

    async def measure(self, contender: Contender) -> dict[str, Any]:
        user, kubeconfig = await self.identity(contender.key)
        mark = self.audit.mark()
        ns = f"versus-{contender.key}"
        await ensure_namespace(self.client, ns)
        begin = now()
        process = await self.spawn(contender, kubeconfig)
        try:
            figures: dict[str, Any] = {"title": contender.title}
            figures["start_to_first_status_s"] = round(await self.first_status(ns, begin), 2)
            figures["rss_at_start_mb"] = round(rss_mb(process.pid), 1)
            await self.quiet(user)
            figures["burst"] = await self.burst(ns, user)
            figures["daemon_changes"] = await self.daemon_changes(ns, user)
            await self.quiet(user)
            cpu_before, window = proc_cpu_s(process.pid), self.args.idle_seconds
            await asyncio.sleep(window)  # the quiet window itself is what is measured
            figures["idle_cpu_s_per_60s"] = round(
                (proc_cpu_s(process.pid) - cpu_before) * 60 / window, 3
            )
            figures["rss_settled_mb"] = round(rss_mb(process.pid), 1)
            figures["writes_by_call"] = tally(
                w for w in self.audit.writes(mark, user) if w.verb in WRITE_VERBS
            )
            if not process.alive():
                raise SystemExit(f"{contender.title} exited: see {process.log}")
            return figures
        finally:
            process.stop()

    async def identity(self, key: str) -> tuple[str, Path]:
        name = f"bench-{key}"
        account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}
        binding = cluster_admin_binding(name, name, self.driver_namespace)
        for res, body, namespace in (
            (r.SERVICE_ACCOUNTS, account, self.driver_namespace),
            (CLUSTER_ROLE_BINDINGS, binding, None),
        ):
            try:
                await self.client.create(res, body, namespace)
            except ApiError as err:
                if not err.is_already_exists:
                    raise
        token = await request_service_account_token(self.admin, self.driver_namespace, name, 7200)
        path = token_kubeconfig(
            self.workdir / f"{name}.kubeconfig", self.cp.server, self.cp.ca_file, token
        )
        return service_account_user(self.driver_namespace, name), path

    async def spawn(self, contender: Contender, kubeconfig: Path) -> ChildProcess:
        log = self.workdir / f"{contender.key}.log"
        rate = {"KUBE_API_QPS": str(contender.qps), "KUBE_API_BURST": str(contender.burst)}
        if contender.nvidia:
            container = chart_controller_container(
                find_helm(), self.build, self.driver_namespace, COMPUTE_DOMAIN_VALUES
            )
            env = container_environment(
                container, "dra-driver-nvidia-gpu-controller-0", self.driver_namespace
            )
            env.update(HTTP_ENDPOINT=f"127.0.0.1:{free_port()}", **rate)
            return start_nvidia_controller(self.build, kubeconfig, container, env, log)
        env = {
            **os.environ,
            **environ(
                image_name=c.NVIDIA_DRIVER_IMAGE,
                namespace=self.driver_namespace,
                kubeconfig=str(kubeconfig),
                leader_election_enabled="false",
                http_endpoint=f"127.0.0.1:{free_port()}",
                probe_address="127.0.0.1:0",
            ),
            **rate,
        }
        return spawn("computedomain", [sys.executable, "-m", "computedomain"], log, env=env)

    async def quiet(self, user: str, limit: float = 120.0) -> None:
        """Until the contender wrote nothing for QUIET_S seconds (read from the audit log)."""
        begin, mark, since = now(), self.audit.mark(), now()
        while now() - since < QUIET_S and now() - begin < limit:
            await asyncio.sleep(0.25)
            if any(w.verb in WRITE_VERBS for w in self.audit.writes(mark, user)):
                mark, since = self.audit.mark(), now()

    async def driver_until(self, res: Resource, check: Callable[[dict[str, Obj]], bool]) -> float:
        """``until`` over the CDs' children in the driver namespace."""
        return await watch_until(
            self.client,
            res,
            check,
            namespace=self.driver_namespace,
            label_selector=c.CD_LABEL,
            within=PHASE_LIMIT_S,
            what=f"{res.kind}s",
        )

    def writes(self, mark: int, user: str, *, events: bool = True) -> int:
        return sum(
            1
            for w in self.audit.writes(mark, user)
            if w.verb in WRITE_VERBS and (events or w.resource != "events")
        )

    # -- phases -------------------------------------------------------------------------------

    async def first_status(self, ns: str, begin: float) -> float:
        await self.client.create(COMPUTE_DOMAINS, compute_domain("first", "first-channel", 0), ns)
        at = await watch_until(
            self.client,
            COMPUTE_DOMAINS,
            lambda objs: bool(((objs.get("first") or {}).get("status") or {}).get("status")),
            namespace=ns,
            within=300,
            what="the first CD's status.status",
        )
        await self.client.delete(COMPUTE_DOMAINS, "first", ns)
        await watch_until(
            self.client, COMPUTE_DOMAINS, lambda objs: not objs, namespace=ns, what="first gone"
        )
        return at - begin

    async def burst(self, ns: str, user: str) -> dict[str, Any]:
        n = self.args.cds
        names = [f"burst-{i:04d}" for i in range(n)]
        uids: set[str] = set()

        def children(target: str) -> Callable[[dict[str, Obj]], bool]:
            def check(objects: dict[str, Obj]) -> bool:
                seen = {
                    labels(o).get(c.CD_LABEL)
                    for o in objects.values()
                    if not target or labels(o).get(c.TARGET_LABEL) == target
                }
                return len(uids) == n and uids <= seen

            return check

        def statuses(objects: dict[str, Obj]) -> bool:
            return all(((objects.get(m) or {}).get("status") or {}).get("status") for m in names)

        waits = {
            "daemonsets": self.driver_until(r.DAEMONSETS, children("")),
            "daemon_rcts": self.driver_until(r.RESOURCE_CLAIM_TEMPLATES, children(c.TARGET_DAEMON)),
            "workload_rcts": watch_until(
                self.client,
                r.RESOURCE_CLAIM_TEMPLATES,
                lambda objs: all(f"{m}-channel" in objs for m in names),
                namespace=ns,
                within=PHASE_LIMIT_S,
            ),
            "status": watch_until(
                self.client, COMPUTE_DOMAINS, statuses, namespace=ns, within=PHASE_LIMIT_S
            ),
        }
        tasks = {key: asyncio.create_task(wait) for key, wait in waits.items()}
        mark = self.audit.mark()
        begin = now()

        async def create(name: str) -> None:
            cd = await self.client.create(
                COMPUTE_DOMAINS, compute_domain(name, f"{name}-channel", 0), ns
            )
            uids.add(cd["metadata"]["uid"])

        await asyncio.gather(*(create(name) for name in names))
        done = {key: await task - begin for key, task in tasks.items()}
        await self.quiet(user)
        created = self.writes(mark, user)
        created_without_events = self.writes(mark, user, events=False)

        def none_left(objects: dict[str, Obj]) -> bool:
            return not any(labels(o).get(c.CD_LABEL) in uids for o in objects.values())

        gone_waits = {
            "cds": watch_until(
                self.client,
                COMPUTE_DOMAINS,
                lambda objs: not objs,
                namespace=ns,
                within=PHASE_LIMIT_S,
            ),
            "daemonsets": self.driver_until(r.DAEMONSETS, none_left),
            "daemon_rcts": self.driver_until(r.RESOURCE_CLAIM_TEMPLATES, none_left),
        }
        gone_tasks = {key: asyncio.create_task(wait) for key, wait in gone_waits.items()}
        mark = self.audit.mark()
        begin = now()
        await asyncio.gather(*(self.client.delete(COMPUTE_DOMAINS, m, ns) for m in names))
        gone = {key: await task - begin for key, task in gone_tasks.items()}
        await self.quiet(user)
        return {
            "cds": n,
            "to_children_s": round(max(done[k] for k in done if k != "status"), 2),
            "to_status_s": round(done["status"], 2),
            "writes_per_cd": round(created / n, 2),
            "writes_per_cd_without_events": round(created_without_events / n, 2),
            "deletion_s": round(max(gone.values()), 2),
            "deletion_writes_per_cd": round(self.writes(mark, user) / n, 2),
            "deletion_writes_by_call": tally(
                w for w in self.audit.writes(mark, user) if w.verb in WRITE_VERBS
            ),
        }

    async def daemon_changes(self, ns: str, user: str) -> dict[str, Any]:
        """Daemons join one at a time (the workload scales up); each join's entry Ready in the
        clique → that node Ready in the CD's status.nodes."""
        changes = min(self.args.changes, RACK_NODES - 1)  # one rack: one clique
        cd = await self.client.create(
            COMPUTE_DOMAINS, compute_domain("joins", "joins-channel", 0), ns
        )
        uid = cd["metadata"]["uid"]
        await self.client.create(
            STATEFULSETS, workload("joins", 1, rct_name="joins-channel", racks=["r01"]), ns
        )
        mark = self.audit.mark()

        def ready_entries(clique: Obj | None) -> int:
            entries = (clique or {}).get("daemons") or []
            return sum(1 for d in entries if d.get("status") == c.STATUS_READY)

        def ready_nodes(cd: Obj | None) -> int:
            nodes = ((cd or {}).get("status") or {}).get("nodes") or []
            return sum(1 for n in nodes if n.get("status") == c.STATUS_READY)

        def at_least(
            count: Callable[[Obj | None], int], wanted: int
        ) -> Callable[[Obj | None], bool]:
            return lambda obj: count(obj) >= wanted

        # The first join also waits for the CD's children: not timed. It makes the clique.
        await watch_until(
            self.client,
            COMPUTE_DOMAINS,
            lambda objs: ready_nodes(objs.get("joins")) >= 1,
            namespace=ns,
            what="the first join in status",
        )
        (clique,) = (await self.client.list(CLIQUES, self.driver_namespace, f"{c.CD_LABEL}={uid}"))[
            "items"
        ]
        latencies: list[float] = []
        async with (
            ObjectWatch(
                self.client, CLIQUES, clique["metadata"]["name"], self.driver_namespace
            ) as clique_watch,
            ObjectWatch(self.client, COMPUTE_DOMAINS, "joins", ns) as cd_watch,
        ):
            for size in range(2, changes + 1):
                # Both waits run from before the change, so each takes the first event that
                # shows it (an event's receipt time).
                in_clique = asyncio.create_task(
                    clique_watch.wait(at_least(ready_entries, size), within=120)
                )
                in_status = asyncio.create_task(
                    cd_watch.wait(at_least(ready_nodes, size), within=120)
                )
                await self.client.patch(STATEFULSETS, "joins", {"spec": {"replicas": size}}, ns)
                entry_at, status_at = await in_clique, await in_status
                latencies.append(max(status_at - entry_at, 0.0))
        await self.quiet(user)
        writes = self.writes(mark, user)
        without_events = self.writes(mark, user, events=False)
        by_call = tally(w for w in self.audit.writes(mark, user) if w.verb in WRITE_VERBS)
        await self.client.delete(STATEFULSETS, "joins", ns)
        await watch_until(
            self.client, r.PODS, lambda objs: not objs, namespace=ns, what="pods gone"
        )
        await self.client.delete(COMPUTE_DOMAINS, "joins", ns)
        await watch_until(self.client, COMPUTE_DOMAINS, lambda objs: not objs, namespace=ns)
        await watch_until(
            self.client,
            r.NODES,
            lambda objs: not objs,
            label_selector=f"{c.CD_LABEL}={uid}",
            what="node labels removed",
        )
        # Each join is two entry changes (NotReady, then Ready).
        return {
            "joins": len(latencies),
            "entry_ready_to_status_s": {k: round(v, 4) for k, v in summary(latencies).items()},
            "writes_per_change": round(writes / (2 * changes), 2),
            "writes_per_change_without_events": round(without_events / (2 * changes), 2),
            "writes_by_call": by_call,
        }


def ratios(theirs: Mapping[str, Any], ours: Mapping[str, Any]) -> dict[str, float | None]:
    """NVIDIA's figure divided by ours: above 1 means ours is faster / smaller / cheaper."""

    def ratio(a: float | None, b: float | None) -> float | None:
        if a is None or b is None or b == 0:
            return None
        return round(a / b, 2)

    def get(figures: Mapping[str, Any], *path: str) -> float | None:
        value: Any = figures
        for key in path:
            value = (value or {}).get(key)
        return float(value) if isinstance(value, int | float) else None

    paths = {
        "start_to_first_status": ("start_to_first_status_s",),
        "burst_to_children": ("burst", "to_children_s"),
        "burst_to_status": ("burst", "to_status_s"),
        "deletion": ("burst", "deletion_s"),
        "writes_per_cd": ("burst", "writes_per_cd"),
        "writes_per_cd_without_events": ("burst", "writes_per_cd_without_events"),
        "daemon_change_to_status_p50": ("daemon_changes", "entry_ready_to_status_s", "p50"),
        "daemon_change_to_status_p95": ("daemon_changes", "entry_ready_to_status_s", "p95"),
        "writes_per_daemon_change": ("daemon_changes", "writes_per_change"),
        "writes_per_daemon_change_without_events": (
            "daemon_changes",
            "writes_per_change_without_events",
        ),
        "idle_cpu": ("idle_cpu_s_per_60s",),
        "rss_at_start": ("rss_at_start_mb",),
        "rss_settled": ("rss_settled_mb",),
    }
    return {name: ratio(get(theirs, *path), get(ours, *path)) for name, path in paths.items()}


def report(results: Mapping[str, Any]) -> str:
    keys = [c.key for c in CONTENDERS]
    rows = [
        ("start → first CD status (s)", ("start_to_first_status_s",)),
        ("burst → all children (s)", ("burst", "to_children_s")),
        ("burst → all status (s)", ("burst", "to_status_s")),
        ("deletion → all gone (s)", ("burst", "deletion_s")),
        ("writes per CD", ("burst", "writes_per_cd")),
        ("… of them not Events", ("burst", "writes_per_cd_without_events")),
        ("daemon change → status p50 (s)", ("daemon_changes", "entry_ready_to_status_s", "p50")),
        ("daemon change → status p95 (s)", ("daemon_changes", "entry_ready_to_status_s", "p95")),
        ("writes per daemon change", ("daemon_changes", "writes_per_change")),
        ("… of them not Events", ("daemon_changes", "writes_per_change_without_events")),
        ("idle CPU s per 60 s", ("idle_cpu_s_per_60s",)),
        ("RSS at start (MiB)", ("rss_at_start_mb",)),
        ("RSS settled (MiB)", ("rss_settled_mb",)),
    ]
    lines = ["| figure | " + " | ".join(keys) + " | NVIDIA QPS 5 ÷ ours | NVIDIA QPS 100 ÷ ours |"]
    lines.append("|---" * (len(keys) + 3) + "|")
    names = list(ratios({}, {}).keys())
    for (label, path), name in zip(rows, names, strict=True):
        cells = []
        for key in keys:
            value: Any = results.get(key)
            for part in path:
                value = (value or {}).get(part)
            cells.append("-" if value is None else f"{value:g}")
        quotients = [results["ratios"][k].get(name) for k in ("nvidia-qps5", "nvidia-qps100")]
        shown = ["-" if q is None else f"{q:g}x" for q in quotients]
        lines.append(f"| {label} | " + " | ".join(cells + shown) + " |")
    return "\n".join(lines)
