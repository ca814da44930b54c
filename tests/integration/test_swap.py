"""Swapping our controller into an NVIDIA DRA driver install and back out, on the real control
plane with the fleet simulator: the steps of docs/operations.md, run as `hack/swap.sh`.

Before: NVIDIA's chart installed by Helm (tests/integration/nvidia_install.py), its CRD, and
ComputeDomains with running workloads whose children NVIDIA's real controller binary wrote and
whose status it projected, as the pod of its chart's Deployment. During and after the swap, and
after the rollback, the apiserver's audit log must show no write to a DaemonSet or
ResourceClaimTemplate by our controller's ServiceAccount, the daemon pods must be the same pods
(UIDs), and every CD must keep `status.status: Ready`. Controller pods, ours and NVIDIA's, are
run by devcluster.podrunner (kwok runs no containers).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import shlex
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from kubernetes_asyncio.client import ApiClient

from computedomain.api import constants as c
from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.devcluster.assets import REPO_ROOT, find_assets
from computedomain.devcluster.audit import AuditedWrite, AuditLog, service_account_user, tally
from computedomain.devcluster.controlplane import ControlPlane
from computedomain.devcluster.crds import CRD_DIR, apply_crds
from computedomain.devcluster.harness import Controllers, RunningController
from computedomain.devcluster.helm import find_helm
from computedomain.devcluster.podrunner import Kubelet
from computedomain.devcluster.upstream import (
    MAIN,
    OLDER_CHART_VERSION,
    TARGET_VERSIONS,
    V041,
    UpstreamBuild,
)
from computedomain.devcluster.watching import Objects, watch_object, watch_objects
from computedomain.domain.crdschema import CD_CRD_NAME
from computedomain.domain.keys import CDKey
from computedomain.kubectl.doctor import CRD_UPGRADE_COMMAND
from computedomain.runtime import resources as r
from computedomain.runtime.client import KubeClient
from computedomain.runtime.objects import condition
from computedomain.runtime.resources import CONFIG_MAPS, Resource
from tests.integration import nvidia_install as nvidia
from tests.integration.conftest import IdentityFactory
from tests.integration.e2e_harness import EndToEnd, end_to_end, pod_ready, pod_running, workload
from tests.kit.controllers import controllers_for, create_cd, stop_after_cleanup, wait_children
from tests.kit.kubectl_plugin import cdom, doctor, lease_held
from tests.kit.release import PROJECT_VERSION
from tests.kit.waiting import eventually

pytestmark = pytest.mark.integration

OUR_SA = "computedomain-controller"
OUR_FIELD_MANAGER = "computedomain-controller"
METHODS = ("helm", "kustomize", "helm-beside")
OUR_PODS = "app.kubernetes.io/name=computedomain-controller"
PROBE_PODS = "app.kubernetes.io/name=computedomain-swap-probe"
CHILD_RESOURCES = ("daemonsets", "resourceclaimtemplates")


# Our controller image as the chart would pull it; the stand-in kubelet runs this checkout.
IMAGE = f"computedomain-controller:{PROJECT_VERSION}"
# NVIDIA's driver namespace where a test installs NVIDIA's chart in the default shape.
NVIDIA_NS = nvidia.FRESH.namespace


async def swap_sh(
    action: str,
    method: str | None,
    kubeconfig: Path,
    wait_namespace: str,
    *,
    args: Sequence[str] = (),
    nvidia_ns: str | None = NVIDIA_NS,
    env: dict[str, str] | None = None,
) -> tuple[int, str, str]:
    """hack/swap.sh, with NS=``nvidia_ns`` (None: the script finds NVIDIA's namespace): its
    exit code, what it said (stderr) and its plan (stdout, written by --dry-run only)."""
    environ = {
        **{k: v for k, v in os.environ.items() if k != "NS"},
        **({"NS": nvidia_ns} if nvidia_ns else {}),
        "KUBECONFIG": str(kubeconfig),
        "KUBECTL": str(find_assets()["kubectl"]),
        "HELM": str(find_helm()),
        "WAIT_NAMESPACES": wait_namespace,
        "TIMEOUT": "120s",
        "IMAGE": IMAGE,
        **(env or {}),
    }
    argv = ([action] if method is None else [action, method]) + list(args)
    process = await asyncio.create_subprocess_exec(
        "bash",
        str(REPO_ROOT / "hack" / "swap.sh"),
        *argv,
        env=environ,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    said, plan = err.decode(errors="replace"), out.decode(errors="replace")
    print(f"--- hack/swap.sh {' '.join(argv)}\n{said}{plan}")
    code = process.returncode
    assert code is not None
    return code, said, plan


async def run_script(
    action: str,
    method: str | None,
    kubeconfig: Path,
    wait_namespace: str,
    *,
    nvidia_ns: str | None = NVIDIA_NS,
    env: dict[str, str] | None = None,
    check: bool = True,
) -> tuple[int, str]:
    """hack/swap.sh (see swap_sh): its exit code and what it said."""
    code, said, _ = await swap_sh(
        action, method, kubeconfig, wait_namespace, nvidia_ns=nvidia_ns, env=env
    )
    if check:
        assert code == 0, f"hack/swap.sh {action} {method or ''} failed:\n{said}"
    return code, said


def projected(cd: dict[str, Any]) -> tuple[str, list[tuple[Any, ...]]]:
    """What a controller projects from the cliques: status.status and status.nodes (a list-map
    by node name: order is no part of it)."""
    status = cd.get("status") or {}
    nodes = sorted(
        (n.get("name"), n.get("ipAddress"), n.get("cliqueID"), n.get("index"), n.get("status"))
        for n in status.get("nodes") or []
    )
    return status.get("status") or "", nodes


def status_writers(cd: dict[str, Any]) -> str:
    """The field managers that own the CD's status.status, i.e. wrote its value last."""
    return ",".join(
        sorted(
            str(entry.get("manager"))
            for entry in cd["metadata"].get("managedFields") or []
            if "f:status" in ((entry.get("fieldsV1") or {}).get("f:status") or {})
        )
    )


class NotReadyWatch:
    """Records every moment a watched CD's status.status is not Ready: who wrote it, and the
    Ready nodes written beside it."""

    def __init__(self, kube: KubeClient, namespace: str, names: set[str]) -> None:
        self.seen: list[tuple[str, Any, str, int]] = []
        self.listed = asyncio.Event()

        def record(cds: Objects) -> bool:
            self.listed.set()
            for name in names:
                cd = cds.get(name)
                status = ((cd or {}).get("status") or {}).get("status")
                if status != c.STATUS_READY:
                    nodes = ((cd or {}).get("status") or {}).get("nodes") or []
                    ready = sum(n.get("status") == c.STATUS_READY for n in nodes)
                    moment = (name, status, status_writers(cd) if cd else "deleted", ready)
                    if moment not in self.seen:
                        self.seen.append(moment)
            return False

        self.task = asyncio.create_task(
            watch_objects(kube, COMPUTE_DOMAINS, record, namespace=namespace, within=3600)
        )

    async def start(self) -> None:
        """Return once the first list is in, so nothing before the swap goes unwatched."""
        listed = asyncio.create_task(self.listed.wait())
        await asyncio.wait({listed, self.task}, return_when=asyncio.FIRST_COMPLETED)
        listed.cancel()
        if self.task.done():
            self.task.result()  # the watch failed: say why

    async def stop(self) -> list[tuple[str, Any, str, int]]:
        """Idempotent (the test's finally calls it again)."""
        if self.task.done() and not self.task.cancelled():
            self.task.result()  # a watch that died watched nothing: fail, do not pass
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        return self.seen


async def snapshot(kube: KubeClient, uids: list[str], ns: str) -> dict[str, Any]:
    """What must not change: DaemonSet generations, RCT resourceVersions, daemon pod UIDs (the
    DaemonSets and pods in NVIDIA's driver namespace ``ns``)."""
    state: dict[str, Any] = {}
    for uid in uids:
        ds = await kube.get(r.DAEMONSETS, c.daemon_name(uid), ns)
        state[f"ds/{uid}"] = ds["metadata"]["generation"]
        rcts = await kube.list(r.RESOURCE_CLAIM_TEMPLATES, label_selector=f"{c.CD_LABEL}={uid}")
        for rct in rcts["items"]:
            state[f"rct/{rct['metadata']['name']}"] = rct["metadata"]["resourceVersion"]
        pods = await kube.list(r.PODS, ns, label_selector=f"{c.CD_LABEL}={uid}")
        for pod in pods["items"]:
            assert pod_ready(pod), f"daemon pod {pod['metadata']['name']} not Ready"
            state[f"pod/{pod['metadata']['name']}"] = pod["metadata"]["uid"]
    return state


def child_writes(writes: list[AuditedWrite], *namespaces: str) -> list[str]:
    """Writes to children in the CDs' namespace and NVIDIA's driver namespace (``namespaces``):
    orphans an earlier test left in a driver namespace of its own are ours to clean up, not
    this test's."""
    return [w.target for w in writes if w.resource in CHILD_RESOURCES and w.namespace in namespaces]


@pytest.fixture
async def e2e(
    kube: KubeClient, control_plane: ControlPlane, namespace: str, nvidia_install: NvidiaInstall
) -> AsyncIterator[EndToEnd]:
    """The fleet of NVIDIA's install: its driver namespace is the release's."""
    driver_namespace = nvidia_install.shape.namespace
    async with end_to_end(kube, control_plane.kubeconfig, namespace, driver_namespace) as env:
        yield env


@dataclass(frozen=True)
class NvidiaInstall:
    build: UpstreamBuild  # whose controller ``nvidia.controller_kubelet`` runs for the pods
    chart: Path  # the release's chart that was installed
    shape: nvidia.Shape


# NVIDIA's releases whose charts the swap meets: v0.4.1 (the build's) and v0.4.0 (chart.sh), whose
# controller is the same code (v0.4.1's binary runs for both), each fresh and upgraded; and main
# at 95932046, v0.5.0-dev (its own chart and binary), fresh: the release an SRE meets today.
V05 = TARGET_VERSIONS[MAIN]
RELEASES = (TARGET_VERSIONS[V041], OLDER_CHART_VERSION)
INSTALLS = [f"{release}-{shape}" for release in RELEASES for shape in sorted(nvidia.SHAPES)]
INSTALLS += [f"{V05}-{nvidia.FRESH.key}"]


@pytest.fixture
async def nvidia_install(
    request: pytest.FixtureRequest,
    kube: KubeClient,
    api_client: ApiClient,
    control_plane: ControlPlane,
    upstream: UpstreamBuild,
) -> AsyncIterator[NvidiaInstall]:
    """NVIDIA's chart installed (its controller Deployment at 1 replica, pods not run), as
    ``request.param`` says: `<release>-<shape>` (indirect parametrization; default v0.4.1's
    chart, fresh)."""
    release, _, shape_key = getattr(request, "param", "v0.4.1-fresh").rpartition("-")
    shape = nvidia.SHAPES[shape_key]
    chart = upstream.chart
    if release == OLDER_CHART_VERSION:
        chart = request.getfixturevalue("older_chart")
    if release == V05:
        upstream = request.getfixturevalue("upstream_main")
        chart = upstream.chart
    helm = find_helm()
    await nvidia.install(kube, chart, helm, control_plane.kubeconfig, shape)
    try:
        yield NvidiaInstall(upstream, chart, shape)
    finally:
        await nvidia.uninstall(api_client, helm, control_plane.kubeconfig, shape)
        await apply_crds(api_client, CRD_DIR)  # later tests need our CRD back, whatever happened


@pytest.mark.parametrize(
    ("nvidia_install", "method"),
    [(install, method) for install in INSTALLS for method in METHODS],
    indirect=["nvidia_install"],
)
async def test_swap_in_and_back_out_leaves_running_imex_domains_alone(
    method: str,
    e2e: EndToEnd,
    kube: KubeClient,
    api_client: ApiClient,
    control_plane: ControlPlane,
    nvidia_install: NvidiaInstall,
    identities: IdentityFactory,
    tmp_path: Path,
) -> None:
    assert control_plane.audit_log is not None
    audit = AuditLog(control_plane.audit_log)
    ns = e2e.namespace
    shape = nvidia_install.shape
    # The script runs as a ServiceAccount of its own, so the audit log has its writes too.
    script_kubeconfig, script_user = await identities("swap")
    nvidia_ns = shape.namespace
    ours_ns = "computedomain-system" if method == "helm-beside" else nvidia_ns
    our_user = service_account_user(ours_ns, OUR_SA)

    # -- before: NVIDIA's controller made the children, the daemons are Ready ---------------
    # NVIDIA's real controller, as the pod of its chart's Deployment.
    nvidia_kubelet = nvidia.controller_kubelet(
        api_client, control_plane, nvidia_install.build, tmp_path / "nvidia", shape
    )
    nvidia_kubelet.start()
    # Not the chart's default 1, so that `out` can only restore it from the record.
    await nvidia.scale_controller(kube, NVIDIA_REPLICAS, shape=shape)
    await e2e.start_simulator()
    jobs = {"job-a": "r00", "job-b": "r01"}
    cds = {}
    for name, rack in jobs.items():
        cds[name] = await e2e.create_cd(name, rct_name=f"{name}-channel", num_nodes=2)
        await e2e.run_workload(workload(name, 2, rct_name=f"{name}-channel", racks=[rack]))
    for name in jobs:
        try:
            await e2e.cd_until(
                name,
                lambda cd: ((cd or {}).get("status") or {}).get("status") == c.STATUS_READY,
                "Ready by NVIDIA's controller",
                within=120,
            )
        except TimeoutError as error:
            logs = "\n".join(pod.log_text()[-4000:] for pod in nvidia_kubelet.pods.values())
            pytest.fail(f"{error}\n--- NVIDIA's controller:\n{logs}")
        await e2e.workload_pods(name, lambda pods: len(pods) == 2, "2 pods")
    uids = [cd["metadata"]["uid"] for cd in cds.values()]
    before = await snapshot(kube, uids, nvidia_ns)
    print(f"before the swap: {before}")
    installed = await install_state(kube, ours_ns, shape=shape)
    # NVIDIA's projection of the daemons' cliques, to compare with ours for the same daemons;
    # taken Ready with both nodes (NVIDIA's controller flips it NotReady with no nodes at times).
    nvidia_status = {}
    for name in jobs:

        def settled(cd: dict[str, Any] | None) -> bool:
            status, nodes = projected(cd or {})
            return status == c.STATUS_READY and len(nodes) == 2

        cd = await e2e.cd_until(name, settled, "Ready with 2 nodes by NVIDIA's controller")
        nvidia_status[name] = projected(cd or {})

    # -- swap in ----------------------------------------------------------------------------
    kubelet = Kubelet(api_client, control_plane, ours_ns, OUR_PODS, tmp_path)
    kubelet.start()
    watch = NotReadyWatch(kube, ns, set(jobs))
    await watch.start()
    mark = audit.mark()
    started = time.monotonic()
    handover = asyncio.create_task(watch_the_handover(kube, shape, ours_ns, kubelet, e2e))
    try:
        # No NS: the script finds NVIDIA's namespace, whichever the shape.
        await run_script("in", method, script_kubeconfig, ns, nvidia_ns=None)
        print(f"swap in: every CD Ready=True {time.monotonic() - started:.1f}s after the start")
        async with asyncio.timeout(60):
            at_scale = await handover
        swap_in = audit.writes(since=mark, user=our_user)
        print(f"writes by {our_user} during swap-in: {tally(swap_in)}")
        assert_no_gap(audit, mark, method, shape, script_user, our_user, at_scale)
        # The CD made during the handover got its children from whichever controller ran.
        assert [
            w
            for w in child_writes(swap_in, ns, nvidia_ns)
            if at_scale.handover_uid not in w and "handover" not in w
        ] == []
        assert await snapshot(kube, uids, nvidia_ns) == before
        await kube.delete(COMPUTE_DOMAINS, "handover", ns)
        await e2e.cd_until("handover", lambda cd: cd is None, "handover gone", within=60)
        # Status is ours now: conditions, and printer columns' counts.
        for name in jobs:
            cd = await kube.get(COMPUTE_DOMAINS, name, ns)
            assert condition(cd, "Ready")["status"] == "True"
            assert cd["status"]["readyNodeCount"] == 2
            # Differential: ours projects the same daemons exactly as NVIDIA's controller did.
            assert projected(cd) == nvidia_status[name], "status.nodes/status differ from NVIDIA's"
        print(f"status.status and status.nodes as NVIDIA's controller wrote them: {nvidia_status}")

        # New CDs work, and one deleted is cleaned up completely.
        mark_new = audit.mark()
        fresh = await e2e.create_cd("job-c", rct_name="job-c-channel", num_nodes=2)
        await e2e.run_workload(workload("job-c", 2, rct_name="job-c-channel", racks=["r02"]))
        await e2e.cd_until(
            "job-c", lambda cd: condition(cd, "Ready").get("status") == "True", "Ready"
        )
        created = child_writes(audit.writes(since=mark_new, user=our_user), ns, nvidia_ns)
        assert len([w for w in created if w.startswith("create")]) == 3, created
        await e2e.scale("job-c", 0)
        await watch_objects(
            kube,
            r.PODS,
            lambda pods: not pods,
            namespace=ns,
            label_selector="e2e.computedomain.dev/workload=job-c",
            what="job-c pods gone",
        )
        await kube.delete(COMPUTE_DOMAINS, "job-c", ns)
        await e2e.cd_until("job-c", lambda cd: cd is None, "gone", within=60)
        fresh_uid = fresh["metadata"]["uid"]
        left = await kube.list(r.DAEMONSETS, label_selector=f"{c.CD_LABEL}={fresh_uid}")
        left_rcts = await kube.list(
            r.RESOURCE_CLAIM_TEMPLATES, label_selector=f"{c.CD_LABEL}={fresh_uid}"
        )
        assert left["items"] == left_rcts["items"] == []
        await e2e.nodes_labelled(fresh_uid, lambda names: not names, "job-c labels gone")

        # The classic accident: NVIDIA's release upgraded without the values change.
        await nvidias_upgrade_leaves_one_writer(
            method, ns, kube, audit, control_plane, nvidia_install, kubelet, nvidia_kubelet
        )

        # -- roll back ----------------------------------------------------------------------
        mark_out = audit.mark()
        # No method: `out` takes the one `in` recorded.
        await run_script("out", None, control_plane.kubeconfig, ns, nvidia_ns=None)
        rollback = audit.writes(since=mark_out, user=our_user)
        print(f"writes by {our_user} during rollback: {tally(rollback)}")
        assert child_writes(rollback, ns, nvidia_ns) == []
        assert await snapshot(kube, uids, nvidia_ns) == before
        assert kubelet.running() == [], "our controller still runs after the rollback"
        for name in jobs:
            cd = await kube.get(COMPUTE_DOMAINS, name, ns)
            # The finalizer is NVIDIA's own name: nothing of ours is left on the CD.
            assert cd["metadata"]["finalizers"] == [c.FINALIZER]
            assert cd["status"]["status"] == c.STATUS_READY
        ours = await kube.list(
            r.SERVICE_ACCOUNTS, ours_ns, field_selector=f"metadata.name={OUR_SA}"
        )
        assert ours["items"] == [], "our ServiceAccount outlived the rollback"
        lease_name = "computedomain-controller" if method == "helm-beside" else shape.lease
        # NVIDIA's controller takes its Lease back; ours holds no Lease any more.
        leases = await kube.list(r.LEASES, ours_ns, field_selector=f"metadata.name={lease_name}")
        for lease in leases["items"]:
            holder = lease["spec"].get("holderIdentity") or ""
            said = [
                f"{pod.name}: {line}"
                for pod in kubelet.pods.values()
                for line in pod.log_text().splitlines()
                if "lease" in line.lower() or "Shutting down" in line
            ]
            assert not holder.startswith(OUR_SA), (
                f"Lease still held by ours: {lease['spec']}; our pods said:\n" + "\n".join(said)
            )
        seen = await watch.stop()
        print(
            f"daemon pods unchanged: {sum(k.startswith('pod/') for k in before)}; "
            "DaemonSet/RCT writes by our controller: "
            f"swap-in {len(child_writes(swap_in, ns, nvidia_ns))}, "
            f"rollback {len(child_writes(rollback, ns, nvidia_ns))}; "
            f"NotReady moments (CD, writer): {seen}"
        )
        # NVIDIA's own controller may flip a CD NotReady for a moment (seen: ~1 s, with no
        # nodes). Ours may write NotReady only as the projection of the cliques, i.e. with fewer
        # than numNodes Ready nodes beside it (seen once: a moment during a swap, cause not yet
        # known); never NotReady beside all nodes Ready, and none may be left NotReady.
        ours_wrote = [m for m in seen if OUR_FIELD_MANAGER in m[2].split(",")]
        unfounded = [m for m in ours_wrote if m[3] >= 2]
        assert unfounded == [], f"ours wrote NotReady beside 2 Ready nodes: {seen}"
        for name in jobs:
            cd = await kube.get(COMPUTE_DOMAINS, name, ns)
            assert cd["status"]["status"] == c.STATUS_READY, name
        assert await install_state(kube, ours_ns, shape=shape) == installed, (
            "out did not restore what in changed"
        )
    finally:
        handover.cancel()
        await asyncio.gather(handover, return_exceptions=True)
        await watch.stop()
        await kubelet.stop()
        # Whatever a failed run left behind goes; then the CDs are ours to finalize (e2e
        # clean-up): NVIDIA's pods must be gone first (its kubelet releases them), or ours
        # stands by.
        await run_script(
            "out", None, control_plane.kubeconfig, ns, nvidia_ns=nvidia_ns, check=False
        )
        await nvidia.scale_controller(kube, 0, shape=shape)
        await nvidia_kubelet.stop()
        await e2e.start_controller()


# What a controller writes for ComputeDomains: while ours stands by, none of these.
DOMAIN_RESOURCES = ("computedomains", "computedomaincliques", *CHILD_RESOURCES)
# The longest time from the last write of NVIDIA's controller to the first write of ours to a
# ComputeDomain or what belongs to it, when there is work waiting (the CD `handover`). Ours is
# up before NVIDIA's stops: it resumes as NVIDIA's pods terminate, or takes the Lease NVIDIA's
# releases on its next try (LEADER_ELECTION_RETRY_PERIOD 2 s, jitter up to 1.2 x).
GAP_BOUND = 5.0


@dataclass(frozen=True)
class AtTheScale:
    """How ours stood the moment NVIDIA's controller Deployment said 0 replicas."""

    ours_ready: int
    ours_replicas: int
    ours_running: int  # processes of our pods (the stand-in kubelet's)
    standby_notes: list[str]  # ConcurrentController Warnings on the CRD from our pods
    handover_uid: str  # the CD made once NVIDIA's pods were gone
    handover_created: float  # when (time.time())


async def watch_the_handover(
    kube: KubeClient, shape: nvidia.Shape, ours_ns: str, kubelet: Kubelet, e2e: EndToEnd
) -> AtTheScale:
    """Waits for the swap to scale NVIDIA's controller to 0 and notes how ours stood then; once
    NVIDIA's pods are gone, creates the CD `handover`, work for whichever controller runs."""

    def scaled(deployment: dict[str, Any] | None) -> bool:
        return deployment is not None and deployment["spec"]["replicas"] == 0

    await watch_object(
        kube,
        nvidia.DEPLOYMENTS,
        shape.deployment,
        scaled,
        namespace=shape.namespace,
        within=600,
        what="NVIDIA's controller scaled to 0",
    )
    ours = await kube.get(nvidia.DEPLOYMENTS, OUR_SA, ours_ns)
    running = kubelet.running()
    instances = {f"{OUR_SA}-{pod.name}" for pod in running}
    events = await kube.list(r.EVENTS, "default", field_selector="reason=ConcurrentController")
    notes = [
        e.get("note", "")
        for e in events["items"]
        if e.get("reportingInstance") in instances
        and (e.get("regarding") or {}).get("name") == CD_CRD_NAME
    ]
    await watch_objects(
        kube,
        r.PODS,
        lambda pods: not pods,
        namespace=shape.namespace,
        label_selector=shape.selector,
        within=600,
        what="NVIDIA's controller pods gone",
    )
    cd = await e2e.create_cd("handover", rct_name="handover-channel", num_nodes=2)
    return AtTheScale(
        ours_ready=(ours.get("status") or {}).get("readyReplicas") or 0,
        ours_replicas=ours["spec"]["replicas"],
        ours_running=len(running),
        standby_notes=notes,
        handover_uid=cd["metadata"]["uid"],
        handover_created=time.time(),
    )


def assert_no_gap(
    audit: AuditLog,
    mark: int,
    method: str,
    shape: nvidia.Shape,
    script_user: str,
    our_user: str,
    at: AtTheScale,
) -> None:
    """From the audit log: ours ran and stood by before the script scaled NVIDIA's controller
    to 0 (it wrote nothing for ComputeDomains until then), and took over within GAP_BOUND of
    NVIDIA's controller's last write."""
    nvidia_user = service_account_user(shape.namespace, shape.controller_sa)
    scale = [
        w
        for w in audit.writes(since=mark, user=script_user)
        if (w.resource, w.subresource, w.name) == ("deployments", "scale", shape.deployment)
        and not w.dry_run
    ]
    assert scale, f"no scale of deployment/{shape.deployment} by {script_user}"
    scaled_at = scale[0].received
    ours = audit.writes(since=mark, user=our_user)
    theirs = audit.writes(since=mark, user=nvidia_user)
    assert theirs, f"no write by NVIDIA's controller ({nvidia_user}) during the swap"
    nvidia_last = max(w.received for w in theirs)
    after = [w for w in ours if w.resource in DOMAIN_RESOURCES and w.received >= scaled_at]
    assert after, "ours wrote nothing for ComputeDomains after NVIDIA's controller stopped"
    first = min(after, key=lambda w: w.received)
    gap = first.received - nvidia_last
    handover = [
        w.received
        for w in (*ours, *theirs)
        if w.resource == "computedomains" and w.name == "handover"
    ]
    waited = min(handover) - at.handover_created if handover else float("inf")
    nvidia_leases = [w.received for w in theirs if (w.resource, w.name) == ("leases", shape.lease)]
    our_leases = [w.received for w in ours if (w.resource, w.name) == ("leases", shape.lease)]
    print(
        f"handover: when NVIDIA's controller was scaled to 0, ours had {at.ours_ready} of "
        f"{at.ours_replicas} pods Ready, {at.ours_running} running, and said "
        f"{[n[:70] for n in at.standby_notes]}; NVIDIA's last write "
        f"{nvidia_last - scaled_at:+.2f}s after the scale, ours' first for ComputeDomains "
        f"{first.received - scaled_at:+.2f}s ({first.target}): gap {gap:.2f}s; the CD made "
        f"once NVIDIA's pods were gone waited {waited:.2f}s for a controller"
    )
    ready = f"{at.ours_ready} of {at.ours_replicas} pods Ready, {at.ours_running} running"
    assert at.ours_replicas >= 1, f"when NVIDIA's controller was scaled to 0, ours had {ready}"
    assert at.ours_ready == at.ours_replicas, f"when NVIDIA's was scaled to 0, ours had {ready}"
    assert at.ours_running >= 1, f"when NVIDIA's was scaled to 0, ours had {ready}"
    early = [w.target for w in ours if w.resource in DOMAIN_RESOURCES and w.received < scaled_at]
    assert early == [], f"ours wrote beside NVIDIA's controller: {early}"
    if method == "helm-beside":  # its own Lease: it leads, sees NVIDIA's pods, stands by
        assert any("so this one stands by" in note for note in at.standby_notes), at
    else:  # NVIDIA's Lease: NVIDIA's controller held it until it stopped; ours waited
        assert [t for t in nvidia_leases if t < scaled_at], "NVIDIA's controller held no Lease"
        assert our_leases, "ours never took the Lease"
        assert min(our_leases) >= max(nvidia_leases), "ours took the Lease before NVIDIA's gave it"
    assert gap <= GAP_BOUND, f"{gap:.2f}s between NVIDIA's last write and ours' first"


async def nvidias_upgrade_leaves_one_writer(
    method: str,
    namespace: str,
    kube: KubeClient,
    audit: AuditLog,
    control_plane: ControlPlane,
    install: NvidiaInstall,
    kubelet: Kubelet,
    nvidia_kubelet: Kubelet,
) -> None:
    """`helm upgrade` of NVIDIA's release without controller.replicas=0 runs NVIDIA's real
    controller beside ours again. Never two writers: where ours elects on NVIDIA's Lease (helm,
    kustomize) NVIDIA's waits for it and ours keeps working; on a Lease of its own
    (helm-beside) ours stands by while NVIDIA's leads. The upgrade with the values change
    ends it."""
    shape = install.shape
    ns = shape.namespace
    nvidia_user = service_account_user(ns, shape.controller_sa)
    our_user = service_account_user(
        "computedomain-system" if method == "helm-beside" else ns, OUR_SA
    )
    shared_lease = method != "helm-beside"
    mark = audit.mark()
    # The audit log may get a request's line after its effect was seen (job-c's last patch,
    # once): the window is also bounded by when the apiserver received each request.
    window_start = time.time()
    await nvidia.upgrade(install.chart, find_helm(), control_plane.kubeconfig, shape=shape)
    running = await watch_objects(
        kube,
        r.PODS,
        lambda pods: [p for p in pods.values() if pod_running(p)],
        namespace=ns,
        label_selector=shape.selector,
        what="NVIDIA's controller pod running after helm upgrade",
    )
    names = {pod["metadata"]["name"] for pod in running}
    # From here NVIDIA's controller runs beside ours. Before, ours was the only controller and
    # may still have been writing (a CI run saw it write conditions 0.3 s into the upgrade, 2 s
    # before it saw NVIDIA's new pod).
    beside_from = time.time()

    def warned(events: Objects) -> list[dict[str, Any]] | None:
        # Said once for the cluster, on the CRD (Events of cluster-scoped objects: default).
        found = [
            e
            for e in events.values()
            if e.get("reason") == "ConcurrentController"
            and (e.get("regarding") or {}).get("name") == CD_CRD_NAME
            and any(f"(pod {ns}/{name})" in e.get("note", "") for name in names)
        ]
        return found or None

    events = await watch_objects(
        kube, r.EVENTS, warned, namespace="default", what="ConcurrentController on the CRD"
    )
    print(f"after helm upgrade of NVIDIA's release, Warning event: {events[0]['note']}")
    assert events[0]["type"] == "Warning"
    assert f"scale deployment {shape.deployment} --replicas=0" in events[0]["note"]
    assert ("same Lease" in events[0]["note"]) is shared_lease
    # Recorded as the stand-by begins: from here ours writes nothing (unless on one Lease).
    assert ("so this one stands by" in events[0]["note"]) is not shared_lease
    # Counted only when it can write beside ours (the alert's input).
    assert await concurrent_gauge(kubelet) == (0.0 if shared_lease else 1.0)

    # NVIDIA's process got as far as its leader election: waiting, or leading.
    wanted = "Leader election candidate registered" if shared_lease else "Became leader"

    async def nvidia_says() -> bool:
        return any(wanted in pod.log_text() for pod in nvidia_kubelet.running())

    await eventually(nvidia_says, within=60, what=f"NVIDIA's controller log: {wanted}")
    # A new CD meanwhile is made and then finalized by one controller: the one that writes.
    cd = await create_cd(kube, namespace, "job-d", rct_name="job-d-channel")
    await wait_children(kube, cd, ns, "job-d-channel", within=60)
    await kube.delete(COMPUTE_DOMAINS, "job-d", namespace)
    await watch_object(
        kube, COMPUTE_DOMAINS, "job-d", lambda o: o is None, namespace=namespace, within=60
    )
    end = audit.mark()
    values = {"controller.replicas": 0}
    await nvidia.upgrade(install.chart, find_helm(), control_plane.kubeconfig, values, shape)
    # Waits: the Deployment says 0 and no pod is left.
    await nvidia.scale_controller(kube, 0, shape=shape)

    def writes_to_domains(user: str, since: float) -> list[str]:
        return [
            w.target
            for w in audit.writes(since=mark, user=user, until=end)
            if w.resource in ("computedomains", "computedomaincliques", *CHILD_RESOURCES)
            and w.received >= since
        ]

    nvidia_writes = writes_to_domains(nvidia_user, window_start)
    # Where ours stands by, only what it wrote once NVIDIA's controller ran counts against it.
    our_writes = writes_to_domains(our_user, window_start if shared_lease else beside_from)
    print(f"while both ran: NVIDIA's writes {nvidia_writes}, ours {our_writes}")
    uid = cd["metadata"]["uid"]
    writer = our_writes if shared_lease else nvidia_writes
    assert f"create daemonsets {ns}/{c.daemon_name(uid)}" in writer
    assert f"delete daemonsets {ns}/{c.daemon_name(uid)}" in writer
    if shared_lease:
        assert nvidia_writes == [], "NVIDIA's controller wrote without holding the Lease"
        upgraded = [pod for pod in nvidia_kubelet.pods.values() if pod.name in names]
        assert not any("Became leader" in pod.log_text() for pod in upgraded)
    else:
        ours = [
            f"{w.target} -> {w.code} received {w.received - beside_from:+.3f}s"
            for w in audit.writes(since=mark, user=our_user, until=end)
            if w.resource in ("computedomains", "computedomaincliques", *CHILD_RESOURCES)
        ]
        logs = "\n".join(pod.log_text()[-6000:] for pod in kubelet.pods.values())
        assert our_writes == [], f"ours wrote while standing by: {ours}\n{logs}"

    async def gauge_back_to_zero() -> bool:
        return await concurrent_gauge(kubelet) == 0.0

    await eventually(gauge_back_to_zero, within=30, what="computedomain_concurrent_controllers 0")


async def concurrent_gauge(kubelet: Kubelet) -> float:
    values = []
    async with aiohttp.ClientSession() as session:
        for pod in kubelet.running():
            assert pod.metrics_url is not None
            async with session.get(pod.metrics_url) as response:
                text = await response.text()
            for line in text.splitlines():
                if line.startswith("computedomain_concurrent_controllers "):
                    values.append(float(line.split()[1]))
    return max(values, default=-1.0)


@pytest.mark.usefixtures("nvidia_install")
async def test_outdated_crd_is_named_and_only_upstream_status_is_written(
    kube: KubeClient, api_client: ApiClient, control_plane: ControlPlane, namespace: str
) -> None:
    """NVIDIA's chart never upgrades CRDs: with its CRD installed, our status fields are pruned.
    The controller says so (log, gauge, one Warning on the CRD), writes status.status and
    status.nodes only, and does not loop writing what the apiserver drops; after the CRD
    upgrade the conditions appear without a restart."""
    await nvidia.scale_controller(kube, 0)  # swapped: NVIDIA's controller is at 0, ours works
    factory = controllers_for(control_plane.kubeconfig, NVIDIA_NS)
    logged = LogCapture("computedomain")
    # Events regarding a cluster-scoped object live in `default`; earlier tests may have left some.
    earlier = await kube.list(r.EVENTS, "default", field_selector="reason=CRDOutdated")
    seen = {e["metadata"]["name"] for e in earlier["items"]}
    try:
        running = await factory.start()
        assert running.process.coexistence.missing == (
            "conditions",
            "observedGeneration",
            "nodeCount",
            "readyNodeCount",
            "cliqueCount",
        )
        assert any("CRD is outdated" in line for line in logged.lines)
        assert gauge(running, "computedomain_crd_missing_status_fields") == 5.0
        await create_cd(kube, namespace, "upstream-only")

        def ready(cd: dict[str, Any] | None) -> bool:
            return ((cd or {}).get("status") or {}).get("status") == c.STATUS_READY

        cd = await watch_object(
            kube, COMPUTE_DOMAINS, "upstream-only", ready, namespace=namespace, within=30.0
        )
        assert cd is not None
        assert "conditions" not in cd["status"]

        def outdated(events: Objects) -> list[dict[str, Any]] | None:
            found = [
                e
                for e in events.values()
                if e.get("reason") == "CRDOutdated" and e["metadata"]["name"] not in seen
            ]
            return found or None

        events = await watch_objects(
            kube, r.EVENTS, outdated, namespace="default", what="a CRDOutdated event"
        )
        assert len(events) == 1
        assert events[0]["regarding"]["kind"] == "CustomResourceDefinition"
        assert events[0]["regarding"]["name"] == "computedomains.resource.nvidia.com"
        assert events[0]["type"] == "Warning"
        assert CRD_UPGRADE_COMMAND in events[0]["note"]
        print(f"Warning CRDOutdated: {events[0]['note']}")

        # No write loop: a reconcile of the unchanged CD writes nothing.
        await running.wait_idle()
        per_domain = await kube.list(r.EVENTS, namespace, field_selector="reason=CRDOutdated")
        assert per_domain["items"] == [], "one Event for the cluster, none per ComputeDomain"
        before = running.writes()
        running.process.queue.add(CDKey(namespace, "upstream-only"))
        await running.wait_idle()
        assert running.writes() == before

        await apply_crds(api_client, CRD_DIR)

        def has_conditions(cd: dict[str, Any] | None) -> bool:
            return condition(cd, "ChildrenReady").get("status") == "True"

        await watch_object(
            kube, COMPUTE_DOMAINS, "upstream-only", has_conditions, namespace=namespace, within=30.0
        )
        assert gauge(running, "computedomain_crd_missing_status_fields") == 0.0
    finally:
        logged.close()
        # A running replica finalizes the CD, so it does not hang on our finalizer.
        await stop_after_cleanup(factory, kube, namespace)


async def test_doctor_on_nvidias_install_names_what_the_swap_must_fix(
    nvidia_install: NvidiaInstall,
    kube: KubeClient,
    api_client: ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    tmp_path: Path,
) -> None:
    """NVIDIA's v0.4.1 chart as installed: its CRD lacks our status fields and its controller
    runs. `kubectl cdom doctor` (no flags: it finds the driver namespace from NVIDIA's kubelet
    plugin) names both with their fixes and passes what the chart provides (DeviceClasses, the
    daemon ServiceAccount and its ClusterRole); after the swap's steps (CRDs upgraded, NVIDIA's
    controller at 0, ours leading) those pass too, and an IMEX daemon image other than the
    kubelet plugin's is named."""
    shape = nvidia_install.shape
    nvidia_kubelet = nvidia.controller_kubelet(
        api_client, control_plane, nvidia_install.build, tmp_path / "nvidia", shape
    )
    nvidia_kubelet.start()
    factory = controllers_for(control_plane.kubeconfig, NVIDIA_NS)
    try:
        await nvidia.scale_controller(kube, 1, shape=shape)
        code, checks = await doctor(control_plane.kubeconfig)
        print(f"$ kubectl cdom doctor\n{(await cdom(control_plane.kubeconfig, 'doctor'))[1]}")
        assert code == 1
        assert checks["CRDs"]["state"] == "fail"
        assert "lacks status fields conditions, observedGeneration" in checks["CRDs"]["detail"]
        assert checks["CRDs"]["fix"] == CRD_UPGRADE_COMMAND
        second = checks["second controller"]
        assert second["state"] == "fail"
        assert f"scale deployment {shape.deployment} --replicas=0" in second["fix"]
        for name in ("DRA API", "DeviceClasses", "daemon RBAC"):
            assert checks[name]["state"] == "ok", checks[name]
        assert checks["controller"]["state"] == "fail"  # ours is not installed yet
        # describe of a domain says the same first: NVIDIA's controller manages it now.
        await create_cd(kube, namespace, "before")
        code, out, _ = await cdom(control_plane.kubeconfig, "describe", "before", "-n", namespace)
        assert code == 1
        link = out.splitlines()[-3:]
        assert link[0] == "First broken link: controller"
        assert link[1].strip().startswith(f"NVIDIA's controller runs (pod {shape.namespace}/")
        assert f"scale deployment {shape.deployment} --replicas=0" in link[2]

        await apply_crds(api_client, CRD_DIR)
        await nvidia.scale_controller(kube, 0, shape=shape)
        await factory.start(LEADER_ELECTION_ENABLED="true")

        await watch_object(
            kube,
            r.LEASES,
            "nvidia-compute-domain-controller",
            lease_held,
            namespace=NVIDIA_NS,
            within=30,
            what="our Lease held",
        )
        _, checks = await doctor(control_plane.kubeconfig)
        assert checks["controller"]["state"] == "ok", checks["controller"]
        print(json.dumps(checks, indent=1))
        lease = f"{NVIDIA_NS}/nvidia-compute-domain-controller"
        assert f"leads on Lease {lease}" in checks["controller"]["detail"]
        for name in ("CRDs", "second controller", "daemon RBAC"):
            assert checks[name]["state"] == "ok", checks[name]

        # Ours gives new daemons v0.4.0's image (the test default), the plugin runs v0.4.1's.
        cd = await create_cd(kube, namespace, "imaged", rct_name="imaged-channel")
        await wait_children(kube, cd, NVIDIA_NS, "imaged-channel", within=60)
        _, checks = await doctor(control_plane.kubeconfig)
        image = checks["daemon image"]
        assert image["state"] == "fail", image
        assert image["detail"].startswith(f"IMEX daemons run {c.NVIDIA_DRIVER_IMAGE}, but ")
        assert image["fix"].startswith("set the controller's IMAGE_NAME to ")
    finally:
        await stop_after_cleanup(factory, kube, namespace)
        await nvidia_kubelet.stop()


async def test_nvidias_release_upgraded_to_another_driver_image_is_reported(
    nvidia_install: NvidiaInstall,
    kube: KubeClient,
    control_plane: ControlPlane,
) -> None:
    """After a swap ours gives new IMEX daemons the image NVIDIA's controller had (IMAGE_NAME);
    `helm upgrade` of NVIDIA's release to another driver image moves its kubelet plugin on.
    The drift is reported (gauge, one Warning on the plugin's DaemonSet) and the Warning says
    what to set."""
    await nvidia.scale_controller(kube, 0)  # swapped: NVIDIA's controller is at 0, ours works
    container = await kube.get(nvidia.DEPLOYMENTS, c.NVIDIA_CONTROLLER_DEPLOYMENT, NVIDIA_NS)
    image = container["spec"]["template"]["spec"]["containers"][0]["image"]
    factory = controllers_for(control_plane.kubeconfig, NVIDIA_NS)
    try:
        running = await factory.start(IMAGE_NAME=image)
        await running.wait_idle()
        assert gauge(running, "computedomain_daemon_image_drift") == 0.0
        newer = image.rsplit(":", 1)[0] + ":v0.4.99"
        values = {"controller.replicas": 0, "image.tag": "v0.4.99"}
        await nvidia.upgrade(nvidia_install.chart, find_helm(), control_plane.kubeconfig, values)

        def drift_warned(events: Objects) -> list[dict[str, Any]] | None:
            # This one: an earlier test's controller (IMAGE_NAME v0.4.0) saw v0.4.1's plugin.
            found = [
                e
                for e in events.values()
                if e.get("reason") == "DaemonImageDrift" and f"runs {newer}," in e.get("note", "")
            ]
            return found or None

        events = await watch_objects(
            kube, r.EVENTS, drift_warned, namespace=NVIDIA_NS, what="a DaemonImageDrift event"
        )
        print(f"Warning DaemonImageDrift: {events[0]['note']}")
        assert events[0]["type"] == "Warning"
        assert events[0]["regarding"]["kind"] == "DaemonSet"
        assert (
            f"runs {newer}, but the IMEX daemons of new ComputeDomains get {image}"
            in (events[0]["note"])
        )
        assert gauge(running, "computedomain_daemon_image_drift") == 1.0
    finally:
        await factory.stop_all()


def gauge(running: RunningController, name: str) -> float:
    value = running.registry.get_sample_value(name)
    assert value is not None, f"{name} not exported"
    return value


class LogCapture(logging.Handler):
    def __init__(self, logger: str) -> None:
        super().__init__()
        self.lines: list[str] = []
        self.logger = logging.getLogger(logger)
        self.logger.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def close(self) -> None:
        self.logger.removeHandler(self)
        super().close()


# -- what `in` changes and `out` restores; failures before and after the first change ---------

NVIDIA_REPLICAS = 2
OWN_NS = "computedomain-system"
ROLES = Resource("rbac.authorization.k8s.io", "v1", "roles", "Role", namespaced=True)
ROLE_BINDINGS = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True)
SERVICES = Resource("", "v1", "services", "Service", namespaced=True)
SECRETS = Resource("", "v1", "secrets", "Secret", namespaced=True)
PDBS = Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", namespaced=True)
# What a swap can create or change, by namespace (Helm's release Secrets included).
NAMESPACED = (
    nvidia.DEPLOYMENTS,
    r.SERVICE_ACCOUNTS,
    ROLES,
    ROLE_BINDINGS,
    SERVICES,
    SECRETS,
    CONFIG_MAPS,
    PDBS,
    r.LEASES,
)
CLUSTER_WIDE = (nvidia.CLUSTER_ROLES, nvidia.CLUSTER_ROLE_BINDINGS, nvidia.CRDS)


