"""The one-command demo: a local control plane with a simulated NVL72 fleet, our controller under
its real RBAC, the fleet simulator, and NVIDIA's example ComputeDomain with a multi-node workload;
then the placement webhook (served by the controller, called by the apiserver over TLS): one
clique nearly full, a job whose ComputeDomain is annotated for placement lands in one with room.

``hack/demo.sh [--racks N] [--keep] ...`` runs ``python -m computedomain.devcluster.demo``.
Progress is printed from watches, one line per change, until the ComputeDomain is Ready and
every workload pod Runs (or ``--timeout`` passes).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio.client import ApiClient

from computedomain.api import constants as c
from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.config import environ
from computedomain.devcluster.assets import REPO_ROOT, Assets, AssetsUnavailableError, find_assets
from computedomain.devcluster.clients import (
    api_client_from_kubeconfig,
    request_service_account_token,
    token_kubeconfig,
)
from computedomain.devcluster.cluster import add_fleet_arguments, fleet_spec, populate
from computedomain.devcluster.controlplane import (
    STATE_FILE,
    ControlPlane,
    ControlPlaneError,
    free_port,
)
from computedomain.devcluster.harness import compute_domain
from computedomain.devcluster.placement import (
    CONFIGURATION,
    ca_bundle_written,
    clique_of_each_pod,
    webhook_configuration,
    webhook_environ,
    webhook_url,
)
from computedomain.devcluster.processes import ChildProcess, spawn, tail
from computedomain.devcluster.progress import STARTED, Progress, say, watch_progress
from computedomain.devcluster.watching import watch_object, watch_objects
from computedomain.devcluster.workloads import STATEFULSETS, WORKLOAD_LABEL, workload
from computedomain.domain.capacity import clique_capacity, fitting
from computedomain.domain.placement import PLACEMENT_OPT_IN, RECORDED_CLIQUE_ANNOTATION
from computedomain.runtime import objects
from computedomain.runtime.client import ApiError, KubeClient
from computedomain.runtime.resources import (
    LEASES,
    MUTATING_WEBHOOK_CONFIGURATIONS,
    NAMESPACES,
    NODES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    SERVICE_ACCOUNTS,
)
from computedomain.sim.fleet import RACK_LABEL

DRIVER_NAMESPACE = "nvidia-dra-driver-gpu"
DEMO_NAMESPACE = "demo"
CONTROLLER_SERVICE_ACCOUNT = "computedomain-controller"
LEASE_NAME = "nvidia-compute-domain-controller"
RBAC_DIR = REPO_ROOT / "manifests" / "rbac"
# What the placement webhook adds to the controller's RBAC (its Secret, the caBundle's write).
WEBHOOK_RBAC_FILE = REPO_ROOT / "manifests" / "placement-webhook" / "role.yaml"
SAMPLES_DIR = REPO_ROOT / "manifests" / "samples"
SAMPLE_FILES = ("computedomain.yaml", "workload-multinode.yaml")
DEFAULT_STATE_DIR = REPO_ROOT / ".devcluster" / "demo"
# The controller keeps this token for its whole life; a kept demo cluster should outlive a day.
TOKEN_SECONDS = 7 * 24 * 3600
NAMESPACED_RBAC_KINDS = {"ServiceAccount", "Role", "RoleBinding"}
# The placement step: a job of JOB_SIZE pods placed by the webhook while a job the webhook does
# not place fills one clique up to ROOM_LEFT free nodes, fewer than the job needs.
FILLER = "rack-filler"
PLACED_JOB = "placed-job"
JOB_SIZE = 6
ROOM_LEFT = 2


class DemoError(RuntimeError):
    """The demo cannot go on; the message says why."""


# ---- child processes ------------------------------------------------------------------------


def spawn_console_script(
    script: str, args: Sequence[str], env: dict[str, str], log: Path, keep: bool
) -> ChildProcess:
    """Run a console script of this venv with the script's path as argv[0], so that
    ``devcluster down`` recognises the process by name in ``state.json`` (it checks argv[0])."""
    path = Path(sys.executable).parent / script
    if not path.is_file():
        raise DemoError(f"{path} not found: run `uv sync --locked --all-groups` first")
    argv = [str(path), str(path), *args]
    return spawn(
        script, argv, log, detach=keep, env={**os.environ, **env}, executable=sys.executable
    )


def record_children(state_dir: Path, children: Sequence[ChildProcess]) -> None:
    """Add our children to the control plane's state.json: `down` stops them first, by PID."""
    path = state_dir / STATE_FILE
    state = json.loads(path.read_text())
    # `down` stops in reverse order, so appending makes these go before the control plane.
    state["pids"] = {**state["pids"], **{child.name: child.pid for child in children}}
    path.write_text(json.dumps(state, indent=2) + "\n")


