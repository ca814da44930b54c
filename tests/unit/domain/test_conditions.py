"""Conditions tell the truth status.status cannot (#289, #767, #804, #892)."""

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from computedomain.api import constants as c
from computedomain.api.v1beta1 import ComputeDomainNode, Condition
from computedomain.domain.childkinds import ChildKind
from computedomain.domain.conditions import (
    ChildState,
    ChildStatus,
    DomainView,
    all_cliques,
    avoidable_clique_split,
    conditions_for,
    daemons_due,
    set_condition,
    status_counts,
    waits_for_workload,
)
from computedomain.domain.projection import DaemonPod
from computedomain.domain.workload import WorkloadPodProblem

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
T1 = T0 + timedelta(minutes=5)
CLIQUE = "cluster.1"
STUCK = (
    WorkloadPodProblem("job-0", "Unschedulable: 0/4 nodes are available"),
    WorkloadPodProblem("job-1", "Unschedulable: 0/4 nodes are available"),
)
OK_CHILDREN = {
    ChildKind.DAEMON_CLAIM_TEMPLATE: ChildState(ChildStatus.OK),
    ChildKind.DAEMON_SET: ChildState(ChildStatus.OK),
    ChildKind.WORKLOAD_CLAIM_TEMPLATE: ChildState(ChildStatus.OK),
}


def node(name: str, status: str = "Ready", clique: str = CLIQUE) -> ComputeDomainNode:
    return ComputeDomainNode.model_validate(
        {"name": name, "ipAddress": "10.0.0.1", "cliqueID": clique, "index": 0, "status": status}
    )


def pod(node_name: str | None, ready: bool = True, **extra: object) -> DaemonPod:
    fields: dict[str, object] = {
        "name": f"daemon-{node_name}",
        "namespace": "nvidia",
        "uid": "u",
        "cd_uid": "cd",
        "node_name": node_name,
        "pod_ip": "10.0.0.1",
        "clique_id": CLIQUE,
        "ready": ready,
        "phase": "Running",
        "deleting": False,
    }
    fields.update(extra)
    return DaemonPod(**fields)  # type: ignore[arg-type]


def by_type(conds: list[Condition]) -> dict[str, Condition]:
    return {cond.type: cond for cond in conds}


def view(**kw: object) -> DomainView:
    defaults: dict[str, object] = {"children": OK_CHILDREN}
    defaults.update(kw)
    return DomainView(**defaults)  # type: ignore[arg-type]


# --- set_condition ------------------------------------------------------------------------


def cond(status: str, reason: str = "R", at: datetime = T0) -> Condition:
    return Condition(type="Ready", status=status, last_transition_time=at, reason=reason)


def test_set_condition_adds_with_now() -> None:
    (added,) = set_condition([], cond("True", at=T1), T0)
    assert added.last_transition_time == T0


def test_set_condition_keeps_transition_time_when_status_unchanged() -> None:
    (updated,) = set_condition([cond("False", "A")], cond("False", "B", at=T1), T1)
    assert (updated.reason, updated.last_transition_time) == ("B", T0)


def test_set_condition_moves_transition_time_on_flip() -> None:
    other = Condition(type="Other", status="True", last_transition_time=T0, reason="X")
    result = set_condition([other, cond("False")], cond("True"), T1)
    assert result[0] == other
    assert (result[1].status, result[1].last_transition_time) == ("True", T1)


# --- Ready and its reasons ------------------------------------------------------------------

