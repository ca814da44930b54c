"""Every string of the wire contract with NVIDIA's kubelet plugin and IMEX daemon (v0.4.0).

One definition per string: grep finds it here. See docs/contract.md.
"""

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

GROUP: Final = "resource.nvidia.com"
VERSION: Final = "v1beta1"
API_VERSION: Final = f"{GROUP}/{VERSION}"

CD_KIND: Final = "ComputeDomain"
CD_PLURAL: Final = "computedomains"
CLIQUE_KIND: Final = "ComputeDomainClique"
CLIQUE_PLURAL: Final = "computedomaincliques"
CD_CRD_NAME: Final = f"{CD_PLURAL}.{GROUP}"
CLIQUE_CRD_NAME: Final = f"{CLIQUE_PLURAL}.{GROUP}"

DRIVER_NAME: Final = "compute-domain.nvidia.com"

# The CD label key is also the finalizer on the CD, the DaemonSet and both RCTs.
CD_LABEL: Final = "resource.nvidia.com/computeDomain"
FINALIZER: Final = CD_LABEL
CLIQUE_ID_LABEL: Final = "resource.nvidia.com/computeDomain.cliqueID"
TARGET_LABEL: Final = "resource.nvidia.com/computeDomainTarget"
TARGET_DAEMON: Final = "Daemon"
TARGET_WORKLOAD: Final = "Workload"

# "<clusterUUID>.<cliqueID>" on each NVLink node: set by GPU Feature Discovery, or since
# NVIDIA's v0.5 by its kubelet plugin (GPU_CLIQUE_LABEL_ENABLED), which removes it when it stops.
GPU_CLIQUE_NODE_LABEL: Final = "nvidia.com/gpu.clique"
# Set by GPU Feature Discovery on every node with an NVIDIA GPU.
GPU_PRESENT_NODE_LABEL: Final = "nvidia.com/gpu.present"

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
# NVIDIA main after v0.4.1 (contract §18): Alpha, off by default, mandatory for hostManaged.
GATE_HOST_MANAGED_IMEX: Final = "HostManagedIMEXDaemon"

# Who runs IMEX (contract §18): our DaemonSets of IMEX daemons, or the host's nvidia-imex.
IMEX_MODE_DRIVER: Final = "driverManaged"
IMEX_MODE_HOST: Final = "hostManaged"
IMEX_MODES: Final = (IMEX_MODE_DRIVER, IMEX_MODE_HOST)
# Channel isolation: all workloads of a domain share channel 0; per-workload channels are
# refused upstream and here.
IMEX_ISOLATION_DOMAIN: Final = "domain"
IMEX_ISOLATION_CHANNEL: Final = "channel"
# Where the host's nvidia-imex listens (NVIDIA's chart default; the kubelet plugin's concern).
DEFAULT_IMEX_HOST_SOCKET: Final = "/etc/nvidia-imex/imex_ctrl.sock"


def daemon_name(cd_uid: str) -> str:
    """Name of both the DaemonSet and the daemon RCT of a CD (57 characters for a UUID)."""
    return f"{DAEMON_NAME_PREFIX}{cd_uid}"


def clique_name(cd_uid: str, clique_id: str) -> str:
    return f"{cd_uid}.{clique_id}"


