"""No install path of ours replaces or edits an object NVIDIA's chart owns (issue 29).

NVIDIA's v0.4.1 chart is installed by Helm as its fresh install makes it (release and namespace
`dra-driver-nvidia-gpu`, both of its CRDs), and what it owns is snapshotted: every object of its
release manifest (`helm get manifest`: its ServiceAccounts, ClusterRoles, ClusterRoleBindings,
Roles, RoleBindings, Deployment, DaemonSet, DeviceClasses, ...), its release Secrets, its
namespace, and the labels and annotations of the two CRDs. Then each install path of ours is
really applied over it, one after the other (`helm install` as README.md and docs/operations.md
give it, `kubectl apply -k`), NVIDIA's objects are compared with the snapshot, ours are removed,
and they are compared again (a removal must not take NVIDIA's objects along either).

Compared whole, uid and creationTimestamp included (a delete and re-create is a change). Left
out: resourceVersion, generation and managedFields (the apiserver's bookkeeping of any write; a
changed spec shows itself), status (written by controllers, never by an install), and on the
CRDs alone kubectl's last-applied-configuration annotation: `manifests/default` upgrades the
CRDs' schema on purpose (client-side apply records there what it applied), and what this test
holds it to is that NVIDIA's labels and annotations stay.

No controller runs: kwok shows the pods Running, and nothing here needs more.
"""

from __future__ import annotations

import asyncio
import copy
import json
import subprocess
import time
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from computedomain.devcluster.assets import REPO_ROOT, AssetsUnavailableError, find_assets
from computedomain.devcluster.clients import api_client_from_kubeconfig
from computedomain.devcluster.controlplane import ControlPlane
from computedomain.devcluster.crds import CRD_DIR, apply_crds
from computedomain.devcluster.helm import find_helm
from computedomain.devcluster.upstream import UpstreamBuild
from computedomain.runtime.client import KubeClient
from tests.integration import nvidia_install as nvidia
from tests.unit.helm.support import CHART, run_helm

pytestmark = pytest.mark.integration

NVIDIA = nvidia.FRESH
NVIDIA_NS = NVIDIA.namespace
CRDS = ("computedomains.resource.nvidia.com", "computedomaincliques.resource.nvidia.com")
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
BOOKKEEPING = ("resourceVersion", "generation", "managedFields")
# Ours, as README.md names the release and the namespace.
RELEASE = "computedomain"
OUR_NS = "computedomain-system"
VALUES = REPO_ROOT / "manifests" / "helm" / "values"
DAEMON_SA = "compute-domain-daemon-service-account"
OUR_DAEMON_RBAC = "computedomain-daemon"

T = TypeVar("T")
Objects = dict[str, dict[str, Any]]


@dataclass(frozen=True)
class InstallPath:
    """One way of installing ours: `helm install` with ``helm`` arguments, or `kubectl apply -k`
    of ``kustomization``; the controller Deployment lands in ``namespace``; with
    ``daemon_subject`` our daemon ClusterRoleBinding binds the daemon ServiceAccount of that
    namespace (None: the path renders no daemon RBAC)."""

    key: str
    namespace: str
    helm: tuple[str, ...] | None = None
    kustomization: str | None = None
    daemon_subject: str | None = None

    @property
    def creates_namespace(self) -> bool:
        return self.namespace != NVIDIA_NS


