"""status.nodes projection (contract §9), global status and clique hygiene."""

from typing import Any

import pytest

from computedomain.api import constants as c
from computedomain.api.v1beta1 import ComputeDomainClique, ComputeDomainNode
from computedomain.domain.projection import (
    MESSAGE_LIMIT,
    DaemonPod,
    clique_from_dict,
    daemon_pod_from_dict,
    global_status,
    project_nodes,
    stale_clique_entries,
    status_equal,
    uses_legacy_protocol,
)

UID = "11111111-2222-3333-4444-555555555555"
OTHER = "99999999-2222-3333-4444-555555555555"
CLIQUE = "clusteruuid.7"


def pod(
    node: str | None = "n1",
    ip: str | None = "10.0.0.1",
    clique: str | None = CLIQUE,
    ready: bool = True,
    cd: str = UID,
    phase: str = "Running",
    deleting: bool = False,
    name: str | None = None,
) -> DaemonPod:
    return DaemonPod(
        name=name or f"computedomain-daemon-x-{node}",
        namespace="nvidia",
        uid=f"pod-{node}",
        cd_uid=cd,
        node_name=node,
        pod_ip=ip,
        clique_id=clique,
        ready=ready,
        phase=phase,
        deleting=deleting,
    )


def clique(
    *daemons: dict[str, Any], uid: str = UID, clique_id: str = CLIQUE
) -> ComputeDomainClique:
    return clique_from_dict(
        {
            "metadata": {
                "name": f"{uid}.{clique_id}",
                "namespace": "nvidia",
                "labels": {c.CD_LABEL: uid, c.CLIQUE_ID_LABEL: clique_id},
            },
            "daemons": list(daemons),
        }
    )


def daemon(node: str, ip: str, index: int, status: str = "Ready") -> dict[str, Any]:
    return {"nodeName": node, "ipAddress": ip, "cliqueID": CLIQUE, "index": index, "status": status}


def entry(
    name: str, ip: str, clique_id: str = CLIQUE, index: int = 0, status: str = "Ready"
) -> ComputeDomainNode:
    return ComputeDomainNode.model_validate(
        {"name": name, "ipAddress": ip, "cliqueID": clique_id, "index": index, "status": status}
    )


# --- gate on (§9.1) -------------------------------------------------------------------------


def test_union_of_clique_daemons_copied_field_by_field() -> None:
    cl = clique(daemon("n1", "10.0.0.1", 0), daemon("n2", "10.0.0.2", 1, "NotReady"))
    nodes = project_nodes([cl], [pod("n1"), pod("n2", "10.0.0.2")], legacy=False)
    assert [n.to_dict() for n in nodes] == [
        {"name": "n1", "ipAddress": "10.0.0.1", "cliqueID": CLIQUE, "index": 0, "status": "Ready"},
        {
            "name": "n2",
            "ipAddress": "10.0.0.2",
            "cliqueID": CLIQUE,
            "index": 1,
            "status": "NotReady",
        },
    ]


@pytest.mark.parametrize(
    ("daemon_pod", "expected"),
    [
        (pod("n9", "10.0.9.9", clique="", ready=True), [("n9", "10.0.9.9", "", -1, "Ready")]),
        (pod("n9", "10.0.9.9", clique="", ready=False), [("n9", "10.0.9.9", "", -1, "NotReady")]),
        # Non-fabric pod not yet scheduled, or without an IP: no entry.
        (pod(None, "10.0.9.9", clique=""), []),
        (pod("n9", None, clique=""), []),
        # Fabric pods (label set, or not yet set) never yield entries of their own.
        (pod("n9", "10.0.9.9", clique=CLIQUE), []),
        (pod("n9", "10.0.9.9", clique=None), []),
    ],
)
def test_non_fabric_pods_become_entries(
    daemon_pod: DaemonPod, expected: list[tuple[str, str, str, int, str]]
) -> None:
    nodes = project_nodes([], [daemon_pod], legacy=False)
    assert [(n.name, n.ip_address, n.clique_id, n.index, n.status) for n in nodes] == expected


def test_duplicate_node_names_are_collapsed_preferring_the_live_pod() -> None:
    old = clique(daemon("n1", "10.0.0.1", 3), clique_id="old.1", uid=UID)
    current = clique(daemon("n1", "10.0.0.50", 0))
    nodes = project_nodes([old, current], [pod("n1", "10.0.0.50")], legacy=False)
    assert [(n.name, n.ip_address) for n in nodes] == [("n1", "10.0.0.50")]


