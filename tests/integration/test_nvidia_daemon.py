"""Compatibility with NVIDIA's real IMEX daemon: our controller, and in every daemon pod NVIDIA's
`compute-domain-daemon` binary (v0.4.1, hack/upstream/build.sh; the differential test on both
pinned targets, v0.4.1 and v0.5.0-dev) run as the kubelet and NVIDIA's
kubelet plugin would start it (computedomain/devcluster/imexdaemon.py): the pod's environment
and the plugin's CDI variables, in-cluster credentials of the daemon ServiceAccount bound only by
the RBAC NVIDIA's chart renders, its own /imexd and /etc/hosts, probes and restarts as the kubelet
runs them. Only `nvidia-imex` and `nvidia-imex-ctl` are stand-ins (they need NVLink hardware);
the stand-in records each start, SIGUSR1 and the peers the daemon pointed it at.

So these tests check the real effect of what our controller writes: NVIDIA's daemons find each
other through it, write their cliques (or the CD's status under the older protocol), and point
IMEX at exactly their clique's peers, also after a peer was replaced or crashed.

Needs NVIDIA's build: skipped without it, except under CI=true, with NVIDIA_DRA_DRIVER_SRC set or
COMPUTEDOMAIN_REQUIRE_UPSTREAM=1 (hack/test.sh), where a missing build fails.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from computedomain.api import constants as c
from computedomain.api.resources import CLIQUES, COMPUTE_DOMAINS
from computedomain.devcluster.helm import find_helm
from computedomain.devcluster.processes import tail
from computedomain.devcluster.upstream import (
    COMPUTE_DOMAIN_VALUES,
    TARGET_VERSIONS,
    TARGETS,
    UpstreamBuild,
    chart_controller_container,
    container_environment,
    start_nvidia_controller,
)
from computedomain.devcluster.watching import Objects, watch_objects
from computedomain.runtime import resources as r
from computedomain.runtime.client import ApiError
from computedomain.runtime.featuregates import parse_gates
from computedomain.runtime.objects import condition
from computedomain.sim.install import create_fleet, wait_nodes_ready
from tests.integration.cluster import TEST_FLEET
from tests.integration.e2e_harness import (
    STATEFULSETS,
    cd_ready,
    pod_ready,
    workload,
)
from tests.integration.nvidia_fleet import (
    PROTOCOLS,
    NvidiaFleet,
    assert_imex_points_at_peers,
    configured_as,
    hosts_mappings,
    ready_nodes,
    status_nodes,
)
from tests.integration.test_upstream_controller import SHARED_SETTINGS
from tests.kit.kubectl_plugin import cdom
from tests.kit.waiting import eventually

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_nvidia_daemons_form_the_domain_follow_a_replaced_peer_and_leave_nothing(
    fleet: NvidiaFleet, protocol: str
) -> None:
    env = fleet.env
    dns_names = protocol != "ip-mode"
    # NVIDIA's daemons join (cliques, or the CD's status); the CD turns Ready; the workload runs.
    uid, nodes = await fleet.ready_domain("r02", PROTOCOLS[protocol])
    await env.workload_pods(
        "workers", lambda pods: len(pods) == 2 and all(map(pod_ready, pods.values())), "Ready"
    )
    if protocol == "cliques":
        cliques = await env.cliques_of(uid, lambda cs: len(cs) == 1, "one clique")
        written = {(d["nodeName"], d["ipAddress"]) for d in next(iter(cliques.values()))["daemons"]}
        assert written == {(n["name"], n["ipAddress"]) for n in nodes}
    await assert_imex_points_at_peers(fleet, nodes, dns_names)

    # A daemon pod replaced: the new one comes with a new address, and every peer's IMEX is
    # pointed at it (SIGUSR1 after /etc/hosts changed; in IP mode a restart with new nodes.cfg).
    victim, survivor = sorted(nodes, key=lambda n: n["name"])
    pod = await fleet.daemon_pod(uid, victim["name"])
    await env.kube.delete(r.PODS, pod["metadata"]["name"], env.driver_namespace)
    replaced = await fleet.nodes(
        "training",
        lambda ns: (
            ready_nodes(2)(ns)
            and any(
                n["name"] == victim["name"] and n["ipAddress"] != victim["ipAddress"] for n in ns
            )
        ),
        "the replaced daemon Ready with a new address",
    )
    await env.cd_until("training", cd_ready, "Ready again")
    await assert_imex_points_at_peers(fleet, replaced, dns_names)
    new_address = next(n["ipAddress"] for n in replaced if n["name"] == victim["name"])
    told = "SIGUSR1" if dns_names else "start"
    events = fleet.on(survivor["name"]).imex.events()
    assert any(what == told and new_address in peers for what, _, peers in events), events

    # Deletion: the daemons stop (their IMEX told to), no clique, no node label, nothing left.
    await env.kube.delete(STATEFULSETS, "workers", env.namespace)
    await env.pods_gone()
    await env.kube.delete(COMPUTE_DOMAINS, "training", env.namespace)
    await env.cd_until("training", lambda cd: cd is None, "finalized")
    await env.nodes_labelled(uid, lambda names: not names, "labels removed")
    await env.cliques_of(uid, lambda cs: not cs, "no clique left")

    processes = [d.process for d in fleet.daemons.containers.values() if d.process is not None]
    assert len(processes) == len(fleet.daemons.containers)
    async with asyncio.timeout(60):  # every NVIDIA daemon process exits
        await asyncio.gather(*(process.wait() for process in processes))
    for daemon in fleet.daemons.containers.values():
        events = daemon.imex.events()
        assert [what for what, _, _ in events[-1:]] == ["SIGTERM"], (daemon.name, events)


async def test_a_crashed_nvidia_daemon_is_restarted_and_rejoins(fleet: NvidiaFleet) -> None:
    env = fleet.env
    uid, nodes = await fleet.ready_domain("r03")
    node = nodes[0]["name"]
    daemon = fleet.on(node)
    first_pid = daemon.imex.events()[0][1]

    # The simulator's crash fault: SIGKILL to the container, no chance to leave the clique.
    assert fleet.simulator is not None
    assert fleet.simulator.crash_daemon(node)

    def restarted(pods: Objects) -> bool:
        pod = next((p for p in pods.values() if p["spec"].get("nodeName") == node), None)
        statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or []
        return bool(statuses) and statuses[0].get("restartCount") == 1 and pod_ready(pod)

    await watch_objects(
        env.kube,
        r.PODS,
        lambda pods: restarted(pods) or None,
        namespace=env.driver_namespace,
        label_selector=f"{c.CD_LABEL}={uid}",
        within=60,
        what=f"the daemon on {node} restarted once and Ready",
    )
    after = await fleet.nodes("training", ready_nodes(2), "2 Ready nodes again")
    await env.cd_until("training", cd_ready, "Ready again")
    # Same pod, same address: the restarted daemon took its entry back.
    assert {(n["name"], n["ipAddress"]) for n in after} == {
        (n["name"], n["ipAddress"]) for n in nodes
    }
    starts = [pid for what, pid, _ in daemon.imex.events() if what == "start"]
    assert starts[0] == first_pid, daemon.imex.events()
    assert len(set(starts)) >= 2, daemon.imex.events()
    await assert_imex_points_at_peers(fleet, after, dns_names=True)


async def test_nvidia_daemons_on_non_fabric_nodes_run_no_imex_and_the_domain_is_ready(
    fleet: NvidiaFleet, fleet_nodes: list[str]
) -> None:
    env = fleet.env
    await fleet.start()
    cd = await env.create_cd("plain", num_nodes=2)
    uid = cd["metadata"]["uid"]
    non_fabric = fleet_nodes[-2:]
    await env.run_workload(workload("workers", 2, hostnames=non_fabric))

    nodes = await fleet.nodes("plain", ready_nodes(2), "2 Ready nodes")
    assert sorted(n["name"] for n in nodes) == sorted(non_fabric)
    assert {n["cliqueID"] for n in nodes} == {""}
    await env.cd_until("plain", cd_ready, "Ready")
    await env.workload_pods(
        "workers", lambda pods: len(pods) == 2 and all(map(pod_ready, pods.values())), "Ready"
    )
    cliques = await env.kube.list(CLIQUES, env.driver_namespace, f"{c.CD_LABEL}={uid}")
    assert cliques["items"] == []
    for node in non_fabric:
        daemon = fleet.on(node)
        assert daemon.imex.events() == [], "no IMEX on a node without NVLink fabric"
        assert hosts_mappings(daemon) == {}
        assert "no cliqueID" in daemon.log_text()


@pytest.mark.parametrize("protocol", ["cliques", "ip-mode"])
@pytest.mark.parametrize("nvidia_target", TARGETS, ids=TARGET_VERSIONS.get, indirect=True)
async def test_nvidia_daemons_are_configured_alike_under_nvidia_controller_and_ours(
    nvidia_target: tuple[str, UpstreamBuild],
    fleet: NvidiaFleet,
    fleet_nodes: list[str],
    protocol: str,
) -> None:
    """NVIDIA's controller and daemons of one target, then ours with the same daemons."""
    _, upstream = nvidia_target
    env = fleet.env
    gates = PROTOCOLS[protocol]
    dns_names = protocol != "ip-mode"
    hostnames = [node for node in fleet_nodes if "-r01-" in node][:2]
    values: dict[str, Any] = {**COMPUTE_DOMAIN_VALUES, "featureGates": parse_gates(gates)}
    container = chart_controller_container(find_helm(), upstream, env.driver_namespace, values)
    nvidia_env = container_environment(
        container, "dra-driver-nvidia-gpu-controller-0", env.driver_namespace
    )
    nvidia_env["HTTP_ENDPOINT"] = "127.0.0.1:0"
    await env.start_simulator(daemon_factory=fleet.daemons)

    async def run_once() -> dict[str, Any]:
        cd = await env.create_cd("training", num_nodes=2)
        uid = cd["metadata"]["uid"]
        await env.run_workload(workload("workers", 2, hostnames=hostnames))
        await fleet.nodes("training", ready_nodes(2), "2 Ready nodes")
        ready = await env.cd_until(
            "training",
            lambda cd: (cd or {}).get("status", {}).get("status") == c.STATUS_READY,
            "status.status Ready",
        )
        await env.workload_pods(
            "workers", lambda pods: len(pods) == 2 and all(map(pod_ready, pods.values())), "Ready"
        )
        nodes = status_nodes(ready)
        await assert_imex_points_at_peers(fleet, nodes, dns_names)
        seen = configured_as(fleet.on, ready)
        await env.kube.delete(STATEFULSETS, "workers", env.namespace)
        await env.pods_gone()
        await env.kube.delete(COMPUTE_DOMAINS, "training", env.namespace)
        await env.cd_until("training", lambda cd: cd is None, "finalized")
        await env.nodes_labelled(uid, lambda names: not names, "labels removed")
        await fleet.daemon_pods_gone(uid)
        return seen

    log = fleet.kubeconfig.parent / "nvidia-controller.log"
    nvidia = start_nvidia_controller(upstream, fleet.kubeconfig, container, nvidia_env, log)
    failure = ""
    try:
        theirs = await run_once()
    except TimeoutError as error:
        failure = f"under NVIDIA's controller: {error}\n--- its log:\n{tail(log, 40)}"
    finally:
        nvidia.stop()
    # Ours next (and, after a failure, to finalize what NVIDIA's left).
    await env.start_controller(**{k: nvidia_env[k] for k in SHARED_SETTINGS if k in nvidia_env})
    if failure:
        pytest.fail(failure)
    ours = await run_once()
    print("configured under NVIDIA's controller:", *theirs.items(), sep="\n  ")
    assert ours == theirs