async def install_state(
    kube: KubeClient, ours_ns: str, *, versions: bool = False, shape: nvidia.Shape = nvidia.FRESH
) -> dict[str, Any]:
    """The objects a swap may touch, by name (and resourceVersion with ``versions``), and NVIDIA's
    controller Deployment's replicas, labels and annotations."""
    deployment = await kube.get(nvidia.DEPLOYMENTS, shape.deployment, shape.namespace)
    meta = deployment["metadata"]
    state: dict[str, Any] = {
        "nvidia": {
            "replicas": deployment["spec"]["replicas"],
            "labels": meta.get("labels"),
            "annotations": meta.get("annotations"),
            "resourceVersion": meta["resourceVersion"] if versions else None,
        },
        "namespaces": sorted(
            n["metadata"]["name"]
            for n in (await kube.list(r.NAMESPACES))["items"]
            if n["metadata"]["name"] in (shape.namespace, ours_ns)
        ),
    }

    def names(items: list[dict[str, Any]]) -> dict[str, str | None]:
        return {
            i["metadata"]["name"]: i["metadata"]["resourceVersion"] if versions else None
            for i in items
        }

    # NVIDIA's release history is the SRE's (a helm upgrade of it adds one), not the swap's.
    nvidia_history = f"sh.helm.release.v1.{shape.release}."
    for ns in sorted({shape.namespace, ours_ns}):
        for res in NAMESPACED:
            items = (await kube.list(res, ns))["items"]
            items = [i for i in items if not i["metadata"]["name"].startswith(nvidia_history)]
            state[f"{res.plural} in {ns}"] = names(items)
    for res in CLUSTER_WIDE:
        state[res.plural] = names((await kube.list(res))["items"])
    return state


