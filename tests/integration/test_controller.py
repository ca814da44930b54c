"""The controller on the real control plane: children, status projection, foreign objects,
deletion (including the awkward cases) and orphan cleanup."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from computedomain.api import constants as c
from computedomain.api.resources import CLIQUES, COMPUTE_DOMAINS
from computedomain.devcluster.harness import Controllers
from computedomain.devcluster.watching import watch_object, watch_objects, watch_present
from computedomain.domain.keys import CDKey
from computedomain.runtime import resources as r
from computedomain.runtime.client import ApiError, KubeClient
from computedomain.runtime.objects import condition, labels
from tests.kit.controllers import create_cd, wait_children


async def test_upstream_example_gets_all_three_children(
    kube: KubeClient, controllers: Controllers, namespace: str, driver_namespace: str
) -> None:
    await controllers.start()
    cd = await create_cd(kube, namespace, "imex-channel-injection", num_nodes=1)
    uid = cd["metadata"]["uid"]
    await wait_children(kube, cd, driver_namespace)

    cd = await kube.get(COMPUTE_DOMAINS, "imex-channel-injection", namespace)
    assert c.FINALIZER in cd["metadata"]["finalizers"]

    ds = await kube.get(r.DAEMONSETS, c.daemon_name(uid), driver_namespace)
    assert ds["metadata"]["labels"] == {c.CD_LABEL: uid}
    assert ds["metadata"]["finalizers"] == [c.FINALIZER]
    pod_spec = ds["spec"]["template"]["spec"]
    assert pod_spec["nodeSelector"] == {c.CD_LABEL: uid}
    assert pod_spec["serviceAccountName"] == c.DAEMON_SERVICE_ACCOUNT
    assert {t["effect"] for t in pod_spec["tolerations"]} == {
        "NoSchedule",
        "NoExecute",
        "PreferNoSchedule",
    }
    container = pod_spec["containers"][0]
    assert container["image"] == c.NVIDIA_DRIVER_IMAGE
    env = {e["name"]: e for e in container["env"]}
    assert env["MAX_NODES_PER_IMEX_DOMAIN"]["value"] == "18"
    assert (
        env["FEATURE_GATES"]["value"] == "ComputeDomainCliques=true,IMEXDaemonsWithDNSNames=true,"
    )
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert pod_spec["resourceClaims"] == [
        {"name": c.DAEMON_POD_CLAIM, "resourceClaimTemplateName": c.daemon_name(uid)}
    ]

    daemon_rct = await kube.get(r.RESOURCE_CLAIM_TEMPLATES, c.daemon_name(uid), driver_namespace)
    assert labels(daemon_rct) == {c.CD_LABEL: uid, c.TARGET_LABEL: c.TARGET_DAEMON}
    devices = daemon_rct["spec"]["spec"]["devices"]
    assert devices["requests"] == [{"name": "daemon", "exactly": devices["requests"][0]["exactly"]}]
    assert devices["requests"][0]["exactly"]["deviceClassName"] == c.DAEMON_DEVICE_CLASS
    assert devices["config"][0]["opaque"]["parameters"] == {
        "apiVersion": c.API_VERSION,
        "kind": c.DAEMON_CONFIG_KIND,
        "domainID": uid,
    }

    workload = await kube.get(r.RESOURCE_CLAIM_TEMPLATES, "imex-channel-0", namespace)
    assert labels(workload) == {c.CD_LABEL: uid, c.TARGET_LABEL: c.TARGET_WORKLOAD}
    params = workload["spec"]["spec"]["devices"]["config"][0]["opaque"]["parameters"]
    assert params == {
        "apiVersion": c.API_VERSION,
        "kind": c.CHANNEL_CONFIG_KIND,
        "domainID": uid,
        "allocationMode": "Single",
    }

    # No daemon has joined: upstream status semantics say NotReady (numNodes 1), and the
    # Ready condition says why.
    cd = await watch_present(
        kube,
        COMPUTE_DOMAINS,
        "imex-channel-injection",
        lambda o: condition(o, "Ready").get("reason") == "WaitingForWorkload",
        namespace=namespace,
        within=30.0,
    )
    assert cd["status"]["status"] == "NotReady"
    assert condition(cd, "Ready")["status"] == "False"
    assert condition(cd, "ChildrenReady")["status"] == "True"
    assert cd["status"]["observedGeneration"] == cd["metadata"]["generation"]


async def test_zero_nodes_is_not_ready_in_conditions(
    kube: KubeClient, controllers: Controllers, namespace: str
) -> None:
    """#767: upstream calls a numNodes=0 CD with no daemon Ready; our condition does not."""
    await controllers.start()
    await create_cd(kube, namespace, "empty")
    cd = await watch_object(
        kube,
        COMPUTE_DOMAINS,
        "empty",
        lambda o: bool(condition(o, "Ready")),
        namespace=namespace,
        within=30.0,
    )
    assert cd is not None
    assert cd["status"]["status"] == "Ready"  # kept for compatibility
    assert condition(cd, "Ready")["status"] == "False"


