"""What every part of the reconciler works with: the API client, the caches, settings, the
event recorder, metrics, the clock, and what this process remembers per CD."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Literal

from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.api.v1beta1 import ComputeDomain, Condition
from computedomain.domain.caches import Caches
from computedomain.domain.keys import CDKey
from computedomain.domain.ports import DomainMetricsSink
from computedomain.domain.settings import ReconcilerSettings
from computedomain.domain.workload import WorkloadPodProblem
from computedomain.runtime.client import KubeClient
from computedomain.runtime.clock import Clock
from computedomain.runtime.event_types import NORMAL
from computedomain.runtime.events import EventRecorder
from computedomain.runtime.updates import Patcher

# How often a CD is looked at again while a child or pod it waits for is going away.
DELETION_POLL_SECONDS = 2.0
# The Event reasons that name children a pass made or deleted, and their actions.
CHILDREN_ACTIONS: Final = {"Created": "Create", "Deleted": "Delete"}


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


@dataclass
class ReconcileContext:
    client: KubeClient
    caches: Caches
    settings: ReconcilerSettings
    recorder: EventRecorder
    metrics: DomainMetricsSink
    clock: Clock
    # How many other reconciles wait to start (the work queue's ready keys); none by default.
    backlog: Callable[[], int] = lambda: 0
    memory: dict[str, DomainMemory] = field(default_factory=dict)
    # The UID last reconciled under each key: a CD made again under its name (the queue holds
    # one key for its deletion and creation) has the old UID's memory forgotten on sight.
    uid_of_key: dict[CDKey, str] = field(default_factory=dict)
    # Patches, or the same change by update where patch is not granted (docs: permissions).
    patcher: Patcher = field(init=False)
    # Our status fields the apiserver dropped from a write, while the CRD cannot be read to
    # say so (``Caches.crd_readable``): the status is written as for an outdated CRD.
    pruned_status_fields: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        self.patcher = Patcher(self.client)

    def memory_of(self, uid: str) -> DomainMemory:
        return self.memory.setdefault(uid, DomainMemory())

    def forget(self, uid: str) -> None:
        """Drop everything remembered of the CD ``uid`` (every part of its ``DomainMemory``)."""
        self.memory.pop(uid, None)
        for key in [key for key, known in self.uid_of_key.items() if known == uid]:
            del self.uid_of_key[key]

    def reconciling(self, key: CDKey, uid: str) -> None:
        """``key`` is reconciled as the CD ``uid`` now; an earlier CD of that name is gone."""
        earlier = self.uid_of_key.get(key)
        if earlier is not None and earlier != uid:
            self.forget(earlier)
        self.uid_of_key[key] = uid

    def record_children(
        self,
        regarding: Mapping[str, Any],
        reason: Literal["Created", "Deleted"],
        children: Sequence[tuple[str, dict[str, Any]]],
    ) -> None:
        """One Event for the children a pass made or deleted (``(kind namespace/name,
        reference)`` each): one child, the Event points at it; several, its note names them."""
        if not children:
            return
        self.recorder.record(
            regarding,
            NORMAL,
            reason,
            CHILDREN_ACTIONS[reason],
            f"{reason} " + ", ".join(what for what, _ in children),
            related=children[0][1] if len(children) == 1 else None,
        )

    async def patch_cd(
        self,
        cd: ComputeDomain,
        obj: Mapping[str, Any],
        patch: Any,
        *,
        patch_type: Literal["merge", "json"],
        subresource: str | None = None,
    ) -> dict[str, Any]:
        """Patch the CD itself (or its ``status``); ``obj`` is the CD as read (whole: the
        cache keeps CDs whole), which an update changes and sends back."""
        return await self.patcher.patch(
            COMPUTE_DOMAINS,
            cd.metadata.name,
            patch,
            cd.metadata.namespace,
            patch_type=patch_type,
            subresource=subresource,
            current=obj,
        )
