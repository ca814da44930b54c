"""How each component of the local control plane starts: its flags and its configuration."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import yaml

from computedomain.devcluster.assets import REPO_ROOT
from computedomain.devcluster.pki import Pki

KWOK_STAGE_DIR = REPO_ROOT / "hack" / "controlplane" / "kwok"
HEARTBEAT_STAGE = "node-heartbeat"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_NODE_ANNOTATION_VALUE = "fake"
SERVICE_CIDR = "10.0.0.0/24"
# Pod IPs handed out by kwok: wide enough for large fleets, disjoint from the service range.
POD_CIDR = "10.128.0.0/14"
KWOK_NODE_IP = "10.127.0.1"
CONTROLLER_QPS = 200
CONTROLLER_BURST = 400
# Writes by ServiceAccounts outside kube-system, at Metadata level: who wrote what, cheaply.
# Tests use it to attribute every write to an identity (e.g. "0 DaemonSet writes by our
# controller's ServiceAccount during a swap"); KCM's own ServiceAccounts are left out, except
# for what ends a workload's hold on its claims, by whomever: a pod's DELETE (the garbage
# collector's, then kwok's, the kubelet's final one) and a ResourceClaim's writes (the
# scheduler's allocation, KCM's release of reservedFor, the claim's deletion), so a test can
# order our controller's deletion of the IMEX daemons after them.
AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {
            "level": "Metadata",
            "verbs": ["delete"],
            "resources": [{"group": "", "resources": ["pods"]}],
        },
        {
            "level": "Metadata",
            "verbs": ["update", "patch", "delete"],
            "resources": [
                {
                    "group": "resource.k8s.io",
                    "resources": ["resourceclaims", "resourceclaims/status"],
                }
            ],
        },
        {"level": "None", "userGroups": ["system:serviceaccounts:kube-system"]},
        {
            "level": "Metadata",
            "userGroups": ["system:serviceaccounts"],
            "verbs": ["create", "update", "patch", "delete", "deletecollection"],
        },
        {"level": "None"},
    ],
}
AUDIT_LOG = "audit.log"


class ControlPlaneError(RuntimeError):
    """A component failed to start or become ready in time."""


def etcd_args(data_dir: Path, client_port: int, peer_port: int) -> list[str]:
    client = f"http://127.0.0.1:{client_port}"
    peer = f"http://127.0.0.1:{peer_port}"
    return [
        "--name=node0",
        f"--data-dir={data_dir}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=node0={peer}",
        "--unsafe-no-fsync",
        "--quota-backend-bytes=8589934592",
        "--log-level=warn",
    ]


def apiserver_args(workdir: Path, pki: Pki, ports: dict[str, int]) -> list[str]:
    return [
        f"--etcd-servers=http://127.0.0.1:{ports['etcd']}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={ports['apiserver']}",
        f"--cert-dir={workdir / 'pki'}",
        f"--tls-cert-file={pki.serving_cert}",
        f"--tls-private-key-file={pki.serving_key}",
        f"--client-ca-file={pki.ca_cert}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={pki.sa_public_key}",
        f"--service-account-signing-key-file={pki.sa_private_key}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--authorization-mode=RBAC",
        "--allow-privileged=true",
        "--endpoint-reconciler-type=none",
        "--profiling=false",
        f"--audit-policy-file={workdir / 'audit-policy.yaml'}",
        f"--audit-log-path={workdir / 'logs' / AUDIT_LOG}",
        "--audit-log-format=json",
        "--audit-log-maxbackup=0",
    ]


def node_monitor_grace_s(node_heartbeat_s: float | None) -> int:
    """KCM's grace before a silent Node turns Unknown: past the longest kwok heartbeat gap."""
    longest = 25.0 if node_heartbeat_s is None else node_heartbeat_s * 1.4
    return max(90, math.ceil(longest * 2))


