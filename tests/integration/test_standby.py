"""Issue 17: NVIDIA's controller scaled back up beside ours (a `helm upgrade` of NVIDIA's release
after the swap). From the moment its Deployment is created until its last pod is gone, the
apiserver's audit log must show no write by our controller's identity except Events: nothing to
a ComputeDomain (finalizer, status), its DaemonSet or ResourceClaimTemplates, cliques or Nodes,
although a CD is created, one is deleted and one loses its finalizer meanwhile. The stand-by is
said once, on the ComputeDomain CRD (a Warning ConcurrentController, then a Normal Resumed), not
on each CD. Once NVIDIA's pod is gone, ours does all of that work by itself.

NVIDIA's controller is the stand-in Deployment of nvidia_install (kwok shows its pod Running;
no NVIDIA process writes here, so every write in the window would be ours alone).
"""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from computedomain.api import constants as c
from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.app import REPORTING_CONTROLLER
from computedomain.devcluster.audit import AuditedWrite, AuditLog, tally
from computedomain.devcluster.controlplane import ControlPlane
from computedomain.devcluster.watching import Objects, watch_object, watch_objects
from computedomain.domain.crdschema import CD_CRD_NAME
from computedomain.domain.keys import CDKey
from computedomain.runtime import resources as r
from computedomain.runtime.client import ApiError, KubeClient
from computedomain.runtime.resources import NAMESPACES
from tests.integration import nvidia_install as nvidia
from tests.integration.conftest import IdentityFactory
from tests.integration.e2e_harness import pod_running
from tests.kit.controllers import controllers_for, create_cd, stop_after_cleanup, wait_children
from tests.kit.waiting import eventually

pytestmark = pytest.mark.integration

SELECTOR = nvidia.SELECTOR


def not_events(writes: list[AuditedWrite]) -> list[str]:
    return [w.target for w in writes if w.resource != "events"]


async def events_on_the_crd(
    kube: KubeClient, reason: str, excluding: frozenset[str] | set[str] = frozenset()
) -> list[dict[str, Any]]:
    """Until the ComputeDomain CRD has an Event with ``reason`` (Events about a cluster-scoped
    object live in ``default``) not named in ``excluding``; every such Event."""

    def about(events: Objects) -> list[dict[str, Any]]:
        return [
            e
            for e in events.values()
            if e.get("reason") == reason
            and (e.get("regarding") or {}).get("name") == CD_CRD_NAME
            and e["metadata"]["name"] not in excluding
        ]

    found: list[dict[str, Any]] = await watch_objects(
        kube, r.EVENTS, about, namespace="default", what=f"{reason} on the CRD"
    )
    return found


async def start_nvidia_controller(kube: KubeClient, namespace: str) -> None:
    """NVIDIA's controller Deployment (the stand-in of nvidia_install) and its ServiceAccount."""
    account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": nvidia.FRESH.controller_sa},
    }
    await kube.create(r.SERVICE_ACCOUNTS, account, namespace)
    await kube.create(nvidia.DEPLOYMENTS, nvidia.controller_deployment(), namespace)


async def remove_nvidia_controller(kube: KubeClient, namespace: str) -> None:
    """Its Deployment deleted, until its last pod is gone."""
    await kube.delete(nvidia.DEPLOYMENTS, c.NVIDIA_CONTROLLER_DEPLOYMENT, namespace)
    await watch_objects(
        kube,
        r.PODS,
        lambda pods: not pods,
        namespace=namespace,
        label_selector=SELECTOR,
        what="NVIDIA's controller pods gone",
    )


async def ours_about_cds(kube: KubeClient, namespace: str) -> list[str]:
    """The Events of ours about a ComputeDomain in ``namespace``."""
    events = (await kube.list(r.EVENTS, namespace))["items"]
    return [
        f"{e.get('reason')} {(e.get('regarding') or {}).get('name')}"
        for e in events
        if (e.get("regarding") or {}).get("kind") == "ComputeDomain"
        and e.get("reportingController") == REPORTING_CONTROLLER
    ]


