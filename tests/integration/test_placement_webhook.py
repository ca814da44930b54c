"""The placement webhook on the real control plane: the kube-apiserver calls it over TLS, the
scheduler places the pods on the simulated fleet.

The session's fleet (4 NVL72 racks) gets three more racks for this test, so seven cliques of 18
nodes: one (rack r00) is nearly full, a job not placed by the webhook holds 14 of its 18 nodes.
Then five opted-in jobs of 10 pods each (50 pods) are created at once: each fits in one free
clique, and no clique has room for two (18 < 20), so a clique chosen twice leaves pods Pending.
Two controller replicas serve the webhook behind a round-robin TCP proxy (what a Service with
two endpoints does), so the pods of one job are admitted concurrently by both, each replica with
its own caches, which disagree about one rack's free nodes (so each would decide differently
alone). Every job must land in one clique, never the nearly full one, the one its ComputeDomain
records, and ``kubectl cdom cliques`` must say so. With the webhook gone, pods are still admitted
(``failurePolicy: Ignore``), without a clique, and their ComputeDomain says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from computedomain.api import constants as c
from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.config import environ
from computedomain.devcluster.controlplane import free_port
from computedomain.devcluster.harness import RunningController, compute_domain
from computedomain.devcluster.placement import (
    ca_bundle_written,
    webhook_configured,
    webhook_environ,
)
from computedomain.domain.placement import (
    CONDITION_PLACED,
    NOT_PLACED,
    PLACEMENT_OPT_IN,
    RECORDED_CLIQUE_ANNOTATION,
)
from computedomain.runtime import objects
from computedomain.runtime.client import ApiError, KubeClient
from computedomain.runtime.resources import (
    NODES,
    RESOURCE_SLICES,
)
from computedomain.sim.fleet import RACK_LABEL, resource_slice_name
from computedomain.sim.install import create_fleet, wait_nodes_ready
from tests.integration.cluster import TEST_FLEET, fleet_node_names
from tests.integration.e2e_harness import EndToEnd, pod_running, workload
from tests.kit.kubectl_plugin import cliques_rows

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

JOBS = 5
JOB_SIZE = 10
# Six cliques with room for one job each (the session's four racks, three more, less r00).
WIDE_FLEET = dataclasses.replace(TEST_FLEET, racks=7)
NEARLY_FULL_RACK = "r00"
FILLER_SIZE = 14
STALE_RACK = "r01"


@pytest.fixture
async def wide_fleet(api_client: ApiClient, kube: KubeClient) -> AsyncIterator[list[str]]:
    """The session's fleet with WIDE_FLEET's further racks (the same seed makes the first ones
    the session's own, which ``create_fleet`` leaves as they are); the nodes added, Ready.
    Requested before ``e2e``, it outlives its clean-up: the added nodes go once no domain holds
    them, so later tests find the session's fleet as it was made."""
    added = sorted(set(await create_fleet(api_client, WIDE_FLEET)) - set(fleet_node_names()))
    try:
        await wait_nodes_ready(api_client, added, 60)
        yield added
    finally:
        for name in added:
            for res, obj in ((RESOURCE_SLICES, resource_slice_name(name)), (NODES, name)):
                with contextlib.suppress(ApiError):
                    await kube.delete(res, obj)


@contextlib.asynccontextmanager
async def round_robin(backends: Sequence[int]) -> AsyncIterator[int]:
    """A TCP proxy on a loopback port that sends each new connection to the next backend port,
    as kube-proxy spreads a Service's connections over its endpoints (TLS passes through)."""
    turn = 0

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        writer.close()

    async def connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal turn
        port = backends[turn % len(backends)]
        turn += 1
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            writer.close()
            return
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    server = await asyncio.start_server(connect, "127.0.0.1", 0)
    async with server:
        yield int(server.sockets[0].getsockname()[1])


async def opted_in_cd(e2e: EndToEnd, name: str, size: int) -> dict[str, Any]:
    body = compute_domain(name, rct_name=name, num_nodes=size)
    body["metadata"]["annotations"] = {PLACEMENT_OPT_IN: "true"}
    cd = await e2e.kube.create(COMPUTE_DOMAINS, body, e2e.namespace)
    e2e.uids.add(cd["metadata"]["uid"])
    return cd


async def start_replica(
    e2e: EndToEnd, index: int, port: int, configuration: str
) -> RunningController:
    return await e2e.start_controller(
        **environ(
            # One leader reconciles; the webhook runs in both.
            leader_election_enabled="true",
            pod_name=f"replica-{index}",
        ),
        **webhook_environ(port, configuration),
    )


async def cordon(kube: KubeClient, rack: str, unschedulable: bool) -> None:
    listed = await kube.list(NODES, label_selector=f"{RACK_LABEL}={rack}")
    await asyncio.gather(
        *(
            kube.patch(NODES, n["metadata"]["name"], {"spec": {"unschedulable": unschedulable}})
            for n in listed["items"]
        )
    )


def scheduled(count: int) -> Any:
    return lambda pods: len(pods) == count and all(p["spec"].get("nodeName") for p in pods.values())


async def test_each_job_lands_in_one_clique_with_room_and_pods_pass_without_the_webhook(
    wide_fleet: list[str],
    e2e: EndToEnd,
    kube: KubeClient,
    namespace: str,
    kubeconfig_path: Path,
) -> None:
    assert len(wide_fleet) == (WIDE_FLEET.racks - TEST_FLEET.racks) * WIDE_FLEET.nodes_per_rack
    started = time.monotonic()
    configuration = f"placement-{namespace}"
    ports = [free_port(), free_port()]
    async with (
        round_robin(ports) as service_port,
        webhook_configured(kube, configuration, namespace, service_port),
    ):
        await e2e.start_simulator()
        # The replicas' caches disagree, as after a Node change the inventory's poll has
        # not brought yet: the first sees rack r01 cordoned, the second sees it free. Alone,
        # the first would choose r02 for the first job, the second r01.
        await cordon(kube, STALE_RACK, True)
        replicas = [await start_replica(e2e, 0, ports[0], configuration)]
        await cordon(kube, STALE_RACK, False)
        replicas.append(await start_replica(e2e, 1, ports[1], configuration))
        await ca_bundle_written(kube, configuration)
        # Both replicas serve the one certificate kept in the Secret (one caBundle).
        certificates = {r.process.webhook.certificate for r in replicas if r.process.webhook}
        assert len(certificates) == 1

        # The nearly full clique: a job no webhook places, pinned to r00.
        filler = await e2e.create_cd("filler", rct_name="filler", num_nodes=FILLER_SIZE)
        await e2e.run_workload(
            workload("filler", FILLER_SIZE, rct_name="filler", racks=[NEARLY_FULL_RACK])
        )
        await e2e.nodes_labelled(
            filler["metadata"]["uid"], lambda held: len(held) == FILLER_SIZE, "filler holds"
        )
        nodes = {n["metadata"]["name"]: n for n in (await kube.list(NODES))["items"]}
        full_clique = {
            objects.labels(n)[c.GPU_CLIQUE_NODE_LABEL]
            for n in nodes.values()
            if objects.label(n, c.CD_LABEL) == filler["metadata"]["uid"]
        }
        assert len(full_clique) == 1

        # Five jobs at once: their CDs, then their StatefulSets, all together.
        names = [f"job{i}" for i in range(JOBS)]
        cds = await asyncio.gather(*(opted_in_cd(e2e, n, JOB_SIZE) for n in names))
        await asyncio.gather(*(e2e.run_workload(workload(n, JOB_SIZE, rct_name=n)) for n in names))
        placed = await asyncio.gather(
            *(e2e.workload_pods(n, scheduled(JOB_SIZE), "all scheduled") for n in names)
        )
        nodes = {n["metadata"]["name"]: n for n in (await kube.list(NODES))["items"]}
        landed: dict[str, set[str]] = {}
        for name, pods in zip(names, placed, strict=True):
            landed[name] = {
                objects.label(nodes[p["spec"]["nodeName"]], c.GPU_CLIQUE_NODE_LABEL) or "-"
                for p in pods.values()
            }
        assert all(len(cliques) == 1 for cliques in landed.values()), (
            f"a job's pods were placed in several cliques: {landed}"
        )
        assert not any(cliques & full_clique for cliques in landed.values()), landed
        recorded = {
            n: (await kube.get(COMPUTE_DOMAINS, n, namespace))["metadata"]["annotations"]
            for n in names
        }
        assert {n: {a[RECORDED_CLIQUE_ANNOTATION]} for n, a in recorded.items()} == landed

        # Each admission answered by one replica or the other; none failed.
        def answered(outcome: str) -> float:
            return sum(
                r.counter(
                    "computedomain_placement_admissions",
                    lambda labels: labels["outcome"] == outcome,
                )
                for r in replicas
            )

        assert answered("placed") == JOBS * JOB_SIZE
        assert answered("failed") == 0
        assert all(r.counter("computedomain_placement_admissions") for r in replicas), (
            "one replica answered every admission: the proxy did not spread them"
        )

        # `kubectl cdom cliques` (the plugin as a user runs it) agrees: each job's domain
        # holds all its nodes in the one clique its pods landed in.
        for cd in cds:
            await e2e.nodes_labelled(
                cd["metadata"]["uid"], lambda held: len(held) == JOB_SIZE, "job holds"
            )
        rows = await cliques_rows(kubeconfig_path)
        for name in names:
            holding = {
                clique: row["domains"][f"{namespace}/{name}"]
                for clique, row in rows.items()
                if f"{namespace}/{name}" in row["domains"]
            }
            assert holding == dict.fromkeys(landed[name], JOB_SIZE), (name, holding)
        for name in names:
            await e2e.cd_until(
                name,
                lambda cd: any(
                    x["type"] == CONDITION_PLACED and x["status"] == "True"
                    for x in ((cd or {}).get("status") or {}).get("conditions") or []
                ),
                "Placed",
                within=30,
            )

        # The webhook gone (both replicas stopped): pods are still admitted, unplaced.
        await e2e.controllers.stop_all()
        await e2e.start_controller()  # without the webhook, to finalize at clean-up
        await opted_in_cd(e2e, "late", 2)
        await e2e.run_workload(workload("late", 2, rct_name="late"))
        late = await e2e.workload_pods("late", scheduled(2), "admitted and scheduled")
        for pod in late.values():
            required = (
                ((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution")
            )  # fmt: skip
            assert required is None, pod["spec"]["affinity"]
        # ... they start (Running on the fleet) ...
        await e2e.workload_pods(
            "late",
            lambda pods: len(pods) == 2 and all(pod_running(p) for p in pods.values()),
            "Running, unplaced",
        )
        # ... and its ComputeDomain says so.
        await e2e.cd_until(
            "late",
            lambda cd: any(
                (x["type"], x["status"], x["reason"]) == (CONDITION_PLACED, "False", NOT_PLACED)
                for x in ((cd or {}).get("status") or {}).get("conditions") or []
            ),
            "Placed False NotPlaced",
            within=60,
        )
    print(f"placement webhook e2e: {time.monotonic() - started:.1f}s")
