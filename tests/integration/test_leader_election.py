"""Two controller replicas as real processes (the console script) on one Lease: exactly one
leads and writes, the standby stays warm and ready, and takes over when the leader dies
(SIGKILL: after the lease expires) or stops (SIGTERM: at once, because the lease is released).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from computedomain.api import constants as c
from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.devcluster.audit import AuditLog, tally
from computedomain.devcluster.controlplane import ControlPlane, free_port
from computedomain.devcluster.harness import WRITE_METHODS
from computedomain.devcluster.watching import watch_object, watch_objects
from computedomain.runtime import resources as r
from computedomain.runtime.client import ApiError, KubeClient
from computedomain.runtime.clock import parse_time
from computedomain.runtime.objects import condition
from tests.integration.conftest import IdentityFactory
from tests.kit.controllers import create_cd, delete_cds, wait_children
from tests.kit.waiting import eventually

CONTROLLER_SCRIPT = Path(sys.executable).with_name("computedomain-controller")
# The flag defaults, i.e. what a real install runs with.
LEASE_DURATION, RETRY_PERIOD = 15.0, 2.0
JITTERED_RETRY = RETRY_PERIOD * 1.2
REPORTING_INSTANCE_PREFIX = "computedomain-controller-"


@dataclass
class Replica:
    pod_name: str
    process: asyncio.subprocess.Process
    metrics_port: int
    probe_port: int
    log_path: Path

    async def _get(self, port: int, path: str) -> tuple[int, str]:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as session,
            session.get(f"http://127.0.0.1:{port}{path}") as response,
        ):
            return response.status, await response.text()

    async def ready(self) -> bool:
        with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
            status, _ = await self._get(self.probe_port, "/readyz")
            return status == 200
        return False

    async def samples(self, sample_name: str) -> list[tuple[dict[str, str], float]]:
        """(labels, value) of every sample called `sample_name` on /metrics."""
        status, text = await self._get(self.metrics_port, "/metrics")
        assert status == 200, text
        return [
            (dict(sample.labels), sample.value)
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.name == sample_name
        ]

    async def master_status(self, lease_name: str) -> float | None:
        for labels, value in await self.samples("leader_election_master_status"):
            if labels.get("name") == lease_name:
                return value
        return None

    async def writes(self) -> dict[tuple[str, str], float]:
        """Non-GET API requests sent so far, by (method, HTTP code)."""
        return {
            (labels["method"], labels["code"]): value
            for labels, value in await self.samples("rest_client_requests_total")
            if labels.get("method") in WRITE_METHODS and value
        }

    def log_tail(self, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


class Launcher(Protocol):
    async def __call__(self, pod_name: str, kubeconfig: Path | None = None) -> Replica: ...


@pytest.fixture
def lease_name() -> str:
    return f"cd-controller-test-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def replicas(
    kubeconfig_path: Path,
    driver_namespace: str,
    lease_name: str,
    kube: KubeClient,
    namespace: str,
    tmp_path: Path,
) -> AsyncIterator[Launcher]:
    """`await start(pod_name)` runs one controller process; all are killed at teardown."""
    started: list[Replica] = []

    async def start(pod_name: str, kubeconfig: Path | None = None) -> Replica:
        metrics_port, probe_port = free_port(), free_port()
        env = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig or kubeconfig_path),
            "NAMESPACE": driver_namespace,
            "IMAGE_NAME": c.NVIDIA_DRIVER_IMAGE,
            "LEADER_ELECTION_ENABLED": "true",
            "LEADER_ELECTION_LEASE_LOCK_NAME": lease_name,
            "LEADER_ELECTION_LEASE_LOCK_NAMESPACE": driver_namespace,
            "POD_NAME": pod_name,
            "HTTP_ENDPOINT": f"127.0.0.1:{metrics_port}",
            "PROBE_ADDRESS": f"127.0.0.1:{probe_port}",
            "LOG_FORMAT": "json",
            "ORPHAN_GRACE_PERIOD": "1s",
            "DAEMON_POD_WAIT_TIMEOUT": "20s",
        }
        log_path = tmp_path / f"{pod_name}-{len(started)}.log"
        with log_path.open("wb") as log_file:
            process = await asyncio.create_subprocess_exec(
                str(CONTROLLER_SCRIPT), env=env, stdout=log_file, stderr=asyncio.subprocess.STDOUT
            )
        replica = Replica(pod_name, process, metrics_port, probe_port, log_path)
        started.append(replica)
        return replica

    try:
        yield start
        # A live leader finalizes the test's CDs, so none outlives the test.
        if any(rep.process.returncode is None for rep in started):
            await delete_cds(kube, namespace)
    finally:
        for rep in started:
            if rep.process.returncode is None:
                rep.process.kill()
            await rep.process.wait()
            print(f"--- {rep.pod_name} (exit {rep.process.returncode}) ---\n{rep.log_tail()}")


async def _holder(kube: KubeClient, namespace: str, lease_name: str) -> str:
    try:
        lease = await kube.get(r.LEASES, lease_name, namespace)
    except ApiError as err:
        if err.is_not_found:
            return ""
        raise
    return str((lease.get("spec") or {}).get("holderIdentity") or "")


async def _wait_holder(
    kube: KubeClient, namespace: str, lease_name: str, replica: Replica, timeout: float
) -> None:
    def held_by(lease: dict[str, Any] | None) -> bool:
        holder = ((lease or {}).get("spec") or {}).get("holderIdentity") or ""
        return str(holder).startswith(f"{replica.pod_name}-")

    await watch_object(
        kube,
        r.LEASES,
        lease_name,
        held_by,
        namespace=namespace,
        within=timeout,
        what=f"lease {lease_name} held by {replica.pod_name}",
    )


async def _children_and_status(
    kube: KubeClient, namespace: str, driver_namespace: str, name: str
) -> dict[str, Any]:
    """Waits until the CD `name` has its three children and a Ready condition."""
    cd = await kube.get(COMPUTE_DOMAINS, name, namespace)
    await wait_children(kube, cd, driver_namespace, f"{name}-channel", within=60)
    settled = await watch_object(
        kube,
        COMPUTE_DOMAINS,
        name,
        lambda o: bool(condition(o, "Ready")),
        namespace=namespace,
        within=60,
        what=f"{name} status conditions",
    )
    assert settled is not None
    return settled


@pytest.mark.parametrize("stop_signal", [signal.SIGKILL, signal.SIGTERM], ids=["kill", "term"])
async def test_one_replica_leads_and_the_standby_takes_over(
    replicas: Launcher,
    kube: KubeClient,
    namespace: str,
    driver_namespace: str,
    lease_name: str,
    stop_signal: signal.Signals,
) -> None:
    a, b = await replicas("replica-a"), await replicas("replica-b")
    by_prefix = {rep.pod_name: rep for rep in (a, b)}

    # Both become ready: a standby's caches sync too, so it is ready to take over.
    for rep in (a, b):
        await eventually(rep.ready, within=60, what=f"{rep.pod_name} /readyz 200")
    # Each replica asked for its permissions before its caches listed (SelfSubjectAccessReviews:
    # POSTs that store nothing); its writes are counted from here.
    at_start = {rep.pod_name: await rep.writes() for rep in (a, b)}

    async def leader_elected() -> str:
        return await _holder(kube, driver_namespace, lease_name)

    holder = await eventually(leader_elected, within=30, what="a lease holder")
    matching = [rep for name, rep in by_prefix.items() if holder.startswith(f"{name}-")]
    assert len(matching) == 1, f"holder {holder!r} is neither replica"
    leader = matching[0]
    standby = b if leader is a else a

    async def statuses() -> tuple[float | None, float | None] | None:
        got = (await leader.master_status(lease_name), await standby.master_status(lease_name))
        return got if got == (1.0, 0.0) else None

    await eventually(statuses, within=10, what="leader_election_master_status 1 and 0")

    # Only the leader writes: children, status and events all come from it.
    await create_cd(kube, namespace, "before", rct_name="before-channel")
    await _children_and_status(kube, namespace, driver_namespace, "before")

    async def events() -> list[dict[str, Any]] | None:
        return (await kube.list(r.EVENTS, namespace=namespace))["items"] or None

    instances = {
        e.get("reportingInstance") for e in await eventually(events, within=15, what="an event")
    }
    assert instances == {f"{REPORTING_INSTANCE_PREFIX}{leader.pod_name}"}, instances
    before = at_start[standby.pod_name]
    standby_writes = {
        key: count - before.get(key, 0)
        for key, count in (await standby.writes()).items()
        if count > before.get(key, 0)
    }
    print(f"standby write requests by (method, code) since it was ready: {standby_writes}")
    # The standby only reads the Lease; at most its lost create race (409) shows up here.
    assert all(not code.startswith("2") for _, code in standby_writes), standby_writes
    assert set(standby_writes) <= {("POST", "409")}, standby_writes
    assert await leader.writes(), "the leader wrote nothing"
    assert await standby.ready(), "a standby must stay ready"

    stopped_at = time.monotonic()
    leader.process.send_signal(stop_signal)
    bound = LEASE_DURATION + JITTERED_RETRY + 3 if stop_signal == signal.SIGKILL else 6
    await _wait_holder(kube, driver_namespace, lease_name, standby, timeout=bound + 10)
    handover = time.monotonic() - stopped_at
    print(f"handover after {stop_signal.name}: {handover:.1f}s")
    if stop_signal == signal.SIGKILL:
        # The standby must respect the dead leader's lease until it expires...
        assert handover >= LEASE_DURATION - JITTERED_RETRY - 1.0, handover
        assert handover < bound, handover
    else:
        # ...but a released lease is free at the standby's next retry.
        assert handover < JITTERED_RETRY + 2.0, handover
        assert await asyncio.wait_for(leader.process.wait(), 15) == 0, leader.log_tail()

    async def new_leader_status() -> bool:
        return await standby.master_status(lease_name) == 1.0

    await eventually(new_leader_status, within=10, what="new leader's master status 1")
    # The new leader reconciles: a CD made after the handover gets its children and status.
    await create_cd(kube, namespace, "after", rct_name="after-channel")
    await _children_and_status(kube, namespace, driver_namespace, "after")
    cd = await kube.get(COMPUTE_DOMAINS, "before", namespace)
    assert condition(cd, "Ready"), "the first CD lost its conditions across the handover"
    assert standby.process.returncode is None, standby.log_tail()


# -- issue 9: no split brain after a pause; a crash loop faster than the lease still leads ------


async def test_a_paused_leader_writes_nothing_after_it_resumes(
    # identities first: set up before, torn down after the replicas that use them
    identities: IdentityFactory,
    replicas: Launcher,
    kube: KubeClient,
    control_plane: ControlPlane,
    namespace: str,
    driver_namespace: str,
    lease_name: str,
) -> None:
    """SIGSTOP the leader past its lease, let the standby take over and reconcile new CDs,
    SIGCONT: the old leader must not write anything (status, events, the Lease) and exit."""
    assert control_plane.audit_log is not None
    audit = AuditLog(control_plane.audit_log)
    (config_a, user_a), (config_b, user_b) = await identities("ctl-a"), await identities("ctl-b")
    a = await replicas("replica-a", kubeconfig=config_a)
    b = await replicas("replica-b", kubeconfig=config_b)
    for rep in (a, b):
        await eventually(rep.ready, within=60, what=f"{rep.pod_name} /readyz 200")

    async def leader_elected() -> str:
        return await _holder(kube, driver_namespace, lease_name)

    holder = await eventually(leader_elected, within=30, what="a lease holder")
    leader, standby = (a, b) if holder.startswith("replica-a-") else (b, a)
    leader_user = user_a if leader is a else user_b
    await create_cd(kube, namespace, "before", rct_name="before-channel")
    await _children_and_status(kube, namespace, driver_namespace, "before")
    # Its Event about them is posted in the background: a request already past the write fence
    # when the process freezes is sent when it thaws (seen once), which no fence can take back.
    await watch_objects(
        kube,
        r.EVENTS,
        lambda events: any(
            e.get("reason") == "Created" and (e.get("regarding") or {}).get("name") == "before"
            for e in events.values()
        ),
        namespace=namespace,
        what="the Created event of before",
    )

    leader.process.send_signal(signal.SIGSTOP)
    try:
        await _wait_holder(kube, driver_namespace, lease_name, standby, timeout=40)
        # Work the frozen leader's cache knows nothing of, and changes to what it knows.
        for name in ("during-1", "during-2", "during-3"):
            await create_cd(kube, namespace, name, rct_name=f"{name}-channel")
        for name in ("during-1", "during-2", "during-3"):
            await _children_and_status(kube, namespace, driver_namespace, name)
        await kube.patch(COMPUTE_DOMAINS, "before", {"metadata": {"labels": {"x": "y"}}}, namespace)
    finally:
        resumed = audit.mark()
        logged_before = leader.log_path.stat().st_size
        leader.process.send_signal(signal.SIGCONT)
    try:
        code: int | None = await asyncio.wait_for(leader.process.wait(), 30)
    except TimeoutError:
        code = None
    stale = audit.writes(since=resumed, user=leader_user)
    print(
        f"old leader exited {code}; its writes after SIGCONT: {len(stale)} "
        f"{tally(stale)} (2xx: {sum(200 <= w.code < 300 for w in stale)})"
    )
    assert stale == [], [w.target for w in stale]
    assert code == 3, leader.log_tail()  # EXIT_LEADERSHIP_LOST: a restart gets a clean cache
    assert standby.process.returncode is None
    # Said in a few lines, not one per refused write: no "Reconciler error" for them, and the
    # refused writes (if its reconciles got that far before it exited) counted in one line.
    with leader.log_path.open("rb") as log_file:
        log_file.seek(logged_before)
        after = [json.loads(line) for line in log_file.read().splitlines() if line.startswith(b"{")]
    messages = [line["msg"] for line in after]
    print(f"old leader's log after SIGCONT: {len(after)} lines: {messages}")
    assert "Reconciler error" not in messages
    refused = [m for m in messages if "writes while leadership could not be proven" in m]
    assert len(refused) <= 1, refused
    assert "Lost leadership, exiting" in messages


async def test_a_container_restarted_faster_than_the_lease_leads_again_at_once(
    replicas: Launcher, kube: KubeClient, driver_namespace: str, lease_name: str
) -> None:
    """A crash loop shorter than the lease duration (each restart a new identity) used to wait
    out its own dead lease every time and never lead. The same pod's next container now takes
    the lease over before it expires."""
    previous: dict[str, Any] | None = None
    for attempt in range(3):
        rep = await replicas("replica-a")  # same pod name: the kubelet restarted the container

        def held_by_new(
            lease: dict[str, Any] | None, old: dict[str, Any] | None = previous
        ) -> bool:
            spec = (lease or {}).get("spec") or {}
            holder = str(spec.get("holderIdentity") or "")
            old_holder = ((old or {}).get("spec") or {}).get("holderIdentity")
            return holder.startswith("replica-a-") and holder != old_holder

        lease = await watch_object(
            kube,
            r.LEASES,
            lease_name,
            held_by_new,
            namespace=driver_namespace,
            within=LEASE_DURATION + 15,
            what=f"lease taken by container {attempt}",
        )
        assert lease is not None
        if previous is not None:
            old_renew = parse_time(previous["spec"]["renewTime"]).timestamp()
            acquired = parse_time(lease["spec"]["acquireTime"]).timestamp()
            print(f"container {attempt} leads {acquired - old_renew:.1f}s after the last renew")
            # Taken over while the dead container's lease was still valid.
            assert acquired - old_renew < LEASE_DURATION, rep.log_tail()
        previous = await kube.get(r.LEASES, lease_name, driver_namespace)
        rep.process.kill()  # the crash
        await rep.process.wait()
