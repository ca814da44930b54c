"""`kubectl cdom` against the real control plane and the simulated fleet, run as the console
script a user runs (a separate process, the test's kubeconfig)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from computedomain import distribution_version
from computedomain.api import constants as c
from computedomain.devcluster.watching import watch_object, watch_objects
from computedomain.kubectl.doctor import controller_permissions
from computedomain.runtime import resources as r
from computedomain.runtime.client import ApiError
from computedomain.runtime.objects import condition
from computedomain.sim.faults import FaultSettings
from tests.integration.e2e_harness import FAST_DAEMONS, STATEFULSETS, EndToEnd, cd_ready, workload
from tests.integration.test_rbac import (
    RBAC_DIR,
    RBAC_KINDS,
    install,
    localize,
    uninstall,
    without_verb,
)
from tests.kit.controllers import clique_gauges
from tests.kit.kubectl_plugin import cdom, doctor, lease_held
from tests.kit.waiting import eventually

pytestmark = pytest.mark.integration

RACKS = ["r00", "r01", "r02", "r03"]


async def fits(kubeconfig: Path, size: int) -> dict[str, Any]:
    code, out, err = await cdom(kubeconfig, "cliques", "--fits", str(size), "-o", "json")
    assert code in (0, 1), err
    document: dict[str, Any] = json.loads(out)
    assert document["fits"]["fits"] == (code == 0)
    return document


async def test_cliques_fits_is_right_before_and_after_a_domain_takes_nodes(
    e2e: EndToEnd, kubeconfig_path: Path
) -> None:
    before = await fits(kubeconfig_path, 16)
    assert before["fits"]["fits"], before["fits"]
    assert all(row["free"] == 18 for row in before["cliques"] if row["clique"] != "<none>")

    controller = await e2e.start_controller()
    await e2e.start_simulator()
    cd = await e2e.create_cd("wide", num_nodes=12)
    uid = cd["metadata"]["uid"]
    # 3 nodes in each of the 4 racks: no clique keeps 16 free.
    await e2e.run_workload(workload("wide", 12, racks=RACKS, spread_over_racks=True))
    held = await e2e.nodes_labelled(uid, lambda names: len(names) == 12, "12 nodes held")

    after = await fits(kubeconfig_path, 16)
    assert not after["fits"]["fits"]
    assert "the most free nodes in one clique are 15" in after["fits"]["message"]
    rows = [row for row in after["cliques"] if row["clique"] != "<none>"]
    assert [row["held"] for row in rows] == [3, 3, 3, 3]
    assert [row["domains"] for row in rows] == [{f"{e2e.namespace}/wide": 3}] * 4
    assert not held & {node for row in rows for node in row["freeNodes"]}
    assert (await fits(kubeconfig_path, 15))["fits"]["fits"]

    # The controller's gauge counts as the plugin does (its inventory: a Table LIST of every
    # Node for Ready and cordon, the labelled watch for the held ones at once).
    def gauge(states: Mapping[str, Any]) -> dict[str, dict[str, int]]:
        return {
            row["clique"]: {state: row[state] for state in ("held", "free")}
            | {"total": row["nodes"], "ready": row["ready"]}
            for row in states["cliques"]
            if row["clique"] != "<none>"
        }

    async def exported_as_listed() -> bool:
        return clique_gauges(controller) == gauge(after)

    # The gauges are recomputed on a period (no event to await).
    await eventually(
        exported_as_listed,
        within=30,
        what=f"computedomain_clique_nodes equal to kubectl cdom cliques: {gauge(after)}",
    )

    code, out, _ = await cdom(kubeconfig_path, "cliques", "--fits", "16")
    print(out)
    assert code == 1
    assert out.splitlines()[0].split() == ["CLIQUE", "NODES", "READY", "HELD", "FREE", "DOMAINS"]
    assert f"{e2e.namespace}/wide(3)" in out

    # Ready, but split over four cliques: describe names it (IMEX spans one clique).
    await e2e.cd_until("wide", cd_ready, "Ready")
    code, out = await describe(e2e, kubeconfig_path, "wide")
    assert code == 1
    link = broken_link(out)
    assert link[0] == "First broken link: cliques"
    assert link[1].strip().startswith("MultipleCliques: Nodes span 4 NVLink cliques")


async def describe(e2e: EndToEnd, kubeconfig: Path, name: str) -> tuple[int, str]:
    code, out, err = await cdom(kubeconfig, "describe", name, "-n", e2e.namespace)
    assert code in (0, 1), err
    return code, out


def broken_link(out: str) -> list[str]:
    """The three lines naming the first broken link (link, problem, what to do)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("First broken link:"))
    return lines[start : start + 3]


