"""What every part of the reconciler works with: the API client, the caches, settings, the
event recorder, metrics, the clock, and what this process remembers per CD (``memory``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.api.v1beta1 import ComputeDomain
from computedomain.domain.caches import Caches
from computedomain.domain.keys import CDKey
from computedomain.domain.memory import DomainMemory
from computedomain.domain.ports import DomainMetricsSink
from computedomain.domain.settings import ReconcilerSettings
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
