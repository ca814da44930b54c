"""The live path of a ComputeDomain: its children exist, or we say why not.

``plan.plan_live`` decides which child kinds of ``childkinds`` to create (the daemon
ResourceClaimTemplate, the IMEX DaemonSet and the workload ResourceClaimTemplate; with
host-managed IMEX, contract §18, only the last); this module creates them. An object of the
same name that we made earlier (it carries this CD's UID label) is adopted; one that does not
is never touched: we refuse and report it as FOREIGN, with what to do, until it is gone. The
ChildrenReady condition carries that advice, and its transition is the one Warning event
(``transitions``).
"""

from __future__ import annotations

import logging
from typing import Any

from computedomain.api.v1beta1 import ComputeDomain
from computedomain.domain import childkinds
from computedomain.domain.childkinds import ChildKind
from computedomain.domain.conditions import ChildState, ChildStatus
from computedomain.domain.context import ReconcileContext
from computedomain.domain.keys import CDKey
from computedomain.domain.labels import cd_uid_of
from computedomain.domain.plan import FOREIGN_RECHECK_SECONDS, SPEC_MISSING, Create, Plan, Refusals
from computedomain.domain.snapshot import DomainSnapshot
from computedomain.runtime import objects
from computedomain.runtime.client import ApiError
from computedomain.runtime.resources import Resource

log = logging.getLogger(__name__)

__all__ = ["FOREIGN_RECHECK_SECONDS", "SPEC_MISSING", "ChildMaker", "foreign_advice"]


def foreign_advice(
    cd: ComputeDomain, res: Resource, namespace: str, name: str, owner: str | None
) -> str:
    """What a person can do about a foreign object at a child's name. The CD's spec is
    immutable, so a workload template name taken by someone else means a new CD."""
    what = f"{res.kind} {namespace}/{name}"
    template = cd.spec.channel.resource_claim_template.name if cd.spec else None
    if res.kind == "ResourceClaimTemplate" and (namespace, name) == (cd.namespace, template):
        taken = (
            f"{what} belongs to ComputeDomain {owner}: two ComputeDomains cannot share a "
            "channel template name"
            if owner
            else f"{what} exists and was not made for this ComputeDomain"
        )
        remedy = (
            "delete this ComputeDomain and create it again with another "
            "spec.channel.resourceClaimTemplate.name (the spec cannot be changed)"
        )
        if not owner:
            remedy += ", or delete that ResourceClaimTemplate if nothing uses it"
        return f"{taken}; {remedy}"
    return (
        f"{what} exists and was not made for this ComputeDomain (it lacks its UID label), "
        "though the name is this ComputeDomain's own: delete it and the controller creates "
        f"its own within {FOREIGN_RECHECK_SECONDS:.0f}s"
    )


class ChildMaker:
    """The executor of a plan's creates (``plan``): each create, its answer, one Event."""

    def __init__(self, ctx: ReconcileContext) -> None:
        self._ctx = ctx
        # (resource plural, namespace, name) -> (monotonic time a foreign object was last
        # confirmed, the advice given), so the condition message stays as it was until then.
        self._foreign: dict[tuple[str, str, str], tuple[float, str]] = {}

    @property
    def refused(self) -> Refusals:
        """What ``plan_live`` reads: the objects refused lately, with the advice given."""
        return self._foreign

    async def act(
        self, snapshot: DomainSnapshot, plan: Plan
    ) -> tuple[dict[ChildKind, ChildState], float | None, bool]:
        """Create what ``plan`` says. Each child's state, when to look again (set while a
        foreign object blocks one), and whether this call created any child."""
        states = dict(plan.known)
        # What this reconcile created: one Event lists them all (one write, not one per child).
        created: list[tuple[str, dict[str, Any]]] = []
        for create in plan.creates:
            states[create.kind] = await self._create(snapshot.cd, create, created=created)
        self._ctx.record_children(snapshot.obj, "Created", created)
        blocked = any(state.status is ChildStatus.FOREIGN for state in states.values())
        requeue = FOREIGN_RECHECK_SECONDS if blocked else plan.requeue_after
        # Created children keep their table order: a kind known before sorts with the rest.
        order = [ChildKind.SPEC, *(child.kind for child in childkinds.CHILDREN)]
        ordered = {kind: states[kind] for kind in order if kind in states}
        return ordered, requeue, bool(created)

    async def _create(
        self,
        cd: ComputeDomain,
        create: Create,
        *,
        created: list[tuple[str, dict[str, Any]]],
    ) -> ChildState:
        """Create one child; on success append what it is and a reference to ``created``."""
        ctx = self._ctx
        res, body = create.resource, create.body
        namespace = body["metadata"]["namespace"]
        name = body["metadata"]["name"]
        memo_key = create.refusal_key
        try:
            written = await ctx.client.create(res, body, namespace)
        except ApiError as err:
            if err.is_forbidden and "being terminated" in err.message:
                # The namespace is going away; its deletion reaches this CD next, not an error.
                return ChildState(ChildStatus.MISSING, f"namespace {namespace} is being deleted")
            if not err.is_already_exists:
                raise
            current = await ctx.client.get(res, name, namespace)
            if cd_uid_of(current) == cd.metadata.uid:
                # Ours, created by an earlier attempt whose response we lost: adopt it.
                ctx.caches.observe_write(res, current)
                self._foreign.pop(memo_key, None)
                return ChildState(ChildStatus.OK)
            other = cd_uid_of(current)
            owner = next((str(CDKey.of(found)) for found in ctx.caches.cds_of(other or "")), None)
            advice = foreign_advice(cd, res, namespace, name, owner)
            now = ctx.clock.now()
            # Expired memos are only ever replaced, and a deleted CD's never are: drop them
            # here, so the memo holds no more than the refusals of the last recheck period.
            for key in [
                k for k, (at, _) in self._foreign.items() if now - at >= FOREIGN_RECHECK_SECONDS
            ]:
                del self._foreign[key]
            self._foreign[memo_key] = (now, advice)
            ctx.metrics.inc_foreign_refused(res.kind)
            log.warning(
                "Refused a foreign object", extra={"object": f"{namespace}/{name}", "owner": other}
            )
            return ChildState(ChildStatus.FOREIGN, advice)
        ctx.caches.observe_write(res, written)
        self._foreign.pop(memo_key, None)
        created.append((f"{res.kind} {namespace}/{name}", objects.reference(written, res)))
        log.info("Created %s", res.kind, extra={"object": f"{namespace}/{name}"})
        # The create succeeded, so the child exists: reporting it as such now saves a second
        # status write once the watch catches up.
        return ChildState(ChildStatus.OK)
