"""NVIDIA's DRA driver as NVIDIA's ComputeDomain instructions install it, to swap our controller
into and back out of: `helm install` of its own chart `dra-driver-nvidia-gpu` (v0.4.1, the
pinned build's copy from hack/upstream/build.sh, or v0.4.0 from hack/upstream/chart.sh), in
either documented install shape, with the GPU kubelet plugin off, and the chart's own
ComputeDomain CRD (status with `status` and `nodes` only; Helm never upgrades it).

The chart's controller pods run NVIDIA's real `compute-domain-controller` binary while a test
runs `controller_kubelet` (the stand-in kubelet of computedomain/devcluster/podrunner.py, with the
chart's environment, NVIDIA's ServiceAccount and the RBAC its chart renders); without it kwok
shows them Running and nothing runs, which is all a stand-by test needs. The IMEX daemons and
the kubelet plugin are the fleet simulator's (the chart's kubelet plugin DaemonSet is kept off
the fleet: it needs NVML and a real kubelet).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio.client import ApiClient

from computedomain.api import constants as c
from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.devcluster.controlplane import ControlPlane
from computedomain.devcluster.podrunner import Kubelet
from computedomain.devcluster.upstream import (
    COMPUTE_DOMAIN_VALUES,
    UpstreamBuild,
    controller_entrypoint,
    render_chart,
)
from computedomain.devcluster.watching import Objects, watch_object, watch_objects
from computedomain.runtime import resources as r
from computedomain.runtime.client import ApiError, KubeClient
from computedomain.runtime.resources import Resource
from computedomain.sim.install import install_device_classes
from tests.kit.waiting import eventually

DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment", namespaced=True)
CLUSTER_ROLES = Resource(
    "rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False
)
CLUSTER_ROLE_BINDINGS = Resource(
    "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False
)
CRDS = r.CUSTOM_RESOURCE_DEFINITIONS
# NVIDIA's ComputeDomain instructions (the chart without the GPU kubelet plugin). Its kubelet
# plugin DaemonSet goes on no node (it needs NVML and a kubelet; the simulator plays it).
# The swap tests run NVIDIA's controller at 2 replicas: with its chart's leader election on, as
# two of them without it would both write.
CHART_VALUES: dict[str, Any] = {
    **COMPUTE_DOMAIN_VALUES,
    "kubeletPlugin.nodeSelector": {"computedomain.dev/kubelet-plugin": "simulated"},
    "controller.leaderElection.enabled": True,
}

# The selector label of NVIDIA's chart: `<chart name>-component`. Since v0.4.1 its controller
# pods carry no other component label (v0.4.0 added nvidia-dra-driver-gpu-component), so
# detection and hack/swap.sh must find them by this one.
CONTROLLER_POD_SELECTOR = {f"{c.NVIDIA_CHART_NAME}-component": c.NVIDIA_CONTROLLER_COMPONENT}
SELECTOR = ",".join(f"{k}={v}" for k, v in CONTROLLER_POD_SELECTOR.items())


@dataclass(frozen=True)
class Shape:
    """One of the two documented install shapes of NVIDIA's chart: a fresh install (release
    and namespace named after the chart), or one upgraded from NVIDIA's older chart, which
    keeps its old release, namespace and, through `nameOverride`, object names. The chart
    names the Deployment, its Lease, the controller's ServiceAccount and the pods' selector
    label after the name."""

    key: str
    name: str  # the chart's name, or its nameOverride
    release: str
    values: dict[str, Any] = field(default_factory=dict)

    @property
    def namespace(self) -> str:
        # NVIDIA's driver namespace: its guides install each release into one of its name.
        return self.release

    @property
    def deployment(self) -> str:
        return f"{self.name}-controller"

    @property
    def lease(self) -> str:
        return self.deployment

    @property
    def controller_sa(self) -> str:
        # `<fullname>-service-account-controller`; the fullname is the release name when that
        # already contains the name, else `<release>-<name>`.
        fullname = self.release if self.name in self.release else f"{self.release}-{self.name}"
        return f"{fullname}-service-account-controller"

    @property
    def selector(self) -> str:
        return f"{self.name}-component={c.NVIDIA_CONTROLLER_COMPONENT}"


# As NVIDIA's install and upgrade guides name them.
FRESH = Shape("fresh", c.NVIDIA_CHART_NAME, c.NVIDIA_CHART_NAME)
UPGRADED = Shape(
    "upgraded",
    c.NVIDIA_UPGRADED_NAME,
    c.NVIDIA_UPGRADED_NAME,
    {"nameOverride": c.NVIDIA_UPGRADED_NAME},
)
SHAPES = {shape.key: shape for shape in (FRESH, UPGRADED)}


def controller_deployment(replicas: int = 1) -> dict[str, Any]:
    """A Deployment named and labelled as the v0.4.1 chart's controller of a fresh install (its
    pods run nothing): for tests that need NVIDIA's controller pod to exist in a namespace of
    their own."""
    labels = {
        "app.kubernetes.io/name": c.NVIDIA_CHART_NAME,
        "app.kubernetes.io/instance": FRESH.release,
        **CONTROLLER_POD_SELECTOR,
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": c.NVIDIA_CONTROLLER_DEPLOYMENT, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": CONTROLLER_POD_SELECTOR},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": FRESH.controller_sa,
                    "containers": [
                        {
                            "name": "compute-domain",
                            "image": c.NVIDIA_DRIVER_IMAGE,
                            "command": ["compute-domain-controller", "-v", "4"],
                        }
                    ],
                    "terminationGracePeriodSeconds": 0,
                },
            },
        },
    }


async def helm(helm_path: Path, kubeconfig: Path, *args: str) -> str:
    process = await asyncio.create_subprocess_exec(
        str(helm_path),
        *args,
        "--kubeconfig",
        str(kubeconfig),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await process.communicate()
    text = out.decode(errors="replace")
    if process.returncode != 0:
        raise RuntimeError(f"helm {' '.join(args[:2])} failed: {text.strip()}")
    return text


async def install(
    admin: KubeClient,
    chart: Path,
    helm_path: Path,
    kubeconfig: Path,
    shape: Shape = FRESH,
) -> None:
    """`helm install` of NVIDIA's ``chart`` (a release's copy: the build's v0.4.1, or v0.4.0)
    as the ``shape`` says, then the chart's own CRD."""
    args = ["install", shape.release, str(chart), "-n", shape.namespace, "--create-namespace"]
    # Helm never installs or upgrades a CRD that exists: the chart's goes in below, as an
    # install that predates ours would have it. Its DeviceClasses exist already (the fleet's):
    # the release takes them. (Our manifests never name its daemon ClusterRole or binding.)
    args += ["--skip-crds", "--take-ownership"]
    for key, value in {**CHART_VALUES, **shape.values}.items():
        args += ["--set-json", f"{key}={json.dumps(value)}"]
    await helm(helm_path, kubeconfig, *args)
    await install_nvidia_crd(admin, chart)