async def test_describe_names_the_first_broken_link_of_each_kind(
    e2e: EndToEnd, kubeconfig_path: Path
) -> None:
    stuck, fine = "gb200-r02-n04", "gb200-r02-n05"
    await e2e.start_controller(DAEMON_READY_GRACE_PERIOD="2s")
    await e2e.start_simulator(
        FaultSettings(daemon_delay=FAST_DAEMONS, never_ready_nodes=frozenset({stuck}))
    )

    # Idle: nothing is wrong, the domain waits for its workload (exit 1: not Ready).
    await e2e.create_cd("idle", rct_name="idle-channel")
    await e2e.cd_until("idle", lambda cd: bool(condition(cd, "Ready")), "conditions")
    code, out = await describe(e2e, kubeconfig_path, "idle")
    assert code == 1
    link = broken_link(out)
    assert link[0] == "First broken link: workload"
    assert f"ResourceClaimTemplate {e2e.namespace}/idle-channel" in link[1]

    # The job started in another namespace, with a copy of the domain's channel template: the
    # kubelet plugin refuses its claim, and describe names that claim.
    other = await e2e.kube.create(
        r.NAMESPACES,
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"generateName": "elsewhere-"}},
    )
    elsewhere = other["metadata"]["name"]
    try:
        template = await e2e.kube.get(r.RESOURCE_CLAIM_TEMPLATES, "idle-channel", e2e.namespace)
        copy = {key: template[key] for key in ("apiVersion", "kind", "spec")}
        copy["metadata"] = {"name": "idle-channel"}
        await e2e.kube.create(r.RESOURCE_CLAIM_TEMPLATES, copy, elsewhere)
        await e2e.kube.create(
            STATEFULSETS, workload("idle", 1, rct_name="idle-channel", racks=["r01"]), elsewhere
        )
        claims = await watch_objects(
            e2e.kube,
            r.RESOURCE_CLAIMS,
            lambda items: list(items.values()) or None,
            namespace=elsewhere,
            what="the claim of the pod in the other namespace",
        )
        code, out = await describe(e2e, kubeconfig_path, "idle")
        print(out)
        assert code == 1
        link = broken_link(out)
        claim = f"{elsewhere}/{claims[0]['metadata']['name']}"
        assert link[0] == f"First broken link: workload claim {claim}"
        assert f"whose namespace is {e2e.namespace}: NVIDIA's kubelet plugin refuses it" in link[1]
    finally:
        await e2e.kube.delete(r.NAMESPACES, elsewhere)

    # A foreign object at the workload template's name: the children link, the controller's words.
    foreign = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "taken"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "x", "exactly": {"deviceClassName": c.CHANNEL_DEVICE_CLASS}}
                    ]
                }
            }
        },
    }
    await e2e.kube.create(r.RESOURCE_CLAIM_TEMPLATES, foreign, e2e.namespace)
    await e2e.create_cd("clash", rct_name="taken")
    await e2e.cd_until(
        "clash",
        lambda cd: condition(cd, "Ready").get("reason") == "ForeignObject",
        "ForeignObject",
    )
    code, out = await describe(e2e, kubeconfig_path, "clash")
    assert code == 1
    link = broken_link(out)
    assert link[0] == "First broken link: children"
    assert link[1].strip().startswith("ForeignObject:")

    # A daemon that never turns Ready: named, with its own words and the logs command.
    cd = await e2e.create_cd("stuck", rct_name="stuck-channel")
    await e2e.run_workload(workload("stuck", 2, rct_name="stuck-channel", hostnames=[stuck, fine]))
    await e2e.cd_until(
        "stuck",
        lambda o: condition(o, "Ready").get("reason") == "DaemonsNotReady",
        "DaemonsNotReady",
    )
    code, out = await describe(e2e, kubeconfig_path, "stuck")
    print(out)
    assert code == 1
    link = broken_link(out)
    assert link[0].startswith("First broken link: IMEX daemon ")
    assert link[0].endswith(f" on {stuck}")
    assert "not Ready: running, but its probe has not passed" in link[1]
    assert f"-c {c.DAEMON_CONTAINER}" in link[2]
    assert f"{fine}  clique" in out
    assert "daemon Ready" in out
    assert cd["metadata"]["uid"] in out

    # Ready: no broken link, exit 0.
    await e2e.create_cd("good", rct_name="good-channel")
    await e2e.run_workload(workload("good", 2, rct_name="good-channel", racks=["r03"]))
    await e2e.cd_until("good", cd_ready, "Ready")
    code, out = await describe(e2e, kubeconfig_path, "good")
    assert code == 0, out
    assert out.splitlines()[-1] == "No broken link: the domain is Ready."
    print(out)


