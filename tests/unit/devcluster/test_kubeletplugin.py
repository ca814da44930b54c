"""The pure parts of devcluster.kubeletplugin: the mock NVML's topology and overrides documents,
the /proc/devices stand-in, and how each node's plugin is started (paths, environment, binds)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import yaml

from computedomain.devcluster.kubeletplugin import (
    Clique,
    PluginFleet,
    PluginNode,
    Topology,
    proc_devices,
)
from computedomain.devcluster.upstream import MockNvml, UpstreamBuild, mock_nvml_required

A = "414c343c-1027-44d1-8386-bbc4cd613e30"
B = "7ce42c82-1807-4e8c-b5bf-992dc9e9c616"


def node(name: str, clique: str | None) -> dict[str, object]:
    labels = {"nvidia.com/gpu.clique": clique} if clique else {}
    return {"metadata": {"name": name, "labels": labels}}


def test_a_clique_is_its_label() -> None:
    assert Clique(A, 3).label == f"{A}.3"
    assert Clique.parse(f"{A.upper()}.3") == Clique(A, 3)


def test_the_topology_document_groups_nodes_by_cluster_and_clique() -> None:
    topology = Topology.from_nodes(
        [node("r0-n1", f"{A}.0"), node("r0-n0", f"{A}.0"), node("r1-n0", f"{B}.2")]
    )
    assert topology.document() == {
        "domains": [
            {"uuid": A, "cliques": [{"id": 0, "nodes": ["r0-n0", "r0-n1"]}]},
            {"uuid": B, "cliques": [{"id": 2, "nodes": ["r1-n0"]}]},
        ]
    }
    with pytest.raises(ValueError, match=r"no nvidia\.com/gpu\.clique"):
        Topology.from_nodes([node("nf-0", None)])


def test_per_rack_gives_each_rack_a_cluster_of_its_own() -> None:
    topology = Topology.per_rack(["gb-r00-n00", "gb-r00-n01", "gb-r01-n00"])
    cliques = topology.cliques
    assert cliques["gb-r00-n00"] == cliques["gb-r00-n01"] != cliques["gb-r01-n00"]
    assert {c.clique_id for c in cliques.values()} == {1}
    uuid.UUID(cliques["gb-r01-n00"].cluster_uuid)
    assert Topology.per_rack(["gb-r00-n00"]) == Topology.per_rack(["gb-r00-n00"])  # stable


def test_proc_devices_adds_the_imex_channels_and_caps_among_the_character_devices() -> None:
    host = "Character devices:\n  1 mem\n 10 misc\n\nBlock devices:\n  7 loop\n"
    assert proc_devices(host) == (
        "Character devices:\n  1 mem\n 10 misc\n235 nvidia-caps-imex-channels\n236 nvidia-caps\n\n"
        "Block devices:\n  7 loop\n"
    )
    with pytest.raises(RuntimeError):
        proc_devices("Block devices:\n  7 loop\n")


@pytest.mark.parametrize(
    ("env", "required"),
    [
        ({}, False),
        ({"CI": "true"}, True),
        ({"NVIDIA_MOCK_NVML_SRC": "/m.tar.gz"}, True),
        ({"COMPUTEDOMAIN_REQUIRE_UPSTREAM": "1"}, False),
    ],
)
def test_mock_nvml_required(env: dict[str, str], required: bool) -> None:
    assert mock_nvml_required(env) is required


def fleet(tmp_path: Path) -> tuple[PluginFleet, PluginNode]:
    topology = Topology({"n0": Clique(A, 0)})
    plugins = PluginFleet(
        UpstreamBuild(tmp_path / "build" / "bin"),
        MockNvml(tmp_path / "mock"),
        Path("/usr/bin/helm"),
        "https://127.0.0.1:6443",
        None,
        tmp_path / "work",
        "driver",
        topology,
        kubelet_root=tmp_path / "k",
    )
    plugins.kubeconfig = tmp_path / "kubeconfig"
    plugin_node = PluginNode("n0", tmp_path / "work" / "nodes" / "n0", tmp_path / "k" / "n0")
    plugins.nodes["n0"] = plugin_node
    plugin_node.root.mkdir(parents=True)
    return plugins, plugin_node


def test_each_node_has_its_own_paths_and_no_tcp_listener(tmp_path: Path) -> None:
    plugins, n0 = fleet(tmp_path)
    assert n0.dra_socket == tmp_path / "k/n0/plugins/compute-domain.nvidia.com/dra.sock"
    assert n0.registration_socket == (
        tmp_path / "k/n0/plugins_registry/compute-domain.nvidia.com-reg.sock"
    )
    env = plugins.environment(n0)
    assert env["NODE_NAME"] == "n0"
    assert env["NAMESPACE"] == "driver"
    assert env["KUBELET_PLUGINS_DIRECTORY_PATH"] == str(n0.plugins_dir)
    assert env["KUBELET_REGISTRAR_DIRECTORY_PATH"] == str(n0.registrar_dir)
    assert env["CDI_ROOT"] == str(n0.cdi_root)
    assert env["NVIDIA_DRIVER_ROOT"] == env["DRIVER_ROOT_CTR_PATH"] == str(n0.driver_root)
    assert (env["HTTP_ENDPOINT"], env["HEALTHCHECK_PORT"]) == ("", "-1")
    assert env["MOCK_NVML_OVERRIDES"] == str(n0.overrides)
    argv = plugins.argv(n0)
    assert argv[2:6] == [
        "--bind",
        f"{n0.proc_devices}:/proc/devices",
        "--bind",
        f"{n0.proc_driver}:/proc/driver",
    ]
    assert argv[6:8] == [str(tmp_path / "build" / "bin"), "compute-domain-kubelet-plugin"]


def test_a_long_socket_path_is_refused(tmp_path: Path) -> None:
    long = PluginNode("n0", tmp_path, tmp_path / ("x" * 100))
    with pytest.raises(ValueError, match="too long for a Unix socket"):
        long.check_paths()


def test_set_clique_writes_the_mock_nvml_overrides(tmp_path: Path) -> None:
    plugins, n0 = fleet(tmp_path)
    assert plugins.clique("n0") == Clique(A, 0)
    plugins.set_clique("n0", Clique(B, 7))
    # The mock's document: `all` deep-merged over every device's config.
    assert yaml.safe_load(n0.overrides.read_text()) == {
        "version": 1,
        "all": {"fabric": {"cluster_uuid": B, "clique_id": 7}},
    }
    assert plugins.clique("n0") == Clique(B, 7)
    plugins.set_clique("n0", None)
    assert not n0.overrides.exists()
    assert plugins.clique("n0") == Clique(A, 0)
