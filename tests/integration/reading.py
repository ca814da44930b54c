"""Small readers for test assertions; waiting itself is computedomain.devcluster.watching."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def labels(obj: Mapping[str, Any] | None) -> dict[str, str]:
    return dict(((obj or {}).get("metadata") or {}).get("labels") or {})


def condition(obj: Mapping[str, Any] | None, ctype: str) -> dict[str, Any]:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == ctype:
            return dict(cond)
    return {}
