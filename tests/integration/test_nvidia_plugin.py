"""NVIDIA's own compute-domain kubelet plugin (main at 95932046, v0.5.0-dev, hack/upstream/build.sh)
on simulated nodes, on NVIDIA's mock NVML (hack/upstream/mocknvml.sh, GB200 profile):
computedomain/devcluster/kubeletplugin.py runs it per node, under the RBAC NVIDIA's chart renders
for it, its fabric identity from the mock's topology file (each rack its NVLink cluster).

Four nodes of the shared test fleet, two per rack: their clique labels and simulated ResourceSlices
are taken away first (so that what comes back is the plugin's work) and restored afterwards.

- Each plugin publishes its node's ResourceSlice and sets ``nvidia.com/gpu.clique`` to what its
  GPUs report; stopped (SIGTERM) it removes the label, restarted it sets it again.
- Issue 30's point, with the real plugin: while the plugins of a Ready ComputeDomain's nodes are
  down (a rolling upgrade), the label is missing, and our controller leaves the domain Ready,
  writes nothing to it and emits no Warning; the clique gauge and ``kubectl cdom cliques`` count
  those nodes, held by the domain, under ``<label missing>``, and as before once it is back.
- The clique follows the GPUs: changed through the mock NVML's overrides, the restarted plugin
  labels the node with the new one.
- NVIDIA's v0.4.1 plugin runs the same way, without the label (it came with v0.5).

Needs NVIDIA's builds (main; v0.4.1 for one test) and the mock NVML: skipped without them, except
under CI=true, or with their sources set (NVIDIA_DRA_DRIVER_MAIN_SRC / NVIDIA_DRA_DRIVER_SRC and
COMPUTEDOMAIN_REQUIRE_UPSTREAM=1 for the builds, NVIDIA_MOCK_NVML_SRC for the mock), where they
must be there.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.devcluster.controlplane import ControlPlane
from computedomain.devcluster.helm import find_helm
from computedomain.devcluster.kubeletplugin import (
    DRIVER_NAME,
    Clique,
    PluginFleet,
    plugin_fleet,
)
from computedomain.devcluster.upstream import MockNvml, UpstreamBuild
from computedomain.devcluster.watching import Objects, watch_objects
from computedomain.domain.topology import LABEL_MISSING
from computedomain.runtime import resources as r
from computedomain.runtime.client import KubeClient
from computedomain.sim.fleet import rack_node_name, resource_slice_name
from tests.integration.cluster import TEST_FLEET
from tests.integration.e2e_harness import EndToEnd, cd_ready, status_nodes, workload
from tests.integration.nvidia_fleet import clique_label, nvidia_nodes
from tests.kit.controllers import clique_gauges
from tests.kit.kubectl_plugin import cliques_rows
from tests.kit.waiting import eventually

pytestmark = pytest.mark.integration

# Two racks, two nodes each.
NODES = [rack_node_name(TEST_FLEET.name_prefix, rack, index) for rack in (0, 1) for index in (0, 1)]
START_WITHIN = 90.0


async def labels_until(
    kube: KubeClient, expected: Mapping[str, str | None], what: str, within: float = START_WITHIN
) -> None:
    """Until each node's clique label is as ``expected`` (None: absent)."""
    seen: dict[str, str | None] = {}

    async def check() -> bool:
        for name in expected:
            seen[name] = clique_label(await kube.get(r.NODES, name))
        return seen == dict(expected)

    try:
        await eventually(check, within=within, what=what, interval=0.5)
    except TimeoutError as error:
        raise AssertionError(f"{what}: clique labels {seen}, expected {dict(expected)}") from error


def plugin_slices(slices: Objects, node: str) -> list[dict[str, Any]]:
    """The node's compute-domain ResourceSlices that NVIDIA's plugin published (not the
    simulator's)."""
    return [
        s
        for s in slices.values()
        if s["spec"].get("driver") == DRIVER_NAME
        and s["spec"].get("nodeName") == node
        and s["metadata"]["name"] != resource_slice_name(node)
    ]


