"""Plan: what the live path of one ComputeDomain writes, decided from a snapshot (pure).

``plan_live`` reads only its arguments (the ``snapshot`` observed once, the refusals this
process remembers, the time) and returns a ``Plan``; the reconciler's executor applies it
(``children.ChildMaker.act``: the finalizer patch, the creates, their Event), with the
apiserver's answers (a conflict, an AlreadyExists, a namespace being deleted) handled there as
before. A steady state plans nothing: an empty plan, no write.

Planned here: our finalizer and the missing children. The status (projection, conditions,
coalescing, its Events and metrics) and the clique pruning are still decided and written by
``status`` and ``pruning`` after the plan is applied.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from computedomain.api import constants as c
from computedomain.domain import childkinds
from computedomain.domain.childkinds import ChildKind
from computedomain.domain.conditions import ChildState, ChildStatus
from computedomain.domain.snapshot import DomainSnapshot
from computedomain.runtime import patches
from computedomain.runtime.resources import Resource

SPEC_MISSING = (
    "spec is missing: a ComputeDomain needs spec.channel.resourceClaimTemplate.name (and "
    "optionally spec.numNodes); nothing is created for it until it has one"
)
# A refused (foreign) object is looked at again this often; until then no create is tried.
FOREIGN_RECHECK_SECONDS = 60.0

# (resource plural, namespace, name) of a refused object -> (monotonic time the refusal was
# last confirmed, the advice given then).
Refusals = Mapping[tuple[str, str, str], tuple[float, str]]


@dataclass(frozen=True)
class Create:
    kind: ChildKind
    resource: Resource
    body: dict[str, Any]

    @property
    def refusal_key(self) -> tuple[str, str, str]:
        meta = self.body["metadata"]
        return self.resource.plural, str(meta["namespace"]), str(meta["name"])


@dataclass(frozen=True)
class Plan:
    """The writes of one live reconcile, in the order they go out."""

    # Ours added to the CD's finalizers (a JSON patch guarded by the resourceVersion read),
    # before any child: no child may exist that a deletion would not clean up.
    finalizer: patches.Patch | None = None
    creates: tuple[Create, ...] = ()
    # What is known of each checked kind without a write: present, refused until the
    # recheck, or the spec invalid. A planned create's kind is absent (its answer decides).
    known: Mapping[ChildKind, ChildState] = field(default_factory=dict)
    # When to look again, whatever the writes answer (a refusal's recheck).
    requeue_after: float | None = None

    @property
    def writes(self) -> bool:
        return self.finalizer is not None or bool(self.creates)


def plan_live(snapshot: DomainSnapshot, refused: Refusals, now: float) -> Plan:
    """The finalizer and the children of a live CD: each kind of its IMEX mode that has no
    child of this CD is created, unless an object at its name was refused less than
    ``FOREIGN_RECHECK_SECONDS`` ago (then it stays refused with the advice given)."""
    finalizer = patches.add_finalizer(snapshot.obj, c.FINALIZER)
    cd = snapshot.cd
    if cd.spec is None:
        # The CRD admits a ComputeDomain without spec (as upstream); with no channel template
        # it cannot work, so no DaemonSet or claim template is made for it.
        return Plan(
            finalizer, known={ChildKind.SPEC: ChildState(ChildStatus.INVALID, SPEC_MISSING)}
        )
    known: dict[ChildKind, ChildState] = {}
    creates: list[Create] = []
    # Host-managed IMEX (§18): the workload RCT is the only child. A DaemonSet or daemon RCT
    # left from driverManaged is never deleted here (its daemons may serve a running job); the
    # conditions report it.
    for child in childkinds.in_mode(snapshot.mode.host_managed):
        if child.kind in snapshot.present:
            known[child.kind] = ChildState(ChildStatus.OK)
            continue
        assert snapshot.inputs is not None  # observed whenever a kind of this mode is missing
        create = Create(child.kind, child.resource, child.build(cd, snapshot.inputs))
        confirmed = refused.get(create.refusal_key)
        if confirmed is not None and now - confirmed[0] < FOREIGN_RECHECK_SECONDS:
            known[child.kind] = ChildState(ChildStatus.FOREIGN, confirmed[1])
        else:
            creates.append(create)
    blocked = any(state.status is ChildStatus.FOREIGN for state in known.values())
    return Plan(
        finalizer,
        tuple(creates),
        known,
        requeue_after=FOREIGN_RECHECK_SECONDS if blocked else None,
    )
