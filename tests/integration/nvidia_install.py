"""A stand-in for an NVIDIA DRA driver install (chart `dra-driver-nvidia-gpu` v0.4.x), to swap
our controller into and back out of.

NVIDIA's controller binary runs in test_upstream_controller.py (which shows that its children
equal ours but for contract §21); a swap needs more of its install than the binary, so this
plays the parts a swap meets, as docs/contract.md describes them: the driver namespace with the
chart's IMEX daemon ServiceAccount and ClusterRole, a controller Deployment named and labelled
as the v0.4.1 chart names it (kwok shows its pod Running), NVIDIA's CRD (status with `status` and
`nodes` only), and the objects NVIDIA's v0.4.0 controller writes for a ComputeDomain: the
finalizer by update, both claim templates and the DaemonSet as its templates render them (equal
to ours field for field, except that its FEATURE_GATES lists every gate its binary knows), under
field manager `compute-domain-controller`, authenticated as the chart's controller
ServiceAccount so the apiserver's audit log tells its writes from ours. The daemons are the
fleet simulator's.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import yaml

from computedomain.api import constants as c
from computedomain.api.resources import CLIQUES, COMPUTE_DOMAINS
from computedomain.api.v1beta1 import ComputeDomain
from computedomain.devcluster.crds import CRD_DIR
from computedomain.devcluster.watching import Objects, watch_objects
from computedomain.domain import desired, projection
from computedomain.domain.settings import DaemonSettings
from computedomain.runtime import resources as r
from computedomain.runtime.client import ApiError, KubeClient
from computedomain.runtime.resources import Resource
from tests.kit.rbac import cluster_admin_binding
from tests.kit.waiting import eventually

ROOT = Path(__file__).resolve().parents[2]
NVIDIA_NAMESPACE = "nvidia-dra-driver-gpu"
NVIDIA_CONTROLLER_SA = "dra-driver-nvidia-gpu-service-account-controller"
NVIDIA_FIELD_MANAGER = "compute-domain-controller"
# What NVIDIA's v0.4.0 binary writes into the daemon's FEATURE_GATES (every gate it knows).
NVIDIA_FEATURE_GATES = (
    "AllAlpha=false,AllBeta=false,ComputeDomainCliques=true,ContextualLogging=true,"
    "CrashOnNVLinkFabricErrors=true,DeviceMetadata=false,DynamicMIG=false,"
    "IMEXDaemonsWithDNSNames=true,LoggingAlphaOptions=false,LoggingBetaOptions=true,"
    "MPSSupport=false,NVMLDeviceHealthCheck=false,PassthroughSupport=false,"
    "TimeSlicingSettings=false,"
)
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment", namespaced=True)
CLUSTER_ROLES = Resource(
    "rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False
)
CLUSTER_ROLE_BINDINGS = Resource(
    "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False
)
CRDS = r.CUSTOM_RESOURCE_DEFINITIONS
STANDIN_BINDING = "dra-driver-nvidia-gpu-standin-controller"


async def ensure(kube: KubeClient, res: Resource, body: dict[str, Any], ns: str | None) -> None:
    try:
        await kube.create(res, body, ns)
    except ApiError as err:
        if not err.is_already_exists:
            raise


async def delete_quietly(kube: KubeClient, res: Resource, name: str, ns: str | None) -> None:
    try:
        await kube.delete(res, name, ns, propagation_policy="Background")
    except ApiError as err:
        if not err.is_not_found:
            raise


# The selector label of NVIDIA's chart: `<chart name>-component`. Since v0.4.1 its controller
# pods carry no other component label (v0.4.0 added nvidia-dra-driver-gpu-component), so the
# stand-in has the newer shape: detection and hack/swap.sh must find it by this one.
CONTROLLER_POD_SELECTOR = {f"{c.NVIDIA_CHART_NAME}-component": c.NVIDIA_CONTROLLER_COMPONENT}


def controller_deployment(replicas: int = 1) -> dict[str, Any]:
    # As NVIDIA's v0.4.1 chart renders it for release nvidia-dra-driver-gpu without a
    # nameOverride (tests/fixtures/nvidia-chart/controller.yaml has the renders).
    labels = {
        "app.kubernetes.io/name": "dra-driver-nvidia-gpu",
        "app.kubernetes.io/instance": "nvidia-dra-driver-gpu",
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
                    "serviceAccountName": NVIDIA_CONTROLLER_SA,
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


def nvidia_crd() -> dict[str, Any]:
    """NVIDIA's ComputeDomain CRD: ours with the status schema cut to `status` and `nodes`."""
    crd: dict[str, Any] = yaml.safe_load(
        (CRD_DIR / "resource.nvidia.com_computedomains.yaml").read_text()
    )
    for version in crd["spec"]["versions"]:
        status = version["schema"]["openAPIV3Schema"]["properties"]["status"]
        status["properties"] = {k: status["properties"][k] for k in ("status", "nodes")}
        version.pop("additionalPrinterColumns", None)
    return crd


async def install_nvidia_crd(admin: KubeClient) -> None:
    body = nvidia_crd()
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


