"""``kubectl cdom doctor``: the install checked end to end, one line per check with the fix.

Pure: ``Install`` holds what was read (main.py lists it, one request per kind); ``diagnose``
turns it into ``Check`` lines in the order an SRE fixes things: the API (CRDs, DRA, DeviceClasses),
NVIDIA's kubelet plugin, our controller, a second controller, the daemons' image and permissions,
then the nodes' fabric.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Literal

from computedomain.api import constants as c
from computedomain.api import rbac
from computedomain.domain import permissions
from computedomain.domain.crdschema import CD_CRD_NAME, CLIQUE_CRD_NAME, missing_status_fields
from computedomain.domain.kubeletplugin import kubelet_plugin_image
from computedomain.domain.nvidiacontroller import (
    is_own_pod,
    nvidia_deployment_of,
    running_nvidia_controllers,
    shares_lease,
)
from computedomain.runtime import access
from computedomain.runtime.clock import parse_time
from computedomain.runtime.identity import identity_pod
from computedomain.runtime.objects import condition_true

Obj = dict[str, Any]
State = Literal["ok", "warn", "fail"]
# Nodes named in one line at most; the rest are counted.
NAMES_SHOWN = 5
DEFAULT_LEASE_NAME = "nvidia-compute-domain-controller"
# Fixes that need our CRDs: from the plugin itself, so they work without a checkout.
CRD_INSTALL_COMMAND = c.CRD_INSTALL_COMMAND
CRD_UPGRADE_COMMAND = c.CRD_UPGRADE_COMMAND
# The command NVIDIA's controller container runs (contract §19; the GPU Operator's as well).
NVIDIA_CONTROLLER_COMMAND = "compute-domain-controller"
OWN_POD_SELECTOR = ",".join(f"{key}={value}" for key, value in c.OWN_POD_LABELS.items())
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
class Permission:
    """One verb a ServiceAccount must be allowed: namespace "" is every namespace (or a
    cluster-scoped resource); ``name`` one object (a rule's resourceNames)."""

    verb: str
    group: str
    resource: str  # may name a subresource: computedomains/status
    namespace: str = ""
    name: str = ""

    def __str__(self) -> str:
        where = f" in namespace {self.namespace}" if self.namespace else ""
        return f"{self.verb} {self.resource}{' ' + self.name if self.name else ''}{where}"


def controller_permissions(driver_namespace: str, lease_namespace: str) -> list[Permission]:
    """Every verb our controller uses (api/rbac.py: the one table our manifests and chart are
    checked against), where it uses it."""
    scopes = (
        (rbac.CLUSTER, ""),
        (rbac.DRIVER_NAMESPACE, driver_namespace),
        (rbac.LEASE_NAMESPACE, lease_namespace),
    )
    return [
        Permission(verb, rule.group, rule.resource, namespace, name)
        for rules, namespace in scopes
        for rule in rules
        for verb in rule.verbs
        for name in (rule.names or ("",))
    ]


def _grouped(permissions: Sequence[Permission]) -> str:
    """``list/watch customresourcedefinitions x, patch nodes``: the verbs of one object joined."""
    verbs: dict[str, list[str]] = {}
    for p in permissions:
        verbs.setdefault(str(replace(p, verb="")).strip(), []).append(p.verb)
    return ", ".join(f"{'/'.join(names)} {what}" for what, names in verbs.items())


def _ours(permission: access.Permission) -> Permission:
    p = permission
    resource = p.resource.plural + (f"/{p.subresource}" if p.subresource else "")
    return Permission(p.verb, p.resource.group, resource, p.namespace, p.name)


def _writes(driver_namespace: str) -> list[tuple[Permission, Permission, Permission]]:
    """(patch, update, get) of each write the controller makes by update where patch is not
    granted (domain/permissions.py: NVIDIA's RBAC grants update only)."""
    return [
        (_ours(w.permission("patch")), _ours(w.permission("update")), _ours(w.permission("get")))
        for w in permissions.writes([driver_namespace])
    ]


def _required(driver_namespace: str, lease_namespace: str) -> list[Permission]:
    """What the controller cannot work without, besides a way to make each write."""
    return [_ours(p) for p in permissions.required([driver_namespace], lease_namespace)]


def controller_reviews(driver_namespace: str, lease_namespace: str) -> list[Permission]:
    """What to ask for our controller's ServiceAccount: every verb of the table, and what tells
    a missing one it does without (a write by update; the same verb in the driver namespace
    where the table grants it in every namespace)."""
    asked = [
        *controller_permissions(driver_namespace, lease_namespace),
        *_required(driver_namespace, lease_namespace),
        *(p for write in _writes(driver_namespace) for p in write),
    ]
    return list(dict.fromkeys(asked))


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
    # Our controller's ServiceAccount (namespace, name), from its pod; None: no pod of ours.
    controller_account: tuple[str, str] | None = None
    # The answers for that ServiceAccount to each of controller_reviews().
    controller_allowed: Mapping[Permission, bool] = field(default_factory=dict)
    plugin_version: str = "unknown"
    # Deployments in any namespace whose pods run NVIDIA's controller command, ours excluded.
    nvidia_controller_deployments: Sequence[Obj] = ()


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


def service_account(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """(namespace, name) of the ServiceAccount a pod runs as; None for no pod."""
    meta = pod.get("metadata") or {}
    if not meta.get("namespace"):
        return None
    return str(meta["namespace"]), str(
        (pod.get("spec") or {}).get("serviceAccountName") or "default"
    )


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
        f"kubectl -n {running[0]['metadata']['namespace']} logs {running[0]['metadata']['name']}"
        if running
        else f"kubectl get pods -A -l {OWN_POD_SELECTOR}"
    ) + ": its log says why it does not lead"
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


def _running(pods: Sequence[Obj]) -> list[Obj]:
    return [
        p
        for p in pods
        if (p.get("status") or {}).get("phase") == "Running"
        and not (p.get("metadata") or {}).get("deletionTimestamp")
    ]


def check_lease_holder(install: Install) -> Check:
    """The Lease's holder is one of our running pods (its identity is ``<pod>-<uuid>``)."""
    namespace, name = install.lease_ref
    spec = (install.lease or {}).get("spec") or {}
    holder = str(spec.get("holderIdentity") or "")
    if not holder:
        return Check("lease holder", "warn", f"Lease {namespace}/{name} has no holder to check")
    ours = {p["metadata"]["name"]: p for p in _running(install.our_pods)}
    pod = identity_pod(holder)
    if pod in ours:
        where = ours[pod]["metadata"]["namespace"]
        return Check("lease holder", "ok", f"{holder} is our pod {where}/{pod} (Running)")
    nvidia = [
        p
        for p in running_nvidia_controllers(install.nvidia_controller_pods)
        if holder == p["metadata"]["name"] or holder.startswith(f"{p['metadata']['name']}_")
    ]
    if nvidia:
        theirs = nvidia[0]["metadata"]
        return Check(
            "lease holder",
            "fail",
            f"NVIDIA's controller (pod {theirs['namespace']}/{theirs['name']}) holds our Lease "
            f"{namespace}/{name}: it leads, ours waits and writes nothing",
            f"kubectl -n {theirs['namespace']} scale deployment "
            f"{nvidia_deployment_of(nvidia[0])} --replicas=0, and controller.replicas=0 in "
            "NVIDIA's Helm values",
        )
    shown = _names(list(ours)) or "none"
    renewed = spec.get("renewTime") or spec.get("acquireTime")
    duration = float(spec.get("leaseDurationSeconds") or 15)
    live = bool(renewed) and (install.now - parse_time(str(renewed))).total_seconds() <= duration
    if not live:
        return Check(
            "lease holder",
            "warn",
            f"Lease {namespace}/{name} was last held by {holder}, none of our running pods "
            f"({shown}): a pod gone without handing it back; it expires by itself",
        )
    return Check(
        "lease holder",
        "fail",
        f"Lease {namespace}/{name} is held, and renewed, by {holder}: none of our running pods "
        f"({shown}). Something else leads on it (another controller electing on this Lease, "
        "or one of ours run outside the cluster), so no pod of ours writes",
        f"kubectl -n {namespace} get lease {name} -o yaml (holderIdentity names the process); "
        "stop it, or give ours its own Lease (LEADER_ELECTION_LEASE_LOCK_NAME)",
    )


def _image_tag(image: str) -> str | None:
    """The tag of an image reference; None when it has none (a digest, or latest implied)."""
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    return last.split(":", 1)[1] if ":" in last else None


def check_version(install: Install) -> Check:
    """The plugin's version against the image our controller pods run."""
    mine = install.plugin_version
    images = sorted(
        {
            str(container.get("image"))
            for pod in install.our_pods
            for container in (pod.get("spec") or {}).get("containers") or []
            if container.get("image")
        }
    )
    if not images:
        return Check("version", "warn", f"plugin {mine}; no pod of ours, so no image to compare")
    detail = f"plugin {mine}; controller image {', '.join(images)}"
    differ = [image for image in images if (_image_tag(image) or "").removeprefix("v") != mine]
    if differ and mine != "unknown":
        return Check(
            "version",
            "warn",
            f"{detail}: the image's tag is not the plugin's version, so the checks may not be "
            "the ones this controller needs",
            f"install the plugin of the controller's release (kubectl krew upgrade cdom, or "
            f"pip install computedomain=={_image_tag(differ[0]) or mine})".replace("==v", "=="),
        )
    return Check("version", "ok", detail)


def check_controller_rbac(install: Install) -> Check:
    """Each verb of our RBAC table, reviewed for our controller pod's ServiceAccount."""
    if install.controller_account is None:
        return Check(
            "controller RBAC",
            "warn",
            "no pod of ours: its ServiceAccount, and so what it may do, is unknown",
        )
    account_ns, account = install.controller_account
    sa = f"{account_ns}/{account}"
    answers = install.controller_allowed

    def allowed(permission: Permission) -> bool:
        return answers.get(permission, True)

    driver, lease_ns = install.driver_namespace, install.lease_ref[0]
    table = controller_permissions(driver, lease_ns)
    denied = [p for p in table if not allowed(p)]
    if not denied:
        return Check(
            "controller RBAC",
            "ok",
            f"controller ServiceAccount {sa} may do each of the {len(table)} things ours does",
        )
    writes = _writes(driver)
    by_update = {patch for patch, update, get in writes if allowed(update) and allowed(get)}
    # What it does without (domain/permissions.py): each informer that is a nicety, and Events.
    niceties = {
        _ours(p): lost for needed, lost in permissions.optional_permissions(driver) for p in needed
    }
    niceties[_ours(permissions.EVENTS_CREATE)] = "no Event is recorded"
    # A nicety granted nowhere is lost; where it is one of the required too (list/watch of pods
    # and DaemonSets in every namespace covers the driver namespace's), it may be missing.
    required = {
        (p.verb, p.group, p.resource, p.name) for p in _required(driver, lease_ns) if not allowed(p)
    }
    missing = [
        p
        for p in denied
        if p not in by_update
        and (p not in niceties or (p.verb, p.group, p.resource, p.name) in required)
    ]
    lost = [p for p in denied if p not in by_update and p not in missing]
    updated = [p.resource for p in denied if p in by_update]
    note = f"; patch not granted on {', '.join(updated)}: written by update" if updated else ""
    which = "it" if len(missing or lost) == 1 else "them"
    fix = (
        f"grant {which} to {sa}: our Helm chart's RBAC has every verb the controller uses (helm "
        f"upgrade --reuse-values of its release puts it back); other RBAC: add {which} to the "
        "roles bound to it (kubectl get clusterrolebindings,rolebindings -A -o wide | grep "
        f"{account})"
    )
    if missing:
        return Check(
            "controller RBAC",
            "fail",
            f"controller ServiceAccount {sa} cannot {_grouped(missing)}{note}",
            fix,
        )
    if lost:
        what = sorted({niceties[p] for p in lost})
        return Check(
            "controller RBAC",
            "warn",
            f"controller ServiceAccount {sa} cannot {_grouped(lost)}: {'; '.join(what)}{note}",
            fix,
        )
    return Check(
        "controller RBAC", "ok", f"controller ServiceAccount {sa} may do what ours needs{note}"
    )


def runs_nvidia_controller(deployment: Mapping[str, Any]) -> bool:
    """A Deployment whose pods run NVIDIA's controller command, whatever their labels; ours
    (the same command is one of our console scripts) excluded by our pod labels."""
    template = (deployment.get("spec") or {}).get("template") or {}
    if is_own_pod((template.get("metadata") or {}).get("labels") or {}):
        return False
    for container in (template.get("spec") or {}).get("containers") or []:
        first = [*(container.get("command") or []), *(container.get("args") or [])][:1]
        if first and str(first[0]).rsplit("/", 1)[-1] == NVIDIA_CONTROLLER_COMMAND:
            return True
    return False


def check_second_controller(install: Install) -> Check:
    running = running_nvidia_controllers(install.nvidia_controller_pods)
    if not running:
        return _unseen_nvidia_controller(install) or Check(
            "second controller",
            "ok",
            "NVIDIA's controller runs in no namespace (its pods' labels, and Deployments "
            f"running {NVIDIA_CONTROLLER_COMMAND})",
        )
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


def _unseen_nvidia_controller(install: Install) -> Check | None:
    """A Deployment running NVIDIA's controller whose pods carry none of the labels ours
    looks for: ours does not stand by for it."""
    seen = {
        (p["metadata"]["namespace"], nvidia_deployment_of(p))
        for p in install.nvidia_controller_pods
    }
    for deployment in install.nvidia_controller_deployments:
        meta = deployment["metadata"]
        pods = int((deployment.get("status") or {}).get("replicas") or 0)
        if not pods or (meta["namespace"], meta["name"]) in seen:
            continue
        return Check(
            "second controller",
            "fail",
            f"Deployment {meta['namespace']}/{meta['name']} runs NVIDIA's controller "
            f"({NVIDIA_CONTROLLER_COMMAND}, {pods} pod(s)) with none of the pod labels ours "
            "looks for: ours does not see it and does not stand by, so two controllers write",
            f"kubectl -n {meta['namespace']} scale deployment {meta['name']} --replicas=0; to "
            "keep it, add its pods' <name>-component=controller label to our controller's "
            "NVIDIA_CONTROLLER_SELECTORS (Helm: nameOverride, as NVIDIA's release)",
        )
    return None


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
            "compute-domain-daemon-role in its own namespaces; elsewhere our Helm chart with "
            "daemonServiceAccount.create=true creates the ServiceAccount and binds it "
            "(ClusterRole and ClusterRoleBinding computedomain-daemon)",
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
        check_lease_holder(install),
        check_version(install),
        check_controller_rbac(install),
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
