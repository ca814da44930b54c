"""NVIDIA's own ``compute-domain-kubelet-plugin`` for simulated (kwok) nodes, on NVIDIA's mock NVML.

Per node, the plugin of a build (``hack/upstream/build.sh``, main by default) runs as that node's
plugin would in NVIDIA's DaemonSet, with the environment NVIDIA's chart (the build's copy) gives
the container, but everything node-local in a directory of its own:

- a driver root: ``usr/lib64/libnvidia-ml.so.1`` = the mock NVML (``hack/upstream/mocknvml.sh``,
  GB200 profile), ``libnvidia-ml.so.<ver>``/``libcuda.so.<ver>`` files, an ``nvidia-smi`` stub and
  character devices ``dev/nvidia0..7``, ``dev/nvidiactl``, ``dev/nvidia-uvm`` (``mknod``);
- a CDI root, the kubelet's plugin registration directory (``registration_socket``) and plugins
  directory (``dra_socket``), which a stand-in kubelet talks to;
- ``/proc/devices`` (the host's, with ``nvidia-caps-imex-channels`` and ``nvidia-caps`` among the
  character devices) and a ``/proc/driver/nvidia`` holding only the fabric-imex-mgmt capability
  (what the plugin reads to give a daemon claim its device node), bound over the real ones in
  the plugin's private mount namespace (``hack/upstream/run.sh``);
- the mock's fabric identity: a topology file (``MOCK_TOPOLOGY_CONFIG`` + ``NODE_NAME``) gives
  each node its rack's NVLink cluster UUID and clique ID, and a per-node overrides file
  (``MOCK_NVML_OVERRIDES``) can change it at run time (``set_clique``).

It talks to the apiserver as the plugin's ServiceAccount (a TokenRequest token) under the RBAC
NVIDIA's chart renders for the kubelet plugin (``install_plugin_rbac``). Loopback only: its
metrics and health ports are off.

Usage (async, one event loop)::

    async with plugin_fleet(build, mock, helm, admin, server, ca_file, workdir, namespace,
                            Topology.from_nodes(nodes)) as fleet:
        fleet.start_all()
        fleet.node("n1").dra_socket, fleet.node("n1").registration_socket
        fleet.stop("n1"); fleet.start("n1"); fleet.restart("n1")
        fleet.set_clique("n1", Clique(uuid, 3)); fleet.restart("n1")
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from computedomain.devcluster.clients import request_service_account_token, token_kubeconfig
from computedomain.devcluster.podrunner import resolve_env
from computedomain.devcluster.processes import ChildProcess, spawn, tail
from computedomain.devcluster.rest import request_json
from computedomain.devcluster.upstream import (
    KUBELET_PLUGIN,
    UPSTREAM_RUN_SCRIPT,
    MockNvml,
    UpstreamBuild,
    render_chart,
)

# The plugin's driver name: its ResourceSlices' driver, its directory under the plugins
# directory, its registration socket's name.
DRIVER_NAME = "compute-domain.nvidia.com"
CLIQUE_LABEL = "nvidia.com/gpu.clique"
RBAC_TEMPLATE = "templates/rbac-kubeletplugin.yaml"
DAEMONSET_TEMPLATE = "templates/kubeletplugin.yaml"
CONTAINER = "compute-domains"
# The chart values: NVIDIA's ComputeDomain install (no GPU plugin), and the clique label on.
CHART_VALUES: dict[str, Any] = {
    "resources.gpus.enabled": False,
    "kubeletPlugin.containers.computeDomains.gpuCliqueLabelEnabled": True,
}
GPUS_PER_NODE = 8  # the GB200 profile's
# Character device majors of the fake driver (those of NVIDIA's driver; the plugin only stats
# the files) and the IMEX channels' major, which the plugin looks up in /proc/devices.
_NVIDIA_MAJOR = 195
_UVM_MAJOR = 510
IMEX_CHANNELS_MAJOR = 235
IMEX_CHANNELS_DEVICE = "nvidia-caps-imex-channels"
# The driver's capability devices (/dev/nvidia-caps/nvidia-cap<minor>): the plugin gives a daemon
# claim on a fabric node the fabric-imex-mgmt one, whose minor it reads from
# /proc/driver/nvidia/capabilities/fabric-imex-mgmt and major from /proc/devices.
CAPS_MAJOR = 236
CAPS_DEVICE = "nvidia-caps"
FABRIC_IMEX_MGMT_MINOR = 1
FABRIC_IMEX_MGMT = (
    f"DeviceFileMinor: {FABRIC_IMEX_MGMT_MINOR}\nDeviceFileMode: 256\nDeviceFileModify: 1\n"
)
# sun_path's size less the terminating NUL.
_SOCKET_PATH_MAX = 107
_TOPOLOGY_NAMESPACE = uuid.UUID("6f1d3a52-4c1b-4b8e-9a57-6d0f0c2a9e11")


@dataclass(frozen=True)
class Clique:
    """An NVLink fabric identity: the cluster UUID and the clique ID within it. ``label`` is
    what NVIDIA's plugin writes into ``nvidia.com/gpu.clique``."""

    cluster_uuid: str
    clique_id: int

    @property
    def label(self) -> str:
        return f"{self.cluster_uuid}.{self.clique_id}"

    @classmethod
    def parse(cls, label: str) -> Clique:
        cluster, _, clique = label.rpartition(".")
        return cls(str(uuid.UUID(cluster)), int(clique))


