"""Static checks of manifests/: CRD copies, least-privilege RBAC, restricted pods, env names."""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from computedomain.api import rbac
from tests.kit.rbac import child_kind_rules, on_child_resources

ROOT = Path(__file__).resolve().parents[3]
MANIFESTS = ROOT / "manifests"

# The verbs the controller's code uses (one table, in the product: doctor reviews each);
# tests/integration/test_rbac.py removes each in turn.
EXPECTED_CLUSTER_RULES = rbac.flat(rbac.CLUSTER)
EXPECTED_NAMESPACE_RULES = rbac.flat(rbac.DRIVER_NAMESPACE)
EXPECTED_LEADER_RULES = rbac.flat(rbac.LEASE_NAMESPACE)


def load(path: Path) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(path.read_text())
    return document


def rules_of(path: Path) -> dict[tuple[str, str], set[str]]:
    flat: dict[tuple[str, str], set[str]] = {}
    for rule in load(path)["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                flat.setdefault((group, resource), set()).update(rule["verbs"])
    return flat


def test_crd_copies_match_the_source_crds() -> None:
    sources = sorted(Path(p).name for p in glob.glob(str(ROOT / "crds" / "*.yaml")))
    assert sources, "crds/*.yaml missing"
    kustomization = load(MANIFESTS / "crd" / "kustomization.yaml")
    assert sorted(kustomization["resources"]) == [f"bases/{name}" for name in sources]
    for name in sources:
        copy = MANIFESTS / "crd" / "bases" / name
        assert copy.read_bytes() == (ROOT / "crds" / name).read_bytes(), (
            f"{copy} is stale: cp crds/*.yaml manifests/crd/bases/"
        )


@pytest.mark.parametrize(
    ("file", "expected"),
    [
        ("role.yaml", EXPECTED_CLUSTER_RULES),
        ("namespace_role.yaml", EXPECTED_NAMESPACE_RULES),
        ("leader_election_role.yaml", EXPECTED_LEADER_RULES),
    ],
)
def test_controller_rbac_grants_exactly_the_verbs_the_code_uses(
    file: str, expected: dict[tuple[str, str], set[str]]
) -> None:
    assert rules_of(MANIFESTS / "rbac" / file) == expected


@pytest.mark.parametrize(
    ("source", "cluster", "namespace"),
    [
        ("api/rbac.py", EXPECTED_CLUSTER_RULES, EXPECTED_NAMESPACE_RULES),
        (
            "manifests/rbac",
            rules_of(MANIFESTS / "rbac" / "role.yaml"),
            rules_of(MANIFESTS / "rbac" / "namespace_role.yaml"),
        ),
    ],
)
def test_rbac_on_children_is_what_the_child_kinds_table_derives(
    source: str,
    cluster: dict[tuple[str, str], set[str]],
    namespace: dict[tuple[str, str], set[str]],
) -> None:
    """Each child kind's verbs, in its scope, and nothing more on those resources (the chart
    equals manifests/rbac: tests/unit/helm/test_chart.py)."""
    derived_cluster, derived_namespace = child_kind_rules()
    assert on_child_resources(cluster) == derived_cluster, f"{source}: ClusterRole"
    assert on_child_resources(namespace) == derived_namespace, f"{source}: driver-namespace Role"


@pytest.mark.parametrize(
    ("file", "rules"),
    [
        ("role.yaml", rbac.CLUSTER),
        ("namespace_role.yaml", rbac.DRIVER_NAMESPACE),
        ("leader_election_role.yaml", rbac.LEASE_NAMESPACE),
    ],
)
def test_controller_rbac_restricts_to_the_names_the_table_gives(
    file: str, rules: tuple[rbac.Rule, ...]
) -> None:
    names = {
        (group, resource): set(rule["resourceNames"])
        for rule in load(MANIFESTS / "rbac" / file)["rules"]
        if rule.get("resourceNames")
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    assert names == {(rule.group, rule.resource): set(rule.names) for rule in rules if rule.names}


def test_no_rbac_wildcards() -> None:
    for path in (MANIFESTS / "rbac").glob("*.yaml"):
        for rule in load(path).get("rules", []):
            for key in ("apiGroups", "resources", "verbs"):
                assert "*" not in rule[key], f"{path.name}: wildcard in {key}"


def test_daemon_rbac_is_ours_and_binds_the_daemon_service_account() -> None:
    """The ServiceAccount keeps the name the DaemonSets use; the ClusterRole and its binding
    never take NVIDIA's names, which its chart owns (applying ours would rewrite them)."""
    sa = load(MANIFESTS / "rbac" / "daemon_service_account.yaml")
    assert sa["metadata"]["name"] == "compute-domain-daemon-service-account"
    role = load(MANIFESTS / "rbac" / "daemon_role.yaml")
    assert role["metadata"]["name"] == "computedomain-daemon"
    binding = load(MANIFESTS / "rbac" / "daemon_role_binding.yaml")
    assert binding["metadata"]["name"] == "computedomain-daemon"
    assert binding["roleRef"]["name"] == "computedomain-daemon"
    assert binding["subjects"][0]["name"] == "compute-domain-daemon-service-account"
    for obj in (role, binding):
        assert obj["metadata"]["labels"]["app.kubernetes.io/part-of"] == "computedomain"


def test_no_manifest_names_an_object_of_nvidias_chart() -> None:
    """No kustomize or Helm file of ours carries the names of NVIDIA's daemon RBAC: its chart's
    ClusterRole and binding, and the GPU Operator's."""
    nvidias = {"compute-domain-daemon-role", "compute-domain-daemon-role-binding"}
    nvidias.add("compute-domain-daemon")  # the GPU Operator's ClusterRole and binding
    for path in MANIFESTS.rglob("*.yaml"):
        names = re.findall(r"^\s*name:\s*(\S+)\s*$", path.read_text(), re.MULTILINE)
        assert not nvidias & set(names), f"{path.relative_to(MANIFESTS)}: {nvidias & set(names)}"


def controller_pod() -> dict[str, Any]:
    deployment = load(MANIFESTS / "manager" / "manager.yaml")
    pod: dict[str, Any] = deployment["spec"]["template"]["spec"]
    return pod


def test_pod_meets_the_restricted_pod_security_standard() -> None:
    pod = controller_pod()
    pod_sc = pod["securityContext"]
    assert pod_sc["runAsNonRoot"] is True
    assert pod_sc["runAsUser"] == 65532
    assert pod_sc["seccompProfile"] == {"type": "RuntimeDefault"}
    for host_namespace in ("hostNetwork", "hostPID", "hostIPC"):
        assert not pod.get(host_namespace)
    for container in pod["containers"]:
        sc = container["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert sc["runAsNonRoot"] is True
        assert isinstance(sc["runAsUser"], int)
        assert sc["runAsUser"] != 0
    assert all("hostPath" not in volume for volume in pod.get("volumes", []))


def test_probes_resources_and_replicas() -> None:
    deployment = load(MANIFESTS / "manager" / "manager.yaml")
    assert deployment["spec"]["replicas"] == 2
    pod = controller_pod()
    (container,) = pod["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 8080, "probes": 8081}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "probes"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "probes"}
    assert set(container["resources"]) == {"requests", "limits"}
    assert pod["terminationGracePeriodSeconds"] >= 10
    assert "podAntiAffinity" in pod["affinity"]


def test_settings_use_the_upstream_environment_names() -> None:
    (container,) = controller_pod()["containers"]
    env = {item["name"]: item for item in container["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    for name in (
        "LOG_VERBOSITY_CD_DAEMON", "MAX_NODES_PER_IMEX_DOMAIN",
        "LEADER_ELECTION_ENABLED", "HTTP_ENDPOINT", "METRICS_PATH", "KUBE_API_QPS",
        "KUBE_API_BURST", "PROBE_ADDRESS", "LOG_FORMAT",
    ):  # fmt: skip
        assert name in env, name
    assert env["LEADER_ELECTION_ENABLED"]["value"] == "true"
    assert env["HTTP_ENDPOINT"]["value"] == ":8080"
    assert env["PROBE_ADDRESS"]["value"] == ":8081"
    assert "IMAGE_NAME" not in env  # the kubelet plugin's image, found by the controller


def test_namespace_enforces_baseline_and_warns_restricted() -> None:
    """NVIDIA's daemon pods (no securityContext) run in this namespace: restricted would refuse
    them. The controller's own pods are checked against restricted in the integration test."""
    labels = load(MANIFESTS / "default" / "namespace.yaml")["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "baseline"
    assert labels["pod-security.kubernetes.io/warn"] == "restricted"
    assert labels["pod-security.kubernetes.io/audit"] == "restricted"


def test_dashboard_is_valid_grafana_json() -> None:
    import json

    dashboard = json.loads((MANIFESTS / "dashboards" / "computedomain.json").read_text())
    assert dashboard["panels"]
    expressions = " ".join(
        target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])
    )
    for metric in (
        "computedomain_status_condition",
        "computedomain_time_to_ready_seconds_bucket",
        "controller_runtime_reconcile_total",
        "leader_election_master_status",
    ):
        assert metric in expressions


def find_kubectl() -> str | None:
    built = sorted(
        glob.glob(os.path.expanduser("~/.cache/computedomain/controlplane/*/bin/kubectl"))
    )
    return built[-1] if built else shutil.which("kubectl")


def kustomize(overlay: str) -> list[dict[str, Any]]:
    """The objects ``kubectl kustomize manifests/<overlay>`` renders (skips without kubectl)."""
    kubectl = find_kubectl()
    if kubectl is None:
        pytest.skip("no kubectl built yet")
    result = subprocess.run(
        [kubectl, "kustomize", str(MANIFESTS / overlay)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    if result.returncode != 0 and "unknown command" in result.stderr:
        pytest.skip(f"{kubectl} has no kustomize")
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def test_kustomize_builds_default() -> None:
    objects = kustomize("default")
    kinds = {(o["kind"], o["metadata"]["name"]) for o in objects}
    assert ("Deployment", "computedomain-controller") in kinds
    assert ("CustomResourceDefinition", "computedomains.resource.nvidia.com") in kinds
    assert ("ServiceAccount", "compute-domain-daemon-service-account") in kinds
    for obj in objects:
        namespaced = obj["kind"] not in {
            "Namespace", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding",
        }  # fmt: skip
        if namespaced:
            assert obj["metadata"]["namespace"] == "computedomain-system", obj["metadata"]
        for subject in obj.get("subjects", []):
            assert subject["namespace"] == "computedomain-system"


def test_kustomize_prometheus_is_monitoring_only() -> None:
    """manifests/prometheus goes beside an install, never makes a second one (issue 17)."""
    objects = kustomize("prometheus")
    kinds = sorted((o["kind"], o["metadata"]["name"]) for o in objects)
    assert kinds == [
        ("PrometheusRule", "computedomain-controller"),
        ("ServiceMonitor", "computedomain-controller"),
    ]
    forbidden = {
        "Deployment", "Namespace", "CustomResourceDefinition", "ServiceAccount", "Role",
        "RoleBinding", "ClusterRole", "ClusterRoleBinding",
    }  # fmt: skip
    assert not [o["kind"] for o in objects if o["kind"] in forbidden]
    for obj in objects:
        assert obj["metadata"]["namespace"] == "computedomain-system", obj["metadata"]
