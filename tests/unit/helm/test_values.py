"""Values that carry over from NVIDIA's chart: the schema refuses unknown keys, NVIDIA's keys
mean what they mean in NVIDIA's chart (rendered side by side with NVIDIA's own chart where the
upstream build is at hand), env merged by name, per-namespace RBAC for ADDITIONAL_NAMESPACES,
resources.computeDomains.enabled, the leader-election refusal and kubeVersion. All through the
pinned `helm template`."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from computedomain.api import constants as c
from computedomain.config import ConfigError, feature_gate_values, parse_settings
from computedomain.devcluster.upstream import (
    UpstreamBuild,
    UpstreamUnavailableError,
    container_environment,
    find_upstream,
    upstream_required,
)
from computedomain.domain.selectors import matches, parse_selector
from tests.kit.rbac import child_kind_additional_namespace_rules, on_child_resources
from tests.kit.release import PROJECT_VERSION
from tests.unit.helm.support import (
    CHART,
    NVIDIA_VALUES,
    OUR_NVIDIA_VALUES,
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

RELEASE_NS = "computedomain-system"
NVIDIA_NS = "nvidia-dra-driver-gpu"
DRIVER_IMAGE = "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu"
DAEMON_SA = "compute-domain-daemon-service-account"
# NVIDIA's keys that do not concern the controller: accepted, no effect (README.md says so).
NVIDIA_ONLY_KEYS = {
    "nvidiaDriverRoot",
    "nvidiaCDIHookPath",
    "altProcDevices",
    "selectorLabelsOverride",
    "gpuResourcesEnabledOverride",
    "allowDefaultNamespace",
    "resourceApiVersion",
    "webhook",
    "kubeletPlugin",
}


def error_line(stderr: str) -> str:
    """The one line of a failed render that says what is wrong."""
    lines = [line for line in stderr.splitlines() if line.startswith(("Error:", "- at "))]
    if any(line.startswith("- at ") for line in lines):  # the schema: one line per violation
        lines = [line for line in lines if line.startswith("- at ")]
    assert len(lines) == 1, stderr
    return lines[0]


def namespaces_of(objects: list[Obj], kind: str, name: str) -> list[str]:
    return sorted(
        o["metadata"]["namespace"]
        for o in objects
        if o["kind"] == kind and o["metadata"]["name"] == name
    )


# ---- the schema ----------------------------------------------------------------------------------


def grants(role: Obj) -> set[tuple[str, str, str]]:
    """Every (API group, resource, verb) a Role's rules allow."""
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_schema_lists_every_value_and_nvidias_other_keys() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())

    def closed(node: dict[str, Any], where: str) -> None:
        assert node.get("additionalProperties") is False, f"{where or '(root)'} is not closed"

    closed(schema, "")
    extra = {"global", "daemonImage"} | NVIDIA_ONLY_KEYS
    assert set(schema["properties"]) == set(values) | extra

    def walk(tree: dict[str, Any], node: dict[str, Any], where: str) -> None:
        for key, value in tree.items():
            assert key in node["properties"], f"{where}{key} is not in the schema"
            child = node["properties"][key]
            if isinstance(value, dict) and "properties" in child:
                closed(child, f"{where}{key}")
                assert set(child["properties"]) >= set(value), f"{where}{key}"
                walk(value, child, f"{where}{key}.")

    walk(values, schema, "")


TYPOS = [
    ("controler.replicas=1", "- at '': additional properties 'controler' not allowed"),
    ("controller.replica=1", "- at '/controller': additional properties 'replica' not allowed"),
    ("image.pullpolicy=Always", "- at '/image': additional properties 'pullpolicy' not allowed"),
    (
        "resources.computeDomains.enable=false",
        "- at '/resources/computeDomains': additional properties 'enable' not allowed",
    ),
    (
        "controller.leaderElection.leaseDuraton=30s",
        "- at '/controller/leaderElection': additional properties 'leaseDuraton' not allowed",
    ),
]