# ---- cluster set-up -------------------------------------------------------------------------


def rbac_documents(namespace: str, directory: Path = RBAC_DIR) -> list[dict[str, Any]]:
    """The kustomization's resources and the placement webhook's RBAC, placed in ``namespace``
    (subjects too), as ``kubectl apply -k`` with ``namespace:`` would."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    paths = [directory / name for name in kustomization["resources"]]
    documents: list[dict[str, Any]] = []
    for path in [*paths, WEBHOOK_RBAC_FILE]:
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc:
                continue
            if doc["kind"] in NAMESPACED_RBAC_KINDS:
                doc["metadata"]["namespace"] = namespace
            for subject in doc.get("subjects") or []:
                if subject.get("kind") == "ServiceAccount":
                    subject["namespace"] = namespace
            documents.append(doc)
    return documents


async def _run_kubectl(
    assets: Assets,
    args: Sequence[str],
    *,
    stdin: str | None = None,
    env: dict[str, str] | None = None,
) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        str(assets["kubectl"]),
        *args,
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    out, err = await process.communicate(stdin.encode() if stdin is not None else None)
    code = process.returncode if process.returncode is not None else -1
    return code, out.decode(), err.decode()


async def kubectl(assets: Assets, kubeconfig: Path, *args: str, stdin: str | None = None) -> str:
    code, out, err = await _run_kubectl(assets, [f"--kubeconfig={kubeconfig}", *args], stdin=stdin)
    if code != 0:
        raise DemoError(f"kubectl {' '.join(args)} failed: {err.strip()}")
    return out


async def ensure_namespace(kube: KubeClient, name: str) -> None:
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    with contextlib.suppress(ApiError):
        await kube.create(NAMESPACES, body)


async def wait_service_account(kube: KubeClient, namespace: str, name: str) -> None:
    """Pods cannot be admitted before the namespace's ServiceAccount exists."""
    listing = await kube.list(SERVICE_ACCOUNTS, namespace=namespace)
    if any(sa["metadata"]["name"] == name for sa in listing["items"]):
        return
    async for kind, sa in kube.watch(
        SERVICE_ACCOUNTS,
        namespace=namespace,
        resource_version=listing["metadata"]["resourceVersion"],
        timeout_seconds=60,
    ):
        if kind == "ADDED" and sa["metadata"]["name"] == name:
            return
    raise DemoError(f"serviceaccount {namespace}/{name} did not appear")


def sample_domain(path: Path) -> dict[str, Any]:
    """The sample's ComputeDomain."""
    for doc in yaml.safe_load_all(path.read_text()):
        if doc and doc.get("kind") == c.CD_KIND:
            return dict(doc)
    raise DemoError(f"{path}: no {c.CD_KIND} in the sample")


def sample_claim_template(path: Path) -> str:
    """The workload ResourceClaimTemplate the sample ComputeDomain asks for."""
    return str(sample_domain(path)["spec"]["channel"]["resourceClaimTemplate"]["name"])


async def kubectl_plugin(assets: Assets, kubeconfig: Path, *args: str) -> tuple[int, str]:
    """``kubectl cdom ARGS`` through the real kubectl, which finds the plugin (this
    environment's ``kubectl-cdom`` console script) on the PATH; kubectl hands a plugin none of
    its own flags, so the kubeconfig goes in the environment."""
    env = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    code, out, err = await _run_kubectl(assets, ["cdom", *args], env=env)
    return code, out + err


