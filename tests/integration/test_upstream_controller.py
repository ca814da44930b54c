"""Differential test against NVIDIA's real controller: the same ComputeDomain, created once under
NVIDIA's `compute-domain-controller` binary (each pinned target, v0.4.1 and v0.5.0-dev: built by
hack/upstream/build.sh, run with the environment that target's Helm chart's Deployment renders)
and once under ours, on the same control plane,
in the same namespaces. The children each writes (daemon ResourceClaimTemplate, workload
ResourceClaimTemplate, DaemonSet), the CD's finalizers and its `status.status` must be equal after
normalising what the apiserver makes per object (UIDs, the CD's UID inside names and labels,
resourceVersion, timestamps, managedFields, generation, status).

Every difference left must be in KNOWN_DIFFERENCES (per target and case), with both values;
docs/contract.md §21 lists the same paths with the reasons (test_known_differences_are_documented
keeps the two in step). A known difference that no longer shows fails too, so the list stays true.

Needs NVIDIA's builds: skipped without them, except under CI=true, with NVIDIA_DRA_DRIVER_SRC /
NVIDIA_DRA_DRIVER_MAIN_SRC set or COMPUTEDOMAIN_REQUIRE_UPSTREAM=1 (hack/test.sh), where a missing
build fails.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from computedomain.api import constants as c
from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.devcluster.assets import REPO_ROOT
from computedomain.devcluster.harness import Controllers
from computedomain.devcluster.helm import find_helm
from computedomain.devcluster.processes import tail
from computedomain.devcluster.upstream import (
    COMPUTE_DOMAIN_VALUES,
    MAIN,
    TARGET_VERSIONS,
    TARGETS,
    V041,
    UpstreamBuild,
    chart_controller_container,
    container_environment,
    start_nvidia_controller,
)
from computedomain.devcluster.watching import Objects, watch_object, watch_objects, watch_present
from computedomain.runtime import resources as r
from computedomain.runtime.client import ApiError, KubeClient

CD_NAME = "imex-channel-injection"
RCT_NAME = "imex-channel-0"
UID_PLACEHOLDER = "<cd-uid>"
CONTRACT = REPO_ROOT / "docs" / "contract.md"
SECTION = "## 21. Differences from NVIDIA's controller, found by the differential tests"
# Settings that shape the children; ours gets whichever of them the chart gives NVIDIA's.
SHARED_SETTINGS = (
    "IMAGE_NAME",
    "LOG_VERBOSITY_CD_DAEMON",
    "MAX_NODES_PER_IMEX_DOMAIN",
    "CD_DAEMON_IMAGE_PULL_SECRET_NAMES",
    "FEATURE_GATES",
    "ADDITIONAL_NAMESPACES",
    # v0.5 only (host-managed IMEX, contract §18); v0.4.1's chart renders neither.
    "IMEX_MODE",
    "IMEX_ISOLATION",
)
# Set by the apiserver per object; nothing a controller chooses. managedFields are kept only as
# who wrote how ("manager operation"), which tells the two controllers' writes apart; entries for
# the status subresource go with the status (kube-controller-manager writes a DaemonSet's).
VOLATILE_METADATA = ("uid", "resourceVersion", "creationTimestamp", "generation")
DS_CONTAINER = "spec.template.spec.containers[compute-domain-daemon]"
CHANNEL_PARAMETERS = "spec.spec.devices.config[0].opaque.parameters"
IMAGE = "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu"
DAEMON_SET = "DaemonSet"
DAEMON_RCT = "daemon ResourceClaimTemplate"
WORKLOAD_RCT = "workload ResourceClaimTemplate"


@dataclass(frozen=True)
class Case:
    """Chart values (besides COMPUTE_DOMAIN_VALUES) for both controllers, the CD's spec, and values
    NVIDIA's objects must show (so the case's inputs are known to have reached them)."""

    chart_values: dict[str, Any]
    spec: dict[str, Any]
    expect: dict[str, Any]
    # The children a controller writes for it (host-managed IMEX: only the workload RCT).
    children: tuple[str, ...] = (DAEMON_SET, DAEMON_RCT, WORKLOAD_RCT)
    # The targets whose controller knows the case's settings.
    targets: tuple[str, ...] = TARGETS


CASES = {
    # NVIDIA's example CD under the chart's defaults.
    "chart-defaults": Case(
        {},
        {"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": RCT_NAME}}},
        {
            f"DaemonSet {DS_CONTAINER}.env[LOG_VERBOSITY].value": "4",
            f"DaemonSet {DS_CONTAINER}.image": f"{IMAGE}:<target>",
            f"workload ResourceClaimTemplate {CHANNEL_PARAMETERS}.allocationMode": "Single",
            "ComputeDomain status.status": c.STATUS_NOT_READY,
        },
    ),
    # Everything else that reaches a child: legacy status protocol, pull secrets, another
    # verbosity; an elastic CD (numNodes 0) whose workload claim asks for all channels.
    "legacy-secrets-all-channels": Case(
        {
            "featureGates": {"ComputeDomainCliques": False},
            "imagePullSecrets": [{"name": "regcred"}, {"name": "mirror"}],
            "logVerbosity": "6",
        },
        {
            "numNodes": 0,
            "channel": {"resourceClaimTemplate": {"name": RCT_NAME}, "allocationMode": "All"},
        },
        {
            f"DaemonSet {DS_CONTAINER}.env[LOG_VERBOSITY].value": "6",
            "DaemonSet spec.template.spec.imagePullSecrets[regcred].name": "regcred",
            "DaemonSet spec.template.spec.imagePullSecrets[mirror].name": "mirror",
            f"workload ResourceClaimTemplate {CHANNEL_PARAMETERS}.allocationMode": "All",
            "ComputeDomain status.status": c.STATUS_READY,
        },
    ),
    # v0.5: the node's own nvidia-imex serves the CD (contract §18); the controller writes the
    # workload RCT (allocationMode forced to Single) and calls the CD Ready.
    "host-managed": Case(
        {
            "featureGates": {"HostManagedIMEXDaemon": True},
            "resources.computeDomains.imex.mode": "hostManaged",
        },
        {
            "numNodes": 2,
            "channel": {"resourceClaimTemplate": {"name": RCT_NAME}, "allocationMode": "All"},
        },
        {
            f"workload ResourceClaimTemplate {CHANNEL_PARAMETERS}.allocationMode": "Single",
            "ComputeDomain status.status": c.STATUS_READY,
        },
        children=(WORKLOAD_RCT,),
        targets=(MAIN,),
    ),
}


# The gates each target's binaries know besides ComputeDomainCliques, with their defaults; v0.5
# added ConsumableShares, DRAListTypeAttributes, FabricManagerPartitioning, HostManagedIMEXDaemon.
_V041_GATES = {
    "AllAlpha": False,
    "AllBeta": False,
    "ContextualLogging": True,
    "CrashOnNVLinkFabricErrors": True,
    "DeviceMetadata": False,
    "DynamicMIG": False,
    "IMEXDaemonsWithDNSNames": True,
    "LoggingAlphaOptions": False,
    "LoggingBetaOptions": True,
    "MPSSupport": False,
    "NVMLDeviceHealthCheck": False,
    "PassthroughSupport": False,
    "TimeSlicingSettings": False,
}
KNOWN_GATES = {
    V041: _V041_GATES,
    MAIN: {
        **_V041_GATES,
        "ConsumableShares": False,
        "DRAListTypeAttributes": False,
        "FabricManagerPartitioning": False,
        "HostManagedIMEXDaemon": False,
    },
}


def _gates(target: str, cliques: bool) -> str:
    """NVIDIA's daemon FEATURE_GATES: every gate its controller knows, in name order."""
    gates = {**KNOWN_GATES[target], c.GATE_CLIQUES: cliques}
    return "".join(f"{name}={str(gates[name]).lower()}," for name in sorted(gates))


