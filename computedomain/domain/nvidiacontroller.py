"""Another ComputeDomain controller beside ours, read from what the informers keep (pure: the
monitor in ``coexistence.py``, ``kubectl cdom describe`` and ``doctor`` read it).

NVIDIA's controller pods are found by the selector labels of NVIDIA's chart (contract §19) or
GPU Operator's; a pod whose leader election names the Lease ours leads on cannot write while
ours leads (``nvidia_lease``, read from its command line and environment as NVIDIA's binary
reads them). Whatever the other controller's labels, IMEX daemon DaemonSets of live
ComputeDomains outside our namespaces are its work too. ``trim_pod_identity`` keeps of a pod
exactly what these functions read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from computedomain.api import constants as c
from computedomain.domain.selectors import matches, parse_selector
from computedomain.runtime import objects


def is_own_pod(labels: Mapping[str, str]) -> bool:
    return any(labels.get(key) == value for key, value in c.OWN_POD_LABELS.items())


def running_nvidia_controllers(
    pods: Iterable[Mapping[str, Any]],
    selectors: Sequence[str] = c.NVIDIA_CONTROLLER_SELECTORS,
) -> list[Mapping[str, Any]]:
    """NVIDIA's controller pods that are running now (matching a selector, not ours, not
    terminating), once each, by name."""
    parsed = [parse_selector(selector) for selector in selectors]
    found: dict[str, Mapping[str, Any]] = {}
    for pod in pods:
        meta = objects.meta(pod)
        labels = meta.get("labels") or {}
        if not any(matches(selector, labels) for selector in parsed):
            continue
        if is_own_pod(labels) or meta.get("deletionTimestamp"):
            continue
        if (pod.get("status") or {}).get("phase") != "Running":
            continue
        found[meta.get("uid") or objects.object_key(pod)] = pod
    return sorted(found.values(), key=lambda p: (objects.namespace(p) or "", objects.name(p)))


def nvidia_deployment_of(pod: Mapping[str, Any]) -> str:
    """The Deployment that runs one of NVIDIA's controller pods: its ReplicaSet's name without
    the pod-template hash; else from the chart's selector label ``<name>-component``, whose
    Deployment is ``<name>-controller`` (contract §19)."""
    meta = objects.meta(pod)
    for owner in meta.get("ownerReferences") or []:
        if owner.get("kind") == "ReplicaSet" and "-" in str(owner.get("name", "")):
            return str(owner["name"]).rsplit("-", 1)[0]
    labels = meta.get("labels") or {}
    names = [
        key.removesuffix("-component")
        for key, value in labels.items()
        if key.endswith("-component") and "/" not in key and value == c.NVIDIA_CONTROLLER_COMPONENT
    ]
    # v0.4.0 put its fixed legacy label beside the selector label: the latter names the chart.
    chosen = [n for n in names if f"{n}-component" != c.NVIDIA_COMPONENT_LABEL] or names
    return f"{chosen[0]}-controller" if chosen else c.NVIDIA_CONTROLLER_DEPLOYMENT


# NVIDIA's controller's leader-election settings (environment; flags of the same name win) and
# their defaults in its binary: off, Lease default/nvidia-compute-domain-controller.
NVIDIA_LE_ENABLED = "LEADER_ELECTION_ENABLED"
NVIDIA_LE_NAME = "LEADER_ELECTION_LEASE_LOCK_NAME"
NVIDIA_LE_NAMESPACE = "LEADER_ELECTION_LEASE_LOCK_NAMESPACE"
NVIDIA_LE_SETTINGS = {
    NVIDIA_LE_ENABLED: "--leader-election-enabled",
    NVIDIA_LE_NAME: "--leader-election-lease-lock-name",
    NVIDIA_LE_NAMESPACE: "--leader-election-lease-lock-namespace",
}
NVIDIA_LE_DEFAULTS = {
    NVIDIA_LE_ENABLED: "false",
    NVIDIA_LE_NAME: "nvidia-compute-domain-controller",
    NVIDIA_LE_NAMESPACE: "default",
}
_TRUE = {"1", "t", "T", "true", "TRUE", "True"}


def nvidia_lease(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """The Lease (namespace, name) one of NVIDIA's controller pods must hold before it writes,
    or None: its leader election is off (its chart's default), it writes as soon as it runs."""
    containers = (pod.get("spec") or {}).get("containers") or []
    settings = dict(NVIDIA_LE_DEFAULTS)
    if containers:
        container = containers[0]
        for item in container.get("env") or []:
            if item.get("name") in settings and "valueFrom" not in item:
                settings[item["name"]] = str(item.get("value") or "")
        argv = [*(container.get("command") or [])[1:], *(container.get("args") or [])]
        for env, flag in NVIDIA_LE_SETTINGS.items():
            for index, arg in enumerate(argv):
                if arg == flag and env == NVIDIA_LE_ENABLED:
                    settings[env] = "true"
                elif arg.startswith(f"{flag}="):
                    settings[env] = arg.split("=", 1)[1]
                elif arg == flag and index + 1 < len(argv):
                    settings[env] = argv[index + 1]
    if settings[NVIDIA_LE_ENABLED] not in _TRUE:
        return None
    return settings[NVIDIA_LE_NAMESPACE], settings[NVIDIA_LE_NAME]


def shares_lease(pod: Mapping[str, Any], own_lease: tuple[str, str] | None) -> bool:
    """One of NVIDIA's controller pods elects its leader on the Lease ours leads on: it waits
    while ours leads, so it is no second writer."""
    return own_lease is not None and nvidia_lease(pod) == own_lease


def concurrent_controller_message(
    pod: Mapping[str, Any], shared_lease: tuple[str, str] | None = None
) -> str:
    """What an SRE reads about one of NVIDIA's controller pods running beside ours: ours stands
    by, or (``shared_lease``: both elect on that Lease) the Lease lets one write at a time."""
    meta = objects.meta(pod)
    namespace = meta.get("namespace")
    if shared_lease is None:
        what = (
            "so this one stands by: it writes nothing to ComputeDomains, their children, cliques "
            "or node labels until no such pod runs, and NVIDIA's controller manages them meanwhile"
        )
    else:
        what = (
            f"and elects its leader on the same Lease {shared_lease[0]}/{shared_lease[1]}, so "
            "only the holder of that Lease writes (this one keeps working while it leads)"
        )
    return (
        f"NVIDIA's ComputeDomain controller runs beside this one (pod {namespace}/"
        f"{meta.get('name')}), {what}. Scale it to 0 (kubectl -n {namespace} scale deployment "
        f"{nvidia_deployment_of(pod)} --replicas=0) and keep it there in NVIDIA's Helm values "
        "(controller.replicas=0)"
    )


def trim_pod_identity(pod: dict[str, Any]) -> dict[str, Any]:
    """What we read of a controller pod: identity, labels, owner, phase."""
    meta = objects.meta(pod)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            key: meta[key]
            for key in (
                "name",
                "namespace",
                "uid",
                "resourceVersion",
                "labels",
                "ownerReferences",
                "deletionTimestamp",
            )
            if key in meta
        },
        # Its leader-election settings: whether it can write while ours leads (nvidia_lease).
        "spec": {
            "containers": [
                {
                    "command": container.get("command") or [],
                    "args": container.get("args") or [],
                    "env": [
                        item
                        for item in container.get("env") or []
                        if item.get("name") in NVIDIA_LE_SETTINGS
                    ],
                }
                for container in ((pod.get("spec") or {}).get("containers") or [])[:1]
            ]
        },
        "status": {"phase": (pod.get("status") or {}).get("phase")},
    }


def foreign_daemonsets_problem(
    daemonsets: Iterable[Mapping[str, Any]], namespaces: Sequence[str]
) -> str:
    """Why this controller must not write while IMEX daemon DaemonSets of live ComputeDomains
    exist outside ``namespaces`` (driver and additional): another controller made them, and
    manages those ComputeDomains from there. Empty when there are none."""
    foreign = sorted(
        (ds for ds in daemonsets if objects.namespace(ds) not in namespaces),
        key=objects.object_key,
    )
    if not foreign:
        return ""
    there = objects.namespace(foreign[0]) or ""
    return (
        f"IMEX daemon DaemonSet {objects.object_key(foreign[0])} of a live ComputeDomain "
        "is outside this controller's namespaces "
        f"({', '.join(namespaces)}): another ComputeDomain controller manages them from {there} "
        "(NVIDIA's, or a second install of this one), so this one stands by and writes nothing "
        f"to ComputeDomains. Remove the other controller, or install this one with driver "
        f"namespace {there}; if {there} is a driver namespace left behind, name it in "
        "ADDITIONAL_NAMESPACES"
    )