async def test_a_lost_node_leaves_the_domain_and_its_peers_imex_is_told(
    fleet: NvidiaFleet, api_client: ApiClient
) -> None:
    env = fleet.env
    uid, nodes = await fleet.ready_domain("r00")
    lost, survivor = sorted(nodes, key=lambda n: n["name"])
    daemon = fleet.on(survivor["name"])

    # The Node goes away (an instance terminated): the pod garbage collector deletes its pods,
    # NVIDIA's daemon there is stopped and leaves its clique, and the survivor's IMEX is told.
    await env.kube.delete(r.NODES, lost["name"])
    try:
        left = await fleet.nodes(
            "training",
            lambda ns: lost["name"] not in {n["name"] for n in ns},
            f"{lost['name']} gone from status.nodes",
        )
        assert survivor["name"] in {n["name"] for n in left}

        async def told() -> bool:
            events = daemon.imex.events()
            return any(
                what == "SIGUSR1" and lost["ipAddress"] not in peers for what, _, peers in events
            )

        await eventually(told, within=60, what="the survivor's IMEX told its peer is gone")
        cliques = await env.cliques_of(
            uid,
            lambda cs: all(
                d["nodeName"] != lost["name"] for cl in cs.values() for d in cl.get("daemons") or []
            ),
            "no clique entry for the lost node",
        )
        assert cliques
        # The StatefulSet's pod comes back on another node of the rack: the domain heals.
        healed = await fleet.nodes("training", ready_nodes(2), "2 Ready nodes again")
        await env.cd_until("training", cd_ready, "Ready again")
        await assert_imex_points_at_peers(fleet, healed, dns_names=True)
    finally:
        # Put the shared fleet's node back as it was made (its ResourceSlice stayed).
        await create_fleet(api_client, TEST_FLEET)
        await wait_nodes_ready(api_client, [lost["name"]], 60)


