"""What this process may do, asked once at start with SelfSubjectAccessReviews.

An install may bind the controller to RBAC written for another controller (NVIDIA's charts and
GPU Operator grant ``update`` but not ``patch`` on some resources, and no Events). The callers
choose by the answers: a write by update where patch is not granted (``updates.Patcher``), no
Events, no informer on what may not be read.

Why ask at start rather than learn from the first 403: asking sends no request that fails, so
neither the 403 counters nor the logs show a refused write in the steady state, and the same
answers decide the optional informers before they list (a 403 there would retry forever) and
name, in one line, what is missing that the controller cannot work without. Every authenticated
user may create SelfSubjectAccessReviews (the default ``system:basic-user`` binding); where a
review cannot be had, the permission counts as granted (the request itself then tells), and a
403 met later (RBAC edited while running) is remembered through ``deny``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any, Protocol

import aiohttp

from computedomain.runtime.errors import ApiError
from computedomain.runtime.resources import Resource

log = logging.getLogger(__name__)

SELF_SUBJECT_ACCESS_REVIEWS = Resource(
    "authorization.k8s.io", "v1", "selfsubjectaccessreviews", "SelfSubjectAccessReview", False
)


# SelfSubjectAccessReviews sent at once at start (see Access.review).
REVIEWS_IN_FLIGHT = 4


class ReviewClient(Protocol):
    async def create(
        self, res: Resource, body: dict[str, Any], namespace: str | None = None
    ) -> dict[str, Any]: ...


@dataclass(frozen=True)
class Permission:
    """One verb on one resource: in one namespace, or ``namespace=""`` for all of them (and
    for cluster-scoped resources); ``name`` narrows it to one object."""

    verb: str
    resource: Resource
    subresource: str = ""
    namespace: str = ""
    name: str = ""

    def __str__(self) -> str:
        return f"{self.verb} {self.what}"

    @property
    def what(self) -> str:
        """What the verb applies to, as RBAC names it: ``daemonsets.apps in namespace x``."""
        text = self.resource.plural + (f"/{self.subresource}" if self.subresource else "")
        if self.resource.group:
            text += f".{self.resource.group}"
        if self.name:
            text += f" {self.name}"
        if self.namespace:
            text += f" in namespace {self.namespace}"
        elif self.resource.namespaced:
            text += " in every namespace"
        return text

    def attributes(self) -> dict[str, str]:
        """The SelfSubjectAccessReview's resourceAttributes."""
        attributes = {
            "verb": self.verb,
            "group": self.resource.group,
            "version": self.resource.version,
            "resource": self.resource.plural,
        }
        for key in ("subresource", "namespace", "name"):
            if value := getattr(self, key):
                attributes[key] = value
        return attributes


class Access:
    """The answers of the reviews; a permission never reviewed counts as granted."""

    def __init__(self) -> None:
        self._answers: dict[Permission, bool] = {}

    def allows(self, permission: Permission) -> bool:
        """Granted, as reviewed in its namespace, else as reviewed for every namespace."""
        answer = self._answers.get(permission)
        if answer is None and permission.namespace:
            answer = self._answers.get(replace(permission, namespace=""))
        return True if answer is None else answer

    def denied(self, permissions: Iterable[Permission]) -> list[Permission]:
        return [p for p in permissions if not self.allows(p)]

    def deny(self, permission: Permission) -> bool:
        """Remember a refusal met at run time; False if it was known already."""
        known = self._answers.get(permission) is False
        self._answers[permission] = False
        return not known

    async def review(self, client: ReviewClient, permissions: Iterable[Permission]) -> None:
        """Ask for each permission, a few at a time; one that cannot be asked stays unknown
        (granted)."""
        wanted = list(dict.fromkeys(permissions))
        # A few at a time: all at once opened a connection each (~45), and the process kept
        # their ~8 MiB for its life (bench: RSS at first reconcile 58.9 -> 66.8 MiB).
        in_flight = asyncio.Semaphore(REVIEWS_IN_FLIGHT)

        async def ask(permission: Permission) -> bool | None:
            async with in_flight:
                return await ask_one(permission)

        async def ask_one(permission: Permission) -> bool | None:
            body = {
                "apiVersion": SELF_SUBJECT_ACCESS_REVIEWS.api_version,
                "kind": SELF_SUBJECT_ACCESS_REVIEWS.kind,
                "spec": {"resourceAttributes": permission.attributes()},
            }
            try:
                answer = await client.create(SELF_SUBJECT_ACCESS_REVIEWS, body)
            except (ApiError, aiohttp.ClientError, OSError, TimeoutError) as error:
                failures.append(error)
                return None
            return bool((answer.get("status") or {}).get("allowed"))

        failures: list[Exception] = []
        answers = await asyncio.gather(*(ask(p) for p in wanted))
        for permission, answer in zip(wanted, answers, strict=True):
            if answer is not None:
                self._answers[permission] = answer
        if failures:
            log.warning(
                "Could not review this controller's permissions (create "
                "selfsubjectaccessreviews.authorization.k8s.io): each is assumed granted, and "
                "a write refused with 403 later is written another way if it can be",
                extra={"err": str(failures[0]), "failed": len(failures)},
            )