async def _daemon_pod(
    kube: KubeClient, driver_ns: str, uid: str, node: str, clique_id: str, ip: str
) -> dict[str, Any]:
    """Plays the kubelet plugin and the daemon just enough for the real DaemonSet controller's
    pod on `node` to look like a running IMEX daemon: label the node (which makes the DS place
    a pod there), then give that pod the daemon's clique label, an IP and Ready."""
    await _label_node(kube, node, uid)
    found: dict[str, Any] = {}

    async def scheduled() -> None:
        listing = await kube.list(
            r.PODS, namespace=driver_ns, field_selector=f"spec.nodeName={node}"
        )
        rv = listing["metadata"]["resourceVersion"]
        if listing["items"]:
            found.update(listing["items"][0])
            return
        async for kind, pod in kube.watch(
            r.PODS,
            namespace=driver_ns,
            field_selector=f"spec.nodeName={node}",
            resource_version=rv,
            timeout_seconds=60,
        ):
            if kind in ("ADDED", "MODIFIED"):
                found.update(pod)
                return

    await asyncio.wait_for(scheduled(), 60)
    name = found["metadata"]["name"]
    await kube.patch(
        r.PODS, name, {"metadata": {"labels": {c.CLIQUE_ID_LABEL: clique_id}}}, driver_ns
    )
    status = {
        "phase": "Running",
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "conditions": [{"type": "Ready", "status": "True"}],
    }
    return await kube.patch(r.PODS, name, {"status": status}, driver_ns, subresource="status")


async def test_cliques_project_into_status_and_conditions(
    kube: KubeClient,
    controllers: Controllers,
    namespace: str,
    driver_namespace: str,
    fleet_nodes: list[str],
) -> None:
    # Grace 0: a daemon not ready is DaemonsNotReady at once (no DaemonsStarting phase).
    await controllers.start(ORPHAN_GRACE_PERIOD="30s", DAEMON_READY_GRACE_PERIOD="0s")
    cd = await create_cd(kube, namespace, "cliques", num_nodes=2)
    uid = cd["metadata"]["uid"]
    node_a, node_b = fleet_nodes[0], fleet_nodes[1]
    nodes = {n: await kube.get(r.NODES, n) for n in (node_a, node_b)}
    clique_id = nodes[node_a]["metadata"]["labels"][c.GPU_CLIQUE_NODE_LABEL]
    ips = {node_a: "10.222.0.1", node_b: "10.222.0.2"}
    pods = {n: await _daemon_pod(kube, driver_namespace, uid, n, clique_id, ips[n]) for n in nodes}

    def entry(node: str, index: int, status: str) -> dict[str, Any]:
        ip = pods[node]["status"]["podIP"]
        return {
            "nodeName": node,
            "ipAddress": ip,
            "cliqueID": clique_id,
            "index": index,
            "status": status,
        }

    # Written the way the upstream daemon writes it: a full object with two labels.
    clique = await kube.create(
        CLIQUES,
        {
            "apiVersion": c.API_VERSION,
            "kind": c.CLIQUE_KIND,
            "metadata": {
                "name": c.clique_name(uid, clique_id),
                "labels": {c.CD_LABEL: uid, c.CLIQUE_ID_LABEL: clique_id},
            },
            "daemons": [entry(node_a, 0, "NotReady")],
        },
        driver_namespace,
    )
    cd = await watch_present(
        kube,
        COMPUTE_DOMAINS,
        "cliques",
        lambda o: len((o or {}).get("status", {}).get("nodes") or []) == 1,
        namespace=namespace,
        within=30.0,
        what="node A in status.nodes",
    )
    assert cd["status"]["nodes"] == [
        {
            "name": node_a,
            "ipAddress": entry(node_a, 0, "")["ipAddress"],
            "cliqueID": clique_id,
            "index": 0,
            "status": "NotReady",
        }
    ]
    assert condition(cd, "Ready")["reason"] == "DaemonsNotReady"

    clique["daemons"] = [entry(node_a, 0, "Ready"), entry(node_b, 1, "Ready")]
    await kube.replace(CLIQUES, clique, driver_namespace)
    cd = await watch_present(
        kube,
        COMPUTE_DOMAINS,
        "cliques",
        lambda o: condition(o, "Ready").get("status") == "True",
        namespace=namespace,
        within=30.0,
        what="Ready=True",
    )
    assert cd["status"]["status"] == "Ready"
    assert {n["name"]: n["index"] for n in cd["status"]["nodes"]} == {node_a: 0, node_b: 1}
    assert (cd["status"]["nodeCount"], cd["status"]["readyNodeCount"]) == (2, 2)
    assert condition(cd, "SingleClique")["status"] == "True"


