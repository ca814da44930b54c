"""`kubectl apply -k manifests/default` on the real control plane: objects land, and the
controller pods pass PodSecurity admission in the restricted namespace (kwok runs them)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from computedomain.devcluster.assets import AssetsUnavailableError, find_assets
from computedomain.devcluster.controlplane import ControlPlane
from computedomain.devcluster.rest import request_json
from tests.kit.waiting import eventually

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
NAMESPACE = "computedomain-system"
SELECTOR = "app.kubernetes.io/name=computedomain-controller,app.kubernetes.io/component=controller"
CLUSTER_SCOPED_RBAC = [
    ("clusterrolebinding", "computedomain-controller"),
    ("clusterrole", "computedomain-controller"),
    ("clusterrolebinding", "computedomain-daemon"),
    ("clusterrole", "computedomain-daemon"),
]


def kubectl(kubeconfig: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    try:
        binary = find_assets()["kubectl"]  # a no-op build when the cache is current
    except AssetsUnavailableError as error:
        pytest.fail(f"kubectl unavailable although the control plane runs: {error}")
    return subprocess.run(
        [str(binary), f"--kubeconfig={kubeconfig}", *args],
        capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def installed(control_plane: ControlPlane) -> Iterator[subprocess.CompletedProcess[str]]:
    """Applies manifests/default once for this module; afterwards removes what it added, except
    the CRDs other tests share, and waits for the namespace to go."""
    kubeconfig = control_plane.kubeconfig
    result = kubectl(kubeconfig, "apply", "-k", str(ROOT / "manifests" / "default"))
    # The shipped namespace enforces baseline (NVIDIA's daemon pods live there too). Enforce
    # restricted and recreate the controller pods, so admission judges them by restricted.
    kubectl(kubeconfig, "label", "namespace", NAMESPACE, "--overwrite",
            "pod-security.kubernetes.io/enforce=restricted")  # fmt: skip
    kubectl(kubeconfig, "delete", "pods", "-n", NAMESPACE, "-l", SELECTOR, "--wait=true")
    try:
        yield result
    finally:
        kubectl(kubeconfig, "delete", "namespace", NAMESPACE, "--ignore-not-found",
                "--wait=true", "--timeout=90s", timeout=120)  # fmt: skip
        for kind, name in CLUSTER_SCOPED_RBAC:
            kubectl(kubeconfig, "delete", kind, name, "--ignore-not-found")


def _running(pod: dict[str, Any]) -> bool:
    return bool(pod.get("spec", {}).get("nodeName")) and pod["status"].get("phase") == "Running"


async def test_apply_default_admits_controller_pods_under_restricted_pss(
    installed: subprocess.CompletedProcess[str], api_client: ApiClient
) -> None:
    assert installed.returncode == 0, installed.stderr
    assert "deployment.apps/computedomain-controller created" in installed.stdout or (
        "deployment.apps/computedomain-controller configured" in installed.stdout
    )

    namespace = await request_json(api_client, "GET", f"/api/v1/namespaces/{NAMESPACE}")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"

    async def two_running_pods() -> list[dict[str, Any]] | None:
        pods = await request_json(
            api_client, "GET", f"/api/v1/namespaces/{NAMESPACE}/pods",
            query={"labelSelector": SELECTOR},
        )  # fmt: skip
        running = [pod for pod in pods["items"] if _running(pod)]
        return running if len(running) == 2 else None

    async def replica_sets_without_failure() -> list[dict[str, Any]] | None:
        sets = await request_json(
            api_client, "GET", f"/apis/apps/v1/namespaces/{NAMESPACE}/replicasets",
            query={"labelSelector": SELECTOR},
        )  # fmt: skip
        return sets["items"] or None

    # Admission refusals surface as a ReplicaFailure condition on the ReplicaSet.
    (replica_set,) = await eventually(
        replica_sets_without_failure, within=60, what="controller ReplicaSet"
    )
    pods = await eventually(two_running_pods, within=90, what="2 running controller pods")
    sets = await replica_sets_without_failure()
    assert sets is not None
    for item in sets:
        failures = [c for c in item["status"].get("conditions") or []
                    if c["type"] == "ReplicaFailure"]  # fmt: skip
        assert not failures, failures
    for pod in pods:
        assert pod["spec"]["serviceAccountName"] == "computedomain-controller"
        assert pod["spec"]["securityContext"]["runAsUser"] == 65532
    assert replica_set["metadata"]["namespace"] == NAMESPACE

    for path in (
        f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/compute-domain-daemon-service-account",
        f"/apis/policy/v1/namespaces/{NAMESPACE}/poddisruptionbudgets/computedomain-controller",
        f"/api/v1/namespaces/{NAMESPACE}/services/computedomain-controller-metrics",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles/computedomain-daemon",
    ):
        await request_json(api_client, "GET", path)


async def test_restricted_namespace_really_refuses_a_non_compliant_pod(
    installed: subprocess.CompletedProcess[str], api_client: ApiClient
) -> None:
    """The control for the test above: PodSecurity admission is live in this namespace."""
    assert installed.returncode == 0, installed.stderr

    async def default_service_account() -> bool:
        try:
            await request_json(
                api_client, "GET", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default"
            )
        except ApiException as error:
            if error.status == 404:
                return False
            raise
        return True

    await eventually(default_service_account, within=30, what="default ServiceAccount")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "not-restricted"},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
    }
    with pytest.raises(ApiException) as refused:
        await request_json(
            api_client, "POST", f"/api/v1/namespaces/{NAMESPACE}/pods", pod,
            query={"dryRun": "All"},
        )  # fmt: skip
    assert refused.value.status == 403
    assert "violates PodSecurity" in str(refused.value.body)
