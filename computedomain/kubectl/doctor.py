"""``kubectl cdom doctor``: the install checked end to end, one line per check with the fix.

Pure: ``Install`` holds what was read (main.py lists it, one request per kind); ``diagnose``
turns it into ``Check`` lines in the order an SRE fixes things: the API (CRDs, DRA, DeviceClasses),
NVIDIA's kubelet plugin, our controller, a second controller, the daemons' image and permissions,
then the nodes' fabric.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from computedomain.api import constants as c
from computedomain.domain.coexistence import (
    CD_CRD_NAME,
    CLIQUE_CRD_NAME,
    CRD_INSTALL_COMMAND,
    CRD_UPGRADE_COMMAND,
    kubelet_plugin_image,
    missing_status_fields,
    nvidia_deployment_of,
    running_nvidia_controllers,
    shares_lease,
)
from computedomain.runtime.clock import parse_time
from computedomain.runtime.objects import condition_true

Obj = dict[str, Any]
State = Literal["ok", "warn", "fail"]
# Nodes named in one line at most; the rest are counted.
NAMES_SHOWN = 5
DEFAULT_LEASE_NAME = "nvidia-compute-domain-controller"
# What NVIDIA's IMEX daemon does with its ServiceAccount (contract: the daemon's ClusterRole).
DAEMON_PERMISSIONS: tuple[tuple[str, str, str], ...] = (
    ("get", c.GROUP, c.CD_PLURAL),
    ("list", c.GROUP, c.CD_PLURAL),
    ("watch", c.GROUP, c.CD_PLURAL),
    ("update", c.GROUP, f"{c.CD_PLURAL}/status"),
    ("get", c.GROUP, c.CLIQUE_PLURAL),
    ("list", c.GROUP, c.CLIQUE_PLURAL),
    ("watch", c.GROUP, c.CLIQUE_PLURAL),
    ("create", c.GROUP, c.CLIQUE_PLURAL),
    ("update", c.GROUP, c.CLIQUE_PLURAL),
    ("patch", c.GROUP, c.CLIQUE_PLURAL),
    ("get", "", "pods"),
    ("list", "", "pods"),
    ("watch", "", "pods"),
    ("patch", "", "pods"),
)


@dataclass(frozen=True)
class Check:
    name: str
    state: State
    detail: str
    fix: str = ""


@dataclass
class Install:
    """What the cluster holds that a working install needs (see main.py for how it is read)."""

    now: datetime
    driver_namespace: str
    lease_ref: tuple[str, str]  # (namespace, name) our controller leads on
    crds: Mapping[str, Obj | None] = field(default_factory=dict)  # by CRD name
    dra_served: bool = True  # resource.k8s.io/v1 (DeviceClasses listed)
    device_classes: Sequence[str] = ()
    nvidia_daemonsets: Sequence[Obj] = ()  # NVIDIA's chart DaemonSets, all namespaces
    plugin_pods: Sequence[Obj] = ()  # the kubelet plugin's pods
    nodes: Sequence[Obj] = ()
    our_pods: Sequence[Obj] = ()  # our controller's pods, all namespaces
    lease: Obj | None = None
    nvidia_controller_pods: Sequence[Obj] = ()
    daemon_daemonsets: Sequence[Obj] = ()  # the IMEX DaemonSets of existing domains
    daemon_image: str = ""  # IMAGE_NAME of our controller's pod ("" unknown)
    daemon_service_account: Obj | None = None
    daemon_denied: Sequence[str] = ()  # "verb resource" the daemon's ServiceAccount may not do


def pod_env(pod: Mapping[str, Any], name: str) -> str | None:
    """A literal env value of the pod's first container; its namespace for a fieldRef to
    metadata.namespace; None when not set that way."""
    containers = (pod.get("spec") or {}).get("containers") or []
    for item in (containers[0].get("env") or []) if containers else []:
        if item.get("name") != name:
            continue
        ref = ((item.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
        if ref == "metadata.namespace":
            return str((pod.get("metadata") or {}).get("namespace") or "")
        return None if "valueFrom" in item else str(item.get("value") or "")
    return None


def our_pod(pods: Sequence[Obj]) -> Obj:
    """The pod of ours to read settings from: a running one first; {} when none."""
    running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
    return running[0] if running else (pods[0] if pods else {})


def driver_namespace(pod: Mapping[str, Any], *seen: str) -> str:
    """Our controller pod's NAMESPACE, else the first namespace seen where the driver lives
    (the kubelet plugin's, a daemon DaemonSet's), else ``default`` (the controller's own)."""
    return pod_env(pod, "NAMESPACE") or next((ns for ns in seen if ns), "default")


def our_lease(pod: Mapping[str, Any], driver_namespace: str) -> tuple[str, str]:
    """(namespace, name) of the Lease our controller leads on: its pod's settings, else the
    controller's defaults."""
    return (
        pod_env(pod, "LEADER_ELECTION_LEASE_LOCK_NAMESPACE") or driver_namespace,
        pod_env(pod, "LEADER_ELECTION_LEASE_LOCK_NAME") or DEFAULT_LEASE_NAME,
    )


def _names(items: Sequence[str]) -> str:
    shown = ", ".join(sorted(items)[:NAMES_SHOWN])
    more = len(items) - NAMES_SHOWN
    return f"{shown} and {more} more" if more > 0 else shown


def _ready_node(node: Mapping[str, Any]) -> bool:
    return condition_true(node, "Ready")


def check_crds(install: Install) -> Check:
    cd_crd, clique_crd = install.crds.get(CD_CRD_NAME), install.crds.get(CLIQUE_CRD_NAME)
    absent = [
        name for name, crd in ((CD_CRD_NAME, cd_crd), (CLIQUE_CRD_NAME, clique_crd)) if not crd
    ]
    if absent:
        return Check("CRDs", "fail", f"not installed: {', '.join(absent)}", CRD_INSTALL_COMMAND)
    served = [
        v.get("name")
        for v in (cd_crd or {}).get("spec", {}).get("versions") or []
        if v.get("served")
    ]
    if c.VERSION not in served:
        return Check(
            "CRDs",
            "fail",
            f"{CD_CRD_NAME} does not serve {c.VERSION} (it serves: "
            f"{', '.join(map(str, served)) or 'none'})",
            CRD_INSTALL_COMMAND,
        )
    missing = missing_status_fields(cd_crd)
    if missing:
        return Check(
            "CRDs",
            "fail",
            f"{CD_CRD_NAME} lacks status fields {', '.join(missing)} (NVIDIA's chart never "
            "upgrades CRDs): the apiserver drops them, so domains show no conditions",
            CRD_UPGRADE_COMMAND,
        )
    return Check("CRDs", "ok", f"{CD_CRD_NAME} and {CLIQUE_CRD_NAME} current ({c.VERSION})")


def check_dra(install: Install) -> list[Check]:
    if not install.dra_served:
        return [
            Check(
                "DRA API",
                "fail",
                "resource.k8s.io/v1 is not served: ResourceClaimTemplates and DeviceClasses "
                "cannot be written",
                "Kubernetes 1.34 or later: NVIDIA's v0.4 driver and this controller use "
                "resource.k8s.io/v1",
            )
        ]
    checks = [Check("DRA API", "ok", "resource.k8s.io/v1 served")]
    wanted = (c.DAEMON_DEVICE_CLASS, c.CHANNEL_DEVICE_CLASS)
    absent = [name for name in wanted if name not in install.device_classes]
    if absent:
        checks.append(
            Check(
                "DeviceClasses",
                "fail",
                f"missing {', '.join(absent)}: no claim of a domain can be allocated",
                "install NVIDIA's chart with resources.computeDomains.enabled=true (it ships "
                "both DeviceClasses)",
            )
        )
    else:
        checks.append(Check("DeviceClasses", "ok", ", ".join(wanted)))
    return checks


def plugin_daemonset(install: Install) -> tuple[Obj, str] | None:
    """NVIDIA's kubelet plugin DaemonSet and its image, if installed."""
    for ds in install.nvidia_daemonsets:
        image = kubelet_plugin_image(ds)
        if image is not None:
            return ds, image
    return None


def check_kubelet_plugin(install: Install) -> Check:
    found = plugin_daemonset(install)
    if found is None:
        return Check(
            "kubelet plugin",
            "fail",
            "NVIDIA's kubelet plugin DaemonSet was not found (app.kubernetes.io/name "
            f"{c.NVIDIA_CHART_NAME} or {c.NVIDIA_UPGRADED_NAME}): no node can join a domain",
            "install NVIDIA's DRA driver chart (its controller at replicas 0 beside ours)",
        )
    ds, _ = found
    where = f"{ds['metadata']['namespace']}/{ds['metadata']['name']}"
    ready_on = {
        (p.get("spec") or {}).get("nodeName")
        for p in install.plugin_pods
        if condition_true(p, "Ready") and not (p.get("metadata") or {}).get("deletionTimestamp")
    }
    fabric = [
        n["metadata"]["name"]
        for n in install.nodes
        if c.GPU_CLIQUE_NODE_LABEL in (n["metadata"].get("labels") or {}) and _ready_node(n)
    ]
    without = [name for name in fabric if name not in ready_on]
    if without:
        return Check(
            "kubelet plugin",
            "fail",
            f"DaemonSet {where} has no Ready pod on {len(without)} of {len(fabric)} Ready nodes "
            f"with {c.GPU_CLIQUE_NODE_LABEL}: {_names(without)}",
            f"kubectl -n {ds['metadata']['namespace']} describe daemonset "
            f"{ds['metadata']['name']} (its Events, its pods' logs)",
        )
    return Check(
        "kubelet plugin", "ok", f"DaemonSet {where} Ready on all {len(fabric)} NVLink nodes"
    )


def check_controller(install: Install) -> Check:
    namespace, name = install.lease_ref
    running = [p for p in install.our_pods if (p.get("status") or {}).get("phase") == "Running"]
    pods = f"{len(running)} pod(s) of ours running" if install.our_pods else "no pod of ours found"
    lease = install.lease
    fix = (
        "kubectl get pods -A -l app.kubernetes.io/name=computedomain-controller; its log says "
        "why it does not lead (docs/runbooks.md)"
    )
    if lease is None:
        return Check(
            "controller", "fail", f"no Lease {namespace}/{name} ({pods}): no controller leads", fix
        )
    spec = lease.get("spec") or {}
    holder = spec.get("holderIdentity") or ""
    renewed = spec.get("renewTime") or spec.get("acquireTime")
    duration = float(spec.get("leaseDurationSeconds") or 15)
    if not holder or not renewed:
        return Check("controller", "fail", f"Lease {namespace}/{name} is not held ({pods})", fix)
    age = (install.now - parse_time(str(renewed))).total_seconds()
    if age > duration:
        return Check(
            "controller",
            "fail",
            f"Lease {namespace}/{name} held by {holder} but not renewed for {age:.0f}s "
            f"(lease {duration:.0f}s; {pods})",
            fix,
        )
    return Check(
        "controller",
        "ok",
        f"{holder} leads on Lease {namespace}/{name}, renewed {age:.0f}s ago ({pods})",
    )


def check_second_controller(install: Install) -> Check:
    running = running_nvidia_controllers(install.nvidia_controller_pods)
    if not running:
        return Check("second controller", "ok", "NVIDIA's controller is not running")
    writers = [pod for pod in running if not shares_lease(pod, install.lease_ref)]
    # Electing on our Lease it waits while ours leads: not two writers, but not a clean swap.
    shared = not writers
    pod = writers[0] if writers else running[0]
    namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
    lease_ns, lease_name = install.lease_ref
    what = (
        f"it elects on our Lease {lease_ns}/{lease_name}, so one writes at a time"
        if shared
        else "while it runs, ours stands by (writes nothing) and NVIDIA's manages the domains"
    )
    return Check(
        "second controller",
        "warn" if shared else "fail",
        f"NVIDIA's controller runs (pod {namespace}/{name}, {len(running)} in all): {what}",
        f"kubectl -n {namespace} scale deployment {nvidia_deployment_of(pod)} --replicas=0, and "
        "controller.replicas=0 in NVIDIA's Helm values",
    )


def check_daemon_image(install: Install) -> Check:
    found = plugin_daemonset(install)
    if found is None:
        return Check("daemon image", "warn", "no kubelet plugin to compare with")
    ds, plugin_image = found
    images = {install.daemon_image} if install.daemon_image else set()
    for daemonset in install.daemon_daemonsets:
        template = (daemonset.get("spec") or {}).get("template") or {}
        for container in (template.get("spec") or {}).get("containers") or []:
            if container.get("name") == c.DAEMON_CONTAINER and container.get("image"):
                images.add(str(container["image"]))
    drift = sorted(images - {plugin_image})
    if drift:
        return Check(
            "daemon image",
            "fail",
            f"IMEX daemons run {', '.join(drift)}, but NVIDIA's kubelet plugin (DaemonSet "
            f"{ds['metadata']['namespace']}/{ds['metadata']['name']}) {plugin_image}: they must "
            "be one driver release",
            f"set the controller's IMAGE_NAME to {plugin_image} (Helm: image.repository and "
            "image.tag)",
        )
    if not images:
        return Check(
            "daemon image",
            "warn",
            f"unknown (no pod of ours, no domain yet); plugin {plugin_image}",
        )
    return Check("daemon image", "ok", f"{plugin_image}, as NVIDIA's kubelet plugin")


def check_daemon_rbac(install: Install) -> Check:
    sa = f"{install.driver_namespace}/{c.DAEMON_SERVICE_ACCOUNT}"
    if install.daemon_service_account is None:
        return Check(
            "daemon RBAC",
            "fail",
            f"ServiceAccount {sa} is missing: no IMEX daemon pod can be created",
            "install NVIDIA's chart in that namespace (it creates the ServiceAccount and its "
            "ClusterRole), or point the controller's NAMESPACE at NVIDIA's",
        )
    denied = list(install.daemon_denied)
    if denied:
        what = (
            f"may do nothing the IMEX daemon does (e.g. {denied[0]})"
            if len(denied) == len(DAEMON_PERMISSIONS)
            else f"may not {', '.join(denied)}"
        )
        return Check(
            "daemon RBAC",
            "fail",
            f"ServiceAccount {sa} {what}",
            "bind it to a ClusterRole with the IMEX daemon's rules: NVIDIA's chart binds it to "
            "compute-domain-daemon-role in its own namespaces; elsewhere apply our "
            "manifests/rbac (ClusterRole and ClusterRoleBinding computedomain-daemon)",
        )
    return Check("daemon RBAC", "ok", f"ServiceAccount {sa} has what the IMEX daemon needs")


def check_fabric(install: Install) -> Check:
    without = [
        n["metadata"]["name"]
        for n in install.nodes
        if (n["metadata"].get("labels") or {}).get(c.GPU_PRESENT_NODE_LABEL) == "true"
        and c.GPU_CLIQUE_NODE_LABEL not in (n["metadata"].get("labels") or {})
    ]
    if without:
        return Check(
            "fabric",
            "warn",
            f"{len(without)} GPU node(s) without {c.GPU_CLIQUE_NODE_LABEL}: {_names(without)} "
            "(no NVLink fabric, its manager not ready, or what sets the label not running "
            "there): they join no new multi-node domain",
            "on GB200/GB300: check nvidia-fabricmanager on them, and what sets the label: GPU "
            "Feature Discovery, or since v0.5 NVIDIA's kubelet plugin with "
            "GPU_CLIQUE_LABEL_ENABLED, which removes it while it restarts",
        )
    return Check("fabric", "ok", f"every GPU node has {c.GPU_CLIQUE_NODE_LABEL}")


def diagnose(install: Install) -> list[Check]:
    return [
        check_crds(install),
        *check_dra(install),
        check_kubelet_plugin(install),
        check_controller(install),
        check_second_controller(install),
        check_daemon_image(install),
        check_daemon_rbac(install),
        check_fabric(install),
    ]


def render(checks: Sequence[Check]) -> str:
    width = max(len(check.name) for check in checks)
    lines = []
    for check in checks:
        lines.append(f"{check.state.upper():4}  {check.name:{width}}  {check.detail}")
        if check.state != "ok" and check.fix:
            lines.append(f"{'':4}  {'':{width}}  fix: {check.fix}")
    failed = sum(check.state == "fail" for check in checks)
    warned = sum(check.state == "warn" for check in checks)
    lines.append(f"{failed} failed, {warned} warning(s), {len(checks) - failed - warned} ok")
    return "\n".join(lines)
