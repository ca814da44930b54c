"""The chart against its sources of truth: manifests/ (kustomize), crds/, the controller's flag
table; NVIDIA-style values; refused values. Everything through the pinned `helm`."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from computedomain.api.constants import NVIDIA_COMPONENT_LABEL
from computedomain.config import INERT_FLAGS, SETTINGS, parse_settings
from tests.kit.rbac import child_kind_rules, on_child_resources
from tests.kit.release import PROJECT_VERSION
from tests.unit.helm.support import (
    CHART,
    NVIDIA_VALUES,
    OUR_NVIDIA_VALUES,
    ROOT,
    Obj,
    container,
    env_of,
    find,
    kinds,
    render,
    render_error,
    run_helm,
    template_args,
)

MANIFESTS = ROOT / "manifests"
RELEASE_NS = "computedomain-system"
NVIDIA_NS = "nvidia-dra-driver-gpu"
# Env the controller reads (its flag table and NVIDIA's flags it accepts and ignores), plus what
# the NVIDIA container runtime reads.
KNOWN_ENV = (
    {row.env for row in SETTINGS} | {row.env for row in INERT_FLAGS} | {"NVIDIA_VISIBLE_DEVICES"}
)
FLAG_DEFAULTS = {row.env: row.default for row in SETTINGS}
# Set by the chart but not by manifests/manager (the controller's defaults, as values).
CHART_ONLY_ENV = (
    "LEADER_ELECTION_LEASE_DURATION",
    "LEADER_ELECTION_RENEW_DEADLINE",
    "LEADER_ELECTION_RETRY_PERIOD",
    "IMEX_MODE",
    "IMEX_ISOLATION",
)
ALL_ON = (
    "serviceMonitor.enabled=true",
    "prometheusRule.enabled=true",
    "dashboard.enabled=true",
    "controller.workers=4",
    "featureGates.CrashOnNVLinkFabricErrors=false",
    "imagePullSecrets[0].name=a",
    "imagePullSecrets[1].name=b",
    "daemonPods.priorityClassName=imex-critical",
    "daemonPods.resources.limits.cpu=1",
    "daemonPods.resources.limits.memory=512Mi",
)


def load(path: Path) -> Obj:
    document: Obj = yaml.safe_load(path.read_text())
    return document


def load_all(directory: Path) -> list[Obj]:
    paths = sorted(directory.glob("*.yaml"))
    return [load(path) for path in paths if path.name != "kustomization.yaml"]


@pytest.fixture(scope="module")
def default(helm: Path) -> list[Obj]:
    return render(helm)


@pytest.fixture(scope="module")
def nvidia(helm: Path) -> list[Obj]:
    # Another release namespace: namespaceOverride must put everything in NVIDIA's.
    return render(helm, release="dra", namespace="other", values=[NVIDIA_VALUES, OUR_NVIDIA_VALUES])


def settings_from(objects: list[Obj], namespace: str) -> Any:
    """The controller's Settings from the rendered env (fieldRefs resolved as the kubelet would)."""
    fields = {"metadata.name": "computedomain-controller-abc-1", "metadata.namespace": namespace}
    environ = {
        name: value if isinstance(value, str) else fields[value["fieldRef"]["fieldPath"]]
        for name, value in env_of(objects).items()
    }
    return parse_settings([], environ)


# ---- chart metadata, lint, copies --------------------------------------------------------------


def test_chart_metadata() -> None:
    chart = load(CHART / "Chart.yaml")
    assert chart["name"] == "computedomain-controller"
    assert chart["version"] == PROJECT_VERSION
    assert chart["appVersion"] == PROJECT_VERSION
    assert chart["kubeVersion"] == ">=1.34.0-0"


@pytest.mark.parametrize("strict", [False, True], ids=["lint", "lint-strict"])
@pytest.mark.parametrize(
    "values",
    [(), (NVIDIA_VALUES,), (NVIDIA_VALUES, OUR_NVIDIA_VALUES)],
    ids=["default", "nvidia", "swap"],
)
def test_helm_lint_passes(helm: Path, strict: bool, values: tuple[Path, ...]) -> None:
    args = ["lint", str(CHART)] + (["--strict"] if strict else [])
    for path in values:
        args += ["--values", str(path)]
    result = run_helm(helm, *args)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