# One verdict per reason the condition rules can give, driver- and host-managed.
EVERY_VERDICT = [
    view(),
    view(workload_template="channel", workload_problems=STUCK),
    view(nodes=(node("n1"),), pods=(pod("n1"),)),
    view(nodes=(node("n1"),), pods=(pod("n1"),), num_nodes=2),
    view(nodes=(node("n1"),), pods=(pod("n1", ready=False),)),
    view(nodes=(node("n1", clique=""),), pods=(pod("n1"),)),
    view(nodes=(node("n1"), node("n2", clique="c.2")), pods=(pod("n1"), pod("n2"))),
    view(nodes=(node("n1"),), pods=(pod("n1"),), shared_cliques={CLIQUE: ("team/other",)}),
    view(children={**OK_CHILDREN, ChildKind.DAEMON_SET: ChildState(ChildStatus.FOREIGN, "x")}),
    view(children={**OK_CHILDREN, ChildKind.DAEMON_SET: ChildState(ChildStatus.CREATING)}),
    view(missing_service_account="nvidia/sa"),
    view(children={ChildKind.SPEC: ChildState(ChildStatus.INVALID, "no spec")}),
    view(children={}),
    view(deleting=True),
    DomainView(
        children={ChildKind.WORKLOAD_CLAIM_TEMPLATE: ChildState(ChildStatus.OK)}, host_managed=True
    ),
]


def test_no_reason_is_a_condition_type_or_a_status_word() -> None:
    """One vocabulary (issue 20): a reason never reuses a condition type's word, nor upstream's
    status.status values, so "Ready" in kubectl, an Event or an alert means one thing."""
    reasons = {
        (x.type, x.status, x.reason) for v in EVERY_VERDICT for x in conditions_for(v, 2, T0)
    }
    assert {status for _, status, _ in reasons} == {"True", "False", "Unknown"}
    reused = {r for r in reasons if r[2] in {*c.CONDITION_TYPES, "Ready", "NotReady"}}
    assert not reused


@pytest.mark.parametrize(
    ("domain", "status", "reason", "in_message"),
    [
        (view(), "False", "WaitingForWorkload", "workload pod"),
        (
            view(workload_template="channel", workload_problems=STUCK[:1]),
            "False",
            "WorkloadPodsNotStarting",
            "No IMEX daemon has joined: 1 workload pod using ResourceClaimTemplate channel has "
            "not started: pod job-0: Unschedulable: 0/4 nodes are available",
        ),
        (
            view(workload_template="channel", workload_problems=STUCK),
            "False",
            "WorkloadPodsNotStarting",
            "2 workload pods using ResourceClaimTemplate channel have not started: pod job-0: "
            "Unschedulable: 0/4 nodes are available; and 1 more",
        ),
        (
            # Once a daemon exists the workload pods are no longer why: the daemons say.
            view(
                nodes=(node("n1"),),
                pods=(pod("n1"),),
                workload_template="channel",
                workload_problems=STUCK,
            ),
            "True",
            "AllNodesJoined",
            "1 daemon ready",
        ),
        (
            view(nodes=(node("n1"),), pods=(pod("n1"),)),
            "True",
            "AllNodesJoined",
            "1 daemon ready in 1 clique",
        ),
        (
            view(nodes=(node("n1"),), pods=(pod("n1"),), num_nodes=2),
            "False",
            "TooFewNodes",
            "1 of 2 expected nodes",
        ),
        (
            view(
                nodes=(node("n1"), node("n2", "NotReady")),
                pods=(
                    pod("n1"),
                    pod(
                        "n2",
                        ready=False,
                        waiting_reason="CrashLoopBackOff",
                        restart_count=3,
                        terminated_reason="Error",
                    ),
                ),
            ),
            "False",
            "DaemonsNotReady",
            "n2: CrashLoopBackOff (3 restarts); last exit Error",
        ),
        (
            # A daemon pod exists but has not joined: not Ready, and the pod says why.
            view(pods=(pod("n1", ready=False, started=False),)),
            "False",
            "DaemonsNotReady",
            "n1: not joined yet (StartupProbeNotPassed)",
        ),
        (
            view(pods=(pod(None, ready=False, unschedulable=True, message="0/4 nodes"),)),
            "False",
            "DaemonsNotReady",
            "Unschedulable: 0/4 nodes",
        ),
        (
            view(
                nodes=(node("n1"),),
                pods=(pod("n1"),),
                children={**OK_CHILDREN, ChildKind.DAEMON_SET: ChildState(ChildStatus.CREATING)},
            ),
            "False",
            "ChildrenNotReady",
            "daemon DaemonSet creating",
        ),
        (
            view(
                children={
                    **OK_CHILDREN,
                    ChildKind.WORKLOAD_CLAIM_TEMPLATE: ChildState(
                        ChildStatus.FOREIGN, "RCT team/x is not ours"
                    ),
                }
            ),
            "False",
            "ForeignObject",
            "RCT team/x is not ours",
        ),
        (
            view(nodes=(node("n1"),), pods=(pod("n1", deleting=True),), deleting=True),
            "False",
            "Deleting",
            "waiting for 1 daemon pod to terminate: daemon-n1",
        ),
    ],
)
def test_ready_condition(domain: DomainView, status: str, reason: str, in_message: str) -> None:
    ready = by_type(conditions_for(domain, 7, T0))[c.CONDITION_READY]
    assert (ready.status, ready.reason) == (status, reason)
    assert in_message in ready.message
    assert ready.observed_generation == 7