async def test_ours_writes_nothing_while_nvidias_controller_runs_and_resumes_after(
    identities: IdentityFactory,  # first: torn down after the controller that uses it
    kube: KubeClient,
    control_plane: ControlPlane,
    namespace: str,
    driver_namespace: str,
    fleet_nodes: list[str],  # kwok nodes: where NVIDIA's stand-in pod runs
) -> None:
    assert control_plane.audit_log is not None
    audit = AuditLog(control_plane.audit_log)
    kubeconfig, our_user = await identities("ours")
    factory = controllers_for(kubeconfig, driver_namespace)
    try:
        running = await factory.start()
        cds: dict[str, dict[str, Any]] = {}
        for name in ("kept", "doomed"):
            cds[name] = await create_cd(kube, namespace, name, rct_name=f"{name}-channel")
            await wait_children(kube, cds[name], driver_namespace, f"{name}-channel")
        await running.wait_idle()

        # -- NVIDIA's controller comes back ----------------------------------------------
        mark = audit.mark()
        # Events earlier tests left on the CRD (the cluster is shared) are not this one's.
        earlier = {e["metadata"]["name"] for e in (await kube.list(r.EVENTS, "default"))["items"]}
        await start_nvidia_controller(kube, driver_namespace)
        await watch_objects(
            kube,
            r.PODS,
            lambda pods: any(pod_running(p) for p in pods.values()),
            namespace=driver_namespace,
            label_selector=SELECTOR,
            what="NVIDIA's controller pod Running",
        )
        (warned,) = await events_on_the_crd(kube, "ConcurrentController", excluding=earlier)
        assert "so this one stands by" in warned["note"], warned["note"]
        assert running.registry.get_sample_value("computedomain_controller_standing_by") == 1.0
        about_cds = await ours_about_cds(kube, namespace)

        # Work that would make ours write at once: a new CD, a deletion, a finalizer gone.
        fresh = await create_cd(kube, namespace, "fresh", rct_name="fresh-channel")
        await kube.delete(COMPUTE_DOMAINS, "doomed", namespace)
        await kube.patch(
            COMPUTE_DOMAINS,
            "kept",
            [{"op": "remove", "path": "/metadata/finalizers"}],
            namespace,
            patch_type="json",
        )
        caches = running.process.caches

        async def seen_by_ours() -> bool:
            doomed, kept = (caches.compute_domain(CDKey(namespace, n)) for n in ("doomed", "kept"))
            return (
                caches.compute_domain(CDKey(namespace, "fresh")) is not None
                and (doomed is None or bool(doomed["metadata"].get("deletionTimestamp")))
                and kept is not None
                and not kept["metadata"].get("finalizers")
            )

        await eventually(seen_by_ours, within=30, what="ours' cache shows the three changes")
        await running.wait_idle()
        # Nothing said on each CD: the stand-by is the cluster's, said once on the CRD.
        assert await ours_about_cds(kube, namespace) == about_cds
        so_far = audit.writes(since=mark, user=our_user)
        assert not_events(so_far) == [], f"ours wrote while standing by: {tally(so_far)}"
        stood = await kube.get(COMPUTE_DOMAINS, "fresh", namespace)
        assert not stood["metadata"].get("finalizers"), stood["metadata"]
        assert not (stood.get("status") or {}).get("conditions"), stood["status"]
        doomed = await kube.get(COMPUTE_DOMAINS, "doomed", namespace)
        assert doomed["metadata"]["finalizers"] == [c.FINALIZER]  # NVIDIA's to remove now
        fresh_ds = f"{driver_namespace}/{c.daemon_name(fresh['metadata']['uid'])}"

        # -- NVIDIA's controller goes -------------------------------------------------------
        # The window ends as its deletion is asked for: a terminating pod no longer counts.
        end = audit.mark()
        earlier |= {e["metadata"]["name"] for e in (await kube.list(r.EVENTS, "default"))["items"]}
        await remove_nvidia_controller(kube, driver_namespace)
        standing = audit.writes(since=mark, user=our_user, until=end)
        print(f"writes by ours while NVIDIA's controller ran: {tally(standing)}")
        assert not_events(standing) == []
        assert {w.resource for w in standing} == {"events"}  # it said so

        # -- ours gets back to work by itself --------------------------------------------------
        await wait_children(kube, fresh, driver_namespace, "fresh-channel", within=60)
        await watch_object(
            kube,
            COMPUTE_DOMAINS,
            "doomed",
            lambda o: o is None,
            namespace=namespace,
            within=60,
            what="doomed finalized",
        )
        await watch_object(
            kube,
            COMPUTE_DOMAINS,
            "kept",
            lambda o: o is not None and o["metadata"].get("finalizers") == [c.FINALIZER],
            namespace=namespace,
            within=60,
            what="kept's finalizer back",
        )
        (resumed_event,) = await events_on_the_crd(kube, "Resumed", excluding=earlier)
        assert resumed_event["type"] == "Normal"
        assert running.registry.get_sample_value("computedomain_controller_standing_by") == 0.0
        resumed = audit.writes(since=end, user=our_user)
        print(f"writes by ours after NVIDIA's controller went: {tally(resumed)}")
        targets = not_events(resumed)
        assert f"create daemonsets {fresh_ds}" in targets
        assert f"create resourceclaimtemplates {namespace}/fresh-channel" in targets
        assert f"patch computedomains {namespace}/kept" in targets
    finally:
        with contextlib.suppress(ApiError):
            await kube.delete(nvidia.DEPLOYMENTS, c.NVIDIA_CONTROLLER_DEPLOYMENT, driver_namespace)
        await stop_after_cleanup(factory, kube, namespace)


# -- Issue 29: one controller per cluster, whatever namespace the other runs in -----------------
SIGNS = ("controller pod", "kubelet plugin", "daemon DaemonSet")


def nothing_runs_it() -> dict[str, Any]:
    """A pod spec part that no node matches: the object exists, no pod of it runs."""
    return {"nodeSelector": {"computedomain.dev/nowhere": "true"}}


