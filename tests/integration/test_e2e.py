"""End to end on the real control plane: OUR controller (in-process) and the fleet simulator
playing NVIDIA's kubelet plugin and IMEX daemons, with workloads scheduled by the real scheduler.

The session fleet is shared (4 racks r00..r03 of 18 nodes, 2 non-fabric nodes): every test pins
its workloads to racks by the simulation's rack label and cleans up while the controller still
runs, so the next test finds clean nodes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any

import pytest

from computedomain.api import constants as c
from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.devcluster.audit import AuditedWrite, AuditLog
from computedomain.devcluster.controlplane import ControlPlane
from computedomain.devcluster.watching import watch_object, watch_objects
from computedomain.runtime import resources as r
from computedomain.runtime.objects import condition, labels
from computedomain.sim.faults import FaultSettings
from tests.integration.conftest import IdentityFactory
from tests.integration.e2e_harness import (
    FAST_DAEMONS,
    STATEFULSETS,
    EndToEnd,
    cd_ready,
    pod_running,
    status_nodes,
    workload,
)
from tests.kit.controllers import controllers_for

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def _occurrences(event: dict[str, Any]) -> int:
    return int((event.get("series") or {}).get("count") or 1)


def _ready_message(cd: dict[str, Any] | None) -> str:
    return str(condition(cd or {}, "Ready").get("message") or "")


def _reasons(events: list[dict[str, Any]]) -> set[str]:
    return {str(e.get("reason")) for e in events}


def _all_running(count: int) -> Any:
    return lambda pods: len(pods) == count and all(pod_running(p) for p in pods.values())


async def test_full_sequence_from_domain_to_running_workload(e2e: EndToEnd) -> None:
    await e2e.start_controller()
    await e2e.start_simulator()
    cd = await e2e.create_cd("training", num_nodes=4)
    uid = cd["metadata"]["uid"]
    await e2e.run_workload(workload("workers", 4, racks=["r01"]))

    # The workload RCT exists, the pods are scheduled, their nodes get the CD label ...
    await watch_objects(
        e2e.kube,
        r.RESOURCE_CLAIM_TEMPLATES,
        lambda rcts: "imex-channel-0" in rcts,
        namespace=e2e.namespace,
        what="workload RCT",
    )
    pods = await e2e.workload_pods(
        "workers",
        lambda ps: len(ps) == 4 and all((p.get("spec") or {}).get("nodeName") for p in ps.values()),
        "4 pods scheduled",
    )
    workload_nodes = {p["spec"]["nodeName"] for p in pods.values()}
    assert len(workload_nodes) == 4
    assert all("-r01-" in n for n in workload_nodes)
    assert (
        await e2e.nodes_labelled(uid, lambda n: n == workload_nodes, "the 4 workload nodes")
        == workload_nodes
    )

    # ... the real DaemonSet controller places one daemon pod per labelled node ...
    daemons = await watch_objects(
        e2e.kube,
        r.PODS,
        lambda ps: (
            ps if {p["spec"].get("nodeName") for p in ps.values()} == workload_nodes else None
        ),
        namespace=e2e.driver_namespace,
        label_selector=f"{c.CD_LABEL}={uid}",
        what="a daemon pod on each workload node",
    )
    assert len(daemons) == 4

    # ... the daemons join one clique, the CD turns Ready, and the workload runs.
    cliques = await e2e.cliques_of(
        uid,
        lambda cs: (
            {d["nodeName"] for cl in cs.values() for d in cl.get("daemons") or []} == workload_nodes
        ),
        "all 4 daemons in cliques",
    )
    assert len(cliques) == 1
    cd_now = await e2e.cd_until("training", cd_ready, "Ready=True")
    assert cd_now is not None
    assert set(status_nodes(cd_now)) == workload_nodes
    assert {n["status"] for n in status_nodes(cd_now).values()} == {c.STATUS_READY}
    assert sorted(n["index"] for n in status_nodes(cd_now).values()) == [0, 1, 2, 3]
    assert cd_now["status"]["status"] == "Ready"
    assert condition(cd_now, "SingleClique")["status"] == "True"
    assert condition(cd_now, "ExclusiveClique")["status"] == "True"
    assert cd_now["status"]["observedGeneration"] == cd_now["metadata"]["generation"]
    await e2e.workload_pods("workers", _all_running(4), "all Running")


async def test_nodes_join_and_leave_with_the_workload(e2e: EndToEnd) -> None:
    await e2e.start_controller()
    await e2e.start_simulator()
    uid = (await e2e.create_cd("elastic"))["metadata"]["uid"]
    await e2e.run_workload(workload("elastic", 4, racks=["r02"]))
    cd = await e2e.cd_until(
        "elastic", lambda o: cd_ready(o) and len(status_nodes(o)) == 4, "4 nodes Ready"
    )
    pods = await e2e.workload_pods("elastic", _all_running(4), "all Running")
    node_of = {name: p["spec"]["nodeName"] for name, p in pods.items()}
    leaving = {node_of["elastic-2"], node_of["elastic-3"]}
    staying = {node_of["elastic-0"], node_of["elastic-1"]}
    assert cd is not None
    assert set(status_nodes(cd)) == leaving | staying

    await e2e.scale("elastic", 2)
    await e2e.nodes_labelled(uid, lambda n: n == staying, "labels of the 2 leaving nodes removed")
    cd = await e2e.cd_until(
        "elastic",
        lambda o: set(status_nodes(o)) == staying and cd_ready(o),
        "status.nodes shrinks to 2",
    )
    assert cd is not None
    assert cd["status"]["nodeCount"] == 2
    await e2e.cliques_of(
        uid,
        lambda cs: (
            {d["nodeName"] for cl in cs.values() for d in cl.get("daemons") or []} == staying
        ),
        "clique entries of the leaving nodes gone",
    )

    # Departures are NodeLeft Events about the CD alone (issue 10): the first batch is named,
    # later batches count in its series; status.nodes above names who stayed.
    def left_notes(events: list[dict[str, Any]]) -> list[str]:
        return [e["note"] for e in events if e["reason"] == "NodeLeft"]

    events = await e2e.events_for(
        "elastic",
        lambda es: any(n in note for note in left_notes(es) for n in leaving),
        "a NodeLeft event naming a leaving node",
    )
    assert left_notes(events)
    assert not any(n in note for note in left_notes(events) for n in staying), left_notes(events)


async def test_daemon_that_never_turns_ready_is_named(e2e: EndToEnd) -> None:
    stuck, fine = "gb200-r03-n01", "gb200-r03-n00"
    # Not ready after the grace period: DaemonsNotReady (before it, DaemonsStarting).
    await e2e.start_controller(DAEMON_READY_GRACE_PERIOD="2s")
    await e2e.start_simulator(
        FaultSettings(daemon_delay=FAST_DAEMONS, never_ready_nodes=frozenset({stuck}))
    )
    await e2e.create_cd("stuck")
    await e2e.run_workload(workload("stuck", 2, hostnames=[stuck, fine]))
    cd = await e2e.cd_until(
        "stuck",
        lambda o: (
            condition(o, "Ready").get("reason") == "DaemonsNotReady"
            and status_nodes(o).get(fine, {}).get("status") == c.STATUS_READY
        ),
        "DaemonsNotReady once the healthy daemon is Ready",
    )
    ready = condition(cd, "Ready")
    assert ready["status"] == "False"
    assert stuck in ready["message"]
    assert fine not in ready["message"]
    assert condition(cd, "DaemonsReady")["status"] == "False"
    pods = await e2e.workload_pods("stuck", lambda ps: len(ps) == 2, "both pods exist")
    assert {p["spec"]["nodeName"]: pod_running(p) for p in pods.values()} == {
        stuck: False,
        fine: True,
    }


def _released_claims(write: AuditedWrite, namespace: str, pods: Iterable[str]) -> bool:
    """A workload pod's DELETE that succeeded: the one that removes the pod is its release of
    its claims (here the garbage collector's, immediate with the workload's grace period 0;
    with a grace period, the kubelet's once the containers have stopped, kwok's here). What
    KCM writes next, the claim's ``reservedFor`` emptied (resource-claim-controller) and the
    claim deleted (garbage collector), is bookkeeping that follows the pod's removal within
    milliseconds, or never while KCM is down: the deletion does not wait for it, so it is not
    the mark to order against."""
    return (
        write.verb == "delete"
        and write.resource == "pods"
        and not write.subresource
        and write.namespace == namespace
        and write.name in pods
        and write.code < 300
    )


def _timeline(writes: Iterable[AuditedWrite], namespace: str, daemon: str) -> str:
    """The workload's releases and the IMEX DaemonSet's deletion as the apiserver logged them."""
    lines = [
        f"  {w.received:.3f} {w.user} {w.target} -> {w.code}"
        for w in sorted(writes, key=lambda w: w.received)
        if (w.resource in ("pods", "resourceclaims") and w.namespace == namespace)
        or (w.resource == "daemonsets" and w.name == daemon)
    ]
    return "\n".join(lines)


async def test_domain_deleted_while_its_workload_runs_keeps_imex_until_it_stops_then_leaves_nothing(
    identities: IdentityFactory,  # first: torn down after the controller that uses it
    e2e: EndToEnd,
    control_plane: ControlPlane,
) -> None:
    """A CD deleted under its running job (or with it, before its pods have drained) keeps its
    IMEX daemons, children and node labels while the job's pods still use its channel, and says
    so; once they have stopped, everything goes (WORKLOAD_RELEASE_TIMEOUT, default 5 min). The
    order is the apiserver's: in its audit log, our controller's DELETE of the IMEX DaemonSet
    comes after the DELETE that removed the last workload pod."""
    assert control_plane.audit_log is not None
    audit = AuditLog(control_plane.audit_log)
    kubeconfig, ours = await identities("deleting")
    e2e.controllers = controllers_for(kubeconfig, e2e.driver_namespace)
    await e2e.start_controller()
    await e2e.start_simulator()
    uid = (await e2e.create_cd("doomed"))["metadata"]["uid"]
    await e2e.run_workload(workload("doomed", 2, racks=["r01"]))
    await e2e.cd_until(
        "doomed", lambda o: cd_ready(o) and len(status_nodes(o)) == 2, "Ready with 2 nodes"
    )
    pods = await e2e.workload_pods("doomed", _all_running(2), "all Running")
    daemon = c.daemon_name(uid)

    def daemonset_deletes(since: int) -> list[AuditedWrite]:
        return [
            w
            for w in audit.writes(since, user=ours)
            if (w.verb, w.resource, w.name) == ("delete", "daemonsets", daemon) and w.code < 300
        ]

    mark = audit.mark()
    await e2e.kube.delete(COMPUTE_DOMAINS, "doomed", e2e.namespace)
    waiting = await e2e.cd_until(
        "doomed",
        lambda o: "IMEX daemons stay while 2 workload pods" in _ready_message(o),
        "says it waits for its 2 workload pods",
    )
    assert all(name in _ready_message(waiting) for name in pods), _ready_message(waiting)
    await e2e.events_for("doomed", lambda es: _reasons(es) >= {"WaitingForWorkloadPods"}, "wait")

    async def daemonset_deleted(within: float, what: str) -> dict[str, Any] | None:
        return await watch_object(
            e2e.kube,
            r.DAEMONSETS,
            daemon,
            lambda ds: ds is None or "deletionTimestamp" in ds["metadata"],
            namespace=e2e.driver_namespace,
            within=within,
            what=what,
        )

    # Over more than one look at the pods (every 5 s), the daemons' DaemonSet is not touched;
    # if it is, the audit log says who deleted it, and when.
    left_alone = True
    with contextlib.suppress(TimeoutError):
        await daemonset_deleted(12, "the IMEX DaemonSet left alone while the workload runs")
        left_alone = False
    assert left_alone, (
        f"the IMEX DaemonSet was deleted while the workload ran:\n"
        f"{_timeline(audit.writes(mark), e2e.namespace, daemon)}"
    )
    assert await e2e.nodes_labelled(uid, lambda n: len(n) == 2, "labels kept") != set()

    await e2e.kube.delete(STATEFULSETS, "doomed", e2e.namespace)
    await daemonset_deleted(90, "the IMEX DaemonSet deleted once the workload stopped")
    await e2e.cd_until("doomed", lambda o: o is None, "the CD object gone", within=90)
    for res, ns in (
        (r.DAEMONSETS, e2e.driver_namespace),
        (r.RESOURCE_CLAIM_TEMPLATES, e2e.driver_namespace),
    ):
        await watch_objects(
            e2e.kube,
            res,
            lambda objs: daemon not in objs,
            namespace=ns,
            what=f"{res.kind} {daemon} gone",
        )
    await watch_objects(
        e2e.kube,
        r.RESOURCE_CLAIM_TEMPLATES,
        lambda objs: "imex-channel-0" not in objs,
        namespace=e2e.namespace,
        what="workload RCT gone",
    )
    assert await e2e.nodes_labelled(uid, lambda n: not n, "labels gone") == set()
    assert await e2e.cliques_of(uid, lambda cs: not cs, "cliques gone") == {}
    await e2e.daemon_pods_gone(uid, within=90)

    # Read once everything is gone: an audit line is written after its answer is sent, so a
    # watch may see the deletion before the line is there.
    writes = audit.writes(mark)
    timeline = _timeline(writes, e2e.namespace, daemon)
    releases = [w for w in writes if _released_claims(w, e2e.namespace, pods)]
    deletes = daemonset_deletes(mark)
    assert deletes, f"no DELETE of the IMEX DaemonSet by {ours} in the audit log:\n{timeline}"
    assert {w.name for w in releases} == set(pods), f"not every workload pod deleted:\n{timeline}"
    assert min(w.received for w in deletes) >= max(w.completed for w in releases), (
        f"the IMEX DaemonSet was deleted before the last workload pod was gone:\n{timeline}"
    )


async def test_two_domains_sharing_a_clique_both_say_so(e2e: EndToEnd) -> None:
    await e2e.start_controller()
    await e2e.start_simulator()
    await e2e.create_cd("left", rct_name="channel-left")
    await e2e.create_cd("right", rct_name="channel-right")
    await e2e.run_workload(workload("left", 2, rct_name="channel-left", racks=["r03"]))
    await e2e.run_workload(workload("right", 2, rct_name="channel-right", racks=["r03"]))
    for name, other in (("left", "right"), ("right", "left")):
        cd = await e2e.cd_until(
            name,
            lambda o: condition(o, "ExclusiveClique").get("status") == "False" and cd_ready(o),
            "ExclusiveClique=False",
        )
        shared = condition(cd, "ExclusiveClique")
        assert shared["reason"] == "CliqueShared"
        assert other in shared["message"]
        assert condition(cd, "SingleClique")["status"] == "True"


async def test_domain_spanning_two_cliques_is_warned_about(e2e: EndToEnd) -> None:
    await e2e.start_controller()
    await e2e.start_simulator()
    await e2e.create_cd("wide")
    await e2e.run_workload(workload("wide", 4, racks=["r02", "r03"], spread_over_racks=True))
    cd = await e2e.cd_until(
        "wide",
        lambda o: cd_ready(o) and len(status_nodes(o)) == 4,
        "Ready with 4 nodes",
    )
    assert cd is not None
    assert len({n["cliqueID"] for n in status_nodes(cd).values()}) == 2
    single = condition(cd, "SingleClique")
    assert (single["status"], single["reason"]) == ("False", "MultipleCliques")
    await e2e.events_for(
        "wide",
        lambda es: any(
            e.get("type") == "Warning" and e.get("reason") == "MultipleCliques" for e in es
        ),
        "a MultipleCliques Warning event",
    )


async def test_legacy_protocol_reaches_ready(e2e: EndToEnd) -> None:
    await e2e.start_controller(FEATURE_GATES="ComputeDomainCliques=false")
    await e2e.start_simulator()
    uid = (await e2e.create_cd("legacy", num_nodes=2))["metadata"]["uid"]
    await e2e.run_workload(workload("legacy", 2, racks=["r02"]))
    cd = await e2e.cd_until(
        "legacy", lambda o: cd_ready(o) and len(status_nodes(o)) == 2, "Ready with 2 nodes"
    )
    assert cd is not None
    assert {n["status"] for n in status_nodes(cd).values()} == {c.STATUS_READY}
    # Legacy daemons write status.nodes directly: no clique objects.
    assert await e2e.cliques_of(uid, lambda cs: True, "listing") == {}
    await e2e.workload_pods("legacy", _all_running(2), "all Running")
    nodes = await e2e.kube.list(r.NODES, label_selector=f"{c.CD_LABEL}={uid}")
    assert {labels(n)[c.CD_LABEL] for n in nodes["items"]} == {uid}