@dataclass(frozen=True)
class Fault:
    """The ``nth`` call of ``tool`` whose arguments match ``match`` (an extended regex) fails,
    or prints ``stdout`` instead of running; every other call is the real tool's."""

    tool: str  # kubectl or helm
    match: str
    nth: int = 1
    stdout: str | None = None

    def install(self, directory: Path) -> dict[str, str]:
        """Writes the stand-in; returns the environment that puts it in place."""
        real = find_assets()["kubectl"] if self.tool == "kubectl" else find_helm()
        path = directory / f"faulty-{self.tool}"
        count = directory / f"faulty-{self.tool}.count"
        if self.stdout is None:
            answer = 'echo "injected failure: $*" >&2; exit 1'
        else:
            answer = f"printf '%s\\n' {shlex.quote(self.stdout)}; exit 0"
        path.write_text(
            "#!/usr/bin/env bash\n"
            f"re={shlex.quote(self.match)}\n"
            'if [[ "$*" =~ $re ]]; then\n'
            f"  n=$(( $(cat {count} 2>/dev/null || echo 0) + 1 ))\n"
            f'  echo "$n" > {count}\n'
            f'  if [ "$n" -eq {self.nth} ]; then {answer}; fi\n'
            "fi\n"
            f'exec {shlex.quote(str(real))} "$@"\n'
        )
        path.chmod(0o755)
        return {self.tool.upper(): str(path)}


