"""Two electors on the real apiserver: one leads; handover on release and on silent death."""

from __future__ import annotations

import asyncio
import contextlib
import time

import pytest
from kubernetes_asyncio.client import ApiClient

from computedomain.runtime.client import KubeClient
from computedomain.runtime.leaderelection import LeaderElector
from computedomain.runtime.resources import LEASES
from tests.kit.waiting import eventually

pytestmark = pytest.mark.integration

LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 4.0, 3.0, 0.5


def make(kube: KubeClient, namespace: str, identity: str, release: bool = True) -> LeaderElector:
    return LeaderElector(
        kube,
        namespace,
        "runtime-test-lock",
        identity,
        lease_duration=LEASE_DURATION,
        renew_deadline=RENEW_DEADLINE,
        retry_period=RETRY_PERIOD,
        release_on_cancel=release,
    )


async def lead_forever() -> None:
    await asyncio.Event().wait()


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def first_leader(*electors: LeaderElector) -> LeaderElector:
    async def probe() -> LeaderElector | None:
        return next((e for e in electors if e.is_leader), None)

    return await eventually(probe, within=15, what="a leader", interval=0.05)


@pytest.mark.parametrize("release", [True, False], ids=["released", "killed"])
async def test_exactly_one_leads_and_the_standby_takes_over(
    api_client: ApiClient, namespace: str, release: bool
) -> None:
    kube = KubeClient.from_api_client(api_client)
    a, b = make(kube, namespace, "a", release), make(kube, namespace, "b", release)
    tasks = {
        a: asyncio.create_task(a.run(lead_forever)),
        b: asyncio.create_task(b.run(lead_forever)),
    }
    try:
        leader = await first_leader(a, b)
        standby = b if leader is a else a
        for _ in range(int(2 * LEASE_DURATION / 0.1)):  # stable for two lease durations
            assert leader.is_leader
            assert not standby.is_leader
            await asyncio.sleep(0.1)
        lease = await kube.get(LEASES, "runtime-test-lock", namespace)
        assert lease["spec"]["holderIdentity"] == leader.identity

        await stop(tasks[leader])
        stopped = time.monotonic()
        await first_leader(standby)
        handover = time.monotonic() - stopped
        if release:
            assert handover < RETRY_PERIOD * 1.2 + 1.0
        else:
            assert handover >= LEASE_DURATION - RETRY_PERIOD * 1.2 - 0.5
            assert handover < LEASE_DURATION + RETRY_PERIOD * 1.2 + 1.5

        lease = await kube.get(LEASES, "runtime-test-lock", namespace)
        assert lease["spec"]["holderIdentity"] == standby.identity
        assert lease["spec"]["leaseTransitions"] >= 1
        assert lease["spec"]["leaseDurationSeconds"] == int(LEASE_DURATION)
    finally:
        for task in tasks.values():
            await stop(task)