async def test_describe_of_a_domain_that_does_not_exist_says_so(
    e2e: EndToEnd, kubeconfig_path: Path
) -> None:
    code, out, err = await cdom(kubeconfig_path, "describe", "nothing", "-n", e2e.namespace)
    assert code == 3
    assert out == ""
    assert err.strip() == f"error: ComputeDomain {e2e.namespace}/nothing not found"


async def test_doctor_names_each_broken_part_of_the_install_with_its_fix(
    e2e: EndToEnd, kubeconfig_path: Path
) -> None:
    """The simulated fleet is an install without NVIDIA's chart: the simulator plays the kubelet
    plugin, no ClusterRole grants the daemons anything. The doctor names each of those; what
    the fleet does have (our current CRDs, resource.k8s.io/v1, NVIDIA's DeviceClasses) passes."""
    code, checks = await doctor(kubeconfig_path, "--driver-namespace", e2e.driver_namespace)
    print(json.dumps(checks, indent=1))
    assert code == 1
    for name in ("CRDs", "DRA API", "DeviceClasses", "second controller"):
        assert checks[name]["state"] == "ok", checks[name]
    assert "kubelet plugin DaemonSet was not found" in checks["kubelet plugin"]["detail"]
    lease = f"{e2e.driver_namespace}/nvidia-compute-domain-controller"
    assert checks["controller"]["detail"].startswith(f"no Lease {lease}")
    assert checks["controller"]["state"] == "fail"
    sa = f"{e2e.driver_namespace}/{c.DAEMON_SERVICE_ACCOUNT}"
    assert checks["daemon RBAC"]["detail"] == (
        f"ServiceAccount {sa} may do nothing the IMEX daemon does (e.g. get computedomains)"
    )
    assert "compute-domain-daemon-role" in checks["daemon RBAC"]["fix"]  # NVIDIA's
    assert "ClusterRoleBinding computedomain-daemon" in checks["daemon RBAC"]["fix"]  # ours

    # Our controller leading on its Lease.
    await e2e.start_controller(LEADER_ELECTION_ENABLED="true")

    await our_lease_held(e2e)
    _, checks = await doctor(kubeconfig_path, "--driver-namespace", e2e.driver_namespace)
    assert checks["controller"]["state"] == "ok", checks["controller"]
    assert f"leads on Lease {lease}, renewed " in checks["controller"]["detail"]

    # The daemon ServiceAccount removed: the doctor names it, and describe names the link.
    await e2e.kube.delete(r.SERVICE_ACCOUNTS, c.DAEMON_SERVICE_ACCOUNT, e2e.driver_namespace)
    _, checks = await doctor(kubeconfig_path, "--driver-namespace", e2e.driver_namespace)
    assert (
        checks["daemon RBAC"]["detail"]
        == f"ServiceAccount {sa} is missing: no IMEX daemon pod can be created"
    )
    await e2e.create_cd("no-sa", rct_name="no-sa-channel")
    await e2e.cd_until(
        "no-sa",
        lambda cd: condition(cd, "ChildrenReady").get("reason") == "DaemonServiceAccountMissing",
        "DaemonServiceAccountMissing",
    )
    code, out = await describe(e2e, kubeconfig_path, "no-sa")
    link = broken_link(out)
    assert link[0] == "First broken link: children"
    assert link[1].strip().startswith("DaemonServiceAccountMissing:")


OUR_POD = "computedomain-controller-doctor-0"
IMAGE = "computedomain-controller"


async def our_lease_held(e2e: EndToEnd) -> None:
    await watch_object(
        e2e.kube,
        r.LEASES,
        "nvidia-compute-domain-controller",
        lease_held,
        namespace=e2e.driver_namespace,
        within=30,
        what="our Lease held",
    )