def test_only_a_cd_waiting_for_its_workload_looks_at_workload_pods() -> None:
    assert waits_for_workload(view())
    assert waits_for_workload(view(workload_problems=STUCK))
    assert not waits_for_workload(view(pods=(pod(None, ready=False),)))
    assert not waits_for_workload(view(nodes=(node("n1"),)))
    assert not waits_for_workload(view(deleting=True))
    assert not waits_for_workload(view(children={}))
    assert not waits_for_workload(view(missing_service_account="nvidia/sa"))
    foreign = {**OK_CHILDREN, ChildKind.DAEMON_SET: ChildState(ChildStatus.FOREIGN, "x")}
    assert not waits_for_workload(view(children=foreign))
    host = DomainView(
        children={ChildKind.WORKLOAD_CLAIM_TEMPLATE: ChildState(ChildStatus.OK)}, host_managed=True
    )
    assert not waits_for_workload(host)


def test_ready_with_zero_nodes_is_false_even_though_status_is_ready() -> None:
    conds = by_type(conditions_for(view(num_nodes=0), 1, T0))
    assert conds["Ready"].status == "False"
    assert conds["DaemonsReady"].status == "Unknown"


def test_daemons_not_ready_message_is_bounded() -> None:
    nodes = tuple(node(f"n{i:02}", "NotReady") for i in range(12))
    pods = tuple(pod(f"n{i:02}", ready=False, started=True) for i in range(12))
    daemons = by_type(conditions_for(view(nodes=nodes, pods=pods), 1, T0))["DaemonsReady"]
    assert daemons.message.startswith("0 of 12 daemons ready; n00: ReadinessProbeFailing")
    assert "and 7 more" in daemons.message


def test_all_condition_types_written_in_order_and_foreign_types_kept() -> None:
    foreign = Condition(type="Audited", status="True", last_transition_time=T0, reason="X")
    conds = conditions_for(view(), 1, T0, [foreign])
    assert [x.type for x in conds] == [*c.CONDITION_TYPES, "Audited"]


def test_transition_time_survives_recompute_and_moves_on_flip() -> None:
    first = conditions_for(view(), 1, T0)
    same = by_type(conditions_for(view(), 2, T1, first))["Ready"]
    assert (same.last_transition_time, same.observed_generation) == (T0, 2)
    ready = view(nodes=(node("n1"),), pods=(pod("n1"),))
    flipped = by_type(conditions_for(ready, 2, T1, first))["Ready"]
    assert (flipped.status, flipped.last_transition_time) == ("True", T1)


# --- children, cliques ---------------------------------------------------------------------


def test_children_ready() -> None:
    assert by_type(conditions_for(view(), 1, T0))["ChildrenReady"].status == "True"
    missing = view(
        children={**OK_CHILDREN, ChildKind.DAEMON_CLAIM_TEMPLATE: ChildState(ChildStatus.MISSING)}
    )
    got = by_type(conditions_for(missing, 1, T0))["ChildrenReady"]
    assert (got.status, got.reason) == ("False", "ChildrenNotReady")
    assert "daemon ResourceClaimTemplate missing" in got.message


