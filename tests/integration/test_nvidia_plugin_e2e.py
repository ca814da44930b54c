"""End to end with NVIDIA's own node side: on simulated nodes, NVIDIA's compute-domain kubelet
plugin (on NVIDIA's mock NVML: devcluster/kubeletplugin.py) prepares every claim of the driver,
called over DRA gRPC by the lab's stand-in kubelet (devcluster/drakubelet.py), which starts no
container while a preparation fails and then starts it with the plugin's CDI edits; NVIDIA's IMEX
daemon (the same build, devcluster/imexdaemon.py) runs in each daemon pod, its claim prepared by
the plugin the same way (its env, /imexd and device node from the plugin's CDI edits); and a
controller in the middle. Main at 95932046 (v0.5.0-dev) unless a test names its targets.

- A workload pod with a ComputeDomain channel claim (v0.5.0-dev): the plugin refuses to prepare
  it until the node is Ready in the domain; meanwhile no container starts (the pod stays Pending
  with its container in ContainerCreating, a Warning FailedPrepareDynamicResources carries the
  plugin's words); then the container starts with the IMEX channel's device node injected.
- NVIDIA's example ComputeDomain (numNodes 2, a channel ResourceClaimTemplate) with a 2-pod
  workload, on each target (v0.4.1: the nodes carry the clique label as GPU Feature Discovery
  would set it; v0.5.0-dev: the plugin sets it), first under NVIDIA's controller of that target,
  then under ours: Ready on both nodes; the same status (nodes, their daemons' IPs, cliques,
  indexes), the same daemon files and IMEX peers, the same CDI edits for each daemon (CLIQUE_ID,
  the CD's UID, name and namespace, /imexd in the plugin's data directory with the template it
  copied there, the fabric-imex-mgmt device node) and the channel in each workload process.
- A node's GPUs move to another clique (v0.5.0-dev; mock NVML override, the plugin restarted for
  its re-read): the plugin relabels the node, the running daemon stays in the old clique and so
  does the status (one clique, the domain Ready); the replaced daemon pod is prepared with the new
  clique, joins it, the old entry goes, and IMEX peers, clique objects and status converge, with
  no live node's index changed (tests/kit/indexes.py).

Needs NVIDIA's builds and the mock NVML: skipped without them, except under CI=true, with
their sources set or COMPUTEDOMAIN_REQUIRE_UPSTREAM=1 (hack/test.sh), where they must be there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from computedomain.api import constants as c
from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.devcluster.drakubelet import (
    FAILED_PREPARE,
)
from computedomain.devcluster.helm import find_helm
from computedomain.devcluster.imexdaemon import NvidiaImexDaemon
from computedomain.devcluster.kubeletplugin import (
    CAPS_MAJOR,
    FABRIC_IMEX_MGMT_MINOR,
    IMEX_CHANNELS_MAJOR,
    Clique,
)
from computedomain.devcluster.processes import tail
from computedomain.devcluster.upstream import (
    COMPUTE_DOMAIN_VALUES,
    MAIN,
    TARGET_VERSIONS,
    TARGETS,
    UpstreamBuild,
    chart_controller_container,
    container_environment,
    start_nvidia_controller,
)
from computedomain.devcluster.watching import Objects, watch_objects
from computedomain.runtime import resources as r
from computedomain.runtime.objects import condition
from computedomain.sim.fleet import rack_node_name
from tests.integration.cluster import TEST_FLEET
from tests.integration.e2e_harness import (
    STATEFULSETS,
    EndToEnd,
    cd_ready,
    pod_running,
    status_nodes,
    workload,
)
from tests.integration.nvidia_fleet import (
    CHANNEL,
    START_WITHIN,
    NodeSide,
    NodeSideOn,
    clique_label,
    configured_as,
)
from tests.integration.test_upstream_controller import SHARED_SETTINGS
from tests.kit.indexes import watching_indexes
from tests.kit.waiting import eventually

pytestmark = pytest.mark.integration

# Two nodes of one rack (one NVLink clique).
NODES = [rack_node_name(TEST_FLEET.name_prefix, 0, index) for index in (0, 1)]
FABRIC_MGMT = f"/dev/nvidia-caps/nvidia-cap{FABRIC_IMEX_MGMT_MINOR}"
NOT_READY = "current node not ready in ComputeDomain"
# NVIDIA's plugin retries a refused preparation itself for 45 s, as long as the kubelet waits for
# the call (the kubelet's timeout): the kubelet then learns only that the claim was "left out",
# or that its call timed out, whichever comes first. So the node is kept not Ready for longer
# (the stand-in IMEX reports READY only after IMEX_SLOW seconds) to see that.
IMEX_SLOW = 55.0
REFUSED = ("NodePrepareResources left out 1 claims", "code = DeadlineExceeded")


@pytest.fixture
async def node_side(
    nvidia_node_side_on: NodeSideOn,
) -> AsyncIterator[NodeSide]:
    """NVIDIA's plugins and daemons of the test's target (main unless it parametrizes
    ``nvidia_target``) on NODES."""
    async with nvidia_node_side_on(NODES) as side:
        yield side


def events_of(events: Objects, name: str, reason: str) -> list[dict[str, Any]]:
    return [
        e
        for e in events.values()
        if (e.get("regarding") or e.get("involvedObject") or {}).get("name") == name
        and e.get("reason") == reason
    ]


def container_waiting(pod: Mapping[str, Any]) -> str | None:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return (
        ((statuses[0].get("state") or {}).get("waiting") or {}).get("reason") if statuses else None
    )


@pytest.mark.parametrize("nvidia_target", [MAIN], ids=TARGET_VERSIONS.get, indirect=True)
async def test_no_container_until_the_plugin_prepares_the_channel_then_it_is_injected(
    nvidia_target: tuple[str, UpstreamBuild], node_side: NodeSide
) -> None:
    env = node_side.env
    runtime = node_side.daemons.runtime
    node_side.daemons.runtime = dataclasses.replace(runtime, imex_ready_after=IMEX_SLOW)
    await node_side.start()
    cd = await env.create_cd("one", num_nodes=1)
    await env.run_workload(workload("one", 1, hostnames=NODES[:1]))

    # The plugin refuses (its log says why: the node is not Ready in the domain yet) until the
    # kubelet's call times out; the kubelet records a Warning, starts no container, tries again.
    refused = await watch_objects(
        env.kube,
        r.EVENTS,
        lambda events: events_of(events, "one-0", FAILED_PREPARE) or None,
        namespace=env.namespace,
        within=IMEX_SLOW + START_WITHIN,
        what="a Warning FailedPrepareDynamicResources on one-0",
    )
    assert refused[0]["type"] == "Warning"
    message = str(refused[0].get("note") or refused[0].get("message"))
    assert message.startswith("Failed to prepare dynamic resources: "), message
    assert any(words in message for words in REFUSED), message
    # No container meanwhile: the pod as the kubelet writes it then.
    waiting = await env.workload_pods(
        "one",
        lambda pods: container_waiting(pods.get("one-0") or {}) == "ContainerCreating",
        "one-0 waiting in ContainerCreating",
        within=10,
    )
    pod = waiting["one-0"]
    kubelet = node_side.kubelet
    uid = pod["metadata"]["uid"]
    assert uid not in kubelet.containers
    assert pod["status"]["phase"] == "Pending"
    assert not pod["status"].get("podIP")
    plugin_log = node_side.plugins.node(NODES[0]).log.read_text()
    assert f"{NOT_READY} (attempt" in plugin_log

    # Then Ready on the node, and only then the container, with the channel.
    pods = await env.workload_pods(
        "one",
        lambda pods: all(pod_running(p) for p in pods.values()) and bool(pods),
        "Running",
        within=START_WITHIN,
    )
    ready = await env.cd_until("one", cd_ready, "Ready", within=START_WITHIN)
    assert [n["status"] for n in status_nodes(ready).values()] == [c.STATUS_READY]
    failures = kubelet.failures[uid]
    assert failures
    assert all(any(words in f for words in REFUSED) for f in failures), failures
    container = kubelet.containers[pods["one-0"]["metadata"]["uid"]]
    observed = container.observed()
    assert observed is not None
    assert observed["files"][CHANNEL] == f"c {IMEX_CHANNELS_MAJOR}:0"
    assert [n.path for n in container.injected.device_nodes] == [CHANNEL]
    assert cd["metadata"]["uid"] in str(
        (await env.kube.get(r.NODES, NODES[0]))["metadata"]["labels"].get(c.CD_LABEL)
    )


def status_ready(cd: Mapping[str, Any] | None) -> bool:
    return bool(((cd or {}).get("status") or {}).get("status") == c.STATUS_READY)


def nodes_ready(cd: Mapping[str, Any] | None) -> list[str]:
    return [name for name, e in status_nodes(cd).items() if e["status"] == c.STATUS_READY]


async def domain_ready_on_nodes(env: EndToEnd, name: str) -> tuple[str, dict[str, Any]]:
    """A CD ``name`` of NODES with a workload on each: its UID and the CD once `status.status`
    (which NVIDIA's controller writes too; the conditions are ours alone) and every node are
    Ready."""
    cd = await env.create_cd(name, num_nodes=len(NODES))
    await env.run_workload(workload(name, len(NODES), hostnames=NODES))
    ready = await env.cd_until(
        name,
        lambda cd: status_ready(cd) and set(nodes_ready(cd)) == set(NODES),
        "Ready on both nodes",
        within=2 * START_WITHIN,
    )
    assert ready is not None
    return str(cd["metadata"]["uid"]), ready


async def example_domain(node_side: NodeSide) -> dict[str, Any]:
    """NVIDIA's example CD with a workload on both NODES, under whichever controller runs: once
    Ready and every process has its channel, what the daemons and processes were given
    (configured_as, the daemons' CDI environment, the processes' channels), then all deleted and
    the daemons gone."""
    env = node_side.env
    uid, ready = await domain_ready_on_nodes(env, "example")
    entries = status_nodes(ready)
    pods = await env.workload_pods(
        "example",
        lambda pods: len(pods) == len(NODES) and all(pod_running(p) for p in pods.values()),
        "all Running",
        within=START_WITHIN,
    )
    kubelet = node_side.kubelet
    seen = configured_as(node_side.daemon, ready)
    for pod in pods.values():
        observed = kubelet.containers[pod["metadata"]["uid"]].observed()
        assert observed is not None
        seen[f"{pod['spec']['nodeName']} process channel"] = observed["files"].get(CHANNEL)

    for node in NODES:
        daemon = node_side.daemon(node)
        injected = daemon.injected
        assert injected is not None, "the daemon claim was not prepared by the plugin"
        seen[f"{node} daemon env"] = {
            k: v.replace(uid, "<cd-uid>") for k, v in dict(injected.env).items()
        }
        plugin_dir = node_side.plugins.node(node).plugin_data_dir
        assert daemon.imexd == plugin_dir / "domains" / uid
        assert (daemon.imexd / "imexd.cfg.tmpl").is_file()
        assert (daemon.imexd / "imexd.cfg").is_file()  # the daemon wrote it from the template
        # The fabric-imex-mgmt capability, beside the GPUs of the plugin's "all" device.
        nodes = {n.path: (n.major, n.minor) for n in injected.device_nodes}
        seen[f"{node} daemon device nodes"] = sorted(nodes)
        assert nodes[FABRIC_MGMT] == (CAPS_MAJOR, FABRIC_IMEX_MGMT_MINOR), nodes
        assert {"/dev/nvidiactl", "/dev/nvidia0"} <= set(nodes), nodes
        assert entries[node]["cliqueID"] == node_side.plugins.topology.cliques[node].label
        peers = daemon.imex.peers()
        assert peers is not None
        assert len(peers) == len(NODES), peers

    await env.kube.delete(STATEFULSETS, "example", env.namespace)
    await env.pods_gone()
    await env.kube.delete(COMPUTE_DOMAINS, "example", env.namespace)
    await env.cd_until("example", lambda cd: cd is None, "finalized")
    await env.nodes_labelled(uid, lambda names: not names, "labels removed")
    await env.daemon_pods_gone(uid)
    return seen


@pytest.mark.parametrize("nvidia_target", TARGETS, ids=TARGET_VERSIONS.get, indirect=True)
async def test_nvidias_example_domain_is_alike_under_nvidias_controller_and_ours(
    nvidia_target: tuple[str, UpstreamBuild], node_side: NodeSide
) -> None:
    """Every NVIDIA component of one target but nvidia-imex, first with NVIDIA's controller of
    that target, then with ours in its place: the same status (nodes, IPs, cliques, indexes),
    daemon files, daemon CDI edits and process channels."""
    target, build = nvidia_target
    env = node_side.env
    values = COMPUTE_DOMAIN_VALUES
    container = chart_controller_container(find_helm(), build, env.driver_namespace, values)
    nvidia_env = container_environment(
        container, "dra-driver-nvidia-gpu-controller-0", env.driver_namespace
    )
    nvidia_env["HTTP_ENDPOINT"] = "127.0.0.1:0"
    await node_side.start_nodes()
    log = node_side.kubeconfig.parent / "nvidia-controller.log"
    nvidia = start_nvidia_controller(build, node_side.kubeconfig, container, nvidia_env, log)
    failure = ""
    try:
        theirs = await example_domain(node_side)
    except (TimeoutError, AssertionError) as error:
        failure = f"under NVIDIA's controller: {error}\n--- its log:\n{tail(log, 40)}"
        failure += f"\n{node_side.diagnostics()}"
    finally:
        nvidia.stop()
    # Ours next (and, after a failure, to finalize what NVIDIA's left).
    await env.start_controller(**{k: nvidia_env[k] for k in SHARED_SETTINGS if k in nvidia_env})
    if failure:
        pytest.fail(failure)
    ours = await example_domain(node_side)
    print(f"under NVIDIA's {TARGET_VERSIONS[target]} controller:", *theirs.items(), sep="\n  ")
    assert ours == theirs
    for node in NODES:
        assert ours[f"{node} process channel"] == f"c {IMEX_CHANNELS_MAJOR}:0"
        assert ours[f"{node} daemon env"] == {
            "CLIQUE_ID": node_side.plugins.topology.cliques[node].label,
            "COMPUTE_DOMAIN_UUID": "<cd-uid>",
            "COMPUTE_DOMAIN_NAME": "example",
            "COMPUTE_DOMAIN_NAMESPACE": env.namespace,
            # The plugin's "all" device of the driver (its common edits), given to daemon claims.
            "NVIDIA_VISIBLE_DEVICES": "void",
            "NVIDIA_CTK_LIBCUDA_DIR": "/usr/lib64",
        }


@pytest.mark.parametrize("nvidia_target", [MAIN], ids=TARGET_VERSIONS.get, indirect=True)
async def test_a_node_moved_to_another_clique_by_the_gpus_converges_with_nvidias_parts(
    nvidia_target: tuple[str, UpstreamBuild], node_side: NodeSide
) -> None:
    """v0.5's runtime clique change with the parts that make it: the GPUs of one node report
    another clique (mock NVML override) and its plugin, restarted (its 10-minute re-read, now),
    relabels the node. The running NVIDIA daemon keeps the CLIQUE_ID it was prepared with, so the
    domain stays Ready with the node in its old clique; once its daemon pod is replaced, the
    plugin prepares the new pod with the new clique, the daemon joins ``<cdUID>.<newClique>``,
    the old entry goes, the status lists the node once in its new clique, and each daemon's IMEX
    is pointed at its own clique's peers only. No live node's index changes meanwhile."""
    env = node_side.env
    kube = env.kube
    mover, stayer = NODES[1], NODES[0]
    async with watching_indexes(kube, env.namespace, env.driver_namespace) as witness:
        await node_side.start()
        uid, ready = await domain_ready_on_nodes(env, "mover")
        await env.workload_pods(
            "mover",
            lambda pods: len(pods) == len(NODES) and all(pod_running(p) for p in pods.values()),
            "all Running",
            within=START_WITHIN,
        )
        old = node_side.plugins.topology.cliques[mover]
        assert status_nodes(ready)[mover]["cliqueID"] == old.label
        moved = Clique(old.cluster_uuid, old.clique_id + 9)
        node_side.plugins.set_clique(mover, moved)
        node_side.plugins.restart(mover)
        try:
            await watch_objects(
                kube,
                r.NODES,
                lambda found: clique_label(found.get(mover)) == moved.label,
                within=START_WITHIN,
                what=f"{mover} relabelled by its plugin",
            )
        except TimeoutError as error:
            pytest.fail(f"{error}\n{node_side.diagnostics()}")
        # The daemon still runs in the old clique, and that is what its IMEX uses: the status
        # keeps the node there, and counts one clique (not the relabelled Node's two).
        await node_side.controller_saw_label(mover, moved.label)
        still = await kube.get(COMPUTE_DOMAINS, "mover", env.namespace)
        assert cd_ready(still)
        assert {n: e["cliqueID"] for n, e in status_nodes(still).items()} == dict.fromkeys(
            NODES, old.label
        )
        assert (still["status"]["cliqueCount"], condition(still, "SingleClique").get("status")) == (
            1,
            "True",
        )

        old_pod = node_side.daemon(mover).name
        await kube.delete(r.PODS, old_pod, env.driver_namespace)

        def converged(cd: dict[str, Any] | None) -> bool:
            entries = status_nodes(cd)
            return (
                status_ready(cd)
                and set(nodes_ready(cd)) == set(NODES)
                and entries[mover]["cliqueID"] == moved.label
                and entries[stayer]["cliqueID"] == old.label
            )

        after = await env.cd_until("mover", converged, "the node in its new clique", START_WITHIN)
        assert after is not None
        assert [n["name"] for n in after["status"]["nodes"]].count(mover) == 1
        cliques = await env.cliques_of(
            uid, lambda found: len(found) == 2, "the old clique and the new one"
        )
        members = {
            name: sorted(d["nodeName"] for d in obj.get("daemons") or [])
            for name, obj in cliques.items()
        }
        assert members == {f"{uid}.{old.label}": [stayer], f"{uid}.{moved.label}": [mover]}
        # Each daemon's IMEX points at its own clique's peers only (itself here).
        entries = status_nodes(after)
        for node in NODES:
            daemon = node_side.daemon(node)

            async def alone(daemon: NvidiaImexDaemon = daemon, node: str = node) -> bool:
                return set(daemon.imex.peers() or ()) == {entries[node]["ipAddress"]}

            await eventually(alone, within=30, what=f"IMEX on {node} pointed at itself only")
        injected = node_side.daemon(mover).injected
        assert injected is not None
        assert dict(injected.env)["CLIQUE_ID"] == moved.label
        problems = await witness.stop()
    assert not problems, "\n".join(problems)