def test_chart_crds_are_byte_identical_to_crds() -> None:
    sources = sorted(p.name for p in (ROOT / "crds").glob("*.yaml"))
    assert sources
    assert sorted(p.name for p in (CHART / "crds").iterdir()) == sources
    for name in sources:
        assert (CHART / "crds" / name).read_bytes() == (ROOT / "crds" / name).read_bytes(), (
            f"chart crds/{name} is stale: cp crds/*.yaml {CHART.relative_to(ROOT)}/crds/"
        )


def test_chart_files_are_copies_of_manifests() -> None:
    pairs = [
        ("computedomain.json", MANIFESTS / "dashboards" / "computedomain.json"),
        ("prometheus_rule.yaml", MANIFESTS / "prometheus" / "prometheus_rule.yaml"),
    ]
    for name, source in pairs:
        assert (CHART / "files" / name).read_bytes() == source.read_bytes(), (
            f"chart files/{name} is stale: cp {source.relative_to(ROOT)} "
            f"{CHART.relative_to(ROOT)}/files/"
        )


# ---- RBAC == manifests/rbac ---------------------------------------------------------------------


def test_rbac_rules_equal_manifests_rbac(default: list[Obj]) -> None:
    sources = [o for o in load_all(MANIFESTS / "rbac") if o["kind"] in ("Role", "ClusterRole")]
    assert len(sources) >= 4
    for source in sources:
        rendered = find(default, source["kind"], source["metadata"]["name"])
        assert rendered["rules"] == source["rules"], (
            f"{source['kind']} {source['metadata']['name']}: the chart's rules differ from "
            "manifests/rbac; copy them into templates/rbac.yaml or daemon-rbac.yaml"
        )
    chart_roles = {(k, n) for k, n in kinds(default) if k in ("Role", "ClusterRole")}
    assert chart_roles == {(o["kind"], o["metadata"]["name"]) for o in sources}


def test_chart_rbac_on_children_is_what_the_child_kinds_table_derives(default: list[Obj]) -> None:
    def flat(role: Obj) -> dict[tuple[str, str], set[str]]:
        rules: dict[tuple[str, str], set[str]] = {}
        for rule in role["rules"]:
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    rules.setdefault((group, resource), set()).update(rule["verbs"])
        return on_child_resources(rules)

    cluster, namespace = child_kind_rules()
    assert flat(find(default, "ClusterRole", "computedomain-controller")) == cluster
    assert flat(find(default, "Role", "computedomain-controller")) == namespace


def test_bindings_equal_manifests_rbac_with_the_release_namespace(default: list[Obj]) -> None:
    sources = [o for o in load_all(MANIFESTS / "rbac") if o["kind"].endswith("Binding")]
    for source in sources:
        rendered = find(default, source["kind"], source["metadata"]["name"])
        assert rendered["roleRef"] == source["roleRef"]
        # kustomize sets the subjects' namespace to computedomain-system; the chart to the
        # release namespace, the same here.
        assert rendered["subjects"] == source["subjects"]
    chart_bindings = {(k, n) for k, n in kinds(default) if k.endswith("Binding")}
    assert chart_bindings == {(o["kind"], o["metadata"]["name"]) for o in sources}


def test_default_objects_and_namespaces(default: list[Obj]) -> None:
    assert kinds(default) == {
        ("ServiceAccount", "computedomain-controller"),
        ("ServiceAccount", "compute-domain-daemon-service-account"),
        ("ClusterRole", "computedomain-controller"),
        ("ClusterRoleBinding", "computedomain-controller"),
        ("Role", "computedomain-controller"),
        ("RoleBinding", "computedomain-controller"),
        ("Role", "computedomain-controller-leader-election"),
        ("RoleBinding", "computedomain-controller-leader-election"),
        ("ClusterRole", "computedomain-daemon"),
        ("ClusterRoleBinding", "computedomain-daemon"),
        ("Deployment", "computedomain-controller"),
        ("PodDisruptionBudget", "computedomain-controller"),
        ("Service", "computedomain-controller-metrics"),
    }
    for obj in default:
        if obj["kind"] in ("ClusterRole", "ClusterRoleBinding"):
            assert "namespace" not in obj["metadata"]
        else:
            assert obj["metadata"]["namespace"] == RELEASE_NS, obj["metadata"]["name"]


