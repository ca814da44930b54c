"""Work-queue keys of the ComputeDomain controller, typed, with one parser.

The controller's work queue holds these keys (``WorkQueue[QueueKey]``); ``str()`` names one in
logs:

- ``CDKey``, ``<namespace>/<name>``: reconcile the ComputeDomain of that name;
- ``OrphanKey``, ``orphan:<uid>``: remove what still names the CD UID ``uid`` when no CD has it
  any more.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from computedomain.runtime.objects import name, namespace, object_key

ORPHAN_PREFIX = "orphan:"


@dataclass(frozen=True)
class CDKey:
    namespace: str
    name: str

    @classmethod
    def of(cls, cd: Mapping[str, Any]) -> CDKey:
        return cls(namespace(cd) or "", name(cd))

    @property
    def store_key(self) -> str:
        """The key of this CD in an informer's store."""
        return object_key({"metadata": {"namespace": self.namespace, "name": self.name}})

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class OrphanKey:
    uid: str

    def __str__(self) -> str:
        return f"{ORPHAN_PREFIX}{self.uid}"


QueueKey = CDKey | OrphanKey