PREFLIGHT_FAILURES = {
    "no-image": ("helm", {"IMAGE": ""}, None, "preflight: IMAGE is not set"),
    "old-cluster": (
        "helm",
        {},
        Fault("kubectl", r"^get --raw /version$", stdout='{"gitVersion": "v1.20.0"}'),
        "preflight: the cluster runs Kubernetes 1.20.0; our chart needs >=",
    ),
    "rbac": (
        "helm-beside",
        {},
        Fault("kubectl", r"^auth can-i patch deployments -n \S+ --subresource scale$"),
        f"preflight: not allowed to: patch deployments/scale in {NVIDIA_NS} (kubectl auth can-i)",
    ),
    "crd-dry-run": (
        "helm",
        {},
        Fault("kubectl", r"^apply --server-side --force-conflicts --dry-run=server -f crds/$"),
        "preflight (server-side dry run of the CRDs) failed (above); nothing was changed",
    ),
    "helm-dry-run": (
        "helm",
        {},
        Fault("helm", r"--dry-run=server$"),
        "preflight (server-side dry run of our install) failed (above); nothing was changed",
    ),
    "kustomize-dry-run": (
        "kustomize",
        {},
        Fault("kubectl", r"^apply --dry-run=server -f \S+/ours\.yaml$"),
        "preflight (server-side dry run of our install) failed (above); nothing was changed",
    ),
}


