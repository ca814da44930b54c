"""Which ComputeDomain, and which NVLink clique, an object names (pure).

Children live in another namespace than their CD, so no ownerReference links them; the CD
label (value = CD UID) does, and clique object names carry the UID as their first dotted part.
(A node's NVLink clique, from its ``nvidia.com/gpu.clique`` label, is ``topology.clique_of``.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from computedomain.api import constants as c
from computedomain.runtime.objects import label, name


def cd_uid_of(obj: Mapping[str, Any] | None) -> str | None:
    """The CD UID in the object's CD label (DaemonSets, RCTs, daemon pods, Nodes, cliques)."""
    return label(obj, c.CD_LABEL)


def split_clique_name(clique_name: str) -> tuple[str, str] | None:
    """``<cdUID>.<cliqueID>`` → (cdUID, cliqueID); None when the name has no dot.

    The inverse of ``constants.clique_name``.
    """
    uid, dot, clique_id = clique_name.partition(".")
    if not dot or not uid or not clique_id:
        return None
    return uid, clique_id


def cd_uids_of_clique(obj: Mapping[str, Any]) -> list[str]:
    """CD UIDs a ComputeDomainClique names, by label and by name (both normally agree)."""
    uids: list[str] = []
    labelled = cd_uid_of(obj)
    if labelled:
        uids.append(labelled)
    parsed = split_clique_name(name(obj))
    if parsed and parsed[0] not in uids:
        uids.append(parsed[0])
    return uids


def clique_id_of_clique(obj: Mapping[str, Any]) -> str | None:
    """The clique ID of a clique object: its label, else the part of its name after the UID."""
    value = label(obj, c.CLIQUE_ID_LABEL)
    if value:
        return value
    parsed = split_clique_name(name(obj))
    return parsed[1] if parsed else None