def test_non_fabric_pod_wins_over_a_stale_clique_entry_for_its_node() -> None:
    cl = clique(daemon("n1", "10.0.0.1", 0))
    nodes = project_nodes([cl], [pod("n1", "10.0.0.7", clique="")], legacy=False)
    assert [(n.name, n.clique_id, n.index) for n in nodes] == [("n1", "", -1)]


def test_projection_order_is_deterministic() -> None:
    cl_a = clique(daemon("b", "1", 1), daemon("a", "2", 0))
    pods = [pod("z", "9", clique=""), pod("a", "2"), pod("b", "1")]
    first = project_nodes([cl_a], pods, legacy=False)
    second = project_nodes([cl_a], list(reversed(pods)), legacy=False)
    assert [n.name for n in first] == [n.name for n in second] == ["z", "a", "b"]


# --- legacy (§9.2) --------------------------------------------------------------------------


def test_legacy_keeps_entries_backed_by_a_live_fabric_pod_and_rebuilds_non_fabric() -> None:
    current = [
        entry("n1", "10.0.0.1", index=0),  # live pod with that IP: kept as the daemon wrote it
        entry("n2", "10.0.0.2", index=1),  # pod gone: dropped
        entry("n3", "10.0.0.3", index=2),  # pod recreated with a new IP: dropped
        entry("n4", "10.0.0.4", clique_id="", index=-1),  # non-fabric: rebuilt from pods
    ]
    pods = [
        pod("n1", "10.0.0.1"),
        pod("n3", "10.0.0.33"),
        pod("n4", "10.0.0.44", clique="", ready=False),
    ]
    nodes = project_nodes([], pods, legacy=True, current=current)
    assert [(n.name, n.ip_address, n.index, n.status) for n in nodes] == [
        ("n4", "10.0.0.44", -1, "NotReady"),
        ("n1", "10.0.0.1", 0, "Ready"),
    ]


def test_legacy_ignores_cliques_and_terminal_pods() -> None:
    current = [entry("n1", "10.0.0.1")]
    cl = clique(daemon("n2", "10.0.0.2", 0))
    nodes = project_nodes(
        [cl], [pod("n1", "10.0.0.1", phase="Failed")], legacy=True, current=current
    )
    assert nodes == []


def test_legacy_entry_needs_the_ip_on_the_same_node() -> None:
    # A recycled IP on another node must not keep a stale entry alive (#1447).
    current = [entry("n1", "10.0.0.1")]
    assert project_nodes([], [pod("n2", "10.0.0.1")], legacy=True, current=current) == []


# --- global status (§9.3) -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("statuses", "num_nodes", "expected"),
    [
        ([], 0, "Ready"),  # upstream: Ready with zero nodes (#767)
        ([], 1, "NotReady"),
        (["Ready"], 1, "Ready"),
        (["Ready", "NotReady"], 0, "NotReady"),
        (["Ready", "Ready"], 3, "NotReady"),
        (["Ready", "Ready", "Ready"], 2, "Ready"),
    ],
)
def test_global_status(statuses: list[str], num_nodes: int, expected: str) -> None:
    nodes = [entry(f"n{i}", str(i), status=s) for i, s in enumerate(statuses)]
    assert global_status(nodes, num_nodes) == expected


def test_status_equal_ignores_list_order_and_absent_fields_only() -> None:
    def status(nodes: list[ComputeDomainNode], **extra: Any) -> dict[str, Any]:
        return {"status": "Ready", "nodes": [n.to_dict() for n in nodes], **extra}

    a = [entry("n1", "1"), entry("n2", "2", index=1)]
    assert status_equal(status(a), status(list(reversed(a))))
    assert not status_equal(status(a), status([entry("n1", "1"), entry("n2", "2", index=2)]))
    assert not status_equal(status(a), status(a[:1]))
    assert status_equal(status([]), {"status": "Ready", "nodes": None})
    ready, waiting = {"type": "Ready"}, {"type": "DaemonsReady"}
    assert status_equal(
        status(a, conditions=[ready, waiting]), status(a, conditions=[waiting, ready])
    )


# --- clique hygiene (§9.4) ------------------------------------------------------------------