@pytest.mark.usefixtures("nvidia_install")
@pytest.mark.parametrize("case", list(PREFLIGHT_FAILURES))
async def test_a_failed_preflight_changes_nothing(
    case: str, kube: KubeClient, control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    method, env, fault, says = PREFLIGHT_FAILURES[case]
    ours_ns = OWN_NS if method == "helm-beside" else NVIDIA_NS
    await nvidia.scale_controller(kube, NVIDIA_REPLICAS)
    before = await install_state(kube, ours_ns, versions=True)
    env = {**env, **(fault.install(tmp_path) if fault else {})}
    code, text = await run_script(
        "in", method, control_plane.kubeconfig, namespace, env=env, check=False
    )
    assert code != 0
    assert text.splitlines()[-1] == f"swap.sh: {says}" or says in text.splitlines()[-1], text
    assert await install_state(kube, ours_ns, versions=True) == before


@pytest.mark.usefixtures("nvidia_install")
async def test_in_refuses_a_second_swap(
    kube: KubeClient, control_plane: ControlPlane, namespace: str
) -> None:
    await nvidia.scale_controller(kube, NVIDIA_REPLICAS)
    body = {"metadata": {"annotations": {"computedomain.dev/swap-method": "helm"}}}
    await kube.patch(nvidia.DEPLOYMENTS, c.NVIDIA_CONTROLLER_DEPLOYMENT, body, NVIDIA_NS)
    # Names, replicas and annotations, not resourceVersions: the Deployment controller may
    # still write the status after the annotation patch (seen once: 3065 -> 3068).
    before = await install_state(kube, NVIDIA_NS)
    code, text = await run_script("in", "helm", control_plane.kubeconfig, namespace, check=False)
    assert code != 0
    assert "records a swap already" in text.splitlines()[-1], text
    assert await install_state(kube, NVIDIA_NS) == before


@pytest.mark.usefixtures("nvidia_install")
async def test_an_image_no_node_can_pull_fails_the_preflight_in_one_line(
    kube: KubeClient, control_plane: ControlPlane, namespace: str
) -> None:
    """The image probe on a node whose kubelet cannot pull the image. kwok marks pods Running
    without pulling anything, so the probe goes (PROBE_NODE) to a Node of this test that kwok
    does not manage, and this test plays its kubelet: it writes the pod's status through the
    status subresource as a kubelet does when the registry says no. The script says so in one
    line, deletes the probe pod and changes nothing else."""
    await nvidia.scale_controller(kube, NVIDIA_REPLICAS)
    node = f"swap-probe-{uuid.uuid4().hex[:6]}"
    await kube.create(r.NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}})
    image = "registry.example.com/acme/computedomain-controller:no-such-tag"
    refusal = (
        f'failed to pull and unpack image "{image}": failed to resolve reference "{image}": '
        f"{image}: not found"
    )

    async def kubelet() -> str:
        def on_node(pods: Objects) -> list[dict[str, Any]] | None:
            return [p for p in pods.values() if p["spec"].get("nodeName") == node] or None

        (pod,) = await watch_objects(
            kube,
            r.PODS,
            on_node,
            namespace=NVIDIA_NS,
            label_selector=PROBE_PODS,
            within=60,
            what=f"the probe pod on {node}",
        )
        not_ready = {"reason": "ContainersNotReady", "message": "containers with unready status"}
        status = {
            "phase": "Pending",
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Initialized", "status": "True"},
                {"type": "Ready", "status": "False", **not_ready},
                {"type": "ContainersReady", "status": "False", **not_ready},
            ],
            "containerStatuses": [
                {
                    "name": "probe",
                    "image": image,
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "started": False,
                    "state": {"waiting": {"reason": "ErrImagePull", "message": refusal}},
                }
            ],
        }
        name = pod["metadata"]["name"]
        await kube.patch(r.PODS, name, {"status": status}, NVIDIA_NS, subresource="status")
        return str(name)

    before = await install_state(kube, NVIDIA_NS, versions=True)
    playing = asyncio.create_task(kubelet())
    try:
        env = {"IMAGE": image, "PROBE_NODE": node, "TIMEOUT": "60s"}
        code, text = await run_script(
            "in", "helm", control_plane.kubeconfig, namespace, env=env, check=False
        )
        async with asyncio.timeout(5):
            probe = await playing
    finally:
        playing.cancel()
        await asyncio.gather(playing, return_exceptions=True)
        await kube.delete(r.NODES, node)
    assert code != 0
    lines = text.splitlines()
    assert lines[-1] == (
        f"swap.sh: preflight: image {image} cannot be pulled on node {node}: ErrImagePull: "
        f"{refusal}"
    ), text
    assert len(lines) == 2, text  # NVIDIA's controller as found, then the one line
    assert await install_state(kube, NVIDIA_NS, versions=True) == before
    left = await kube.list(r.PODS, NVIDIA_NS, field_selector=f"metadata.name={probe}")
    assert left["items"] == [], "the probe pod outlived the preflight"