@contextlib.asynccontextmanager
async def taken_over(
    build: UpstreamBuild,
    mock: MockNvml,
    control_plane: ControlPlane,
    api_client: ApiClient,
    kube: KubeClient,
    driver_namespace: str,
    workdir: Path,
) -> AsyncIterator[PluginFleet]:
    """NVIDIA's plugin of ``build`` set up (not started) for NODES, whose clique labels and
    simulated ResourceSlices are gone until the end, when the fleet is as before."""
    async with (
        nvidia_nodes(kube, NODES) as topology,
        plugin_fleet(
            build,
            mock,
            find_helm(),
            api_client,
            control_plane.server,
            control_plane.ca_file,
            workdir,
            driver_namespace,
            topology,
        ) as fleet,
    ):
        yield fleet


@pytest.fixture
async def plugins(
    upstream_main: UpstreamBuild,
    mock_nvml: MockNvml,
    control_plane: ControlPlane,
    api_client: ApiClient,
    kube: KubeClient,
    driver_namespace: str,
    tmp_path: Path,
) -> AsyncIterator[PluginFleet]:
    """NVIDIA's main (v0.5.0-dev) plugin for NODES (see ``taken_over``)."""
    async with taken_over(
        upstream_main, mock_nvml, control_plane, api_client, kube, driver_namespace, tmp_path
    ) as fleet:
        yield fleet


async def test_each_plugin_publishes_its_slice_and_labels_its_node_with_its_clique(
    plugins: PluginFleet, kube: KubeClient
) -> None:
    expected = {name: plugins.topology.cliques[name].label for name in NODES}
    # Each rack is an NVLink cluster of its own.
    assert len({plugins.topology.cliques[name].cluster_uuid for name in NODES}) == 2
    await labels_until(kube, dict.fromkeys(NODES), "no clique label before the plugins")

    plugins.start_all()
    await labels_until(kube, expected, "every node labelled by its plugin")
    plugins.check_running()

    def published(slices: Objects) -> dict[str, list[dict[str, Any]]] | None:
        found = {name: plugin_slices(slices, name) for name in NODES}
        return found if all(found.values()) else None

    found = await watch_objects(
        kube, r.RESOURCE_SLICES, published, within=START_WITHIN, what="a slice per node"
    )
    for name, slices in found.items():
        devices = {d["name"] for s in slices for d in s["spec"]["devices"]}
        assert {"channel-0", "daemon-0"} <= devices, (name, sorted(devices)[:5])
    for name in NODES:
        node = plugins.node(name)
        assert node.dra_socket.is_socket(), node.dra_socket
        assert node.registration_socket.is_socket(), node.registration_socket

    # Stopped, a plugin takes its label away (and only its own); started again, it is back.
    stopped = NODES[0]
    code = plugins.stop(stopped)
    await labels_until(kube, {**expected, stopped: None}, f"label gone from {stopped}")
    assert code == 0, plugins.node(stopped).log
    plugins.start(stopped)
    await labels_until(kube, expected, f"label back on {stopped}")
    plugins.check_running()


async def test_nvidia_v041_plugin_runs_alike_without_the_label(
    upstream: UpstreamBuild,
    mock_nvml: MockNvml,
    control_plane: ControlPlane,
    api_client: ApiClient,
    kube: KubeClient,
    driver_namespace: str,
    tmp_path: Path,
) -> None:
    """NVIDIA's v0.4.1 plugin, the same way: its slice and sockets, but no clique label (the
    label came with v0.5)."""
    async with taken_over(
        upstream, mock_nvml, control_plane, api_client, kube, driver_namespace, tmp_path
    ) as plugins:
        plugins.start_all()

        def published(slices: Objects) -> bool:
            return all(plugin_slices(slices, name) for name in NODES)

        await watch_objects(
            kube, r.RESOURCE_SLICES, published, within=START_WITHIN, what="a slice per node"
        )
        for name in NODES:
            assert plugins.node(name).dra_socket.is_socket()
            assert plugins.node(name).registration_socket.is_socket()
        plugins.check_running()
        await labels_until(kube, dict.fromkeys(NODES), "still no clique label", within=2)
        for name in NODES:
            assert plugins.stop(name) == 0, plugins.node(name).log