def test_stale_entries_only_count_pods_of_the_same_cd_and_clique() -> None:
    cl = clique(
        daemon("n1", "1", 0),  # backed by this CD's pod in this clique
        daemon("n2", "2", 1),  # only another CD's daemon runs on n2 (upstream would keep it)
        daemon("n3", "3", 2),  # no pod at all
        daemon("n4", "4", 3),  # this CD's pod, but labelled with another clique
        daemon("n5", "5", 4),  # restarted pod that has not labelled itself yet: keep the index
        daemon("n6", "6", 5),  # pod finished
    )
    pods = [
        pod("n1", "1"),
        pod("n2", "2", cd=OTHER),
        pod("n4", "4", clique="other.3"),
        pod("n5", "55", clique=None),
        pod("n6", "6", phase="Succeeded"),
    ]
    assert stale_clique_entries(cl, pods) == ["n2", "n3", "n4", "n6"]


def test_stale_entries_use_the_clique_name_when_labels_are_missing() -> None:
    cl = ComputeDomainClique.model_validate(
        {"metadata": {"name": f"{UID}.{CLIQUE}"}, "daemons": [daemon("n1", "1", 0)]}
    )
    assert stale_clique_entries(cl, [pod("n1", "1")]) == []


# --- pod view ---------------------------------------------------------------------------------


def pod_dict(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "computedomain-daemon-x-abcde",
            "namespace": "nvidia",
            "uid": "p1",
            "labels": {c.CD_LABEL: UID, c.CLIQUE_ID_LABEL: CLIQUE},
        },
        "spec": {"nodeName": "n1"},
        "status": status,
    }


def test_daemon_pod_from_ready_pod() -> None:
    view = daemon_pod_from_dict(
        pod_dict(
            phase="Running",
            podIP="10.1.1.1",
            conditions=[{"type": "Ready", "status": "True"}],
            containerStatuses=[
                {"name": "compute-domain-daemon", "ready": True, "started": True, "restartCount": 0}
            ],
        )
    )
    assert (view.cd_uid, view.node_name, view.pod_ip, view.clique_id) == (
        UID,
        "n1",
        "10.1.1.1",
        CLIQUE,
    )
    assert view.ready
    assert view.not_ready_reason() is None


def test_missing_clique_label_is_none_and_empty_is_non_fabric() -> None:
    raw = pod_dict(phase="Pending")
    del raw["metadata"]["labels"][c.CLIQUE_ID_LABEL]
    assert daemon_pod_from_dict(raw).clique_id is None
    raw["metadata"]["labels"][c.CLIQUE_ID_LABEL] = ""
    assert daemon_pod_from_dict(raw).non_fabric