@pytest.mark.parametrize(("typo", "line"), TYPOS, ids=[t[0].split("=")[0] for t in TYPOS])
@pytest.mark.parametrize("command", ["template", "lint"])
def test_a_typo_fails_in_one_line(helm: Path, command: str, typo: str, line: str) -> None:
    if command == "template":
        stderr = render_error(helm, sets=[typo])
    else:
        result = run_helm(helm, "lint", str(CHART), "--set", typo)
        assert result.returncode != 0
        stderr = result.stdout + result.stderr
        # lint reports the schema twice (values.yaml and templates/): the same line each time
        stderr = "\n".join(dict.fromkeys(stderr.splitlines()))
    assert error_line(stderr) == line


def test_schema_refuses_wrong_types_in_one_line(helm: Path) -> None:
    assert error_line(render_error(helm, sets=["controller.replicas=two"])).startswith(
        "- at '/controller/replicas': got string, want integer"
    )
    assert error_line(render_error(helm, sets=["controller.logFormat=yaml"])).startswith(
        "- at '/controller/logFormat': value must be one of"
    )


# ---- featureGates: exactly the gates the controller accepts ------------------------------------


def schema_gates() -> dict[str, Any]:
    schema = json.loads((CHART / "values.schema.json").read_text())
    gates: dict[str, Any] = schema["properties"]["featureGates"]
    return gates


def test_the_schemas_feature_gates_are_exactly_those_the_controller_accepts() -> None:
    """One source of truth: computedomain/api/constants.py. A name missing here would be refused
    by helm although the controller takes it; an extra one would crash-loop the controller."""
    gates = schema_gates()
    assert gates["additionalProperties"] is False
    assert set(gates["properties"]) == c.KNOWN_FEATURE_GATES
    assert {*c.DEFAULT_FEATURE_GATES, *c.NVIDIA_OTHER_FEATURE_GATES} == c.KNOWN_FEATURE_GATES
    for name, spec in gates["properties"].items():
        assert spec == {"type": "boolean"}, name
        assert feature_gate_values(f"{name}=true") == {name: True}  # the controller takes it
    with pytest.raises(ConfigError, match="unrecognized feature gate: NoSuchGate"):
        feature_gate_values("NoSuchGate=true")
    # values.yaml's comment and the README's row name every one of them.
    values_text = (CHART / "values.yaml").read_text()
    comment = values_text[: values_text.index("\nfeatureGates:")]
    comment = comment[comment.rindex("# -- Feature gates") :]
    (row,) = [
        line
        for line in (CHART / "README.md").read_text().splitlines()
        if line.startswith("| `featureGates` |")
    ]
    for name in c.KNOWN_FEATURE_GATES:
        assert re.search(rf"\b{name}\b", comment), f"values.yaml: {name}"
        assert f"`{name}`" in row, f"README.md: {name}"


def test_every_known_gate_renders_and_the_controller_starts_with_them(helm: Path) -> None:
    sets = [f"featureGates.{name}=true" for name in sorted(c.KNOWN_FEATURE_GATES)]
    env = env_of(render(helm, sets=sets))
    assert env["FEATURE_GATES"] == "".join(
        f"{name}=true," for name in sorted(c.KNOWN_FEATURE_GATES)
    )
    settings = parse_settings([], {"IMAGE_NAME": "x", "FEATURE_GATES": env["FEATURE_GATES"]})
    assert settings.daemon.feature_gates[c.GATE_HOST_MANAGED_IMEX] is True
    one = env_of(render(helm, sets=["featureGates.MPSSupport=false"]))
    assert one["FEATURE_GATES"] == "MPSSupport=false,"


@pytest.mark.parametrize("command", ["template", "lint"])
def test_an_unknown_gate_is_refused_by_helm_in_one_line_naming_it(helm: Path, command: str) -> None:
    gate = "featureGates.NoSuchGate=true"
    if command == "template":
        stderr = render_error(helm, sets=["featureGates.MPSSupport=true", gate])
    else:
        result = run_helm(helm, "lint", str(CHART), "--set", gate)
        assert result.returncode != 0
        stderr = "\n".join(dict.fromkeys((result.stdout + result.stderr).splitlines()))
    assert (
        error_line(stderr) == "- at '/featureGates': additional properties 'NoSuchGate' not allowed"
    )


