"""Once every ComputeDomain has settled, the controller is quiet: no API writes, no events,
no reconcile errors, although kwok keeps renewing Node heartbeats (Node updates reach the
controller's node informer all the time)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from computedomain.api import constants as c
from computedomain.api.resources import CLIQUES, COMPUTE_DOMAINS
from computedomain.devcluster.controlplane import ControlPlane
from computedomain.devcluster.harness import Controllers, RunningController
from computedomain.devcluster.watching import watch_objects
from computedomain.runtime import resources as r
from computedomain.runtime.client import KubeClient
from computedomain.runtime.objects import condition
from tests.integration.cluster import fleet_node_names, run_control_plane
from tests.kit.controllers import create_cd

DOMAINS = 30
JOINED = 2  # of which this many get one Ready IMEX daemon each
QUIET_WINDOW = 60.0


@pytest.fixture(scope="module")
def control_plane() -> Iterator[ControlPlane]:
    """A control plane of this module's own. On the shared one, the namespaces that earlier
    tests left behind are still being emptied by the namespace controller during the window,
    and the controller rightly reacts to their CDs, claims and pods."""
    yield from run_control_plane("steady-state ")


@pytest.fixture(scope="module")
def fleet_nodes(control_plane: ControlPlane) -> list[str]:
    return fleet_node_names()


async def _join_daemon(
    kube: KubeClient, driver_ns: str, cd: dict[str, Any], node: str, ip: str
) -> None:
    """Plays NVIDIA's kubelet plugin and IMEX daemon for one node: label the node (the real
    DaemonSet controller then places a daemon pod there), make that pod Running and Ready with
    its clique label, and report the daemon Ready in the CD's clique object."""
    uid = cd["metadata"]["uid"]
    await kube.patch(r.NODES, node, {"metadata": {"labels": {c.CD_LABEL: uid}}})
    clique_id = (await kube.get(r.NODES, node))["metadata"]["labels"][c.GPU_CLIQUE_NODE_LABEL]
    pods = await watch_objects(
        kube,
        r.PODS,
        lambda objs: objs or None,
        namespace=driver_ns,
        field_selector=f"spec.nodeName={node}",
        what=f"daemon pod on {node}",
    )
    pod_name = next(iter(pods))
    await kube.patch(
        r.PODS, pod_name, {"metadata": {"labels": {c.CLIQUE_ID_LABEL: clique_id}}}, driver_ns
    )
    status = {
        "phase": "Running",
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "conditions": [{"type": "Ready", "status": "True"}],
    }
    await kube.patch(r.PODS, pod_name, {"status": status}, driver_ns, subresource="status")
    clique = {
        "apiVersion": c.API_VERSION,
        "kind": c.CLIQUE_KIND,
        "metadata": {
            "name": c.clique_name(uid, clique_id),
            "labels": {c.CD_LABEL: uid, c.CLIQUE_ID_LABEL: clique_id},
        },
        "daemons": [
            {
                "nodeName": node,
                "ipAddress": ip,
                "cliqueID": clique_id,
                "index": 0,
                "status": "Ready",
            }
        ],
    }
    await kube.create(CLIQUES, clique, driver_ns)


async def _require_no_other_domains(kube: KubeClient, namespace: str) -> None:
    """The controller watches every namespace: a CD of someone else settling or being cleaned
    up inside the window would be a write this test did not cause."""
    others = [
        f"{item['metadata']['namespace']}/{item['metadata']['name']}"
        for item in (await kube.list(COMPUTE_DOMAINS))["items"]
        if item["metadata"]["namespace"] != namespace
    ]
    if others:
        pytest.skip(f"needs a cluster without other ComputeDomains; found {others}")


def _settled(cd: dict[str, Any], joined: bool) -> bool:
    ready = condition(cd, "Ready")
    if not ready or cd.get("status", {}).get("observedGeneration") != cd["metadata"]["generation"]:
        return False
    return ready.get("status") == ("True" if joined else "False")


async def _event_versions(kube: KubeClient, namespaces: tuple[str, ...]) -> dict[str, str]:
    versions: dict[str, str] = {}
    for ns in namespaces:
        for event in (await kube.list(r.EVENTS, namespace=ns))["items"]:
            versions[f"{ns}/{event['metadata']['name']}"] = event["metadata"]["resourceVersion"]
    return versions