async def upgrade(
    chart: Path,
    helm_path: Path,
    kubeconfig: Path,
    values: dict[str, Any] | None = None,
    shape: Shape = FRESH,
) -> None:
    """`helm upgrade` of NVIDIA's release with the install's values (and ``values``), as an SRE
    upgrades it with their values file: Helm's three-way merge puts back what the chart says,
    e.g. the controller's replicas that a swap scaled to 0."""
    args = ["upgrade", shape.release, str(chart), "-n", shape.namespace, "--skip-crds"]
    for key, value in {**CHART_VALUES, **shape.values, **(values or {})}.items():
        args += ["--set-json", f"{key}={json.dumps(value)}"]
    await helm(helm_path, kubeconfig, *args)


async def uninstall(
    api_client: ApiClient, helm_path: Path, kubeconfig: Path, shape: Shape = FRESH
) -> None:
    """`helm uninstall`; the fleet's DeviceClasses (the release took them) are put back."""
    try:
        args = ["uninstall", shape.release, "-n", shape.namespace, "--wait"]
        await helm(helm_path, kubeconfig, *args)
    finally:
        await install_device_classes(api_client)


def nvidia_crd(chart: Path) -> dict[str, Any]:
    """NVIDIA's ComputeDomain CRD, from its chart."""
    path = chart / "crds" / "resource.nvidia.com_computedomains.yaml"
    crd: dict[str, Any] = yaml.safe_load(path.read_text())
    return crd


