"""A node moves to another NVLink clique while its domain runs (NVIDIA v0.5 fabric re-partitioning).

NVIDIA's v0.5 kubelet plugin re-reads the node's clique every 10 minutes and, when it changed,
relabels the Node (``nvidia.com/gpu.clique``). The running IMEX daemon keeps the ``CLIQUE_ID``
its claim was prepared with (a CDI variable, unchanged by container restarts) and so stays in
``<cdUID>.<oldClique>``; only a new daemon pod, prepared again, joins ``<cdUID>.<newClique>``.
The old pod removes its own entry as it stops; if that fails, our pruner removes it (the node's
daemon pod now carries the new clique label). Meanwhile the witness of ``tests/kit/indexes.py``
checks that no node is listed twice and no live node's index changes.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from computedomain.api import constants as c
from computedomain.api.resources import CLIQUES, COMPUTE_DOMAINS
from computedomain.runtime.client import KubeClient
from computedomain.runtime.resources import NODES, PODS
from tests.integration.e2e_harness import cd_ready, end_to_end, status_nodes, workload
from tests.kit.indexes import watching_indexes
from tests.kit.waiting import eventually

pytestmark = pytest.mark.integration


async def _daemon_pod(
    kube: KubeClient, driver_namespace: str, uid: str, node: str
) -> dict[str, Any]:
    listed = await kube.list(PODS, driver_namespace, label_selector=f"{c.CD_LABEL}={uid}")
    pods = [
        p
        for p in listed["items"]
        if p["spec"].get("nodeName") == node and not p["metadata"].get("deletionTimestamp")
    ]
    assert len(pods) == 1, pods
    pod: dict[str, Any] = pods[0]
    return pod


async def test_a_node_moving_cliques_is_listed_once_and_the_domain_stays_ready(
    kube: KubeClient, kubeconfig_path: Path, namespace: str, driver_namespace: str
) -> None:
    started = time.monotonic()
    async with (
        watching_indexes(kube, namespace, driver_namespace) as witness,
        end_to_end(kube, kubeconfig_path, namespace, driver_namespace) as e2e,
    ):
        controller = await e2e.start_controller()
        await e2e.start_simulator()
        cd = await e2e.create_cd("mover", rct_name="mover-channel", num_nodes=3)
        uid = cd["metadata"]["uid"]
        await e2e.run_workload(workload("mover", 3, rct_name="mover-channel", racks=["r02"]))
        ready = await e2e.cd_until("mover", cd_ready, "Ready", within=40)
        before = status_nodes(ready)
        node = sorted(before)[0]
        old_clique = before[node]["cliqueID"]
        new_clique = old_clique.rsplit(".", 1)[0] + ".9"
        old_pod = await _daemon_pod(kube, driver_namespace, uid, node)
        label = {"metadata": {"labels": {c.GPU_CLIQUE_NODE_LABEL: new_clique}}}
        restore = {"metadata": {"labels": {c.GPU_CLIQUE_NODE_LABEL: old_clique}}}
        await kube.patch(NODES, node, label)
        try:
            # The plugin's re-read relabelled the node; the daemon still runs in the old clique,
            # and that is what IMEX uses: the status keeps it there, the domain stays Ready.
            nodes_cache = controller.process.caches.nodes.store

            async def relabel_seen() -> bool:
                seen = nodes_cache.get(node) or {}
                return bool(seen["metadata"]["labels"].get(c.GPU_CLIQUE_NODE_LABEL) == new_clique)

            await eventually(relabel_seen, within=10, what="the relabel in the controller's cache")
            await controller.wait_idle(within=5.0)
            still = await kube.get(COMPUTE_DOMAINS, "mover", namespace)
            assert status_nodes(still)[node]["cliqueID"] == old_clique
            # The status names one clique, so do its count and SingleClique (not the label).
            assert _conditions(still) == {
                "cliqueCount": 1,
                "Ready": ("True", "AllNodesJoined"),
                "SingleClique": ("True", "OneClique"),
            }, _conditions(still)
            print("after relabel:", _conditions(still))
            # The daemon pod is replaced (prepared again): the new one joins the new clique,
            # the old one removes its entry as it stops.
            await kube.delete(PODS, old_pod["metadata"]["name"], driver_namespace)

            def moved(cd: dict[str, Any] | None) -> bool:
                nodes = status_nodes(cd)
                return (
                    cd_ready(cd)
                    and len(nodes) == 3
                    and nodes[node]["cliqueID"] == new_clique
                    and nodes[node]["index"] == 0
                )

            after = await e2e.cd_until("mover", moved, "Ready, the node in its new clique", 40)
            print("after the daemon moved:", _conditions(after))
            cliques = await e2e.cliques_of(uid, lambda found: len(found) == 2, "two cliques")
            members = {
                cl["metadata"]["name"]: sorted(d["nodeName"] for d in cl.get("daemons") or [])
                for cl in cliques.values()
            }
            assert node not in members[f"{uid}.{old_clique}"], members
            assert members[f"{uid}.{new_clique}"] == [node], members

            # A daemon that died without its clean-up leaves its old entry behind: the pruner
            # removes it (the node's daemon pod is labelled with the new clique now), and the
            # status lists the node once all along.
            old = await kube.get(CLIQUES, f"{uid}.{old_clique}", driver_namespace)
            stale = dict(before[node], nodeName=node)
            stale.pop("name")
            old["daemons"] = [*(old.get("daemons") or []), stale]
            await kube.replace(CLIQUES, old, driver_namespace)
            await e2e.cliques_of(
                uid,
                lambda found: (
                    node
                    not in {
                        d["nodeName"] for d in found[f"{uid}.{old_clique}"].get("daemons") or []
                    }
                ),
                "the stale entry pruned",
            )
            final = await e2e.cd_until("mover", moved, "Ready, the node listed once", 20)
            assert status_nodes(final)[node]["cliqueID"] == new_clique
        finally:
            await kube.patch(NODES, node, restore)
        problems = await witness.stop()
        print(f"{time.monotonic() - started:.1f}s")
        assert not problems, "\n".join(problems)


def _conditions(cd: dict[str, Any] | None) -> dict[str, Any]:
    status = (cd or {}).get("status") or {}
    conditions = {
        x["type"]: (x["status"], x["reason"])
        for x in status.get("conditions") or []
        if x["type"] in ("Ready", "SingleClique")
    }
    return {"cliqueCount": status.get("cliqueCount"), **conditions}
