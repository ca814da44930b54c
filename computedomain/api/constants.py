"""Every string of the wire contract with NVIDIA's kubelet plugin and IMEX daemon (v0.4.0).

One definition per string: grep finds it here. See docs/contract notes in the README.
"""

from typing import Final

GROUP: Final = "resource.nvidia.com"
VERSION: Final = "v1beta1"
API_VERSION: Final = f"{GROUP}/{VERSION}"

CD_KIND: Final = "ComputeDomain"
CD_PLURAL: Final = "computedomains"
CLIQUE_KIND: Final = "ComputeDomainClique"
CLIQUE_PLURAL: Final = "computedomaincliques"

DRIVER_NAME: Final = "compute-domain.nvidia.com"

# The CD label key is also the finalizer on the CD, the DaemonSet and both RCTs.
CD_LABEL: Final = "resource.nvidia.com/computeDomain"
FINALIZER: Final = CD_LABEL
CLIQUE_ID_LABEL: Final = "resource.nvidia.com/computeDomain.cliqueID"
TARGET_LABEL: Final = "resource.nvidia.com/computeDomainTarget"
TARGET_DAEMON: Final = "Daemon"
TARGET_WORKLOAD: Final = "Workload"

# Set by GPU Feature Discovery on each node: "<clusterUUID>.<cliqueID>".
GPU_CLIQUE_NODE_LABEL: Final = "nvidia.com/gpu.clique"

DAEMON_NAME_PREFIX: Final = "computedomain-daemon-"
DAEMON_SERVICE_ACCOUNT: Final = "compute-domain-daemon-service-account"
DAEMON_CONTAINER: Final = "compute-domain-daemon"
DAEMON_POD_CLAIM: Final = "compute-domain-daemon"
DAEMON_REQUEST: Final = "daemon"
CHANNEL_REQUEST: Final = "channel"

DAEMON_DEVICE_CLASS: Final = "compute-domain-daemon.nvidia.com"
CHANNEL_DEVICE_CLASS: Final = "compute-domain-default-channel.nvidia.com"

CHANNEL_CONFIG_KIND: Final = "ComputeDomainChannelConfig"
DAEMON_CONFIG_KIND: Final = "ComputeDomainDaemonConfig"

STATUS_READY: Final = "Ready"
STATUS_NOT_READY: Final = "NotReady"
ALLOCATION_SINGLE: Final = "Single"
ALLOCATION_ALL: Final = "All"

# Non-fabric entries in status.nodes carry index -1 and cliqueID "".
NON_FABRIC_INDEX: Final = -1

DEFAULT_MAX_NODES_PER_IMEX_DOMAIN: Final = 18

GATE_DNS_NAMES: Final = "IMEXDaemonsWithDNSNames"
GATE_CLIQUES: Final = "ComputeDomainCliques"
GATE_CRASH_ON_FABRIC_ERRORS: Final = "CrashOnNVLinkFabricErrors"


def daemon_name(cd_uid: str) -> str:
    """Name of both the DaemonSet and the daemon RCT of a CD (57 characters for a UUID)."""
    return f"{DAEMON_NAME_PREFIX}{cd_uid}"


def clique_name(cd_uid: str, clique_id: str) -> str:
    return f"{cd_uid}.{clique_id}"