FIELD_MANAGERS = {
    f"{kind} metadata.managedFields[0]": (
        "compute-domain-controller Update",
        "computedomain-controller Update",
    )
    for kind in (DAEMON_SET, DAEMON_RCT, WORKLOAD_RCT)
}
DS_GATES = f"{DAEMON_SET} {DS_CONTAINER}.env[FEATURE_GATES].value"


def _known(target: str, case: str) -> dict[str, tuple[Any, Any]]:
    """Per target and case, path -> (NVIDIA's value, ours). docs/contract.md §21 gives the reasons
    and lists the same paths; keep both in step. NVIDIA's controller hands its daemons every gate
    it knows; ours only the two the daemon reads (so a v0.4.1 daemon never meets a v0.5 name)."""
    managers = {
        p: v for p, v in FIELD_MANAGERS.items() if p.split(" metadata")[0] in CASES[case].children
    }
    if DAEMON_SET not in CASES[case].children:
        return managers
    cliques = CASES[case].chart_values.get("featureGates", {}).get(c.GATE_CLIQUES, True)
    ours = f"{c.GATE_CLIQUES}={str(cliques).lower()},IMEXDaemonsWithDNSNames=true,"
    return {DS_GATES: (_gates(target, cliques), ours), **managers}


KNOWN_DIFFERENCES: dict[str, dict[str, dict[str, tuple[Any, Any]]]] = {
    target: {case: _known(target, case) for case in CASES if target in CASES[case].targets}
    for target in TARGETS
}
MISSING = "<absent>"