async def test_describe_names_a_daemon_nvidias_binary_refuses_to_start_and_where_its_words_are(
    fleet: NvidiaFleet, kubeconfig_path: Path
) -> None:
    """#965 with NVIDIA's own daemon: the container runtime drops the kubelet plugin's CDI edits
    on one node, so NVIDIA's binary exits there with its own error and restarts in a loop. The
    controller says DaemonsNotReady naming that node once the grace period is over; `kubectl
    cdom describe` names that daemon pod as the first broken link, in the kubelet's words (the
    back-off, the exit code) with the logs command; and those logs (what `kubectl logs
    --previous` prints) hold NVIDIA's own words."""
    env = fleet.env
    bad, good = "gb200-r01-n03", "gb200-r01-n04"
    fleet.daemons.runtime = dataclasses.replace(fleet.daemons.runtime, without_cdi=frozenset({bad}))
    await env.start_controller(DAEMON_READY_GRACE_PERIOD="3s")
    fleet.simulator = await env.start_simulator(daemon_factory=fleet.daemons)
    cd = await env.create_cd("training", num_nodes=2)
    await env.run_workload(workload("workers", 2, hostnames=[bad, good]))
    stuck = await env.cd_until(
        "training",
        lambda o: condition(o, "Ready").get("reason") == "DaemonsNotReady",
        "DaemonsNotReady",
        within=90,
    )
    assert f"{bad}: " in condition(stuck, "Ready")["message"]

    async def described_in_back_off() -> list[str] | None:
        """The first broken link's three lines, once describe catches the pod in its back-off
        (between two restarts the kubelet reports only the last exit: a snapshot)."""
        code, out, err = await cdom(kubeconfig_path, "describe", "training", "-n", env.namespace)
        print(out)
        assert code == 1, err
        lines = out.splitlines()
        at = next(i for i, line in enumerate(lines) if line.startswith("First broken link:"))
        found = lines[at : at + 3]
        return found if "CrashLoopBackOff" in found[1] else None

    link, problem, fix = await eventually(
        described_in_back_off, within=30, what="describe naming the daemon's back-off"
    )
    pod = await fleet.daemon_pod(cd["metadata"]["uid"], bad)
    pod_name = pod["metadata"]["name"]
    assert link == f"First broken link: IMEX daemon {env.driver_namespace}/{pod_name} on {bad}"
    assert "CrashLoopBackOff" in problem
    assert "last exit Error, exit code 1" in problem  # the process's own exit code
    assert f"logs {pod_name} -c {c.DAEMON_CONTAINER}" in fix

    # What those logs say: NVIDIA's daemon, in its own words.
    daemon = next(d for d in fleet.daemons.containers.values() if d.name == pod_name)
    assert "CDI container edits did not apply" in daemon.log_text()
    # Where a kubelet serves the log, describe quotes that line itself. kwok's nodes serve
    # none here (the apiserver has no kubelet to ask at their address): describe points.
    try:
        served = await asyncio.wait_for(
            env.kube.pod_log(env.driver_namespace, pod_name, c.DAEMON_CONTAINER, previous=True),
            10,
        )
    except (ApiError, TimeoutError) as unavailable:
        print(f"no kubelet serves the daemon's log here: {unavailable!r}")
        assert "its log:" not in problem
    else:
        assert "CDI container edits did not apply" in served
        assert "its log: Error: CDI container edits did not apply" in problem