def test_a_gate_value_other_than_a_bool_is_refused_by_helm(helm: Path) -> None:
    """A string would reach FEATURE_GATES as it is: "yes" stops the controller at start."""
    args = [*template_args(), "--set-string", "featureGates.MPSSupport=yes"]
    result = run_helm(helm, *args)
    assert result.returncode != 0, result.stdout[:2000]
    assert error_line(result.stderr).startswith(
        "- at '/featureGates/MPSSupport': got string, want boolean"
    )


def test_the_old_daemon_image_key_says_what_replaced_it(helm: Path) -> None:
    line = error_line(render_error(helm, sets=["daemonImage.tag=v0.4.1"]))
    assert line.endswith(
        "daemonImage is gone: NVIDIA's key image.repository / image.tag is the IMEX daemon "
        "image now, and controllerImage.* ours (after --reuse-values: --set daemonImage=null)"
    )


@pytest.mark.parametrize(
    "repository", ["computedomain-controller", "registry.example.com/gpu/computedomain-controller"]
)
def test_our_controller_image_as_image_is_refused(helm: Path, repository: str) -> None:
    """The chart's earlier meaning of image.* (and the old docs' --set): the IMEX daemons would
    run our controller image."""
    line = error_line(render_error(helm, sets=[f"image.repository={repository}"]))
    assert line.endswith(
        f"image.repository={repository} is our controller image, but image.* is NVIDIA's DRA "
        "driver image, which the IMEX daemons run: set controllerImage.repository instead"
    )


# ---- image.* is NVIDIA's driver image ----------------------------------------------------------


def test_image_is_nvidias_driver_image_and_controller_image_is_ours(helm: Path) -> None:
    default = render(helm)
    # No NVIDIA release written: the controller reads the kubelet plugin's image.
    assert "IMAGE_NAME" not in env_of(default)
    assert container(default)["image"] == f"computedomain-controller:{PROJECT_VERSION}"
    assert container(default)["imagePullPolicy"] == "IfNotPresent"

    moved = render(
        helm,
        sets=[
            "image.tag=v0.4.1",
            "image.pullPolicy=Always",
            "controllerImage.repository=registry.example.com/cd",
            "controllerImage.tag=1.2.3",
        ],
    )
    assert env_of(moved)["IMAGE_NAME"] == f"{DRIVER_IMAGE}:v0.4.1"
    assert container(moved)["image"] == "registry.example.com/cd:1.2.3"
    assert container(moved)["imagePullPolicy"] == "Always"  # NVIDIA's, as its controller's
    own = render(helm, sets=["image.pullPolicy=Always", "controllerImage.pullPolicy=Never"])
    assert container(own)["imagePullPolicy"] == "Never"

    digest = f"{DRIVER_IMAGE}@sha256:{'a' * 64}"
    assert env_of(render(helm, sets=[f"image.repository={digest}"]))["IMAGE_NAME"] == digest


# ---- env merged by name ------------------------------------------------------------------------


def test_env_entries_replace_the_charts_by_name(helm: Path) -> None:
    env = [
        {"name": "LOG_FORMAT", "value": "text"},
        {"name": "WORKERS", "value": "2"},
        {"name": "IMAGE_NAME", "value": "registry.example.com/driver:v9"},
        {"name": "WORKERS", "value": "3"},
        {"name": "ADDITIONAL_NAMESPACES", "value": ""},
    ]
    objects = render(
        helm,
        sets=["controller.workers=8"],
        set_json=[f"controller.containers.computeDomain.env={json.dumps(env)}"],
    )
    entries = container(objects)["env"]
    names = [e["name"] for e in entries]
    assert len(names) == len(set(names)), names  # env_of checks it too
    rendered = env_of(objects)
    assert rendered["LOG_FORMAT"] == "text"
    assert rendered["WORKERS"] == "3"  # of two entries with one name the later wins
    assert rendered["IMAGE_NAME"] == "registry.example.com/driver:v9"
    # The chart's entries keep their order; the given ones follow, in theirs.
    assert names[-4:] == ["LOG_FORMAT", "IMAGE_NAME", "WORKERS", "ADDITIONAL_NAMESPACES"]
    assert names[:2] == ["POD_NAME", "NAMESPACE"]