def sample_replicas(directory: Path = SAMPLES_DIR) -> int:
    """Workload pods the samples ask for (sum of StatefulSet replicas)."""
    total = 0
    for name in SAMPLE_FILES:
        for doc in yaml.safe_load_all((directory / name).read_text()):
            if doc and doc.get("kind") == "StatefulSet":
                total += int(doc["spec"].get("replicas", 1))
    return total


# ---- placement: a job in one clique with room, beside a nearly full one ---------------------


@dataclass(frozen=True)
class PlacementShown:
    """What the placement step saw: the clique a job the webhook does not place filled up, and
    the clique of each pod of the job it placed, and the clique recorded on that job's CD."""

    nearly_full: str
    room_left: int
    landed: dict[str, str]  # pod -> clique of its node
    recorded: str


async def nodes_held(kube: KubeClient, uid: str, count: int, within: float, what: str) -> None:
    """Until ``count`` Nodes carry the CD's label (the controller's mark of a node it holds,
    what the webhook counts as taken)."""
    await watch_objects(
        kube,
        NODES,
        lambda held: len(held) >= count,
        label_selector=f"{c.CD_LABEL}={uid}",
        within=within,
        what=what,
    )


async def pods_scheduled(
    kube: KubeClient, namespace: str, name: str, count: int, within: float
) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = await watch_objects(
        kube,
        PODS,
        lambda pods: (
            pods
            if len(pods) == count and all(p["spec"].get("nodeName") for p in pods.values())
            else None
        ),
        namespace=namespace,
        label_selector=f"{WORKLOAD_LABEL}={name}",
        within=within,
        what=f"the {count} pods of {name} scheduled",
    )
    return found


async def claim_template_created(
    kube: KubeClient, namespace: str, name: str, within: float
) -> None:
    """The workload follows its CD's claim template (see Demo._apply_samples: no noise)."""
    await watch_object(
        kube,
        RESOURCE_CLAIM_TEMPLATES,
        name,
        lambda obj: obj is not None,
        namespace=namespace,
        within=within,
        what=f"ResourceClaimTemplate {namespace}/{name} created",
    )


