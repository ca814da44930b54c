"""Lease-based leader election modelled on client-go ``tools/leaderelection``.

Expiry is judged on the local monotonic clock (when did *we* last see the record change), never
by comparing remote timestamps, so clock skew between replicas cannot break it. Every write is
a PUT carrying the RV just read. A leader that cannot renew within ``renew_deadline`` cancels
its work and raises ``LeadershipLost``; a leader that is cancelled releases the lease (empty
holder, ``leaseDurationSeconds: 1``) so a standby takes over within about one retry period.

Fencing: ``holds_lease()`` is true only while the last successful renew is younger than
``renew_deadline`` (monotonic clock) and no other holder has been seen. The renew deadline runs
from that renew, not from the start of a renew round, so a process resumed after a pause (GC,
SIGSTOP, a frozen VM) knows at once that it cannot prove leadership; callers gate every write
on it (``KubeClient.write_fence`` = ``write_fence``), and a Lease seen held by another identity
ends leadership at once. The writes the fence refuses are counted and logged in one warning when
the episode ends (leadership lost or given up, or the lease renewed after all), not one line per
refused write.

Restarts: the identity is ``<pod name>-<random>``. A Lease still held by an identity of *this*
pod name was held by a previous container of this same pod, which the kubelet only restarts
after it exited, so it is taken over at once instead of after the lease duration. A controller
that crash-loops faster than the lease duration therefore still leads between crashes.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import aiohttp
from prometheus_client import CollectorRegistry

from computedomain.runtime.client import ApiError
from computedomain.runtime.clock import Clock, SystemClock, format_microtime
from computedomain.runtime.identity import identity_pod
from computedomain.runtime.metrics import RuntimeMetrics
from computedomain.runtime.resources import LEASES, Resource

log = logging.getLogger(__name__)

JITTER_FACTOR = 1.2
_TRANSIENT = (ApiError, aiohttp.ClientError, OSError, TimeoutError)


class LeadershipLost(Exception):  # noqa: N818 - the name the design fixes
    """This replica was leader and could not renew the lease in time."""


class LeaseClient(Protocol):
    async def get(
        self, res: Resource, name: str, namespace: str | None = None
    ) -> dict[str, Any]: ...

    async def create(
        self, res: Resource, body: dict[str, Any], namespace: str | None = None
    ) -> dict[str, Any]: ...

    async def replace(
        self,
        res: Resource,
        body: dict[str, Any],
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> dict[str, Any]: ...


class LeaderElector:
    def __init__(
        self,
        client: LeaseClient,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        clock: Clock | None = None,
        metrics: RuntimeMetrics | None = None,
        release_on_cancel: bool = True,
        request_timeout: float | None = None,
        rng: random.Random | None = None,
        restart_prefix: str | None = None,
    ) -> None:
        if not lease_duration > renew_deadline:
            raise ValueError("lease_duration must be greater than renew_deadline")
        if not renew_deadline > JITTER_FACTOR * retry_period:
            raise ValueError("renew_deadline must be greater than 1.2 x retry_period")
        if not identity:
            raise ValueError("identity must not be empty")
        # Lease holders named "<this prefix><anything>" were earlier containers of this pod.
        self.restart_prefix = restart_prefix
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.clock = clock or SystemClock()
        self.metrics = metrics or RuntimeMetrics(CollectorRegistry())
        self.release_on_cancel = release_on_cancel
        self.request_timeout = request_timeout or max(1.0, renew_deadline / 2)
        # A failed attempt's Retry-After (a 429 longer than the client waits out itself).
        self._retry_after = 0.0
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not cryptography
        self._lease: dict[str, Any] | None = None
        self._observed_spec: dict[str, Any] | None = None
        self._observed_at = 0.0
        self._renewed_at: float | None = None
        self._is_leader = False
        # Writes refused by ``write_fence`` since the last report.
        self._refused_writes = 0
        self._status = self.metrics.leader_election_master_status.labels(name=name)
        self._slowpath = self.metrics.leader_election_slowpath_total.labels(name=name)
        self._status.set(0)

    @property
    def is_leader(self) -> bool:
        return self._is_leader

    @property
    def observed_holder(self) -> str:
        return str((self._observed_spec or {}).get("holderIdentity") or "")

    def holds_lease(self) -> bool:
        """True only while this replica can prove it leads: a renew younger than the renew
        deadline, and no other holder seen since. Gate every write on it."""
        if not self._is_leader or self._renewed_at is None:
            return False
        if self._lost_to_another():
            return False
        return self.clock.now() - self._renewed_at < self.renew_deadline

    def write_fence(self) -> bool:
        """The fence of every other write of this replica (``KubeClient.write_fence``):
        ``holds_lease()``, counting each write it refuses. The count is logged once, when
        leadership ends or the lease is renewed again (``_report_refused_writes``)."""
        if self.holds_lease():
            return True
        self._refused_writes += 1
        return False

    def _lost_to_another(self) -> bool:
        return self.observed_holder not in ("", self.identity)

    async def run(self, on_started_leading: Callable[[], Awaitable[None]]) -> None:
        """Acquire, run the callback while renewing; raise ``LeadershipLost`` on loss.

        Returns when the callback returns. Cancelling ``run`` cancels the callback and, if we
        lead, releases the lease.
        """
        try:
            await self._acquire()
            self._set_leader(True)
            log.info(
                "Acquired lease", extra={"lease": self._lease_ref(), "identity": self.identity}
            )
            work: asyncio.Future[None] = asyncio.ensure_future(on_started_leading())
            ended = "stopped leading"
            try:
                await self._renew_until_done(work)
            except LeadershipLost:
                ended = "leadership lost"
                raise
            finally:
                if not work.done():
                    work.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await work
                # After the work stopped: no write can be refused after this count.
                self._report_refused_writes(ended)
        except asyncio.CancelledError:
            if self._is_leader and self.release_on_cancel:
                await self._release()
            raise
        finally:
            self._set_leader(False)

    # -- loops ------------------------------------------------------------------------------

    async def _acquire(self) -> None:
        while True:
            if await self._attempt():
                return
            # A candidate waits out a 429's Retry-After. A leader renewing does not: its own
            # deadline bounds the wait (the client waits out short ones within the attempt).
            await self.clock.sleep(max(self._jittered(self.retry_period), self._retry_after))

    async def _renew_until_done(self, work: asyncio.Future[None]) -> None:
        while True:
            await self._sleep_or_done(work, self._jittered(self.retry_period))
            if work.done():
                work.result()  # re-raises the callback's exception, if any
                return
            # From the last successful renew: time spent paused counts against us.
            deadline = (self._renewed_at or self.clock.now()) + self.renew_deadline
            while not await self._attempt(deadline - self.clock.now()):
                remaining = deadline - self.clock.now()
                if self._lost_to_another():
                    log.error(
                        "Lease held by another replica, leadership lost",
                        extra={"lease": self._lease_ref(), "holder": self.observed_holder},
                    )
                    raise LeadershipLost(
                        f"lease {self._lease_ref()} held by {self.observed_holder}"
                    )
                if remaining <= 0:
                    log.error(
                        "Failed to renew lease, leadership lost",
                        extra={"lease": self._lease_ref(), "identity": self.identity},
                    )
                    raise LeadershipLost(f"lease {self._lease_ref()} not renewed in time")
                await self._sleep_or_done(work, min(self.retry_period, remaining))
                if work.done():
                    work.result()
                    return
            # Renewed: writes refused meanwhile (a renewal answered only after a pause) end here.
            self._report_refused_writes("lease renewed, writing again")

    def _report_refused_writes(self, then: str) -> None:
        """One warning for the writes ``write_fence`` refused since the last report, if any."""
        refused, self._refused_writes = self._refused_writes, 0
        if refused:
            log.warning(
                "Refused %d writes while leadership could not be proven; %s",
                refused,
                then,
                extra={
                    "lease": self._lease_ref(),
                    "identity": self.identity,
                    "refusedWrites": refused,
                },
            )

    async def _sleep_or_done(self, work: asyncio.Future[None], seconds: float) -> None:
        sleeper = asyncio.ensure_future(self.clock.sleep(seconds))
        try:
            await asyncio.wait({sleeper, work}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            sleeper.cancel()

    def _jittered(self, seconds: float) -> float:
        return seconds * (1.0 + self._rng.random() * (JITTER_FACTOR - 1.0))

    # -- one attempt ------------------------------------------------------------------------

    async def _attempt(self, budget: float | None = None) -> bool:
        """One time-boxed try to acquire or renew; False on any failure."""
        timeout = self.request_timeout if budget is None else min(self.request_timeout, budget)
        if timeout <= 0:
            return False
        self._retry_after = 0.0
        try:
            async with asyncio.timeout(timeout):
                return await self._try_acquire_or_renew()
        except _TRANSIENT as error:
            if isinstance(error, ApiError) and error.retry_after:
                self._retry_after = error.retry_after
            log.info(
                "Lease attempt failed",
                extra={"lease": self._lease_ref(), "err": str(error) or type(error).__name__},
            )
            return False

    async def _try_acquire_or_renew(self) -> bool:
        now = format_microtime(self.clock.wall())
        if self._is_leader and self._lease is not None:
            # Fast path: renew from the record we wrote last, without a GET.
            try:
                self._store(
                    await self.client.replace(
                        LEASES, self._renewed(self._lease, now), self.namespace
                    )
                )
                return True
            except ApiError:
                self._slowpath.inc()

        try:
            lease = await self.client.get(LEASES, self.name, self.namespace)
        except ApiError as error:
            if not error.is_not_found:
                raise
            body = {
                "apiVersion": LEASES.api_version,
                "kind": LEASES.kind,
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(now, acquire_time=now, transitions=0),
            }
            try:
                self._store(await self.client.create(LEASES, body, self.namespace))
            except ApiError as create_error:
                if create_error.is_already_exists:
                    return False
                raise
            return True

        self._observe(lease)
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        if self._is_leader and holder != self.identity:
            return False  # someone else holds it now: never take it back while leading
        if (
            holder
            and holder != self.identity
            and not self._expired(spec)
            and not self._held_by_previous_container(holder)
        ):
            return False
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder == self.identity:
            new_spec = self._spec(now, spec.get("acquireTime") or now, transitions)
        else:
            new_spec = self._spec(now, now, transitions + 1)
        updated = copy.deepcopy(lease)
        updated["spec"] = new_spec
        try:
            self._store(await self.client.replace(LEASES, updated, self.namespace))
        except ApiError as error:
            if error.is_conflict:
                return False
            raise
        return True

    def _held_by_previous_container(self, holder: str) -> bool:
        # "<prefix><uuid>" exactly: another pod whose name extends ours is not us.
        if not self.restart_prefix or identity_pod(holder) != self.restart_prefix[:-1]:
            return False
        log.info(
            "Taking over the lease from a previous container of this pod",
            extra={"lease": self._lease_ref(), "previous": holder},
        )
        return True

    def _expired(self, spec: dict[str, Any]) -> bool:
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        return self._observed_at + duration <= self.clock.now()

    def _spec(self, now: str, acquire_time: str, transitions: int) -> dict[str, Any]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.lease_duration)),
            "acquireTime": acquire_time,
            "renewTime": now,
            "leaseTransitions": transitions,
        }

    def _renewed(self, lease: dict[str, Any], now: str) -> dict[str, Any]:
        updated = copy.deepcopy(lease)
        spec = updated.setdefault("spec", {})
        spec["renewTime"] = now
        spec["holderIdentity"] = self.identity
        return updated

    def _observe(self, lease: dict[str, Any]) -> None:
        spec = lease.get("spec") or {}
        if spec != self._observed_spec:
            self._observed_spec = copy.deepcopy(spec)
            self._observed_at = self.clock.now()
        self._lease = lease

    def _store(self, lease: dict[str, Any]) -> None:
        """Record a lease we just wrote successfully."""
        self._observe(lease)
        if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
            self._renewed_at = self.clock.now()

    async def _release(self) -> None:
        """Hand the lease back: empty holder, 1 s duration (client-go ReleaseOnCancel)."""
        if self._lease is None:
            return
        try:
            async with asyncio.timeout(self.request_timeout):
                released = await self._hand_back(self._lease)
            if released is None:
                return  # another holds it already: nothing of ours to hand back
            self._store(released)
            log.info(
                "Released lease", extra={"lease": self._lease_ref(), "identity": self.identity}
            )
        except _TRANSIENT as error:
            log.warning(
                "Failed to release lease",
                extra={"lease": self._lease_ref(), "err": str(error) or type(error).__name__},
            )

    async def _hand_back(self, last: dict[str, Any]) -> dict[str, Any] | None:
        """The released Lease as stored, or None if another holds it. From the record we wrote
        last; on a 409 from the Lease as read now: a renewal cancelled in flight may have been
        applied with its reply never read."""
        try:
            return await self.client.replace(LEASES, self._released(last), self.namespace)
        except ApiError as error:
            if not error.is_conflict:
                raise
        current = await self.client.get(LEASES, self.name, self.namespace)
        self._observe(current)
        if (current.get("spec") or {}).get("holderIdentity") != self.identity:
            return None
        return await self.client.replace(LEASES, self._released(current), self.namespace)

    def _released(self, lease: dict[str, Any]) -> dict[str, Any]:
        now = format_microtime(self.clock.wall())
        released = copy.deepcopy(lease)
        released.setdefault("spec", {}).update(
            {"holderIdentity": "", "leaseDurationSeconds": 1, "acquireTime": now, "renewTime": now}
        )
        return released

    def _set_leader(self, leading: bool) -> None:
        self._is_leader = leading
        self._status.set(1 if leading else 0)

    def _lease_ref(self) -> str:
        return f"{self.namespace}/{self.name}"
