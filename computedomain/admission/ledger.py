"""The placement decisions of every replica, one after another: a Lease as their ledger.

Each replica decides with its own caches, and sees another replica's decision only when its
informer brings the CD's annotation back. Two CDs decided in the same moment by two replicas
could so both be promised the one clique with room for a single job (its last pods then stay
Pending). So, before its decision is written on the CD, a replica writes it into this Lease,
with the Lease's resourceVersion as the precondition: of two concurrent decisions one write
wins, the other is refused (409), and that replica reads the Lease again and decides with the
first one's promise counted. A promise is kept ``PROMISE_TTL_SECONDS``: long enough for every
replica's informer to bring the CD's annotation, which then counts instead.

The Lease (``computedomain-placement`` in the leader-election Lease's namespace) is used only
with leader election on (several replicas): its Role (get, create, update on Leases) is the one
leader election has. Nothing holds it: it is a record, not a lock.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from computedomain.runtime import objects
from computedomain.runtime.client import KubeClient
from computedomain.runtime.errors import ApiError
from computedomain.runtime.resources import LEASES

LEDGER_NAME = "computedomain-placement"
PROMISES_ANNOTATION = "placement.computedomain.io/promises"
PROMISE_TTL_SECONDS = 300.0


@dataclass(frozen=True)
class Promise:
    """One CD's decision: its clique ("" none fitted), the nodes promised, when, and the CD's
    ``namespace/name`` (how capacity rows name the domains holding nodes)."""

    domain: str
    clique: str
    size: int
    at: float


@dataclass(frozen=True)
class LedgerState:
    """The Lease as read (None: not created yet) and its promises by CD UID."""

    lease: Mapping[str, Any] | None
    promises: Mapping[str, Promise]


def parse_promises(lease: Mapping[str, Any] | None) -> dict[str, Promise]:
    """The promises in the Lease's annotation; none from a missing or unreadable one (a ledger
    that cannot be read must not stop admission: the next write replaces it)."""
    annotations = objects.meta(lease).get("annotations") or {}
    try:
        raw = json.loads(annotations.get(PROMISES_ANNOTATION) or "{}")
        return {
            str(uid): Promise(str(p["domain"]), str(p["clique"]), int(p["size"]), float(p["at"]))
            for uid, p in raw.items()
        }
    except (ValueError, TypeError, KeyError, AttributeError):
        return {}


def with_promise(
    promises: Mapping[str, Promise], uid: str, promise: Promise, now: float
) -> dict[str, Promise]:
    """The promises to write: the expired ones left out, ``promise`` added."""
    kept = {u: p for u, p in promises.items() if now - p.at < PROMISE_TTL_SECONDS}
    kept[uid] = promise
    return kept


class Ledger:
    def __init__(
        self, client: KubeClient, namespace: str, now: Callable[[], float] = time.time
    ) -> None:
        self._client = client
        self._namespace = namespace
        self._now = now

    async def read(self) -> LedgerState:
        try:
            lease = await self._client.get(LEASES, LEDGER_NAME, self._namespace)
        except ApiError as err:
            if not err.is_not_found:
                raise
            return LedgerState(None, {})
        return LedgerState(lease, parse_promises(lease))

    async def promise(
        self, state: LedgerState, uid: str, domain: str, clique: str, size: int
    ) -> bool:
        """Write the promise on the Lease as read; False when another write came first (read
        again and decide again)."""
        now = self._now()
        promises = with_promise(state.promises, uid, Promise(domain, clique, size, now), now)
        text = json.dumps(
            {u: {"domain": p.domain, "clique": p.clique, "size": p.size, "at": round(p.at, 3)}
             for u, p in sorted(promises.items())},
            separators=(",", ":"),
        )  # fmt: skip
        try:
            if state.lease is None:
                await self._client.create(
                    LEASES,
                    {
                        "apiVersion": "coordination.k8s.io/v1",
                        "kind": "Lease",
                        "metadata": {
                            "name": LEDGER_NAME,
                            "annotations": {PROMISES_ANNOTATION: text},
                        },
                        "spec": {},
                    },
                    self._namespace,
                )
            else:
                body = dict(state.lease)
                meta = dict(objects.meta(body))
                meta["annotations"] = {**(meta.get("annotations") or {}), PROMISES_ANNOTATION: text}
                body["metadata"] = meta
                await self._client.replace(LEASES, body, self._namespace)
        except ApiError as err:
            if err.is_conflict or err.is_already_exists:
                return False
            raise
        return True
