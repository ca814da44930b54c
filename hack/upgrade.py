"""The upgrade-under-load scenario of ``hack/bench.sh --upgrade-under-load`` (issue 18, item 5).

Our Helm chart (manifests/helm/computedomain-controller) is installed with two replicas and
leader election on into the driver namespace of the local control plane. kwok runs no
containers, so the stand-in kubelet (``computedomain.devcluster.podrunner``) runs each controller
pod's container as a local process, with the pod's environment and a TokenRequest token of its
ServiceAccount bound to the pod (the audit log then names the pod of every request). The fleet
simulator plays NVIDIA's kubelet plugin and IMEX daemons. For the given time ComputeDomains with
1-4 node workloads are created and deleted; meanwhile ``helm upgrade --wait`` moves the release
to a new controller image tag (a pod template change: the Deployment rolls both pods) and later
``helm rollback --wait`` moves it back. Measured:

- two writers at once: from the audit log, the span of successful writes (first to last) of our
  ServiceAccount from each pod; writes inside another pod's span are counted, as are pairs of
  pods whose spans overlap;
- the time without a leader: from every change of the Lease seen by a watch, the gap between the
  old holder's last renewTime and the new holder's acquireTime, per handover; and from the audit
  log, the gap between one pod's last write and the next pod's first;
- IMEX daemons restarted: daemon pods of CDs alive before the upgrade that are alive after the
  rollback keep their UID and restartCount (and their DaemonSets their UID and generation);
- orphans: after every CD is deleted, children, cliques and node labels still naming a CD.

kwok marks a pod Ready as soon as it is scheduled, whatever our process does, so the Deployment
does not wait for a new pod's caches to sync before it deletes an old pod, as a real rollout
would (readiness probe on /readyz). The stand-in kubelet keeps a deleted pod until its process
has exited (SIGTERM: drain, release the Lease), as a node does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio.client import ApiClient

from computedomain.api import constants as c
from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.devcluster.assets import REPO_ROOT
from computedomain.devcluster.audit import AuditedWrite, AuditLog, service_account_user, tally
from computedomain.devcluster.cluster import ensure_namespace
from computedomain.devcluster.controlplane import ControlPlane
from computedomain.devcluster.convergence import names_left_by_deleted_cds
from computedomain.devcluster.handover import LeaseSeen, handovers, pod_of, writer_overlaps
from computedomain.devcluster.helm import find_helm, helm_version
from computedomain.devcluster.podrunner import Kubelet
from computedomain.devcluster.watching import watch_object, watch_objects
from computedomain.devcluster.workloads import Jobs
from computedomain.runtime import objects
from computedomain.runtime import resources as r
from computedomain.runtime.client import KubeClient
from computedomain.runtime.objects import condition
from computedomain.sim.context import SimSettings
from computedomain.sim.faults import FaultSettings
from computedomain.sim.simulator import Simulator

Obj = dict[str, Any]
CHART = REPO_ROOT / "manifests" / "helm" / "computedomain-controller"
RELEASE = "computedomain"
FULLNAME = "computedomain-controller"  # the chart's default fullname: Deployment, SA, Lease
POD_SELECTOR = (
    "app.kubernetes.io/name=computedomain-controller,app.kubernetes.io/component=controller"
)
NAMESPACE = "bench-upgrade"
# The upgrade starts at this share of the churn, the rollback at that one (each after the last).
UPGRADE_AT, ROLLBACK_AT = 0.25, 0.6
STEADY_SIZES = (1, 2, 3, 4)  # CDs created before the upgrade and kept to the end
HELM_TIMEOUT = "300s"
LE_ENV = "LEADER_ELECTION_ENABLED"


@dataclass
class UpgradeUnderLoad:
    client: KubeClient
    sim_client: KubeClient
    admin: ApiClient
    control_plane: ControlPlane
    driver_namespace: str
    nodes: Sequence[Obj]
    overrides: Mapping[str, str]
    seconds: float
    seed: int
    workdir: Path
    say: Callable[[str], None]
    rng: random.Random = field(init=False)
    jobs: Jobs = field(init=False)
    steady: list[str] = field(default_factory=list)
    lease_seen: list[LeaseSeen] = field(default_factory=list)
    timeline: list[dict[str, Any]] = field(default_factory=list)
    helm: Path = field(init=False)
    begin: float = 0.0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)  # noqa: S311 - a reproducible churn
        self.jobs = Jobs(self.client, NAMESPACE, self.nodes, self.rng)

    # -- the run ---------------------------------------------------------------------------------

    async def run(self) -> dict[str, Any]:
        if self.control_plane.audit_log is None:
            raise SystemExit("--upgrade-under-load needs the apiserver's audit log (dev cluster)")
        audit = AuditLog(self.control_plane.audit_log)
        user = service_account_user(self.driver_namespace, FULLNAME)
        self.helm = await asyncio.to_thread(find_helm, build=True)
        app_version = str(yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"])
        old_tag, new_tag = app_version, f"{app_version}-next"
        await ensure_namespace(self.client, NAMESPACE)
        mark = audit.mark()
        self.begin = time.monotonic()
        kubelet = Kubelet(
            self.admin,
            self.control_plane,
            self.driver_namespace,
            POD_SELECTOR,
            self.workdir,
            bind_tokens=True,
        )
        kubelet.start()
        lease_task = asyncio.create_task(self._watch_lease())
        simulator = Simulator(
            self.sim_client,
            SimSettings(
                driver_namespace=self.driver_namespace, faults=FaultSettings(), seed=self.seed
            ),
        )
        sim_task = asyncio.create_task(simulator.run())
        churn_task: asyncio.Task[tuple[int, int]] | None = None
        try:
            await asyncio.wait_for(simulator.wait_ready(), timeout=120)
            env = [{"name": k, "value": v} for k, v in self.overrides.items() if k != LE_ENV]
            await self._helm(
                "install", RELEASE, str(CHART),
                "--set", "controller.replicas=2",
                "--set", "controller.leaderElection.enabled=true",
                "--set", f"controllerImage.tag={old_tag}",
                "--set-json", f"controller.containers.computeDomain.env={json.dumps(env)}",
                "--wait", "--timeout", HELM_TIMEOUT,
            )  # fmt: skip
            await self._rolled(old_tag)
            for size in STEADY_SIZES:
                name = f"steady-{size}"
                if await self.jobs.create(name, size):
                    self.steady.append(name)
            await self._steady_ready()
            stop = asyncio.Event()
            churn_task = asyncio.create_task(self._churn(stop))
            await self._sleep_until(self.seconds * UPGRADE_AT)
            before = await self._daemons()
            self.say(f"upgrade: {len(before['pods'])} IMEX daemon pods before the upgrade")
            upgrade_s = await self._helm(
                "upgrade", RELEASE, str(CHART), "--reuse-values",
                "--set", f"controllerImage.tag={new_tag}", "--wait", "--timeout", HELM_TIMEOUT,
            )  # fmt: skip
            upgrade_rolled_s = await self._rolled(new_tag)
            await self._sleep_until(self.seconds * ROLLBACK_AT)
            between = await self._daemons()
            rollback_s = await self._helm(
                "rollback", RELEASE, "1", "--wait", "--timeout", HELM_TIMEOUT
            )
            rollback_rolled_s = await self._rolled(old_tag)
            await self._sleep_until(self.seconds)
            stop.set()
            created, deleted = await churn_task
            await self._steady_ready()
            after = await self._daemons()
            ours = audit.writes(since=mark, user=user)
            windows = {
                "upgrade": _compare_daemons(before, between, ours),
                "rollback": _compare_daemons(between, after, ours),
                "throughout": _compare_daemons(before, after, ours),
            }
            daemons: dict[str, Any] = {
                key: sum(windows[w][key] for w in ("upgrade", "rollback"))
                for key in ("pods_checked", "pods_replaced", "restarts", "daemonset_writes")
            }
            daemons["windows"] = windows
            self.say(
                f"upgrade: {daemons['pods_checked']} daemon pods checked, "
                f"{daemons['pods_replaced']} replaced, {daemons['restarts']} restarts"
            )
            for name in sorted(self.jobs.held):
                await self.jobs.delete(name)
            orphans = await names_left_by_deleted_cds(self.client, NAMESPACE)
        finally:
            if churn_task is not None and not churn_task.done():
                churn_task.cancel()
                await asyncio.gather(churn_task, return_exceptions=True)
            await kubelet.stop()
            lease_task.cancel()
            sim_task.cancel()
            await asyncio.gather(lease_task, sim_task, return_exceptions=True)
        writes = audit.writes(since=mark, user=user)
        writers = writer_overlaps(writes)
        leader_handovers = handovers(self.lease_seen)
        gaps = [
            h["without_leader_s"] for h in leader_handovers if h["without_leader_s"] is not None
        ]
        pods = [
            {"pod": name, "exit_code": pod.process.returncode} for name, pod in kubelet.pods.items()
        ]
        result = {
            "seconds": self.seconds,
            "helm": helm_version(self.helm),
            "image_tags": [old_tag, new_tag, old_tag],
            "helm_upgrade_s": upgrade_s,
            "helm_rollback_s": rollback_s,
            "upgrade_rolled_s": upgrade_rolled_s,
            "rollback_rolled_s": rollback_rolled_s,
            "timeline": self.timeline,
            "controller_pods": pods,
            "cds_created": created + len(self.steady),
            "cds_deleted_during_churn": deleted,
            "steady_cds": self.steady,
            "controller_writes": len(writes),
            "controller_writes_by_kind": tally(writes),
            "controller_writes_non_2xx": dict(
                sorted(
                    Counter(
                        f"{w.verb} {w.resource} {w.code}" for w in writes if not 200 <= w.code < 300
                    ).items()
                )
            ),
            **writers,
            "lease_changes_seen": len(self.lease_seen),
            "leader_handovers": leader_handovers,
            "without_leader_max_s": max(gaps) if gaps else None,
            "after_release_max_s": max(
                (h["after_release_s"] for h in leader_handovers if h["after_release_s"]),
                default=None,
            ),
            "imex_daemons": daemons,
            "orphans": orphans,
        }
        self.say(
            f"upgrade: {len(writers['overlapping_writer_pairs'])} overlapping writer pairs, "
            f"{writers['writes_inside_another_writers_span']} writes inside another's span, "
            f"{len(leader_handovers)} handovers, max {result['without_leader_max_s']} s "
            f"without a leader, {daemons['pods_replaced']} daemon pods replaced, "
            f"{len(orphans)} orphans"
        )
        return result

    # -- helm and the roll -----------------------------------------------------------------------

    async def _helm(self, *args: str) -> float:
        began = time.monotonic()
        self.timeline.append({"at_s": self._now(), "event": f"helm {args[0]} started"})
        process = await asyncio.create_subprocess_exec(
            str(self.helm), *args, *self._post_renderer(args[0]),
            "--namespace", self.driver_namespace,
            "--kubeconfig", str(self.control_plane.kubeconfig),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await process.communicate()
        took = round(time.monotonic() - began, 1)
        self.timeline.append({"at_s": self._now(), "event": f"helm {args[0]} done"})
        if process.returncode != 0:
            raise RuntimeError(f"helm {' '.join(args)} failed: {err.decode(errors='replace')}")
        self.say(f"upgrade: helm {args[0]} done in {took:.1f}s ({len(out)} bytes of output)")
        return took

    def _post_renderer(self, command: str) -> list[str]:
        """The negative control (``--set LEADER_ELECTION_ENABLED=<false>``): the chart refuses two
        replicas without leader election, so a post-renderer writes the override into the
        rendered Deployment, on install and upgrade (a rollback reuses what was rendered)."""
        value = self.overrides.get(LE_ENV)
        if value is None or command not in ("install", "upgrade"):
            return []
        script = self.workdir / "leader-election-post-renderer"
        script.write_text(
            f"#!{sys.executable}\n"
            "import sys, yaml\n"
            "docs = [d for d in yaml.safe_load_all(sys.stdin) if d]\n"
            "for d in docs:\n"
            "    if d['kind'] == 'Deployment':\n"
            "        for e in d['spec']['template']['spec']['containers'][0]['env']:\n"
            f"            if e['name'] == {LE_ENV!r}:\n"
            f"                e['value'] = {value!r}\n"
            "yaml.safe_dump_all(docs, sys.stdout)\n"
        )
        script.chmod(0o755)
        return ["--post-renderer", str(script)]

    async def _rolled(self, tag: str) -> float:
        """Seconds from now until exactly two controller pods run ``tag`` (the old ones gone:
        their processes exited) and one of them holds the Lease (unless the run switched
        leader election off, ``--set LEADER_ELECTION_ENABLED=false``, to show what two writers
        look like)."""
        began = time.monotonic()

        def current(pods: dict[str, Obj]) -> list[str] | None:
            names = [
                name
                for name, pod in pods.items()
                if pod["spec"]["containers"][0]["image"].endswith(f":{tag}")
                and not pod["metadata"].get("deletionTimestamp")
            ]
            return names if len(names) == 2 and len(pods) == 2 else None

        names: list[str] = await watch_objects(
            self.client,
            r.PODS,
            current,
            namespace=self.driver_namespace,
            label_selector=POD_SELECTOR,
            within=300,
            what=f"two controller pods of {tag}, the old ones gone",
        )
        if self.overrides.get(LE_ENV, "true").lower() == "false":
            return round(time.monotonic() - began, 1)  # the negative control: nobody leads
        await watch_object(
            self.client,
            r.LEASES,
            FULLNAME,
            lambda lease: pod_of(_holder(lease)) in names,
            namespace=self.driver_namespace,
            within=120,
            what=f"the Lease held by one of {names}",
        )
        took = round(time.monotonic() - began, 1)
        self.timeline.append({"at_s": self._now(), "event": f"{tag} rolled out and leading"})
        self.say(f"upgrade: {names} of {tag} run, one leads ({took:.1f}s after helm returned)")
        return took

    async def _watch_lease(self) -> None:
        def record(leases: dict[str, Obj]) -> bool:
            lease = leases.get(FULLNAME)
            if lease is not None:
                seen = LeaseSeen.of(lease, time.time())
                if not seen.same_as(self.lease_seen[-1] if self.lease_seen else None):
                    self.lease_seen.append(seen)
            return False  # record until cancelled

        while True:  # watch_objects relists when a watch ends; its `within` is only a bound
            with contextlib.suppress(TimeoutError):
                await watch_objects(
                    self.client,
                    r.LEASES,
                    record,
                    namespace=self.driver_namespace,
                    field_selector=f"metadata.name={FULLNAME}",
                    within=3600,
                    what="the controller's Lease",
                )

    # -- the churn -------------------------------------------------------------------------------

    async def _churn(self, stop: asyncio.Event) -> tuple[int, int]:
        created = deleted = 0
        pace = 2.0
        while not stop.is_set():
            if await self.jobs.create(f"churn-{created:04d}", self.rng.choice((1, 2, 3, 4))):
                created += 1
            churned = sorted(set(self.jobs.held) - set(self.steady))
            if churned and (len(churned) > 20 or self.rng.random() < 0.4):
                await self.jobs.delete(self.rng.choice(churned))
                deleted += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), pace)  # the churn's pace: time by design
        return created, deleted

    async def _steady_ready(self) -> None:
        def ready(cds: dict[str, Obj]) -> bool:
            return all(
                condition(cds.get(name) or {}, "Ready").get("status") == "True"
                for name in self.steady
            )

        await watch_objects(
            self.client,
            COMPUTE_DOMAINS,
            ready,
            namespace=NAMESPACE,
            within=300,
            what=f"{self.steady} Ready",
        )

    # -- what the upgrade must not touch ---------------------------------------------------------

    async def _daemons(self) -> dict[str, Any]:
        """Daemon pods by (CD uid, node), their DaemonSets, and the CDs alive now."""
        pods = await self.client.list(r.PODS, self.driver_namespace, label_selector=c.CD_LABEL)
        sets = await self.client.list(
            r.DAEMONSETS, self.driver_namespace, label_selector=c.CD_LABEL
        )
        cds = await self.client.list(COMPUTE_DOMAINS, NAMESPACE)
        return {
            "at": time.time(),
            "pods": {
                (objects.labels(p)[c.CD_LABEL], p["spec"].get("nodeName") or ""): (
                    objects.meta(p)["uid"],
                    sum(s.get("restartCount", 0) for s in p["status"].get("containerStatuses", [])),
                )
                for p in pods["items"]
                if not objects.meta(p).get("deletionTimestamp")
            },
            "sets": {
                objects.labels(d)[c.CD_LABEL]: (
                    objects.meta(d)["uid"],
                    objects.meta(d)["generation"],
                )
                for d in sets["items"]
            },
            "cds": {
                objects.meta(cd)["uid"]
                for cd in cds["items"]
                if not objects.meta(cd).get("deletionTimestamp")
            },
        }

    # -- small helpers ---------------------------------------------------------------------------

    def _now(self) -> float:
        return round(time.monotonic() - self.begin, 1)

    async def _sleep_until(self, offset: float) -> None:
        delay = self.begin + offset - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)  # the scenario's schedule: time passing by design


def _compare_daemons(
    before: Mapping[str, Any], after: Mapping[str, Any], writes: Sequence[AuditedWrite]
) -> dict[str, Any]:
    """Daemon pods and DaemonSets of the CDs alive at both snapshots: pods replaced (another
    UID on the node) or restarted, DaemonSets with another UID or generation, and our
    controller's patches and updates of those DaemonSets in between (their names end in the
    CD's UID): an upgrade has nothing to change there."""
    kept = before["cds"] & after["cds"]
    checked = {key: value for key, value in before["pods"].items() if key[0] in kept}
    replaced = [
        f"{cd}@{node}"
        for (cd, node), (uid, _) in checked.items()
        if after["pods"].get((cd, node), ("",))[0] != uid
    ]
    restarts = sum(
        max(0, after["pods"][key][1] - restarts)
        for key, (uid, restarts) in checked.items()
        if after["pods"].get(key, ("",))[0] == uid
    )
    sets_changed = [
        cd for cd, value in before["sets"].items() if cd in kept and after["sets"].get(cd) != value
    ]
    daemonset_writes = sum(
        1
        for w in writes
        if w.resource == "daemonsets"
        and w.verb in ("update", "patch")
        and before["at"] <= w.received <= after["at"]
        and any(w.name.endswith(uid) for uid in kept)
    )
    return {
        "seconds": round(after["at"] - before["at"], 1),
        "cds_alive_at_both_ends": len(kept),
        "pods_checked": len(checked),
        "pods_replaced": len(replaced),
        "replaced": replaced,
        "restarts": restarts,
        "daemonsets_checked": sum(1 for cd in before["sets"] if cd in kept),
        "daemonsets_changed": sets_changed,
        "daemonset_writes": daemonset_writes,
    }


def _holder(lease: Obj | None) -> str:
    return str(((lease or {}).get("spec") or {}).get("holderIdentity") or "")
