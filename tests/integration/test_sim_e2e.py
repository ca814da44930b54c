"""The fleet simulator against the real control plane, WITHOUT our controller.

Each test plays the controller by hand, following contract §7 (a CD, the daemon RCT, the
DaemonSet and the workload RCT), then checks what NVIDIA's plugin and daemon would do: label
the node, get a daemon scheduled by the real DaemonSet controller, join a clique (or write
``CD.status.nodes`` with the gate off), release the workload, and clean up on deletion.
Waits use list+watch on the API, never sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from computedomain.api import constants as c
from computedomain.api.resources import CLIQUES, COMPUTE_DOMAINS
from computedomain.devcluster.harness import compute_domain
from computedomain.devcluster.watching import Predicate, watch_object, watch_objects, watch_present
from computedomain.runtime.client import ApiError, KubeClient
from computedomain.runtime.objects import labels
from computedomain.runtime.resources import (
    DAEMONSETS,
    NODES,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    SERVICE_ACCOUNTS,
    Resource,
)
from computedomain.sim.context import SimSettings
from computedomain.sim.faults import DelayRange, FaultSettings
from computedomain.sim.simulator import Simulator
from tests.integration.e2e_harness import pod_ready
from tests.kit.controllers import workload_pod

pytestmark = pytest.mark.integration

IMAGE = "registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v0.4.0"
GATES_ON = "ComputeDomainCliques=true,IMEXDaemonsWithDNSNames=true,"
GATES_LEGACY = "ComputeDomainCliques=false,IMEXDaemonsWithDNSNames=true,"
SIM_POD_NET = "10.200."


# -- waiting on the API ------------------------------------------------------------------------


def entry_for(entries: list[dict[str, Any]] | None, key: str, node: str) -> dict[str, Any] | None:
    return next((entry for entry in entries or [] if entry.get(key) == node), None)


# -- what the controller would create (contract §7), written by hand --------------------------


def daemon_claim_template(uid: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {
            "name": c.daemon_name(uid),
            "labels": {c.CD_LABEL: uid, c.TARGET_LABEL: c.TARGET_DAEMON},
        },
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": c.DAEMON_REQUEST,
                            "exactly": {"deviceClassName": c.DAEMON_DEVICE_CLASS},
                        }
                    ],
                    "config": [
                        {
                            "requests": [c.DAEMON_REQUEST],
                            "opaque": {
                                "driver": c.DRIVER_NAME,
                                "parameters": {
                                    "apiVersion": c.API_VERSION,
                                    "kind": c.DAEMON_CONFIG_KIND,
                                    "domainID": uid,
                                },
                            },
                        }
                    ],
                }
            }
        },
    }


def daemon_daemonset(uid: str, gates: str, max_nodes: int = 18) -> dict[str, Any]:
    def field(path: str) -> dict[str, Any]:
        return {"fieldRef": {"fieldPath": path}}

    check = ["compute-domain-daemon", "-v", "$(LOG_VERBOSITY)", "check"]
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": c.daemon_name(uid), "labels": {c.CD_LABEL: uid}},
        "spec": {
            "selector": {"matchLabels": {c.CD_LABEL: uid}},
            "template": {
                "metadata": {"labels": {c.CD_LABEL: uid}},
                "spec": {
                    "serviceAccountName": c.DAEMON_SERVICE_ACCOUNT,
                    "nodeSelector": {c.CD_LABEL: uid},
                    "tolerations": [
                        {"operator": "Exists", "effect": effect}
                        for effect in ("NoSchedule", "NoExecute", "PreferNoSchedule")
                    ],
                    "containers": [
                        {
                            "name": c.DAEMON_CONTAINER,
                            "image": IMAGE,
                            "command": ["compute-domain-daemon", "-v", "$(LOG_VERBOSITY)", "run"],
                            "env": [
                                {"name": "LOG_VERBOSITY", "value": "4"},
                                {"name": "MAX_NODES_PER_IMEX_DOMAIN", "value": str(max_nodes)},
                                {"name": "NODE_NAME", "valueFrom": field("spec.nodeName")},
                                {"name": "POD_IP", "valueFrom": field("status.podIP")},
                                {"name": "POD_UID", "valueFrom": field("metadata.uid")},
                                {"name": "POD_NAME", "valueFrom": field("metadata.name")},
                                {"name": "POD_NAMESPACE", "valueFrom": field("metadata.namespace")},
                                {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"},
                                {"name": "FEATURE_GATES", "value": gates},
                            ],
                            "resources": {"claims": [{"name": c.DAEMON_POD_CLAIM}]},
                            "startupProbe": {
                                "exec": {"command": check},
                                "periodSeconds": 1,
                                "failureThreshold": 1200,
                            },
                        }
                    ],
                    "resourceClaims": [
                        {
                            "name": c.DAEMON_POD_CLAIM,
                            "resourceClaimTemplateName": c.daemon_name(uid),
                        }
                    ],
                },
            },
        },
    }


def workload_claim_template(name: str, uid: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "labels": {c.CD_LABEL: uid, c.TARGET_LABEL: c.TARGET_WORKLOAD}},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": c.CHANNEL_REQUEST,
                            "exactly": {"deviceClassName": c.CHANNEL_DEVICE_CLASS},
                        }
                    ],
                    "config": [
                        {
                            "requests": [c.CHANNEL_REQUEST],
                            "opaque": {
                                "driver": c.DRIVER_NAME,
                                "parameters": {
                                    "apiVersion": c.API_VERSION,
                                    "kind": c.CHANNEL_CONFIG_KIND,
                                    "domainID": uid,
                                    "allocationMode": "Single",
                                },
                            },
                        }
                    ],
                }
            }
        },
    }


class Domain:
    """A ComputeDomain plus everything the controller would have made for it."""

    def __init__(self, client: KubeClient, namespace: str, cd: dict[str, Any]) -> None:
        self.client = client
        self.namespace = namespace
        self.cd = cd
        self.uid: str = cd["metadata"]["uid"]

    @classmethod
    async def create(
        cls, client: KubeClient, namespace: str, *, gates: str = GATES_ON, max_nodes: int = 18
    ) -> Domain:
        with contextlib.suppress(ApiError):
            await client.create(
                SERVICE_ACCOUNTS,
                {
                    "apiVersion": "v1",
                    "kind": "ServiceAccount",
                    "metadata": {"name": c.DAEMON_SERVICE_ACCOUNT},
                },
                namespace,
            )
        cd = await client.create(COMPUTE_DOMAINS, compute_domain("cd", "channel"), namespace)
        cd["status"] = {"status": c.STATUS_NOT_READY}  # the controller's first status write
        cd = await client.replace(COMPUTE_DOMAINS, cd, namespace, subresource="status")
        uid = cd["metadata"]["uid"]
        await client.create(RESOURCE_CLAIM_TEMPLATES, daemon_claim_template(uid), namespace)
        await client.create(DAEMONSETS, daemon_daemonset(uid, gates, max_nodes), namespace)
        await client.create(
            RESOURCE_CLAIM_TEMPLATES, workload_claim_template("channel", uid), namespace
        )
        return cls(client, namespace, cd)

    async def start_workload(self, name: str, node: str) -> None:
        await self.client.create(PODS, workload_pod(name, node, "channel"), self.namespace)

    async def daemon_pod_on(self, node: str) -> dict[str, Any]:
        def on_node(pods: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
            return next(
                (
                    pod
                    for pod in pods.values()
                    if pod["spec"].get("nodeName") == node
                    and not pod["metadata"].get("deletionTimestamp")
                ),
                None,
            )

        pod: dict[str, Any] = await watch_objects(
            self.client,
            PODS,
            on_node,
            namespace=self.namespace,
            label_selector=f"{c.CD_LABEL}={self.uid}",
            what=f"daemon pod on {node}",
        )
        return pod

    def clique_name(self, clique_id: str) -> str:
        return c.clique_name(self.uid, clique_id)


# -- fixtures ----------------------------------------------------------------------------------


@pytest.fixture
async def kube(api_client: ApiClient) -> KubeClient:
    return KubeClient.from_api_client(api_client, field_manager="sim-test")


@pytest.fixture
async def start_simulator(
    api_client: ApiClient, namespace: str
) -> AsyncIterator[Callable[..., Any]]:
    running: list[tuple[Simulator, asyncio.Task[None]]] = []

    async def start(**faults: Any) -> Simulator:
        faults.setdefault("daemon_delay", DelayRange.fixed(1.0))
        client = KubeClient.from_api_client(api_client, field_manager="computedomain-sim")
        settings = SimSettings(
            driver_namespace=namespace, faults=FaultSettings(**faults), seed=7, recheck_interval=5.0
        )
        simulator = Simulator(client, settings)
        task = asyncio.create_task(simulator.run())
        async with asyncio.timeout(30):
            await simulator.wait_ready()
        running.append((simulator, task))
        return simulator

    yield start
    for _, task in running:
        task.cancel()
    await asyncio.gather(*(task for _, task in running), return_exceptions=True)


async def free_node(client: KubeClient, candidates: list[str]) -> str:
    """A node with no CD label and no allocated device (other tests share the fleet)."""
    claims = await client.list(
        Resource("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim", True)
    )
    busy = {
        result["pool"]
        for claim in claims["items"]
        for result in ((claim.get("status") or {}).get("allocation") or {})
        .get("devices", {})
        .get("results")
        or []
    }
    for name in candidates:
        node = await client.get(NODES, name)
        if name not in busy and c.CD_LABEL not in labels(node):
            return name
    raise AssertionError("no free node left in the test fleet")


@pytest.fixture
def fabric_nodes(fleet_nodes: list[str]) -> list[str]:
    # The last rack, from its end: other test modules start elsewhere.
    return [name for name in reversed(fleet_nodes[:-2])]


@pytest.fixture
def non_fabric_nodes(fleet_nodes: list[str]) -> list[str]:
    return fleet_nodes[-2:]


async def drop_label(client: KubeClient, node: str, uid: str) -> None:
    """Best effort: leave the shared fleet as we found it."""
    path = "/metadata/labels/" + c.CD_LABEL.replace("/", "~1")
    with contextlib.suppress(ApiError):
        await client.patch(
            NODES,
            node,
            [{"op": "test", "path": path, "value": uid}, {"op": "remove", "path": path}],
            patch_type="json",
        )


# -- tests -------------------------------------------------------------------------------------


async def test_workload_is_held_until_its_clique_entry_is_ready_and_cleaned_up_after(
    kube: KubeClient, namespace: str, start_simulator: Callable[..., Any], fabric_nodes: list[str]
) -> None:
    await start_simulator()
    node_name = await free_node(kube, fabric_nodes)
    domain = await Domain.create(kube, namespace)
    clique_id = labels(await kube.get(NODES, node_name))[c.GPU_CLIQUE_NODE_LABEL]
    try:
        await domain.start_workload("worker-0", node_name)

        # 1. the plugin labels the node for this CD
        await watch_object(
            kube,
            NODES,
            node_name,
            lambda n: labels(n).get(c.CD_LABEL) == domain.uid,
            what="node label",
        )
        # 2. the real DaemonSet controller places a daemon there; it joins the clique NotReady
        seen: list[str] = []

        def entry_ready(clique: dict[str, Any] | None) -> bool:
            entry = entry_for((clique or {}).get("daemons"), "nodeName", node_name)
            if entry is not None and (not seen or seen[-1] != entry["status"]):
                seen.append(entry["status"])
            return entry is not None and entry["status"] == c.STATUS_READY

        workload = await kube.get(PODS, "worker-0", namespace)
        assert not pod_ready(workload), "the workload must be held until the daemon is Ready"
        clique = await watch_object(
            kube,
            CLIQUES,
            domain.clique_name(clique_id),
            entry_ready,
            namespace=namespace,
            what="Ready entry",
        )
        assert seen[0] == c.STATUS_NOT_READY
        assert clique is not None
        entry = entry_for(clique["daemons"], "nodeName", node_name)
        assert entry is not None
        assert entry["index"] == 0
        assert entry["cliqueID"] == clique_id
        assert entry["ipAddress"].startswith(SIM_POD_NET)
        assert labels(clique) == {c.CD_LABEL: domain.uid, c.CLIQUE_ID_LABEL: clique_id}
        daemon = await domain.daemon_pod_on(node_name)
        (owner,) = clique["metadata"]["ownerReferences"]
        assert owner == {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": daemon["metadata"]["name"],
            "uid": daemon["metadata"]["uid"],
        }

        daemon = await kube.get(PODS, daemon["metadata"]["name"], namespace)
        assert labels(daemon)[c.CLIQUE_ID_LABEL] == clique_id
        assert pod_ready(daemon)
        assert daemon["status"]["podIP"] == entry["ipAddress"]

        # 3. then the workload runs
        workload = await watch_present(
            kube, PODS, "worker-0", pod_ready, namespace=namespace, what="workload Ready"
        )
        assert workload["status"]["phase"] == "Running"
        assert workload["status"]["podIP"].startswith(SIM_POD_NET)
        assert workload["status"]["hostIP"]

        # 4. deleting the workload drops the label, the DS drops the daemon, the entry goes
        await kube.delete(PODS, "worker-0", namespace)
        await watch_object(
            kube, NODES, node_name, lambda n: c.CD_LABEL not in labels(n), what="label removed"
        )
        await watch_object(
            kube,
            CLIQUES,
            domain.clique_name(clique_id),
            lambda cl: cl is None or entry_for(cl.get("daemons"), "nodeName", node_name) is None,
            namespace=namespace,
            what="entry removed",
        )
    finally:
        await drop_label(kube, node_name, domain.uid)


async def test_legacy_daemons_write_cd_status_nodes_and_erase_added_fields(
    kube: KubeClient, namespace: str, start_simulator: Callable[..., Any], fabric_nodes: list[str]
) -> None:
    await start_simulator()
    node_name = await free_node(kube, fabric_nodes)
    domain = await Domain.create(kube, namespace, gates=GATES_LEGACY)
    clique_id = labels(await kube.get(NODES, node_name))[c.GPU_CLIQUE_NODE_LABEL]
    # A newer controller's additive status fields (contract §2.3)
    cd = await kube.get(COMPUTE_DOMAINS, "cd", namespace)
    cd["status"]["observedGeneration"] = 1
    cd["status"]["conditions"] = [
        {
            "type": "Ready",
            "status": "False",
            "reason": "NoDaemons",
            "message": "",
            "lastTransitionTime": "2025-01-01T00:00:00Z",
            "observedGeneration": 1,
        }
    ]
    await kube.replace(COMPUTE_DOMAINS, cd, namespace, subresource="status")
    try:
        await domain.start_workload("worker-0", node_name)

        def node_ready(cd: dict[str, Any] | None) -> bool:
            entry = entry_for(((cd or {}).get("status") or {}).get("nodes"), "name", node_name)
            return entry is not None and entry["status"] == c.STATUS_READY

        cd = await watch_present(
            kube, COMPUTE_DOMAINS, "cd", node_ready, namespace=namespace, what="status.nodes Ready"
        )
        entry = entry_for(cd["status"]["nodes"], "name", node_name)
        assert entry is not None
        assert entry == {
            "name": node_name,
            "ipAddress": entry["ipAddress"],
            "cliqueID": clique_id,
            "index": 0,
            "status": c.STATUS_READY,
        }
        assert "conditions" not in cd["status"], (
            "a typed UpdateStatus erases fields it does not know"
        )
        assert "observedGeneration" not in cd["status"]
        assert (await kube.list(CLIQUES, namespace))["items"] == []

        await watch_object(
            kube, PODS, "worker-0", pod_ready, namespace=namespace, what="workload Ready"
        )
        await kube.delete(PODS, "worker-0", namespace)
        await watch_object(
            kube,
            COMPUTE_DOMAINS,
            "cd",
            lambda cd: (
                entry_for(((cd or {}).get("status") or {}).get("nodes"), "name", node_name) is None
            ),
            namespace=namespace,
            what="status.nodes entry removed",
        )
    finally:
        await drop_label(kube, node_name, domain.uid)


async def test_non_fabric_workload_waits_for_the_projected_status_entry(
    kube: KubeClient,
    namespace: str,
    start_simulator: Callable[..., Any],
    non_fabric_nodes: list[str],
) -> None:
    await start_simulator()
    node_name = await free_node(kube, non_fabric_nodes)
    domain = await Domain.create(kube, namespace)
    try:
        await domain.start_workload("worker-0", node_name)
        await watch_object(
            kube,
            NODES,
            node_name,
            lambda n: labels(n).get(c.CD_LABEL) == domain.uid,
            what="node label",
        )
        daemon = await domain.daemon_pod_on(node_name)
        daemon = await watch_present(
            kube,
            PODS,
            daemon["metadata"]["name"],
            pod_ready,
            namespace=namespace,
            what="daemon Ready",
        )
        assert labels(daemon)[c.CLIQUE_ID_LABEL] == ""
        assert (await kube.list(CLIQUES, namespace))["items"] == []
        assert not pod_ready(await kube.get(PODS, "worker-0", namespace))

        # Play the controller's projection for the non-fabric pod (contract §9.1 step 3).
        cd = await kube.get(COMPUTE_DOMAINS, "cd", namespace)
        cd["status"]["nodes"] = [
            {
                "name": node_name,
                "ipAddress": daemon["status"]["podIP"],
                "cliqueID": "",
                "index": -1,
                "status": "Ready",
            }
        ]
        await kube.replace(COMPUTE_DOMAINS, cd, namespace, subresource="status")
        await watch_object(
            kube, PODS, "worker-0", pod_ready, namespace=namespace, what="workload Ready"
        )
    finally:
        with contextlib.suppress(ApiError):
            await kube.delete(PODS, "worker-0", namespace)
        await watch_object(
            kube,
            NODES,
            node_name,
            lambda n: labels(n).get(c.CD_LABEL) != domain.uid,
            what="label removed",
        )


async def test_crashed_daemon_restarts_with_a_new_ip_and_keeps_its_index(
    kube: KubeClient, namespace: str, start_simulator: Callable[..., Any], fabric_nodes: list[str]
) -> None:
    simulator = await start_simulator(restart_delay=DelayRange.fixed(0.5))
    first = await free_node(kube, fabric_nodes)
    domain = await Domain.create(kube, namespace)
    node = await kube.get(NODES, first)
    clique_id = labels(node)[c.GPU_CLIQUE_NODE_LABEL]
    second = await free_node(
        kube,
        [n for n in fabric_nodes if n != first],
    )
    assert labels(await kube.get(NODES, second))[c.GPU_CLIQUE_NODE_LABEL] == clique_id, "same rack"
    name = domain.clique_name(clique_id)

    def ready(node_name: str) -> Predicate:
        def check(clique: dict[str, Any] | None) -> bool:
            entry = entry_for((clique or {}).get("daemons"), "nodeName", node_name)
            return entry is not None and entry["status"] == c.STATUS_READY

        return check

    try:
        await domain.start_workload("worker-0", first)
        await watch_object(
            kube, CLIQUES, name, ready(first), namespace=namespace, what="first Ready"
        )
        await domain.start_workload("worker-1", second)
        clique = await watch_object(
            kube, CLIQUES, name, ready(second), namespace=namespace, what="second Ready"
        )
        assert clique is not None
        before = entry_for(clique["daemons"], "nodeName", second)
        assert before is not None
        assert before["index"] == 1

        assert simulator.crash_daemon(second)
        daemon = await domain.daemon_pod_on(second)
        crashed = await watch_object(
            kube,
            PODS,
            daemon["metadata"]["name"],
            lambda p: (
                p is not None
                and p["status"]["containerStatuses"][0]["restartCount"] == 1
                and pod_ready(p)
            ),
            namespace=namespace,
            what="daemon restarted and Ready",
        )
        assert crashed is not None
        assert crashed["status"]["podIP"] != before["ipAddress"]
        clique = await watch_object(
            kube,
            CLIQUES,
            name,
            lambda cl: (
                ready(second)(cl)
                and (entry_for((cl or {}).get("daemons"), "nodeName", second) or {}).get(
                    "ipAddress"
                )
                == crashed["status"]["podIP"]
            ),
            namespace=namespace,
            what="entry with the new IP",
        )
        assert clique is not None
        after = entry_for(clique["daemons"], "nodeName", second)
        assert after is not None
        assert after["index"] == before["index"]
        assert len(clique["daemons"]) == 2
    finally:
        for pod in ("worker-0", "worker-1"):
            with contextlib.suppress(ApiError):
                await kube.delete(PODS, pod, namespace)
        for node_name in (first, second):
            await watch_object(
                kube,
                NODES,
                node_name,
                lambda n: labels(n).get(c.CD_LABEL) != domain.uid,
                what="label removed",
            )


async def mark_not_ready(client: KubeClient, name: str, namespace: str) -> None:
    """Flip only the Ready condition through pods/status, as the node lifecycle controller's
    MarkPodsNotReady does when a node's heartbeat is late."""
    pod = await client.get(PODS, name, namespace)
    for condition in pod["status"]["conditions"]:
        if condition["type"] == "Ready":
            condition["status"] = "False"
    await client.replace(PODS, pod, namespace, subresource="status")