@dataclass(frozen=True)
class Topology:
    """Which clique each node's GPUs report: the mock's topology document."""

    cliques: Mapping[str, Clique]

    @classmethod
    def from_nodes(cls, nodes: Iterable[Mapping[str, Any]]) -> Topology:
        """The cliques the nodes' ``nvidia.com/gpu.clique`` labels name (the simulated fleet's
        labels): NVIDIA's plugin then writes the label each node already has."""
        cliques = {}
        for node in nodes:
            label = (node.get("metadata", {}).get("labels") or {}).get(CLIQUE_LABEL)
            if not label:
                raise ValueError(f"node {node['metadata']['name']} has no {CLIQUE_LABEL} label")
            cliques[node["metadata"]["name"]] = Clique.parse(label)
        return cls(cliques)

    @classmethod
    def per_rack(
        cls, names: Iterable[str], rack: Callable[[str], str] | None = None, clique_id: int = 1
    ) -> Topology:
        """One NVLink cluster per rack (``rack(name)``; by default the name up to its last
        ``-``), its UUID derived from the rack's name, every node in clique ``clique_id``."""
        rack = rack or (lambda name: name.rsplit("-", 1)[0])
        return cls(
            {
                name: Clique(str(uuid.uuid5(_TOPOLOGY_NAMESPACE, rack(name))), clique_id)
                for name in names
            }
        )

    def document(self) -> dict[str, Any]:
        """The mock's topology file: ``domains: [{uuid, cliques: [{id, nodes}]}]``."""
        domains: dict[str, dict[int, list[str]]] = {}
        for name, clique in sorted(self.cliques.items()):
            domains.setdefault(clique.cluster_uuid, {}).setdefault(clique.clique_id, []).append(
                name
            )
        return {
            "domains": [
                {
                    "uuid": cluster,
                    "cliques": [{"id": i, "nodes": nodes} for i, nodes in sorted(cliques.items())],
                }
                for cluster, cliques in sorted(domains.items())
            ]
        }


@dataclass
class PluginNode:
    """One simulated node's plugin: its files and, while it runs, its process. ``kubelet_root``
    holds the kubelet's directories, apart from ``root``: a Unix socket's path must stay under
    108 bytes."""

    name: str
    root: Path
    kubelet_root: Path
    process: ChildProcess | None = None
    starts: int = 0

    @property
    def driver_root(self) -> Path:
        return self.root / "driver-root"

    @property
    def cdi_root(self) -> Path:
        return self.root / "cdi"

    @property
    def registrar_dir(self) -> Path:
        """The kubelet's plugin registration directory (``plugins_registry``)."""
        return self.kubelet_root / "plugins_registry"

    @property
    def plugins_dir(self) -> Path:
        """The kubelet's plugins directory (``plugins``)."""
        return self.kubelet_root / "plugins"

    @property
    def plugin_data_dir(self) -> Path:
        """The plugin's own directory (checkpoint, ``dra.sock``)."""
        return self.plugins_dir / DRIVER_NAME

    @property
    def dra_socket(self) -> Path:
        """The DRA gRPC service (NodePrepareResources, NodeUnprepareResources)."""
        return self.plugin_data_dir / "dra.sock"

    @property
    def registration_socket(self) -> Path:
        """The kubelet plugin registration service (GetInfo, NotifyRegistrationStatus)."""
        return self.registrar_dir / f"{DRIVER_NAME}-reg.sock"

    @property
    def proc_devices(self) -> Path:
        return self.root / "proc-devices"

    @property
    def proc_driver(self) -> Path:
        return self.root / "proc-driver"

    @property
    def overrides(self) -> Path:
        """The mock NVML's runtime overrides (``MOCK_NVML_OVERRIDES``), re-read within a
        second by the library in a running plugin."""
        return self.root / "mock-nvml-overrides.yaml"

    @property
    def log(self) -> Path:
        """The log of the latest start."""
        return self.root / f"plugin-{self.starts}.log"

    def alive(self) -> bool:
        return self.process is not None and self.process.alive()

    def check_paths(self) -> None:
        for socket in (self.dra_socket, self.registration_socket):
            if len(os.fsencode(socket)) > _SOCKET_PATH_MAX:
                raise ValueError(f"{socket}: too long for a Unix socket")


