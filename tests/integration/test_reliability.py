"""Issue 9 items on the real control plane with the fleet simulator: a daemon whose Node is
deleted never counts as ready (9.7), and a ComputeDomain without spec gets no children (9.6)."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from computedomain.api import constants as c
from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.runtime import resources as r
from computedomain.runtime.objects import condition
from computedomain.sim.context import NODE_NOT_READY_LABEL
from computedomain.sim.install import create_fleet, wait_nodes_ready
from tests.integration.cluster import TEST_FLEET
from tests.integration.e2e_harness import EndToEnd, cd_ready, status_nodes, workload

pytestmark = pytest.mark.integration


async def test_a_deleted_node_stops_counting_as_a_ready_daemon(
    e2e: EndToEnd, api_client: ApiClient
) -> None:
    """The daemon's clique entry outlives its Node until garbage collection (minutes); the
    status must not: within seconds the node is NotReady (or gone) and Ready is False."""
    await e2e.start_controller()
    await e2e.start_simulator()
    await e2e.create_cd("lost", num_nodes=2)
    await e2e.run_workload(workload("lost", 2, racks=["r00"]))
    cd = await e2e.cd_until("lost", lambda o: cd_ready(o) and len(status_nodes(o)) == 2, "Ready")
    victim = sorted(status_nodes(cd))[0]
    try:
        await e2e.kube.delete(r.NODES, victim)

        def told(o: dict[str, Any] | None) -> bool:
            entry = status_nodes(o).get(victim)
            return (entry is None or entry["status"] == c.STATUS_NOT_READY) and not cd_ready(o)

        cd = await e2e.cd_until("lost", told, f"{victim} no longer a ready daemon", within=30)
        assert cd is not None
        assert cd["status"]["status"] == c.STATUS_NOT_READY
        message = condition(cd, "DaemonsReady").get("message", "")
        print(f"DaemonsReady after deleting {victim}: {message}")
        if victim in status_nodes(cd):
            assert f"{victim}: Node deleted" in message
    finally:
        # Later tests share the fleet: bring the node (and its ResourceSlice) back.
        await e2e.scale("lost", 0)
        await create_fleet(api_client, TEST_FLEET)
        await wait_nodes_ready(api_client, [victim], timeout=60)


async def test_a_node_turned_not_ready_stops_counting_as_a_ready_daemon(
    e2e: EndToEnd, api_client: ApiClient
) -> None:
    """Readiness is watched only on Nodes carrying the CD label (issue 10.3): a joined node
    that turns NotReady is named in DaemonsReady and the CD is no longer Ready."""
    await e2e.start_controller()
    await e2e.start_simulator()
    await e2e.create_cd("sick", num_nodes=2)
    await e2e.run_workload(workload("sick", 2, racks=["r01"]))
    cd = await e2e.cd_until("sick", lambda o: cd_ready(o) and len(status_nodes(o)) == 2, "Ready")
    assert cd is not None
    victim = sorted(status_nodes(cd))[0]
    node = await e2e.kube.get(r.NODES, victim)
    assert node["metadata"]["labels"].get(c.CD_LABEL) == cd["metadata"]["uid"]
    try:
        # kwok's node-not-ready stage turns Ready False once this label is on.
        chaos = {"metadata": {"labels": {NODE_NOT_READY_LABEL: "true"}}}
        await e2e.kube.patch(r.NODES, victim, chaos)

        def told(o: dict[str, Any] | None) -> bool:
            message = condition(o, "DaemonsReady").get("message", "")
            return f"{victim}: Node NotReady" in message and not cd_ready(o)

        cd = await e2e.cd_until("sick", told, f"{victim} reported NotReady", within=30)
        assert cd is not None
        assert cd["status"]["status"] == c.STATUS_NOT_READY
    finally:
        # kwok does not undo the chaos stage: replace the node for the tests sharing the fleet.
        await e2e.scale("sick", 0)
        await e2e.kube.delete(r.NODES, victim)
        await create_fleet(api_client, TEST_FLEET)
        await wait_nodes_ready(api_client, [victim], timeout=60)


async def test_a_domain_without_spec_gets_no_children_and_says_why(
    e2e: EndToEnd, driver_namespace: str
) -> None:
    """The CRD admits `{"metadata": {"name": "x"}}` (as upstream). It cannot work: no
    DaemonSet or claim template, status NotReady, InvalidSpec, one Warning."""
    await e2e.start_controller()
    body = {"apiVersion": c.API_VERSION, "kind": c.CD_KIND, "metadata": {"name": "bare"}}
    created = await e2e.kube.create(COMPUTE_DOMAINS, body, e2e.namespace)
    uid = created["metadata"]["uid"]
    cd = await e2e.cd_until(
        "bare", lambda o: condition(o, "Ready").get("reason") == "InvalidSpec", "InvalidSpec"
    )
    assert cd is not None
    assert cd["status"]["status"] == c.STATUS_NOT_READY
    assert "spec.channel.resourceClaimTemplate.name" in condition(cd, "Ready")["message"]
    events = await e2e.events_for(
        "bare",
        lambda es: any(e.get("reason") == "InvalidSpec" for e in es),
        "an InvalidSpec warning",
    )
    warnings = [e for e in events if e.get("reason") == "InvalidSpec"]
    assert len(warnings) == 1
    assert warnings[0]["type"] == "Warning"
    await e2e.controllers.running[0].wait_idle()
    for res in (r.DAEMONSETS, r.RESOURCE_CLAIM_TEMPLATES):
        found = await e2e.kube.list(res, label_selector=f"{c.CD_LABEL}={uid}")
        assert found["items"] == [], f"{res.kind} made for a ComputeDomain without spec"
