"""IMEX node indexes never change for a live node (upstream #1440, #1418).

NVIDIA's controller, its informers lagging, pruned live nodes from ``status.nodes`` and their
daemons took other indexes when they put themselves back: IMEX node IDs out of step, and CUDA's
"invalid resource handle" in running jobs. Here our controller's API traffic goes through the
fault proxy, whose daemon pod watches lag by a few seconds (a pod's clique entry is seen long
before its pod) and whose watches are all cut every few seconds, while a domain gains and loses
nodes, daemons crash and a daemon pod is replaced. A witness with its own client
(``tests/kit/indexes.py``) sees every version of the cliques and of the CD's status and fails
on any index change of a node whose daemon pod stayed alive, any entry of such a node removed,
any node listed twice and any index held twice.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from computedomain.api import constants as c
from computedomain.devcluster.controlplane import ControlPlane
from computedomain.devcluster.faultproxy import FaultProxy, Faults, fault_proxy
from computedomain.runtime.client import KubeClient
from computedomain.runtime.resources import PODS
from computedomain.sim.simulator import Simulator
from tests.integration.e2e_harness import EndToEnd, cd_ready, end_to_end, status_nodes, workload
from tests.kit.indexes import watching_indexes

pytestmark = pytest.mark.integration

# Pod events reach the controller this late; its orphan grace period in tests is 1 s.
POD_WATCH_LAG = 3.0
WITHIN = 40.0  # for each step to turn Ready
LAGGING = Faults(watch_cut=(3.0, 8.0), watch_lag=POD_WATCH_LAG, watch_lag_paths=("/pods",))


@pytest.fixture
async def proxy(control_plane: ControlPlane) -> AsyncIterator[FaultProxy]:
    if control_plane.workdir is None:
        pytest.skip("the fault proxy serves the dev cluster's own certificate")
    async with fault_proxy(control_plane.kubeconfig, control_plane.workdir / "pki", seed=3) as p:
        yield p


async def _daemon_pods(kube: KubeClient, driver_namespace: str, uid: str) -> dict[str, str]:
    """node -> daemon pod name, for live daemon pods of the CD."""
    listed = await kube.list(PODS, driver_namespace, label_selector=f"{c.CD_LABEL}={uid}")
    return {
        p["spec"]["nodeName"]: p["metadata"]["name"]
        for p in listed["items"]
        if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp")
    }


async def _scenario(
    e2e: EndToEnd, sim: Simulator, kube: KubeClient, driver_namespace: str
) -> dict[str, Any]:
    cd = await e2e.create_cd("steady", rct_name="steady-channel", num_nodes=4)
    uid = cd["metadata"]["uid"]
    job = workload("steady", 4, rct_name="steady-channel", racks=["r01"])
    await e2e.run_workload(job)
    await e2e.cd_until("steady", _ready_with(4), "Ready with 4 nodes", within=WITHIN)
    # Nodes join while the others run (their pods reach the controller 3 s late).
    await e2e.scale("steady", 7)
    await e2e.cd_until("steady", _ready_with(7), "Ready with 7 nodes", within=WITHIN)
    # Daemons crash and come back (new IP, same pod), one pod is replaced.
    pods = await _daemon_pods(kube, driver_namespace, uid)
    for node in sorted(pods)[:2]:
        assert sim.crash_daemon(node), node
    await kube.delete(PODS, pods[sorted(pods)[2]], driver_namespace)
    # A node leaves (a gap in the indexes), then two join at once.
    await e2e.scale("steady", 6)
    await e2e.cd_until("steady", _ready_with(6), "Ready with 6 nodes", within=WITHIN)
    await e2e.scale("steady", 8)
    final = await e2e.cd_until("steady", _ready_with(8), "Ready with 8 nodes", within=WITHIN)
    assert final is not None
    return final


def _ready_with(count: int) -> Callable[[dict[str, Any] | None], bool]:
    def check(cd: dict[str, Any] | None) -> bool:
        return cd_ready(cd) and len(status_nodes(cd)) == count

    return check


async def test_indexes_of_live_nodes_never_change_under_lag_and_watch_cuts(
    proxy: FaultProxy,
    kube: KubeClient,
    namespace: str,
    driver_namespace: str,
    tmp_path: Path,
) -> None:
    started = time.monotonic()
    proxied = proxy.kubeconfig(tmp_path / "proxied.kubeconfig")
    proxy.faults = LAGGING
    async with (
        watching_indexes(kube, namespace, driver_namespace) as witness,
        end_to_end(kube, proxied, namespace, driver_namespace) as e2e,
    ):
        await e2e.start_controller()
        sim = await e2e.start_simulator()
        try:
            final = await _scenario(e2e, sim, kube, driver_namespace)
        except TimeoutError as timeout:
            # A broken domain (entries put back NotReady) never turns Ready: the witness's
            # findings say why, before the timeout does.
            problems = await witness.stop()
            pytest.fail("\n".join([*problems, f"and then: {str(timeout)[:300]}"]))
        # Let the lagging watch and a few more cuts pass over the settled domain.
        await asyncio.sleep(POD_WATCH_LAG + 2)
        problems = await witness.stop()
        ledger = witness.ledger
        histories = {k: v for k, v in ledger.seen.items() if len(v) > 1}
        print(
            f"{time.monotonic() - started:.1f}s; {len(proxy.exchanges)} proxied requests, "
            f"{sum(1 for x in proxy.exchanges if x.fault.startswith('cut'))} watch cuts; "
            f"final nodes {sorted((n['name'], n['index']) for n in status_nodes(final).values())}; "
            f"indexes that moved (legitimately or not): {histories}"
        )
        assert not problems, "\n".join(problems)
        assert sum(1 for x in proxy.exchanges if x.fault.startswith("cut")) >= 3