def kcm_args(
    kubeconfig: Path, pki: Pki, port: int, node_heartbeat_s: float | None = None
) -> list[str]:
    return [
        f"--kubeconfig={kubeconfig}",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--service-account-private-key-file={pki.sa_private_key}",
        f"--root-ca-file={pki.ca_cert}",
        "--use-service-account-credentials=true",
        # csrsigning only logs errors without signing files; nothing here needs it.
        "--controllers=*,-csrsigning",
        "--node-monitor-period=5s",
        # kwok runs without node leases here and heartbeats Node status every 20-25 s (its
        # stage's delay up to its jitter bound). At the default 40 s grace KCM turned a few
        # Nodes Unknown for milliseconds every 20 s, and pods on them lost Ready; a test saw it
        # once. Slower heartbeats (a scale run's) get a grace of twice their longest gap.
        f"--node-monitor-grace-period={node_monitor_grace_s(node_heartbeat_s)}s",
        # The default 20 QPS per controller client makes lifting the not-ready taint from a
        # 1,000-node fleet take a minute; big real clusters raise these limits too.
        f"--kube-api-qps={CONTROLLER_QPS}",
        f"--kube-api-burst={CONTROLLER_BURST}",
    ]


def scheduler_args(kubeconfig: Path, port: int) -> list[str]:
    return [
        f"--kubeconfig={kubeconfig}",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--kube-api-qps={CONTROLLER_QPS}",
        f"--kube-api-burst={CONTROLLER_BURST}",
    ]


def kwok_args(kubeconfig: Path, config: Path) -> list[str]:
    return [
        f"--kubeconfig={kubeconfig}",
        f"--config={config}",
        f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}={KWOK_NODE_ANNOTATION_VALUE}",
        f"--cidr={POD_CIDR}",
        f"--node-ip={KWOK_NODE_IP}",
    ]


def kwok_stage_files(stage_dir: Path = KWOK_STAGE_DIR) -> list[Path]:
    files = sorted(stage_dir.glob("*.yaml"))
    if not files:
        raise ControlPlaneError(f"no kwok stage files in {stage_dir}")
    return files


def kwok_configuration_yaml(
    stage_dir: Path = KWOK_STAGE_DIR, node_heartbeat_s: float | None = None
) -> str:
    """One multi-document file: the KwokConfiguration first, then every Stage (kwok v0.8.0
    has no built-in stages and exits with ``no stages found`` without them).

    ``node_heartbeat_s``: the mean time between two Node status writes of one node (default:
    the stage's 20-25 s). A real kubelet renews a Lease every 10 s and writes its Node status
    only every 5 min when nothing changed; at 10,000 nodes kwok's default would be ~440 Node
    writes/s, which on this machine measures kwok and the apiserver, not the controller."""
    configuration: dict[str, Any] = {
        "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
        "kind": "KwokConfiguration",
        "options": {
            "cidr": POD_CIDR,
            "nodeIP": KWOK_NODE_IP,
            "manageNodesWithAnnotationSelector": (
                f"{KWOK_NODE_ANNOTATION}={KWOK_NODE_ANNOTATION_VALUE}"
            ),
            # Defaults are 4; a 1,000-node fleet turns Ready much faster with more.
            "nodePlayStageParallelism": 16,
            "podPlayStageParallelism": 16,
        },
    }
    documents = [yaml.safe_dump(configuration, sort_keys=False)]
    for path in kwok_stage_files(stage_dir):
        text = path.read_text()
        if node_heartbeat_s is not None:
            stage = yaml.safe_load(text)
            if stage["metadata"]["name"] == HEARTBEAT_STAGE:
                # kwok waits a uniform time between the two: 0.6-1.4 times the mean.
                stage["spec"]["delay"] = {
                    "durationMilliseconds": round(node_heartbeat_s * 600),
                    "jitterDurationMilliseconds": round(node_heartbeat_s * 1400),
                }
                text = yaml.safe_dump(stage, sort_keys=False)
        documents.append(text)
    return "---\n".join(doc if doc.endswith("\n") else doc + "\n" for doc in documents)


# ---- tiny sync HTTP helpers (start-up only; tests use kubernetes_asyncio) -------------------
