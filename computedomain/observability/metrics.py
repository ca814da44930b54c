"""ComputeDomain readiness metrics (the domain half; runtime metrics live in computedomain.runtime).

Cardinality is bounded by the objects we manage: `namespace`/`name` per domain and `clique`
per clique. Pod names, IPs, UIDs and messages never become label values. A condition's
`reason` does, in a gauge of its own (`computedomain_status_condition_reason`, one series per
domain and condition): reasons are the fixed CamelCase words of `computedomain.domain.conditions`,
and keeping them off `computedomain_status_condition` keeps its three series per condition
stable when only the reason changes (no new series, no reset of an alert's `for`).

Per-domain state is held in plain dicts and rendered by a custom collector at scrape time, so
forgetting a domain is one dict deletion and a scrape always sees one consistent snapshot.

`DomainMetrics` also registers the process-level series (`process_*`, `python_info`,
`computedomain_build_info`; see `computedomain.observability.process`) on the same registry.
"""

from __future__ import annotations

import re
from collections import Counter as TallyCounter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from threading import Lock

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)
from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from computedomain.observability.process import register_process_metrics
from computedomain.runtime import resources as r

PREFIX = "computedomain_"

# kube-state-metrics spells condition statuses in lower case; one series per value.
CONDITION_STATUSES: tuple[str, ...] = ("true", "false", "unknown")
# Daemon statuses of a CD's status.nodes entries; both are always exported (0 when absent).
NODE_STATUSES: tuple[str, ...] = ("Ready", "NotReady")
# Global CD statuses (status.status); both are always exported for NVIDIA's gauge.
GLOBAL_STATUSES: tuple[str, ...] = ("Ready", "NotReady")
# The `kind` values the domain code counts, exported at 0 from the start so that rate() and
# increase() have a series before the first event (the sweeper's and the child maker's kinds).
ORPHAN_CLEANUP_KINDS: tuple[str, ...] = ("children", "nodeLabels")
FOREIGN_REFUSED_KINDS: tuple[str, ...] = (r.DAEMONSETS.kind, r.RESOURCE_CLAIM_TEMPLATES.kind)
# A Kubernetes condition reason is CamelCase (API conventions); anything else, or a longer word,
# is exported as OTHER_REASON so that a label value can never carry free text.
_REASON = re.compile(r"[A-Za-z][A-Za-z0-9]{0,63}")
OTHER_REASON = "Other"

# Creation to Ready spans a DS rollout, image pulls and IMEX start (upstream: 30-60 s for a
# first pod, minutes at scale), so buckets reach an hour.
TIME_TO_READY_BUCKETS: tuple[float, ...] = (
    1, 2, 5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 600, 900, 1800, 3600,
)  # fmt: skip
DAEMON_READY_BUCKETS: tuple[float, ...] = (
    0.5, 1, 2, 5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300, 600, 1200,
)  # fmt: skip

# The placement webhook's answers (exported at 0 from the start): a clique added, none fitted,
# the pod not one of an opted-in ComputeDomain, or admitted unchanged after an error.
PLACEMENT_OUTCOMES: tuple[str, ...] = ("placed", "unplaced", "skipped", "failed")
# An answer from the cache takes microseconds; the first pod of a CD waits for the decision's
# write (milliseconds); the apiserver gives up at the configuration's timeoutSeconds (5).
ADMISSION_BUCKETS: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5,
)  # fmt: skip


@dataclass
class _DomainState:
    conditions: dict[str, str] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    nodes_by_status: dict[str, int] = field(default_factory=dict)
    cliques: int = 0
    clique_split: bool = False
    global_status: str = ""


def _condition_status(value: str) -> str:
    lowered = value.lower()
    return lowered if lowered in CONDITION_STATUSES else "unknown"


def _reason(value: str) -> str:
    return value if _REASON.fullmatch(value) else OTHER_REASON


