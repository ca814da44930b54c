"""The clique a workload pod goes to, decided once per ComputeDomain and recorded on it.

The pods of one job are admitted concurrently: by several requests to this process, and by
several replicas of the controller (the webhook's Service spreads them). They must all get the
same clique, so the first decision is written to the CD with a resourceVersion precondition and
every later admission reads it: a write refused with 409 Conflict means the CD changed since it
was read (another admission recorded a decision, or a status write came between), so the CD is
read again and its recorded clique, if any, is used; else the decision is made again.

Within this process decisions are taken one at a time (a lock): the promised nodes of one
decision (domain/placement.py) are then seen by the next, for another CD, even before the
informer has the first one's write. Across replicas (leader election on), each decision is first
written into the placement ledger (admission/ledger.py, a Lease with a resourceVersion
precondition), so two CDs decided at the same moment by two replicas are decided one after the
other, the second with the first one's promise counted, and never promised the same free nodes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from computedomain.admission.ledger import Ledger, LedgerState, Promise
from computedomain.admission.workload_domains import listed_by_name
from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.domain.caches import Caches
from computedomain.domain.capacity import clique_capacity
from computedomain.domain.placement import (
    NO_CLIQUE_FITS,
    NO_FIT_ANNOTATION,
    RECORDED,
    RECORDED_CLIQUE_ANNOTATION,
    RECORDED_SIZE_ANNOTATION,
    SIZED_OWNERS,
    Decision,
    decide,
    domain_key,
    opted_in,
    recorded_clique,
    workload_size,
)
from computedomain.domain.workload import claim_templates
from computedomain.runtime import objects
from computedomain.runtime.client import KubeClient
from computedomain.runtime.errors import ApiError
from computedomain.runtime.event_types import NORMAL, WARNING
from computedomain.runtime.events import EventRecorder
from computedomain.runtime.resources import JOBS, STATEFULSETS

log = logging.getLogger(__name__)

# A CD's status is written often while it comes up, so a decision's precondition can lose to
# those writes a few times in a row; each loss reads the CD again.
MAX_ATTEMPTS = 8
ACTION = "Place"
PLACED = "Placed"


@dataclass(frozen=True)
class Placement:
    """What an admission found: the CD a pod belongs to and its clique (None: unplaced), and
    the JSONPatch that wires the pod to a CD made for its workload (applied before the
    clique's; domain/workload_domain.py)."""

    domain: str
    clique: str | None
    wiring: tuple[dict[str, Any], ...] = ()


def template_name(cd: Mapping[str, Any]) -> str | None:
    channel = (cd.get("spec") or {}).get("channel") or {}
    name = (channel.get("resourceClaimTemplate") or {}).get("name")
    return str(name) if name else None


class Placer:
    def __init__(
        self,
        client: KubeClient,
        caches: Caches,
        recorder: EventRecorder,
        ledger: Ledger | None = None,
    ) -> None:
        self._client = client
        self._caches = caches
        self._recorder = recorder
        # Several replicas: every decision goes through the ledger first (None: one replica).
        self._ledger = ledger
        self._deciding = asyncio.Lock()
        # CD UID -> the clique this process recorded ("" for none): seen before the informer
        # brings the write back.
        self._recorded: dict[str, str] = {}

    async def place(
        self, namespace: str, pod: Mapping[str, Any], namespace_opted_in: bool
    ) -> Placement | None:
        """None when the pod uses no opted-in CD's workload claim template."""
        templates = claim_templates(pod)
        if not templates:
            return None
        cd = self._domain_in_cache(namespace, templates) or await self._domain_listed(
            namespace, templates
        )
        if cd is None:
            return None
        return await self.place_in(cd, pod, namespace_opted_in)

    async def place_in(
        self, cd: Mapping[str, Any], pod: Mapping[str, Any], namespace_opted_in: bool
    ) -> Placement | None:
        """None when ``cd`` (the one ``pod`` uses) is not opted in, or is being deleted."""
        if not (namespace_opted_in or opted_in(cd, {})):
            return None
        if objects.meta(cd).get("deletionTimestamp"):
            # Its nodes are about to be freed: nothing to keep a new pod near.
            return None
        return Placement(objects.object_key(cd), await self.clique_for(cd, pod))

    def _domain_in_cache(self, namespace: str, templates: set[str]) -> dict[str, Any] | None:
        for cd in self._caches.cds.list():
            if objects.namespace(cd) == namespace and template_name(cd) in templates:
                return cd
        return None

    async def _domain_listed(self, namespace: str, templates: set[str]) -> dict[str, Any] | None:
        """A CD created a moment before its pods may not be in the cache yet: one LIST of the
        namespace's CDs (only for pods that name a claim template the cache does not know)."""
        listed = await self._client.list(COMPUTE_DOMAINS, namespace=namespace)
        for cd in listed["items"]:
            if template_name(cd) in templates:
                return dict(cd)
        return None

    def _known(self, cd: Mapping[str, Any]) -> str | None:
        uid = objects.uid(cd) or ""
        if uid in self._recorded:
            return self._recorded[uid]
        return recorded_clique(cd)

    async def clique_for(
        self, cd: Mapping[str, Any], pod: Mapping[str, Any] | None = None
    ) -> str | None:
        """The CD's clique ("" recorded: none); ``pod`` (the one admitted) sizes the job by its
        owning workload when the decision is made now."""
        known = self._known(cd)
        if known is None:
            async with self._deciding:
                known = self._known(cd)
                if known is None:
                    workload = await self._workload_size(objects.namespace(cd) or "", pod or {})
                    known = await self._decide_and_record(cd, workload)
        return known or None

    async def _workload_size(self, namespace: str, pod: Mapping[str, Any]) -> int | None:
        """The size of the StatefulSet or Job that owns ``pod`` (one GET, once per CD); None
        for a pod of anything else, or when it cannot be read (then ``spec.numNodes``)."""
        for owner in (pod.get("metadata") or {}).get("ownerReferences") or []:
            found = (owner.get("apiVersion"), owner.get("kind"))
            if not owner.get("controller") or found not in SIZED_OWNERS:
                continue
            res = STATEFULSETS if found[1] == "StatefulSet" else JOBS
            try:
                return workload_size(await self._client.get(res, owner["name"], namespace))
            except ApiError as err:
                log.warning(
                    "Cannot read the pod's %s; the job is sized by spec.numNodes",
                    found[1],
                    extra={"owner": owner.get("name"), "err": str(err)},
                )
        return None

    def _domains(self, promises: Mapping[str, Promise]) -> list[Mapping[str, Any]]:
        """The cached CDs, with what this process recorded and the ledger's promises that the
        cache does not show yet (a CD another replica decided, maybe not cached yet either)."""
        out: list[Mapping[str, Any]] = []
        live = set()
        for cached in self._caches.cds.list():
            cd: Mapping[str, Any] = cached
            uid = objects.uid(cd) or ""
            live.add(uid)
            if recorded_clique(cd) is None:
                promise = promises.get(uid)
                clique = self._recorded.get(uid)
                if promise is not None:
                    cd = _as_recorded(cd, promise.clique, promise.size)
                elif clique is not None:
                    cd = _as_recorded(cd, clique, 0)
            out.append(cd)
        for uid, promise in promises.items():
            if uid not in live and promise.clique:
                namespace, _, name = promise.domain.partition("/")
                meta = {"uid": uid, "namespace": namespace, "name": name}
                out.append(_as_recorded({"metadata": meta}, promise.clique, promise.size))
        # Forget the CDs that are gone (their UIDs never come back).
        for uid in set(self._recorded) - live:
            del self._recorded[uid]
        return out

    async def _decide_and_record(self, cd: Mapping[str, Any], workload: int | None) -> str:
        current: Mapping[str, Any] = cd
        uid = objects.uid(cd) or ""
        for _ in range(MAX_ATTEMPTS):
            state = await self._ledger.read() if self._ledger else LedgerState(None, {})
            promised = state.promises.get(uid)
            if promised is not None:
                # Another replica decided it a moment ago (and writes it on the CD).
                return self._remember(current, promised.clique)
            domains = self._domains(state.promises)
            rows = clique_capacity(self._caches.nodes.store.list(), domains)
            decision = decide(current, rows, domains, workload)
            if decision.reason == RECORDED:
                return self._remember(current, decision.clique or "")
            if self._ledger and not await self._ledger.promise(
                state, uid, domain_key(current), decision.clique or "", decision.size
            ):
                continue  # another decision came first: decide again with it counted
            written, current = await self._record_or_reread(current, decision)
            if written:
                return self._remember(current, decision.clique or "")
            if self._ledger:
                # Promised in the ledger: that is the decision; only its write is retried.
                return await self._write_promised(current, decision)
        raise RuntimeError(
            f"ComputeDomain {objects.object_key(cd)} changed under {MAX_ATTEMPTS} placement "
            "decisions in a row"
        )

    async def _write_promised(self, cd: Mapping[str, Any], decision: Decision) -> str:
        """The decision already in the ledger written on the CD, read again after each 409 (a
        status write came between), unless a clique is recorded there meanwhile."""
        current = cd
        for _ in range(MAX_ATTEMPTS):
            recorded = recorded_clique(current)
            if recorded is not None:
                return self._remember(current, recorded)
            written, current = await self._record_or_reread(current, decision)
            if written:
                return self._remember(current, decision.clique or "")
        raise RuntimeError(
            f"ComputeDomain {objects.object_key(cd)} changed under {MAX_ATTEMPTS} writes of its "
            "placement decision in a row"
        )

    async def _record_or_reread(
        self, cd: Mapping[str, Any], decision: Decision
    ) -> tuple[bool, Mapping[str, Any]]:
        """``decision`` written on ``cd`` (its resourceVersion a precondition) and announced:
        (True, the CD as written); or, on a 409, the CD changed since it was read: (False, the
        CD read again), for the caller to decide whether to try again."""
        try:
            written = await self._client.patch(
                COMPUTE_DOMAINS,
                objects.name(cd),
                _record(cd, decision),
                namespace=objects.namespace(cd),
            )
        except ApiError as err:
            if not err.is_conflict:
                raise
            return False, await listed_by_name(
                self._client, objects.namespace(cd) or "", objects.name(cd)
            )
        self._announce(written, decision)
        return True, written

    def _remember(self, cd: Mapping[str, Any], clique: str) -> str:
        self._recorded[objects.uid(cd) or ""] = clique
        return clique

    def _announce(self, cd: Mapping[str, Any], decision: Decision) -> None:
        """One Event per decision: it is made once per CD."""
        if decision.reason == NO_CLIQUE_FITS:
            self._recorder.record(cd, WARNING, NO_CLIQUE_FITS, ACTION, decision.message)
        else:
            self._recorder.record(cd, NORMAL, PLACED, ACTION, decision.message)
        log.info(
            "Placement decided",
            extra={"computeDomain": objects.object_key(cd), "clique": decision.clique or ""},
        )


def _as_recorded(cd: Mapping[str, Any], clique: str, size: int) -> Mapping[str, Any]:
    """``cd`` as it is once a decision for ``clique`` (and ``size`` nodes, 0: unknown here) is
    written on it."""
    meta = dict(cd.get("metadata") or {})
    annotations = {**(meta.get("annotations") or {}), RECORDED_CLIQUE_ANNOTATION: clique}
    if size:
        annotations[RECORDED_SIZE_ANNOTATION] = str(size)
    meta["annotations"] = annotations
    return {**cd, "metadata": meta}


def _record(cd: Mapping[str, Any], decision: Decision) -> dict[str, Any]:
    """A merge patch that succeeds only on the CD as read (its resourceVersion)."""
    annotations: dict[str, str | None] = {RECORDED_CLIQUE_ANNOTATION: decision.clique or ""}
    annotations[NO_FIT_ANNOTATION] = None if decision.clique else decision.message
    if decision.size:
        annotations[RECORDED_SIZE_ANNOTATION] = str(decision.size)
    return {
        "metadata": {
            "resourceVersion": objects.resource_version(cd),
            "annotations": annotations,
        }
    }