# Gates with the v0.4.0 defaults. The daemon's feature-gate parser rejects names it does not
# know, so only DAEMON_FEATURE_GATES are ever passed on to it through FEATURE_GATES.
DEFAULT_FEATURE_GATES: Final[Mapping[str, bool]] = MappingProxyType(
    {
        GATE_DNS_NAMES: True,
        GATE_CLIQUES: True,
        GATE_CRASH_ON_FABRIC_ERRORS: True,
        GATE_HOST_MANAGED_IMEX: False,
    }
)
DAEMON_FEATURE_GATES: Final = frozenset({GATE_DNS_NAMES, GATE_CLIQUES})
FEATURE_GATES_ENV: Final = "FEATURE_GATES"
# The IMEX daemon's environment (contract §7.3): set by the DaemonSet, read by the daemon.
DAEMON_LOG_VERBOSITY_ENV: Final = "LOG_VERBOSITY"
MAX_NODES_PER_IMEX_DOMAIN_ENV: Final = "MAX_NODES_PER_IMEX_DOMAIN"
NODE_NAME_ENV: Final = "NODE_NAME"
POD_IP_ENV: Final = "POD_IP"
POD_UID_ENV: Final = "POD_UID"
POD_NAME_ENV: Final = "POD_NAME"
POD_NAMESPACE_ENV: Final = "POD_NAMESPACE"
NVIDIA_VISIBLE_DEVICES_ENV: Final = "NVIDIA_VISIBLE_DEVICES"
# NVIDIA's chart passes one FEATURE_GATES to all its components, so the controller also gets
# gates meant for the kubelet plugin or klog. These are the gates NVIDIA's binaries know besides
# DEFAULT_FEATURE_GATES: accepted (a values file carries over) and otherwise ignored; any other
# name is refused, as NVIDIA's binary refuses it.
# v0.4.x (the tree's pkg/featuregates, component-base's logging gates, featuregate's AllAlpha and
# AllBeta; NVIDIA's v0.4.0 controller writes these into its DaemonSets, contract §20):
NVIDIA_V04_OTHER_FEATURE_GATES: Final = frozenset(
    {
        "AllAlpha",
        "AllBeta",
        "ContextualLogging",
        "DeviceMetadata",
        "DynamicMIG",
        "LoggingAlphaOptions",
        "LoggingBetaOptions",
        "MPSSupport",
        "NVMLDeviceHealthCheck",
        "PassthroughSupport",
        "TimeSlicingSettings",
    }
)
# Added on NVIDIA's main branch after v0.4.1, as of the commit we target (95932046, its
# pkg/featuregates; all Alpha, none about ComputeDomains; HostManagedIMEXDaemon, added there too,
# is ours above), so a values file written for that chart carries over too.
NVIDIA_MAIN_OTHER_FEATURE_GATES: Final = frozenset(
    {
        "ConsumableShares",
        "DRAListTypeAttributes",
        "FabricManagerPartitioning",
    }
)
NVIDIA_OTHER_FEATURE_GATES: Final = NVIDIA_V04_OTHER_FEATURE_GATES | NVIDIA_MAIN_OTHER_FEATURE_GATES
# Every name FEATURE_GATES may carry: ours and NVIDIA's other gates. The chart's
# values.schema.json lists exactly these under featureGates (a unit test compares them), so an
# unknown name fails `helm install` instead of crash-looping the controller.
KNOWN_FEATURE_GATES: Final = frozenset(DEFAULT_FEATURE_GATES) | NVIDIA_OTHER_FEATURE_GATES
# Component-base's global toggles: `AllAlpha=x` / `AllBeta=x` set every gate of that stage that
# the same string does not name. Of ours, these are the stages (NVIDIA's, contract §15, §18).
GATE_ALL_ALPHA: Final = "AllAlpha"
GATE_ALL_BETA: Final = "AllBeta"
ALPHA_FEATURE_GATES: Final = frozenset({GATE_HOST_MANAGED_IMEX})
BETA_FEATURE_GATES: Final = frozenset({GATE_DNS_NAMES, GATE_CLIQUES, GATE_CRASH_ON_FABRIC_ERRORS})

# NVIDIA's DRA driver image of the release whose contract we speak (chart `dra-driver-nvidia-gpu`
# 0.4.0: repository + "v" + appVersion). The IMEX daemons run it; our image holds no daemon.
NVIDIA_DRIVER_IMAGE: Final = "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v0.4.0"

