import pytest
from prometheus_client import CollectorRegistry, generate_latest

from computedomain.runtime.metrics import (
    RECONCILE_TIME_BUCKETS,
    WORKQUEUE_DURATION_BUCKETS,
    RuntimeMetrics,
)


def test_reconcile_results_are_pre_initialised() -> None:
    registry = CollectorRegistry()
    metrics = RuntimeMetrics(registry)
    metrics.init_controller("computedomain", workers=4)
    for result in ("success", "error", "requeue", "requeue_after"):
        value = registry.get_sample_value(
            "controller_runtime_reconcile_total",
            {"controller": "computedomain", "result": result},
        )
        assert value == 0.0
    assert (
        registry.get_sample_value(
            "controller_runtime_max_concurrent_reconciles", {"controller": "computedomain"}
        )
        == 4
    )


def test_buckets_match_controller_runtime() -> None:
    assert len(RECONCILE_TIME_BUCKETS) == 40
    assert RECONCILE_TIME_BUCKETS[0] == 0.005
    assert RECONCILE_TIME_BUCKETS[-1] == 60
    assert len(WORKQUEUE_DURATION_BUCKETS) == 12
    assert WORKQUEUE_DURATION_BUCKETS[0] == pytest.approx(1e-8)
    assert WORKQUEUE_DURATION_BUCKETS[-1] == pytest.approx(1e3)


def test_families_are_exposed_under_their_names() -> None:
    registry = CollectorRegistry()
    metrics = RuntimeMetrics(registry)
    metrics.init_queue("computedomain")
    metrics.workqueue_depth.labels(name="computedomain", controller="computedomain", priority="")
    metrics.leader_election_master_status.labels(name="lease").set(1)
    metrics.rest_client_requests_total.labels(code="200", method="GET", host="h").inc()
    text = generate_latest(registry).decode()
    for family in (
        "workqueue_adds_total",
        "workqueue_depth",
        "workqueue_retries_total",
        "leader_election_master_status",
        "rest_client_requests_total",
    ):
        assert f"\n{family}{{" in text


def test_two_registries_do_not_collide() -> None:
    RuntimeMetrics(CollectorRegistry())
    RuntimeMetrics(CollectorRegistry())
