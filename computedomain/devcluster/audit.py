"""Reading the local apiserver's audit log: who wrote what (see components.AUDIT_POLICY).

The policy logs create/update/patch/delete requests of ServiceAccounts outside kube-system at
Metadata level, so a test can attribute every write to an identity, e.g. "our controller's
ServiceAccount wrote no DaemonSet during the swap".
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class AuditedWrite:
    user: str
    verb: str
    resource: str
    subresource: str
    namespace: str
    name: str
    code: int

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

    def writes(self, since: int = 0, user: str | None = None) -> list[AuditedWrite]:
        if not self.path.exists():
            return []
        with self.path.open("rb") as log:
            log.seek(since)
            lines = log.read().splitlines()
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
            found.append(
                AuditedWrite(
                    user=who,
                    verb=event.get("verb", ""),
                    resource=ref.get("resource", ""),
                    subresource=ref.get("subresource", ""),
                    namespace=ref.get("namespace", ""),
                    name=ref.get("name", ""),
                    code=int((event.get("responseStatus") or {}).get("code", 0)),
                )
            )
        return found


def tally(writes: Iterable[AuditedWrite]) -> dict[str, int]:
    """Writes per ``verb resource[/subresource]``, for printing."""
    counts: Counter[str] = Counter()
    for write in writes:
        sub = f"/{write.subresource}" if write.subresource else ""
        counts[f"{write.verb} {write.resource}{sub}"] += 1
    return dict(sorted(counts.items()))