# How NVIDIA's chart names and labels its controller (chart name, not release name).
NVIDIA_CHART_NAME: Final = "dra-driver-nvidia-gpu"
NVIDIA_CONTROLLER_DEPLOYMENT: Final = f"{NVIDIA_CHART_NAME}-controller"
NVIDIA_COMPONENT_LABEL: Final = "nvidia-dra-driver-gpu-component"
NVIDIA_CONTROLLER_COMPONENT: Final = "controller"
# NVIDIA's controller pods, found by the selector label of its chart, `<name>-component:
# controller`, <name> being nameOverride or the chart name (contract §19): a fresh install
# (v0.4.0 or v0.4.1) labels them `dra-driver-nvidia-gpu-component`, one upgraded from v25.x
# (nameOverride=nvidia-dra-driver-gpu) `nvidia-dra-driver-gpu-component`, which v0.4.0 also
# added to every controller pod and v0.4.1 no longer does. Our pods carry neither.
# NVIDIA's GPU Operator (26.7, `GPUCluster`) renders its own install instead of the chart: the
# controller Deployment `nvidia-dra-driver-controller` with pods labelled
# `app: nvidia-dra-driver-controller`, the kubelet plugin DaemonSet
# `nvidia-dra-driver-kubelet-plugin` labelled `app.kubernetes.io/name: nvidia-dra-driver`, its
# pods selected by `app: nvidia-dra-driver-kubelet-plugin` (contract §19).
GPU_OPERATOR_NAME: Final = "nvidia-dra-driver"
GPU_OPERATOR_CONTROLLER_APP: Final = f"{GPU_OPERATOR_NAME}-controller"
GPU_OPERATOR_KUBELET_PLUGIN_APP: Final = f"{GPU_OPERATOR_NAME}-kubelet-plugin"
# Watched in every namespace: NVIDIA's controller writes wherever it runs, whatever namespace
# ours manages.
NVIDIA_CONTROLLER_SELECTORS: Final = (
    f"{NVIDIA_CHART_NAME}-component={NVIDIA_CONTROLLER_COMPONENT}",
    f"{NVIDIA_COMPONENT_LABEL}={NVIDIA_CONTROLLER_COMPONENT}",
    f"app={GPU_OPERATOR_CONTROLLER_APP}",
)
# NVIDIA's kubelet plugin DaemonSet: labelled `app.kubernetes.io/name: <name>` (the same two
# names, or GPU Operator's), its pods selected by `<name>-component: kubelet-plugin` (GPU
# Operator: `app: nvidia-dra-driver-kubelet-plugin`). Its image is the driver release the IMEX
# daemons must run too (IMAGE_NAME, or found from it), and its namespace is the driver namespace.
NVIDIA_KUBELET_PLUGIN_COMPONENT: Final = "kubelet-plugin"
NVIDIA_UPGRADED_NAME: Final = NVIDIA_COMPONENT_LABEL.removesuffix("-component")
NVIDIA_CHART_DAEMONSETS_SELECTOR: Final = (
    f"app.kubernetes.io/name in ({NVIDIA_CHART_NAME},{NVIDIA_UPGRADED_NAME},{GPU_OPERATOR_NAME})"
)
# Labels of our own controller pods (manifests/manager and the Helm chart's defaults). A selector
# of NVIDIA's controller pods must not match them; a pod carrying either of the first two is
# never taken for NVIDIA's, whatever else it carries.
OWN_POD_LABELS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "app.kubernetes.io/name": "computedomain-controller",
        "app.kubernetes.io/part-of": "computedomain",
    }
)
OWN_POD_TEMPLATE_LABELS: Final[Mapping[str, str]] = MappingProxyType(
    {
        **OWN_POD_LABELS,
        "app.kubernetes.io/component": "controller",
        "app.kubernetes.io/instance": "computedomain",
    }
)

# Additive status fields of ours (never read by NVIDIA's components).
CONDITION_READY: Final = "Ready"
CONDITION_CHILDREN_READY: Final = "ChildrenReady"
CONDITION_DAEMONS_READY: Final = "DaemonsReady"
CONDITION_SINGLE_CLIQUE: Final = "SingleClique"
CONDITION_EXCLUSIVE_CLIQUE: Final = "ExclusiveClique"
CONDITION_TYPES: Final = (
    CONDITION_READY,
    CONDITION_CHILDREN_READY,
    CONDITION_DAEMONS_READY,
    CONDITION_SINGLE_CLIQUE,
    CONDITION_EXCLUSIVE_CLIQUE,
)
# Bound on status.conditions in the CRD (keeps CEL and etcd costs small).
MAX_CONDITIONS: Final = 16
# Category under which `kubectl get imex` lists ComputeDomains.
CRD_CATEGORY: Final = "imex"

# Our CRDs as the kubectl plugin prints them (kubectl/shipped.py), so the commands every message
# gives (the controller's conditions and Events, doctor's fixes) work without a checkout.
CRDS_COMMAND: Final = "kubectl cdom crds"
CRD_INSTALL_COMMAND: Final = f"{CRDS_COMMAND} | kubectl apply --server-side -f -"
CRD_UPGRADE_COMMAND: Final = f"{CRDS_COMMAND} | kubectl apply --server-side --force-conflicts -f -"