SA = f"nvidia/{c.DAEMON_SERVICE_ACCOUNT}"


def test_missing_daemon_service_account_blocks_children_and_ready() -> None:
    # Even a domain whose daemons all joined: without the SA no new daemon pod can start.
    domain = view(nodes=(node("n1"),), pods=(pod("n1"),), missing_service_account=SA)
    conds = by_type(conditions_for(domain, 1, T0))
    for kind in ("ChildrenReady", "Ready"):
        got = conds[kind]
        assert (got.status, got.reason) == ("False", "DaemonServiceAccountMissing"), kind
        assert f"ServiceAccount {SA} does not exist" in got.message
        assert "cannot create daemon pods" in got.message
    assert conds["DaemonsReady"].status == "True"


def test_missing_daemon_service_account_verdict_is_stable_and_recovers() -> None:
    missing = view(missing_service_account=SA)
    first = conditions_for(missing, 1, T0)
    again = conditions_for(missing, 1, T1, first)
    assert [x.to_dict() for x in again] == [x.to_dict() for x in first]  # nothing to write
    back = by_type(conditions_for(view(), 1, T1, first))
    assert (back["ChildrenReady"].status, back["ChildrenReady"].last_transition_time) == (
        "True",
        T1,
    )
    assert back["Ready"].reason == "WaitingForWorkload"


def test_missing_daemon_service_account_ranks_after_foreign_and_deletion() -> None:
    foreign = {**OK_CHILDREN, ChildKind.DAEMON_SET: ChildState(ChildStatus.FOREIGN, "DS not ours")}
    got = by_type(conditions_for(view(children=foreign, missing_service_account=SA), 1, T0))
    assert got["ChildrenReady"].reason == "ForeignObject"
    deleting = view(deleting=True, missing_service_account=SA)
    assert by_type(conditions_for(deleting, 1, T0))["Ready"].reason == "Deleting"
    # Before pending children: a DaemonSet being created cannot help without the SA.
    creating = {**OK_CHILDREN, ChildKind.DAEMON_SET: ChildState(ChildStatus.CREATING)}
    got = by_type(conditions_for(view(children=creating, missing_service_account=SA), 1, T0))
    assert got["ChildrenReady"].reason == "DaemonServiceAccountMissing"


@pytest.mark.parametrize(
    ("nodes", "cliques", "status", "reason"),
    [
        ((), frozenset(), "Unknown", "NoNodes"),
        ((node("n1", clique=""),), frozenset(), "Unknown", "NoCliqueLabels"),
        ((node("n1"), node("n2")), frozenset({CLIQUE}), "True", "OneClique"),
        ((node("n1"), node("n2", clique="cluster.2")), frozenset(), "False", "MultipleCliques"),
        # Labelled nodes without a joined daemon yet still count (their clique labels).
        ((node("n1"),), frozenset({CLIQUE, "cluster.9"}), "False", "MultipleCliques"),
        # No label (NVIDIA's kubelet plugin removes it while it restarts): the daemons' reports
        # are the truth, as with the labels.
        ((node("n1"), node("n2")), frozenset(), "True", "OneClique"),
    ],
)
def test_single_clique(
    nodes: tuple[ComputeDomainNode, ...], cliques: frozenset[str], status: str, reason: str
) -> None:
    got = by_type(conditions_for(view(nodes=nodes, cliques=cliques), 1, T0))["SingleClique"]
    assert (got.status, got.reason) == (status, reason)
    if reason == "MultipleCliques":
        assert c.GPU_CLIQUE_NODE_LABEL in got.message