async def _snapshot(kube: KubeClient, namespace: str, driver_ns: str) -> dict[str, dict[str, Any]]:
    """What the controller reads and writes besides Nodes, by kind/namespace/name."""
    objects: dict[str, dict[str, Any]] = {}
    for res, ns in (
        (COMPUTE_DOMAINS, namespace),
        (CLIQUES, driver_ns),
        (r.PODS, driver_ns),
        (r.DAEMONSETS, driver_ns),
        (r.RESOURCE_CLAIM_TEMPLATES, None),
    ):
        for obj in (await kube.list(res, namespace=ns))["items"]:
            meta = obj["metadata"]
            objects[f"{res.kind}/{meta.get('namespace')}/{meta['name']}"] = obj
    return objects


def _changes(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> list[str]:
    """Objects created, deleted or changed between two snapshots, with what changed."""
    changes = []
    for key in sorted(before.keys() | after.keys()):
        old, new = before.get(key), after.get(key)
        if old is None or new is None:
            changes.append(f"{key}: {'created' if old is None else 'deleted'}")
        elif old["metadata"]["resourceVersion"] != new["metadata"]["resourceVersion"]:
            fields = sorted(
                k for k in old.keys() | new.keys() if k != "metadata" and old.get(k) != new.get(k)
            )
            changes.append(
                f"{key}: {fields or 'metadata'} {old.get('status')} -> {new.get('status')}"
            )
    return changes


async def _node_versions(kube: KubeClient) -> dict[str, str]:
    items = (await kube.list(r.NODES))["items"]
    return {node["metadata"]["name"]: node["metadata"]["resourceVersion"] for node in items}


def _writes_by_method(running: RunningController) -> dict[tuple[str, str], float]:
    return {
        (sample.labels["method"], sample.labels["code"]): sample.value
        for metric in running.registry.collect()
        if metric.name == "rest_client_requests"
        for sample in metric.samples
        if sample.name.endswith("_total") and sample.labels["method"] != "GET"
    }


def _reconcile_errors(running: RunningController) -> float:
    value = running.registry.get_sample_value(
        "controller_runtime_reconcile_errors_total", {"controller": "computedomain"}
    )
    return value or 0.0


async def test_settled_domains_cause_no_writes(
    kube: KubeClient,
    controllers: Controllers,
    namespace: str,
    driver_namespace: str,
    fleet_nodes: list[str],
) -> None:
    running = await controllers.start()
    await _require_no_other_domains(kube, namespace)
    names = [f"quiet-{i:02d}" for i in range(DOMAINS)]
    cds = [
        await create_cd(kube, namespace, name, rct_name=f"{name}-channel", num_nodes=1)
        for name in names
    ]
    joined = set(names[:JOINED])
    # One node per rack, so no two joined domains share a node.
    nodes = fleet_nodes[0:72:18]
    for index, cd in enumerate(cds[:JOINED]):
        await _join_daemon(kube, driver_namespace, cd, nodes[index], f"10.223.0.{index + 1}")

    await watch_objects(
        kube,
        COMPUTE_DOMAINS,
        lambda objs: (
            len(objs) == DOMAINS and all(_settled(cd, name in joined) for name, cd in objs.items())
        ),
        namespace=namespace,
        within=120,
        what="every ComputeDomain settled",
    )
    await running.wait_idle()
    assert _reconcile_errors(running) == 0

    writes_before = running.writes()
    by_method_before = _writes_by_method(running)
    events_before = await _event_versions(kube, (namespace, driver_namespace))
    objects_before = await _snapshot(kube, namespace, driver_namespace)
    nodes_before = await _node_versions(kube)
    started = time.monotonic()
    # A quiet window is measured, not awaited: nothing may happen in it.
    await asyncio.sleep(QUIET_WINDOW)
    elapsed = time.monotonic() - started

    new_writes = running.writes() - writes_before
    print(f"writes in a {elapsed:.0f}s quiet window over {DOMAINS} settled domains: {new_writes}")
    changes = _changes(objects_before, await _snapshot(kube, namespace, driver_namespace))
    writes = {
        key: value - by_method_before.get(key, 0.0)
        for key, value in _writes_by_method(running).items()
        if value != by_method_before.get(key, 0.0)
    }
    # What changed in the window (by anyone) is listed to explain a failure; any write fails.
    print("objects changed during the window:", *changes, sep="\n  ")
    assert new_writes == 0, f"writes {writes}; objects changed: {changes}"
    assert await _event_versions(kube, (namespace, driver_namespace)) == events_before
    assert _reconcile_errors(running) == 0
    # The window only means something if Nodes did change in it (kwok heartbeats).
    after = await _node_versions(kube)
    changed = sum(1 for name, rv in after.items() if nodes_before.get(name) != rv)
    print(f"nodes updated during the window: {changed} of {len(after)}")
    assert changed > 0