def _replace_uid(value: Any, uid: str) -> Any:
    if isinstance(value, str):
        return value.replace(uid, UID_PLACEHOLDER)
    if isinstance(value, dict):
        return {_replace_uid(k, uid): _replace_uid(v, uid) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace_uid(v, uid) for v in value]
    return value


def normalise(obj: dict[str, Any], cd_uid: str) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    meta = obj["metadata"]
    for key in VOLATILE_METADATA:
        meta.pop(key, None)
    meta["managedFields"] = sorted(
        f"{m.get('manager')} {m.get('operation')}"
        for m in meta.get("managedFields") or []
        if not m.get("subresource")
    )
    for ref in meta.get("ownerReferences") or []:
        ref.pop("uid", None)
    obj.pop("status", None)
    result: dict[str, Any] = _replace_uid(obj, cd_uid)
    return result


def flatten(value: Any, path: str = "") -> dict[str, Any]:
    """Leaf paths; list items that carry a name are addressed by it (`env[FEATURE_GATES]`)."""
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(flatten(item, f"{path}.{key}" if path else key))
        return out
    if isinstance(value, list) and value:
        named = all(isinstance(i, dict) and isinstance(i.get("name"), str) for i in value)
        out = {}
        for index, item in enumerate(value):
            out.update(flatten(item, f"{path}[{item['name'] if named else index}]"))
        return out
    return {path: value}