class _DomainStateCollector:
    """Renders the per-domain and per-clique gauges from the latest observed state."""

    def __init__(self) -> None:
        self._lock = Lock()
        self.domains: dict[tuple[str, str], _DomainState] = {}
        # clique -> state ("total", "ready", "held", "free") -> nodes
        self.clique_nodes: dict[str, dict[str, int]] = {}
        # (namespace, name) -> deletionTimestamp (Unix seconds) of a domain being finalized.
        self.deleting: dict[tuple[str, str], float] = {}

    def lock(self) -> Lock:
        return self._lock

    def describe(self) -> Iterable[Metric]:
        return self._families()

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            families = self._families()
            condition, reason, nodes, cliques, split, clique_nodes, info, deleting = families
            global_counts: TallyCounter[str] = TallyCounter({s: 0 for s in GLOBAL_STATUSES})
            for (namespace, name), state in sorted(self.domains.items()):
                for ctype, cstatus in sorted(state.conditions.items()):
                    current = _condition_status(cstatus)
                    for status in CONDITION_STATUSES:
                        value = 1.0 if status == current else 0.0
                        condition.add_metric([namespace, name, ctype, status], value)
                    if creason := state.reasons.get(ctype):
                        reason.add_metric([namespace, name, ctype, _reason(creason)], 1.0)
                statuses = dict.fromkeys(NODE_STATUSES, 0) | state.nodes_by_status
                for status, count in sorted(statuses.items()):
                    nodes.add_metric([namespace, name, status], float(count))
                cliques.add_metric([namespace, name], float(state.cliques))
                split.add_metric([namespace, name], 1.0 if state.clique_split else 0.0)
                if state.global_status:
                    global_counts[state.global_status] += 1
            for clique, by_state in sorted(self.clique_nodes.items()):
                for node_state, count in by_state.items():
                    clique_nodes.add_metric([clique, node_state], float(count))
            for status, count in sorted(global_counts.items()):
                info.add_metric([status], float(count))
            for (namespace, name), started in sorted(self.deleting.items()):
                deleting.add_metric([namespace, name], started)
        return families

    @staticmethod
    def _families() -> list[GaugeMetricFamily]:
        return [
            GaugeMetricFamily(
                PREFIX + "status_condition",
                "Condition of a ComputeDomain: 1 for the current status, 0 for the others.",
                labels=["namespace", "name", "condition", "status"],
            ),
            GaugeMetricFamily(
                PREFIX + "status_condition_reason",
                "Reason of a ComputeDomain condition's current status: one series per condition, "
                "value 1, labelled with the reason.",
                labels=["namespace", "name", "condition", "reason"],
            ),
            GaugeMetricFamily(
                PREFIX + "nodes",
                "Nodes of a ComputeDomain by the status of their IMEX daemon.",
                labels=["namespace", "name", "status"],
            ),
            GaugeMetricFamily(
                PREFIX + "cliques",
                "Number of NVLink cliques the nodes of a ComputeDomain span (by their clique "
                "labels and by what its daemons report, which stays while a label is missing).",
                labels=["namespace", "name"],
            ),
            GaugeMetricFamily(
                PREFIX + "clique_split",
                "1 while the nodes of a ComputeDomain span more than one NVLink clique although "
                "the job (spec.numNodes, or the nodes seen when more) fits in one "
                "(MAX_NODES_PER_IMEX_DOMAIN): IMEX shares GPU memory only within a clique. 0 "
                "otherwise, also for a job larger than a clique, which spans cliques by design.",
                labels=["namespace", "name"],
            ),
            GaugeMetricFamily(
                PREFIX + "clique_nodes",
                "Nodes carrying an nvidia.com/gpu.clique label, per clique and state: total, "
                "ready (Ready and schedulable), held (by a ComputeDomain), free (ready, held by "
                'none). clique="<label missing>": nodes in a clique whose label is missing for '
                "now (NVIDIA's kubelet plugin removes it while it restarts), counted alike.",
                labels=["clique", "state"],
            ),
            GaugeMetricFamily(
                "nvidia_dra_compute_domain_info",
                "Number of ComputeDomains per global status (NVIDIA-compatible).",
                labels=["status"],
            ),
            GaugeMetricFamily(
                PREFIX + "deletion_started_timestamp_seconds",
                "deletionTimestamp (Unix seconds) of a ComputeDomain the controller is finalizing; "
                "the series goes when the finalizer is removed or the ComputeDomain is gone.",
                labels=["namespace", "name"],
            ),
        ]