PATHS = [
    # README.md: the chart's defaults in a namespace of its own. The chart finds NVIDIA's
    # driver namespace from its kubelet plugin, so ours manages that one, and our binding grants
    # NVIDIA's daemon ServiceAccount there (left alone itself).
    InstallPath("helm", OUR_NS, helm=("--create-namespace",), daemon_subject=NVIDIA_NS),
    # docs/operations.md, the two install modes beside NVIDIA's chart.
    InstallPath(
        "helm-beside-nvidia",
        OUR_NS,
        helm=(
            "--create-namespace",
            "-f",
            str(VALUES / "beside-nvidia.yaml"),
            "--set",
            f"driverNamespace={NVIDIA_NS}",
        ),
    ),
    InstallPath(
        "helm-nvidia-driver-namespace",
        NVIDIA_NS,
        helm=("-f", str(VALUES / "nvidia-driver-namespace.yaml")),
    ),
    # The defaults in NVIDIA's namespace, where NVIDIA's daemon ServiceAccount exists: the chart
    # leaves it alone (lookup) and binds it to its own ClusterRole as well.
    InstallPath("helm-defaults-in-nvidia-namespace", NVIDIA_NS, helm=(), daemon_subject=NVIDIA_NS),
    InstallPath("kustomize-default", OUR_NS, kustomization="default", daemon_subject=OUR_NS),
    InstallPath("kustomize-nvidia", NVIDIA_NS, kustomization="nvidia"),
]


