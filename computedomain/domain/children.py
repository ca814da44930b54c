"""The live path of a ComputeDomain: its children exist, or we say why not.

Creates each child kind of ``childkinds`` (the daemon ResourceClaimTemplate, the IMEX DaemonSet
and the workload ResourceClaimTemplate; with host-managed IMEX, contract §18, only the last).
An object of the same name that we made earlier (it carries this CD's UID label) is adopted;
one that does not is never touched: we refuse and report it as FOREIGN, with what to do, until
it is gone. The ChildrenReady condition carries that advice, and its transition is the one
Warning event (``transitions``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from computedomain.api.v1beta1 import ComputeDomain
from computedomain.domain import childkinds
from computedomain.domain.childkinds import Child, ChildKind, Inputs, Scope
from computedomain.domain.conditions import ChildState, ChildStatus
from computedomain.domain.context import ReconcileContext
from computedomain.domain.keys import CDKey
from computedomain.domain.kubeletplugin import daemon_image
from computedomain.domain.labels import cd_uid_of
from computedomain.runtime import objects
from computedomain.runtime.client import ApiError
from computedomain.runtime.resources import Resource

log = logging.getLogger(__name__)

SPEC_MISSING = (
    "spec is missing: a ComputeDomain needs spec.channel.resourceClaimTemplate.name (and "
    "optionally spec.numNodes); nothing is created for it until it has one"
)
# A refused (foreign) object is looked at again this often; until then no create is tried.
FOREIGN_RECHECK_SECONDS = 60.0


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
    def __init__(self, ctx: ReconcileContext) -> None:
        self._ctx = ctx
        # (resource plural, namespace, name) -> (monotonic time a foreign object was last
        # confirmed, the advice given), so the condition message stays as it was until then.
        self._foreign: dict[tuple[str, str, str], tuple[float, str]] = {}

    async def ensure(
        self, cd: ComputeDomain, obj: dict[str, Any]
    ) -> tuple[dict[ChildKind, ChildState], float | None, bool]:
        """Each child's state, when to look again (set while a foreign object blocks one), and
        whether this call created any child."""
        caches, s = self._ctx.caches, self._ctx.settings
        states: dict[ChildKind, ChildState] = {}
        # What this reconcile created: one Event lists them all (one write, not one per child).
        created: list[tuple[str, dict[str, Any]]] = []
        if cd.spec is None:
            # The CRD admits a ComputeDomain without spec (as upstream); with no channel
            # template it cannot work, so no DaemonSet or claim template is made for it.
            return {ChildKind.SPEC: ChildState(ChildStatus.INVALID, SPEC_MISSING)}, None, False

        # Host-managed IMEX (§18): the workload RCT is the only child. A DaemonSet or daemon
        # RCT left from driverManaged is never deleted here (its daemons may serve a running
        # job); the conditions report it.
        inputs: Inputs | None = None
        for child in childkinds.in_mode(s.host_managed):
            if self._exists(child, cd, obj):
                states[child.kind] = ChildState(ChildStatus.OK)
                continue
            if inputs is None:
                # IMAGE_NAME, else the driver image NVIDIA's kubelet plugin runs beside the
                # daemons.
                image = daemon_image(
                    s.daemon.image, caches.nvidia_daemonsets.store.list(), s.driver_namespace
                )
                inputs = Inputs(replace(s.daemon, image=image), s.host_managed)
            states[child.kind] = await self._create(
                cd, obj, child.resource, child.build(cd, inputs), created=created
            )

        self._ctx.record_children(obj, "Created", created)
        blocked = any(state.status is ChildStatus.FOREIGN for state in states.values())
        return states, FOREIGN_RECHECK_SECONDS if blocked else None, bool(created)

    def _exists(self, child: Child, cd: ComputeDomain, obj: Mapping[str, Any]) -> bool:
        """Any child of this kind labelled with the CD's UID serves (one beside the daemons
        only in a managed namespace), including one made by an older controller with
        generateName, and so does an object at the child's own name carrying the UID: never
        create a second one."""
        caches, s = self._ctx.caches, self._ctx.settings
        uid = cd.metadata.uid
        found = caches.children_of(child, uid)
        if child.scope is Scope.DRIVER_NAMESPACE:
            found = [obj for obj in found if objects.namespace(obj) in s.managed_namespaces]
        if found:
            return True
        named = caches.child_at(child.resource, *child.locate(obj, s.driver_namespace))
        return named is not None and cd_uid_of(named) == uid

    async def _create(
        self,
        cd: ComputeDomain,
        cd_obj: Mapping[str, Any],
        res: Resource,
        body: dict[str, Any],
        *,
        created: list[tuple[str, dict[str, Any]]],
    ) -> ChildState:
        """Create one child; on success append what it is and a reference to ``created``."""
        ctx = self._ctx
        namespace = body["metadata"]["namespace"]
        name = body["metadata"]["name"]
        memo_key = (res.plural, namespace, name)
        confirmed = self._foreign.get(memo_key)
        if confirmed is not None and ctx.clock.now() - confirmed[0] < FOREIGN_RECHECK_SECONDS:
            return ChildState(ChildStatus.FOREIGN, confirmed[1])
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
