"""Reading the local apiserver's audit log: who wrote what (see components.AUDIT_POLICY).

The policy logs create/update/patch/delete requests of ServiceAccounts outside kube-system at
Metadata level, so a test can attribute every write to an identity, e.g. "our controller's
ServiceAccount wrote no DaemonSet during the swap", and every pod DELETE and ResourceClaim
write whoever makes it, so a test can order a write after the release of a workload's claims.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from computedomain.runtime.clock import parse_time

# The pod a pod-bound ServiceAccount token belongs to, in the request's user info.
POD_NAME_EXTRA = "authentication.kubernetes.io/pod-name"


@dataclass(frozen=True)
class AuditedWrite:
    user: str
    verb: str
    resource: str
    subresource: str
    namespace: str
    name: str
    code: int
    # The pod of a pod-bound token ("" for other credentials), and when the apiserver received
    # and answered the request (seconds since the epoch).
    pod: str = ""
    received: float = 0.0
    completed: float = 0.0
    # A server-side dry run (`?dryRun=All`): admitted and validated, but nothing was stored.
    dry_run: bool = False

    @property
    def target(self) -> str:
        sub = f"/{self.subresource}" if self.subresource else ""
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{self.verb} {self.resource}{sub} {where}{self.name}"


def service_account_user(namespace: str, name: str) -> str:
    return f"system:serviceaccount:{namespace}:{name}"


class AuditLog:
    """An append-only JSON-lines file read from a remembered offset."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def mark(self) -> int:
        """The current end of the log: writes after this point are read with ``since=``."""
        return self.path.stat().st_size if self.path.exists() else 0

    def writes(
        self, since: int = 0, user: str | None = None, until: int | None = None
    ) -> list[AuditedWrite]:
        """Writes logged after the mark ``since`` and, given ``until`` (another mark), before it."""
        if not self.path.exists():
            return []
        with self.path.open("rb") as log:
            log.seek(since)
            lines = log.read(-1 if until is None else max(until - since, 0)).splitlines()
        found = []
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:  # a line still being written
                continue
            if event.get("stage") != "ResponseComplete":
                continue
            who = (event.get("user") or {}).get("username", "")
            if user is not None and who != user:
                continue
            ref = event.get("objectRef") or {}
            pods = ((event.get("user") or {}).get("extra") or {}).get(POD_NAME_EXTRA) or [""]
            found.append(
                AuditedWrite(
                    user=who,
                    verb=event.get("verb", ""),
                    resource=ref.get("resource", ""),
                    subresource=ref.get("subresource", ""),
                    namespace=ref.get("namespace", ""),
                    name=ref.get("name", ""),
                    code=int((event.get("responseStatus") or {}).get("code", 0)),
                    pod=str(pods[0]),
                    received=_epoch(event.get("requestReceivedTimestamp")),
                    completed=_epoch(event.get("stageTimestamp")),
                    dry_run="dryRun=All" in str(event.get("requestURI", "")),
                )
            )
        return found


def _epoch(stamp: Any) -> float:
    """An audit timestamp (a MicroTime) as seconds since the epoch; 0 if none."""
    return parse_time(stamp).timestamp() if isinstance(stamp, str) and stamp else 0.0


def tally(writes: Iterable[AuditedWrite]) -> dict[str, int]:
    """Writes per ``verb resource[/subresource]``, for printing."""
    counts: Counter[str] = Counter()
    for write in writes:
        sub = f"/{write.subresource}" if write.subresource else ""
        counts[f"{write.verb} {write.resource}{sub}"] += 1
    return dict(sorted(counts.items()))