def test_env_entry_without_a_name_fails_in_one_line(helm: Path) -> None:
    stderr = render_error(helm, sets=['controller.containers.computeDomain.env[0].value="x"'])
    assert error_line(stderr).startswith("- at '/controller/containers/computeDomain/env/0'")


# ---- additional namespaces ---------------------------------------------------------------------


def extra_namespaces(helm: Path, value: str, *sets: str) -> list[Obj]:
    env = json.dumps([{"name": "ADDITIONAL_NAMESPACES", "value": value}])
    return render(helm, sets=sets, set_json=[f"controller.containers.computeDomain.env={env}"])


def test_additional_namespaces_get_nvidias_per_namespace_rbac(helm: Path) -> None:
    objects = extra_namespaces(helm, f" old-a, old-b ,old-a,{RELEASE_NS},")
    extra = ["old-a", "old-b"]
    assert namespaces_of(objects, "Role", "computedomain-controller") == sorted(
        [RELEASE_NS, *extra]
    )
    assert namespaces_of(objects, "RoleBinding", "computedomain-controller") == sorted(
        [RELEASE_NS, *extra]
    )
    assert namespaces_of(objects, "ServiceAccount", DAEMON_SA) == sorted([RELEASE_NS, *extra])
    binding = find(objects, "ClusterRoleBinding", "computedomain-daemon")
    assert sorted(s["namespace"] for s in binding["subjects"]) == sorted([RELEASE_NS, *extra])
    assert {s["name"] for s in binding["subjects"]} == {DAEMON_SA}

    driver_role = next(
        o for o in objects if o["kind"] == "Role" and o["metadata"]["namespace"] == RELEASE_NS
    )
    allowed = grants(driver_role)
    for namespace in extra:
        role = next(
            o for o in objects if o["kind"] == "Role" and o["metadata"]["namespace"] == namespace
        )
        granted = grants(role)
        assert granted <= allowed, granted - allowed  # never more than the driver namespace
        # On the child kinds' resources: what their table derives.
        by_resource: dict[tuple[str, str], set[str]] = {}
        for group, resource, verb in granted:
            by_resource.setdefault((group, resource), set()).add(verb)
        children = on_child_resources(by_resource)
        assert children == child_kind_additional_namespace_rules()
        # Besides: watch and prune cliques (DaemonSets and pods are watched by the
        # ClusterRole, everywhere).
        assert {grant for grant in granted if grant[:2] not in children} == {
            ("resource.nvidia.com", "computedomaincliques", "list"),
            ("resource.nvidia.com", "computedomaincliques", "watch"),
            ("resource.nvidia.com", "computedomaincliques", "update"),
        }
        role_binding = next(
            o
            for o in objects
            if o["kind"] == "RoleBinding" and o["metadata"]["namespace"] == namespace
        )
        assert role_binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "computedomain-controller", "namespace": RELEASE_NS}
        ]
        assert role_binding["roleRef"]["name"] == role["metadata"]["name"]

    nvidias = extra_namespaces(helm, "old-a", "daemonServiceAccount.create=false")
    assert namespaces_of(nvidias, "Role", "computedomain-controller") == [RELEASE_NS, "old-a"]
    assert not [o for o in nvidias if o["metadata"]["name"] == DAEMON_SA]


def test_a_namespace_env_entry_moves_the_driver_namespace_objects(helm: Path) -> None:
    env = json.dumps([{"name": "NAMESPACE", "value": NVIDIA_NS}])
    objects = render(helm, set_json=[f"controller.containers.computeDomain.env={env}"])
    assert env_of(objects)["NAMESPACE"] == NVIDIA_NS
    assert namespaces_of(objects, "Role", "computedomain-controller") == [NVIDIA_NS]
    assert namespaces_of(objects, "ServiceAccount", DAEMON_SA) == [NVIDIA_NS]
    stderr = render_error(
        helm,
        sets=["driverNamespace=other"],
        set_json=[f"controller.containers.computeDomain.env={env}"],
    )
    assert error_line(stderr).endswith(
        f"driverNamespace=other and env NAMESPACE={NVIDIA_NS} disagree: set one of them"
    )


# ---- resources.computeDomains.enabled ----------------------------------------------------------


