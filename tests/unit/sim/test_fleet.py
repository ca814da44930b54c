import json
from collections import Counter
from typing import Any

import pytest

from computedomain.api.constants import (
    CHANNEL_DEVICE_CLASS,
    DAEMON_DEVICE_CLASS,
    DRIVER_NAME,
    GPU_CLIQUE_NODE_LABEL,
)
from computedomain.runtime.objects import labels
from computedomain.sim.fleet import (
    RACK_LABEL,
    FleetSpec,
    build_device_classes,
    build_nodes,
    build_resource_slice,
)
from computedomain.sim.install import is_node_ready


def test_one_clique_per_rack_with_18_nodes_each() -> None:
    nodes = build_nodes(FleetSpec(racks=3))
    assert len(nodes) == 54
    cliques = Counter(labels(n)[GPU_CLIQUE_NODE_LABEL] for n in nodes)
    assert len(cliques) == 3
    assert set(cliques.values()) == {18}
    for clique in cliques:
        cluster_uuid, clique_id = clique.rsplit(".", 1)
        assert clique_id == "0"
        assert len(cluster_uuid) == 36


def test_nodes_look_like_eks_p6e_gb200_and_are_kwok_managed_without_taint() -> None:
    node = build_nodes(FleetSpec(racks=1))[0]
    assert node["metadata"]["name"] == "gb200-r00-n00"
    assert labels(node)["node.kubernetes.io/instance-type"] == "p6e-gb200.36xlarge"
    assert labels(node)["kubernetes.io/arch"] == "arm64"
    assert labels(node)["kubernetes.io/os"] == "linux"
    assert labels(node)["nvidia.com/gpu.present"] == "true"
    assert labels(node)["topology.kubernetes.io/region"] == "us-east-1"
    assert "topology.k8s.aws/ultraserver-id" not in labels(node)  # HyperPod only
    assert "resource.nvidia.com/computeDomain" not in labels(node)  # set by the plugin later
    assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
    assert "taints" not in node["spec"]
    assert node["status"]["allocatable"]["pods"] == "110"


def test_non_fabric_nodes_have_no_clique_label() -> None:
    nodes = build_nodes(FleetSpec(racks=1, non_fabric=2))
    extra = nodes[18:]
    assert [n["metadata"]["name"] for n in extra] == ["gb200-nf-00", "gb200-nf-01"]
    assert all(GPU_CLIQUE_NODE_LABEL not in labels(n) for n in extra)
    assert all(labels(n)["nvidia.com/gpu.present"] == "true" for n in extra)


def test_same_seed_same_fleet_different_seed_different_uuids() -> None:
    spec = FleetSpec(racks=2, non_fabric=1, seed=7)
    assert build_nodes(spec) == build_nodes(spec)
    other = build_nodes(FleetSpec(racks=2, non_fabric=1, seed=8))
    assert (
        labels(other[0])[GPU_CLIQUE_NODE_LABEL]
        != labels(build_nodes(spec)[0])[GPU_CLIQUE_NODE_LABEL]
    )


def test_realistic_nodes_are_as_big_as_real_ones_with_the_same_identity() -> None:
    spec = FleetSpec(racks=1, non_fabric=1, seed=3)
    small, big = (
        build_nodes(spec),
        build_nodes(FleetSpec(racks=1, non_fabric=1, seed=3, realistic=True)),
    )
    assert [n["metadata"] for n in big] == [n["metadata"] for n in small]
    node = big[0]
    assert 10_000 <= len(json.dumps(node, separators=(",", ":"))) <= 30_000
    assert len(node["status"]["images"]) == 50
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "4"
    assert "hugepages-2Mi" in node["status"]["allocatable"]
    assert node["status"]["nodeInfo"]["architecture"] == "arm64"
    assert big == build_nodes(FleetSpec(racks=1, non_fabric=1, seed=3, realistic=True))


def test_rack_partitions_get_clique_ids() -> None:
    nodes = build_nodes(FleetSpec(racks=1, cliques_per_rack=2))
    ids = Counter(labels(n)[GPU_CLIQUE_NODE_LABEL].rsplit(".", 1)[1] for n in nodes)
    assert ids == {"0": 9, "1": 9}
    # Both partitions belong to the same NVL72 (same cluster UUID).
    assert len({labels(n)[GPU_CLIQUE_NODE_LABEL].rsplit(".", 1)[0] for n in nodes}) == 1


def test_names_are_unique_across_a_large_fleet() -> None:
    nodes = build_nodes(FleetSpec(racks=64, non_fabric=3))
    names = [n["metadata"]["name"] for n in nodes]
    assert len(names) == len(set(names)) == 64 * 18 + 3
    assert Counter(labels(n)[RACK_LABEL] for n in nodes)["r63"] == 18


@pytest.mark.parametrize(
    "kwargs",
    [{"racks": -1}, {"racks": 1, "nodes_per_rack": 0}, {"racks": 1, "cliques_per_rack": 0}],
)
def test_invalid_specs_are_rejected(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):  # noqa: PT011
        FleetSpec(**kwargs)


def test_resource_slice_matches_the_plugins_layout() -> None:
    slice_ = build_resource_slice("gb200-r00-n03")
    assert slice_["apiVersion"] == "resource.k8s.io/v1"
    assert slice_["metadata"]["name"] == "gb200-r00-n03-compute-domain.nvidia.com"
    spec = slice_["spec"]
    assert spec["driver"] == DRIVER_NAME
    assert spec["nodeName"] == "gb200-r00-n03"
    assert spec["pool"]["name"] == "gb200-r00-n03"
    assert spec["pool"]["resourceSliceCount"] == 1
    assert spec["devices"] == [
        {"name": "channel-0", "attributes": {"type": {"string": "channel"}, "id": {"int": 0}}},
        {"name": "daemon-0", "attributes": {"type": {"string": "daemon"}, "id": {"int": 0}}},
    ]


def test_device_classes_carry_nvidias_cel_selectors() -> None:
    by_name = {
        c["metadata"]["name"]: c["spec"]["selectors"][0]["cel"]["expression"]
        for c in build_device_classes()
    }
    assert by_name == {
        DAEMON_DEVICE_CLASS: "device.driver == 'compute-domain.nvidia.com' && "
        "device.attributes['compute-domain.nvidia.com'].type == 'daemon'",
        CHANNEL_DEVICE_CLASS: "device.driver == 'compute-domain.nvidia.com' && "
        "device.attributes['compute-domain.nvidia.com'].type == 'channel' && "
        "device.attributes['compute-domain.nvidia.com'].id == 0",
    }


@pytest.mark.parametrize(
    ("conditions", "taints", "ready"),
    [
        ([{"type": "Ready", "status": "True"}], [], True),
        ([{"type": "Ready", "status": "False"}], [], False),
        ([], [], False),
        (
            [{"type": "Ready", "status": "True"}],
            [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}],
            False,
        ),
        ([{"type": "Ready", "status": "True"}], [{"key": "other", "effect": "NoSchedule"}], True),
    ],
)
def test_node_readiness_requires_condition_and_no_not_ready_taint(
    conditions: list[dict[str, str]], taints: list[dict[str, str]], ready: bool
) -> None:
    node = {"spec": {"taints": taints}, "status": {"conditions": conditions}}
    assert is_node_ready(node) is ready
