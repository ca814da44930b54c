"""Fleet objects: fake EKS P6e-GB200 nodes, NVIDIA's DeviceClasses and per-node ResourceSlices.

One rack is one NVL72 (18 ``p6e-gb200.36xlarge`` nodes x 4 GPUs) and one NVLink clique, labelled
``nvidia.com/gpu.clique=<clusterUUID>.<cliqueID>`` as GPU Feature Discovery would. Racks may be
split into partitions (cliqueIDs ``0``, ``1``, ...). Non-fabric nodes are GPU nodes outside any
NVLink domain (``p5.48xlarge``): no clique label, but still running NVIDIA's compute-domain
plugin, so they publish the same two devices.

Nodes carry ``kwok.x-k8s.io/node=fake`` so kwok manages them (Ready, heartbeats, pod status),
and deliberately no kwok taint: the controller's DaemonSet and test pods must land on them.
Everything derives from ``FleetSpec.seed``, so the same spec yields the same objects. Pure
builders only: ``sim/install.py`` creates them in a cluster and waits for them.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from typing import Any

from computedomain.api.constants import (
    CHANNEL_DEVICE_CLASS,
    DAEMON_DEVICE_CLASS,
    DRIVER_NAME,
    GPU_CLIQUE_NODE_LABEL,
    GPU_PRESENT_NODE_LABEL,
)

GB200_INSTANCE_TYPE = "p6e-gb200.36xlarge"
NON_FABRIC_INSTANCE_TYPE = "p5.48xlarge"
REGION = "us-east-1"
ZONE = "us-east-1e"
ZONE_ID = "use1-az5"
# Simulation-only labels: which rack a node sits in, so tests and demos can select racks.
FLEET_LABEL = "sim.computedomain.dev/fleet"
RACK_LABEL = "sim.computedomain.dev/rack"
KWOK_ANNOTATION = "kwok.x-k8s.io/node"
# Racks sharing one layer-2 network node (illustrative; EKS reports real topology).
RACKS_PER_SPINE = 8
DEFAULT_CONCURRENCY = 32

DeviceClassBody = dict[str, Any]


@dataclass(frozen=True)
class FleetSpec:
    racks: int
    nodes_per_rack: int = 18
    non_fabric: int = 0
    seed: int = 0
    name_prefix: str = "gb200"
    # >1 splits each rack into NVLink partitions with cliqueIDs "0", "1", ...
    cliques_per_rack: int = 1
    # Nodes as big as real EKS GB200 nodes (10-30 KB: cached images, GPU and hugepage
    # resources, nodeInfo, addresses, conditions), so watch costs are measured on real sizes.
    realistic: bool = False

    def __post_init__(self) -> None:
        if self.racks < 0 or self.non_fabric < 0 or self.nodes_per_rack < 1:
            raise ValueError("racks and non_fabric must be >= 0, nodes_per_rack >= 1")
        if not 1 <= self.cliques_per_rack <= self.nodes_per_rack:
            raise ValueError("cliques_per_rack must be between 1 and nodes_per_rack")

    @property
    def total_nodes(self) -> int:
        return self.racks * self.nodes_per_rack + self.non_fabric


def rack_node_name(prefix: str, rack: int, node: int) -> str:
    return f"{prefix}-r{rack:02d}-n{node:02d}"


def non_fabric_node_name(prefix: str, index: int) -> str:
    return f"{prefix}-nf-{index:02d}"


def _network_node_id(rng: random.Random) -> str:
    return f"nn-{rng.getrandbits(68):017x}"


def _with_legacy_labels(labels: dict[str, str]) -> dict[str, str]:
    # Kubelets and EKS still set the beta twins; without them KCM's node-lifecycle controller
    # spends one extra update per node adding them, which slows a large fleet's start.
    return {
        **labels,
        "beta.kubernetes.io/arch": labels["kubernetes.io/arch"],
        "beta.kubernetes.io/os": labels["kubernetes.io/os"],
        "beta.kubernetes.io/instance-type": labels["node.kubernetes.io/instance-type"],
        "failure-domain.beta.kubernetes.io/region": labels["topology.kubernetes.io/region"],
        "failure-domain.beta.kubernetes.io/zone": labels["topology.kubernetes.io/zone"],
    }


# Images a GB200 training node typically holds: EKS add-ons, NVIDIA's stack, workloads.
_IMAGE_REPOSITORIES = (
    "602401143452.dkr.ecr.us-east-1.amazonaws.com/amazon-k8s-cni",
    "602401143452.dkr.ecr.us-east-1.amazonaws.com/amazon-k8s-cni-init",
    "602401143452.dkr.ecr.us-east-1.amazonaws.com/eks/kube-proxy",
    "602401143452.dkr.ecr.us-east-1.amazonaws.com/eks/pause",
    "602401143452.dkr.ecr.us-east-1.amazonaws.com/eks/aws-ebs-csi-driver",
    "602401143452.dkr.ecr.us-east-1.amazonaws.com/eks/csi-node-driver-registrar",
    "602401143452.dkr.ecr.us-east-1.amazonaws.com/eks/livenessprobe",
    "602401143452.dkr.ecr.us-east-1.amazonaws.com/eks/eks-pod-identity-agent",
    "602401143452.dkr.ecr.us-east-1.amazonaws.com/amazon/aws-network-policy-agent",
    "public.ecr.aws/efa/aws-efa-k8s-device-plugin",
    "nvcr.io/nvidia/k8s-dra-driver-gpu",
    "nvcr.io/nvidia/k8s-device-plugin",
    "nvcr.io/nvidia/gpu-operator",
    "nvcr.io/nvidia/cloud-native/gpu-operator-validator",
    "nvcr.io/nvidia/k8s/dcgm-exporter",
    "nvcr.io/nvidia/k8s/container-toolkit",
    "nvcr.io/nvidia/driver",
    "nvcr.io/nvidia/gpu-feature-discovery",
    "registry.k8s.io/nfd/node-feature-discovery",
    "nvcr.io/nvidia/pytorch",
    "nvcr.io/nvidia/nemo",
    "nvcr.io/nvidia/tritonserver",
    "nvcr.io/nvidia/cuda",
    "nvcr.io/nvidia/hpc-benchmarks",
    "docker.io/mpioperator/mpi-operator",
    "quay.io/prometheus/node-exporter",
    "docker.io/fluent/fluent-bit",
    "public.ecr.aws/aws-observability/aws-for-fluent-bit",
    "public.ecr.aws/cloudwatch-agent/cloudwatch-agent",
    "registry.k8s.io/sig-storage/csi-provisioner",
)


def _realistic_status(name: str, index: int, rng: random.Random) -> dict[str, Any]:
    """The bulky status parts of a real GB200 node (deterministic per ``rng``)."""
    images = []
    # Kubelet reports at most 50 images (nodeStatusMaxImages); busy nodes reach it.
    for i in range(50):
        repository = _IMAGE_REPOSITORIES[i % len(_IMAGE_REPOSITORIES)]
        digest = f"{rng.getrandbits(256):064x}"
        tag = f"v{rng.randint(0, 3)}.{rng.randint(0, 30)}.{rng.randint(0, 9)}"
        images.append(
            {
                "names": [f"{repository}@sha256:{digest}", f"{repository}:{tag}"],
                "sizeBytes": rng.randint(300_000, 12_000_000_000),
            }
        )
    ip = f"10.{index // 65536 % 256}.{index // 256 % 256}.{index % 256}"
    return {
        "addresses": [
            {"type": "InternalIP", "address": ip},
            {"type": "InternalDNS", "address": f"ip-{ip.replace('.', '-')}.ec2.internal"},
            {"type": "Hostname", "address": name},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "images": images,
        "nodeInfo": {
            "architecture": "arm64",
            "bootID": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
            "containerRuntimeVersion": "containerd://1.7.27",
            "kernelVersion": "6.1.134-152.225.amzn2023.aarch64",
            "kubeProxyVersion": "v1.33.1-eks-b9b7f52",
            "kubeletVersion": "v1.33.1-eks-b9b7f52",
            "machineID": f"{rng.getrandbits(128):032x}",
            "operatingSystem": "linux",
            "osImage": "Amazon Linux 2023.7.20250609",
            "systemUUID": f"ec2{rng.getrandbits(116):029x}",
        },
        "volumesAttached": [],
        "volumesInUse": [],
    }


def _node(
    name: str,
    labels: dict[str, str],
    cpu: str,
    memory: str,
    realistic: tuple[int, random.Random] | None = None,
) -> dict[str, Any]:
    resources = {"cpu": cpu, "memory": memory, "pods": "110", "ephemeral-storage": "1Ti"}
    extra_status: dict[str, Any] = {}
    if realistic is not None:
        index, rng = realistic
        resources |= {
            "nvidia.com/gpu": "4",
            "hugepages-1Gi": "0",
            "hugepages-2Mi": "0",
            "hugepages-32Mi": "0",
            "hugepages-64Ki": "0",
            "vpc.amazonaws.com/efa": "4",
            "attachable-volumes-aws-ebs": "39",
        }
        extra_status = _realistic_status(name, index, rng)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"kubernetes.io/hostname": name, **_with_legacy_labels(labels)},
            "annotations": {KWOK_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {},
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "phase": "Running",
            **extra_status,
        },
    }


def build_nodes(spec: FleetSpec) -> list[dict[str, Any]]:
    """All Node objects of the fleet, racks first, in name order. Pure and deterministic."""
    rng = random.Random(spec.seed)  # noqa: S311 - reproducible fake IDs, not secrets
    # A separate stream for the bulk, so realistic nodes keep the same names and labels.
    bulk = random.Random(spec.seed + 1)  # noqa: S311

    def sized(index: int) -> tuple[int, random.Random] | None:
        return (index, bulk) if spec.realistic else None

    common = {
        "kubernetes.io/os": "linux",
        GPU_PRESENT_NODE_LABEL: "true",
        "topology.kubernetes.io/region": REGION,
        "topology.kubernetes.io/zone": ZONE,
        "topology.k8s.aws/zone-id": ZONE_ID,
        "eks.amazonaws.com/capacityType": "CAPACITY_BLOCK",
        FLEET_LABEL: spec.name_prefix,
    }
    layer1 = _network_node_id(rng)
    spines: dict[int, str] = {}
    nodes: list[dict[str, Any]] = []
    partition_size = -(-spec.nodes_per_rack // spec.cliques_per_rack)  # ceiling division
    for rack in range(spec.racks):
        cluster_uuid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        spine = spines.setdefault(rack // RACKS_PER_SPINE, _network_node_id(rng))
        rack_switch = _network_node_id(rng)
        nodegroup = f"cbr-{rng.getrandbits(32):08x}"
        for index in range(spec.nodes_per_rack):
            clique_id = str(index // partition_size)
            labels = {
                **common,
                "kubernetes.io/arch": "arm64",
                "node.kubernetes.io/instance-type": GB200_INSTANCE_TYPE,
                "eks.amazonaws.com/nodegroup": nodegroup,
                "topology.k8s.aws/network-node-layer-1": layer1,
                "topology.k8s.aws/network-node-layer-2": spine,
                "topology.k8s.aws/network-node-layer-3": rack_switch,
                GPU_CLIQUE_NODE_LABEL: f"{cluster_uuid}.{clique_id}",
                RACK_LABEL: f"r{rack:02d}",
            }
            name = rack_node_name(spec.name_prefix, rack, index)
            nodes.append(_node(name, labels, "144", "880Gi", sized(len(nodes))))
    if spec.non_fabric:
        nodegroup = f"ng-{rng.getrandbits(32):08x}"
        for index in range(spec.non_fabric):
            labels = {
                **common,
                "kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": NON_FABRIC_INSTANCE_TYPE,
                "eks.amazonaws.com/nodegroup": nodegroup,
                "topology.k8s.aws/network-node-layer-1": layer1,
                RACK_LABEL: "none",
            }
            name = non_fabric_node_name(spec.name_prefix, index)
            nodes.append(_node(name, labels, "192", "2Ti", sized(len(nodes))))
    return nodes


def resource_slice_name(node_name: str) -> str:
    return f"{node_name}-{DRIVER_NAME}"


def build_resource_slice(node_name: str) -> dict[str, Any]:
    """The one slice NVIDIA's compute-domain kubelet plugin publishes per node."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": resource_slice_name(node_name)},
        "spec": {
            "driver": DRIVER_NAME,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": 0, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": "channel-0",
                    "attributes": {"type": {"string": "channel"}, "id": {"int": 0}},
                },
                {
                    "name": "daemon-0",
                    "attributes": {"type": {"string": "daemon"}, "id": {"int": 0}},
                },
            ],
        },
    }


def build_device_classes() -> list[DeviceClassBody]:
    """NVIDIA's two compute-domain DeviceClasses, CEL exactly as the chart renders them."""
    attr = f"device.attributes['{DRIVER_NAME}']"
    expressions = {
        DAEMON_DEVICE_CLASS: f"device.driver == '{DRIVER_NAME}' && {attr}.type == 'daemon'",
        CHANNEL_DEVICE_CLASS: (
            f"device.driver == '{DRIVER_NAME}' && {attr}.type == 'channel' && {attr}.id == 0"
        ),
    }
    return [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": expression}}]},
        }
        for name, expression in expressions.items()
    ]
