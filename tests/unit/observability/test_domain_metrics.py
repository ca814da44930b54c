"""DomainMetrics: scrape a private registry and check series, values and removal."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from computedomain.observability.metrics import DomainMetrics

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(registry: CollectorRegistry) -> Samples:
    text = generate_latest(registry).decode()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def series(samples: Samples, metric: str, /, **labels: str) -> float | None:
    return samples.get((metric, frozenset(labels.items())))


def names(samples: Samples) -> set[str]:
    return {name for name, _ in samples}


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def metrics(registry: CollectorRegistry) -> DomainMetrics:
    return DomainMetrics(registry)


def observe_ready_domain(metrics: DomainMetrics, namespace: str = "team", name: str = "cd") -> None:
    metrics.observe_domain(
        namespace,
        name,
        conditions={"Ready": "True", "SpansMultipleCliques": "False"},
        nodes_by_status={"Ready": 3},
        cliques=1,
        global_status="Ready",
    )


def test_conditions_are_exported_kube_state_metrics_style(
    registry: CollectorRegistry, metrics: DomainMetrics
) -> None:
    observe_ready_domain(metrics)
    s = scrape(registry)
    cond = "computedomain_status_condition"
    labels = {"namespace": "team", "name": "cd", "condition": "Ready"}
    assert series(s, cond, **labels, status="true") == 1
    assert series(s, cond, **labels, status="false") == 0
    assert series(s, cond, **labels, status="unknown") == 0
    multi = {**labels, "condition": "SpansMultipleCliques"}
    assert series(s, cond, **multi, status="false") == 1
    assert series(s, cond, **multi, status="true") == 0


def test_unrecognised_condition_status_counts_as_unknown(
    registry: CollectorRegistry, metrics: DomainMetrics
) -> None:
    metrics.observe_domain(
        "team", "cd", conditions={"Ready": "Maybe"}, nodes_by_status={}, cliques=0,
        global_status="NotReady",
    )  # fmt: skip
    s = scrape(registry)
    labels = {"namespace": "team", "name": "cd", "condition": "Ready"}
    assert series(s, "computedomain_status_condition", **labels, status="unknown") == 1
    assert series(s, "computedomain_status_condition", **labels, status="true") == 0


def test_nodes_by_status_always_has_ready_and_not_ready(
    registry: CollectorRegistry, metrics: DomainMetrics
) -> None:
    observe_ready_domain(metrics)
    s = scrape(registry)
    assert series(s, "computedomain_nodes", namespace="team", name="cd", status="Ready") == 3
    assert series(s, "computedomain_nodes", namespace="team", name="cd", status="NotReady") == 0
    assert series(s, "computedomain_cliques", namespace="team", name="cd") == 1


def test_clique_split_is_one_series_per_domain_at_0_or_1(
    registry: CollectorRegistry, metrics: DomainMetrics
) -> None:
    observe_ready_domain(metrics, name="whole")
    metrics.observe_domain(
        "team", "split", conditions={"Ready": "True"}, nodes_by_status={"Ready": 2},
        cliques=2, global_status="Ready", clique_split=True,
    )  # fmt: skip
    s = scrape(registry)
    assert series(s, "computedomain_clique_split", namespace="team", name="whole") == 0
    assert series(s, "computedomain_clique_split", namespace="team", name="split") == 1
    metrics.forget_domain("team", "split")
    gone = series(scrape(registry), "computedomain_clique_split", namespace="team", name="split")
    assert gone is None


def test_a_new_observation_replaces_the_old_one(
    registry: CollectorRegistry, metrics: DomainMetrics
) -> None:
    observe_ready_domain(metrics)
    metrics.observe_domain(
        "team", "cd", conditions={"Ready": "False"}, nodes_by_status={"NotReady": 2},
        cliques=2, global_status="NotReady",
    )  # fmt: skip
    s = scrape(registry)
    cond = "computedomain_status_condition"
    assert series(s, cond, namespace="team", name="cd", condition="Ready", status="false") == 1
    gone = {"namespace": "team", "name": "cd", "condition": "SpansMultipleCliques"}
    assert series(s, cond, **gone, status="false") is None
    assert series(s, "computedomain_nodes", namespace="team", name="cd", status="Ready") == 0
    assert series(s, "computedomain_nodes", namespace="team", name="cd", status="NotReady") == 2
    assert series(s, "computedomain_cliques", namespace="team", name="cd") == 2


def test_forget_domain_removes_every_series_of_that_domain(
    registry: CollectorRegistry, metrics: DomainMetrics
) -> None:
    observe_ready_domain(metrics, name="gone")
    observe_ready_domain(metrics, name="kept")
    metrics.forget_domain("team", "gone")
    metrics.forget_domain("team", "never-seen")
    s = scrape(registry)
    assert not [key for key in s if ("name", "gone") in key[1]]
    assert series(s, "computedomain_cliques", namespace="team", name="kept") == 1
    assert metrics.known_domains() == [("team", "kept")]


def test_nvidia_info_gauge_counts_domains_per_global_status(
    registry: CollectorRegistry, metrics: DomainMetrics
) -> None:
    s = scrape(registry)
    assert series(s, "nvidia_dra_compute_domain_info", status="Ready") == 0
    assert series(s, "nvidia_dra_compute_domain_info", status="NotReady") == 0
    observe_ready_domain(metrics, name="a")
    observe_ready_domain(metrics, name="b")
    metrics.observe_domain(
        "other", "c", conditions={}, nodes_by_status={}, cliques=0, global_status="NotReady"
    )
    s = scrape(registry)
    assert series(s, "nvidia_dra_compute_domain_info", status="Ready") == 2
    assert series(s, "nvidia_dra_compute_domain_info", status="NotReady") == 1
    metrics.forget_domain("team", "a")
    s = scrape(registry)
    assert series(s, "nvidia_dra_compute_domain_info", status="Ready") == 1


def test_histograms_use_base_units_and_fixed_buckets(
    registry: CollectorRegistry, metrics: DomainMetrics
) -> None:
    metrics.observe_time_to_ready(42.0)
    metrics.observe_daemon_ready_latency(3.0)
    metrics.observe_daemon_ready_latency(-1.0)  # clock skew must not produce a negative sum
    s = scrape(registry)
    assert series(s, "computedomain_time_to_ready_seconds_count") == 1
    assert series(s, "computedomain_time_to_ready_seconds_sum") == 42.0
    assert series(s, "computedomain_time_to_ready_seconds_bucket", le="30.0") == 0
    assert series(s, "computedomain_time_to_ready_seconds_bucket", le="45.0") == 1
    assert series(s, "computedomain_daemon_ready_latency_seconds_count") == 2
    assert series(s, "computedomain_daemon_ready_latency_seconds_sum") == 3.0
    assert series(s, "computedomain_daemon_ready_latency_seconds_bucket", le="0.5") == 1


def test_clique_inventory_is_replaced_whole(
    registry: CollectorRegistry, metrics: DomainMetrics
) -> None:
    rack = {"total": 18, "ready": 17, "held": 4, "free": 13}
    metrics.set_clique_inventory({"uuid.1": rack, "uuid.2": rack | {"held": 0, "free": 17}})
    s = scrape(registry)
    for state, count in rack.items():
        assert series(s, "computedomain_clique_nodes", clique="uuid.1", state=state) == count
    assert series(s, "computedomain_clique_nodes", clique="uuid.2", state="held") == 0
    assert series(s, "computedomain_clique_nodes", clique="uuid.2", state="free") == 17
    metrics.set_clique_inventory({"uuid.2": {"total": 17, "ready": 17, "held": 0, "free": 17}})
    s = scrape(registry)
    assert series(s, "computedomain_clique_nodes", clique="uuid.1", state="total") is None
    assert series(s, "computedomain_clique_nodes", clique="uuid.2", state="total") == 17


def test_counters_have_total_suffix_and_no_created_series(
    registry: CollectorRegistry, metrics: DomainMetrics
) -> None:
    metrics.inc_orphan_cleanup("DaemonSet")
    metrics.inc_orphan_cleanup("DaemonSet")
    metrics.inc_foreign_refused("ResourceClaimTemplate")
    metrics.observe_time_to_ready(1.0)
    s = scrape(registry)
    assert series(s, "computedomain_orphan_cleanups_total", kind="DaemonSet") == 2
    assert (
        series(s, "computedomain_foreign_objects_refused_total", kind="ResourceClaimTemplate") == 1
    )
    assert not [name for name in names(s) if name.endswith("_created")]


def test_every_domain_metric_has_the_prefix_or_is_nvidias(
    registry: CollectorRegistry, metrics: DomainMetrics
) -> None:
    observe_ready_domain(metrics)
    metrics.set_clique_inventory({"u.1": {"total": 1, "ready": 1, "held": 0, "free": 1}})
    for name in names(scrape(registry)):
        if name.startswith("process_") or name == "python_info":
            continue  # the process-level collectors, checked below
        assert name.startswith(("computedomain_", "nvidia_dra_compute_domain_info")), name


def test_condition_reason_is_one_series_per_condition(
    registry: CollectorRegistry, metrics: DomainMetrics
) -> None:
    reason = "computedomain_status_condition_reason"
    labels = {"namespace": "team", "name": "cd"}
    metrics.observe_domain(
        "team", "cd", conditions={"Ready": "False", "DaemonsReady": "False"},
        reasons={"Ready": "WaitingForWorkload", "DaemonsReady": "NoDaemons"},
        nodes_by_status={}, cliques=0, global_status="NotReady",
    )  # fmt: skip
    s = scrape(registry)
    assert series(s, reason, **labels, condition="Ready", reason="WaitingForWorkload") == 1
    assert series(s, reason, **labels, condition="DaemonsReady", reason="NoDaemons") == 1
    assert len([key for key in s if key[0] == reason]) == 2
    metrics.observe_domain(
        "team", "cd", conditions={"Ready": "True"}, reasons={"Ready": "Ready"},
        nodes_by_status={"Ready": 1}, cliques=1, global_status="Ready",
    )  # fmt: skip
    s = scrape(registry)
    assert [dict(key[1]) for key in s if key[0] == reason] == [
        {**labels, "condition": "Ready", "reason": "Ready"}
    ]
    # The condition gauge itself keeps its three series and gains no label.
    assert series(s, "computedomain_status_condition", **labels, condition="Ready", status="true")
    metrics.forget_domain("team", "cd")
    assert not [key for key in scrape(registry) if key[0] == reason]


@pytest.mark.parametrize("odd", ["", "has spaces", "node-1 is down", "x" * 65, "Ünïcode"])
def test_a_reason_that_is_not_a_camel_case_word_is_not_exported_verbatim(
    registry: CollectorRegistry, metrics: DomainMetrics, odd: str
) -> None:
    metrics.observe_domain(
        "team", "cd", conditions={"Ready": "False"}, reasons={"Ready": odd},
        nodes_by_status={}, cliques=0, global_status="NotReady",
    )  # fmt: skip
    exported = [
        dict(key[1])["reason"]
        for key in scrape(registry)
        if key[0] == "computedomain_status_condition_reason"
    ]
    assert exported == ([] if odd == "" else ["Other"])


def test_without_reasons_there_is_no_reason_series(
    registry: CollectorRegistry, metrics: DomainMetrics
) -> None:
    observe_ready_domain(metrics)
    assert "computedomain_status_condition_reason" not in names(scrape(registry))


def test_deletion_start_is_exported_until_the_domain_is_forgotten(
    registry: CollectorRegistry, metrics: DomainMetrics
) -> None:
    deletion = "computedomain_deletion_started_timestamp_seconds"
    observe_ready_domain(metrics, name="going")
    metrics.observe_deletion_started("team", "going", 1_700_000_000.0)
    # A later observation of the domain (status written while deleting) keeps the series.
    observe_ready_domain(metrics, name="going")
    s = scrape(registry)
    assert series(s, deletion, namespace="team", name="going") == 1_700_000_000.0
    assert metrics.known_domains() == [("team", "going")]
    metrics.forget_domain("team", "going")
    s = scrape(registry)
    assert series(s, deletion, namespace="team", name="going") is None
    assert metrics.known_domains() == []


def test_counters_start_at_zero_for_every_known_kind(
    registry: CollectorRegistry, metrics: DomainMetrics
) -> None:
    s = scrape(registry)
    for kind in ("children", "nodeLabels"):
        assert series(s, "computedomain_orphan_cleanups_total", kind=kind) == 0
    for kind in ("DaemonSet", "ResourceClaimTemplate"):
        assert series(s, "computedomain_foreign_objects_refused_total", kind=kind) == 0
    metrics.inc_orphan_cleanup("nodeLabels")
    s = scrape(registry)
    assert series(s, "computedomain_orphan_cleanups_total", kind="nodeLabels") == 1
    assert series(s, "computedomain_orphan_cleanups_total", kind="children") == 0


def test_known_kinds_are_the_ones_the_domain_code_counts() -> None:
    """The kinds initialised at zero are the literal ones the domain code passes."""
    import re
    from pathlib import Path

    from computedomain.observability import metrics as m

    domain = Path(m.__file__).resolve().parents[1] / "domain"
    source = "\n".join(path.read_text() for path in sorted(domain.glob("*.py")))
    counted = set(re.findall(r'"(\w+)" if children else "(\w+)"', source))
    assert counted == {tuple(m.ORPHAN_CLEANUP_KINDS)}, (
        "the sweeper counts other kinds than ORPHAN_CLEANUP_KINDS; update both"
    )
    # res is one of the children the child maker creates: DAEMONSETS, RESOURCE_CLAIM_TEMPLATES.
    assert "inc_foreign_refused(res.kind)" in source


def test_process_platform_and_build_info_series(
    registry: CollectorRegistry, metrics: DomainMetrics
) -> None:
    import platform

    from computedomain import distribution_version

    s = scrape(registry)
    for name in (
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
        "process_start_time_seconds",
        "process_open_fds",
    ):
        assert name in names(s), name
    assert (series(s, "process_resident_memory_bytes") or 0) > 0
    build = [dict(key[1]) for key in s if key[0] == "computedomain_build_info"]
    assert build == [
        {
            "version": distribution_version(),
            "python_version": platform.python_version(),
            "python_implementation": platform.python_implementation(),
        }
    ]
    assert series(s, "computedomain_build_info", **build[0]) == 1
    assert [key for key in s if key[0] == "python_info"]


def test_a_second_instance_on_one_registry_is_refused(registry: CollectorRegistry) -> None:
    DomainMetrics(registry)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        DomainMetrics(registry)