def proc_devices(host: str) -> str:
    """The host's /proc/devices (``host``) with the IMEX channels' and capabilities' majors
    among the character devices, where the plugin looks them up."""
    lines = host.splitlines()
    out: list[str] = []
    added = False
    for line in lines:
        if not added and out and out[0].startswith("Character") and not line.strip():
            out.append(f"{IMEX_CHANNELS_MAJOR:3d} {IMEX_CHANNELS_DEVICE}")
            out.append(f"{CAPS_MAJOR:3d} {CAPS_DEVICE}")
            added = True
        out.append(line)
    if not added:
        raise RuntimeError("/proc/devices has no character devices section")
    return "\n".join(out) + "\n"


def _mknod(path: Path, major: int, minor: int) -> None:
    if not path.exists():
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))


def prepare_node(node: PluginNode, mock: MockNvml) -> None:
    """The node's files (idempotent): driver root, kubelet directories, /proc stand-ins."""
    version = mock.driver_version
    lib = node.driver_root / "usr" / "lib64"
    lib.mkdir(parents=True, exist_ok=True)
    real = lib / f"libnvidia-ml.so.{version}"
    if not real.exists():
        real.symlink_to(mock.library)
    for link, target in (
        ("libnvidia-ml.so.1", real.name),
        ("libnvidia-ml.so", "libnvidia-ml.so.1"),
    ):
        if not (lib / link).is_symlink():
            (lib / link).symlink_to(target)
    cuda = lib / f"libcuda.so.{version}"
    cuda.touch()
    for link in ("libcuda.so.1", "libcuda.so"):
        if not (lib / link).is_symlink():
            (lib / link).symlink_to(cuda.name)
    bindir = node.driver_root / "usr" / "bin"
    bindir.mkdir(parents=True, exist_ok=True)
    smi = bindir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'nvidia-smi stand-in (mock NVML)'\n")
    smi.chmod(0o755)
    dev = node.driver_root / "dev"
    dev.mkdir(exist_ok=True)
    for index in range(GPUS_PER_NODE):
        _mknod(dev / f"nvidia{index}", _NVIDIA_MAJOR, index)
    _mknod(dev / "nvidiactl", _NVIDIA_MAJOR, 255)
    _mknod(dev / "nvidia-uvm", _UVM_MAJOR, 0)
    for directory in (node.cdi_root, node.registrar_dir, node.plugins_dir):
        directory.mkdir(parents=True, exist_ok=True)
    node.proc_devices.write_text(proc_devices(Path("/proc/devices").read_text()))
    capabilities = node.proc_driver / "nvidia" / "capabilities"
    capabilities.mkdir(parents=True, exist_ok=True)
    (capabilities / "fabric-imex-mgmt").write_text(FABRIC_IMEX_MGMT)


def chart_plugin_environment(
    helm: Path, build: UpstreamBuild, namespace: str, node: str
) -> dict[str, str]:
    """The environment NVIDIA's chart (the build's copy) gives the compute-domain kubelet plugin
    container of ``node``'s pod in ``namespace``."""
    for doc in render_chart(
        helm, build.chart, namespace, CHART_VALUES, show_only=DAEMONSET_TEMPLATE
    ):
        if doc.get("kind") != "DaemonSet":
            continue
        for container in doc["spec"]["template"]["spec"]["containers"]:
            if container["name"] == CONTAINER:
                pod = {
                    "metadata": {"name": f"kubelet-plugin-{node}", "namespace": namespace},
                    "spec": {"nodeName": node},
                }
                return resolve_env(pod, container)
    raise RuntimeError(f"NVIDIA's chart rendered no {CONTAINER} container")


def _cluster_scoped(kind: str) -> bool:
    return kind in ("ClusterRole", "ClusterRoleBinding")


_PATHS = {
    "ServiceAccount": "/api/v1/namespaces/{ns}/serviceaccounts",
    "Role": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
}


@dataclass(frozen=True)
class PluginRbac:
    """What ``install_plugin_rbac`` made: the ServiceAccount, and the cluster-scoped objects
    (paths) to delete afterwards."""

    namespace: str
    service_account: str
    cluster_objects: tuple[str, ...]