class DomainMetrics:
    """Domain metric families registered on `registry`; the reconciler and sweeper call the methods.

    Disables the `*_created` series process-wide (prometheus-client has only a global switch),
    so the exposition matches Go controllers. Registers the process-level series too (one
    `DomainMetrics` per registry: a second one is refused).
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        disable_created_metrics()  # type: ignore[no-untyped-call]
        register_process_metrics(registry)
        self._state = _DomainStateCollector()
        registry.register(self._state)
        self._time_to_ready = Histogram(
            PREFIX + "time_to_ready_seconds",
            "Time from a ComputeDomain's creation until its Ready condition first turned True.",
            buckets=TIME_TO_READY_BUCKETS,
            registry=registry,
        )
        self._daemon_ready_latency = Histogram(
            PREFIX + "daemon_ready_latency_seconds",
            "Time from a node joining a ComputeDomain until its IMEX daemon turned Ready.",
            buckets=DAEMON_READY_BUCKETS,
            registry=registry,
        )
        self._orphan_cleanups = Counter(
            PREFIX + "orphan_cleanups_total",
            "Orphaned objects cleaned up (children and node labels of ComputeDomains gone).",
            ["kind"],
            registry=registry,
        )
        for kind in ORPHAN_CLEANUP_KINDS:
            self._orphan_cleanups.labels(kind=kind)
        self._foreign_refused = Counter(
            PREFIX + "foreign_objects_refused_total",
            "Objects at a child's name that carry another owner's label and were left alone.",
            ["kind"],
            registry=registry,
        )
        for kind in FOREIGN_REFUSED_KINDS:
            self._foreign_refused.labels(kind=kind)

        self._placement_admissions = Counter(
            PREFIX + "placement_admissions_total",
            "Pod admissions the placement webhook answered, by outcome: placed (a clique "
            "added), unplaced (no clique fitted), skipped (not a pod of an opted-in "
            "ComputeDomain), failed (admitted unchanged after an error).",
            ["outcome"],
            registry=registry,
        )
        for outcome in PLACEMENT_OUTCOMES:
            self._placement_admissions.labels(outcome=outcome)
        self._placement_duration = Histogram(
            PREFIX + "placement_admission_duration_seconds",
            "Time the placement webhook took to answer one pod admission.",
            buckets=ADMISSION_BUCKETS,
            registry=registry,
        )

        self._crd_missing_status_fields = Gauge(
            PREFIX + "crd_missing_status_fields",
            "Status fields of ours the installed ComputeDomain CRD lacks (0: up to date). While "
            "above 0 only status.status and status.nodes are written; upgrade the CRD.",
            registry=registry,
        )
        self._concurrent_controllers = Gauge(
            PREFIX + "concurrent_controllers",
            "Other ComputeDomain controllers seen: running pods of NVIDIA's controller in any "
            "namespace (NVIDIA_CONTROLLER_SELECTORS; by default the labels "
            "dra-driver-nvidia-gpu-component=controller, "
            "nvidia-dra-driver-gpu-component=controller and app=nvidia-dra-driver-controller) "
            "that can write beside it (not one whose leader election waits on the Lease this one "
            "leads on), plus namespaces outside ours holding IMEX daemon DaemonSets of live "
            "ComputeDomains. Must be 0.",
            registry=registry,
        )
        self._standing_by = Gauge(
            PREFIX + "controller_standing_by",
            "1 while this replica leads and stands by because another ComputeDomain controller "
            "runs, or NVIDIA's kubelet plugin runs in another namespace than the driver "
            "namespace: it writes nothing to ComputeDomains, their children, cliques or node "
            "labels until that ends. 0 otherwise (also on replicas that do not lead).",
            registry=registry,
        )
        self._daemon_image_drift = Gauge(
            PREFIX + "daemon_image_drift",
            "DaemonSets of NVIDIA's kubelet plugin (in the driver namespace) whose driver image is "
            "not the IMAGE_NAME given to this controller (0 when none is given: new IMEX daemons "
            "then get the plugin's image); must be 0: leave IMAGE_NAME unset or set it to the "
            "plugin's image.",
            registry=registry,
        )

    def observe_domain(
        self,
        namespace: str,
        name: str,
        *,
        conditions: Mapping[str, str],
        nodes_by_status: Mapping[str, int],
        cliques: int,
        global_status: str,
        reasons: Mapping[str, str] | None = None,
        clique_split: bool = False,
    ) -> None:
        """Replace everything known about one domain; conditions absent now lose their series.

        `reasons` maps a condition type to its current reason (the `reason` gauge);
        `clique_split`: the domain spans cliques although its job fits one.
        """
        state = _DomainState(
            conditions=dict(conditions),
            reasons=dict(reasons or {}),
            nodes_by_status=dict(nodes_by_status),
            cliques=cliques,
            clique_split=clique_split,
            global_status=global_status,
        )
        with self._state.lock():
            self._state.domains[(namespace, name)] = state

    def forget_domain(self, namespace: str, name: str) -> None:
        """Drop every series of a deleted domain (a no-op for an unknown one)."""
        with self._state.lock():
            self._state.domains.pop((namespace, name), None)
            self._state.deleting.pop((namespace, name), None)

    def observe_deletion_started(self, namespace: str, name: str, timestamp: float) -> None:
        """A domain being finalized since `timestamp` (its deletionTimestamp, Unix seconds);
        `forget_domain` ends the series."""
        with self._state.lock():
            self._state.deleting[(namespace, name)] = timestamp

    def observe_time_to_ready(self, seconds: float) -> None:
        self._time_to_ready.observe(max(seconds, 0.0))

    def observe_daemon_ready_latency(self, seconds: float) -> None:
        self._daemon_ready_latency.observe(max(seconds, 0.0))

    def set_clique_inventory(self, nodes_by_state: Mapping[str, Mapping[str, int]]) -> None:
        """Replace the clique inventory; cliques not in it lose their series."""
        with self._state.lock():
            self._state.clique_nodes = {
                clique: dict(states) for clique, states in nodes_by_state.items()
            }

    def observe_admission(self, outcome: str, seconds: float) -> None:
        self._placement_admissions.labels(outcome=outcome).inc()
        self._placement_duration.observe(seconds)

    def inc_orphan_cleanup(self, kind: str) -> None:
        self._orphan_cleanups.labels(kind=kind).inc()

    def inc_foreign_refused(self, kind: str) -> None:
        self._foreign_refused.labels(kind=kind).inc()

    def set_crd_missing_status_fields(self, count: int) -> None:
        self._crd_missing_status_fields.set(count)

    def set_concurrent_controllers(self, count: int) -> None:
        self._concurrent_controllers.set(count)

    def set_standing_by(self, standing_by: bool) -> None:
        self._standing_by.set(1 if standing_by else 0)

    def set_daemon_image_drift(self, count: int) -> None:
        self._daemon_image_drift.set(count)

    def known_domains(self) -> list[tuple[str, str]]:
        """The exported (namespace, name) pairs, e.g. to forget domains gone from the cache."""
        with self._state.lock():
            return sorted(set(self._state.domains) | set(self._state.deleting))