def test_exclusive_clique() -> None:
    alone = view(nodes=(node("n1"),), cliques=frozenset({CLIQUE}))
    assert by_type(conditions_for(alone, 1, T0))["ExclusiveClique"].status == "True"
    shared = view(
        nodes=(node("n1"),),
        cliques=frozenset({CLIQUE}),
        shared_cliques={CLIQUE: frozenset({"team-b/train"})},
    )
    got = by_type(conditions_for(shared, 1, T0))["ExclusiveClique"]
    assert (got.status, got.reason) == ("False", "CliqueShared")
    assert "team-b/train" in got.message
    assert CLIQUE in got.message
    assert by_type(conditions_for(view(), 1, T0))["ExclusiveClique"].status == "Unknown"


def test_conditions_fit_the_crd_patterns() -> None:
    import re

    reason_pattern = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
    domains = [
        view(),
        view(deleting=True),
        view(nodes=(node("n1", "NotReady"),), pods=(pod("n1", ready=False),)),
    ]
    for domain in domains:
        for got in conditions_for(domain, 1, T0):
            assert reason_pattern.match(got.reason), got.reason
            assert len(got.message) <= 32768


def test_status_counts() -> None:
    nodes = [node("a"), node("b", "NotReady", clique="cluster.2"), node("c", clique="")]
    assert status_counts(nodes, {CLIQUE}) == (3, 2, 2)
    assert status_counts([], ()) == (0, 0, 0)


def test_a_missing_label_changes_no_clique_finding_the_daemons_report() -> None:
    """NVIDIA's kubelet plugin (v0.5) removes the clique label while it restarts: with the
    label gone from every node, the cliques the joined daemons report are the same answer
    (cliqueCount, the clique gauge, SingleClique, ExclusiveClique, the split)."""
    nodes = (node("n1"), node("n2"))
    labelled = view(nodes=nodes, pods=(pod("n1"), pod("n2")), cliques=frozenset({CLIQUE}))
    gap = view(nodes=nodes, pods=(pod("n1"), pod("n2")), cliques=frozenset())
    assert all_cliques(gap) == all_cliques(labelled) == {CLIQUE}
    assert status_counts(nodes, gap.cliques) == status_counts(nodes, labelled.cliques)
    assert conditions_for(gap, 1, T0) == conditions_for(labelled, 1, T0)
    assert not avoidable_clique_split(gap)
    shared = {CLIQUE: ("team-b/train",)}
    assert conditions_for(replace(gap, shared_cliques=shared), 1, T0) == conditions_for(
        replace(labelled, shared_cliques=shared), 1, T0
    )


# --- issue 12.1: late, not starting; advice that fits the job ------------------------------------

GRACE = 120.0


def starting(node_name: str | None, since: datetime, **extra: object) -> DaemonPod:
    return pod(node_name, ready=False, started=False, ready_changed_at=since, **extra)


@pytest.mark.parametrize(
    ("elapsed", "reason", "due"),
    [(0, "DaemonsStarting", GRACE), (119, "DaemonsStarting", 1.0), (120, "DaemonsNotReady", None)],
)
def test_a_daemon_is_late_only_after_the_grace_period(
    elapsed: float, reason: str, due: float | None
) -> None:
    domain = view(nodes=(node("n1", "NotReady"),), pods=(starting("n1", T0),))
    now = T0 + timedelta(seconds=elapsed)
    conds = by_type(conditions_for(domain, 1, now, daemon_grace=GRACE))
    assert (conds["DaemonsReady"].status, conds["DaemonsReady"].reason) == ("False", reason)
    assert conds["Ready"].reason == reason
    assert daemons_due(domain, now, GRACE, conds.values()) == due


def test_one_late_daemon_among_starting_ones_makes_the_domain_late() -> None:
    pods = (starting("n1", T0), starting("n2", T1))
    domain = view(pods=pods)
    now = T0 + timedelta(seconds=GRACE)
    conds = conditions_for(domain, 1, now, daemon_grace=GRACE)
    assert by_type(conds)["DaemonsReady"].reason == "DaemonsNotReady"
    # The message names every daemon that is not ready, and where the late one logs.
    message = by_type(conds)["DaemonsReady"].message
    assert "n1: not joined yet" in message
    assert "n2: not joined yet" in message
    assert "logs: kubectl -n nvidia logs daemon-n1 -c compute-domain-daemon" in message