async def show_placement(
    kube: KubeClient,
    namespace: str,
    *,
    job_size: int = JOB_SIZE,
    room_left: int = ROOM_LEFT,
    within: float = 180.0,
) -> PlacementShown:
    """One clique nearly full (a job the webhook does not place, pinned to its rack, leaves
    ``room_left`` nodes free), then a job of ``job_size`` pods whose CD is annotated for
    placement: the webhook must put all of them in one clique with room. Prints each pod's
    clique. The webhook must already serve ``namespace`` (a MutatingWebhookConfiguration)."""
    nodes = (await kube.list(NODES))["items"]
    rows = clique_capacity(nodes, (await kube.list(COMPUTE_DOMAINS))["items"])
    racks = sorted({r for n in nodes if (r := objects.label(n, RACK_LABEL)) and r != "none"})
    if not racks:
        raise DemoError("the placement step needs NVL72 racks")
    rack = racks[0]
    cliques = {
        objects.label(n, c.GPU_CLIQUE_NODE_LABEL)
        for n in nodes
        if objects.label(n, RACK_LABEL) == rack
    }
    row = next((r for r in rows if r.clique in cliques), None)
    others = [r for r in fitting(rows, job_size) if r is not row]
    if row is None or row.free <= room_left or not others:
        raise DemoError(
            f"the placement step needs rack {rack} with more than {room_left} free nodes and "
            f"another clique with {job_size} free: run it with --racks 2 or more"
        )
    filler_size = row.free - room_left
    filler = await kube.create(COMPUTE_DOMAINS, compute_domain(FILLER, rct_name=FILLER), namespace)
    await claim_template_created(kube, namespace, FILLER, within)
    await kube.create(
        STATEFULSETS, workload(FILLER, filler_size, rct_name=FILLER, racks=[rack]), namespace
    )
    say(
        f"placement: {FILLER}, {filler_size} pods pinned to rack {rack} (not placed by the "
        f"webhook), fills clique {row.clique}"
    )
    await nodes_held(kube, filler["metadata"]["uid"], filler_size, within, f"{FILLER} holds")
    say(
        f"placement: clique {row.clique} nearly full ({room_left} nodes free); creating "
        f"{PLACED_JOB}, {job_size} pods, its ComputeDomain annotated {PLACEMENT_OPT_IN}"
    )

    body = compute_domain(PLACED_JOB, rct_name=PLACED_JOB, num_nodes=job_size)
    body["metadata"]["annotations"] = {PLACEMENT_OPT_IN: "true"}
    await kube.create(COMPUTE_DOMAINS, body, namespace)
    await claim_template_created(kube, namespace, PLACED_JOB, within)
    await kube.create(STATEFULSETS, workload(PLACED_JOB, job_size, rct_name=PLACED_JOB), namespace)
    pods = await pods_scheduled(kube, namespace, PLACED_JOB, job_size, within)
    landed = clique_of_each_pod(pods.values(), (await kube.list(NODES))["items"])
    for pod in sorted(landed):
        node = pods[pod]["spec"]["nodeName"]
        say(f"placement: pod {pod} -> node {node}, clique {landed[pod]}")
    cd = await kube.get(COMPUTE_DOMAINS, PLACED_JOB, namespace)
    recorded = str((cd["metadata"].get("annotations") or {}).get(RECORDED_CLIQUE_ANNOTATION) or "")
    say(
        f"placement: {PLACED_JOB}'s {job_size} pods in {len(set(landed.values()))} clique(s); "
        f"the webhook recorded clique {recorded or '(none)'} on its ComputeDomain"
    )
    return PlacementShown(row.clique, room_left, landed, recorded)


# ---- the demo -------------------------------------------------------------------------------