@pytest.mark.parametrize("values", [(), (NVIDIA_VALUES,)], ids=["default", "nvidia"])
def test_compute_domains_disabled_renders_no_controller(
    helm: Path, values: tuple[Path, ...]
) -> None:
    everything = [
        "serviceMonitor.enabled=true",
        "prometheusRule.enabled=true",
        "dashboard.enabled=true",
        "controller.networkPolicy.enabled=true",
    ]
    assert render(helm, values=values, sets=everything)  # something to switch off
    result = run_helm(
        helm,
        *template_args(values=values, sets=[*everything, "resources.computeDomains.enabled=false"]),
    )
    assert result.returncode == 0, result.stderr
    assert [d for d in yaml.safe_load_all(result.stdout) if d] == []


# ---- leader election ---------------------------------------------------------------------------


def test_replicas_without_leader_election_are_refused_in_one_line(helm: Path) -> None:
    line = error_line(
        render_error(
            helm, sets=["controller.replicas=3", "controller.leaderElection.enabled=false"]
        )
    )
    assert line.endswith(
        "controller.replicas=3 with leader election off: every replica would write; set "
        "controller.leaderElection.enabled=true or controller.replicas=1"
    )
    # The env values say it too: the controller reads LEADER_ELECTION_ENABLED from there.
    for off in ("false", "0", "no", ""):
        env = json.dumps([{"name": "LEADER_ELECTION_ENABLED", "value": off}])
        stderr = render_error(helm, set_json=[f"controller.containers.computeDomain.env={env}"])
        assert "controller.replicas=2 with leader election off" in error_line(stderr), off
    on = json.dumps([{"name": "LEADER_ELECTION_ENABLED", "value": "True"}])
    objects = render(
        helm,
        sets=["controller.leaderElection.enabled=false"],
        set_json=[f"controller.containers.computeDomain.env={on}"],
    )
    assert env_of(objects)["LEADER_ELECTION_ENABLED"] == "True"
    assert ("Role", "computedomain-controller-leader-election") in kinds(objects)
    one = render(helm, sets=["controller.replicas=1", "controller.leaderElection.enabled=false"])
    assert ("Role", "computedomain-controller-leader-election") not in kinds(one)


# ---- NVIDIA's other keys -----------------------------------------------------------------------


def test_nvidias_other_controller_keys(helm: Path) -> None:
    assert "PPROF_PATH" not in env_of(render(helm))  # NVIDIA's empty default: nothing to say
    profiled = render(helm, sets=["controller.metrics.profilePath=/debug/pprof"])
    assert env_of(profiled)["PPROF_PATH"] == "/debug/pprof"
    assert "PPROF_PATH" not in env_of(
        render(
            helm,
            sets=[
                "controller.metrics.profilePath=/debug/pprof",
                "controller.metrics.enabled=false",
            ],
        )
    )
    policy = find(render(helm, sets=["controller.networkPolicy.enabled=true"]), "NetworkPolicy")
    assert policy["spec"]["policyTypes"] == ["Egress"]
    assert policy["spec"]["egress"] == [
        {"ports": [{"protocol": "TCP", "port": 443}, {"protocol": "TCP", "port": 6443}]}
    ]
    deployment = find(render(helm), "Deployment")
    assert (
        policy["spec"]["podSelector"]["matchLabels"]
        == deployment["spec"]["selector"]["matchLabels"]
    )
    assert render(helm, sets=["resourceApiVersion=resource.k8s.io/v1"])
    line = error_line(render_error(helm, sets=["resourceApiVersion=resource.k8s.io/v1beta2"]))
    assert line.endswith(
        "resourceApiVersion=resource.k8s.io/v1beta2: the controller writes "
        "ResourceClaimTemplates as resource.k8s.io/v1 only (Kubernetes 1.34+), as NVIDIA's "
        "v0.4.x controller does"
    )


# ---- kubeVersion -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "admitted"),
    [
        ("1.33.5", False),
        ("1.34.0", True),
        ("v1.34.2-eks-113cf36", True),
        ("1.34.1-gke.1000", True),
        ("1.36.3", True),
    ],
)
def test_kube_version(helm: Path, version: str, admitted: bool) -> None:
    result = run_helm(helm, *template_args(), "--kube-version", version)
    if admitted:
        assert result.returncode == 0, result.stderr
    else:
        assert result.returncode != 0, f"the chart renders for Kubernetes {version}"
        assert error_line(result.stderr) == (
            "Error: chart requires kubeVersion: >=1.34.0-0 which is incompatible with "
            f"Kubernetes v{version}"
        )


