"""NVIDIA's real IMEX daemon under our controller: the test world (``NvidiaFleet``, the
``fleet`` fixture of conftest), and what the tests read from it (status entries, the daemons'
/etc/hosts and IMEX peers). Shared by test_nvidia_daemon and test_gate_toggle. And NVIDIA's node
side (``nvidia_node_side``: its kubelet plugin and daemons through the lab's stand-in kubelet),
shared by test_nvidia_plugin_e2e and test_nvidia_placement."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes_asyncio.client import ApiClient

from computedomain.api import constants as c
from computedomain.devcluster.controlplane import ControlPlane
from computedomain.devcluster.drakubelet import DraKubelet, NodePlugin, SharedDraKubelet, connect
from computedomain.devcluster.harness import RunningController
from computedomain.devcluster.helm import find_helm
from computedomain.devcluster.imexdaemon import DaemonRuntime, NvidiaDaemons, NvidiaImexDaemon
from computedomain.devcluster.kubeletplugin import DRIVER_NAME, PluginFleet, Topology, plugin_fleet
from computedomain.devcluster.processes import tail
from computedomain.devcluster.upstream import V041, MockNvml, UpstreamBuild
from computedomain.devcluster.watching import Objects, watch_objects
from computedomain.runtime import resources as r
from computedomain.runtime.client import ApiError, KubeClient
from computedomain.sim.fleet import build_resource_slice, resource_slice_name
from computedomain.sim.simulator import Simulator
from tests.integration.e2e_harness import EndToEnd, cd_ready, end_to_end, workload
from tests.integration.nvidia_install import install_daemon_rbac, remove_cluster_objects
from tests.kit.waiting import eventually

DNS_PREFIX = "compute-domain-daemon-"
# Our controller's FEATURE_GATES per status protocol (contract §9, §13): cliques (the default);
# the older protocol, where the daemons write the CD's status.nodes; that with IP-based IMEX config.
PROTOCOLS = {
    "cliques": "",
    "legacy": "ComputeDomainCliques=false",
    "ip-mode": "ComputeDomainCliques=false,IMEXDaemonsWithDNSNames=false",
}
Entry = dict[str, Any]


@dataclass
class NvidiaFleet:
    env: EndToEnd
    daemons: NvidiaDaemons
    kubeconfig: Path
    simulator: Simulator | None = None

    async def start(self, feature_gates: str = "") -> None:
        """Our controller (with ``feature_gates``) and the simulator, NVIDIA's daemon in it."""
        gates = {"FEATURE_GATES": feature_gates} if feature_gates else {}
        await self.env.start_controller(**gates)
        self.simulator = await self.env.start_simulator(daemon_factory=self.daemons)

    async def ready_domain(self, rack: str, feature_gates: str = "") -> tuple[str, list[Entry]]:
        """Our controller and the simulator started; CD "training" of 2 nodes with a 2-pod
        workload in ``rack``, once Ready: its UID and status.nodes."""
        await self.start(feature_gates)
        cd = await self.env.create_cd("training", num_nodes=2)
        await self.env.run_workload(workload("workers", 2, racks=[rack]))
        nodes = await self.nodes("training", ready_nodes(2), "2 Ready nodes")
        await self.env.cd_until("training", cd_ready, "Ready")
        return cd["metadata"]["uid"], nodes

    def on(self, node: str) -> NvidiaImexDaemon:
        daemon = self.daemons.on_node(node)
        assert daemon is not None, f"no NVIDIA daemon runs on {node}"
        return daemon

    async def nodes(
        self, cd_name: str, predicate: Callable[[list[Entry]], bool], what: str
    ) -> list[Entry]:
        """The CD's status.nodes once ``predicate`` holds for them."""
        cd = await self.env.cd_until(
            cd_name, lambda cd: predicate(status_nodes(cd)), what, within=90
        )
        return status_nodes(cd)

    async def daemon_pods_gone(self, uid: str) -> None:
        await self.env.daemon_pods_gone(uid)

    async def daemon_pod(self, uid: str, node: str) -> dict[str, Any]:
        def on_node(pods: Objects) -> dict[str, Any] | None:
            return next((p for p in pods.values() if p["spec"].get("nodeName") == node), None)

        found: dict[str, Any] = await watch_objects(
            self.env.kube,
            r.PODS,
            on_node,
            namespace=self.env.driver_namespace,
            label_selector=f"{c.CD_LABEL}={uid}",
            within=60,
            what=f"daemon pod of {uid} on {node}",
        )
        return found


