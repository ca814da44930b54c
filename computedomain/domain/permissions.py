"""The permissions the controller uses, and what it does where one is not granted.

An install may bind the controller to RBAC written for NVIDIA's controller (contract §12: its
charts and GPU Operator grant ``update`` but not ``patch`` on ComputeDomains, their status,
Nodes and ResourceClaimTemplates, and nothing on Events, CRDs or ServiceAccounts). The access
reviewed once at start (``runtime.access``) decides before the first request:

- a write whose ``patch`` is not granted goes by ``update`` (``runtime.updates.Patcher``), with
  the same effect and the same guards;
- Events not granted: none are recorded, said once;
- an informer that is a nicety, whose list/watch is not granted, does not run, and what it
  would tell counts as unknown (``Caches``): the CRDs (an outdated CRD is then learned from the
  first status write it prunes, ``status``), the daemon ServiceAccount (#586 goes unreported);
- anything else missing is named in one error line: the controller cannot work without it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from computedomain.api import constants as c
from computedomain.api.resources import CLIQUES, COMPUTE_DOMAINS
from computedomain.domain.caches import Caches
from computedomain.domain.crdschema import CD_CRD_NAME, CLIQUE_CRD_NAME
from computedomain.runtime import resources as r
from computedomain.runtime.access import Access, Permission, ReviewClient
from computedomain.runtime.events import EventRecorder
from computedomain.runtime.informer import Informer
from computedomain.runtime.resources import Resource

log = logging.getLogger(__name__)

EVENTS_CREATE = Permission("create", r.EVENTS)


def _list_watch(res: Resource, namespace: str = "", name: str = "") -> list[Permission]:
    return [Permission(verb, res, namespace=namespace, name=name) for verb in ("list", "watch")]


@dataclass(frozen=True)
class Write:
    """A resource the controller patches: by update where patch is not granted, which needs
    ``update`` and, to read the object again, ``get`` on it."""

    resource: Resource
    subresource: str = ""
    namespace: str = ""

    def permission(self, verb: str) -> Permission:
        # `get` is on the object itself: a status update reads the whole object.
        sub = "" if verb == "get" else self.subresource
        return Permission(verb, self.resource, sub, self.namespace)


def writes(namespaces: Sequence[str]) -> list[Write]:
    """What the controller patches: the CD's finalizer and status, the CD label of Nodes, and
    the finalizer of the CD's children (ResourceClaimTemplates anywhere, DaemonSets in the
    managed namespaces)."""
    return [
        Write(COMPUTE_DOMAINS),
        Write(COMPUTE_DOMAINS, "status"),
        Write(r.NODES),
        Write(r.RESOURCE_CLAIM_TEMPLATES),
        *(Write(r.DAEMONSETS, namespace=ns) for ns in namespaces),
    ]


def required(namespaces: Sequence[str], lease_namespace: str | None) -> list[Permission]:
    """What the controller cannot work without (besides a way to write each of ``writes``)."""
    needed = [
        *_list_watch(COMPUTE_DOMAINS),
        *_list_watch(r.RESOURCE_CLAIM_TEMPLATES),
        Permission("create", r.RESOURCE_CLAIM_TEMPLATES),
        Permission("delete", r.RESOURCE_CLAIM_TEMPLATES),
        *_list_watch(r.NODES),
        Permission("get", r.NODES),
    ]
    for ns in namespaces:
        needed += [
            *_list_watch(r.DAEMONSETS, ns),
            Permission("create", r.DAEMONSETS, namespace=ns),
            Permission("delete", r.DAEMONSETS, namespace=ns),
            *_list_watch(r.PODS, ns),
            *_list_watch(CLIQUES, ns),
            Permission("update", CLIQUES, namespace=ns),
        ]
    if lease_namespace is not None:
        needed += [
            Permission(verb, r.LEASES, namespace=lease_namespace)
            for verb in ("get", "create", "update")
        ]
    return needed


def optional_permissions(
    driver_namespace: str,
) -> tuple[tuple[list[Permission], str], ...]:
    """What the controller does without: the permissions of each informer that is a nicety,
    and what is lost without them. In order: the ComputeDomain CRD, the clique CRD, the daemon
    ServiceAccount, NVIDIA's controller pods, NVIDIA's kubelet plugin, foreign IMEX daemons."""
    crd = r.CUSTOM_RESOURCE_DEFINITIONS
    crd_lost = (
        "an outdated ComputeDomain CRD is learned from the first status write it prunes; "
        "a CRD not installed shows only as its objects' informer failing (404)"
    )
    return (
        (_list_watch(crd, name=CD_CRD_NAME), crd_lost),
        (_list_watch(crd, name=CLIQUE_CRD_NAME), crd_lost),
        (
            _list_watch(r.SERVICE_ACCOUNTS, driver_namespace, c.DAEMON_SERVICE_ACCOUNT),
            "a missing daemon ServiceAccount is not reported (DaemonServiceAccountMissing)",
        ),
        # A second controller, looked for in every namespace (coexistence): where the RBAC
        # grants it only in the driver namespace (NVIDIA's shapes: DaemonSets), that sign is
        # not seen, and the stand-by rests on the others.
        (
            _list_watch(r.PODS),
            "pods of NVIDIA's controller are not looked for (no stand-by for them)",
        ),
        (
            _list_watch(r.DAEMONSETS),
            "NVIDIA's kubelet plugin is not looked for: its namespace is not checked against "
            f"the driver namespace, and with IMAGE_NAME unset new IMEX daemons get "
            f"{c.NVIDIA_DRIVER_IMAGE}",
        ),
        (
            _list_watch(r.DAEMONSETS),
            "IMEX daemons another controller makes outside the driver namespace are not seen",
        ),
    )


def optional_informers(caches: Caches) -> list[tuple[Informer, list[Permission], str]]:
    """Informers the controller does without, the permissions each needs, and what is lost."""
    account = caches.service_accounts
    cd_crd, clique_crd, service_account, pods, plugin, foreign = optional_permissions(
        account.namespace or ""
    )
    return [
        (caches.crds, *cd_crd),
        (caches.clique_crds, *clique_crd),
        (account, *service_account),
        *((informer, *pods) for informer in caches.nvidia_controller_pods),
        (caches.nvidia_daemonsets, *plugin),
        (caches.foreign_daemonsets, *foreign),
    ]


async def review(
    client: ReviewClient,
    access: Access,
    caches: Caches,
    recorder: EventRecorder,
    namespaces: Sequence[str],
    lease_namespace: str | None,
) -> None:
    """Ask what this identity may do, then settle what it may not: writes by update, no
    Events, no optional informer it cannot run, one error line for what it cannot do without."""
    wanted = writes(namespaces)
    informers = optional_informers(caches)
    asked: list[Permission] = [
        *required(namespaces, lease_namespace),
        *(w.permission(verb) for w in wanted for verb in ("patch", "update", "get")),
        EVENTS_CREATE,
        *(p for _, permissions, _ in informers for p in permissions),
    ]
    await access.review(client, asked)

    missing = access.denied(required(namespaces, lease_namespace))
    by_update = [w for w in wanted if not access.allows(w.permission("patch"))]
    for w in by_update:
        missing += access.denied([w.permission("update"), w.permission("get")])
    if by_update:
        log.info(
            "Patch not granted on %s: written by update (PUT with the resourceVersion read)",
            ", ".join(w.permission("patch").what for w in by_update),
        )
    if missing:
        log.error(
            "This controller's RBAC lacks what it cannot work without: %s; grant them "
            "(manifests/rbac holds the rules it needs)",
            _names(dict.fromkeys(missing)),
        )
    if not access.allows(EVENTS_CREATE):
        recorder.disable(f"{EVENTS_CREATE} is not granted")
    unread: dict[str, list[Permission]] = {}  # what is lost -> the permissions missing
    for informer, permissions, lost in informers:
        denied = access.denied(permissions)
        if denied:
            informer.disable(f"{_names(denied)} not granted")
            unread.setdefault(lost, []).extend(denied)
    for lost, denied in unread.items():
        log.warning("Not granted %s: %s", _names(denied), lost)


def _names(permissions: Iterable[Permission]) -> str:
    """``list/watch serviceaccounts x in namespace y, patch nodes``: one entry per object."""
    verbs: dict[str, list[str]] = {}
    for p in permissions:
        verbs.setdefault(p.what, []).append(p.verb)
    return ", ".join(f"{'/'.join(dict.fromkeys(names))} {what}" for what, names in verbs.items())