def test_a_lost_node_is_wrong_at_once() -> None:
    domain = view(nodes=(node("n1", "NotReady"),), lost_nodes={"n1": "Node deleted"})
    conds = by_type(conditions_for(domain, 1, T0, daemon_grace=GRACE))
    assert conds["DaemonsReady"].reason == "DaemonsNotReady"
    assert "n1: Node deleted" in conds["DaemonsReady"].message


def test_an_entry_without_pod_uses_the_conditions_own_clock() -> None:
    domain = view(nodes=(node("n1", "NotReady"),))
    first = conditions_for(domain, 1, T0, daemon_grace=GRACE)
    assert by_type(first)["DaemonsReady"].reason == "DaemonsStarting"
    later = T0 + timedelta(seconds=GRACE)
    assert daemons_due(domain, T0, GRACE, first) == GRACE
    assert by_type(conditions_for(domain, 1, later, first, GRACE))["DaemonsReady"].reason == (
        "DaemonsNotReady"
    )


def test_a_restarted_daemon_points_at_its_previous_log() -> None:
    crashing = pod(
        "n1",
        ready=False,
        waiting_reason="CrashLoopBackOff",
        restart_count=2,
        terminated_reason="Error",
        exit_code=1,
        terminated_message="IMEX: bind: address already in use",
        ready_changed_at=T0,
    )
    conds = by_type(conditions_for(view(pods=(crashing,)), 1, T1, daemon_grace=GRACE))
    message = conds["DaemonsReady"].message
    assert "CrashLoopBackOff (2 restarts); last exit Error (exit code 1): IMEX: bind" in message
    assert message.endswith("-c compute-domain-daemon --previous")


@pytest.mark.parametrize(
    ("num_nodes", "seen", "clique_size", "fragment"),
    [
        (2, 2, 18, "this job's 2 nodes fit in one (up to 18): recreate the workload with a req"),
        (18, 2, 18, "this job's 18 nodes fit in one (up to 18): recreate the workload with a"),
        (24, 2, 18, "this job's 24 nodes cannot fit one clique (at most 18 nodes each)"),
        (12, 2, 8, "this job's 12 nodes cannot fit one clique (at most 8 nodes each)"),
        (0, 20, 18, "this job's 20 nodes cannot fit one clique (at most 18 nodes each)"),
        (0, 2, 18, "spec.numNodes does not say how large this job is: if it needs at most 18"),
    ],
)
def test_multiple_cliques_advice_fits_the_job(
    num_nodes: int, seen: int, clique_size: int, fragment: str
) -> None:
    nodes = (node("n1"), node("n2", clique="cluster.2"))
    members = frozenset(f"n{i}" for i in range(1, seen + 1))
    domain = view(nodes=nodes, members=members, num_nodes=num_nodes, clique_size=clique_size)
    single = by_type(conditions_for(domain, 1, T0))["SingleClique"]
    assert single.reason == "MultipleCliques"
    assert fragment in single.message
    pins = "required pod affinity on topologyKey nvidia.com/gpu.clique" in single.message
    network = "communicate over the network" in single.message
    fits = max(num_nodes, seen) <= clique_size
    # Pinning only when the job can fit one clique; the network when it may not.
    assert (pins, network) == (fits, not fits or num_nodes == 0)
    # The split worth a page (computedomain_clique_split) is the one pinning would mend.
    assert avoidable_clique_split(domain) == fits


def test_one_clique_or_none_is_no_split() -> None:
    assert not avoidable_clique_split(view(nodes=(node("n1"), node("n2"))))
    assert not avoidable_clique_split(view(nodes=(node("n1", clique=""),)))
    assert not avoidable_clique_split(view())
    assert avoidable_clique_split(view(nodes=(node("n1"),), cliques=frozenset({"cluster.9"})))


# --- host-managed IMEX (contract §18) -------------------------------------------------------