@contextlib.asynccontextmanager
async def nvidia_fleet(
    kube: KubeClient,
    api_client: ApiClient,
    control_plane: ControlPlane,
    kubeconfig_path: Path,
    namespace: str,
    driver_namespace: str,
    upstream: UpstreamBuild,
    workdir: Path,
) -> AsyncIterator[NvidiaFleet]:
    """NVIDIA's daemon RBAC installed, and a test world whose simulator runs NVIDIA's daemon
    binary in every daemon pod (``workdir`` holds their files); all removed after."""
    assert control_plane.ca_file is not None
    made = await install_daemon_rbac(kube, find_helm(), upstream.chart, driver_namespace)
    runtime = DaemonRuntime(
        build=upstream,
        admin=api_client,
        server=control_plane.server,
        ca_file=control_plane.ca_file,
        workdir=workdir,
        restart_backoff=1.0,
    )
    daemons = NvidiaDaemons(runtime)
    try:
        async with end_to_end(kube, kubeconfig_path, namespace, driver_namespace) as env:
            yield NvidiaFleet(env, daemons, kubeconfig_path)
    finally:
        await daemons.close()
        await remove_cluster_objects(kube, made)


def status_nodes(cd: dict[str, Any] | None) -> list[Entry]:
    return list(((cd or {}).get("status") or {}).get("nodes") or [])


def ready_nodes(count: int) -> Callable[[list[Entry]], bool]:
    def check(nodes: list[Entry]) -> bool:
        return len(nodes) == count and all(n.get("status") == c.STATUS_READY for n in nodes)

    return check


def hosts_mappings(daemon: NvidiaImexDaemon) -> dict[str, str]:
    """The daemon's /etc/hosts lines for IMEX peers: DNS name -> IP."""
    mappings = {}
    for line in daemon.hosts.read_text().splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[1].startswith(DNS_PREFIX):
            mappings[fields[1]] = fields[0]
    return mappings


def clique_of(nodes: list[Entry], node: str) -> list[Entry]:
    clique_id = next(n["cliqueID"] for n in nodes if n["name"] == node)
    return [n for n in nodes if n["cliqueID"] == clique_id]


async def assert_imex_points_at_peers(
    fleet: NvidiaFleet, nodes: list[Entry], dns_names: bool
) -> None:
    """Each daemon's IMEX config names exactly its clique's peers (DNS names through its
    /etc/hosts, or IPs in nodes.cfg), and its IMEX last (re)read exactly those."""
    for entry in nodes:
        daemon = fleet.on(entry["name"])
        peers = clique_of(nodes, entry["name"])
        addresses = {peer["ipAddress"] for peer in peers}

        async def configured(daemon: NvidiaImexDaemon = daemon, peers: list[Entry] = peers) -> bool:
            nodes_cfg = (daemon.imexd / "nodes.cfg").read_text().split()
            if dns_names:
                wanted = {f"{DNS_PREFIX}{peer['index']:04d}": peer["ipAddress"] for peer in peers}
                return hosts_mappings(daemon) == wanted and set(wanted) <= set(nodes_cfg)
            return set(nodes_cfg) == {peer["ipAddress"] for peer in peers}

        async def pointed(daemon: NvidiaImexDaemon = daemon, want: set[str] = addresses) -> bool:
            return set(daemon.imex.peers() or ()) == want

        await eventually(configured, within=30, what=f"IMEX config on {entry['name']}")
        await eventually(pointed, within=30, what=f"IMEX on {entry['name']} pointed at its peers")