async def install_plugin_rbac(
    admin: ApiClient, helm: Path, build: UpstreamBuild, namespace: str
) -> PluginRbac:
    """The kubelet plugin's ServiceAccount, ClusterRole, Role and bindings as NVIDIA's chart (the
    build's copy) renders them for driver namespace ``namespace`` (which must exist); the
    cluster-scoped ones renamed after the namespace so that tests (and a release of the chart)
    do not share them. Existing objects are kept."""
    service_account = ""
    cluster_objects: list[str] = []
    for doc in render_chart(helm, build.chart, namespace, CHART_VALUES, show_only=RBAC_TEMPLATE):
        kind = doc["kind"]
        if kind == "ServiceAccount":
            service_account = doc["metadata"]["name"]
        if _cluster_scoped(kind):
            doc["metadata"]["name"] = f"{doc['metadata']['name']}-{namespace}"
        if kind == "ClusterRoleBinding":
            doc["roleRef"]["name"] = f"{doc['roleRef']['name']}-{namespace}"
        path = _PATHS[kind].format(ns=namespace)
        try:
            await request_json(admin, "POST", path, doc)
        except ApiException as error:
            if error.status != 409:
                raise
        if _cluster_scoped(kind):
            cluster_objects.append(f"{path}/{doc['metadata']['name']}")
    if not service_account:
        raise RuntimeError("NVIDIA's chart rendered no kubelet plugin ServiceAccount")
    return PluginRbac(namespace, service_account, tuple(cluster_objects))


async def remove_plugin_rbac(admin: ApiClient, rbac: PluginRbac) -> None:
    for path in rbac.cluster_objects:
        try:
            await request_json(admin, "DELETE", path)
        except ApiException as error:
            if error.status != 404:
                raise


