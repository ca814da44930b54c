"""NVIDIA's kubelet plugin, read from its DaemonSet: the driver image it runs (the image of new
IMEX daemons, unless IMAGE_NAME names one, which then may drift from it) and the namespace it
runs in, which must be our driver namespace (pure: the monitor in ``coexistence.py``, the
children and ``kubectl cdom doctor`` read it). ``trim_plugin_daemonset`` keeps of a DaemonSet
exactly what these functions read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from computedomain.api import constants as c
from computedomain.runtime import objects


def trim_plugin_daemonset(ds: dict[str, Any]) -> dict[str, Any]:
    """What we read of one of NVIDIA's DaemonSets: identity, selector, container images."""
    meta = objects.meta(ds)
    spec = ds.get("spec") or {}
    containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            key: meta[key] for key in ("name", "namespace", "uid", "resourceVersion") if key in meta
        },
        "spec": {
            "selector": spec.get("selector") or {},
            "template": {
                "spec": {
                    "containers": [
                        {"name": item.get("name"), "image": item.get("image")}
                        for item in containers
                    ]
                }
            },
        },
    }


def kubelet_plugin_image(ds: Mapping[str, Any]) -> str | None:
    """The driver image one of NVIDIA's DaemonSets runs if it is its kubelet plugin (its pods
    selected by `<name>-component: kubelet-plugin`, or GPU Operator's
    `app: nvidia-dra-driver-kubelet-plugin`); None for any other DaemonSet."""
    spec = ds.get("spec") or {}
    match = ((spec.get("selector") or {}).get("matchLabels")) or {}
    if not any(
        (key.endswith("-component") and value == c.NVIDIA_KUBELET_PLUGIN_COMPONENT)
        or (key == "app" and value == c.GPU_OPERATOR_KUBELET_PLUGIN_APP)
        for key, value in match.items()
    ):
        return None
    containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
    images = [item.get("image") for item in containers if item.get("image")]
    return str(images[0]) if images else None


def kubelet_plugins(
    daemonsets: Iterable[Mapping[str, Any]],
) -> list[tuple[Mapping[str, Any], str]]:
    """NVIDIA's kubelet plugin DaemonSets among ``daemonsets`` with the image each runs, by
    namespace and name."""
    found = [(ds, image) for ds in daemonsets if (image := kubelet_plugin_image(ds)) is not None]
    return sorted(found, key=lambda item: objects.object_key(item[0]))


def daemon_image(explicit: str, daemonsets: Iterable[Mapping[str, Any]], namespace: str) -> str:
    """The image of new IMEX daemons: IMAGE_NAME when given; else the image NVIDIA's kubelet
    plugin runs in the driver namespace (NVIDIA ships one driver image for both, and the two must
    be the same release); else, with no plugin found, NVIDIA_DRIVER_IMAGE."""
    if explicit:
        return explicit
    for ds, image in kubelet_plugins(daemonsets):
        if objects.namespace(ds) == namespace:
            return image
    return c.NVIDIA_DRIVER_IMAGE


def driver_namespace_problem(
    plugins: Sequence[tuple[Mapping[str, Any], str]], driver_namespace: str
) -> str:
    """Why this controller must not write while NVIDIA's kubelet plugin (``plugins``, from
    ``kubelet_plugins``) runs, but not in its driver namespace; empty when the plugin runs
    there, or nowhere.

    The plugin finds IMEX daemons and cliques in its own namespace only: daemons created
    elsewhere never make a workload ready, and NVIDIA's install manages ComputeDomains from
    there (a README install in a namespace of its own, beside NVIDIA's chart, did exactly that).
    """
    if not plugins or any(objects.namespace(ds) == driver_namespace for ds, _ in plugins):
        return ""
    namespaces = sorted({objects.namespace(ds) or "" for ds, _ in plugins})
    first = plugins[0][0]
    there = namespaces[0]
    return (
        f"NVIDIA's kubelet plugin runs in namespace {', '.join(namespaces)} (DaemonSet "
        f"{objects.object_key(first)}), not in this controller's driver namespace "
        f"{driver_namespace}: it finds IMEX daemons and cliques in its own namespace only, so "
        "this one stands by and writes nothing to ComputeDomains. Install it for that "
        f"namespace: Helm --set driverNamespace={there}, or NAMESPACE={there} "
        "(kustomize: manifests/nvidia)"
    )


def image_drift_message(ds: Mapping[str, Any], plugin_image: str, daemon_image: str) -> str:
    meta = objects.meta(ds)
    return (
        f"NVIDIA's kubelet plugin (DaemonSet {meta.get('namespace')}/{meta.get('name')}) runs "
        f"{plugin_image}, but the IMEX daemons of new ComputeDomains get {daemon_image} "
        "(IMAGE_NAME): the two must be the same driver release. Leave IMAGE_NAME unset (Helm: "
        "image.tag empty) and new daemons get the plugin's image, or set it to "
        f"{plugin_image}"
    )