# Step of `swap.sh in` -> (method, the fault; None: nothing runs our pods).
ROLLBACKS = {
    "1-record": (
        "helm",
        Fault("kubectl", r" annotate deployment \S+ computedomain\.dev/swap-replicas="),
    ),
    "2-install-helm": ("helm", Fault("helm", r"^upgrade --install .* --wait ")),
    # helm-beside: `in` created OWN_NS, and the roll-back deletes it.
    "2-install-beside": ("helm-beside", Fault("helm", r"^upgrade --install .* --wait ")),
    "2-install-kustomize": ("kustomize", Fault("kubectl", r"^apply -f \S+/ours\.yaml$")),
    # Ours on a Lease of its own never leads (nothing runs it), so it never says it stands by.
    "3-no-standby": ("helm-beside", None),
    "4-scale-nvidia": ("helm", Fault("kubectl", r" scale deployment \S+ --replicas=0$")),
    "4-nvidia-pods": (
        "helm",
        Fault("kubectl", r" wait --for=delete pod -l dra-driver-nvidia-gpu-"),
    ),
    # On NVIDIA's Lease, held by NVIDIA's controller: step 3 sees ours' pods Ready (kwok says
    # so) and waiting; once NVIDIA's controller is gone nothing of ours takes the Lease.
    "5-no-lease": ("helm", None),
    "6-crds": ("helm", Fault("kubectl", r"^apply --server-side --force-conflicts -f crds/$")),
    # After the CRDs were applied: the roll-back puts NVIDIA's back.
    "7-not-reconciled": ("helm", Fault("kubectl", r" wait computedomains --all ")),
}


