"""`kubectl cdom doctor`: each check of the install, healthy and broken, with its fix."""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from computedomain.api import constants as c
from computedomain.api import rbac
from computedomain.domain.crdschema import (
    CD_CRD_NAME,
    CLIQUE_CRD_NAME,
    OUR_STATUS_FIELDS,
    UPSTREAM_STATUS_FIELDS,
)
from computedomain.kubectl.doctor import (
    CRD_UPGRADE_COMMAND,
    Check,
    Install,
    Permission,
    controller_permissions,
    controller_reviews,
    diagnose,
    pod_env,
    render,
    service_account,
)
from computedomain.runtime.clock import format_time
from computedomain.runtime.identity import new_identity

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
DRIVER_NS = "nvidia-dra-driver-gpu"
PLUGIN_IMAGE = c.NVIDIA_DRIVER_IMAGE
LEASE = ("computedomain-system", "computedomain-controller")
OUR_POD = "computedomain-controller-7c9d-x2k4p"
ACCOUNT = (LEASE[0], "computedomain-controller")
VERSION = "0.1.0"
OUR_IMAGE = f"ghcr.io/example/computedomain-controller:v{VERSION}"


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
        our_pods=[our_pod()],
        lease={
            "spec": {
                "holderIdentity": new_identity(OUR_POD),
                "renewTime": format_time(NOW - timedelta(seconds=3)),
                "leaseDurationSeconds": 15,
            }
        },
        daemon_image=PLUGIN_IMAGE,
        daemon_service_account={"metadata": {"name": c.DAEMON_SERVICE_ACCOUNT}},
        controller_account=ACCOUNT,
        controller_allowed=our_rbac(),
        plugin_version=VERSION,
    )


def our_rbac() -> dict[Permission, bool]:
    """The answers under our own RBAC: the table's verbs (those in every namespace, in each),
    nothing else (no update, no get of ComputeDomains)."""
    table = set(controller_permissions(DRIVER_NS, LEASE[0]))
    return {
        p: p in table or replace(p, namespace="") in table
        for p in controller_reviews(DRIVER_NS, LEASE[0])
    }


def our_pod() -> dict[str, Any]:
    pod = ready_pod(OUR_POD, "cpu-1", LEASE[0], labels=dict(c.OWN_POD_LABELS))
    pod["spec"]["serviceAccountName"] = ACCOUNT[1]
    pod["spec"]["containers"][0]["image"] = OUR_IMAGE
    return pod


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
        "lease holder",
        "version",
        "controller RBAC",
        "second controller",
        "daemon image",
        "daemon RBAC",
        "fabric",
    ]
    assert [check.state for check in checks] == ["ok"] * 12, render(checks)
    text = render(checks)
    assert text.splitlines()[-1] == "0 failed, 0 warning(s), 12 ok"
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
    assert "0 failed, 1 warning(s), 11 ok" in render(diagnose(install))


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


# -- our controller: its RBAC, its Lease's holder, its version ----------------------------------


def test_every_verb_of_the_rbac_table_is_reviewed_where_the_controller_uses_it() -> None:
    table = controller_permissions(DRIVER_NS, LEASE[0])
    assert len(table) == sum(
        len(rule.verbs) * max(1, len(rule.names))
        for rules in (rbac.CLUSTER, rbac.DRIVER_NAMESPACE, rbac.LEASE_NAMESPACE)
        for rule in rules
    )
    assert Permission("patch", c.GROUP, "computedomains/status") in table
    assert Permission("create", "apps", "daemonsets", DRIVER_NS) in table
    assert Permission("update", "coordination.k8s.io", "leases", LEASE[0]) in table
    assert (
        Permission("list", "apiextensions.k8s.io", "customresourcedefinitions", "", CD_CRD_NAME)
        in table
    )
    assert set(table) <= set(controller_reviews(DRIVER_NS, LEASE[0]))


def denied(install: Install, *refused: Permission, granted: tuple[Permission, ...] = ()) -> Install:
    install.controller_allowed = {
        **install.controller_allowed,
        **dict.fromkeys(refused, False),
        **dict.fromkeys(granted, True),
    }
    return install


def test_a_verb_our_controller_uses_and_may_not_is_named_exactly() -> None:
    status = Permission("patch", c.GROUP, "computedomains/status")
    check = broken("controller RBAC", denied(healthy(), status))
    sa = f"{ACCOUNT[0]}/{ACCOUNT[1]}"
    assert check.state == "fail"
    assert check.detail == f"controller ServiceAccount {sa} cannot patch computedomains/status"
    assert "helm upgrade --reuse-values" in check.fix
    assert f"grep {ACCOUNT[1]}" in check.fix

    leases = Permission("update", "coordination.k8s.io", "leases", LEASE[0])
    create = Permission("create", "apps", "daemonsets", DRIVER_NS)
    check = broken("controller RBAC", denied(healthy(), leases, create))
    assert check.detail.endswith(
        f"cannot create daemonsets in namespace {DRIVER_NS}, update leases in namespace {LEASE[0]}"
    )