async def install(admin: KubeClient) -> None:
    """Namespace, ServiceAccounts, the daemon's RBAC and NVIDIA's controller Deployment."""
    ns = NVIDIA_NAMESPACE
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
    await ensure(admin, r.NAMESPACES, namespace, None)
    for name in (NVIDIA_CONTROLLER_SA, c.DAEMON_SERVICE_ACCOUNT):
        sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}
        await ensure(admin, r.SERVICE_ACCOUNTS, sa, ns)
    rbac = ROOT / "manifests" / "rbac"
    role = yaml.safe_load((rbac / "daemon_role.yaml").read_text())
    await ensure(admin, CLUSTER_ROLES, role, None)
    binding = yaml.safe_load((rbac / "daemon_role_binding.yaml").read_text())
    binding["subjects"][0]["namespace"] = ns
    await ensure(admin, CLUSTER_ROLE_BINDINGS, binding, None)
    # NVIDIA's controller ClusterRole is its chart's business; the stand-in acts as admin.
    standin = cluster_admin_binding(STANDIN_BINDING, NVIDIA_CONTROLLER_SA, ns)
    await ensure(admin, CLUSTER_ROLE_BINDINGS, standin, None)
    await ensure(admin, DEPLOYMENTS, controller_deployment(), ns)


async def scale_controller(admin: KubeClient, replicas: int) -> None:
    """Scale NVIDIA's stand-in controller Deployment and wait until that many of its pods run.
    The stand-in runs no process: while a pod of it runs ours stands by, so a test that needs
    ours to act (finalize a CD, write status) scales it to 0 first, as a swap does."""
    body = {"spec": {"replicas": replicas}}
    await admin.patch(DEPLOYMENTS, c.NVIDIA_CONTROLLER_DEPLOYMENT, body, NVIDIA_NAMESPACE)

    def settled(pods: Objects) -> bool:
        running = [p for p in pods.values() if (p.get("status") or {}).get("phase") == "Running"]
        return len(running) == replicas if replicas else not pods

    await watch_objects(
        admin,
        r.PODS,
        settled,
        namespace=NVIDIA_NAMESPACE,
        label_selector=",".join(f"{k}={v}" for k, v in CONTROLLER_POD_SELECTOR.items()),
        what=f"{replicas} pod(s) of NVIDIA's controller",
    )


async def uninstall(admin: KubeClient) -> None:
    await delete_quietly(admin, DEPLOYMENTS, c.NVIDIA_CONTROLLER_DEPLOYMENT, NVIDIA_NAMESPACE)
    await delete_quietly(admin, CLUSTER_ROLE_BINDINGS, STANDIN_BINDING, None)


class NvidiaController:
    """What NVIDIA's v0.4.0 controller writes for a CD (§20), by its own identity."""

    def __init__(self, kube: KubeClient) -> None:
        self.kube = kube
        self.settings = DaemonSettings(
            driver_namespace=NVIDIA_NAMESPACE, image=c.NVIDIA_DRIVER_IMAGE, log_verbosity=4
        )

    async def adopt(self, cd: dict[str, Any]) -> dict[str, Any]:
        ns = cd["metadata"]["namespace"]
        cd = copy.deepcopy(cd)
        cd["metadata"]["finalizers"] = [c.FINALIZER]
        cd = await self.kube.replace(COMPUTE_DOMAINS, cd, ns)
        model = ComputeDomain.model_validate(cd)
        rct = desired.daemon_resource_claim_template(model, self.settings)
        await self.kube.create(r.RESOURCE_CLAIM_TEMPLATES, rct, NVIDIA_NAMESPACE)
        ds = desired.daemon_daemonset(model, self.settings)
        for env in ds["spec"]["template"]["spec"]["containers"][0]["env"]:
            if env["name"] == c.FEATURE_GATES_ENV:
                env["value"] = NVIDIA_FEATURE_GATES
        await self.kube.create(r.DAEMONSETS, ds, NVIDIA_NAMESPACE)
        workload = desired.workload_resource_claim_template(model)
        await self.kube.create(r.RESOURCE_CLAIM_TEMPLATES, workload, ns)
        cd["status"] = {"status": c.STATUS_NOT_READY}
        result: dict[str, Any] = await self.kube.replace(
            COMPUTE_DOMAINS, cd, ns, subresource="status"
        )
        return result

    async def project_until_ready(self, cd: dict[str, Any], within: float = 120.0) -> None:
        """Wait until the CD's cliques list numNodes Ready daemons, then write that status."""
        uid = cd["metadata"]["uid"]
        want = int((cd.get("spec") or {}).get("numNodes") or 0)

        def nodes_when_ready(cliques: Objects) -> list[Any] | None:
            parsed = [projection.clique_from_dict(obj) for obj in cliques.values()]
            nodes = projection.project_nodes(parsed, [], legacy=False)
            ready = projection.global_status(nodes, want) == c.STATUS_READY
            return nodes if ready and len(nodes) >= want else None

        nodes = await watch_objects(
            self.kube,
            CLIQUES,
            nodes_when_ready,
            namespace=NVIDIA_NAMESPACE,
            label_selector=f"{c.CD_LABEL}={uid}",
            within=within,
            what=f"{want} Ready daemons of {cd['metadata']['name']}",
        )
        ns, name = cd["metadata"]["namespace"], cd["metadata"]["name"]
        current = await self.kube.get(COMPUTE_DOMAINS, name, ns)
        current["status"] = {
            "status": c.STATUS_READY,
            "nodes": [json.loads(json.dumps(n.to_dict())) for n in nodes],
        }
        await self.kube.replace(COMPUTE_DOMAINS, current, ns, subresource="status")
