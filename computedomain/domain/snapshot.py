"""One ComputeDomain as the caches showed it at the start of a reconcile (pure value;
``observe`` reads it).

The live path decides from this value (``plan``) instead of asking the caches again in each
step, and passes it whole instead of the CD's model and raw object side by side. What the
status projection reads beyond this CD (other CDs' nodes in its cliques, the fleet's Nodes) is
still read where it is projected (``status.StatusWriter.domain_view``), and so are the clique
entries: the clique pruning of the same reconcile rewrites them before the status is projected.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from computedomain.api.v1beta1 import ComputeDomain
from computedomain.domain import projection
from computedomain.domain.childkinds import ChildKind, Inputs
from computedomain.domain.modes import StatusMode


@dataclass(frozen=True)
class DomainSnapshot:
    """One CD and what the caches hold of it, as read at one moment (never updated in place)."""

    cd: ComputeDomain
    # The CD as read, whole (the cache keeps CDs whole): a patch is guarded by its
    # resourceVersion, and an update (where patch is not granted) sends it back changed.
    obj: Mapping[str, Any]
    mode: StatusMode
    # Its children of each kind, labelled with its UID (every kind, also those of the other mode).
    children: Mapping[ChildKind, tuple[Mapping[str, Any], ...]]
    # The kinds of this IMEX mode that already have a child of this CD (``plan`` creates the rest).
    present: frozenset[ChildKind]
    pods: tuple[projection.DaemonPod, ...]
    # The Nodes labelled for it (names).
    labelled_nodes: frozenset[str]
    # What a builder needs, resolved only when a child of this mode is missing (else None).
    inputs: Inputs | None

    @property
    def uid(self) -> str:
        return self.cd.metadata.uid

    def rebased(self, obj: Mapping[str, Any]) -> DomainSnapshot:
        """The same observation of the CD's children and pods, on the CD as we just wrote it."""
        return replace(self, cd=ComputeDomain.model_validate(obj), obj=obj)