def configured_as(
    on: Callable[[str], NvidiaImexDaemon], cd: dict[str, Any] | None
) -> dict[str, Any]:
    """What the daemons were configured with, addresses replaced by node names (they differ
    between runs): CD status, and per node its /etc/hosts mappings, nodes.cfg, imexd.cfg and the
    peers its IMEX last read (``on(node)``: the daemon on a node). Indexes go by join order, so the
    mappings are checked against the status (assert_imex_points_at_peers) and compared here as the
    set of nodes they name."""
    nodes = status_nodes(cd)
    names = {n["ipAddress"]: n["name"] for n in nodes}

    def named(text: str) -> str:
        for address, node in names.items():
            text = text.replace(address, f"<{node}>")
        return text

    seen: dict[str, Any] = {
        "status.status": ((cd or {}).get("status") or {}).get("status"),
        # Per node: its IP (which must be its daemon pod's), clique and status; the indexes as a
        # set, since which node gets which goes by the order the daemons joined.
        "status.nodes": sorted(
            (
                n["name"],
                "<its daemon's IP>" if n["ipAddress"] == on(n["name"]).ip else n["ipAddress"],
                n["cliqueID"],
                n["status"],
            )
            for n in nodes
        ),
        "status.nodes indexes": sorted(n["index"] for n in nodes),
    }
    for node in sorted(names.values()):
        daemon = on(node)
        seen[f"{node} /etc/hosts names"] = sorted(
            names.get(ip, ip) for ip in hosts_mappings(daemon).values()
        )
        # In IP mode the daemon lists its peers in the order they joined: compared as a set.
        seen[f"{node} nodes.cfg"] = sorted(named((daemon.imexd / "nodes.cfg").read_text()).split())
        settings = (daemon.imexd / "imexd.cfg").read_text().splitlines()
        seen[f"{node} imexd.cfg"] = [named(s) for s in settings if s and not s.startswith("#")]
        seen[f"{node} IMEX peers"] = sorted(names.get(ip, ip) for ip in daemon.imex.peers() or ())
    return seen


# NVIDIA's compute-domain kubelet plugin and daemons on some nodes, through the lab's stand-in
# kubelet: the node side of test_nvidia_plugin_e2e and test_nvidia_placement.

CHANNEL = "/dev/nvidia-caps-imex-channels/channel0"
START_WITHIN = 90.0


@dataclass
class NodeSide:
    """NVIDIA's plugin and daemon on some nodes (those nvidia_node_side was given), the
    stand-in kubelet between them and the pods."""

    env: EndToEnd
    plugins: PluginFleet
    kubelets: SharedDraKubelet
    daemons: NvidiaDaemons
    build: UpstreamBuild
    kubeconfig: Path
    simulator: Simulator | None = None
    controller: RunningController | None = None

    async def start(self, **controller_env: str) -> None:
        self.controller = await self.env.start_controller(**controller_env)
        await self.start_nodes()

    async def controller_saw_label(self, node: str, label: str) -> None:
        """Until our controller's Node cache has ``node``'s clique ``label`` and it has handled
        every event it has seen."""
        controller = self.controller
        assert controller is not None
        nodes = controller.process.caches.nodes.store

        async def seen() -> bool:
            return clique_label(nodes.get(node)) == label

        await eventually(seen, within=10, what=f"{node}'s new label in the controller's cache")
        # Timers too: a requeue due within a few seconds could still write.
        await controller.wait_idle(within=5.0)

    async def start_nodes(self) -> None:
        """The simulator, with NVIDIA's daemons and the stand-in kubelet (no controller)."""
        self.simulator = await self.env.start_simulator(
            daemon_factory=self.daemons, workload_kubelet=self.kubelets
        )

    @property
    def kubelet(self) -> DraKubelet:
        assert self.simulator is not None
        return self.kubelets(self.simulator.context)

    def daemon(self, node: str) -> NvidiaImexDaemon:
        daemon = self.daemons.on_node(node)
        assert daemon is not None, f"no NVIDIA daemon runs on {node}"
        return daemon

    def diagnostics(self) -> str:
        parts = [f"--- plugin {n.name}:\n{tail(n.log)}" for n in self.plugins.nodes.values()]
        parts += [
            f"--- daemon {d.key}:\n{d.log_text()[-3000:]}" for d in self.daemons.containers.values()
        ]
        return "\n".join(parts)


def clique_label(node: Mapping[str, Any] | None) -> str | None:
    return ((node or {}).get("metadata", {}).get("labels") or {}).get(c.GPU_CLIQUE_NODE_LABEL)


async def _delete_slice(kube: KubeClient, name: str) -> None:
    try:
        await kube.delete(r.RESOURCE_SLICES, name)
    except ApiError as err:
        if not err.is_not_found:
            raise


