"""Work-queue keys of the ComputeDomain controller, typed, with one parser.

The generic work queue holds strings; this module alone knows their grammar:

- ``<namespace>/<name>``: reconcile the ComputeDomain of that name;
- ``orphan:<uid>``: remove what still names the CD UID ``uid`` when no CD has it any more.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from computedomain.runtime.objects import name, namespace

ORPHAN_PREFIX = "orphan:"


@dataclass(frozen=True)
class CDKey:
    namespace: str
    name: str

    @classmethod
    def of(cls, cd: Mapping[str, Any]) -> CDKey:
        return cls(namespace(cd) or "", name(cd))

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class OrphanKey:
    uid: str

    def __str__(self) -> str:
        return f"{ORPHAN_PREFIX}{self.uid}"


QueueKey = CDKey | OrphanKey


def parse_key(key: str) -> QueueKey:
    """The typed key of a queue string (the inverse of ``str(key)``)."""
    if key.startswith(ORPHAN_PREFIX):
        return OrphanKey(key.removeprefix(ORPHAN_PREFIX))
    ns, _, cd_name = key.rpartition("/")
    return CDKey(ns, cd_name)