# ---- an NVIDIA values file, rendered by NVIDIA's chart and by ours -------------------------------


@pytest.fixture(scope="module")
def nvidia_chart() -> Path:
    """NVIDIA's chart of the pinned upstream build (hack/upstream/build.sh), never built here."""
    try:
        build: UpstreamBuild = find_upstream(build=False)
    except UpstreamUnavailableError as error:
        if upstream_required():
            pytest.fail(
                f"NVIDIA's chart required (CI, NVIDIA_DRA_DRIVER_SRC, hack/test.sh): {error}"
            )
        pytest.skip(f"NVIDIA's chart not at hand: {error}")
    return build.chart


def render_nvidia(helm: Path, chart: Path, *values: Path) -> list[Obj]:
    args = [str(helm), "template", "dra-driver-nvidia-gpu", str(chart), "--namespace", "other"]
    for path in values:
        args += ["--values", str(path)]
    out = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def controller_pod(objects: list[Obj]) -> Obj:
    (deployment,) = [
        o
        for o in objects
        if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("controller")
    ]
    return deployment


def test_nvidias_own_default_values_render(helm: Path, nvidia_chart: Path) -> None:
    """NVIDIA's values.yaml, every key of it: the schema knows them all."""
    objects = render(helm, values=[nvidia_chart / "values.yaml"], namespace=NVIDIA_NS)
    assert "IMAGE_NAME" not in env_of(objects)  # tag "": the kubelet plugin's image


def test_an_nvidia_values_file_means_what_it_means_to_nvidias_chart(
    helm: Path, nvidia_chart: Path
) -> None:
    theirs = render_nvidia(helm, nvidia_chart, NVIDIA_VALUES)
    ours = render(helm, release="dra", namespace="other", values=[NVIDIA_VALUES, OUR_NVIDIA_VALUES])

    # The controller's environment, resolved as the kubelet resolves it: every variable
    # NVIDIA's chart gives NVIDIA's controller, ours gets with the same value.
    their_deployment, our_deployment = controller_pod(theirs), controller_pod(ours)
    their_c = their_deployment["spec"]["template"]["spec"]["containers"][0]
    our_c = our_deployment["spec"]["template"]["spec"]["containers"][0]
    their_env = container_environment(their_c, "pod-1", NVIDIA_NS)
    our_env = container_environment(our_c, "pod-1", NVIDIA_NS)
    assert their_env.pop("PPROF_PATH") == ""  # ours renders it only when set
    assert {k: our_env.get(k) for k in their_env} == their_env
    assert their_env["IMAGE_NAME"] == "nvcr.io/nvidia/k8s-dra-driver-gpu:v25.8.1"
    assert their_env["LOG_VERBOSITY"] == our_env["LOG_VERBOSITY"] == "6"

    # NVIDIA's chart appends the env values (MAX_NODES_PER_IMEX_DOMAIN is not one of its own);
    # ours merges them: each name once.
    assert [e["name"] for e in our_c["env"]].count("MAX_NODES_PER_IMEX_DOMAIN") == 1

    # The pod: replicas, scheduling, pull secrets, pull policy, resources.
    assert our_deployment["spec"]["replicas"] == their_deployment["spec"]["replicas"] == 1
    their_pod, our_pod = (
        their_deployment["spec"]["template"]["spec"],
        our_deployment["spec"]["template"]["spec"],
    )
    for key in ("imagePullSecrets", "priorityClassName", "nodeSelector", "tolerations"):
        assert our_pod[key] == their_pod[key], key
    for key in ("imagePullPolicy", "resources"):
        assert our_c[key] == their_c[key], key
    assert our_deployment["metadata"]["namespace"] == their_deployment["metadata"]["namespace"]


