"""Runtime metric families with controller-runtime's names, labels and buckets.

One ``RuntimeMetrics`` is registered on an injected ``CollectorRegistry`` and handed to the
workqueue, controller, leader elector, client and event recorder. There is deliberately no
module-level instance on the default registry: each process (and each test) builds its own.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

RECONCILE_RESULTS = ("success", "error", "requeue", "requeue_after")

RECONCILE_TIME_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8,
    0.9, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30,
    40, 50, 60,
)  # fmt: skip
WORKQUEUE_DURATION_BUCKETS = tuple(10.0**exponent for exponent in range(-8, 4))
REST_DURATION_BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60)


class RuntimeMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        controller = ["controller"]
        queue = ["name", "controller"]

        self.reconcile_total = Counter(
            "controller_runtime_reconcile_total",
            "Total number of reconciliations per controller",
            ["controller", "result"],
            registry=registry,
        )
        self.reconcile_errors_total = Counter(
            "controller_runtime_reconcile_errors_total",
            "Total number of reconciliation errors per controller",
            controller,
            registry=registry,
        )
        self.terminal_reconcile_errors_total = Counter(
            "controller_runtime_terminal_reconcile_errors_total",
            "Total number of terminal reconciliation errors per controller",
            controller,
            registry=registry,
        )
        self.reconcile_panics_total = Counter(
            "controller_runtime_reconcile_panics_total",
            "Total number of reconciliation panics per controller",
            controller,
            registry=registry,
        )
        self.reconcile_timeouts_total = Counter(
            "controller_runtime_reconcile_timeouts_total",
            "Total number of reconciliation timeouts per controller",
            controller,
            registry=registry,
        )
        self.reconcile_time_seconds = Histogram(
            "controller_runtime_reconcile_time_seconds",
            "Length of time per reconciliation per controller",
            controller,
            buckets=RECONCILE_TIME_BUCKETS,
            registry=registry,
        )
        self.max_concurrent_reconciles = Gauge(
            "controller_runtime_max_concurrent_reconciles",
            "Maximum number of concurrent reconciles per controller",
            controller,
            registry=registry,
        )
        self.active_workers = Gauge(
            "controller_runtime_active_workers",
            "Number of currently used workers per controller",
            controller,
            registry=registry,
        )

        self.workqueue_depth = Gauge(
            "workqueue_depth",
            "Current depth of workqueue",
            ["name", "controller", "priority"],
            registry=registry,
        )
        self.workqueue_adds_total = Counter(
            "workqueue_adds_total",
            "Total number of adds handled by workqueue",
            queue,
            registry=registry,
        )
        self.workqueue_queue_duration_seconds = Histogram(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            queue,
            buckets=WORKQUEUE_DURATION_BUCKETS,
            registry=registry,
        )
        self.workqueue_work_duration_seconds = Histogram(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes",
            queue,
            buckets=WORKQUEUE_DURATION_BUCKETS,
            registry=registry,
        )
        self.workqueue_unfinished_work_seconds = Gauge(
            "workqueue_unfinished_work_seconds",
            "How many seconds of work has been done that is in progress and hasn't been "
            "observed by work_duration",
            queue,
            registry=registry,
        )
        self.workqueue_longest_running_processor_seconds = Gauge(
            "workqueue_longest_running_processor_seconds",
            "How many seconds has the longest running processor for workqueue been running",
            queue,
            registry=registry,
        )
        self.workqueue_retries_total = Counter(
            "workqueue_retries_total",
            "Total number of retries handled by workqueue",
            queue,
            registry=registry,
        )

        self.leader_election_master_status = Gauge(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates "
            "backup, 1 indicates master. 'name' is the string used to identify the lease",
            ["name"],
            registry=registry,
        )
        self.leader_election_slowpath_total = Counter(
            "leader_election_slowpath_total",
            "Total number of slow path exercised in renewing leader leases",
            ["name"],
            registry=registry,
        )

        self.rest_client_requests_total = Counter(
            "rest_client_requests_total",
            "Number of HTTP requests, partitioned by status code, method, and host",
            ["code", "method", "host"],
            registry=registry,
        )
        self.rest_client_request_duration_seconds = Histogram(
            "rest_client_request_duration_seconds",
            "Request latency in seconds. Broken down by verb, and host",
            ["verb", "host"],
            buckets=REST_DURATION_BUCKETS,
            registry=registry,
        )

        # Not a controller-runtime family: our recorder drops instead of blocking.
        self.events_dropped_total = Counter(
            "event_recorder_dropped_events_total",
            "Events the recorder dropped, by reason (queue_full, spam, write_failed, forbidden)",
            ["reason"],
            registry=registry,
        )
        # At zero from the start, so "nothing dropped" is a sample and a rate, not a gap.
        for reason in ("queue_full", "spam", "write_failed", "forbidden"):
            self.events_dropped_total.labels(reason=reason)

    def init_controller(self, controller: str, workers: int) -> None:
        """Create the per-controller series at zero, as controller-runtime does on start."""
        for result in RECONCILE_RESULTS:
            self.reconcile_total.labels(controller=controller, result=result)
        self.reconcile_errors_total.labels(controller=controller)
        self.terminal_reconcile_errors_total.labels(controller=controller)
        self.reconcile_panics_total.labels(controller=controller)
        self.reconcile_timeouts_total.labels(controller=controller)
        self.max_concurrent_reconciles.labels(controller=controller).set(workers)
        self.active_workers.labels(controller=controller).set(0)

    def init_queue(self, name: str) -> None:
        for family in (self.workqueue_adds_total, self.workqueue_retries_total):
            family.labels(name=name, controller=name)
        self.workqueue_unfinished_work_seconds.labels(name=name, controller=name).set(0)
        self.workqueue_longest_running_processor_seconds.labels(name=name, controller=name).set(0)
