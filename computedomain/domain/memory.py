"""What this process remembers of a ComputeDomain between reconciles (pure data): one part per
owner, each read and changed only by its owner, all dropped at once by
``context.ReconcileContext.forget``. Nothing here is needed for correctness after a restart:
it paces writes (coalescing), times grace periods, and avoids saying a thing twice."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from computedomain.api.v1beta1 import Condition
from computedomain.domain.workload import WorkloadPodProblem


@dataclass
class StatusMemory:
    """The status writer's (``status``): what the last write carried, and its coalescing."""

    # While the installed CRD prunes conditions, the last ones we computed live only here.
    conditions: list[Condition] = field(default_factory=list)
    # Reasons warned about once per CD (transitions.ONCE_PER_DOMAIN) and already recorded.
    warned_once: set[str] = field(default_factory=set)
    # When (clock.now()) this process last wrote the CD's status: the coalescing window's start;
    # the window's length now (None: the configured one), and whether a change waits for it.
    status_written_at: float | None = None
    status_window: float | None = None
    status_held: bool = False
    # When (clock.now()) a change of the conditions' words alone was first held (status.py).
    progress_held_since: float | None = None


@dataclass
class MetricsMemory:
    """The status writer's metrics (``status``): join and readiness latencies observed once."""

    node_first_seen: dict[str, float] = field(default_factory=dict)
    reported_ready: bool = False


@dataclass
class PruningMemory:
    """The clique pruner's (``pruning``): since when each stale entry has been seen stale."""

    stale_entry_since: dict[tuple[str, str], float] = field(default_factory=dict)


@dataclass
class WorkloadCheckMemory:
    """The workload check's (``workload_check``), while the CD waits for its workload: when
    this process may next LIST its namespace's Pending pods, the interval while none of its
    pods are found (doubling), and the pods the last LIST found not starting."""

    workload_check_at: float | None = None
    workload_idle_interval: float | None = None
    workload_problems: tuple[WorkloadPodProblem, ...] = ()


@dataclass
class DeletionMemory:
    """The deletion's (``deletion``, also its ``Cleanup`` for the orphan sweeper)."""

    # Children the apiserver answered 404 for (by UID; the cache may show them a while
    # longer), and whether a live LIST found no Node labelled for the CD any more.
    children_gone: set[str] = field(default_factory=set)
    node_labels_cleared: bool = False
    # Whether its workload pods no longer hold it up (gone, timed out, unreadable), and
    # whether the wait for them was announced (one Event).
    workload_released: bool = False
    workload_wait_announced: bool = False
    # When the wait for them ended (wall clock): daemon pods get their own time from there.
    workload_released_at: datetime | None = None


@dataclass
class DomainMemory:
    """What one process remembers about a CD between reconciles, one part per owner; all of
    it goes at once (``ReconcileContext.forget``) when the CD is gone or finalized."""

    status: StatusMemory = field(default_factory=StatusMemory)
    metrics: MetricsMemory = field(default_factory=MetricsMemory)
    pruning: PruningMemory = field(default_factory=PruningMemory)
    workload_check: WorkloadCheckMemory = field(default_factory=WorkloadCheckMemory)
    deletion: DeletionMemory = field(default_factory=DeletionMemory)
