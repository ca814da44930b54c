"""`kubectl cdom describe`: the first broken link of a domain's chain, link by link."""

from __future__ import annotations

from typing import Any

import pytest

from computedomain.api import constants as c
from computedomain.domain.childkinds import ChildKind
from computedomain.kubectl.describe import (
    Chain,
    Finding,
    channel_domain_ids,
    container_problem,
    first_broken_link,
    first_unready_daemon,
    log_line,
    render,
)

UID = "uid-1"
NODE = "gb200-r00-n01"
CLIQUE = "A.0"


def cd(reason: str = "DaemonsNotReady", *, ready: str = "False", **extra: Any) -> dict[str, Any]:
    conditions = [{"type": "Ready", "status": ready, "reason": reason, "message": f"{reason}!"}]
    conditions += extra.pop("conditions", [])
    return {
        "metadata": {"name": "job", "namespace": "team", "uid": UID, **extra},
        "spec": {"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": "job-channel"}}},
        "status": {"conditions": conditions},
    }


def pod(name: str, *, node: str | None = NODE, ready: bool = True, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "team" if name.startswith("w") else "driver"},
        "spec": {"nodeName": node} if node else {},
        "status": {
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            **status,
        },
    }


def node() -> dict[str, Any]:
    labels = {c.CD_LABEL: UID, c.GPU_CLIQUE_NODE_LABEL: CLIQUE}
    return {"metadata": {"name": NODE, "labels": labels}}


def healthy(**changes: Any) -> Chain:
    chain = Chain(
        cd(),
        children={
            ChildKind.DAEMON_SET: [
                {"metadata": {"name": c.daemon_name(UID), "namespace": "driver"}}
            ]
        },
        workload_pods=[pod("worker-0")],
        daemon_pods=[pod("daemon-a")],
        nodes=[node()],
        cliques=[{"daemons": [{"nodeName": NODE, "status": c.STATUS_READY, "index": 0}]}],
    )
    for key, value in changes.items():
        setattr(chain, key, value)
    return chain


def link(chain: Chain) -> str:
    finding = first_broken_link(chain)
    assert finding is not None
    return finding.link


def test_a_ready_domain_has_no_broken_link() -> None:
    chain = healthy(cd=cd("Ready", ready="True"))
    assert first_broken_link(chain) is None
    assert render(chain, None).splitlines()[-1] == "No broken link: the domain is Ready."


@pytest.mark.parametrize(
    ("chain", "expected"),
    [
        (healthy(cd={**cd(), "status": {}}), "controller"),
        (healthy(cd=cd(deletionTimestamp="2026-12-04T00:00:00Z")), "ComputeDomain"),
        (
            healthy(
                cd=cd(conditions=[{"type": "ChildrenReady", "status": "False", "reason": "X"}])
            ),
            "children",
        ),
        (healthy(workload_pods=[]), "workload"),
        (
            healthy(workload_pods=[pod("worker-0", node=None, ready=False)]),
            "workload pod team/worker-0",
        ),
        (healthy(daemon_pods=[]), f"IMEX daemon on {NODE}"),
        (
            healthy(daemon_pods=[pod("daemon-a", ready=False)]),
            f"IMEX daemon driver/daemon-a on {NODE}",
        ),
        (
            healthy(cliques=[{"daemons": [{"nodeName": NODE, "status": "NotReady"}]}]),
            f"clique {CLIQUE}",
        ),
        (healthy(), "Ready"),
    ],
)
def test_the_first_broken_link_is_named_in_the_order_a_domain_comes_up(
    chain: Chain, expected: str
) -> None:
    assert link(chain) == expected


def test_a_daemon_is_described_in_its_containers_own_words() -> None:
    statuses = [
        {
            "name": c.DAEMON_CONTAINER,
            "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
            "lastState": {"terminated": {"reason": "Error", "exitCode": 1, "message": "no fabric"}},
        }
    ]
    daemon = pod("daemon-a", ready=False, containerStatuses=statuses)
    problem = "CrashLoopBackOff: back-off 40s; last exit Error, exit code 1, no fabric"
    assert container_problem(daemon) == problem
    finding = first_broken_link(healthy(daemon_pods=[daemon]))
    assert finding == Finding(
        f"IMEX daemon driver/daemon-a on {NODE}",
        f"not Ready: {problem}",
        f"kubectl -n driver logs daemon-a -c {c.DAEMON_CONTAINER} (--previous after a restart)",
    )


def test_a_daemon_whose_log_the_kubelet_serves_is_quoted_in_its_own_words() -> None:
    """NVIDIA's daemon writes no termination message: where the kubelet serves its log, the
    line that says most (the last error, else the last line) joins the kubelet's words."""
    statuses = [
        {
            "name": c.DAEMON_CONTAINER,
            "restartCount": 3,
            "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
            "lastState": {"terminated": {"reason": "Error", "exitCode": 1}},
        }
    ]
    daemon = pod("daemon-a", ready=False, containerStatuses=statuses)
    chain = healthy(daemon_pods=[daemon])
    assert first_unready_daemon(chain) == daemon
    chain.daemon_log = (
        "I1205 12:00:00 main.go:90] starting\n"
        "Error: CDI container edits did not apply -- is CDI enabled in your container runtime?\n"
        "I1205 12:00:01 main.go:95] exiting\n"
    )
    finding = first_broken_link(chain)
    assert finding is not None
    assert finding.problem.endswith(
        "; its log: Error: CDI container edits did not apply -- is CDI enabled in your "
        "container runtime?"
    )
    assert log_line("a\nb\n") == "b"  # no error word: the last line
    assert log_line("") == ""
    assert len(log_line("error " * 100)) == 200