async def crd_state(kube: KubeClient) -> dict[str, tuple[str, Any]]:
    """Each of our CRDs: its resourceVersion and spec."""
    state = {}
    for crd in (await kube.list(nvidia.CRDS))["items"]:
        if crd["spec"]["group"] == c.GROUP:
            state[crd["metadata"]["name"]] = (crd["metadata"]["resourceVersion"], crd["spec"])
    return state


@pytest.mark.parametrize("case", list(ROLLBACKS))
async def test_a_failure_at_any_step_puts_nvidia_back_as_recorded(
    case: str,
    nvidia_install: NvidiaInstall,
    kube: KubeClient,
    api_client: ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    tmp_path: Path,
) -> None:
    method, fault = ROLLBACKS[case]
    step = case.split("-")[0]
    ours_ns = OWN_NS if method == "helm-beside" else NVIDIA_NS
    # NVIDIA's real controller runs in its pods, before and after.
    nvidia_kubelet = nvidia.controller_kubelet(
        api_client, control_plane, nvidia_install.build, tmp_path / "nvidia"
    )
    nvidia_kubelet.start()
    await nvidia.scale_controller(kube, NVIDIA_REPLICAS)

    async def nvidia_leads() -> bool:
        running = nvidia_kubelet.running()
        leading = any("Became leader" in pod.log_text() for pod in running)
        return len(running) == NVIDIA_REPLICAS and leading

    # Its Lease is part of the state the roll-back must leave as it was.
    await eventually(nvidia_leads, within=60, what="NVIDIA's controller running and leading")
    before = await install_state(kube, ours_ns)
    crds = await crd_state(kube)
    env = {"TIMEOUT": "60s"}
    if fault is None:
        env["TIMEOUT"] = "15s"  # the wait for ours: nothing runs our pods
    else:
        env.update(fault.install(tmp_path))
    kubelet = Kubelet(api_client, control_plane, ours_ns, OUR_PODS, tmp_path)
    factory = controllers_for(control_plane.kubeconfig, NVIDIA_NS)
    if case == "7-not-reconciled":
        await create_cd(kube, namespace, "idle", num_nodes=2)  # something to wait for
    if fault is not None:
        kubelet.start()
    try:
        code, text = await run_script(
            "in", method, control_plane.kubeconfig, namespace, env=env, check=False
        )
        assert code != 0
        # NVIDIA's controller as recorded (and running: the script waited for its rollout),
        # nothing of ours left, the record gone; then the one line that says so.
        assert await install_state(kube, ours_ns) == before
        # The CRDs: untouched before step 6; after it, NVIDIA's put back as they were.
        after = await crd_state(kube)
        assert {name: spec for name, (_, spec) in after.items()} == {
            name: spec for name, (_, spec) in crds.items()
        }
        if int(step) < 7:  # at step 6 the apply itself failed
            assert after == crds, "a CRD was written although the swap never applied ours"
        probes = await kube.list(r.PODS, label_selector=PROBE_PODS)
        assert probes["items"] == [], "the probe pod outlived the swap"
        deployment = await kube.get(nvidia.DEPLOYMENTS, c.NVIDIA_CONTROLLER_DEPLOYMENT, NVIDIA_NS)
        assert deployment["status"].get("readyReplicas") == NVIDIA_REPLICAS
        last = text.splitlines()[-1]
        assert last.startswith(f"swap.sh: swap-in failed at step {step} "), text
        assert last.endswith(
            f"rolled back: deployment/{c.NVIDIA_CONTROLLER_DEPLOYMENT} in {NVIDIA_NS} is back"
            f" at {NVIDIA_REPLICAS} replicas, ours is removed"
        ), text
        assert kubelet.running() == []
        await eventually(nvidia_leads, within=60, what="NVIDIA's controller leading again")
    finally:
        await kubelet.stop()
        # A failed assertion above may leave a swap behind: `out` undoes it (or finds none).
        await run_script("out", None, control_plane.kubeconfig, namespace, check=False)
        if case == "7-not-reconciled":
            await finalize_with_ours(kube, factory)
        await stop_after_cleanup(factory, kube, namespace)
        await nvidia.scale_controller(kube, 0)  # its pods go while its kubelet still runs
        await nvidia_kubelet.stop()


# Requests that are writes to the audit log but store nothing: `kubectl auth can-i`.
ACCESS_REVIEWS = ("selfsubjectaccessreviews", "selfsubjectrulesreviews", "subjectaccessreviews")


def stored_writes(audit: AuditLog, mark: int, user: str) -> list[str]:
    """What ``user`` wrote since ``mark``, server-side dry runs and access reviews aside."""
    return [
        w.target
        for w in audit.writes(since=mark, user=user)
        if not w.dry_run and w.resource not in ACCESS_REVIEWS
    ]


@pytest.mark.usefixtures("nvidia_install")
@pytest.mark.parametrize("idle", [True, False], ids=["idle-cd", "no-cd"])
async def test_an_idle_compute_domain_is_a_good_swap_and_out_restores_it_exactly(
    idle: bool,
    kube: KubeClient,
    api_client: ApiClient,
    control_plane: ControlPlane,
    namespace: str,
    identities: IdentityFactory,
    tmp_path: Path,
) -> None:
    """Step 7 waits for our Ready condition, not for Ready=True: an idle CD (no workload yet)
    is Ready=False WaitingForWorkload, and that is a good swap; so is one with no CD where
    it waits. `out` takes our conditions off again. With the idle CD, before each, its
    --dry-run prints the steps and writes nothing (the audit log of the ServiceAccount it runs
    as)."""
    assert control_plane.audit_log is not None
    audit = AuditLog(control_plane.audit_log)
    # Made before what `out` must restore is noted: its ClusterRoleBinding is the test's.
    dry_kubeconfig, dry_user = await identities("swap-dry-run")
    if idle:
        await create_cd(kube, namespace, "idle", num_nodes=2)
    await nvidia.scale_controller(kube, NVIDIA_REPLICAS)
    before = await install_state(kube, NVIDIA_NS)
    kubelet = Kubelet(api_client, control_plane, NVIDIA_NS, OUR_PODS, tmp_path)
    kubelet.start()
    factory = controllers_for(control_plane.kubeconfig, NVIDIA_NS)
    env = {"TIMEOUT": "60s"}
    try:
        if idle:  # one case is enough for the dry runs (CI's time)
            versions = await install_state(kube, NVIDIA_NS, versions=True)
            mark = audit.mark()
            code, said, plan = await swap_sh(
                "in", "helm", dry_kubeconfig, namespace, args=["--dry-run"], env=env
            )
            assert code == 0, said
            assert stored_writes(audit, mark, dry_user) == []
            assert await install_state(kube, NVIDIA_NS, versions=True) == versions
            assert_in_plan(plan, namespace)

        _, text = await run_script("in", "helm", control_plane.kubeconfig, namespace, env=env)
        if idle:
            ready = condition(await kube.get(COMPUTE_DOMAINS, "idle", namespace), "Ready")
            assert (ready["status"], ready["reason"]) == ("False", "WaitingForWorkload")
        assert "ComputeDomains reconciled: " in text
        assert text.splitlines()[-1].endswith("--set controller.replicas=0"), text

        if idle:
            mark = audit.mark()
            code, said, plan = await swap_sh(
                "out", None, dry_kubeconfig, namespace, args=["--dry-run"], env=env
            )
            assert code == 0, said
            assert stored_writes(audit, mark, dry_user) == []
            assert_out_plan(plan)
            assert len(kubelet.running()) == 2, "ours stopped by a dry run"

        _, text = await run_script("out", None, control_plane.kubeconfig, namespace)
        assert await install_state(kube, NVIDIA_NS) == before, "out did not restore what in changed"
        assert text.splitlines()[-1].endswith(f"--set controller.replicas={NVIDIA_REPLICAS}"), text
        if idle:  # ours is gone: no field of its own speaks for it (nor fools a later `in`)
            status = (await kube.get(COMPUTE_DOMAINS, "idle", namespace)).get("status", {})
            assert set(status) <= {"status", "nodes"}, status
    finally:
        await kubelet.stop()
        await run_script("out", None, control_plane.kubeconfig, namespace, check=False)
        await finalize_with_ours(kube, factory)
        await stop_after_cleanup(factory, kube, namespace)