def test_under_nvidias_rbac_writes_by_update_and_lost_niceties_warn() -> None:
    """NVIDIA's controller RBAC: update, no patch, on the four writes; no Events, no CRDs."""
    patches = [
        Permission("patch", c.GROUP, "computedomains"),
        Permission("patch", c.GROUP, "computedomains/status"),
        Permission("patch", "", "nodes"),
        Permission("patch", "resource.k8s.io", "resourceclaimtemplates"),
    ]
    crds = [
        Permission(verb, "apiextensions.k8s.io", "customresourcedefinitions", "", name)
        for verb in ("list", "watch")
        for name in (CD_CRD_NAME, CLIQUE_CRD_NAME)
    ]
    events = Permission("create", "events.k8s.io", "events")
    updates = [replace(p, verb=verb) for p in patches for verb in ("update", "get")]
    # `get` is of the object: a status update reads the whole ComputeDomain.
    updates = [
        replace(p, resource=p.resource.split("/")[0]) if p.verb == "get" else p for p in updates
    ]
    nvidias = denied(healthy(), *patches, *crds, events, granted=tuple(updates))
    check = by_name(nvidias)["controller RBAC"]
    assert check.state == "warn", check
    assert (
        "cannot create events, list/watch customresourcedefinitions "
        f"{CD_CRD_NAME}, list/watch customresourcedefinitions {CLIQUE_CRD_NAME}: "
    ) in check.detail
    assert "no Event is recorded" in check.detail
    assert check.detail.endswith(
        "; patch not granted on computedomains, computedomains/status, "
        "resourceclaimtemplates, nodes: written by update"
    )

    # Neither patch nor update: that write cannot be made.
    check = broken("controller RBAC", denied(healthy(), patches[2]))
    assert check.detail.endswith("cannot patch nodes")


def test_pods_listed_in_the_driver_namespace_only_lose_the_search_for_nvidias() -> None:
    everywhere = Permission("list", "", "pods")
    check = by_name(denied(healthy(), everywhere))["controller RBAC"]
    assert check.state == "warn"
    assert "pods of NVIDIA's controller are not looked for" in check.detail

    # Not in the driver namespace either: the daemons' pods go unseen.
    there = Permission("list", "", "pods", DRIVER_NS)
    check = broken("controller RBAC", denied(healthy(), everywhere, there))
    assert check.detail.endswith("cannot list pods")


def test_no_pod_of_ours_leaves_its_rbac_and_version_unknown() -> None:
    install = healthy()
    install.our_pods = []
    install.controller_account = service_account({})
    checks = by_name(install)
    assert checks["controller RBAC"].state == "warn"
    assert checks["version"].detail == f"plugin {VERSION}; no pod of ours, so no image to compare"
    assert service_account(our_pod()) == ACCOUNT
    pod = our_pod()
    del pod["spec"]["serviceAccountName"]
    assert service_account(pod) == (LEASE[0], "default")


def test_the_lease_holder_is_checked_against_our_running_pods() -> None:
    install = healthy()
    check = by_name(install)["lease holder"]
    assert check.detail.endswith(f"is our pod {LEASE[0]}/{OUR_POD} (Running)")

    # NVIDIA's controller electing on our Lease, and holding it.
    install.nvidia_controller_pods = [nvidia_controller()]
    assert install.lease is not None
    install.lease["spec"]["holderIdentity"] = "dra-driver-nvidia-gpu-controller-5d8f-abcde"
    check = by_name(install)["lease holder"]
    assert check.state == "fail"
    assert check.detail.startswith(
        f"NVIDIA's controller (pod {DRIVER_NS}/dra-driver-nvidia-gpu-controller-5d8f-abcde) "
        f"holds our Lease {LEASE[0]}/{LEASE[1]}: it leads, ours waits"
    )
    assert "scale deployment dra-driver-nvidia-gpu-controller --replicas=0" in check.fix

    # A pod of ours that is gone, its identity still renewing: something else leads.
    install = healthy()
    assert install.lease is not None
    install.lease["spec"]["holderIdentity"] = new_identity("computedomain-controller-gone")
    check = by_name(install)["lease holder"]
    assert check.state == "fail"
    assert f"none of our running pods ({OUR_POD})" in check.detail
    assert check.fix.startswith(f"kubectl -n {LEASE[0]} get lease {LEASE[1]} -o yaml")

    # The same, no longer renewed: it expires by itself (the controller check fails already).
    install.lease["spec"]["renewTime"] = format_time(NOW - timedelta(seconds=40))
    assert by_name(install)["lease holder"].state == "warn"

    # Our pod's identity, but that pod is not running (a pod whose name extends it is not it).
    install = healthy()
    install.our_pods = [ready_pod(f"{OUR_POD}-2", "cpu-1", LEASE[0])]
    assert by_name(install)["lease holder"].state == "fail"