def test_separate_driver_namespace(helm: Path) -> None:
    objects = render(helm, sets=["driverNamespace=nvidia-dra-driver-gpu"])
    in_driver_ns = {
        ("Role", "computedomain-controller"),
        ("RoleBinding", "computedomain-controller"),
        ("ServiceAccount", "compute-domain-daemon-service-account"),
    }
    for obj in objects:
        key = (obj["kind"], obj["metadata"]["name"])
        if obj["kind"] in ("ClusterRole", "ClusterRoleBinding"):
            continue
        want = NVIDIA_NS if key in in_driver_ns else RELEASE_NS
        assert obj["metadata"]["namespace"] == want, key
    for kind in ("RoleBinding", "ClusterRoleBinding"):
        binding = find(objects, kind, "computedomain-controller")
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "computedomain-controller", "namespace": RELEASE_NS}
        ]
    daemon_binding = find(objects, "ClusterRoleBinding", "computedomain-daemon")
    assert daemon_binding["subjects"][0]["namespace"] == NVIDIA_NS
    env = env_of(objects)
    assert env["NAMESPACE"] == NVIDIA_NS
    assert env["LEADER_ELECTION_LEASE_LOCK_NAMESPACE"] == {
        "fieldRef": {"fieldPath": "metadata.namespace"}
    }


@pytest.mark.parametrize(
    ("fullname", "daemon_rbac"),
    [
        ("", "computedomain-daemon"),
        ("cdc-1a2b3c", "cdc-1a2b3c-daemon"),
        ("gpu-controller", "gpu-daemon"),
    ],
)
def test_daemon_rbac_names_are_ours_and_follow_the_fullname(
    helm: Path, fullname: str, daemon_rbac: str
) -> None:
    """Never NVIDIA's compute-domain-daemon-role(-binding); two releases with their own
    fullnameOverride do not share them."""
    objects = render(helm, sets=[f"fullnameOverride={fullname}"])
    role = find(objects, "ClusterRole", daemon_rbac)
    binding = find(objects, "ClusterRoleBinding", daemon_rbac)
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    assert role["metadata"]["labels"]["app.kubernetes.io/part-of"] == "computedomain"
    names = {o["metadata"]["name"] for o in objects}
    assert not names & {"compute-domain-daemon-role", "compute-domain-daemon-role-binding"}


# ---- Deployment == manifests/manager -------------------------------------------------------------


def test_deployment_equals_manifests_manager_apart_from_documented_differences(
    default: list[Obj],
) -> None:
    source = load(MANIFESTS / "manager" / "manager.yaml")
    rendered = find(default, "Deployment", "computedomain-controller")
    src_pod, pod = source["spec"]["template"]["spec"], rendered["spec"]["template"]["spec"]
    (src_c,), c = src_pod["containers"], container(default)

    chart_env = [dict(e) for e in c["env"] if e["name"] not in CHART_ONLY_ENV]  # a copy
    # Neither sets IMAGE_NAME (the kubelet plugin's image); documented: NVIDIA's logVerbosity
    # default for the controller too.
    assert "IMAGE_NAME" not in {e["name"] for e in chart_env + src_c["env"]}
    for entry, documented in (("LOG_VERBOSITY", "4"),):
        (rendered_entry,) = [e for e in chart_env if e["name"] == entry]
        assert rendered_entry["value"] == documented
        rendered_entry["value"] = next(e for e in src_c["env"] if e["name"] == entry)["value"]
    assert chart_env == src_c["env"]
    for name in CHART_ONLY_ENV:
        assert env_of(default)[name] == FLAG_DEFAULTS[name]

    for key in ("name", "imagePullPolicy", "ports", "livenessProbe", "readinessProbe"):
        assert c[key] == src_c[key], key
    for key in ("resources", "securityContext", "volumeMounts"):
        assert c[key] == src_c[key], key
    # kustomization's newName:newTag
    assert c["image"] == f"computedomain-controller:{PROJECT_VERSION}"
    for key in ("serviceAccountName", "terminationGracePeriodSeconds", "securityContext"):
        assert pod[key] == src_pod[key], key
    for key in ("affinity", "tolerations", "volumes"):
        assert pod[key] == src_pod[key], key
    assert rendered["spec"]["replicas"] == source["spec"]["replicas"]
    assert rendered["spec"]["strategy"] == source["spec"]["strategy"]
    template = rendered["spec"]["template"]["metadata"]
    assert template["annotations"] == source["spec"]["template"]["metadata"]["annotations"]
    assert source["spec"]["template"]["metadata"]["labels"].items() <= template["labels"].items()
    selector = rendered["spec"]["selector"]["matchLabels"]
    assert source["spec"]["selector"]["matchLabels"].items() <= selector.items()
    assert selector.items() <= template["labels"].items()


