"""A leader resumed after a pause longer than its renew deadline (SIGSTOP, a frozen VM): the
fence refuses every write of its queued reconciles, and the process says so in one line with the
count, not one ``Reconciler error`` per refused write. The real pieces together: LeaderElector,
KubeClient with its fence, WorkQueue and Controller, on a FakeClock and the kit's fake Lease."""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient, Configuration
from prometheus_client import CollectorRegistry

from computedomain.runtime.client import ApiClientConnection, KubeClient
from computedomain.runtime.controller import Controller, Result
from computedomain.runtime.leaderelection import LeaderElector, LeadershipLost
from computedomain.runtime.metrics import RuntimeMetrics
from computedomain.runtime.resources import LEASES, NODES, Resource
from computedomain.runtime.workqueue import WorkQueue
from tests.kit.clock import FakeClock, settle
from tests.unit.runtime.test_leaderelection import LeaseStore

KEYS = [f"node-{i}" for i in range(40)]


class Replica:
    """One controller replica: an elector whose work is a controller writing through a fenced
    client (to an address nothing listens on: a write that got past the fence would fail)."""

    def __init__(self, store: LeaseStore) -> None:
        self.clock = FakeClock()
        self.registry = CollectorRegistry()
        metrics = RuntimeMetrics(self.registry)
        self.elector = LeaderElector(
            store, "ns", "lock", "a", clock=self.clock, metrics=metrics, rng=random.Random(0)
        )
        configuration = Configuration()
        configuration.host = "https://127.0.0.1:1"
        self.client = KubeClient(ApiClientConnection(ApiClient(configuration)), metrics=metrics)
        self.client.write_fence = self.elector.write_fence
        self.queue: WorkQueue[str] = WorkQueue("ctl", clock=self.clock, metrics=metrics)
        self.controller = Controller(
            "ctl", self.queue, self.reconcile, workers=4, metrics=metrics, clock=self.clock
        )

    async def reconcile(self, key: str) -> Result:
        await self.client.patch(NODES, key, {"metadata": {"labels": {"a": "b"}}})
        return Result()

    async def lead(self) -> None:
        try:
            await self.controller.run()
        finally:
            self.queue.shutdown(drain=False)

    def fenced(self) -> float:
        labels = {"code": "<fenced>", "method": "PATCH", "host": self.client.host}
        return self.registry.get_sample_value("rest_client_requests_total", labels) or 0.0


def lines(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str]]:
    return [(r.levelname, r.getMessage()) for r in caplog.records if r.levelno >= logging.INFO]


async def test_a_deposed_leader_says_once_how_many_writes_it_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    replica = Replica(LeaseStore())
    task = asyncio.create_task(replica.elector.run(replica.lead))
    await replica.clock.advance(3)
    assert replica.elector.holds_lease()
    with caplog.at_level(logging.DEBUG, logger="computedomain"):
        replica.clock.freeze_for(10.5)  # SIGSTOP ... SIGCONT, past the renew deadline
        for key in KEYS:  # what the informers delivered meanwhile
            replica.queue.add(key)
        while not task.done():
            await replica.clock.advance(0.5)
        with pytest.raises(LeadershipLost):
            await task
    refused = replica.fenced()
    assert refused >= len(KEYS)  # every reconcile wrote, none got through
    assert "Reconciler error" not in caplog.text
    assert [line for line in lines(caplog) if line[0] != "INFO"] == [
        ("ERROR", "Failed to renew lease, leadership lost"),
        (
            "WARNING",
            f"Refused {refused:.0f} writes while leadership could not be proven; leadership lost",
        ),
    ]
    (said,) = [r for r in caplog.records if r.levelname == "WARNING"]
    assert said.__dict__["refusedWrites"] == refused
    assert said.__dict__["lease"] == "ns/lock"
    await replica.client.close()


class SlowRenewal(LeaseStore):
    """Holds a Lease update until ``answer`` is set: a renewal sent just before the pause."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.held = asyncio.Event()
        self.answer = asyncio.Event()
        self.hold = False

    async def replace(
        self,
        res: Resource,
        body: dict[str, Any],
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        if self.hold and res == LEASES:
            self.held.set()
            await self.answer.wait()
        return await super().replace(res, body, namespace, subresource)


async def test_a_leader_that_proves_its_lease_again_says_how_many_writes_it_refused(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = SlowRenewal()
    replica = Replica(store)
    task = asyncio.create_task(replica.elector.run(replica.lead))
    await replica.clock.advance(3)
    store.hold = True
    await replica.clock.advance(3)  # the next renewal is sent, and held
    assert store.held.is_set()
    with caplog.at_level(logging.DEBUG, logger="computedomain"):
        replica.clock.freeze_for(10.5)
        for key in KEYS:
            replica.queue.add(key)
        await settle()
        refused = replica.fenced()
        assert refused == len(KEYS)
        store.hold = False
        store.answer.set()  # the apiserver took the renewal: still ours
        await settle()
    assert replica.elector.holds_lease()
    assert not task.done()
    assert "Reconciler error" not in caplog.text
    assert [line for line in lines(caplog) if line[0] != "INFO"] == [
        (
            "WARNING",
            f"Refused {refused:.0f} writes while leadership could not be proven; "
            "lease renewed, writing again",
        )
    ]
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    # Reported already: stopping says nothing more about them.
    assert len([r for r in caplog.records if r.levelname == "WARNING"]) == 1
    await replica.client.close()