HOST_CHILDREN = {ChildKind.WORKLOAD_CLAIM_TEMPLATE: ChildState(ChildStatus.OK)}


def host_view(**kw: object) -> DomainView:
    defaults: dict[str, object] = {"children": HOST_CHILDREN, "host_managed": True}
    defaults.update(kw)
    return DomainView(**defaults)  # type: ignore[arg-type]


def test_host_managed_ready_says_what_it_means_and_nothing_about_daemons() -> None:
    conds = conditions_for(host_view(), 1, T0)
    assert [x.type for x in conds] == ["Ready", "ChildrenReady"]
    ready = by_type(conds)["Ready"]
    assert (ready.status, ready.reason) == ("True", "HostManagedIMEX")
    assert "workload ResourceClaimTemplate exists" in ready.message
    assert "host's IMEX socket" in ready.message
    assert "does not see its health" in ready.message
    children = by_type(conds)["ChildrenReady"]
    assert (children.status, children.reason) == ("True", "ChildrenExist")
    assert daemons_due(host_view(pods=(pod("n1", ready=False),)), T0, 0.0) is None


def test_children_ready_names_each_child_kind_of_the_mode_from_the_table() -> None:
    """The words come from the child kinds' display names: a new kind is named with no edit
    here; host-managed IMEX names the kinds it goes without."""
    driver = by_type(conditions_for(view(), 1, T0))["ChildrenReady"]
    assert driver.message == (
        "Daemon ResourceClaimTemplate, daemon DaemonSet and workload ResourceClaimTemplate exist"
    )
    host = by_type(conditions_for(host_view(), 1, T0))["ChildrenReady"]
    assert host.message == (
        "Workload ResourceClaimTemplate exists (host-managed IMEX: no daemon "
        "ResourceClaimTemplate or daemon DaemonSet)"
    )


def test_host_managed_drops_our_daemon_and_clique_conditions_keeps_others() -> None:
    driver = conditions_for(view(nodes=(node("n1"),), pods=(pod("n1"),)), 1, T0)
    foreign = Condition(type="Custom", status="True", last_transition_time=T0, reason="X")
    conds = conditions_for(host_view(), 2, T1, [*driver, foreign])
    assert [x.type for x in conds] == ["Ready", "ChildrenReady", "Custom"]
    # Ready was True before and is True now: its transition time stays.
    assert by_type(conds)["Ready"].last_transition_time == T0


def test_host_managed_not_ready_until_the_workload_template_exists() -> None:
    foreign = ChildState(ChildStatus.FOREIGN, "ResourceClaimTemplate team/ch exists")
    cases = [
        (host_view(children={}), "False", "ChildrenNotReady"),
        (
            host_view(children={ChildKind.WORKLOAD_CLAIM_TEMPLATE: foreign}),
            "False",
            "ForeignObject",
        ),
        (
            host_view(children={"spec": ChildState(ChildStatus.INVALID, "no")}),
            "False",
            "InvalidSpec",
        ),
        (host_view(deleting=True), "False", "Deleting"),
    ]
    for domain, status, reason in cases:
        ready = by_type(conditions_for(domain, 1, T0))["Ready"]
        assert (ready.status, ready.reason) == (status, reason), domain


def test_host_managed_reports_driver_managed_leftovers_without_deleting_them() -> None:
    left = ("DaemonSet nvidia/computedomain-daemon-u", "ResourceClaimTemplate nvidia/x")
    conds = by_type(conditions_for(host_view(leftovers=left), 1, T0))
    for kind in ("Ready", "ChildrenReady"):
        assert (conds[kind].status, conds[kind].reason) == ("False", "DriverManagedLeftovers")
        assert "DaemonSet nvidia/computedomain-daemon-u" in conds[kind].message
        assert "left alone, not deleted" in conds[kind].message
    # While the CD is deleted they go with it: that is progress, not a leftover.
    deleting = by_type(conditions_for(host_view(leftovers=left, deleting=True), 1, T0))
    assert deleting["Ready"].reason == "Deleting"