def run_async(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """The coroutine ``make()`` on an event loop of its own, in a thread of its own: this
    module's tests are plain functions around a module-wide install."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(lambda: asyncio.run(make())).result()


def kubectl(kubeconfig: Path, *args: str, check: bool = True) -> str:
    try:
        binary = find_assets()["kubectl"]  # a no-op build when the cache is current
    except AssetsUnavailableError as error:
        pytest.fail(f"kubectl unavailable although the control plane runs: {error}")
    result = subprocess.run(
        [str(binary), f"--kubeconfig={kubeconfig}", *args],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    if check:
        assert result.returncode == 0, f"kubectl {' '.join(args)}:\n{result.stderr}"
    return result.stdout


def items(listed: str) -> list[dict[str, Any]]:
    """The objects of `kubectl get -o json` output: a List, one object, or nothing."""
    if not listed.strip():
        return []
    doc: dict[str, Any] = json.loads(listed)
    found: list[dict[str, Any]] = doc["items"] if doc.get("kind") == "List" else [doc]
    return found


def key_of(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    where = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{obj['kind']} {where}{meta['name']}"


def comparable(obj: dict[str, Any]) -> dict[str, Any]:
    """What an install of ours must leave as it was (the module docstring says what not)."""
    obj = copy.deepcopy(obj)
    obj.pop("status", None)
    meta = obj["metadata"]
    for field in BOOKKEEPING:
        meta.pop(field, None)
    if obj["kind"] == "CustomResourceDefinition":
        annotations = meta.get("annotations") or {}
        return {
            "uid": meta["uid"],
            "labels": meta.get("labels") or {},
            "annotations": {k: v for k, v in annotations.items() if k != LAST_APPLIED},
        }
    return obj


def short(value: Any) -> str:
    text = "<absent>" if value is _ABSENT else json.dumps(value)
    return text if len(text) <= 160 else f"{text[:150]}... ({len(text)} chars)"


_ABSENT = object()


def changes(before: Any, after: Any, path: str = "") -> list[str]:
    """Each difference as `path: before -> after`, down to the first field that differs."""
    if isinstance(before, dict) and isinstance(after, dict):
        found = []
        for key in sorted(before.keys() | after.keys()):
            found += changes(
                before.get(key, _ABSENT), after.get(key, _ABSENT), f"{path}.{key}" if path else key
            )
        return found
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        pairs = enumerate(zip(before, after, strict=True))
        return [c for i, (b, a) in pairs for c in changes(b, a, f"{path}[{i}]")]
    return [] if before == after else [f"{path}: {short(before)} -> {short(after)}"]


def differences(before: Objects, after: Objects) -> list[str]:
    found = []
    for key in sorted(before.keys() | after.keys()):
        if key not in after:
            found.append(f"{key}: deleted")
        elif key not in before:
            found.append(f"{key}: appeared")
        else:
            found += [f"{key}: {change}" for change in changes(before[key], after[key])]
    return found


class NvidiaRelease:
    """NVIDIA's chart installed by Helm (fresh shape), and what it owns."""

    def __init__(self, kubeconfig: Path, chart: Path, helm: Path, workdir: Path) -> None:
        self.kubeconfig = kubeconfig
        self.chart = chart
        self.helm = helm
        self.manifest = workdir / "nvidia-release.yaml"
        self.snapshot: Objects = {}

    async def _install(self) -> None:
        api_client = await api_client_from_kubeconfig(self.kubeconfig)
        try:
            kube = KubeClient.from_api_client(api_client)
            # Its chart's ComputeDomain CRD (nvidia.install) and clique CRD, as its first
            # install creates them from its crds/.
            await nvidia.install(kube, self.chart, self.helm, self.kubeconfig, NVIDIA)
            clique_crd = self.chart / "crds" / "resource.nvidia.com_computedomaincliques.yaml"
            body = yaml.safe_load(clique_crd.read_text())
            current = await kube.get(nvidia.CRDS, body["metadata"]["name"])
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            await kube.replace(nvidia.CRDS, body)
        finally:
            await api_client.close()

    async def _uninstall(self) -> None:
        api_client = await api_client_from_kubeconfig(self.kubeconfig)
        try:
            await nvidia.uninstall(api_client, self.helm, self.kubeconfig, NVIDIA)
            await apply_crds(api_client, CRD_DIR)  # later tests need ours back
        finally:
            await api_client.close()

    def install(self) -> None:
        run_async(self._install)
        result = run_helm(
            self.helm, "get", "manifest", NVIDIA.release, "-n", NVIDIA_NS,
            "--kubeconfig", str(self.kubeconfig),
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        self.manifest.write_text(result.stdout)
        self.snapshot = self.settled()

    def uninstall(self) -> None:
        run_async(self._uninstall)

    def reinstall(self) -> None:
        """After a path that changed NVIDIA's objects: the next path starts from a clean
        install (and a snapshot of it)."""
        self.uninstall()
        kubectl(self.kubeconfig, "delete", "namespace", NVIDIA_NS, "--ignore-not-found",
                "--wait=true", "--timeout=120s")  # fmt: skip
        self.install()

    def objects(self) -> Objects:
        """Everything NVIDIA's release owns, as it is now, by kind and name."""
        get = ("get", "-o", "json", "--ignore-not-found")
        revisions = f"owner=helm,name={NVIDIA.release}"
        found = [
            *items(kubectl(self.kubeconfig, *get, "-f", str(self.manifest), "-n", NVIDIA_NS)),
            # Its revisions: a write to the release by anyone but Helm for NVIDIA adds one.
            *items(kubectl(self.kubeconfig, *get, "secrets", "-n", NVIDIA_NS, "-l", revisions)),
            *items(kubectl(self.kubeconfig, *get, "namespace", NVIDIA_NS)),
            *items(kubectl(self.kubeconfig, *get, "customresourcedefinitions", *CRDS)),
        ]
        return {key_of(obj): comparable(obj) for obj in found}

    def settled(self) -> Objects:
        """The objects once two looks 2 s apart agree (the Deployment controller annotates its
        Deployment's revision shortly after the install)."""
        previous = self.objects()
        for _ in range(30):
            time.sleep(2)
            current = self.objects()
            if current == previous:
                return current
            previous = current
        raise AssertionError(f"NVIDIA's objects never settled: {differences(previous, current)}")


@pytest.fixture(scope="module")
def nvidia_release(
    control_plane: ControlPlane, upstream: UpstreamBuild, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[NvidiaRelease]:
    """NVIDIA's v0.4.1 chart (the pinned build's copy), installed once for the module."""
    release = NvidiaRelease(
        control_plane.kubeconfig, upstream.chart, find_helm(), tmp_path_factory.mktemp("nvidia")
    )
    release.install()
    try:
        yield release
    finally:
        release.uninstall()


def install_ours(path: InstallPath, kubeconfig: Path) -> str:
    if path.helm is not None:
        result = run_helm(
            find_helm(), "install", RELEASE, str(CHART), "-n", path.namespace, *path.helm,
            "--kubeconfig", str(kubeconfig),
        )  # fmt: skip
        assert result.returncode == 0, f"helm install ({path.key}):\n{result.stderr}"
        return result.stdout
    assert path.kustomization is not None
    return kubectl(kubeconfig, "apply", "-k", str(REPO_ROOT / "manifests" / path.kustomization))


def remove_ours(path: InstallPath, kubeconfig: Path, workdir: Path) -> None:
    if path.helm is not None:
        result = run_helm(
            find_helm(), "uninstall", RELEASE, "-n", path.namespace, "--wait",
            "--ignore-not-found", "--kubeconfig", str(kubeconfig),
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
    else:
        # Everything the kustomization applied but the CRDs: this session's other tests share
        # them, and deleting one takes every ComputeDomain along.
        assert path.kustomization is not None
        rendered = kubectl(
            kubeconfig, "kustomize", str(REPO_ROOT / "manifests" / path.kustomization)
        )
        ours = [
            d for d in yaml.safe_load_all(rendered) if d and d["kind"] != "CustomResourceDefinition"
        ]
        file = workdir / f"{path.key}.yaml"
        file.write_text(yaml.safe_dump_all(ours))
        kubectl(kubeconfig, "delete", "-f", str(file), "--ignore-not-found", "--wait=true",
                "--timeout=120s")  # fmt: skip
    if path.creates_namespace:
        kubectl(kubeconfig, "delete", "namespace", path.namespace, "--ignore-not-found",
                "--wait=true", "--timeout=120s")  # fmt: skip


def ours_missing(path: InstallPath, kubeconfig: Path) -> list[str]:
    """What the path should have installed of ours and did not (an unchanged NVIDIA install
    means something only when ours went in)."""
    missing = []
    deployment = ("get", "deployment", "computedomain-controller", "-n", path.namespace)
    if not items(kubectl(kubeconfig, *deployment, "-o", "json", "--ignore-not-found")):
        missing.append(f"Deployment {path.namespace}/computedomain-controller")
    crb = ("get", "clusterrolebinding", OUR_DAEMON_RBAC, "-o", "json", "--ignore-not-found")
    bindings = items(kubectl(kubeconfig, *crb))
    subject = {"kind": "ServiceAccount", "name": DAEMON_SA, "namespace": path.daemon_subject}
    if path.daemon_subject is None and bindings:
        missing.append(f"no ClusterRoleBinding {OUR_DAEMON_RBAC}: NVIDIA's chart grants that")
    elif path.daemon_subject is not None and not any(
        subject in (b.get("subjects") or []) and b["roleRef"]["name"] == OUR_DAEMON_RBAC
        for b in bindings
    ):
        missing.append(f"ClusterRoleBinding {OUR_DAEMON_RBAC} of {subject} to its ClusterRole")
    return missing


@pytest.mark.parametrize("path", PATHS, ids=[p.key for p in PATHS])
def test_install_path_leaves_nvidias_objects_alone(
    path: InstallPath, nvidia_release: NvidiaRelease, control_plane: ControlPlane, tmp_path: Path
) -> None:
    kubeconfig = control_plane.kubeconfig
    before = nvidia_release.snapshot
    for expected in (
        f"ServiceAccount {NVIDIA_NS}/{DAEMON_SA}",
        "ClusterRole compute-domain-daemon-role",
        "ClusterRoleBinding compute-domain-daemon-role-binding",
        *(f"CustomResourceDefinition {crd}" for crd in CRDS),
    ):
        assert expected in before, sorted(before)
    try:
        out = install_ours(path, kubeconfig)
        print(f"--- {path.key}\n{out}")
        installed = differences(before, nvidia_release.objects())
        missing = ours_missing(path, kubeconfig)
    finally:
        remove_ours(path, kubeconfig, tmp_path)
    removed = differences(before, nvidia_release.objects())
    if installed or removed:
        nvidia_release.reinstall()
    report = [f"after installing ours: {line}" for line in installed]
    report += [f"after removing ours: {line}" for line in removed]
    assert not report, f"{path.key} changed NVIDIA's objects:\n" + "\n".join(report)
    assert not missing, f"{path.key} did not install: {missing}"