async def test_legacy_protocol_keeps_daemon_entries_and_reasserts_conditions(
    kube: KubeClient,
    controllers: Controllers,
    namespace: str,
    driver_namespace: str,
    fleet_nodes: list[str],
) -> None:
    """Gate off: daemons PUT status.nodes, erasing our additive fields; we re-assert them and
    prune entries whose daemon pod is gone."""
    await controllers.start(FEATURE_GATES="ComputeDomainCliques=false")
    cd = await create_cd(kube, namespace, "legacy", num_nodes=1)
    uid = cd["metadata"]["uid"]
    ds = await watch_object(
        kube,
        r.DAEMONSETS,
        c.daemon_name(uid),
        lambda o: o is not None,
        namespace=driver_namespace,
        within=30.0,
    )
    assert ds is not None
    env = {
        e["name"]: e.get("value") for e in ds["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["FEATURE_GATES"] == "ComputeDomainCliques=false,IMEXDaemonsWithDNSNames=true,"
    node = fleet_nodes[2]
    clique_id = (await kube.get(r.NODES, node))["metadata"]["labels"][c.GPU_CLIQUE_NODE_LABEL]
    pod = await _daemon_pod(kube, driver_namespace, uid, node, clique_id, "10.222.1.1")
    cd = await watch_present(
        kube,
        COMPUTE_DOMAINS,
        "legacy",
        lambda o: bool(condition(o, "Ready")),
        namespace=namespace,
        within=30.0,
    )
    # What a legacy daemon's typed UpdateStatus sends: only upstream fields.
    stale = {
        "name": fleet_nodes[3],
        "ipAddress": "10.9.9.9",
        "cliqueID": clique_id,
        "index": 1,
        "status": "Ready",
    }
    live = {
        "name": node,
        "ipAddress": pod["status"]["podIP"],
        "cliqueID": clique_id,
        "index": 0,
        "status": "Ready",
    }
    while True:  # a legacy daemon retries its PUT on conflict; so do we
        cd = await kube.get(COMPUTE_DOMAINS, "legacy", namespace)
        cd["status"] = {"status": "NotReady", "nodes": [live, stale]}
        try:
            await kube.replace(COMPUTE_DOMAINS, cd, namespace, subresource="status")
            break
        except ApiError as err:
            if not err.is_conflict:
                raise
    cd = await watch_present(
        kube,
        COMPUTE_DOMAINS,
        "legacy",
        lambda o: (
            [n["name"] for n in (o or {}).get("status", {}).get("nodes") or []] == [node]
            and condition(o, "Ready").get("status") == "True"
        ),
        namespace=namespace,
        within=30.0,
        what="stale entry pruned and conditions re-asserted",
    )
    assert cd["status"]["nodes"] == [live]


async def test_foreign_object_is_left_untouched_and_reported(
    kube: KubeClient, controllers: Controllers, namespace: str
) -> None:
    foreign = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "taken", "labels": {"team": "someone-else"}},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "gpu", "exactly": {"deviceClassName": c.CHANNEL_DEVICE_CLASS}}
                    ]
                }
            }
        },
    }
    before = await kube.create(r.RESOURCE_CLAIM_TEMPLATES, foreign, namespace)
    await controllers.start()
    await create_cd(kube, namespace, "clash", rct_name="taken")
    cd = await watch_object(
        kube,
        COMPUTE_DOMAINS,
        "clash",
        lambda o: condition(o, "Ready").get("reason") == "ForeignObject",
        namespace=namespace,
        within=30.0,
        what="ForeignObject reason",
    )
    assert condition(cd, "ChildrenReady")["status"] == "False"
    after = await kube.get(r.RESOURCE_CLAIM_TEMPLATES, "taken", namespace)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    # Events are posted in the background: the condition can be written before its Event.
    await watch_objects(
        kube,
        r.EVENTS,
        lambda events: any(
            (e.get("reason"), e.get("type")) == ("ForeignObject", "Warning")
            for e in events.values()
        ),
        namespace=namespace,
        within=30.0,
        what="ForeignObject Warning event",
    )


