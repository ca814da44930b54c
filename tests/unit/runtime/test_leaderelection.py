"""Timing decisions of the elector on a FakeClock, against the kit's fake apiserver (409 on a
stale update, AlreadyExists, outages and 429s as the apiserver answers them)."""

import asyncio
import random
from dataclasses import dataclass
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from computedomain.runtime.client import ApiError
from computedomain.runtime.leaderelection import LeaderElector, LeadershipLost
from computedomain.runtime.metrics import RuntimeMetrics
from computedomain.runtime.resources import LEASES, Resource
from tests.kit.clock import FakeClock, settle
from tests.kit.fakeapi import FakeApiServer


@dataclass
class LeaseStore(FakeApiServer):
    """The kit's fake apiserver, read as one Lease: its writes and its holder."""

    down: bool = False

    def __post_init__(self) -> None:
        self.refuse = lambda verb, res: (
            ApiError(503, "ServiceUnavailable", "down") if self.down else None
        )

    @property
    def lease(self) -> dict[str, Any] | None:
        return self.objects.get(("leases", "ns", "lock"))

    @property
    def writes(self) -> list[dict[str, Any]]:
        """The spec of each stored version of the Lease, oldest first."""
        return [version["spec"] for version in self.history(LEASES, "lock", "ns")]

    @property
    def holder(self) -> str:
        return str((self.lease or {}).get("spec", {}).get("holderIdentity") or "")


def elector(
    store: LeaseStore,
    clock: FakeClock,
    identity: str,
    registry: CollectorRegistry | None = None,
    restart_prefix: str | None = None,
) -> LeaderElector:
    return LeaderElector(
        store,
        "ns",
        "lock",
        identity,
        restart_prefix=restart_prefix,
        clock=clock,
        metrics=RuntimeMetrics(registry or CollectorRegistry()),
        rng=random.Random(0),
    )


async def forever() -> None:
    await asyncio.Event().wait()


def test_timings_are_validated() -> None:
    with pytest.raises(ValueError, match="lease_duration"):
        LeaderElector(LeaseStore(), "ns", "l", "me", lease_duration=10, renew_deadline=10)
    with pytest.raises(ValueError, match=r"1\.2"):
        LeaderElector(LeaseStore(), "ns", "l", "me", renew_deadline=2.3, retry_period=2)


async def test_acquires_an_absent_lease_and_renews_it() -> None:
    clock, store, registry = FakeClock(), LeaseStore(), CollectorRegistry()
    a = elector(store, clock, "a", registry)
    started = asyncio.Event()

    async def lead() -> None:
        started.set()
        await forever()

    task = asyncio.create_task(a.run(lead))
    await settle()
    assert started.is_set()
    assert a.is_leader
    assert registry.get_sample_value("leader_election_master_status", {"name": "lock"}) == 1
    first = store.writes[0]
    assert first["holderIdentity"] == "a"
    assert first["leaseDurationSeconds"] == 15
    assert first["leaseTransitions"] == 0
    assert first["renewTime"].endswith("Z")
    assert len(first["renewTime"].split(".")[1]) == 7  # six digits + Z

    await clock.advance(10)
    renewals = len(store.writes) - 1
    assert 3 <= renewals <= 5  # every 2-2.4 s
    assert store.writes[-1]["acquireTime"] == first["acquireTime"]
    assert store.writes[-1]["renewTime"] != first["renewTime"]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert registry.get_sample_value("leader_election_master_status", {"name": "lock"}) == 0


async def test_standby_waits_for_the_lease_duration_of_silence_then_takes_over() -> None:
    clock, store = FakeClock(), LeaseStore()
    a = elector(store, clock, "a")
    b = elector(store, clock, "b")
    a.release_on_cancel = False
    leader_a = asyncio.create_task(a.run(forever))
    await settle()
    standby = asyncio.create_task(b.run(forever))
    await clock.advance(30)
    assert a.is_leader
    assert not b.is_leader, "a renewing lease must not be taken"

    leader_a.cancel()  # dies without releasing
    with pytest.raises(asyncio.CancelledError):
        await leader_a
    died_at = clock.now()
    while not b.is_leader:
        await clock.advance(0.5)
    waited = clock.now() - died_at
    assert 13 <= waited <= 15 + 2.4 + 0.5
    assert store.holder == "b"
    assert store.writes[-1]["leaseTransitions"] == 1
    standby.cancel()
    with pytest.raises(asyncio.CancelledError):
        await standby