@dataclass
class PluginFleet:
    """NVIDIA's kubelet plugin for each node of ``topology`` (see the module docstring).
    ``setup`` (once, async) before starting any; ``stop_all`` at the end."""

    build: UpstreamBuild
    mock: MockNvml
    helm: Path
    server: str
    ca_file: Path | None
    workdir: Path
    namespace: str
    topology: Topology
    verbosity: int = 4
    # Where the kubelet directories (with the sockets) go, per node: a short path (a Unix socket's
    # is at most 107 bytes); made in /tmp by ``setup`` and removed by ``teardown`` when None.
    kubelet_root: Path | None = None
    nodes: dict[str, PluginNode] = field(default_factory=dict)
    kubeconfig: Path | None = None
    _made_kubelet_root: bool = False
    rbac: PluginRbac | None = None
    _env: dict[str, str] = field(default_factory=dict)

    @property
    def topology_file(self) -> Path:
        return self.workdir / "topology.yaml"

    async def setup(self, admin: ApiClient) -> None:
        """RBAC, the ServiceAccount's kubeconfig, the topology file and every node's files."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.rbac = await install_plugin_rbac(admin, self.helm, self.build, self.namespace)
        token = await request_service_account_token(
            admin, self.namespace, self.rbac.service_account
        )
        self.kubeconfig = token_kubeconfig(
            self.workdir / "kubeconfig", self.server, self.ca_file, token, self.namespace
        )
        self.topology_file.write_text(yaml.safe_dump(self.topology.document(), sort_keys=False))
        if self.kubelet_root is None:
            self.kubelet_root = Path(tempfile.mkdtemp(prefix="cdkp-"))
            self._made_kubelet_root = True
        for name in self.topology.cliques:
            node = PluginNode(name, self.workdir / "nodes" / name, self.kubelet_root / name)
            node.check_paths()
            prepare_node(node, self.mock)
            self.nodes[name] = node
        # The chart's environment, the same for every node but NODE_NAME.
        self._env = chart_plugin_environment(self.helm, self.build, self.namespace, "")

    async def teardown(self, admin: ApiClient) -> None:
        self.stop_all()
        if self._made_kubelet_root and self.kubelet_root is not None:
            shutil.rmtree(self.kubelet_root, ignore_errors=True)
        if self.rbac is not None:
            await remove_plugin_rbac(admin, self.rbac)

    def node(self, name: str) -> PluginNode:
        return self.nodes[name]

    def environment(self, node: PluginNode) -> dict[str, str]:
        """The plugin's environment on ``node``: the chart's, with the node's own paths, its
        name, the ServiceAccount's kubeconfig, no metrics or health port, and the mock NVML's
        profile, topology and overrides."""
        assert self.kubeconfig is not None, "setup() first"
        env = dict(self._env)
        env.update(
            {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "KUBECONFIG": str(self.kubeconfig),
                "NODE_NAME": node.name,
                "NAMESPACE": self.namespace,
                "CDI_ROOT": str(node.cdi_root),
                "NVIDIA_DRIVER_ROOT": str(node.driver_root),
                "DRIVER_ROOT_CTR_PATH": str(node.driver_root),
                # Any path: the plugin then does not copy NVIDIA's hook from its image.
                "NVIDIA_CDI_HOOK_PATH": str(node.driver_root / "usr" / "bin" / "nvidia-cdi-hook"),
                "KUBELET_REGISTRAR_DIRECTORY_PATH": str(node.registrar_dir),
                "KUBELET_PLUGINS_DIRECTORY_PATH": str(node.plugins_dir),
                "HTTP_ENDPOINT": "",
                "HEALTHCHECK_PORT": "-1",
                "MOCK_NVML_CONFIG": str(self.mock.profile("gb200")),
                "MOCK_TOPOLOGY_CONFIG": str(self.topology_file),
                "MOCK_NVML_OVERRIDES": str(node.overrides),
            }
        )
        return env

    def argv(self, node: PluginNode) -> list[str]:
        return [
            "bash",
            str(UPSTREAM_RUN_SCRIPT),
            "--bind",
            f"{node.proc_devices}:/proc/devices",
            "--bind",
            f"{node.proc_driver}:/proc/driver",
            str(self.build.bin_dir),
            KUBELET_PLUGIN,
            f"--kubeconfig={self.kubeconfig}",
            "-v",
            str(self.verbosity),
        ]

    def start(self, name: str) -> PluginNode:
        """Start ``name``'s plugin (it must not run)."""
        node = self.nodes[name]
        if node.alive():
            raise RuntimeError(f"NVIDIA's kubelet plugin of {name} runs already")
        node.starts += 1
        node.process = spawn(KUBELET_PLUGIN, self.argv(node), node.log, env=self.environment(node))
        return node

    def start_all(self) -> None:
        for name in self.nodes:
            self.start(name)

    def stop(self, name: str, grace: float = 30.0) -> int | None:
        """SIGTERM (SIGKILL after ``grace``): the plugin removes its clique label and ends.
        Returns its exit code."""
        node = self.nodes[name]
        if node.process is None:
            return None
        code = node.process.stop(grace)
        node.process = None
        return code

    def stop_all(self, grace: float = 30.0) -> None:
        for name in self.nodes:
            self.stop(name, grace)

    def restart(self, name: str) -> PluginNode:
        self.stop(name)
        return self.start(name)

    def set_clique(self, name: str, clique: Clique | None) -> None:
        """Make ``name``'s GPUs report ``clique`` (None: the topology's again), through the mock
        NVML's overrides file. The running library sees it within a second, but the plugin
        reads the clique at start and then every 10 minutes: restart it to see it now."""
        node = self.nodes[name]
        if clique is None:
            node.overrides.unlink(missing_ok=True)
            return
        fabric = {"cluster_uuid": clique.cluster_uuid, "clique_id": clique.clique_id}
        doc = {"version": 1, "all": {"fabric": fabric}}
        tmp = node.overrides.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(doc))
        tmp.replace(node.overrides)

    def clique(self, name: str) -> Clique:
        """What ``name``'s GPUs report: the override if any, else the topology's."""
        node = self.nodes[name]
        if node.overrides.exists():
            fabric = yaml.safe_load(node.overrides.read_text())["all"]["fabric"]
            return Clique(fabric["cluster_uuid"], int(fabric["clique_id"]))
        return self.topology.cliques[name]

    def check_running(self) -> None:
        """Raise, with the log's tail, if a started plugin has ended."""
        for node in self.nodes.values():
            if node.process is not None and not node.process.alive():
                raise RuntimeError(
                    f"NVIDIA's kubelet plugin of {node.name} ended (exit code "
                    f"{node.process.returncode}):\n{tail(node.log)}"
                )


@contextlib.asynccontextmanager
async def plugin_fleet(
    build: UpstreamBuild,
    mock: MockNvml,
    helm: Path,
    admin: ApiClient,
    server: str,
    ca_file: Path | None,
    workdir: Path,
    namespace: str,
    topology: Topology,
) -> AsyncIterator[PluginFleet]:
    """A set-up PluginFleet (no plugin started); every plugin stopped and the cluster-scoped
    RBAC removed at the end."""
    fleet = PluginFleet(build, mock, helm, server, ca_file, workdir, namespace, topology)
    try:
        await fleet.setup(admin)
        yield fleet
    finally:
        await fleet.teardown(admin)
