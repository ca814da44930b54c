"""The controller's view heals after any fault on the wire (issue 18).

Our controller talks to the apiserver through the fault-injecting proxy (``tests/kit``), the
fleet simulator talks to it directly. A churn of ComputeDomains with 1-2 pod workloads runs
while the proxy delays, throttles (429 + Retry-After), fails (500/503, before and after the
apiserver acted), resets responses mid-body and cuts every watch after a few seconds. Then the
faults stop, and within a bounded time every informer's cache must equal a fresh LIST and every
CD's status must say what its cliques and daemon pods say. ``FAULT_SEED`` picks the seed.
"""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.devcluster.controlplane import ControlPlane
from computedomain.devcluster.convergence import caches_differences, status_liars
from computedomain.devcluster.faultproxy import FaultProxy, Faults, fault_proxy
from computedomain.runtime.client import KubeClient
from tests.integration.e2e_harness import STATEFULSETS, EndToEnd, cd_ready, end_to_end, workload
from tests.kit.waiting import eventually

pytestmark = pytest.mark.integration

SEED = int(os.environ.get("FAULT_SEED", "1"))
RACKS = ("r00", "r01", "r02", "r03")
CHURN_CDS = 14
CHURN_PACE = (2.0, 4.0)  # seconds between two steps of the churn: time passing by design
HEAL_WITHIN = 45.0


@pytest.fixture
async def proxy(control_plane: ControlPlane) -> AsyncIterator[FaultProxy]:
    if control_plane.workdir is None:
        pytest.skip("the fault proxy serves the dev cluster's own certificate")
    async with fault_proxy(control_plane.kubeconfig, control_plane.workdir / "pki", seed=SEED) as p:
        yield p


async def _churn(e2e: EndToEnd, rng: random.Random) -> None:
    """Create CDs with 1-2 pod workloads, deleting an older one every third step."""
    live: list[str] = []
    for index in range(CHURN_CDS):
        name = f"churn-{index:02d}"
        await e2e.create_cd(name, rct_name=f"{name}-channel", num_nodes=0)
        pods = rng.choice((1, 2))
        rack = RACKS[index % len(RACKS)]
        await e2e.run_workload(workload(name, pods, rct_name=f"{name}-channel", racks=[rack]))
        live.append(name)
        if index % 3 == 2:
            victim = live.pop(rng.randrange(len(live) - 1))
            await e2e.kube.delete(STATEFULSETS, victim, e2e.namespace)
            await e2e.kube.delete(COMPUTE_DOMAINS, victim, e2e.namespace)
        await asyncio.sleep(rng.uniform(*CHURN_PACE))


async def test_the_view_heals_after_watch_cuts_and_wire_faults(
    proxy: FaultProxy,
    kube: KubeClient,
    namespace: str,
    driver_namespace: str,
    tmp_path: Path,
) -> None:
    proxied = proxy.kubeconfig(tmp_path / "proxied.kubeconfig")
    proxy.faults = Faults.hostile(watch_cut=(2.0, 6.0))
    async with end_to_end(kube, proxied, namespace, driver_namespace) as e2e:
        controller = await e2e.start_controller()
        await e2e.start_simulator()
        await _churn(e2e, random.Random(SEED))
        proxy.faults = Faults.none()
        faulted = {fault for x in proxy.exchanges if (fault := x.fault)}
        print(f"seed {SEED}: {len(proxy.exchanges)} requests, faults {sorted(faulted)}")

        async def problems() -> list[str]:
            found = await caches_differences(controller.process.caches.all, kube)
            return found + await status_liars(kube, namespace, driver_namespace)

        async def healed() -> bool:
            return not await problems()

        # Events the apiserver wrote before an injected failure are not counted as dropped,
        # and the counter is on the controller's registry (it was on a private one).
        dropped = controller.registry.get_sample_value(
            "event_recorder_dropped_events_total", {"reason": "write_failed"}
        )
        assert dropped is not None
        try:
            await eventually(healed, within=HEAL_WITHIN, what="caches and status healed")
        except TimeoutError:
            left = await problems()
            pytest.fail(
                f"seed {SEED}: {HEAL_WITHIN:.0f}s after the faults stopped: "
                + "; ".join(left[:8])
                + (f" (+{len(left) - 8} more)" if len(left) > 8 else "")
            )


async def test_retry_after_is_honoured_on_every_write(
    proxy: FaultProxy,
    kube: KubeClient,
    namespace: str,
    driver_namespace: str,
    tmp_path: Path,
) -> None:
    """A third of the controller's writes (children, status, finalizers, labels, Events) are
    answered 429 with ``Retry-After: 1``: none is sent again sooner, and the CDs still turn
    Ready."""
    proxied = proxy.kubeconfig(tmp_path / "proxied.kubeconfig")
    proxy.faults = Faults(throttle_share=0.33, retry_after=1)
    async with end_to_end(kube, proxied, namespace, driver_namespace) as e2e:
        await e2e.start_controller()
        await e2e.start_simulator()
        names = [f"throttled-{index}" for index in range(6)]
        for index, name in enumerate(names):
            channel = f"{name}-channel"
            await e2e.create_cd(name, rct_name=channel, num_nodes=1)
            rack = RACKS[index % len(RACKS)]
            await e2e.run_workload(workload(name, 1, rct_name=channel, racks=[rack]))
        for name in names:
            await e2e.cd_until(name, cd_ready, "Ready through the throttling")
        proxy.faults = Faults.none()
    gaps = proxy.retry_gaps("throttle")
    throttled = sum(1 for x in proxy.exchanges if x.fault == "throttle")
    print(f"seed {SEED}: {throttled} writes throttled, {len(gaps)} retried, min {min(gaps):.3f}s")
    assert len(gaps) >= 5, f"too few throttled writes were retried to judge: {gaps}"
    early = [round(gap, 3) for gap in gaps if gap < 0.95]
    assert not early, f"{len(early)} of {len(gaps)} retries came before Retry-After: {early}"
