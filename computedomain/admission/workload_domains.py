"""The ComputeDomain of an opted-in workload, created at its first pod's admission.

The webhook creates it, not the controller watching workloads: the webhook already sees each
pod of the workload (the annotation, the owner's name and UID in the pod's ownerReference) at
the moment the pod needs the CD's claim, so no informer on every Job and StatefulSet of the
cluster is added, and the CD exists before the pod does. Every pod's admission asks for it
(create-if-absent: AlreadyExists is the usual answer after the first); a replica's cache
spares the POST once it has the CD. Any replica may create it, leader or not: a create of one
name is its own precondition.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from computedomain.api.resources import COMPUTE_DOMAINS
from computedomain.domain.caches import Caches
from computedomain.domain.keys import CDKey
from computedomain.domain.workload_domain import WorkloadDomain, domain_body, owned_by
from computedomain.runtime.client import KubeClient
from computedomain.runtime.errors import ApiError


async def listed_by_name(client: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    """The CD as stored now, by a LIST by name: the controller's RBAC grants list on
    ComputeDomains, not get (api/rbac.py)."""
    listed = await client.list(
        COMPUTE_DOMAINS, namespace=namespace, field_selector=f"metadata.name={name}"
    )
    for found in listed["items"]:
        return dict(found)
    raise RuntimeError(f"ComputeDomain {namespace}/{name} is not listed")


class NotTheWorkloadsDomainError(RuntimeError):
    """A CD of the workload's CD name exists and is not owned by the workload."""


class WorkloadDomains:
    def __init__(self, client: KubeClient, caches: Caches) -> None:
        self._client = client
        self._caches = caches

    async def ensure(self, namespace: str, domain: WorkloadDomain) -> Mapping[str, Any]:
        """The workload's CD: from the cache, created, or (created by another admission a
        moment ago) listed."""
        cd: Mapping[str, Any] | None = self._caches.compute_domain(CDKey(namespace, domain.name))
        if cd is None:
            try:
                cd = await self._client.create(COMPUTE_DOMAINS, domain_body(domain), namespace)
            except ApiError as err:
                if not err.is_already_exists:
                    raise
                cd = await listed_by_name(self._client, namespace, domain.name)
        if not owned_by(cd, domain):
            raise NotTheWorkloadsDomainError(
                f"ComputeDomain {namespace}/{domain.name} exists and is not owned by "
                f"{domain.kind} {domain.workload}: its pods are not wired to it"
            )
        return cd