async def _label_node(kube: KubeClient, node: str, uid: str) -> None:
    await kube.patch(r.NODES, node, {"metadata": {"labels": {c.CD_LABEL: uid}}})


async def _gone(
    kube: KubeClient, res: r.Resource, name: str, namespace: str | None, within: float = 30.0
) -> None:
    await watch_object(
        kube, res, name, lambda o: o is None, namespace=namespace, within=within,
        what=f"{res.kind} {name} gone",
    )  # fmt: skip


@pytest.mark.parametrize("removed_by_hand", ["daemonset", "compute-domain"])
async def test_what_was_removed_while_no_controller_ran_is_cleaned_up_on_start(
    removed_by_hand: str,
    kube: KubeClient,
    controllers: Controllers,
    namespace: str,
    driver_namespace: str,
    fleet_nodes: list[str],
) -> None:
    """While no controller runs (or it would put things back at once), by hand:
    - ``daemonset``: the DaemonSet removed, finalizer and all, then the CD deleted: the awkward
      case upstream hangs on; the CD waits on our finalizer;
    - ``compute-domain``: the CD's finalizer stripped and the CD deleted, as an impatient admin
      would: its children and node label are orphans.
    The controller that starts next removes everything else: CD, children, node label."""
    name = f"down-{removed_by_hand}"
    first = await controllers.start()
    cd = await create_cd(kube, namespace, name)
    uid = cd["metadata"]["uid"]
    await wait_children(kube, cd, driver_namespace)
    node = fleet_nodes[4 if removed_by_hand == "daemonset" else 6]
    await _label_node(kube, node, uid)
    await first.shutdown()
    controllers.running.clear()

    ds_name, no_finalizers = c.daemon_name(uid), {"metadata": {"finalizers": None}}
    if removed_by_hand == "daemonset":
        await kube.patch(r.DAEMONSETS, ds_name, no_finalizers, driver_namespace)
        await kube.delete(r.DAEMONSETS, ds_name, driver_namespace)
        await _gone(kube, r.DAEMONSETS, ds_name, driver_namespace)
        await kube.delete(COMPUTE_DOMAINS, name, namespace)
    else:
        await kube.patch(COMPUTE_DOMAINS, name, no_finalizers, namespace)
        await kube.delete(COMPUTE_DOMAINS, name, namespace)
        await _gone(kube, COMPUTE_DOMAINS, name, namespace)

    await controllers.start()
    await _gone(kube, COMPUTE_DOMAINS, name, namespace, within=60.0)
    for res, ns, child in (
        (r.DAEMONSETS, driver_namespace, ds_name),
        (r.RESOURCE_CLAIM_TEMPLATES, driver_namespace, ds_name),
        (r.RESOURCE_CLAIM_TEMPLATES, namespace, "imex-channel-0"),
    ):
        await _gone(kube, res, child, ns)
    await watch_object(
        kube, r.NODES, node, lambda o: c.CD_LABEL not in labels(o), within=30.0,
        what="label removed",
    )  # fmt: skip


async def test_node_label_of_another_domain_is_not_removed(
    kube: KubeClient,
    controllers: Controllers,
    namespace: str,
    driver_namespace: str,
    fleet_nodes: list[str],
) -> None:
    await controllers.start()
    cd = await create_cd(kube, namespace, "short-lived")
    await wait_children(kube, cd, driver_namespace)
    node = fleet_nodes[5]
    await _label_node(kube, node, "someone-else-uid")
    await kube.delete(COMPUTE_DOMAINS, "short-lived", namespace)
    await _gone(kube, COMPUTE_DOMAINS, "short-lived", namespace)
    assert labels(await kube.get(r.NODES, node)).get(c.CD_LABEL) == "someone-else-uid"
    await kube.patch(r.NODES, node, {"metadata": {"labels": {c.CD_LABEL: None}}})