@contextlib.asynccontextmanager
async def nvidia_nodes(
    kube: KubeClient, nodes: list[str], plugin_labels: bool = True
) -> AsyncIterator[Topology]:
    """``nodes`` without the simulated fleet's ResourceSlices (NVIDIA's plugin makes its own) and,
    where the plugin sets the clique label itself (``plugin_labels``: v0.5), without their clique
    labels (elsewhere GPU Feature Discovery's, which the fleet's stand for); as before
    afterwards."""
    topology = Topology.from_nodes([await kube.get(r.NODES, name) for name in nodes])
    for name in nodes:
        if plugin_labels:
            unlabel = {"metadata": {"labels": {c.GPU_CLIQUE_NODE_LABEL: None}}}
            await kube.patch(r.NODES, name, unlabel)
        await _delete_slice(kube, resource_slice_name(name))
    try:
        yield topology
    finally:
        slices = await kube.list(r.RESOURCE_SLICES)
        for item in slices["items"]:
            if item["spec"].get("driver") == DRIVER_NAME and item["spec"].get("nodeName") in nodes:
                await _delete_slice(kube, item["metadata"]["name"])
        for name in nodes:
            await kube.create(r.RESOURCE_SLICES, build_resource_slice(name))
            label = topology.cliques[name].label
            await kube.patch(
                r.NODES, name, {"metadata": {"labels": {c.GPU_CLIQUE_NODE_LABEL: label}}}
            )


async def plugins_serving(kube: KubeClient, plugins: PluginFleet) -> dict[str, NodePlugin]:
    """Start every plugin; once each published its slice and labelled its node, register it
    with the stand-in kubelet."""
    plugins.start_all()

    def serving(slices: Objects) -> bool:
        published = {
            s["spec"].get("nodeName")
            for s in slices.values()
            if s["spec"].get("driver") == DRIVER_NAME
            and s["metadata"]["name"] != resource_slice_name(str(s["spec"].get("nodeName")))
        }
        return set(plugins.nodes) <= published

    await watch_objects(
        kube, r.RESOURCE_SLICES, serving, within=START_WITHIN, what="a slice per plugin"
    )
    expected = {name: plugins.topology.cliques[name].label for name in plugins.nodes}
    await watch_objects(
        kube,
        r.NODES,
        lambda found: all(clique_label(found.get(n)) == v for n, v in expected.items()),
        within=START_WITHIN,
        what="nodes labelled by their plugins",
    )
    plugins.check_running()
    return {
        name: await connect(name, node.registration_socket, [node.cdi_root])
        for name, node in plugins.nodes.items()
    }


@contextlib.asynccontextmanager
async def nvidia_node_side(
    nvidia_target: tuple[str, UpstreamBuild],
    mock_nvml: MockNvml,
    control_plane: ControlPlane,
    api_client: ApiClient,
    kube: KubeClient,
    kubeconfig_path: Path,
    namespace: str,
    driver_namespace: str,
    tmp_path: Path,
    nodes: list[str],
) -> AsyncIterator[NodeSide]:
    """NVIDIA's plugins and daemons of ``nvidia_target`` on ``nodes`` (one plugin process each:
    as few as make a test's point), the stand-in kubelet between them and the pods."""
    target, build = nvidia_target
    assert control_plane.ca_file is not None
    helm = find_helm()
    made = await install_daemon_rbac(kube, helm, build.chart, driver_namespace)
    daemons: NvidiaDaemons | None = None
    try:
        async with (
            nvidia_nodes(kube, nodes, plugin_labels=target != V041) as topology,
            plugin_fleet(
                build,
                mock_nvml,
                helm,
                api_client,
                control_plane.server,
                control_plane.ca_file,
                tmp_path / "plugins",
                driver_namespace,
                topology,
            ) as plugins,
        ):
            registered = await plugins_serving(kube, plugins)
            kubelets = SharedDraKubelet(registered, tmp_path / "pods")
            runtime = DaemonRuntime(
                build=build,
                admin=api_client,
                server=control_plane.server,
                ca_file=control_plane.ca_file,
                workdir=tmp_path / "daemons",
                restart_backoff=1.0,
                kubelet=kubelets,
            )
            daemons = NvidiaDaemons(runtime)
            async with end_to_end(kube, kubeconfig_path, namespace, driver_namespace) as env:
                side = NodeSide(env, plugins, kubelets, daemons, build, kubeconfig_path)
                try:
                    yield side
                except BaseException:
                    print(side.diagnostics())
                    raise
            await daemons.close()
            daemons = None
    finally:
        if daemons is not None:
            await daemons.close()
        await remove_cluster_objects(kube, made)


# nvidia_node_side on the nodes given, the rest from a test's fixtures (conftest's
# nvidia_node_side_on).
NodeSideOn = Callable[[list[str]], AbstractAsyncContextManager[NodeSide]]
