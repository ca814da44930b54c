"""The chart on the real control plane with the pinned helm: install into a fresh namespace,
upgrade, rollback, uninstall; and the CRD upgrade command NOTES.txt gives.

kwok schedules the Deployment's pods onto fake nodes and shows them Running; they do not run
the controller (nothing here needs it to).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from computedomain.devcluster.assets import AssetsUnavailableError, find_assets
from computedomain.devcluster.rest import request_json
from computedomain.devcluster.watching import watch_object
from computedomain.runtime.client import KubeClient
from tests.integration.nvidia_install import DEPLOYMENTS
from tests.kit.waiting import eventually
from tests.unit.helm.support import (
    CHART,
    NVIDIA_VALUES,
    OUR_NVIDIA_VALUES,
    helm_or_skip,
    run_helm,
)

pytestmark = pytest.mark.integration

RELEASE = "cd"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
CRDS = ("computedomains.resource.nvidia.com", "computedomaincliques.resource.nvidia.com")
IMAGE = "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu"
RBAC = "/apis/rbac.authorization.k8s.io/v1"


@pytest.fixture(scope="module")
def helm() -> Path:
    return helm_or_skip()


def kubectl(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    try:
        binary = find_assets()["kubectl"]  # a no-op build when the cache is current
    except AssetsUnavailableError as error:
        pytest.fail(f"kubectl unavailable although the control plane runs: {error}")
    return subprocess.run(
        [str(binary), f"--kubeconfig={kubeconfig}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


async def get(api_client: ApiClient, path: str) -> dict[str, Any] | None:
    """The object, or None when it does not exist."""
    try:
        return await request_json(api_client, "GET", path)
    except ApiException as error:
        if error.status == 404:
            return None
        raise


async def crd_versions(api_client: ApiClient) -> dict[str, str]:
    versions = {}
    for name in CRDS:
        crd = await get(api_client, f"{CRD_PATH}/{name}")
        assert crd is not None, f"CRD {name} missing"
        versions[name] = crd["metadata"]["resourceVersion"]
    return versions


def installed_paths(namespace: str, fullname: str) -> dict[str, str]:
    """Every object the chart installs with default values: what -> API path."""
    ns_api, ns_apps = f"/api/v1/namespaces/{namespace}", f"/apis/apps/v1/namespaces/{namespace}"
    ns_rbac = f"{RBAC}/namespaces/{namespace}"
    return {
        "Deployment": f"{ns_apps}/deployments/{fullname}",
        "ServiceAccount": f"{ns_api}/serviceaccounts/{fullname}",
        "daemon ServiceAccount": f"{ns_api}/serviceaccounts/compute-domain-daemon-service-account",
        "metrics Service": f"{ns_api}/services/{fullname}-metrics",
        "PodDisruptionBudget": (
            f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/{fullname}"
        ),
        "Role": f"{ns_rbac}/roles/{fullname}",
        "RoleBinding": f"{ns_rbac}/rolebindings/{fullname}",
        "leader-election Role": f"{ns_rbac}/roles/{fullname}-leader-election",
        "leader-election RoleBinding": f"{ns_rbac}/rolebindings/{fullname}-leader-election",
        "ClusterRole": f"{RBAC}/clusterroles/{fullname}",
        "ClusterRoleBinding": f"{RBAC}/clusterrolebindings/{fullname}",
        # Ours, named after the fullname (never NVIDIA's compute-domain-daemon-role).
        "daemon ClusterRole": f"{RBAC}/clusterroles/{fullname}-daemon",
        "daemon ClusterRoleBinding": f"{RBAC}/clusterrolebindings/{fullname}-daemon",
    }


async def image_name(api_client: ApiClient, path: str) -> str:
    deployment = await request_json(api_client, "GET", path)
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    values = [str(e["value"]) for e in container["env"] if e["name"] == "IMAGE_NAME"]
    return values[0] if values else ""  # none: the kubelet plugin's image


@pytest.fixture
async def release(
    helm: Path, kubeconfig_path: Path, namespace: str
) -> AsyncIterator[tuple[str, str]]:
    """(namespace, fullname) for one release; uninstalled afterwards whatever happened, so no
    cluster-scoped object outlives the test (the namespace fixture removes the rest)."""
    # A name of its own keeps the cluster-scoped ClusterRoles clear of manifests/ tests.
    fullname = f"cdc-{namespace[-6:]}"
    yield namespace, fullname
    await asyncio.to_thread(
        run_helm, helm, "uninstall", RELEASE, "--namespace", namespace,
        "--kubeconfig", str(kubeconfig_path), "--ignore-not-found", "--wait",
    )  # fmt: skip


async def test_install_upgrade_rollback_uninstall(
    helm: Path, kubeconfig_path: Path, api_client: ApiClient, release: tuple[str, str]
) -> None:
    namespace, fullname = release
    base = ["--namespace", namespace, "--kubeconfig", str(kubeconfig_path)]

    async def helm_ok(*args: str) -> str:
        result = await asyncio.to_thread(run_helm, helm, *args, *base)
        assert result.returncode == 0, f"helm {' '.join(args)}:\n{result.stderr}"
        return result.stdout

    crds_before = await crd_versions(api_client)
    # Without --skip-crds: the CRDs exist (from crds/), and Helm leaves existing CRDs alone.
    out = await helm_ok(
        "install", RELEASE, str(CHART), "--set", f"fullnameOverride={fullname}",
        "--wait", "--timeout", "120s",
    )  # fmt: skip
    assert "STATUS: deployed" in out
    assert "kubectl apply --server-side --force-conflicts -f" in out  # NOTES.txt
    assert await crd_versions(api_client) == crds_before, "helm install changed a CRD"

    paths = installed_paths(namespace, fullname)
    for what, path in paths.items():
        obj = await get(api_client, path)
        assert obj is not None, f"{what} not installed ({path})"
        assert obj["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "Helm", what
        assert obj["metadata"]["annotations"]["meta.helm.sh/release-namespace"] == namespace
        if "/namespaces/" in path:
            assert obj["metadata"]["namespace"] == namespace, what
        if what.endswith("Binding") and not what.startswith("daemon"):
            assert obj["subjects"] == [
                {"kind": "ServiceAccount", "name": fullname, "namespace": namespace}
            ], what
    daemon_binding = await request_json(api_client, "GET", paths["daemon ClusterRoleBinding"])
    assert daemon_binding["subjects"][0]["namespace"] == namespace

    # --wait saw the Deployment available: kwok runs both replicas on fake nodes.
    pods = await request_json(
        api_client, "GET", f"/api/v1/namespaces/{namespace}/pods",
        query={"labelSelector": f"app.kubernetes.io/instance={RELEASE}"},
    )  # fmt: skip
    running = [p for p in pods["items"] if p["status"].get("phase") == "Running"]
    assert len(running) == 2, [p["status"].get("phase") for p in pods["items"]]
    assert all(p["spec"]["nodeName"] for p in running)
    assert all(p["spec"]["serviceAccountName"] == fullname for p in running)

    deployment = paths["Deployment"]
    assert await image_name(api_client, deployment) == ""  # the kubelet plugin's
    await helm_ok(
        "upgrade", RELEASE, str(CHART), "--reuse-values", "--set", "image.tag=v0.4.1",
        "--wait", "--timeout", "120s",
    )  # fmt: skip
    assert await image_name(api_client, deployment) == f"{IMAGE}:v0.4.1"

    await helm_ok("rollback", RELEASE, "1", "--wait", "--timeout", "120s")
    assert await image_name(api_client, deployment) == ""
    history = yaml.safe_load(await helm_ok("history", RELEASE, "--output", "yaml"))
    assert [(h["revision"], h["status"]) for h in history] == [
        (1, "superseded"),
        (2, "superseded"),
        (3, "deployed"),
    ]
    assert history[-1]["description"] == "Rollback to 1"
    assert await crd_versions(api_client) == crds_before, "helm upgrade changed a CRD"

    await helm_ok("uninstall", RELEASE, "--wait", "--timeout", "120s")

    async def all_gone() -> bool:
        return all([await get(api_client, path) is None for path in paths.values()])

    await eventually(all_gone, within=60, what="every installed object deleted")
    # Helm never deletes CRDs: they and any ComputeDomain survive an uninstall.
    assert await crd_versions(api_client) == crds_before


async def test_an_nvidia_values_file_installs(
    helm: Path, kubeconfig_path: Path, api_client: ApiClient, release: tuple[str, str]
) -> None:
    """NVIDIA's values file with the keys of ours a swap adds, on the real apiserver: the
    per-namespace Role and RoleBinding of an additional namespace and the NetworkPolicy are
    accepted, and the controller runs with NVIDIA's driver image as IMAGE_NAME."""
    namespace, fullname = release
    extra = f"{namespace}-old"
    await request_json(
        api_client, "POST", "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": extra}},
    )  # fmt: skip
    env = [
        {"name": "ADDITIONAL_NAMESPACES", "value": extra},
        {"name": "MAX_NODES_PER_IMEX_DOMAIN", "value": "9"},
    ]
    try:
        result = await asyncio.to_thread(
            run_helm, helm, "install", RELEASE, str(CHART),
            "--namespace", namespace, "--kubeconfig", str(kubeconfig_path),
            "-f", str(NVIDIA_VALUES), "-f", str(OUR_NVIDIA_VALUES),
            "--set", f"namespaceOverride={namespace}", "--set", f"fullnameOverride={fullname}",
            "--set", "controller.networkPolicy.enabled=true",
            # The fleet has no control-plane node, and system-node-critical is admitted only in
            # kube-system: NVIDIA's scheduling values would leave the pod unscheduled.
            "--set", "controller.nodeSelector=null", "--set", "controller.priorityClassName=",
            "--set-json", f"controller.containers.computeDomain.env={json.dumps(env)}",
            "--wait", "--timeout", "120s",
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        for ns in (namespace, extra):
            role = await get(api_client, f"{RBAC}/namespaces/{ns}/roles/{fullname}")
            binding = await get(api_client, f"{RBAC}/namespaces/{ns}/rolebindings/{fullname}")
            assert role is not None, ns
            assert binding is not None, ns
            assert binding["subjects"] == [
                {"kind": "ServiceAccount", "name": fullname, "namespace": namespace}
            ]
        policy = await get(
            api_client,
            f"/apis/networking.k8s.io/v1/namespaces/{namespace}/networkpolicies/{fullname}",
        )
        assert policy is not None
        deployment = f"/apis/apps/v1/namespaces/{namespace}/deployments/{fullname}"
        assert (
            await image_name(api_client, deployment) == "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.8.1"
        )
        live = await request_json(api_client, "GET", deployment)
        (container,) = live["spec"]["template"]["spec"]["containers"]
        assert container["image"] == "registry.example.com/gpu/computedomain-controller:0.1.0-rc1"
        names = [e["name"] for e in container["env"]]
        assert names.count("MAX_NODES_PER_IMEX_DOMAIN") == 1
        # `helm --wait` may return before the pod is Ready: the chart's maxUnavailable is 1, so
        # for one replica Helm's readiness rule already holds at 0 available.
        await watch_object(
            KubeClient.from_api_client(api_client), DEPLOYMENTS, fullname,
            lambda d: d is not None and d.get("status", {}).get("availableReplicas") == 1,
            namespace=namespace, within=120, what="the controller Deployment available",
        )  # fmt: skip
    finally:
        await asyncio.to_thread(
            run_helm, helm, "uninstall", RELEASE, "--namespace", namespace,
            "--kubeconfig", str(kubeconfig_path), "--ignore-not-found", "--wait",
        )  # fmt: skip
        await request_json(api_client, "DELETE", f"/api/v1/namespaces/{extra}")


async def test_crd_upgrade_command_works_over_kubectl_create(
    kubeconfig_path: Path, api_client: ApiClient, tmp_path: Path
) -> None:
    """NOTES.txt's `kubectl apply --server-side --force-conflicts -f <chart>/crds/`: on the
    session's CRDs (created by a plain POST, as `kubectl create` or Helm does), and on a renamed
    copy created by `kubectl create`, where a changed field conflicts without --force-conflicts."""
    result = kubectl(
        kubeconfig_path, "apply", "--server-side", "--force-conflicts", "-f", str(CHART / "crds")
    )
    assert result.returncode == 0, result.stderr
    for name in CRDS:
        assert f"customresourcedefinition.apiextensions.k8s.io/{name} serverside-applied" in (
            result.stdout
        )

    source = yaml.safe_load_all(
        (CHART / "crds" / "resource.nvidia.com_computedomains.yaml").read_text()
    )
    crd = next(doc for doc in source if doc)
    group = f"helm-{uuid.uuid4().hex[:6]}.computedomain.test"
    crd["spec"]["group"] = group
    crd["metadata"]["name"] = f"computedomains.{group}"
    path = tmp_path / "crd.yaml"
    path.write_text(yaml.safe_dump(crd))
    created = kubectl(kubeconfig_path, "create", "-f", str(path))
    assert created.returncode == 0, created.stderr
    try:
        columns = crd["spec"]["versions"][0]["additionalPrinterColumns"]
        columns[0]["description"] = "changed by the CRD upgrade"
        path.write_text(yaml.safe_dump(crd))
        refused = kubectl(kubeconfig_path, "apply", "--server-side", "-f", str(path))
        assert refused.returncode != 0
        assert "conflict" in refused.stderr.lower(), refused.stderr
        applied = kubectl(
            kubeconfig_path, "apply", "--server-side", "--force-conflicts", "-f", str(path)
        )
        assert applied.returncode == 0, applied.stderr
        stored = await request_json(api_client, "GET", f"{CRD_PATH}/{crd['metadata']['name']}")
        (version,) = stored["spec"]["versions"]
        assert version["additionalPrinterColumns"][0]["description"] == (
            "changed by the CRD upgrade"
        )
    finally:
        kubectl(kubeconfig_path, "delete", "-f", str(path), "--ignore-not-found", "--wait=false")


def plugin_daemonset(name: str) -> dict[str, Any]:
    """NVIDIA's kubelet plugin DaemonSet as its chart labels it; no node runs its pods."""
    select = {"dra-driver-nvidia-gpu-component": "kubelet-plugin"}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/name": "dra-driver-nvidia-gpu"}},
        "spec": {
            "selector": {"matchLabels": select},
            "template": {
                "metadata": {"labels": select},
                "spec": {
                    "nodeSelector": {"computedomain.dev/nowhere": "true"},
                    "containers": [{"name": "compute-domains", "image": f"{IMAGE}:v0.4.1"}],
                },
            },
        },
    }