async def test_missing_daemon_service_account_is_reported_and_recovers(
    kube: KubeClient, controllers: Controllers, namespace: str, driver_namespace: str
) -> None:
    """#586: Helm owns the daemon SA. Without it no daemon pod can start, and the CDs say so
    (one Warning each), then recover when it is back, all without a restart."""
    sa = c.DAEMON_SERVICE_ACCOUNT
    missing = "DaemonServiceAccountMissing"

    def reason_is(kind: str, want: str) -> Any:
        return lambda o: condition(o, kind).get("reason") == want

    running = await controllers.start()
    # A CD reconciled while the SA exists must flip when it vanishes: the SA watch requeues it.
    await create_cd(kube, namespace, "before", rct_name="before-channel")
    await watch_object(
        kube,
        COMPUTE_DOMAINS,
        "before",
        reason_is("Ready", "WaitingForWorkload"),
        namespace=namespace,
        within=30.0,
    )
    await kube.delete(r.SERVICE_ACCOUNTS, sa, driver_namespace)
    try:
        await _gone(kube, r.SERVICE_ACCOUNTS, sa, driver_namespace)
        await create_cd(kube, namespace, "no-sa", rct_name="no-sa-channel")
        for name in ("no-sa", "before"):
            cd = await watch_object(
                kube,
                COMPUTE_DOMAINS,
                name,
                reason_is("ChildrenReady", missing),
                namespace=namespace,
                within=30.0,
                what=f"{name}: ChildrenReady {missing}",
            )
            children = condition(cd, "ChildrenReady")
            assert children["status"] == "False"
            assert f"{driver_namespace}/{sa}" in children["message"]
            assert "cannot create daemon pods" in children["message"]
            ready = condition(cd, "Ready")
            assert (ready["status"], ready["reason"]) == ("False", missing)
    finally:
        try:
            body = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa}}
            await kube.create(r.SERVICE_ACCOUNTS, body, driver_namespace)
        except ApiError as err:
            if not err.is_already_exists:
                raise

    for name in ("no-sa", "before"):
        cd = await watch_object(
            kube,
            COMPUTE_DOMAINS,
            name,
            lambda o: condition(o, "ChildrenReady").get("status") == "True",
            namespace=namespace,
            within=30.0,
            what=f"{name}: ChildrenReady True again",
        )
        assert condition(cd, "Ready")["reason"] == "WaitingForWorkload"

    # The recovery events were queued after the warnings; once written, so were any repeats.
    await running.process.recorder.wait_idle()
    events = (await kube.list(r.EVENTS, namespace=namespace))["items"]
    for name in ("no-sa", "before"):
        warnings = [
            e
            for e in events
            if e["regarding"]["name"] == name and e["reason"] == missing and e["type"] == "Warning"
        ]
        assert len(warnings) == 1, warnings
        assert (warnings[0].get("series") or {}).get("count", 1) == 1


async def test_domain_deleted_before_its_first_reconcile_is_no_error(
    kube: KubeClient, controllers: Controllers, namespace: str
) -> None:
    """The cache can still hold a CD that was deleted (without our finalizer) a moment ago.
    Adding the finalizer then meets a real 404: routine, not a reconcile error."""
    running = await controllers.start()
    cd = await create_cd(kube, namespace, "fleeting")
    await watch_object(
        kube,
        COMPUTE_DOMAINS,
        "fleeting",
        lambda o: c.FINALIZER in _finalizers(o),
        namespace=namespace,
        within=30.0,
    )
    # What the cache held before the controller's first write: the CD as created, now gone.
    await kube.patch(COMPUTE_DOMAINS, "fleeting", {"metadata": {"finalizers": None}}, namespace)
    await kube.delete(COMPUTE_DOMAINS, "fleeting", namespace)
    await _gone(kube, COMPUTE_DOMAINS, "fleeting", namespace)
    stale = {**cd, "metadata": {**cd["metadata"], "resourceVersion": "999999999"}}
    cache = running.process.caches.cds
    assert cache.observe_write(stale), "the stale copy must be what the reconciler reads"

    result = await running.process.reconciler.reconcile(CDKey(namespace, "fleeting"))

    assert result.requeue_after is None
    assert not result.requeue
    # Its children are orphans now, and the cache this test made stale still knows the CD, so
    # no sweep comes: remove them here, so none outlives the test.
    selector = f"{c.CD_LABEL}={cd['metadata']['uid']}"
    for res in (r.DAEMONSETS, r.RESOURCE_CLAIM_TEMPLATES):
        for child in (await kube.list(res, label_selector=selector))["items"]:
            name, ns = child["metadata"]["name"], child["metadata"]["namespace"]
            await kube.patch(res, name, {"metadata": {"finalizers": None}}, ns)
            await kube.delete(res, name, ns)
        await watch_objects(
            kube, res, lambda objs: not objs, label_selector=selector, what=f"orphaned {res.kind}"
        )


def _finalizers(obj: dict[str, Any] | None) -> list[str]:
    return list(((obj or {}).get("metadata") or {}).get("finalizers") or [])