@dataclass
class Demo:
    args: argparse.Namespace
    assets: Assets
    cp: ControlPlane
    children: list[ChildProcess] = field(default_factory=list)
    webhook_port: int = 0

    @property
    def state_dir(self) -> Path:
        path: Path = self.args.state_dir
        return path

    async def run(self) -> None:
        args = self.args
        spec = fleet_spec(args)
        await populate(self.cp, spec, ready_timeout=120.0, log=say)
        say(f"fleet Ready: {spec.racks} NVL72 racks x {spec.nodes_per_rack} + {spec.non_fabric}")
        admin = await api_client_from_kubeconfig(self.cp.kubeconfig)
        kube = KubeClient.from_api_client(admin, field_manager="computedomain-demo")
        try:
            await self._install_driver(admin, kube)
            await self._configure_webhook(kube)
            await self._start_processes()
            await self._wait_leader(kube)
            await self._apply_samples(kube)
            if self.args.placement:
                await self._show_placement(kube)
        finally:
            await kube.close()

    async def _install_driver(self, admin: ApiClient, kube: KubeClient) -> None:
        await ensure_namespace(kube, DRIVER_NAMESPACE)
        documents = rbac_documents(DRIVER_NAMESPACE)
        await kubectl(
            self.assets,
            self.cp.kubeconfig,
            "apply",
            "--server-side",
            "--field-manager=computedomain-demo",
            "-f",
            "-",
            stdin=yaml.safe_dump_all(documents, sort_keys=False),
        )
        say(
            f"namespace {DRIVER_NAMESPACE}: applied {len(documents)} RBAC objects from "
            f"{RBAC_DIR.relative_to(REPO_ROOT)}/ (controller + daemon ServiceAccounts)"
        )
        token = await request_service_account_token(
            admin, DRIVER_NAMESPACE, CONTROLLER_SERVICE_ACCOUNT, TOKEN_SECONDS
        )
        path = token_kubeconfig(
            self.state_dir / "controller.kubeconfig",
            self.cp.server,
            self.cp.ca_file,
            token,
            namespace=DRIVER_NAMESPACE,
        )
        say(f"controller kubeconfig (TokenRequest for {CONTROLLER_SERVICE_ACCOUNT}): {path}")

    async def _configure_webhook(self, kube: KubeClient) -> None:
        """The placement webhook, called by the apiserver for the demo namespace's pods at the
        controller's address (there is no Service here); the controller makes its certificate
        and writes the CA into this configuration."""
        self.webhook_port = free_port()
        url = webhook_url(self.webhook_port)
        body = webhook_configuration(CONFIGURATION, url, DEMO_NAMESPACE)
        with contextlib.suppress(ApiError):  # a kept cluster's, from an earlier run
            await kube.delete(MUTATING_WEBHOOK_CONFIGURATIONS, CONFIGURATION)
        await kube.create(MUTATING_WEBHOOK_CONFIGURATIONS, body)
        say(
            f"MutatingWebhookConfiguration {CONFIGURATION}: pods of namespace {DEMO_NAMESPACE} "
            f"go to the controller's placement webhook, {url} (failurePolicy Ignore)"
        )

    async def _show_placement(self, kube: KubeClient) -> None:
        begin = time.monotonic()
        try:
            await ca_bundle_written(kube, CONFIGURATION, within=60)
            shown = await show_placement(kube, DEMO_NAMESPACE, within=self.args.timeout)
        except TimeoutError as err:
            raise DemoError(f"placement step: {err}") from None
        finally:
            self._check_children()
        cliques = set(shown.landed.values())
        if len(cliques) != 1 or shown.nearly_full in cliques:
            raise DemoError(
                f"the webhook did not put {PLACED_JOB} in one clique with room: {shown.landed}"
            )
        say(
            f"DONE: placement step in {time.monotonic() - begin:.1f}s: {PLACED_JOB} in clique "
            f"{cliques.pop()}, not in the nearly full {shown.nearly_full}"
        )
        await self._kubectl_cdom(("cliques",))

    async def _start_processes(self) -> None:
        logs = self.state_dir / "logs"
        metrics_address = f"127.0.0.1:{free_port()}"
        controller_env = environ(
            kubeconfig=str(self.state_dir / "controller.kubeconfig"),
            namespace=DRIVER_NAMESPACE,
            image_name=c.NVIDIA_DRIVER_IMAGE,
            leader_election_enabled="true",
            log_format="text",
            pod_name="demo-controller",
            http_endpoint=metrics_address,
            probe_address=f"127.0.0.1:{free_port()}",
        ) | webhook_environ(self.webhook_port, CONFIGURATION)
        controller = spawn_console_script(
            "computedomain-controller",
            [],
            controller_env,
            logs / "computedomain-controller.log",
            self.args.keep,
        )
        self.children.append(controller)
        say(
            f"controller started (pid {controller.pid}, metrics "
            f"http://{metrics_address}/metrics, log {controller.log})"
        )
        sim = spawn_console_script(
            "computedomain-sim",
            [
                "--kubeconfig",
                str(self.cp.kubeconfig),
                "--driver-namespace",
                DRIVER_NAMESPACE,
                "--daemon-delay",
                self.args.daemon_delay,
                "--seed",
                str(self.args.seed),
            ],
            {"LOG_FORMAT": "text"},
            logs / "computedomain-sim.log",
            self.args.keep,
        )
        self.children.append(sim)
        record_children(self.state_dir, self.children)
        say(f"simulator started (pid {sim.pid}, log {sim.log})")

    async def _wait_leader(self, kube: KubeClient) -> None:
        """Apply the samples only once the controller leads, so the timings show its work."""

        async def holder() -> str:
            while True:
                try:
                    lease = await kube.get(LEASES, LEASE_NAME, DRIVER_NAMESPACE)
                    rv = lease["metadata"]["resourceVersion"]
                    if identity := (lease.get("spec") or {}).get("holderIdentity"):
                        return str(identity)
                except ApiError as err:
                    if not err.is_not_found:
                        raise
                    rv = (await kube.list(LEASES, namespace=DRIVER_NAMESPACE))["metadata"][
                        "resourceVersion"
                    ]
                async for _kind, obj in kube.watch(
                    LEASES,
                    namespace=DRIVER_NAMESPACE,
                    field_selector=f"metadata.name={LEASE_NAME}",
                    resource_version=rv,
                    timeout_seconds=30,
                ):
                    if identity := (obj.get("spec") or {}).get("holderIdentity"):
                        return str(identity)
                self._check_children()

        try:
            identity = await asyncio.wait_for(holder(), timeout=60)
        except TimeoutError:
            self._check_children()
            raise DemoError("the controller did not acquire its leader lease within 60s") from None
        say(f"controller leads (Lease {DRIVER_NAMESPACE}/{LEASE_NAME}, holder {identity})")

    async def _apply_samples(self, kube: KubeClient) -> None:
        await ensure_namespace(kube, DEMO_NAMESPACE)
        await wait_service_account(kube, DEMO_NAMESPACE, "default")
        domain_file, *workload_files = [SAMPLES_DIR / name for name in SAMPLE_FILES]
        await self._kubectl_apply(domain_file)
        applied = time.monotonic()
        # The workload's claims come from the template the controller creates. Applied together,
        # Kubernetes' resourceclaim controller may look first, record FailedResourceClaimCreation
        # and retry: noise that is not ours, so the workload follows the template.
        template = sample_claim_template(domain_file)
        try:
            await watch_object(
                kube,
                RESOURCE_CLAIM_TEMPLATES,
                template,
                lambda obj: obj is not None,
                namespace=DEMO_NAMESPACE,
                within=self.args.timeout,
            )
        except TimeoutError:
            self._check_children()
            raise DemoError(
                f"the controller did not create ResourceClaimTemplate {DEMO_NAMESPACE}/{template} "
                f"within {self.args.timeout:.0f}s"
            ) from None
        say(f"ResourceClaimTemplate {DEMO_NAMESPACE}/{template} exists; applying the workload")
        for path in workload_files:
            await self._kubectl_apply(path)
        progress = Progress(expected_pods=sample_replicas())
        try:
            await watch_progress(kube, DEMO_NAMESPACE, progress, self.args.timeout)
        except TimeoutError:
            raise DemoError(self._timeout_message(progress)) from None
        finally:
            self._check_children()
        say(
            f"DONE: ComputeDomain Ready and {progress.running_pods} workload pods Running "
            f"{time.monotonic() - applied:.1f}s after apply "
            f"({time.monotonic() - STARTED:.1f}s in total)"
        )
        await self._show_plugin(str(sample_domain(domain_file)["metadata"]["name"]))

    async def _show_plugin(self, domain: str) -> None:
        """What an SRE sees with the kubectl plugin (`kubectl cdom`) once the domain is up."""
        for args in (("describe", domain, "-n", DEMO_NAMESPACE), ("cliques", "--fits", "16")):
            await self._kubectl_cdom(args)

    async def _kubectl_cdom(self, args: Sequence[str]) -> None:
        code, out = await kubectl_plugin(self.assets, self.cp.kubeconfig, *args)
        say(f"$ kubectl cdom {' '.join(args)}   (exit code {code})")
        for line in out.rstrip().splitlines():
            print(f"    {line}", flush=True)
        if code not in (0, 1):
            raise DemoError(f"kubectl cdom {' '.join(args)} failed (exit code {code})")

    async def _kubectl_apply(self, path: Path) -> None:
        out = await kubectl(
            self.assets, self.cp.kubeconfig, "apply", "-n", DEMO_NAMESPACE, "-f", str(path)
        )
        for line in out.strip().splitlines():
            say(f"kubectl: {line}")

    def _timeout_message(self, progress: Progress) -> str:
        logs = "\n".join(
            f"--- last lines of {child.log}:\n{tail(child.log, 15)}" for child in self.children
        )
        return (
            f"the ComputeDomain was not Ready with all workload pods Running within "
            f"{self.args.timeout:.0f}s (Ready={progress.cd_ready_line or 'not reported'}; "
            f"pods Running {progress.running_pods}/{progress.expected_pods})\n{logs}"
        )

    def _check_children(self) -> None:
        for child in self.children:
            if not child.alive():
                raise DemoError(
                    f"{child.name} exited with code {child.returncode}; "
                    f"last lines of {child.log}:\n{tail(child.log, 15)}"
                )

    def stop(self) -> None:
        for child in reversed(self.children):
            code = child.stop()
            say(f"{child.name} stopped (exit code {code})")
        self.cp.stop()
        say("control plane stopped")


