"""A patch where RBAC grants ``patch``, else the same change by update.

NVIDIA's charts and GPU Operator grant their controller ``update`` but not ``patch`` on some
resources; a controller running under that RBAC writes those by update instead: the object as
read, changed here exactly as the patch would change it (``patches.apply``, with the patch's own
refusals: a failed ``test`` is the apiserver's 422, a patch pinned to another resourceVersion
its 409), then PUT with the resourceVersion read, so the apiserver refuses it (409) if the
object moved meanwhile. A 409 is retried from a fresh read, where the change is checked again
(a label that now names someone else fails its ``test`` there); a patch pinned to the version
it was made from is not retried (its 409 goes to the caller, which recomputes from its caches,
as for a patch).

Where ``patch`` is granted nothing changes: one PATCH, as before. Which one it is comes from
``access.Access`` (reviewed at start); a PATCH refused by the authorizer anyway (RBAC edited
while running) switches that permission to update for the rest of the process, said once.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Literal, Protocol

from computedomain.runtime import patches
from computedomain.runtime.access import Access, Permission
from computedomain.runtime.errors import ApiError
from computedomain.runtime.resources import Resource

log = logging.getLogger(__name__)

# Updates of one object that meet a 409 before one goes through (client-go's RetryOnConflict
# tries 5 times).
UPDATE_ATTEMPTS = 5


class PatchClient(Protocol):
    async def get(
        self, res: Resource, name: str, namespace: str | None = None
    ) -> dict[str, Any]: ...

    async def patch(
        self,
        res: Resource,
        name: str,
        patch: Any,
        namespace: str | None = None,
        patch_type: Literal["merge", "json", "apply", "strategic"] = "merge",
        subresource: str | None = None,
    ) -> dict[str, Any]: ...

    async def replace(
        self,
        res: Resource,
        body: dict[str, Any],
        namespace: str | None = None,
        subresource: str | None = None,
    ) -> dict[str, Any]: ...


class Patcher:
    def __init__(
        self, client: PatchClient, access: Access | None = None, attempts: int = UPDATE_ATTEMPTS
    ) -> None:
        self.client = client
        self.access = access if access is not None else Access()
        self.attempts = attempts

    async def patch(
        self,
        res: Resource,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        patch_type: Literal["merge", "json"],
        subresource: str | None = None,
        current: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The object as written. ``current``: the object as last read, whole (it is sent back
        by an update: never a trimmed cache copy); None reads it first when an update is due."""
        permission = Permission("patch", res, subresource or "", namespace or "")
        if self.access.allows(permission):
            try:
                return await self.client.patch(
                    res, name, patch, namespace, patch_type=patch_type, subresource=subresource
                )
            except ApiError as error:
                if not error.is_denied:
                    raise
                if self.access.deny(permission):
                    log.warning(
                        "Patch refused (%s not granted): writing by update from now on",
                        permission,
                        extra={"err": str(error)},
                    )
        return await self.update(res, name, patch, namespace, patch_type, subresource, current)

    async def update(
        self,
        res: Resource,
        name: str,
        patch: Any,
        namespace: str | None,
        patch_type: Literal["merge", "json"],
        subresource: str | None = None,
        current: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """The patch's change by update: read (unless given), change, PUT; a 409 reads again."""
        obj = current if current is not None else await self.client.get(res, name, namespace)
        pinned = patches.pinned_version(patch, patch_type) is not None
        for attempt in range(1, self.attempts + 1):
            body = patches.apply(obj, patch, patch_type)
            try:
                return await self.client.replace(res, body, namespace, subresource)
            except ApiError as error:
                if not error.is_conflict or pinned or attempt == self.attempts:
                    raise
            obj = await self.client.get(res, name, namespace)
        raise AssertionError("unreachable")