async def test_the_label_follows_a_clique_change_of_the_gpus(
    plugins: PluginFleet, kube: KubeClient
) -> None:
    name = NODES[1]
    plugins.start(name)
    await labels_until(kube, {name: plugins.topology.cliques[name].label}, "labelled")
    moved = Clique(plugins.topology.cliques[NODES[2]].cluster_uuid, 7)
    plugins.set_clique(name, moved)
    plugins.restart(name)
    await labels_until(kube, {name: moved.label}, f"{name} labelled with its new clique")
    plugins.set_clique(name, None)
    plugins.restart(name)
    await labels_until(kube, {name: plugins.topology.cliques[name].label}, "back")
    plugins.check_running()


async def warnings_of(e2e: EndToEnd, cd: dict[str, Any]) -> dict[str, tuple[str, int]]:
    """The Warning Events about ``cd``: name -> (reason, times seen)."""
    events = await e2e.kube.list(r.EVENTS, e2e.namespace)
    return {
        e["metadata"]["name"]: (str(e.get("reason")), int((e.get("series") or {}).get("count", 1)))
        for e in events["items"]
        if e.get("type") == "Warning"
        and (e.get("regarding") or {}).get("uid") == cd["metadata"]["uid"]
    }


async def test_a_ready_domain_outlives_the_plugins_taking_the_label_away(
    plugins: PluginFleet, e2e: EndToEnd, kubeconfig_path: Path
) -> None:
    plugins.start_all()
    expected = {name: plugins.topology.cliques[name].label for name in NODES}
    await labels_until(e2e.kube, expected, "every node labelled by its plugin")
    controller = await e2e.start_controller()
    await e2e.start_simulator()
    size = len(NODES)
    cd = await e2e.create_cd("plugins", num_nodes=size)
    await e2e.run_workload(workload("plugins", size, hostnames=NODES))
    await e2e.cd_until(
        "plugins",
        lambda cd: cd_ready(cd) and set(status_nodes(cd)) == set(NODES),
        "Ready on the plugins' nodes",
        within=120,
    )
    await controller.wait_idle(timers=False)
    before = await e2e.kube.get(COMPUTE_DOMAINS, "plugins", e2e.namespace)
    writes = controller.writes()
    warned = await warnings_of(e2e, cd)
    assert set(warned.values()) == {("MultipleCliques", 1)}, warned

    rows_before = await cliques_rows(kubeconfig_path)
    assert LABEL_MISSING not in rows_before

    # A rolling upgrade: every plugin stops, taking its label along.
    plugins.stop_all()
    await labels_until(e2e.kube, dict.fromkeys(NODES), "labels gone with the plugins")
    # The inventory says what is true: the nodes are there, held by the CD, their label missing
    # (the gauge and kubectl cdom cliques), not dropped.
    size_missing = {"total": size, "ready": size, "held": size, "free": 0}

    async def counted_missing() -> dict[str, int] | None:
        found = clique_gauges(controller).get(LABEL_MISSING)
        return found if found == size_missing else None

    await eventually(counted_missing, within=30, what="<label missing> in the clique gauge")
    missing = (await cliques_rows(kubeconfig_path))[LABEL_MISSING]
    assert (missing["nodes"], missing["held"]) == (size, size), missing
    assert missing["domains"] == {f"{e2e.namespace}/plugins": size}, missing
    await controller.wait_idle(timers=False)
    during = await e2e.kube.get(COMPUTE_DOMAINS, "plugins", e2e.namespace)
    assert cd_ready(during)
    assert during["status"] == before["status"]
    assert during["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert controller.writes() == writes
    # No Warning about it: the one at creation (the CD spans the two racks' cliques) stays the
    # only one, not repeated.
    assert await warnings_of(e2e, cd) == warned

    plugins.start_all()
    await labels_until(e2e.kube, expected, "labels back with the plugins")
    await controller.wait_idle(timers=False)
    after = await e2e.kube.get(COMPUTE_DOMAINS, "plugins", e2e.namespace)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert await cliques_rows(kubeconfig_path) == rows_before
    assert controller.writes() == writes
    assert await warnings_of(e2e, cd) == warned
    plugins.check_running()