def test_pod_labels(default: list[Obj]) -> None:
    deployment = find(default, "Deployment")
    assert deployment["spec"]["template"]["metadata"]["labels"] == {
        "app.kubernetes.io/name": "computedomain-controller",
        "app.kubernetes.io/instance": "computedomain-controller",
        "app.kubernetes.io/component": "controller",
        "app.kubernetes.io/part-of": "computedomain",
    }
    assert (
        deployment["metadata"]["labels"]["helm.sh/chart"]
        == f"computedomain-controller-{PROJECT_VERSION}"
    )


@pytest.mark.parametrize(
    "sets", [(), ALL_ON, ("nameOverride=nvidia-dra-driver-gpu",)], ids=["default", "all", "name"]
)
def test_never_nvidias_component_label(helm: Path, sets: tuple[str, ...]) -> None:
    # The controller tells NVIDIA's controller pods by this label (alert texts may name it).
    result = run_helm(helm, *template_args(sets=sets))
    assert result.returncode == 0, result.stderr
    for doc in yaml.safe_load_all(result.stdout):
        if not doc:
            continue
        for labels in label_maps(doc):
            assert NVIDIA_COMPONENT_LABEL not in labels, f"{doc['kind']} carries it: {labels}"


def label_maps(obj: Any) -> list[dict[str, Any]]:
    """Every `labels`/`matchLabels` map anywhere in a rendered object."""
    found = []
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key in ("labels", "matchLabels") and isinstance(value, dict):
                found.append(value)
            found.extend(label_maps(value))
    elif isinstance(obj, list):
        for item in obj:
            found.extend(label_maps(item))
    return found


# ---- env: known to the controller and accepted by its configuration -----------------------------


@pytest.mark.parametrize(
    ("values", "sets"),
    [((), ()), ((), ALL_ON), ((NVIDIA_VALUES,), ()), ((NVIDIA_VALUES, OUR_NVIDIA_VALUES), ())],
    ids=["default", "all", "nvidia", "swap"],
)
def test_every_env_var_is_one_the_controller_knows(
    helm: Path, values: tuple[Path, ...], sets: tuple[str, ...]
) -> None:
    objects = render(helm, values=values, sets=sets)
    unknown = set(env_of(objects)) - KNOWN_ENV
    assert not unknown, f"env the controller does not read: {sorted(unknown)}"
    settings_from(objects, RELEASE_NS)  # and it accepts their values


def test_default_env_configures_the_controller_as_documented(default: list[Obj]) -> None:
    settings = settings_from(default, RELEASE_NS)
    assert settings.driver_namespace == RELEASE_NS
    assert settings.daemon.image == ""  # the kubelet plugin's
    assert settings.leader_election is True
    assert (settings.lease_name, settings.lease_namespace) == (
        "computedomain-controller",
        RELEASE_NS,
    )
    assert (settings.kube_api_qps, settings.kube_api_burst) == (100, 200)
    assert (settings.metrics_address, settings.probe_address) == (":8080", ":8081")
    assert (settings.log_verbosity, settings.daemon.log_verbosity) == (4, 4)
    assert settings.daemon.image_pull_secrets == ()
    assert "FEATURE_GATES" not in env_of(default)
    assert "WORKERS" not in env_of(default)
    assert "CD_DAEMON_IMAGE_PULL_SECRET_NAMES" not in env_of(default)
    # Daemon pods as NVIDIA's: no priority class, no resources.
    assert "CD_DAEMON_PRIORITY_CLASS_NAME" not in env_of(default)
    assert "CD_DAEMON_RESOURCES_JSON" not in env_of(default)
    assert settings.daemon.priority_class_name is None
    assert settings.daemon.daemon_resources is None