def differences(theirs: dict[str, Any], ours: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    a, b = flatten(theirs), flatten(ours)
    return {
        path: (a.get(path, MISSING), b.get(path, MISSING))
        for path in sorted(a.keys() | b.keys())
        if a.get(path, MISSING) != b.get(path, MISSING)
    }


async def written_for(
    kube: KubeClient, namespace: str, driver_namespace: str, case: Case
) -> tuple[str, dict[str, Any]]:
    """Create the CD; once the controller has set its finalizer and `status.status` and made
    the case's children, return its UID and what was written, normalised, by kind."""
    body = {"apiVersion": c.API_VERSION, "kind": c.CD_KIND, "metadata": {"name": CD_NAME}}
    cd = await kube.create(COMPUTE_DOMAINS, {**body, "spec": copy.deepcopy(case.spec)}, namespace)
    uid = cd["metadata"]["uid"]
    cd = await watch_present(
        kube,
        COMPUTE_DOMAINS,
        CD_NAME,
        lambda o: (
            o is not None
            and c.FINALIZER in (o["metadata"].get("finalizers") or [])
            and bool((o.get("status") or {}).get("status"))
        ),
        namespace=namespace,
        within=60,
        what="the CD's finalizer and status.status",
    )
    name = c.daemon_name(uid)
    where = {
        DAEMON_SET: (r.DAEMONSETS, name, driver_namespace),
        DAEMON_RCT: (r.RESOURCE_CLAIM_TEMPLATES, name, driver_namespace),
        WORKLOAD_RCT: (r.RESOURCE_CLAIM_TEMPLATES, RCT_NAME, namespace),
    }
    objects: dict[str, Any] = {
        "ComputeDomain": {
            "finalizers": cd["metadata"]["finalizers"],
            "status": {"status": cd["status"]["status"]},
        },
    }
    for kind in case.children:
        res, child, ns = where[kind]
        objects[kind] = normalise(
            await watch_present(
                kube, res, child, lambda o: o is not None, namespace=ns, within=60, what=kind
            ),
            uid,
        )
    # What a controller must not write for the case (host-managed: no daemons of its own).
    for kind in sorted(where.keys() - case.children):
        res, child, ns = where[kind]
        objects[kind] = await absent_or_present(kube, res, child, ns, uid)
    return uid, objects


async def absent_or_present(
    kube: KubeClient, res: r.Resource, name: str, namespace: str, cd_uid: str
) -> Any:
    """The object, normalised, or MISSING."""
    try:
        return normalise(await kube.get(res, name, namespace), cd_uid)
    except ApiError as err:
        if not err.is_not_found:
            raise
        return MISSING


async def gone(kube: KubeClient, uid: str, namespace: str, driver_namespace: str) -> None:
    """Until the CD and every object labelled with its UID are gone (its controller's cleanup)."""
    await watch_object(
        kube, COMPUTE_DOMAINS, CD_NAME, lambda o: o is None, namespace=namespace, within=60
    )
    selector = f"{c.CD_LABEL}={uid}"
    for res, ns in (
        (r.DAEMONSETS, driver_namespace),
        (r.RESOURCE_CLAIM_TEMPLATES, driver_namespace),
        (r.RESOURCE_CLAIM_TEMPLATES, namespace),
    ):

        def empty(objects: Objects) -> bool:
            return not objects

        await watch_objects(
            kube, res, empty, namespace=ns, label_selector=selector, within=60, what=res.kind
        )


# Each case on each target whose controller knows its settings.
TARGET_CASES = [
    pytest.param(target, case, id=f"{TARGET_VERSIONS[target]}-{case}")
    for target in TARGETS
    for case in sorted(CASES)
    if target in CASES[case].targets
]


@pytest.mark.parametrize(("nvidia_target", "case"), TARGET_CASES, indirect=["nvidia_target"])
async def test_children_equal_nvidia_controllers(
    case: str,
    nvidia_target: tuple[str, UpstreamBuild],
    kube: KubeClient,
    kubeconfig_path: Path,
    namespace: str,
    driver_namespace: str,
    controllers: Controllers,
    tmp_path: Path,
) -> None:
    target, upstream = nvidia_target
    values = {**COMPUTE_DOMAIN_VALUES, **CASES[case].chart_values}
    container = chart_controller_container(find_helm(), upstream, driver_namespace, values=values)
    env = container_environment(container, "dra-driver-nvidia-gpu-controller-0", driver_namespace)
    # The chart listens on :8080 for metrics; here only on loopback, on a port of its own.
    if env.get("HTTP_ENDPOINT"):
        env["HTTP_ENDPOINT"] = "127.0.0.1:0"
    log = tmp_path / "nvidia-controller.log"
    nvidia = start_nvidia_controller(upstream, kubeconfig_path, container, env, log)
    try:
        try:
            their_uid, theirs = await written_for(kube, namespace, driver_namespace, CASES[case])
            await kube.delete(COMPUTE_DOMAINS, CD_NAME, namespace)
            await gone(kube, their_uid, namespace, driver_namespace)
        except TimeoutError as error:
            pytest.fail(f"NVIDIA's controller: {error}\n--- its log:\n{tail(log, 40)}")
        assert nvidia.alive(), f"NVIDIA's controller exited:\n{tail(log, 40)}"
    finally:
        nvidia.stop()

    await controllers.start(**{k: env[k] for k in SHARED_SETTINGS if k in env})
    _, ours = await written_for(kube, namespace, driver_namespace, CASES[case])

    seen = {f"{kind} {path}": v for kind in theirs for path, v in flatten(theirs[kind]).items()}
    expect = {
        path: value.replace("<target>", TARGET_VERSIONS[target])
        if isinstance(value, str)
        else value
        for path, value in CASES[case].expect.items()
    }
    assert {p: seen.get(p, MISSING) for p in expect} == expect

    found: dict[str, tuple[Any, Any]] = {}
    for kind in theirs:
        for path, pair in differences(theirs[kind], ours[kind]).items():
            found[f"{kind} {path}".strip()] = pair
    print(
        f"differences from NVIDIA's {TARGET_VERSIONS[target]} controller:",
        *found.items(),
        sep="\n  ",
    )
    known = KNOWN_DIFFERENCES[target][case]
    unexpected = {p: v for p, v in found.items() if known.get(p) != v}
    vanished = sorted(known.keys() - found.keys())
    report = "\n".join(
        f"  {path}: NVIDIA {theirs_!r} / ours {ours_!r}"
        for path, (theirs_, ours_) in unexpected.items()
    )
    assert not unexpected, f"children differ from NVIDIA's controller's:\n{report}"
    assert not vanished, f"known differences no longer seen (update §21 and the test): {vanished}"


def documented_paths() -> set[str]:
    text = CONTRACT.read_text()
    assert SECTION in text, f"docs/contract.md lacks the section {SECTION!r}"
    section = text.split(SECTION, 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([^`]+)` \|", section, flags=re.MULTILINE))


def test_known_differences_are_documented() -> None:
    assert KNOWN_DIFFERENCES.keys() == set(TARGETS)
    for target, known in KNOWN_DIFFERENCES.items():
        assert known.keys() == {case for case in CASES if target in CASES[case].targets}
    paths = {
        path for known in KNOWN_DIFFERENCES.values() for case in known.values() for path in case
    }
    assert documented_paths() == paths