async def install_nvidia_crd(admin: KubeClient, chart: Path) -> None:
    body = nvidia_crd(chart)
    current = await admin.get(CRDS, body["metadata"]["name"])
    body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    await admin.replace(CRDS, body)

    async def serving() -> bool:
        # After a schema change the apiserver rebuilds the CR storage (429 until then).
        try:
            await admin.list(COMPUTE_DOMAINS, limit=1)
        except ApiError as err:
            if err.is_too_many_requests:
                return False
            raise
        return True

    await eventually(serving, within=30, what="ComputeDomain storage after the CRD change")


def controller_kubelet(
    api_client: ApiClient,
    control_plane: ControlPlane,
    build: UpstreamBuild,
    workdir: Path,
    shape: Shape = FRESH,
) -> Kubelet:
    """Runs every pod of NVIDIA's controller Deployment as NVIDIA's binary (start() it)."""
    return Kubelet(
        api_client,
        control_plane,
        shape.namespace,
        shape.selector,
        workdir,
        entrypoint=controller_entrypoint(build),
    )


async def scale_controller(admin: KubeClient, replicas: int, shape: Shape = FRESH) -> None:
    """Scale NVIDIA's controller Deployment; wait until its status has caught up (the Deployment
    controller writes it in several steps) and exactly that many of its pods run, none when 0:
    while one runs, ours stands by."""
    body = {"spec": {"replicas": replicas}}
    await admin.patch(DEPLOYMENTS, shape.deployment, body, shape.namespace)

    def settled(deployment: dict[str, Any] | None) -> bool:
        status = (deployment or {}).get("status") or {}
        counts = ("replicas", "updatedReplicas", "readyReplicas", "availableReplicas")
        return deployment is not None and (
            status.get("observedGeneration") == deployment["metadata"]["generation"]
            and all(status.get(count, 0) == replicas for count in counts)
        )

    await watch_object(
        admin,
        DEPLOYMENTS,
        shape.deployment,
        settled,
        namespace=shape.namespace,
        what=f"NVIDIA's controller Deployment at {replicas} replicas",
    )

    def pods_settled(pods: Objects) -> bool:
        running = [p for p in pods.values() if (p.get("status") or {}).get("phase") == "Running"]
        return len(running) == replicas if replicas else not pods

    await watch_objects(
        admin,
        r.PODS,
        pods_settled,
        namespace=shape.namespace,
        label_selector=shape.selector,
        what=f"{replicas} pod(s) of NVIDIA's controller",
    )


DAEMON_RBAC_TEMPLATE = "templates/rbac-compute-domain-daemon.yaml"


async def install_daemon_rbac(
    admin: KubeClient, helm_path: Path, chart: Path, namespace: str
) -> list[tuple[Resource, str]]:
    """What NVIDIA's ``chart`` grants its IMEX daemons' ServiceAccount, rendered by `helm
    template` for driver namespace ``namespace``: the ServiceAccount (kept if it exists), the
    ClusterRole and its binding, renamed after the namespace so that tests (and a release of
    the chart) do not share them; the rules and subjects are the chart's. Returns the
    cluster-scoped objects made, for ``remove_cluster_objects``."""
    kinds = {
        "ServiceAccount": r.SERVICE_ACCOUNTS,
        "ClusterRole": CLUSTER_ROLES,
        "ClusterRoleBinding": CLUSTER_ROLE_BINDINGS,
    }
    made: list[tuple[Resource, str]] = []
    for doc in render_chart(
        helm_path, chart, namespace, CHART_VALUES, show_only=DAEMON_RBAC_TEMPLATE
    ):
        resource = kinds[doc["kind"]]
        if not resource.namespaced:
            doc["metadata"]["name"] = f"{doc['metadata']['name']}-{namespace}"
        if doc["kind"] == "ClusterRoleBinding":
            doc["roleRef"]["name"] = f"{doc['roleRef']['name']}-{namespace}"
        try:
            await admin.create(resource, doc, namespace if resource.namespaced else None)
        except ApiError as err:
            if not err.is_already_exists:
                raise
        if not resource.namespaced:
            made.append((resource, doc["metadata"]["name"]))
    return made


async def remove_cluster_objects(admin: KubeClient, made: list[tuple[Resource, str]]) -> None:
    for resource, name in made:
        try:
            await admin.delete(resource, name)
        except ApiError as err:
            if not err.is_not_found:
                raise