def test_optional_env(helm: Path) -> None:
    env = env_of(render(helm, sets=ALL_ON))
    assert env["WORKERS"] == "4"
    assert env["FEATURE_GATES"] == "CrashOnNVLinkFabricErrors=false,"
    assert env["CD_DAEMON_IMAGE_PULL_SECRET_NAMES"] == "a,b"
    assert env["CD_DAEMON_PRIORITY_CLASS_NAME"] == "imex-critical"
    assert json.loads(env["CD_DAEMON_RESOURCES_JSON"]) == {"limits": {"cpu": 1, "memory": "512Mi"}}


def test_imex_values_reach_the_controller(helm: Path, default: list[Obj]) -> None:
    assert (env_of(default)["IMEX_MODE"], env_of(default)["IMEX_ISOLATION"]) == (
        "driverManaged",
        "domain",
    )
    host = render(
        helm,
        sets=[
            "resources.computeDomains.imex.mode=hostManaged",
            "featureGates.HostManagedIMEXDaemon=true",
            "resources.computeDomains.imex.hostSocketPath=/run/imex.sock",
        ],
    )
    settings = settings_from(host, RELEASE_NS)
    assert settings.reconciler.host_managed
    assert settings.daemon.feature_gates["ComputeDomainCliques"] is False
    # The socket is the kubelet plugin's; the controller gets nothing from it.
    assert "/run/imex.sock" not in json.dumps(host)


def test_daemon_pod_values_reach_the_daemon_settings(helm: Path) -> None:
    daemon = settings_from(render(helm, sets=ALL_ON), RELEASE_NS).daemon
    assert daemon.priority_class_name == "imex-critical"
    assert daemon.daemon_resources == {"limits": {"cpu": "1", "memory": "512Mi"}}


def test_metrics_disabled_turns_the_listener_off(helm: Path) -> None:
    objects = render(helm, sets=["controller.metrics.enabled=false"])
    assert env_of(objects)["HTTP_ENDPOINT"] == ""
    assert [p["name"] for p in container(objects)["ports"]] == ["probes"]
    assert ("Service", "computedomain-controller-metrics") not in kinds(objects)
    assert settings_from(objects, RELEASE_NS).metrics_address is None


def test_probes_may_share_the_metrics_port(helm: Path) -> None:
    objects = render(helm, sets=["controller.probes.address=:8080"])
    c = container(objects)
    assert c["ports"] == [{"name": "metrics", "containerPort": 8080, "protocol": "TCP"}]
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}


# ---- NVIDIA-style values -------------------------------------------------------------------------