@pytest.mark.parametrize(
    ("image", "state"),
    [
        (f"ghcr.io/example/computedomain-controller:v{VERSION}", "ok"),
        (f"localhost:5000/computedomain-controller:{VERSION}", "ok"),
        ("ghcr.io/example/computedomain-controller:v0.0.9", "warn"),
        ("ghcr.io/example/computedomain-controller@sha256:" + "0" * 64, "warn"),
    ],
)
def test_the_controller_image_tag_against_the_plugin_version(image: str, state: str) -> None:
    install = healthy()
    install.our_pods[0]["spec"]["containers"][0]["image"] = image
    check = by_name(install)["version"]
    assert check.state == state, check
    assert check.detail.startswith(f"plugin {VERSION}; controller image {image}")


def test_the_version_mismatch_names_the_plugin_to_install() -> None:
    install = healthy()
    install.our_pods[0]["spec"]["containers"][0]["image"] = "r/computedomain-controller:v0.2.0"
    assert by_name(install)["version"].fix.endswith("pip install computedomain==0.2.0)")


def deployment(labels: dict[str, str], command: list[str], replicas: int = 1) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "gpu-stack", "name": "my-dra-controller"},
        "spec": {
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "command": command}]},
            }
        },
        "status": {"replicas": replicas},
    }


def test_nvidias_controller_found_by_its_command_where_no_label_of_ours_finds_it() -> None:
    install = healthy()
    renamed = deployment(
        {"my-dra-component": "controller"}, ["/usr/bin/compute-domain-controller", "-v", "4"]
    )
    install.nvidia_controller_deployments = [renamed]
    check = broken("second controller", install)
    assert check.state == "fail"
    assert check.detail.startswith(
        "Deployment gpu-stack/my-dra-controller runs NVIDIA's controller "
        "(compute-domain-controller, 1 pod(s)) with none of the pod labels ours looks for"
    )
    assert check.fix.startswith("kubectl -n gpu-stack scale deployment my-dra-controller")

    # Scaled to 0, or found by its labels already (then named as before): not this line.
    install.nvidia_controller_deployments = [{**renamed, "status": {"replicas": 0}}]
    assert by_name(install)["second controller"].state == "ok"


def test_our_own_deployment_running_the_same_command_is_not_nvidias() -> None:
    from computedomain.kubectl.doctor import runs_nvidia_controller

    assert runs_nvidia_controller(deployment({}, ["compute-domain-controller"]))
    assert not runs_nvidia_controller(
        deployment(dict(c.OWN_POD_LABELS), ["compute-domain-controller"])
    )
    assert not runs_nvidia_controller(deployment({}, ["gpu-kubelet-plugin"]))


def test_no_fix_needs_a_checkout() -> None:
    """Every fix a broken install gets is a command or a value: no repository path."""
    installs = []
    for mutate in (
        lambda i: setattr(i, "crds", {}),
        lambda i: setattr(i, "crds", {CD_CRD_NAME: crd(("status",)), CLIQUE_CRD_NAME: crd()}),
        lambda i: setattr(i, "lease", None),
        lambda i: setattr(i, "our_pods", []),
        lambda i: setattr(i, "daemon_service_account", None),
        lambda i: setattr(i, "daemon_denied", ["get pods"]),
        lambda i: setattr(i, "nvidia_daemonsets", []),
        lambda i: setattr(i, "device_classes", []),
        lambda i: setattr(i, "dra_served", False),
        lambda i: denied(i, Permission("patch", c.GROUP, "computedomains/status")),
    ):
        install = healthy()
        mutate(install)
        installs.append(install)
    fixes = [check.fix for install in installs for check in diagnose(install) if check.fix]
    assert len(fixes) >= len(installs)
    for fix in fixes:
        for path in ("crds/", "manifests/", "docs/", "hack/", ".yaml"):
            assert path not in fix, fix
    assert CRD_UPGRADE_COMMAND == (
        "kubectl cdom crds | kubectl apply --server-side --force-conflicts -f -"
    )