async def make_sign(kube: KubeClient, sign: str, elsewhere: str, kept: dict[str, Any]) -> str:
    """Puts one sign of a second ComputeDomain controller in namespace ``elsewhere``; the
    reason of the Warning ours must record on the CRD."""
    if sign == "controller pod":  # NVIDIA's controller, as its chart labels it
        await start_nvidia_controller(kube, elsewhere)
        return "ConcurrentController"
    if sign == "kubelet plugin":  # NVIDIA's kubelet plugin, as its chart renders it
        select = {f"{c.NVIDIA_CHART_NAME}-component": c.NVIDIA_KUBELET_PLUGIN_COMPONENT}
        name, labels = (
            f"{c.NVIDIA_CHART_NAME}-kubelet-plugin",
            {"app.kubernetes.io/name": c.NVIDIA_CHART_NAME},
        )
    else:  # the IMEX daemons another controller made for one of our CDs
        uid = kept["metadata"]["uid"]
        name, labels = c.daemon_name(uid), {c.CD_LABEL: uid}
        select = labels
    container = {"name": "compute-domains", "image": c.NVIDIA_DRIVER_IMAGE}
    body = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "selector": {"matchLabels": select},
            "template": {
                "metadata": {"labels": select},
                "spec": {**nothing_runs_it(), "containers": [container]},
            },
        },
    }
    await kube.create(r.DAEMONSETS, body, elsewhere)
    return "DriverNamespaceMismatch" if sign == "kubelet plugin" else "ForeignDaemonSets"


async def crd_warning_naming(kube: KubeClient, reason: str, text: str) -> dict[str, Any]:
    """Until the ComputeDomain CRD has a Warning ``reason`` whose note names ``text``; that
    Event (the namespace of this test names it, whatever other tests left)."""

    def about(events: Objects) -> list[dict[str, Any]]:
        return [
            e
            for e in events.values()
            if e.get("reason") == reason
            and (e.get("regarding") or {}).get("name") == CD_CRD_NAME
            and text in (e.get("note") or "")
        ]

    found: list[dict[str, Any]] = await watch_objects(
        kube, r.EVENTS, about, namespace="default", what=f"{reason} naming {text}"
    )
    (event,) = found
    return event


@pytest.mark.parametrize("sign", SIGNS)
async def test_a_second_controller_in_any_namespace_makes_ours_stand_by(
    identities: IdentityFactory,  # first: torn down after the controller that uses it
    kube: KubeClient,
    control_plane: ControlPlane,
    namespace: str,
    driver_namespace: str,
    fleet_nodes: list[str],  # kwok nodes: where NVIDIA's stand-in pod runs
    sign: str,
) -> None:
    """Ours in one namespace, the other controller's sign in another (the README's first
    install path beside NVIDIA's chart): ours writes nothing but Events until the sign is
    gone, says why once on the CRD, then does the work by itself."""
    assert control_plane.audit_log is not None
    audit = AuditLog(control_plane.audit_log)
    kubeconfig, our_user = await identities("ours")
    factory = controllers_for(kubeconfig, driver_namespace)
    body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"generateName": "nvidia-"}}
    elsewhere = (await kube.create(NAMESPACES, body))["metadata"]["name"]
    try:
        running = await factory.start()
        kept = await create_cd(kube, namespace, "kept", rct_name="kept-channel")
        await wait_children(kube, kept, driver_namespace, "kept-channel")
        await running.wait_idle()

        mark = audit.mark()
        reason = await make_sign(kube, sign, elsewhere, kept)
        warned = await crd_warning_naming(kube, reason, elsewhere)
        assert "stands by" in warned["note"], warned["note"]
        assert running.registry.get_sample_value("computedomain_controller_standing_by") == 1.0
        fresh = await create_cd(kube, namespace, "fresh", rct_name="fresh-channel")
        caches = running.process.caches

        async def seen_by_ours() -> bool:
            return caches.compute_domain(CDKey(namespace, "fresh")) is not None

        await eventually(seen_by_ours, within=30, what="ours' cache shows the new CD")
        await running.wait_idle()
        standing = audit.writes(since=mark, user=our_user)
        assert not_events(standing) == [], f"ours wrote while standing by: {tally(standing)}"

        # -- the sign goes: ours gets back to work by itself ---------------------------------
        if sign == "controller pod":
            await remove_nvidia_controller(kube, elsewhere)
        else:
            for ds in (await kube.list(r.DAEMONSETS, elsewhere))["items"]:
                await kube.delete(r.DAEMONSETS, ds["metadata"]["name"], elsewhere)
        await wait_children(kube, fresh, driver_namespace, "fresh-channel", within=60)
        assert running.registry.get_sample_value("computedomain_controller_standing_by") == 0.0
    finally:
        with contextlib.suppress(ApiError):
            await kube.delete(nvidia.DEPLOYMENTS, c.NVIDIA_CONTROLLER_DEPLOYMENT, elsewhere)
        await stop_after_cleanup(factory, kube, namespace)
        with contextlib.suppress(ApiError):
            await kube.delete(NAMESPACES, elsewhere)