@pytest.mark.parametrize(
    ("status", "reason", "snippet"),
    [
        (
            {
                "phase": "Running",
                "containerStatuses": [
                    {
                        "name": "compute-domain-daemon",
                        "restartCount": 4,
                        "state": {
                            "waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}
                        },
                        "lastState": {"terminated": {"reason": "Error", "exitCode": 1}},
                    }
                ],
            },
            "CrashLoopBackOff",
            "CrashLoopBackOff (4 restarts); last exit Error (exit code 1)",
        ),
        (  # the daemon's own words (#289): the termination message, not kubelet's back-off
            {
                "phase": "Running",
                "containerStatuses": [
                    {
                        "name": "compute-domain-daemon",
                        "restartCount": 1,
                        "state": {
                            "waiting": {
                                "reason": "CrashLoopBackOff",
                                "message": "back-off 10s restarting failed container=x pod=y",
                            }
                        },
                        "lastState": {
                            "terminated": {
                                "reason": "Error",
                                "exitCode": 2,
                                "message": "IMEX daemon:\n  bind 0.0.0.0:50000: address in use",
                            }
                        },
                    }
                ],
            },
            "CrashLoopBackOff",
            "CrashLoopBackOff (1 restart); last exit Error (exit code 2): IMEX daemon: bind "
            "0.0.0.0:50000: address in use",
        ),
        (  # a waiting message that is news is kept
            {
                "phase": "Pending",
                "containerStatuses": [
                    {
                        "name": "compute-domain-daemon",
                        "state": {
                            "waiting": {
                                "reason": "ImagePullBackOff",
                                "message": 'Back-off pulling image "nvcr.io/x:v1"',
                            }
                        },
                    }
                ],
            },
            "ImagePullBackOff",
            'ImagePullBackOff: Back-off pulling image "nvcr.io/x:v1"',
        ),
        (  # restarted, now starting again: the last exit still says why
            {
                "phase": "Running",
                "containerStatuses": [
                    {
                        "name": "compute-domain-daemon",
                        "started": False,
                        "restartCount": 2,
                        "state": {"running": {}},
                        "lastState": {
                            "terminated": {"reason": "OOMKilled", "exitCode": 137, "message": ""}
                        },
                    }
                ],
            },
            "StartupProbeNotPassed",
            "StartupProbeNotPassed (2 restarts); last exit OOMKilled (exit code 137)",
        ),
        (
            {
                "phase": "Failed",
                "message": "ignored: the container says it",
                "containerStatuses": [
                    {
                        "name": "compute-domain-daemon",
                        "state": {
                            "terminated": {"reason": "Error", "exitCode": 1, "message": "no CD"}
                        },
                    }
                ],
            },
            "Error",
            "Error (exit code 1): no CD",
        ),
        (
            {"phase": "Failed", "reason": "Evicted", "message": "The node was low on memory."},
            "Failed",
            "Failed: The node was low on memory.",
        ),
        (
            {
                "phase": "Running",
                "containerStatuses": [
                    {"name": "compute-domain-daemon", "started": True, "ready": False}
                ],
            },
            "ReadinessProbeFailing",
            "ReadinessProbeFailing",
        ),
        (
            {
                "phase": "Running",
                "containerStatuses": [{"name": "compute-domain-daemon", "started": False}],
            },
            "StartupProbeNotPassed",
            "StartupProbeNotPassed",
        ),
        (
            {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": "0/3 nodes",
                    }
                ],
            },
            "Unschedulable",
            "Unschedulable: 0/3 nodes",
        ),
        (
            {
                "phase": "Pending",
                "containerStatuses": [
                    {
                        "name": "compute-domain-daemon",
                        "state": {"waiting": {"reason": "ContainerCreating"}},
                    }
                ],
            },
            "ContainerCreating",
            "ContainerCreating",
        ),
        ({"phase": "Pending"}, "Pending", "Pending"),
    ],
)
def test_not_ready_reasons(status: dict[str, Any], reason: str, snippet: str) -> None:
    view = daemon_pod_from_dict(pod_dict(**status))
    assert not view.ready
    assert view.not_ready_reason() == reason
    assert view.describe_problem() == snippet


def test_container_messages_are_bounded() -> None:
    long = "x" * 500
    raw = pod_dict(
        phase="Running",
        containerStatuses=[
            {
                "name": "compute-domain-daemon",
                "restartCount": 1,
                "state": {"waiting": {"reason": "RunContainerError", "message": long}},
                "lastState": {"terminated": {"reason": "Error", "exitCode": 1, "message": long}},
            }
        ],
    )
    text = daemon_pod_from_dict(raw).describe_problem() or ""
    assert text.count("x" * (MESSAGE_LIMIT - 1) + "…") == 2
    assert "x" * MESSAGE_LIMIT not in text


def test_terminating_pod_reason() -> None:
    raw = pod_dict(phase="Running")
    raw["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    view = daemon_pod_from_dict(raw)
    assert view.deleting
    assert view.not_ready_reason() == "Terminating"


# --- protocol detection -------------------------------------------------------------------


def ds_with_env(env: list[dict[str, Any]] | None) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "compute-domain-daemon"}
    if env is not None:
        container["env"] = env
    return {"spec": {"template": {"spec": {"containers": [container]}}}}


@pytest.mark.parametrize(
    ("gates", "legacy"),
    [
        ("ComputeDomainCliques=true,IMEXDaemonsWithDNSNames=true,", False),
        ("ComputeDomainCliques=false,IMEXDaemonsWithDNSNames=true,", True),
        ("ComputeDomainCliques=True,", False),
        # A DS from a v25.8 controller knows no cliques gate: its daemons write status.nodes.
        ("ContextualLogging=true,IMEXDaemonsWithDNSNames=true,", True),
        (None, True),
    ],
)
def test_uses_legacy_protocol(gates: str | None, legacy: bool) -> None:
    env = [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]
    if gates is not None:
        env.append({"name": "FEATURE_GATES", "value": gates})
    assert uses_legacy_protocol(ds_with_env(env)) is legacy