def test_nvidia_values_env(nvidia: list[Obj]) -> None:
    env = env_of(nvidia)
    assert env["IMAGE_NAME"] == "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.8.1"  # NVIDIA's image.*
    assert env["CD_DAEMON_IMAGE_PULL_SECRET_NAMES"] == "ngc-secret"
    assert env["LOG_VERBOSITY_CD_DAEMON"] == "6"
    assert env["LOG_VERBOSITY"] == "6"  # NVIDIA's logVerbosity: the controller's too
    assert env["FEATURE_GATES"] == (
        "ComputeDomainCliques=true,IMEXDaemonsWithDNSNames=true,MPSSupport=true,"
    )
    assert env["MAX_NODES_PER_IMEX_DOMAIN"] == "9"  # the env entry replaced the chart's
    assert env["NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}  # NVIDIA's
    assert env["LEADER_ELECTION_ENABLED"] == "false"
    assert env["LEADER_ELECTION_LEASE_LOCK_NAME"] == "dra-driver-nvidia-gpu-controller"
    assert env["LEADER_ELECTION_LEASE_LOCK_NAMESPACE"] == {
        "fieldRef": {"fieldPath": "metadata.namespace"}
    }
    assert env["LEADER_ELECTION_LEASE_DURATION"] == "15s"
    assert env["LEADER_ELECTION_RENEW_DEADLINE"] == "10s"
    assert env["LEADER_ELECTION_RETRY_PERIOD"] == "2s"
    assert container(nvidia)["env"][-2:] == [
        {"name": "ADDITIONAL_NAMESPACES", "value": "nvidia-dra-driver-gpu-old"},
        {"name": "MAX_NODES_PER_IMEX_DOMAIN", "value": "9"},
    ]
    settings = settings_from(nvidia, NVIDIA_NS)
    assert settings.daemon.feature_gates["ComputeDomainCliques"] is True
    assert settings.daemon.max_nodes_per_imex_domain == 9
    assert settings.managed_namespaces == (NVIDIA_NS, "nvidia-dra-driver-gpu-old")
    assert settings.lease_namespace == NVIDIA_NS


def test_nvidia_values_pod(nvidia: list[Obj], default: list[Obj]) -> None:
    deployment = find(nvidia, "Deployment", "computedomain-controller")
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 1
    assert pod["imagePullSecrets"] == [{"name": "ngc-secret"}]
    assert pod["priorityClassName"] == "system-node-critical"
    assert pod["nodeSelector"] == {"node-role.kubernetes.io/control-plane": ""}
    assert [t["key"] for t in pod["tolerations"]] == [
        "node-role.kubernetes.io/control-plane",
        "node-role.kubernetes.io/master",
        "CriticalAddonsOnly",
    ]
    c, default_c = container(nvidia), container(default)
    assert c["image"] == "registry.example.com/gpu/computedomain-controller:0.1.0-rc1"
    assert c["imagePullPolicy"] == "Always"
    assert c["resources"] == {
        "requests": {"cpu": "100m", "memory": "256Mi"},
        "limits": {"cpu": "1", "memory": "1Gi"},
    }
    for key in ("livenessProbe", "readinessProbe", "securityContext", "ports"):
        assert c[key] == default_c[key], key
    default_pod = find(default, "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"] == default_pod["securityContext"]


def test_nvidia_values_rbac(nvidia: list[Obj]) -> None:
    assert sorted(
        (o["kind"], o["metadata"]["name"], o["metadata"].get("namespace", "")) for o in nvidia
    ) == sorted(
        [
            ("ServiceAccount", "computedomain-controller", NVIDIA_NS),
            ("ClusterRole", "computedomain-controller", ""),
            ("ClusterRoleBinding", "computedomain-controller", ""),
            ("Role", "computedomain-controller", NVIDIA_NS),
            ("RoleBinding", "computedomain-controller", NVIDIA_NS),
            # ADDITIONAL_NAMESPACES in the env values: a Role and RoleBinding there too.
            ("Role", "computedomain-controller", f"{NVIDIA_NS}-old"),
            ("RoleBinding", "computedomain-controller", f"{NVIDIA_NS}-old"),
            ("Deployment", "computedomain-controller", NVIDIA_NS),
            ("Service", "computedomain-controller-metrics", NVIDIA_NS),
        ]
    )  # no daemon RBAC (NVIDIA's), no leader-election Role, no PDB (one replica)
    for obj in nvidia:
        if obj["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            assert obj["subjects"] == [
                {
                    "kind": "ServiceAccount",
                    "name": "computedomain-controller",
                    "namespace": NVIDIA_NS,
                }
            ]


# ---- monitoring --------------------------------------------------------------------------------


def test_monitoring_objects(helm: Path) -> None:
    objects = render(
        helm,
        sets=[*ALL_ON, "serviceMonitor.labels.release=kps", "prometheusRule.labels.release=kps"],
    )
    rule = find(objects, "PrometheusRule", "computedomain-controller")
    source_rule = load(MANIFESTS / "prometheus" / "prometheus_rule.yaml")
    assert rule["spec"]["groups"] == source_rule["spec"]["groups"]
    assert rule["metadata"]["labels"]["release"] == "kps"

    monitor = find(objects, "ServiceMonitor", "computedomain-controller")
    source_monitor = load(MANIFESTS / "prometheus" / "monitor.yaml")
    (endpoint,), (source_endpoint,) = (
        monitor["spec"]["endpoints"],
        source_monitor["spec"]["endpoints"],
    )
    relabelings = endpoint.pop("relabelings")
    assert endpoint == source_endpoint
    assert relabelings == [
        {"targetLabel": "job", "replacement": "computedomain-controller-metrics"}
    ]
    assert monitor["metadata"]["labels"]["release"] == "kps"
    service = find(objects, "Service", "computedomain-controller-metrics")
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )

    dashboard = find(objects, "ConfigMap", "computedomain-controller-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    source_json = (MANIFESTS / "dashboards" / "computedomain.json").read_text()
    assert dashboard["data"]["computedomain.json"] == source_json
    json.loads(dashboard["data"]["computedomain.json"])


# ---- refused values ----------------------------------------------------------------------------

FAILURES = [
    (
        ["controller.leaderElection.enabled=false"],
        "controller.replicas=2 with leader election off: every replica would write; set "
        "controller.leaderElection.enabled=true or controller.replicas=1",
    ),
    (
        ["image.repository=", "image.tag=v0.4.1"],
        "image.tag is set but image.repository is empty: set both to NVIDIA's DRA driver image "
        "of the release your kubelet plugin runs, or neither (the kubelet plugin's image is used)",
    ),
    (
        ["controller.probes.address="],
        "controller.probes.address is empty: the liveness and readiness probes need it",
    ),
    (
        ["serviceMonitor.enabled=true", "metricsService.enabled=false"],
        "serviceMonitor.enabled=true needs controller.metrics.enabled=true and "
        "metricsService.enabled=true",
    ),
    (
        ["serviceAccount.create=false"],
        "serviceAccount.create=false needs serviceAccount.name (this chart does not bind its "
        "rules to the namespace's default ServiceAccount)",
    ),
    (["controller.metrics.httpEndpoint=localhost"], '"localhost" is not a [host]:port address'),
    (
        ["resources.computeDomains.imex.mode=hostManaged"],
        'imex.mode="hostManaged" requires the HostManagedIMEXDaemon feature gate to be enabled',
    ),
]


@pytest.mark.parametrize(("sets", "message"), FAILURES, ids=[f[0][0] for f in FAILURES])
def test_impossible_values_fail_with_one_line(helm: Path, sets: list[str], message: str) -> None:
    stderr = render_error(helm, sets=sets)
    (line,) = [line for line in stderr.splitlines() if line.startswith("Error:")]
    assert line.endswith(": " + message), stderr


def test_possible_values_render(helm: Path) -> None:
    render(helm, namespace="default")  # NVIDIA's chart refuses it; ours need not
    one = render(helm, sets=["controller.replicas=1", "controller.leaderElection.enabled=false"])
    assert ("PodDisruptionBudget", "computedomain-controller") not in kinds(one)
    assert env_of(one)["LEADER_ELECTION_ENABLED"] == "false"
    named = render(helm, sets=["serviceAccount.create=false", "serviceAccount.name=existing"])
    assert find(named, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == "existing"
    assert (
        find(named, "ClusterRoleBinding", "computedomain-controller")["subjects"][0]["name"]
        == "existing"
    )
    assert ("ServiceAccount", "existing") not in kinds(named)


# ---- every value documented ------------------------------------------------------------------


def values_lines() -> list[tuple[str, bool]]:
    """(dotted key, preceded by a comment line) for each key line of values.yaml, in order;
    keys inside list items are part of their list's value and skipped."""
    keys: list[tuple[str, bool]] = []
    stack: list[tuple[int, str]] = []
    previous = ""
    for line in (CHART / "values.yaml").read_text().splitlines():
        match = re.match(r"^( *)([A-Za-z_][\w.-]*):", line)
        if match:
            indent = len(match.group(1))
            while stack and stack[-1][0] >= indent:
                stack.pop()
            stack.append((indent, match.group(2)))
            keys.append((".".join(k for _, k in stack), previous.lstrip().startswith("#")))
        if line.strip():
            previous = line
    return keys


def readme_keys() -> list[str]:
    text = (CHART / "README.md").read_text()
    return re.findall(r"^\| `([\w.]+)` \|", text, flags=re.MULTILINE)


def test_every_value_is_documented_in_values_yaml_and_readme() -> None:
    documented = readme_keys()
    assert len(documented) == len(set(documented))
    lines = dict(values_lines())
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def leaves(tree: Any, prefix: str = "") -> list[str]:
        if isinstance(tree, dict) and tree and f"{prefix[:-1]}" not in documented:
            return [p for k, v in tree.items() for p in leaves(v, f"{prefix}{k}.")]
        return [prefix[:-1]]

    assert sorted(leaves(values)) == sorted(documented), "README table vs values.yaml"
    for key in documented:
        assert lines[key], f"values.yaml: {key} has no comment above it"