async def running_pod_of_ours(e2e: EndToEnd, node: str, account: str) -> dict[str, Any]:
    """A controller pod of ours as the cluster shows it (our labels, its ServiceAccount and
    image, Running on a fleet node): the in-process controller runs under its name."""
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": OUR_POD, "labels": dict(c.OWN_POD_LABELS)},
        "spec": {
            "nodeName": node,
            "serviceAccountName": account,
            "containers": [{"name": "controller", "image": f"{IMAGE}:v{distribution_version()}"}],
        },
    }
    await e2e.kube.create(r.PODS, body, e2e.driver_namespace)
    status = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    return await e2e.kube.patch(
        r.PODS, OUR_POD, {"status": status}, e2e.driver_namespace, subresource="status"
    )


async def test_doctor_as_admin_names_a_verb_removed_from_our_rbac(
    e2e: EndToEnd, kubeconfig_path: Path, fleet_nodes: list[str]
) -> None:
    """Our RBAC (manifests/rbac) bound to our ServiceAccount in the driver namespace, a pod of
    ours running as it, our controller leading under that pod's name: doctor, run as the
    cluster admin, reviews every verb of ours for that ServiceAccount and passes it, finds the
    Lease holder among our pods and our image's tag equal to its version. With one verb removed
    from our ClusterRole on purpose, it names exactly that verb."""
    kustomization = yaml.safe_load((RBAC_DIR / "kustomization.yaml").read_text())
    objects = [yaml.safe_load((RBAC_DIR / name).read_text()) for name in kustomization["resources"]]
    # The driver namespace comes with the daemon's ServiceAccount (as NVIDIA's chart makes it).
    objects = [o for o in objects if o["metadata"]["name"] != c.DAEMON_SERVICE_ACCOUNT]
    installed = await install(e2e.kube, objects, e2e.driver_namespace)
    try:
        account = "computedomain-controller"
        await running_pod_of_ours(e2e, fleet_nodes[-1], account)
        await e2e.start_controller(LEADER_ELECTION_ENABLED="true", POD_NAME=OUR_POD)
        await our_lease_held(e2e)
        args = ("--driver-namespace", e2e.driver_namespace)
        _, checks = await doctor(kubeconfig_path, *args)
        print(json.dumps({k: checks[k] for k in ("controller RBAC", "lease holder")}, indent=1))
        sa = f"{e2e.driver_namespace}/{account}"
        verbs = len(controller_permissions(e2e.driver_namespace, e2e.driver_namespace))
        assert checks["controller RBAC"] == {
            "name": "controller RBAC",
            "state": "ok",
            "detail": f"controller ServiceAccount {sa} may do each of the {verbs} things ours does",
            "fix": "",
        }
        assert checks["lease holder"]["state"] == "ok", checks["lease holder"]
        assert (
            f"is our pod {e2e.driver_namespace}/{OUR_POD} (Running)"
            in (checks["lease holder"]["detail"])
        )
        assert checks["version"]["state"] == "ok", checks["version"]

        # One verb of ours removed on purpose from the ClusterRole: the status write.
        grant = ("ClusterRole", account, c.GROUP, f"{c.CD_PLURAL}/status", "patch")
        (crippled,) = [
            o
            for o in without_verb(objects, grant)
            if o["kind"] == "ClusterRole" and o["metadata"]["name"] == account
        ]
        res, body = localize(crippled, e2e.driver_namespace)
        assert res is RBAC_KINDS["ClusterRole"]
        await e2e.kube.patch(res, body["metadata"]["name"], {"rules": body["rules"]})

        async def named() -> dict[str, Any] | None:
            _, checks = await doctor(kubeconfig_path, *args)
            check = checks["controller RBAC"]
            return check if check["state"] != "ok" else None

        check = await eventually(named, within=20, what="doctor to see the verb removed")
        print(json.dumps(check, indent=1))
        assert check["state"] == "fail"
        assert check["detail"] == (
            f"controller ServiceAccount {sa} cannot patch computedomains/status"
        )
        assert "helm upgrade --reuse-values" in check["fix"]
    finally:
        await uninstall(e2e.kube, installed)
        # Gone before the next test: a pod of ours left running would be every doctor's.
        with contextlib.suppress(ApiError):
            await e2e.kube.delete(r.PODS, OUR_POD, e2e.driver_namespace)
        await watch_object(
            e2e.kube,
            r.PODS,
            OUR_POD,
            lambda pod: pod is None,
            namespace=e2e.driver_namespace,
            within=30,
            what="our pod deleted",
        )
