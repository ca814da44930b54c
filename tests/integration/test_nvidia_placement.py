"""The placement webhook with NVIDIA's compute-domain kubelet plugin (v0.5.0-dev, which labels
its node with the NVLink clique its GPUs report on the mock NVML): the cliques the webhook
chooses among are the plugin's labels, and the plugin prepares the placed pods' channels.

Four plugin nodes, two cliques of two (racks r00 and r01; every other node of the fleet
cordoned, so these are the only nodes with room). A domain the webhook does not place holds one
node of the first clique: it is nearly full. A placement-annotated ComputeDomain of 2 nodes and
its 2-pod job whose pods prefer the nearly full clique (a soft affinity, as a user who ran there
before would write): our webhook, served by our controller and called by the kube-apiserver over
TLS, must pin both pods to the other clique, the one with room; NVIDIA's plugin then prepares
their channel claims there, the domain becomes Ready on those two nodes, and the clique it
records is the plugin's label on them.

Needs NVIDIA's builds and the mock NVML, as test_nvidia_plugin_e2e.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterable
from typing import Any

import pytest

from computedomain.api import constants as c
from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.devcluster.harness import compute_domain
from computedomain.devcluster.kubeletplugin import IMEX_CHANNELS_MAJOR
from computedomain.devcluster.placement import (
    ca_bundle_written,
    webhook_configured,
    webhook_environ,
)
from computedomain.devcluster.upstream import MAIN, TARGET_VERSIONS, UpstreamBuild
from computedomain.domain.placement import PLACEMENT_OPT_IN, RECORDED_CLIQUE_ANNOTATION
from computedomain.runtime import objects
from computedomain.runtime import resources as r
from computedomain.runtime.client import KubeClient
from computedomain.sim.fleet import rack_node_name
from tests.integration.cluster import TEST_FLEET, fleet_node_names
from tests.integration.e2e_harness import cd_ready, pod_running, status_nodes, workload
from tests.integration.nvidia_fleet import (
    CHANNEL,
    START_WITHIN,
    NodeSide,
    NodeSideOn,
)

pytestmark = pytest.mark.integration

NEARLY_FULL = [rack_node_name(TEST_FLEET.name_prefix, 0, index) for index in (0, 1)]
WITH_ROOM = [rack_node_name(TEST_FLEET.name_prefix, 1, index) for index in (0, 1)]
PLUGIN_NODES = NEARLY_FULL + WITH_ROOM


async def cordon(kube: KubeClient, names: Iterable[str], unschedulable: bool) -> None:
    patch = {"spec": {"unschedulable": unschedulable}}
    await asyncio.gather(*(kube.patch(r.NODES, name, patch) for name in names))


@contextlib.asynccontextmanager
async def only_plugin_nodes_schedulable(kube: KubeClient) -> AsyncIterator[None]:
    """Every fleet node but PLUGIN_NODES cordoned: neither free for the webhook nor a place for
    the scheduler (their slices are the simulated fleet's, not NVIDIA's plugin's)."""
    others = [name for name in fleet_node_names() if name not in PLUGIN_NODES]
    await cordon(kube, others, True)
    try:
        yield
    finally:
        await cordon(kube, others, False)


@pytest.fixture
async def placement_side(
    kube: KubeClient, nvidia_node_side_on: NodeSideOn
) -> AsyncIterator[NodeSide]:
    async with (
        only_plugin_nodes_schedulable(kube),
        nvidia_node_side_on(PLUGIN_NODES) as side,
    ):
        yield side


def preferring(body: dict[str, Any], clique: str) -> dict[str, Any]:
    """``body`` (a StatefulSet) whose pods prefer ``clique``, softly."""
    affinity = body["spec"]["template"]["spec"].setdefault("affinity", {})
    affinity.setdefault("nodeAffinity", {})["preferredDuringSchedulingIgnoredDuringExecution"] = [
        {
            "weight": 100,
            "preference": {
                "matchExpressions": [
                    {"key": c.GPU_CLIQUE_NODE_LABEL, "operator": "In", "values": [clique]}
                ]
            },
        }
    ]
    return body


@pytest.mark.parametrize("nvidia_target", [MAIN], ids=TARGET_VERSIONS.get, indirect=True)
async def test_the_webhook_places_a_job_in_the_clique_nvidias_plugin_labelled_with_room(
    nvidia_target: tuple[str, UpstreamBuild], placement_side: NodeSide
) -> None:
    started = time.monotonic()
    env = placement_side.env
    kube = env.kube
    cliques = placement_side.plugins.topology.cliques
    full_clique, room_clique = cliques[NEARLY_FULL[0]].label, cliques[WITH_ROOM[0]].label
    assert {cliques[n].label for n in NEARLY_FULL} == {full_clique} != {room_clique}
    # The labels the webhook reads are the plugin's (the fixture removed the fleet's first).
    labelled = {
        n: objects.label(await kube.get(r.NODES, n), c.GPU_CLIQUE_NODE_LABEL) for n in PLUGIN_NODES
    }
    assert labelled == {n: cliques[n].label for n in PLUGIN_NODES}

    configuration = f"placement-{env.namespace}"
    async with webhook_configured(kube, configuration, env.namespace) as port:
        await placement_side.start(**webhook_environ(port, configuration))
        await ca_bundle_written(kube, configuration)

        # The nearly full clique: one of its two nodes held by a domain the webhook leaves alone.
        filler = await env.create_cd("filler", rct_name="filler", num_nodes=1)
        await env.run_workload(workload("filler", 1, rct_name="filler", hostnames=NEARLY_FULL[:1]))
        await env.nodes_labelled(
            filler["metadata"]["uid"], lambda held: held == set(NEARLY_FULL[:1]), "filler holds"
        )

        body = compute_domain("job", rct_name="job", num_nodes=len(WITH_ROOM))
        body["metadata"]["annotations"] = {PLACEMENT_OPT_IN: "true"}
        cd = await kube.create(COMPUTE_DOMAINS, body, env.namespace)
        env.uids.add(cd["metadata"]["uid"])
        await env.run_workload(preferring(workload("job", 2, rct_name="job"), full_clique))

        pods = await env.workload_pods(
            "job",
            lambda pods: len(pods) == 2 and all(p["spec"].get("nodeName") for p in pods.values()),
            "both scheduled",
            within=START_WITHIN,
        )
        landed = {
            p["spec"]["nodeName"]: cliques[p["spec"]["nodeName"]].label for p in pods.values()
        }
        assert sorted(landed) == sorted(WITH_ROOM), (
            f"the job's pods landed on {landed}, not on {WITH_ROOM} (clique {room_clique})"
        )

        # NVIDIA's plugin prepared their channels there, and the domain is Ready on those nodes.
        running = await env.workload_pods(
            "job",
            lambda pods: len(pods) == 2 and all(pod_running(p) for p in pods.values()),
            "both Running",
            within=2 * START_WITHIN,
        )
        kubelet = placement_side.kubelet
        for pod in running.values():
            observed = kubelet.containers[pod["metadata"]["uid"]].observed()
            assert observed is not None
            assert observed["files"][CHANNEL] == f"c {IMEX_CHANNELS_MAJOR}:0", observed
        ready = await env.cd_until("job", cd_ready, "Ready", within=START_WITHIN)
        assert ready is not None
        assert {n: e["cliqueID"] for n, e in status_nodes(ready).items()} == dict.fromkeys(
            WITH_ROOM, room_clique
        )
        # What it recorded is the plugin's label on the nodes it holds.
        recorded = ready["metadata"]["annotations"][RECORDED_CLIQUE_ANNOTATION]
        held = await env.nodes_labelled(
            cd["metadata"]["uid"], lambda names: len(names) == 2, "job holds"
        )
        on_nodes = {
            objects.label(await kube.get(r.NODES, n), c.GPU_CLIQUE_NODE_LABEL) for n in held
        }
        assert (recorded, on_nodes) == (room_clique, {room_clique})
    print(f"placement with NVIDIA's plugin: {time.monotonic() - started:.1f}s")
