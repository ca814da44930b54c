"""`kubectl cdom doctor`: each check of the install, healthy and broken, with its fix."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from computedomain.api import constants as c
from computedomain.domain.coexistence import (
    CD_CRD_NAME,
    CLIQUE_CRD_NAME,
    CRD_UPGRADE_COMMAND,
    OUR_STATUS_FIELDS,
    UPSTREAM_STATUS_FIELDS,
)
from computedomain.kubectl.doctor import Check, Install, diagnose, pod_env, render
from computedomain.runtime.clock import format_time

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
DRIVER_NS = "nvidia-dra-driver-gpu"
PLUGIN_IMAGE = c.NVIDIA_DRIVER_IMAGE
LEASE = ("computedomain-system", "computedomain-controller")


ALL_STATUS_FIELDS = (*UPSTREAM_STATUS_FIELDS, *OUR_STATUS_FIELDS)


def crd(status_fields: tuple[str, ...] = ALL_STATUS_FIELDS) -> dict[str, Any]:
    properties = {name: {"type": "object"} for name in status_fields}
    return {
        "spec": {
            "versions": [
                {
                    "name": c.VERSION,
                    "served": True,
                    "schema": {
                        "openAPIV3Schema": {"properties": {"status": {"properties": properties}}}
                    },
                }
            ]
        }
    }


def node(name: str, *, clique: str | None = "A.0", ready: bool = True) -> dict[str, Any]:
    labels = {c.GPU_PRESENT_NODE_LABEL: "true"}
    if clique:
        labels[c.GPU_CLIQUE_NODE_LABEL] = clique
    return {
        "metadata": {"name": name, "labels": labels},
        "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def plugin_daemonset() -> dict[str, Any]:
    return {
        "metadata": {"name": "dra-driver-nvidia-gpu-kubelet-plugin", "namespace": DRIVER_NS},
        "spec": {
            "selector": {"matchLabels": {"dra-driver-nvidia-gpu-component": "kubelet-plugin"}},
            "template": {
                "spec": {"containers": [{"name": "compute-domains", "image": PLUGIN_IMAGE}]}
            },
        },
    }


def ready_pod(name: str, node_name: str, namespace: str = DRIVER_NS, **meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace, **meta},
        "spec": {"nodeName": node_name, "containers": [{"name": "x", "env": []}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


def healthy() -> Install:
    nodes = [node("n1"), node("n2")]
    return Install(
        now=NOW,
        driver_namespace=DRIVER_NS,
        lease_ref=LEASE,
        crds={CD_CRD_NAME: crd(), CLIQUE_CRD_NAME: crd()},
        device_classes=[c.DAEMON_DEVICE_CLASS, c.CHANNEL_DEVICE_CLASS, "gpu.nvidia.com"],
        nvidia_daemonsets=[plugin_daemonset()],
        plugin_pods=[
            ready_pod(f"plugin-{n['metadata']['name']}", n["metadata"]["name"]) for n in nodes
        ],
        nodes=nodes,
        our_pods=[ready_pod("computedomain-controller-0", "cpu-1", LEASE[0])],
        lease={
            "spec": {
                "holderIdentity": "computedomain-controller-0",
                "renewTime": format_time(NOW - timedelta(seconds=3)),
                "leaseDurationSeconds": 15,
            }
        },
        daemon_image=PLUGIN_IMAGE,
        daemon_service_account={"metadata": {"name": c.DAEMON_SERVICE_ACCOUNT}},
    )


def by_name(install: Install) -> dict[str, Check]:
    return {check.name: check for check in diagnose(install)}


def test_a_healthy_install_passes_every_check() -> None:
    checks = diagnose(healthy())
    assert [check.name for check in checks] == [
        "CRDs",
        "DRA API",
        "DeviceClasses",
        "kubelet plugin",
        "controller",
        "second controller",
        "daemon image",
        "daemon RBAC",
        "fabric",
    ]
    assert [check.state for check in checks] == ["ok"] * 9, render(checks)
    text = render(checks)
    assert text.splitlines()[-1] == "0 failed, 0 warning(s), 9 ok"
    assert "fix:" not in text


def broken(name: str, install: Install) -> Check:
    check = by_name(install)[name]
    others = [c for c in diagnose(install) if c.name != name and c.state == "fail"]
    assert not others, others
    return check


def test_an_outdated_crd_is_named_with_the_upgrade_command() -> None:
    install = healthy()
    install.crds = {CD_CRD_NAME: crd(("status", "nodes")), CLIQUE_CRD_NAME: crd()}
    check = broken("CRDs", install)
    assert check.state == "fail"
    assert "lacks status fields conditions, observedGeneration" in check.detail
    assert check.fix == CRD_UPGRADE_COMMAND


def test_a_missing_crd_is_named() -> None:
    install = healthy()
    install.crds = {CD_CRD_NAME: crd(), CLIQUE_CRD_NAME: None}
    check = broken("CRDs", install)
    assert check.detail == f"not installed: {CLIQUE_CRD_NAME}"


def test_dra_not_served_and_missing_device_classes() -> None:
    install = healthy()
    install.dra_served = False
    checks = by_name(install)
    assert checks["DRA API"].state == "fail"
    assert "1.34" in checks["DRA API"].fix
    assert "DeviceClasses" not in checks

    install = healthy()
    install.device_classes = [c.CHANNEL_DEVICE_CLASS]
    check = broken("DeviceClasses", install)
    assert check.detail.startswith(f"missing {c.DAEMON_DEVICE_CLASS}")


def test_no_kubelet_plugin_is_named() -> None:
    install = healthy()
    install.nvidia_daemonsets = []
    install.plugin_pods = []
    checks = by_name(install)
    assert checks["kubelet plugin"].state == "fail"
    assert "kubelet plugin DaemonSet was not found" in checks["kubelet plugin"].detail
    assert checks["daemon image"].state == "warn"


def test_a_clique_node_without_a_ready_plugin_pod_is_named() -> None:
    install = healthy()
    install.nodes = [
        *install.nodes,
        node("n3"),
        node("cpu-1", clique=None),
        node("n4", ready=False),
    ]
    check = broken("kubelet plugin", install)
    assert "no Ready pod on 1 of 3 Ready nodes with nvidia.com/gpu.clique: n3" in check.detail
    assert check.fix.startswith(f"kubectl -n {DRIVER_NS} describe daemonset ")


def test_a_controller_that_does_not_lead_is_named() -> None:
    install = healthy()
    install.lease = None
    assert broken("controller", install).detail.startswith(
        f"no Lease {LEASE[0]}/{LEASE[1]} (1 pod(s) of ours running)"
    )

    install = healthy()
    assert install.lease is not None
    install.lease["spec"]["renewTime"] = format_time(NOW - timedelta(seconds=40))
    check = broken("controller", install)
    assert "not renewed for 40s (lease 15s" in check.detail


def nvidia_controller(env: list[dict[str, str]] | None = None) -> dict[str, Any]:
    pod = ready_pod(
        "dra-driver-nvidia-gpu-controller-5d8f-abcde",
        "cpu-2",
        labels={"dra-driver-nvidia-gpu-component": "controller"},
        ownerReferences=[{"kind": "ReplicaSet", "name": "dra-driver-nvidia-gpu-controller-5d8f"}],
    )
    pod["spec"]["containers"][0]["env"] = env or []
    return pod


def test_a_second_controller_fails_or_warns_when_it_waits_for_our_lease() -> None:
    install = healthy()
    install.nvidia_controller_pods = [nvidia_controller()]
    check = broken("second controller", install)
    assert check.state == "fail"
    assert "while it runs, ours stands by (writes nothing)" in check.detail
    assert check.fix.startswith(
        f"kubectl -n {DRIVER_NS} scale deployment dra-driver-nvidia-gpu-controller --replicas=0"
    )

    install.nvidia_controller_pods = [
        nvidia_controller(
            [
                {"name": "LEADER_ELECTION_ENABLED", "value": "true"},
                {"name": "LEADER_ELECTION_LEASE_LOCK_NAMESPACE", "value": LEASE[0]},
                {"name": "LEADER_ELECTION_LEASE_LOCK_NAME", "value": LEASE[1]},
            ]
        )
    ]
    check = by_name(install)["second controller"]
    assert check.state == "warn"
    assert "elects on our Lease" in check.detail


def test_a_daemon_image_other_than_the_plugins_is_named() -> None:
    install = healthy()
    install.daemon_image = ""
    old = "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v0.3.0"
    install.daemon_daemonsets = [
        {
            "spec": {
                "template": {"spec": {"containers": [{"name": c.DAEMON_CONTAINER, "image": old}]}}
            }
        }
    ]
    check = broken("daemon image", install)
    assert check.detail.startswith(f"IMEX daemons run {old}, but NVIDIA's kubelet plugin")
    assert check.fix.startswith(f"set the controller's IMAGE_NAME to {PLUGIN_IMAGE}")


def test_the_daemon_service_account_and_its_permissions() -> None:
    install = healthy()
    install.daemon_service_account = None
    check = broken("daemon RBAC", install)
    assert f"ServiceAccount {DRIVER_NS}/{c.DAEMON_SERVICE_ACCOUNT} is missing" in check.detail

    install = healthy()
    install.daemon_denied = ["create computedomaincliques"]
    check = broken("daemon RBAC", install)
    assert check.detail.endswith("may not create computedomaincliques")


def test_gpu_nodes_without_a_clique_label_warn() -> None:
    install = healthy()
    install.nodes = [*install.nodes, node("p5-1", clique=None)]
    check = by_name(install)["fabric"]
    assert check.state == "warn"
    assert "1 GPU node(s) without nvidia.com/gpu.clique: p5-1" in check.detail
    # Since v0.5 NVIDIA's kubelet plugin may own the label and removes it while it restarts.
    assert "GPU_CLIQUE_LABEL_ENABLED" in check.fix
    assert "0 failed, 1 warning(s), 8 ok" in render(diagnose(install))


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ([{"name": "NAMESPACE", "value": "x"}], "x"),
        (
            [{"name": "NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}],
            "ns",
        ),
        ([{"name": "NAMESPACE", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}], None),
        ([], None),
    ],
)
def test_pod_env(env: list[dict[str, Any]], expected: str | None) -> None:
    pod = {"metadata": {"namespace": "ns"}, "spec": {"containers": [{"env": copy.deepcopy(env)}]}}
    assert pod_env(pod, "NAMESPACE") == expected