def print_access(cp: ControlPlane, assets: Assets, kept: bool) -> None:
    when = "" if kept else " (next time: the cluster stops now unless you pass --keep)"
    print(
        f"\nTo look around with kubectl{when}:\n"
        f"  export KUBECONFIG={cp.kubeconfig}\n"
        f"  {assets['kubectl']} get computedomains -A -o wide\n"
        f"  (kubectl: {assets['kubectl']})",
        flush=True,
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hack/demo.sh",
        description=(
            "Start a local control plane with a simulated fleet of NVL72 racks, run the "
            "computedomain controller (under its own RBAC, with leader election) and the fleet "
            "simulator, apply NVIDIA's example ComputeDomain and a 4-node workload, and follow "
            "them live until the ComputeDomain is Ready and every workload pod Runs; then fill "
            "one clique nearly up and show the placement webhook putting a 6-pod job in one "
            "clique with room."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add_fleet_arguments(parser, racks=2, non_fabric=2)
    parser.add_argument(
        "--timeout",
        type=float,
        default=180.0,
        help="seconds from applying the samples until the ComputeDomain must be Ready and all "
        "workload pods Running; otherwise the demo fails with exit code 1",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="leave the control plane, controller and simulator running at the end and print "
        "how to stop them; without it everything is stopped",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=DEFAULT_STATE_DIR,
        help="directory for PKI, kubeconfigs, state.json and the logs of every component",
    )
    parser.add_argument(
        "--no-placement",
        dest="placement",
        action="store_false",
        help="skip the last step: one clique nearly full, then a job whose ComputeDomain is "
        f"annotated for placement; the webhook puts its {JOB_SIZE} pods in one clique with room",
    )
    parser.add_argument(
        "--daemon-delay",
        default="0.5-2s",
        help="simulated IMEX daemon start-up time (from joining its clique to Ready)",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.racks < 1 or args.nodes_per_rack < 4:
        print("demo: the workload needs at least 1 rack of at least 4 nodes", file=sys.stderr)
        return 2
    args.state_dir = args.state_dir.resolve()
    down = f"{sys.executable} -m computedomain.devcluster down --state-dir {args.state_dir}"
    if (args.state_dir / STATE_FILE).exists():
        previous = ControlPlane.attach(args.state_dir)
        if any(previous.running().values()):
            print(f"demo: a demo cluster still runs from {args.state_dir}; stop it: {down}")
            return 1
        previous.stop()  # stale state of a killed run
    try:
        assets = find_assets()
        cp = ControlPlane.start(args.state_dir, assets=assets, detach=args.keep, log=say)
    except (AssetsUnavailableError, ControlPlaneError) as error:
        print(f"demo: FAILED to start the control plane: {error}", file=sys.stderr)
        return 1
    demo = Demo(args, assets, cp)
    failed: str | None = None
    try:
        asyncio.run(demo.run())
    except DemoError as error:
        failed = str(error)
    except KeyboardInterrupt:
        failed = "interrupted"
    except BaseException:
        demo.stop()
        raise
    print_access(cp, assets, args.keep)
    if args.keep:
        print(f"\nLeft running (logs in {args.state_dir / 'logs'}). Stop it with:\n  {down}")
    else:
        demo.stop()
    if failed is not None:
        print(f"demo: FAILED: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
