"""The kinds of child a ComputeDomain has, as data: one entry each (pure).

Everything that handles children reads this table instead of naming each kind: the live path
creates them in table order (``children``), the deletion removes them in ``deletion_order``
(``deletion``), the caches watch each resource once and index it by CD UID (``caches``), the
host-managed view names the kinds that mode leaves alone (``status``), the ChildrenReady
condition names them (``conditions``), and ``kubectl cdom describe`` lists them. A unit test
derives the controller's RBAC for children from ``verbs`` and compares it with ``api/rbac.py``
and the manifests.

A new child kind is a pure builder (``desired``), one ``ChildKind`` member and one ``Child``
entry here, and its RBAC (``api/rbac.py``, manifests/rbac, the chart).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from computedomain.api import constants as c
from computedomain.runtime import resources as r
from computedomain.runtime.resources import Resource

if TYPE_CHECKING:
    # The kubectl plugin reads this table too, and its zipapp carries no pydantic (compiled):
    # the models and the builders (``desired``) are imported only where a child is built.
    from computedomain.api.v1beta1 import ComputeDomain
    from computedomain.domain.settings import DaemonSettings


class ChildKind(enum.StrEnum):
    """What a CD's live path checks: its spec and each child kind (the keys of
    ``DomainView.children``; messages list them in the order of these values)."""

    SPEC = "spec"
    DAEMON_CLAIM_TEMPLATE = "daemonClaimTemplate"
    DAEMON_SET = "daemonSet"
    WORKLOAD_CLAIM_TEMPLATE = "workloadClaimTemplate"

    @property
    def display(self) -> str:
        return "spec" if self is ChildKind.SPEC else CHILD[self].display


class Scope(enum.Enum):
    """Where a child lives: beside the IMEX daemons (the driver namespace; the managed
    namespaces are searched for one made before the driver moved) or beside its CD."""

    DRIVER_NAMESPACE = "driver namespace"
    CD_NAMESPACE = "the ComputeDomain's namespace"


@dataclass(frozen=True)
class Inputs:
    """What a builder needs besides the CD: the daemon settings (with the image resolved) and
    the IMEX mode."""

    daemon: DaemonSettings
    host_managed: bool


Obj = dict[str, Any]


@dataclass(frozen=True, kw_only=True)
class Child:
    kind: ChildKind
    resource: Resource
    scope: Scope
    # The TARGET_LABEL value that tells this kind from another kind of the same resource.
    target: str | None
    # (namespace, name) of this CD's child, from the CD's object and the driver namespace: an
    # object there with the CD's UID label is ours.
    locate: Callable[[Mapping[str, Any], str], tuple[str, str]]
    build: Callable[[ComputeDomain, Inputs], Obj]
    # False: exists with driver-managed IMEX only. With host-managed IMEX (§18) such a child
    # is neither created nor deleted on a live CD (its daemons may serve a running job); the
    # ChildrenReady condition names it as a leftover, and the CD's deletion removes it.
    host_managed: bool
    # Lower goes first when a CD is deleted.
    deletion_order: int
    # How messages name it ("daemon DaemonSet").
    display: str
    # Every verb the controller uses on this kind's resource for it: list and watch (its
    # informer), create and get (a create, an AlreadyExists read), delete and patch (its
    # deletion and our finalizer's removal). The RBAC test derives the rules from these.
    verbs: tuple[str, ...]
    # What `kubectl cdom describe` says of one found (its readiness, when it has one).
    summary: Callable[[Mapping[str, Any]], str] = lambda _: "present"

    def in_mode(self, host_managed: bool) -> bool:
        """This kind exists for a live CD in this IMEX mode."""
        return self.host_managed or not host_managed


def _in_driver_namespace(cd: Mapping[str, Any], driver_namespace: str) -> tuple[str, str]:
    return driver_namespace, c.daemon_name(str(cd["metadata"]["uid"]))


def _channel_template(cd: Mapping[str, Any], driver_namespace: str) -> tuple[str, str]:
    channel = (cd.get("spec") or {}).get("channel") or {}
    template = (channel.get("resourceClaimTemplate") or {}).get("name") or ""
    return str(cd["metadata"]["namespace"]), str(template)


def _daemon_claim_template(cd: ComputeDomain, given: Inputs) -> Obj:
    from computedomain.domain import desired  # not at import: see TYPE_CHECKING above

    return desired.daemon_resource_claim_template(cd, given.daemon)


def _daemonset(cd: ComputeDomain, given: Inputs) -> Obj:
    from computedomain.domain import desired

    return desired.daemon_daemonset(cd, given.daemon)


def _workload_claim_template(cd: ComputeDomain, given: Inputs) -> Obj:
    from computedomain.domain import desired

    return desired.workload_resource_claim_template(cd, host_managed=given.host_managed)


def _daemonset_readiness(ds: Mapping[str, Any]) -> str:
    status = ds.get("status") or {}
    return f"{status.get('numberReady', 0)}/{status.get('desiredNumberScheduled', 0)} ready"


_CHILD_VERBS: Final = ("get", "list", "watch", "create", "delete", "patch")

# In creation order: the daemon RCT before the DaemonSet whose pods claim from it, the
# workload RCT last (a workload pod using it needs a daemon to join).
CHILDREN: Final[tuple[Child, ...]] = (
    Child(
        kind=ChildKind.DAEMON_CLAIM_TEMPLATE,
        resource=r.RESOURCE_CLAIM_TEMPLATES,
        scope=Scope.DRIVER_NAMESPACE,
        target=c.TARGET_DAEMON,
        locate=_in_driver_namespace,
        build=_daemon_claim_template,
        host_managed=False,
        deletion_order=1,
        display="daemon ResourceClaimTemplate",
        verbs=_CHILD_VERBS,
    ),
    Child(
        kind=ChildKind.DAEMON_SET,
        resource=r.DAEMONSETS,
        scope=Scope.DRIVER_NAMESPACE,
        target=None,
        locate=_in_driver_namespace,
        build=_daemonset,
        host_managed=False,
        # Last: its daemons keep serving while the claim templates go.
        deletion_order=2,
        display="daemon DaemonSet",
        verbs=_CHILD_VERBS,
        summary=_daemonset_readiness,
    ),
    Child(
        kind=ChildKind.WORKLOAD_CLAIM_TEMPLATE,
        resource=r.RESOURCE_CLAIM_TEMPLATES,
        scope=Scope.CD_NAMESPACE,
        target=c.TARGET_WORKLOAD,
        locate=_channel_template,
        build=_workload_claim_template,
        host_managed=True,
        # First: no new workload pod can claim a channel of a domain going away.
        deletion_order=0,
        display="workload ResourceClaimTemplate",
        verbs=_CHILD_VERBS,
    ),
)
CHILD: Final[Mapping[ChildKind, Child]] = {child.kind: child for child in CHILDREN}


def in_mode(host_managed: bool) -> tuple[Child, ...]:
    """The kinds a live CD has in this IMEX mode, in creation order."""
    return tuple(child for child in CHILDREN if child.in_mode(host_managed))


def by_deletion_order() -> tuple[Child, ...]:
    return tuple(sorted(CHILDREN, key=lambda child: child.deletion_order))


def resources() -> tuple[Resource, ...]:
    """Each resource some child kind is of, once, in table order."""
    return tuple(dict.fromkeys(child.resource for child in CHILDREN))


def of_resource(resource: Resource) -> tuple[Child, ...]:
    return tuple(child for child in CHILDREN if child.resource is resource)


def watched_everywhere(resource: Resource) -> bool:
    """A kind of it lives beside its CD, in any namespace: one informer over all namespaces
    (else one per managed namespace)."""
    return any(child.scope is Scope.CD_NAMESPACE for child in of_resource(resource))


def is_of(child: Child, obj: Mapping[str, Any]) -> bool:
    """``obj`` (of ``child.resource``) is of this kind, by its target label."""
    return child.target is None or _target(obj) == child.target


def unclaimed(resource: Resource, found: Iterable[Obj]) -> list[Obj]:
    """Objects of ``resource`` that no kind's target label claims (e.g. an older controller's
    without the label): a CD's deletion removes them with the last kind of that resource."""
    kinds = of_resource(resource)
    return [obj for obj in found if not any(is_of(child, obj) for child in kinds)]


def _target(obj: Mapping[str, Any]) -> str | None:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    value = labels.get(c.TARGET_LABEL)
    return str(value) if value is not None else None


def sentence(kinds: Iterable[Child], conjunction: str = "and") -> str:
    """``a, b and c`` (or ``a, b or c``), by display name."""
    names = [child.display for child in kinds]
    if len(names) == 1:
        return names[0]
    return f"{', '.join(names[:-1])} {conjunction} {names[-1]}"