def test_a_workload_pod_the_plugin_refuses_is_named_by_its_event() -> None:
    event = {
        "type": "Warning",
        "reason": "FailedPrepareDynamicResources",
        "note": "claim namespace differs from the ComputeDomain's",
        "regarding": {"kind": "Pod", "name": "worker-0"},
    }
    chain = healthy(workload_pods=[pod("worker-0", ready=False)], nodes=[], events=[event])
    finding = first_broken_link(chain)
    assert finding is not None
    assert finding.link == "workload pod team/worker-0"
    assert finding.problem == (
        "FailedPrepareDynamicResources: claim namespace differs from the ComputeDomain's"
    )


def channel_claim(namespace: str, domain: str = UID) -> dict[str, Any]:
    parameters = {"kind": c.CHANNEL_CONFIG_KIND, "domainID": domain}
    return {
        "metadata": {
            "name": "worker-0-channel-x7k2p",
            "namespace": namespace,
            "ownerReferences": [{"kind": "Pod", "name": "worker-0"}],
        },
        "spec": {
            "devices": {"config": [{"opaque": {"driver": c.DRIVER_NAME, "parameters": parameters}}]}
        },
    }


def test_a_claim_for_the_domain_from_another_namespace_is_named_before_the_workload() -> None:
    assert channel_domain_ids(channel_claim("other")) == {UID}
    assert channel_domain_ids({"spec": {}}) == set()
    daemon_claim = channel_claim("driver")
    daemon_config = daemon_claim["spec"]["devices"]["config"][0]["opaque"]["parameters"]
    daemon_config["kind"] = c.DAEMON_CONFIG_KIND
    assert channel_domain_ids(daemon_claim) == set()
    finding = first_broken_link(healthy(workload_pods=[], foreign_claims=[channel_claim("other")]))
    assert finding is not None
    assert finding.link == "workload claim other/worker-0-channel-x7k2p"
    assert finding.problem.startswith(
        "a claim in namespace other (pod worker-0) asks for this domain, whose namespace is team"
    )
    assert "resourceClaimTemplateName: job-channel" in finding.fix


@pytest.mark.parametrize(
    ("ctype", "reason"),
    [("SingleClique", "MultipleCliques"), ("ExclusiveClique", "CliqueShared")],
)
def test_a_ready_domain_split_over_cliques_or_sharing_one_is_a_broken_link(
    ctype: str, reason: str
) -> None:
    split = {"type": ctype, "status": "False", "reason": reason, "message": "Nodes span 2"}
    finding = first_broken_link(healthy(cd=cd("Ready", ready="True", conditions=[split])))
    assert finding is not None
    assert finding.link == "cliques"
    assert finding.problem == f"{reason}: Nodes span 2"
    assert "kubectl cdom cliques --fits N" in finding.fix


def nvidia_controller(env: list[dict[str, str]]) -> dict[str, Any]:
    controller = pod("dra-driver-nvidia-gpu-controller-5d8f-abcde", node="cpu-1")
    controller["metadata"]["labels"] = {"dra-driver-nvidia-gpu-component": "controller"}
    controller["status"]["phase"] = "Running"
    controller["spec"]["containers"] = [{"name": "compute-domain", "env": env}]
    return controller


def test_nvidias_controller_writing_beside_ours_is_the_first_link() -> None:
    chain = healthy(cd=cd("Ready", ready="True"), nvidia_controller_pods=[nvidia_controller([])])
    finding = first_broken_link(chain)
    assert finding is not None
    assert finding.link == "controller"
    assert finding.problem.startswith(
        "NVIDIA's controller runs (pod driver/dra-driver-nvidia-gpu-controller-5d8f-abcde)"
    )
    assert "scale deployment dra-driver-nvidia-gpu-controller --replicas=0" in finding.fix
    # One electing its leader on our Lease waits while ours leads; on another it writes.
    lease = [
        {"name": "LEADER_ELECTION_ENABLED", "value": "true"},
        {"name": "LEADER_ELECTION_LEASE_LOCK_NAMESPACE", "value": "driver"},
        {"name": "LEADER_ELECTION_LEASE_LOCK_NAME", "value": "ours"},
    ]
    electing = healthy(nvidia_controller_pods=[nvidia_controller(lease)])
    electing.own_lease = ("driver", "ours")
    assert first_broken_link(electing) == first_broken_link(healthy())
    electing.own_lease = ("driver", "another")
    assert link(electing) == "controller"


def test_the_children_are_listed_kind_by_kind_from_the_child_kinds_table() -> None:
    """Each kind found is listed with what its entry says of it (a DaemonSet's readiness);
    a kind every domain has, in every IMEX mode, is named missing when none was found."""
    daemon = {"name": c.daemon_name(UID), "namespace": "driver"}
    daemonset = {"metadata": daemon, "status": {"numberReady": 1, "desiredNumberScheduled": 2}}
    chain = healthy(
        children={
            ChildKind.DAEMON_CLAIM_TEMPLATE: [{"metadata": daemon}],
            ChildKind.DAEMON_SET: [daemonset],
        }
    )
    lines = render(chain, None).splitlines()
    start = lines.index("Children:")
    assert lines[start + 1 : start + 4] == [
        f"  ResourceClaimTemplate driver/{c.daemon_name(UID)}: present",
        f"  DaemonSet driver/{c.daemon_name(UID)}: 1/2 ready",
        "  ResourceClaimTemplate team/job-channel: missing",
    ]
