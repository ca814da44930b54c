"""API errors, apart from the client so that modules which only classify errors (the controller,
logging, the CLI) do not import kubernetes_asyncio, whose import alone takes seconds."""

from __future__ import annotations

import re
from typing import Any

# The reason of the ApiError a fenced client raises instead of sending a write (status 0: the
# apiserver never saw it): this replica could not prove it holds its leader lease.
FENCED_REASON = "LeaseNotHeld"
# The authorizer's words (apiserver's forbiddenMessage): `User "x" cannot patch resource "nodes"`.
_AUTHORIZER_DENIAL = re.compile(r'User ".*" cannot \S+ (resource|path) ')


class ApiError(Exception):
    """A non-2xx answer from the apiserver (or an ERROR event on a watch)."""

    def __init__(
        self,
        status: int,
        reason: str = "",
        message: str = "",
        *,
        retry_after: float | None = None,
        body: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(f"{status} {reason}: {message}" if reason else f"{status}: {message}")
        self.status = status
        self.reason = reason
        self.message = message
        self.retry_after = retry_after
        self.body = body

    @classmethod
    def from_status(
        cls, http_status: int, body: dict[str, Any] | None, retry_after: float | None = None
    ) -> ApiError:
        """Build from a ``Status`` object; ``body.code`` wins over the HTTP status."""
        body = body if isinstance(body, dict) else None
        status = http_status
        reason = ""
        message = ""
        if body is not None and body.get("kind") == "Status":
            code = body.get("code")
            if isinstance(code, int) and code > 0:
                status = code
            reason = str(body.get("reason") or "")
            message = str(body.get("message") or "")
        return cls(status, reason, message, retry_after=retry_after, body=body)

    @property
    def is_not_found(self) -> bool:
        return self.status == 404

    @property
    def is_conflict(self) -> bool:
        return self.status == 409 and self.reason != "AlreadyExists"

    @property
    def is_already_exists(self) -> bool:
        return self.status == 409 and self.reason == "AlreadyExists"

    @property
    def is_invalid(self) -> bool:
        return self.status == 422

    @property
    def is_forbidden(self) -> bool:
        return self.status == 403

    @property
    def is_denied(self) -> bool:
        """A 403 from the authorizer: this identity lacks the verb (RBAC). Not every 403 is one:
        a namespace being deleted refuses new objects with a 403, and so may admission."""
        return self.status == 403 and bool(_AUTHORIZER_DENIAL.search(self.message))

    @property
    def is_too_many_requests(self) -> bool:
        return self.status == 429

    @property
    def is_fenced(self) -> bool:
        """Refused by the client's write fence, never sent (``KubeClient.write_fence``)."""
        return self.status == 0 and self.reason == FENCED_REASON

    @property
    def is_gone(self) -> bool:
        """The resourceVersion is too old (410 Gone / Expired)."""
        return self.status == 410


class StartupError(Exception):
    """The process cannot start (unusable credentials, a port it cannot bind); the message is
    one line that says why, for the CLI to print instead of a traceback."""