async def test_an_install_in_its_own_namespace_manages_nvidias_driver_namespace(
    helm: Path, kubeconfig_path: Path, api_client: ApiClient, release: tuple[str, str]
) -> None:
    """The README's first path beside NVIDIA's chart (`helm install ... -n <ours>`, no
    driverNamespace): the chart finds NVIDIA's namespace from its kubelet plugin, so the
    controller manages that one and its Role lands there; two plugins' namespaces refuse the
    install in one line."""
    namespace, fullname = release
    nvidia_ns, second_ns = f"{namespace}-nvidia", f"{namespace}-second"
    for ns in (nvidia_ns, second_ns):
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
        await request_json(api_client, "POST", "/api/v1/namespaces", body)
    base = [
        "template", RELEASE, str(CHART), "--namespace", namespace,
        "--kubeconfig", str(kubeconfig_path), "--dry-run=server",
        "--set", f"fullnameOverride={fullname}",
    ]  # fmt: skip
    daemonsets = "/apis/apps/v1/namespaces/{}/daemonsets"
    plugin = plugin_daemonset("dra-driver-nvidia-gpu-kubelet-plugin")
    try:
        alone = await asyncio.to_thread(run_helm, helm, *base)
        assert alone.returncode == 0, alone.stderr
        assert env_value(alone.stdout, "NAMESPACE") == {"valueFrom": namespace_ref()}

        await request_json(api_client, "POST", daemonsets.format(nvidia_ns), plugin)
        found = await asyncio.to_thread(run_helm, helm, *base)
        assert found.returncode == 0, found.stderr
        assert env_value(found.stdout, "NAMESPACE") == {"value": nvidia_ns}
        roles = [o for o in yaml.safe_load_all(found.stdout) if o and o["kind"] == "Role"]
        assert {r["metadata"]["namespace"] for r in roles if r["metadata"]["name"] == fullname} == {
            nvidia_ns
        }

        await request_json(api_client, "POST", daemonsets.format(second_ns), plugin)
        refused = await asyncio.to_thread(run_helm, helm, *base)
        assert refused.returncode != 0
        assert (
            f"NVIDIA's kubelet plugin runs in namespaces {nvidia_ns}, {second_ns}: set "
            "driverNamespace to the one this controller serves" in refused.stderr
        ), refused.stderr
        # Said explicitly, it wins.
        chosen = await asyncio.to_thread(
            run_helm, helm, *base, "--set", f"driverNamespace={second_ns}"
        )
        assert chosen.returncode == 0, chosen.stderr
        assert env_value(chosen.stdout, "NAMESPACE") == {"value": second_ns}
    finally:
        # The plugin DaemonSets go at once (a namespace is torn down slowly): a later test's
        # install must not find them.
        for ns in (nvidia_ns, second_ns):
            with contextlib.suppress(ApiException):
                await request_json(
                    api_client, "DELETE", f"{daemonsets.format(ns)}/{plugin['metadata']['name']}"
                )
            await request_json(api_client, "DELETE", f"/api/v1/namespaces/{ns}")


def namespace_ref() -> dict[str, Any]:
    return {"fieldRef": {"fieldPath": "metadata.namespace"}}


def env_value(rendered: str, name: str) -> dict[str, Any]:
    """The controller Deployment's env entry ``name`` without its name."""
    (deployment,) = [o for o in yaml.safe_load_all(rendered) if o and o["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    (entry,) = [e for e in container["env"] if e["name"] == name]
    return {k: v for k, v in entry.items() if k != "name"}