def test_an_nvidia_values_file_gives_the_namespaces_nvidias_rbac(
    helm: Path, nvidia_chart: Path
) -> None:
    """Per driver and additional namespace: a controller Role and RoleBinding, and the daemon
    ServiceAccount in the daemon ClusterRoleBinding, where NVIDIA's chart renders them."""
    theirs = render_nvidia(helm, nvidia_chart, NVIDIA_VALUES)
    ours = render(helm, release="dra", namespace="other", values=[NVIDIA_VALUES])

    def role_namespaces(objects: list[Obj], kind: str) -> list[str]:
        return sorted(
            o["metadata"]["namespace"]
            for o in objects
            if o["kind"] == kind and re.search("controller", o["metadata"]["name"])
        )

    for kind in ("Role", "RoleBinding"):
        assert role_namespaces(ours, kind) == role_namespaces(theirs, kind)
        assert role_namespaces(ours, kind) == [NVIDIA_NS, f"{NVIDIA_NS}-old"]
    assert namespaces_of(ours, "ServiceAccount", DAEMON_SA) == namespaces_of(
        theirs, "ServiceAccount", DAEMON_SA
    )

    def daemon_subjects(objects: list[Obj], binding_name: str) -> list[tuple[str, str]]:
        binding = find(objects, "ClusterRoleBinding", binding_name)
        return sorted((s["name"], s["namespace"]) for s in binding["subjects"])

    # The same subjects, each chart under its own binding's name.
    assert daemon_subjects(ours, "computedomain-daemon") == daemon_subjects(
        theirs, "compute-domain-daemon-role-binding"
    )


# ---- nameOverride: the name of NVIDIA's install, as in NVIDIA's chart ----------------------------

NVIDIA_DRIVER_NAMESPACE_VALUES = CHART.parent / "values" / "nvidia-driver-namespace.yaml"


@pytest.mark.parametrize("name", ["", "nvidia-dra-driver-gpu", "acme-gpu"])
def test_name_override_names_nvidias_install_not_ours(
    helm: Path, nvidia_chart: Path, tmp_path: Path, name: str
) -> None:
    """Given NVIDIA's nameOverride (empty: a fresh install; nvidia-dra-driver-gpu: upgraded from
    v25.x; or any other), ours takes NVIDIA's Lease and recognises NVIDIA's controller pods as
    NVIDIA's chart renders them, and our own objects keep their names and labels."""
    values = tmp_path / "name.yaml"
    # NVIDIA's chart renders only with its GPU plugin off (its guard for the device plugin).
    values.write_text(
        yaml.safe_dump({"nameOverride": name, "resources": {"gpus": {"enabled": False}}})
    )
    theirs = controller_pod(render_nvidia(helm, nvidia_chart, values))
    ours_objects = render(
        helm, release="computedomain", namespace=NVIDIA_NS,
        values=[NVIDIA_DRIVER_NAMESPACE_VALUES, values],
    )  # fmt: skip
    ours = find(ours_objects, "Deployment")

    their_env = container_environment(
        theirs["spec"]["template"]["spec"]["containers"][0], "pod-1", NVIDIA_NS
    )
    our_env = container_environment(container(ours_objects), "pod-1", NVIDIA_NS)
    # The Lease's name; both keep it in their release namespace.
    lease = "LEADER_ELECTION_LEASE_LOCK_NAME"
    assert our_env[lease] == their_env[lease] == f"{name or c.NVIDIA_CHART_NAME}-controller"
    assert our_env["LEADER_ELECTION_LEASE_LOCK_NAMESPACE"] == NVIDIA_NS

    settings = parse_settings([], our_env)
    selectors = [parse_selector(s) for s in settings.nvidia_controller_selectors]
    their_labels = theirs["spec"]["template"]["metadata"]["labels"]
    our_labels = ours["spec"]["template"]["metadata"]["labels"]
    assert any(matches(s, their_labels) for s in selectors), (their_labels, selectors)
    assert not any(matches(s, our_labels) for s in selectors)
    assert ours["metadata"]["name"] == "computedomain-controller"
    assert our_labels["app.kubernetes.io/name"] == "computedomain-controller"
    # The controller's own default where it knows the name: nothing rendered.
    if name in ("", c.NVIDIA_UPGRADED_NAME):
        assert "NVIDIA_CONTROLLER_SELECTORS" not in our_env