async def test_release_on_cancel_lets_the_standby_in_within_a_retry_period() -> None:
    clock, store = FakeClock(), LeaseStore()
    a = elector(store, clock, "a")
    b = elector(store, clock, "b")
    leader_a = asyncio.create_task(a.run(forever))
    await settle()
    standby = asyncio.create_task(b.run(forever))
    await clock.advance(5)
    leader_a.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leader_a
    released = store.writes[-1]
    assert released["holderIdentity"] == ""
    assert released["leaseDurationSeconds"] == 1
    released_at = clock.now()
    while not b.is_leader:
        await clock.advance(0.1)
    assert clock.now() - released_at <= 2 * 1.2 + 0.1
    standby.cancel()
    with pytest.raises(asyncio.CancelledError):
        await standby


@dataclass
class RepliesLost(LeaseStore):
    """Applies a renewal, then never answers it (as a reply held up on a loaded apiserver)."""

    lose_replies: bool = False

    async def replace(
        self,
        res: Resource,
        body: dict[str, Any],
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        stored = await super().replace(res, body, namespace, subresource)
        if self.lose_replies and body["spec"].get("holderIdentity"):
            await forever()
        return stored


async def leader_awaiting_a_lost_reply(store: RepliesLost) -> asyncio.Task[None]:
    """Leader "a" whose latest renewal the store applied and never answered."""
    clock = FakeClock()
    leader_a = asyncio.create_task(elector(store, clock, "a").run(forever))
    await settle()
    store.lose_replies = True
    renewals = len(store.writes)
    await clock.advance(2.4)
    assert len(store.writes) == renewals + 1, "one renewal applied, its reply pending"
    return leader_a


async def test_a_leader_cancelled_while_its_renewal_is_unanswered_still_releases() -> None:
    """The renewal was applied but its reply never read: the release, sent from the record
    written before it, gets a 409. It must read the Lease again and release that, or the
    standby (and NVIDIA's controller after a swap back) waits out the whole lease duration."""
    store = RepliesLost()
    leader_a = await leader_awaiting_a_lost_reply(store)
    leader_a.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leader_a
    assert store.holder == ""
    assert store.writes[-1]["leaseDurationSeconds"] == 1


async def test_a_release_after_a_conflict_leaves_another_holder_alone() -> None:
    store = RepliesLost()
    leader_a = await leader_awaiting_a_lost_reply(store)
    lease = store.lease
    assert lease is not None
    store.add(LEASES, {**lease, "spec": {**lease["spec"], "holderIdentity": "b"}})
    writes = len(store.writes)
    leader_a.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leader_a
    assert store.holder == "b"
    assert len(store.writes) == writes


async def test_failing_renewals_lose_leadership_after_the_renew_deadline() -> None:
    clock, store, registry = FakeClock(), LeaseStore(), CollectorRegistry()
    a = elector(store, clock, "a", registry)
    work_cancelled = asyncio.Event()

    async def lead() -> None:
        try:
            await forever()
        finally:
            work_cancelled.set()

    task = asyncio.create_task(a.run(lead))
    await settle()
    await clock.advance(3)
    last_renew = clock.now()
    store.down = True
    while not task.done():
        await clock.advance(0.5)
    with pytest.raises(LeadershipLost):
        await task
    # The deadline runs from the last successful renew, which came at most one jittered retry
    # period before `last_renew`.
    lost_after = clock.now() - last_renew
    assert 10 - 2.4 <= lost_after <= 10 + 0.5
    assert work_cancelled.is_set()
    assert not a.is_leader
    assert registry.get_sample_value("leader_election_master_status", {"name": "lock"}) == 0
    assert (registry.get_sample_value("leader_election_slowpath_total", {"name": "lock"}) or 0) >= 1


async def test_callback_returning_ends_run() -> None:
    clock, store = FakeClock(), LeaseStore()
    a = elector(store, clock, "a")
    done: list[bool] = []

    async def lead() -> None:
        done.append(True)

    task = asyncio.create_task(a.run(lead))
    await clock.advance(3)
    await asyncio.wait_for(task, 1)
    assert done == [True]


POD_A1 = "ctrl-a-00000000-0000-4000-8000-000000000001"
POD_A2 = "ctrl-a-00000000-0000-4000-8000-000000000002"
POD_B = "ctrl-b-00000000-0000-4000-8000-000000000003"


async def test_a_pause_longer_than_the_renew_deadline_fences_writes_at_once() -> None:
    clock, store = FakeClock(), LeaseStore()
    a = elector(store, clock, "a")
    task = asyncio.create_task(a.run(forever))
    await clock.advance(3)
    assert a.holds_lease()
    clock.freeze_for(10.5)  # SIGSTOP ... SIGCONT: no timer has run yet
    assert a.is_leader
    assert not a.holds_lease()  # no write may go out before the renew loop runs
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_a_lease_seen_held_by_another_ends_leadership_without_waiting() -> None:
    clock, store = FakeClock(), LeaseStore()
    a = elector(store, clock, "a")
    task = asyncio.create_task(a.run(forever))
    await clock.advance(3)
    assert store.holder == "a"
    # The standby took over while "a" was paused: the Lease names it now.
    assert store.lease is not None
    store.lease["spec"]["holderIdentity"] = "b"
    store.bump(LEASES, "lock", "ns")
    await clock.advance(2.5)
    assert task.done()
    with pytest.raises(LeadershipLost, match="held by b"):
        await task
    assert not a.holds_lease()
    assert store.holder == "b"  # and it never took it back


async def test_a_restarted_container_of_the_same_pod_takes_its_lease_over_at_once() -> None:
    clock, store = FakeClock(), LeaseStore()
    first = LeaderElector(
        store, "ns", "lock", POD_A1, clock=clock, release_on_cancel=False, rng=random.Random(0)
    )
    task = asyncio.create_task(first.run(forever))
    await clock.advance(3)
    task.cancel()  # killed: no release
    await asyncio.gather(task, return_exceptions=True)
    assert store.holder == POD_A1

    other_pod = elector(store, clock, POD_B, restart_prefix="ctrl-b-")
    waiting = asyncio.create_task(other_pod.run(forever))
    restarted = elector(store, clock, POD_A2, restart_prefix="ctrl-a-")
    again = asyncio.create_task(restarted.run(forever))
    await clock.advance(2.5)  # far less than the 15 s lease
    assert store.holder == POD_A2
    assert restarted.is_leader
    assert not other_pod.is_leader
    for t in (waiting, again):
        t.cancel()
    await asyncio.gather(waiting, again, return_exceptions=True)


async def test_a_pod_whose_name_extends_ours_is_not_a_previous_container() -> None:
    clock, store = FakeClock(), LeaseStore()
    holder = "ctrl-a-x-00000000-0000-4000-8000-000000000009"
    store.add(
        LEASES,
        {
            "metadata": {"name": "lock", "namespace": "ns"},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15},
        },
    )
    restarted = elector(store, clock, POD_A2, restart_prefix="ctrl-a-")
    task = asyncio.create_task(restarted.run(forever))
    await clock.advance(5)
    assert store.holder == holder
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_a_candidate_throttled_waits_for_retry_after() -> None:
    """A 429 whose Retry-After (30 s) is longer than the client holds a request is not retried
    every 2 s by a candidate: it tries again no sooner than the server asked."""
    clock, store = FakeClock(), LeaseStore()
    attempts: list[float] = []

    def throttled(verb: str, res: Resource) -> ApiError:
        attempts.append(clock.now())
        return ApiError(429, "TooManyRequests", "slow down", retry_after=30.0)

    store.refuse = throttled
    a = elector(store, clock, "a")
    task = asyncio.create_task(a.run(forever))
    await settle()
    await clock.advance(29.0)
    assert len(attempts) == 1
    await clock.advance(2.0)
    assert len(attempts) == 2
    assert attempts[1] - attempts[0] >= 30.0
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
