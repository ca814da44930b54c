"""The clique label may go away for a while (issue 30), on the real control plane with the
simulated fleet: since NVIDIA's v0.5 its kubelet plugin removes ``nvidia.com/gpu.clique`` from
its Node when it stops (a rolling upgrade does so on every GPU node). A Ready domain whose
nodes lose the label is not written to and stays Ready; the clique gauges and ``kubectl cdom
cliques`` count those nodes as ``<label missing>``; with the label back all is as before."""

from __future__ import annotations

from pathlib import Path

import pytest

from computedomain.api import constants as c
from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.devcluster.harness import RunningController
from computedomain.domain.topology import LABEL_MISSING
from computedomain.runtime import resources as r
from tests.integration.e2e_harness import EndToEnd, cd_ready, status_nodes, workload
from tests.kit.controllers import clique_gauges
from tests.kit.kubectl_plugin import cliques_rows
from tests.kit.waiting import eventually

pytestmark = pytest.mark.integration

NAME = "gap"
SIZE = 4


def domain_cliques(controller: RunningController, namespace: str) -> float | None:
    for metric in controller.registry.collect():
        for sample in metric.samples:
            if sample.name == "computedomain_cliques" and sample.labels == {
                "namespace": namespace,
                "name": NAME,
            }:
                return float(sample.value)
    return None


async def set_clique_label(e2e: EndToEnd, nodes: set[str], clique: str | None) -> None:
    """What NVIDIA's kubelet plugin does when it starts (the clique) and stops (None)."""
    for node in sorted(nodes):
        patch = {"metadata": {"labels": {c.GPU_CLIQUE_NODE_LABEL: clique}}}
        await e2e.kube.patch(r.NODES, node, patch)


async def test_a_ready_domain_is_left_alone_while_its_nodes_lose_the_clique_label(
    e2e: EndToEnd, kubeconfig_path: Path
) -> None:
    controller = await e2e.start_controller()
    await e2e.start_simulator()
    cd = await e2e.create_cd(NAME, num_nodes=SIZE)
    uid = cd["metadata"]["uid"]
    await e2e.run_workload(workload(NAME, SIZE, racks=["r01"]))
    held = await e2e.nodes_labelled(uid, lambda names: len(names) == SIZE, f"{SIZE} held")
    await e2e.cd_until(
        NAME, lambda cd: cd_ready(cd) and len(status_nodes(cd)) == SIZE, "Ready on every node"
    )
    clique = (await e2e.kube.get(r.NODES, min(held)))["metadata"]["labels"][c.GPU_CLIQUE_NODE_LABEL]
    await controller.wait_idle(timers=False)
    before = await e2e.kube.get(COMPUTE_DOMAINS, NAME, e2e.namespace)
    assert (before["status"]["cliqueCount"], domain_cliques(controller, e2e.namespace)) == (1, 1)
    rows_before = await cliques_rows(kubeconfig_path)
    assert LABEL_MISSING not in rows_before
    gauges_before = await eventually(
        lambda: _settled(controller, clique, SIZE), within=30, what="clique gauges"
    )
    writes = controller.writes()

    await set_clique_label(e2e, held, None)
    try:
        # Counted under <label missing>, not dropped: by the gauge and by kubectl cdom.
        async def label_missing() -> dict[str, dict[str, int]] | None:
            gauges = clique_gauges(controller)
            return gauges if gauges.get(LABEL_MISSING, {}).get("total") == SIZE else None

        gauges = await eventually(label_missing, within=30, what="<label missing> in the gauge")
        assert gauges[LABEL_MISSING] == {"total": SIZE, "ready": SIZE, "held": SIZE, "free": 0}
        assert gauges[clique]["total"] == gauges_before[clique]["total"] - SIZE
        rows = await cliques_rows(kubeconfig_path)
        missing = rows[LABEL_MISSING]
        assert (missing["nodes"], missing["held"]) == (SIZE, SIZE)
        assert missing["domains"] == {f"{e2e.namespace}/{NAME}": SIZE}
        assert rows[clique]["nodes"] == rows_before[clique]["nodes"] - SIZE
        assert rows["<none>"] == rows_before["<none>"]  # nodes without NVLink stay apart

        # The domain: no write, still Ready, still one clique.
        await controller.wait_idle(timers=False)
        during = await e2e.kube.get(COMPUTE_DOMAINS, NAME, e2e.namespace)
        assert during["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
        assert during["status"] == before["status"]
        assert domain_cliques(controller, e2e.namespace) == 1
        assert controller.writes() == writes
    finally:
        await set_clique_label(e2e, held, clique)

    # The plugin is back: all as before, still without a write.
    await eventually(lambda: _settled(controller, clique, SIZE), within=30, what="label back")
    assert clique_gauges(controller) == gauges_before
    assert await cliques_rows(kubeconfig_path) == rows_before
    await controller.wait_idle(timers=False)
    after = await e2e.kube.get(COMPUTE_DOMAINS, NAME, e2e.namespace)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert controller.writes() == writes


async def _settled(
    controller: RunningController, clique: str, held: int
) -> dict[str, dict[str, int]] | None:
    """The gauges once they count ``held`` nodes held in ``clique`` and none label-missing."""
    gauges = clique_gauges(controller)
    if LABEL_MISSING in gauges or gauges.get(clique, {}).get("held") != held:
        return None
    return gauges
