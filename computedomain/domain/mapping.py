"""Which ComputeDomain(s) an object concerns: pure helpers for the event handlers.

Children live in another namespace than their CD, so no ownerReference links them; the CD
label (value = CD UID) does, and clique names carry the UID as their first dotted part.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from computedomain.api import constants as c


def _labels(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return labels if isinstance(labels, Mapping) else {}


def cd_uid_of(obj: Mapping[str, Any]) -> str | None:
    """The CD UID in the object's CD label (DaemonSets, RCTs, daemon pods, Nodes, cliques)."""
    value = _labels(obj).get(c.CD_LABEL)
    return value if isinstance(value, str) and value else None


def split_clique_name(name: str) -> tuple[str, str] | None:
    """``<cdUID>.<cliqueID>`` → (cdUID, cliqueID); None when the name has no dot."""
    uid, dot, clique_id = name.partition(".")
    if not dot or not uid or not clique_id:
        return None
    return uid, clique_id


def cd_uids_of_clique(obj: Mapping[str, Any]) -> list[str]:
    """CD UIDs a clique names, by label and by name (both normally agree)."""
    uids: list[str] = []
    labelled = cd_uid_of(obj)
    if labelled:
        uids.append(labelled)
    parsed = split_clique_name(str((obj.get("metadata") or {}).get("name") or ""))
    if parsed and parsed[0] not in uids:
        uids.append(parsed[0])
    return uids


def clique_id_of_clique(obj: Mapping[str, Any]) -> str | None:
    """The clique ID of a clique object: its label, else the part of its name after the UID."""
    value = _labels(obj).get(c.CLIQUE_ID_LABEL)
    if isinstance(value, str) and value:
        return value
    parsed = split_clique_name(str((obj.get("metadata") or {}).get("name") or ""))
    return parsed[1] if parsed else None


def cd_uids_of(obj: Mapping[str, Any]) -> list[str]:
    """CD UIDs any watched object concerns (cliques by label and name, others by label)."""
    if obj.get("kind") == c.CLIQUE_KIND:
        return cd_uids_of_clique(obj)
    uid = cd_uid_of(obj)
    return [uid] if uid else []


def cd_uids_of_update(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> list[str]:
    """CDs an update concerns: both the old and the new owner when a label moved (e.g. a Node
    relabelled from one CD to another must wake both)."""
    uids = cd_uids_of(new)
    for uid in cd_uids_of(old) if old is not None else []:
        if uid not in uids:
            uids.append(uid)
    return uids