def assert_in_plan(plan: str, cd_namespace: str) -> None:
    """`in helm --dry-run`: every step in order, with the commands it would run."""
    lines = plan.splitlines()
    print(f"plan of in --dry-run: {len(lines)} lines")
    steps = [m[1] for line in lines if (m := re.match(r"# (\d)\. ", line))]
    assert steps == [str(n) for n in range(1, 8)], plan
    deployment = c.NVIDIA_CONTROLLER_DEPLOYMENT
    # The Lease is recorded if `in` creates it: whether it exists depends on earlier tests.
    record = re.compile(
        rf"kubectl -n {NVIDIA_NS} annotate deployment {deployment} "
        rf"computedomain\.dev/swap-replicas={NVIDIA_REPLICAS} computedomain\.dev/swap-method=helm "
        rf"computedomain\.dev/swap-namespace={NVIDIA_NS} computedomain\.dev/swap-lease=\S* "
        r"computedomain\.dev/swap-created-namespace=false "
        r"computedomain\.dev/swap-release=computedomain$"
    )
    assert [line for line in lines if record.match(line)], plan
    expected = [
        "kubectl create -f - <<'EOF'",
        f'    image: "{IMAGE}"',
        '    args: ["--version"]',
        f"kubectl -n {NVIDIA_NS} scale deployment {deployment} --replicas=0",
        f"kubectl -n {NVIDIA_NS} wait --for=delete pod -l {nvidia.SELECTOR} --timeout=60s",
        "kubectl apply --server-side --force-conflicts -f crds/",
    ]
    for line in expected:
        assert line in lines, f"{line!r} not in the plan:\n{plan}"
    install = [line for line in lines if line.startswith("helm upgrade --install computedomain ")]
    assert len(install) == 1, plan
    assert f"--namespace {NVIDIA_NS} --skip-crds" in install[0], install
    assert install[0].endswith("--wait --timeout 60s"), install
    assert "controller.replicas" not in install[0], "ours goes in at its full replicas"
    assert any("deployment.apps/computedomain-controller" in line for line in lines), plan
    waits = [
        line for line in lines if line.startswith("kubectl -n ") and " wait computedomains" in line
    ]
    assert [w.split()[2] for w in waits] == [cd_namespace], waits
    # The order: ours up and standing by before NVIDIA's controller goes.
    assert lines.index(install[0]) < lines.index(expected[3]) < lines.index(expected[5])


def assert_out_plan(plan: str) -> None:
    """`out --dry-run` after `in helm`: ours stopped and removed, NVIDIA's back, the record off."""
    lines = plan.splitlines()
    expected = [
        f"kubectl -n {NVIDIA_NS} scale deployment computedomain-controller --replicas=0",
        f"helm uninstall computedomain --namespace {NVIDIA_NS} --wait --timeout 60s",
        f"kubectl -n {NVIDIA_NS} scale deployment {c.NVIDIA_CONTROLLER_DEPLOYMENT} "
        f"--replicas={NVIDIA_REPLICAS}",
    ]
    for line in expected:
        assert line in lines, f"{line!r} not in the plan:\n{plan}"
    assert [lines.index(line) for line in expected] == sorted(lines.index(x) for x in expected)
    assert lines[-1].startswith(
        f"kubectl -n {NVIDIA_NS} annotate deployment {c.NVIDIA_CONTROLLER_DEPLOYMENT} "
        "computedomain.dev/swap-replicas-"
    ), plan


async def finalize_with_ours(kube: KubeClient, factory: Controllers) -> None:
    """The CDs of the test carry the finalizer and children; one of ours (alone: NVIDIA's
    scaled to 0, whether its pods ran its binary or were only kwok's) finalizes them."""
    await nvidia.scale_controller(kube, 0)
    await factory.start()


# -- Issue 29: the README's install paths over NVIDIA's running install ---------------------------
README_PATHS = ("helm", "kustomize")


def install_readme_path(path: str, kubeconfig: Path) -> None:
    """Ours as the README installs it, in computedomain-system, with nothing said about NVIDIA."""
    if path == "helm":
        done = subprocess_run(
            [str(find_helm()), "install", "computedomain",
             str(REPO_ROOT / "manifests/helm/computedomain-controller"),
             "-n", "computedomain-system", "--create-namespace", "--kubeconfig", str(kubeconfig),
             "--set", "controllerImage.repository=computedomain-controller",
             "--set", f"controllerImage.tag={PROJECT_VERSION}"]
        )  # fmt: skip
    else:
        done = subprocess_run(
            [str(find_assets()["kubectl"]), "--kubeconfig", str(kubeconfig), "apply", "-k",
             str(REPO_ROOT / "manifests/default")]
        )  # fmt: skip
    assert done.returncode == 0, done.stderr


def remove_readme_path(path: str, kubeconfig: Path) -> None:
    if path == "helm":
        subprocess_run(
            [str(find_helm()), "uninstall", "computedomain", "-n", "computedomain-system",
             "--kubeconfig", str(kubeconfig), "--wait", "--ignore-not-found"]
        )  # fmt: skip
    else:  # everything but the CRDs, which this session's other tests share
        kubectl = str(find_assets()["kubectl"])
        rendered = subprocess_run([kubectl, "kustomize", str(REPO_ROOT / "manifests/default")])
        ours = [
            d
            for d in yaml.safe_load_all(rendered.stdout)
            if d and d["kind"] != "CustomResourceDefinition"
        ]
        subprocess_run(
            [kubectl, "--kubeconfig", str(kubeconfig), "delete", "--ignore-not-found",
             "--wait=false", "-f", "-"],
            stdin=yaml.safe_dump_all(ours),
        )  # fmt: skip
    subprocess_run(
        [str(find_assets()["kubectl"]), "--kubeconfig", str(kubeconfig), "delete", "namespace",
         "computedomain-system", "--ignore-not-found", "--wait=true", "--timeout=120s"]
    )  # fmt: skip


def subprocess_run(args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, input=stdin, capture_output=True, text=True, timeout=180, check=False
    )


@pytest.mark.parametrize(
    ("nvidia_install", "path"),
    [(f"{release}-{nvidia.FRESH.key}", path) for release in (TARGET_VERSIONS[V041], V05)
     for path in README_PATHS],
    indirect=["nvidia_install"],
)  # fmt: skip
async def test_the_readme_install_beside_nvidias_running_install_writes_nothing(
    path: str,
    e2e: EndToEnd,
    kube: KubeClient,
    api_client: ApiClient,
    control_plane: ControlPlane,
    nvidia_install: NvidiaInstall,
    tmp_path: Path,
) -> None:
    """NVIDIA's chart (v0.4.1; v0.5.0-dev) runs its real controller and domains with running
    workloads; ours is installed by the README's first command (helm, or kustomize's
    manifests/default) in a namespace of its own. Ours runs, says why it stands by, and from the
    audit log writes nothing to any ComputeDomain, child, clique or Node, while a new CD is made
    and served by NVIDIA's controller; NVIDIA's daemons keep their pods (UIDs) throughout."""
    assert control_plane.audit_log is not None
    audit = AuditLog(control_plane.audit_log)
    shape = nvidia_install.shape
    nvidia_kubelet = nvidia.controller_kubelet(
        api_client, control_plane, nvidia_install.build, tmp_path / "nvidia", shape
    )
    nvidia_kubelet.start()
    kubelet = Kubelet(api_client, control_plane, "computedomain-system", OUR_PODS, tmp_path)
    try:
        await e2e.start_simulator()
        await e2e.create_cd("job-a", rct_name="job-a-channel", num_nodes=2)
        await e2e.run_workload(workload("job-a", 2, rct_name="job-a-channel", racks=["r00"]))
        job_a = await e2e.cd_until(
            "job-a",
            lambda cd: ((cd or {}).get("status") or {}).get("status") == c.STATUS_READY,
            "Ready by NVIDIA's controller",
            within=120,
        )
        assert job_a is not None
        uids = [job_a["metadata"]["uid"]]
        before = await snapshot(kube, uids, shape.namespace)

        mark = audit.mark()
        await asyncio.to_thread(install_readme_path, path, control_plane.kubeconfig)
        kubelet.start()
        our_user = service_account_user("computedomain-system", OUR_SA)
        reason = "ConcurrentController" if path == "helm" else "DriverNamespaceMismatch"

        def said(events: Objects) -> list[dict[str, Any]] | None:
            found = [
                e
                for e in events.values()
                if e.get("reason") == reason
                and (e.get("regarding") or {}).get("name") == CD_CRD_NAME
                and "stands by" in (e.get("note") or "")
                and str(e.get("reportingInstance", "")).endswith(
                    tuple(pod.name for pod in kubelet.pods.values())
                )
            ]
            return found or None

        (warned, *_) = await watch_objects(
            kube, r.EVENTS, said, namespace="default", within=90, what=f"ours says {reason}"
        )
        print(f"{path}: ours says: {warned['note']}")
        # A new CD meanwhile: NVIDIA's controller alone makes its children.
        fresh = await e2e.create_cd("job-b", rct_name="job-b-channel")
        await wait_children(kube, fresh, shape.namespace, "job-b-channel", within=60)
        writes = audit.writes(since=mark, user=our_user)
        domain_writes = [w.target for w in writes if w.resource in (*DOMAIN_RESOURCES, "nodes")]
        print(f"{path}: writes by ours: {tally(writes)}")
        assert domain_writes == [], f"ours wrote beside NVIDIA's controller: {domain_writes}"
        assert await snapshot(kube, uids, shape.namespace) == before
    finally:
        await kubelet.stop()
        await asyncio.to_thread(remove_readme_path, path, control_plane.kubeconfig)
        await nvidia.scale_controller(kube, 0, shape=shape)
        await nvidia_kubelet.stop()
        await e2e.start_controller()