async def test_pods_marked_not_ready_by_someone_else_are_written_back_ready(
    kube: KubeClient, namespace: str, start_simulator: Callable[..., Any], fabric_nodes: list[str]
) -> None:
    await start_simulator()
    node_name = await free_node(kube, fabric_nodes)
    domain = await Domain.create(kube, namespace)
    try:
        await domain.start_workload("worker-0", node_name)
        await watch_object(
            kube, PODS, "worker-0", pod_ready, namespace=namespace, what="workload Ready"
        )
        daemon_name = (await domain.daemon_pod_on(node_name))["metadata"]["name"]
        await watch_object(kube, PODS, daemon_name, pod_ready, namespace=namespace, what="daemon")

        for name in (daemon_name, "worker-0"):
            await mark_not_ready(kube, name, namespace)
            pod = await watch_present(
                kube, PODS, name, pod_ready, namespace=namespace, what=f"{name} Ready again"
            )
            assert pod["status"]["phase"] == "Running"
            (container,) = pod["status"]["containerStatuses"]
            assert container["ready"] is True
            assert container["restartCount"] == 0, "a write-back is not a restart"
    finally:
        with contextlib.suppress(ApiError):
            await kube.delete(PODS, "worker-0", namespace)
        await drop_label(kube, node_name, domain.uid)
