"""Membership entries as the IMEX daemon writes them: pure list transformations.

Two homes for the same information (contract §2.2, §9.2):

* a ``ComputeDomainClique``'s ``daemons[]`` (cliques gate on), keyed by ``nodeName``;
* a ``ComputeDomain``'s ``status.nodes[]`` (gate off, the legacy protocol), keyed by ``name``,
  where the index is scoped to the entries sharing the daemon's ``cliqueID``.

Each function takes the current list and returns the new one, or ``None`` when nothing would
change, so callers skip writes that would be no-ops. Inputs are never modified.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from computedomain.api import constants as c
from computedomain.runtime import objects

CLIQUE_KEY = "nodeName"
LEGACY_KEY = "name"

# The fields of upstream's Go structs. Everything else in an object a legacy daemon reads is
# lost when it writes the object back (contract §2.3).
_ENTRY_FIELDS = ("ipAddress", "cliqueID", "index", "status")
_LEGACY_STATUS_FIELDS = ("status", "nodes")
_LEGACY_SPEC_FIELDS = ("numNodes", "channel")

Entry = dict[str, Any]


class IndexExhaustedError(RuntimeError):
    """No index below ``MAX_NODES_PER_IMEX_DOMAIN`` is free: the daemon cannot join."""


def lowest_free_index(used: Iterable[int], max_nodes: int) -> int:
    """The smallest non-negative index not in ``used``; gaps are refilled first."""
    taken = set(used)
    index = 0
    while index in taken:
        index += 1
    if index >= max_nodes:
        raise IndexExhaustedError(
            f"no free index: {len(taken)} entries hold every index below {max_nodes}"
        )
    return index


def _upsert(
    entries: Sequence[Mapping[str, Any]],
    key: str,
    *,
    node_name: str,
    ip_address: str,
    clique_id: str,
    status: str,
    max_nodes: int,
) -> list[Entry] | None:
    current = [dict(entry) for entry in entries]
    for entry in current:
        if entry.get(key) != node_name:
            continue
        # A restarted daemon keeps the index its node already holds.
        wanted = {"ipAddress": ip_address, "cliqueID": clique_id, "status": status}
        if all(entry.get(field) == value for field, value in wanted.items()):
            return None
        entry.update(wanted)
        return current
    used = (
        int(entry["index"])
        for entry in current
        if entry.get("cliqueID", "") == clique_id and isinstance(entry.get("index"), int)
    )
    index = lowest_free_index(used, max_nodes)
    current.append(
        {
            key: node_name,
            "ipAddress": ip_address,
            "cliqueID": clique_id,
            "index": index,
            "status": status,
        }
    )
    return current


def upsert_clique_daemon(
    daemons: Sequence[Mapping[str, Any]],
    *,
    node_name: str,
    ip_address: str,
    clique_id: str,
    max_nodes: int,
    status: str = c.STATUS_NOT_READY,
) -> list[Entry] | None:
    """Add or refresh this node's entry in a clique's ``daemons[]``.

    All entries of one clique share its cliqueID, so every index in the list counts.
    """
    return _upsert(
        daemons,
        CLIQUE_KEY,
        node_name=node_name,
        ip_address=ip_address,
        clique_id=clique_id,
        status=status,
        max_nodes=max_nodes,
    )


def upsert_legacy_node(
    nodes: Sequence[Mapping[str, Any]],
    *,
    node_name: str,
    ip_address: str,
    clique_id: str,
    max_nodes: int,
    status: str = c.STATUS_NOT_READY,
) -> list[Entry] | None:
    """Add or refresh this node's entry in ``CD.status.nodes``; the index is per cliqueID."""
    return _upsert(
        nodes,
        LEGACY_KEY,
        node_name=node_name,
        ip_address=ip_address,
        clique_id=clique_id,
        status=status,
        max_nodes=max_nodes,
    )


def _set_status(
    entries: Sequence[Mapping[str, Any]], key: str, node_name: str, ip_address: str, status: str
) -> list[Entry] | None:
    current = [dict(entry) for entry in entries]
    for entry in current:
        if entry.get(key) == node_name and entry.get("ipAddress") == ip_address:
            if entry.get("status") == status:
                return None
            entry["status"] = status
            return current
    return None


def set_clique_daemon_status(
    daemons: Sequence[Mapping[str, Any]], *, node_name: str, ip_address: str, status: str
) -> list[Entry] | None:
    """Set the status of this daemon's own entry (same node and IP); None if absent or equal."""
    return _set_status(daemons, CLIQUE_KEY, node_name, ip_address, status)


def set_legacy_node_status(
    nodes: Sequence[Mapping[str, Any]], *, node_name: str, ip_address: str, status: str
) -> list[Entry] | None:
    return _set_status(nodes, LEGACY_KEY, node_name, ip_address, status)


def _remove(
    entries: Sequence[Mapping[str, Any]], key: str, node_name: str, ip_address: str
) -> list[Entry] | None:
    # Matching the IP as well keeps a departing pod from deleting its successor's entry.
    kept = [
        dict(entry)
        for entry in entries
        if not (entry.get(key) == node_name and entry.get("ipAddress") == ip_address)
    ]
    return None if len(kept) == len(entries) else kept


def remove_clique_daemon(
    daemons: Sequence[Mapping[str, Any]], *, node_name: str, ip_address: str
) -> list[Entry] | None:
    return _remove(daemons, CLIQUE_KEY, node_name, ip_address)


def remove_legacy_node(
    nodes: Sequence[Mapping[str, Any]], *, node_name: str, ip_address: str
) -> list[Entry] | None:
    return _remove(nodes, LEGACY_KEY, node_name, ip_address)


def find_entry(
    entries: Sequence[Mapping[str, Any]] | None, key: str, node_name: str
) -> Mapping[str, Any] | None:
    for entry in entries or ():
        if entry.get(key) == node_name:
            return entry
    return None


def typed_status_update(
    cd: Mapping[str, Any], nodes: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """The body a legacy daemon's typed ``UpdateStatus`` sends after setting ``status.nodes``.

    The daemon decoded the CD into upstream's Go struct, which knows only ``status.status`` and
    ``status.nodes`` (with five fields per entry). Every other status field, for example
    ``status.conditions`` or ``status.observedGeneration`` added by a newer controller, is
    absent from the PUT, and the apiserver therefore erases it (contract §2.3). Reproducing that
    loss is the point: the controller must cope with it.
    """
    metadata = dict(objects.meta(cd))
    spec = cd.get("spec") or {}
    status = cd.get("status") or {}
    body: dict[str, Any] = {
        "apiVersion": cd.get("apiVersion", c.API_VERSION),
        "kind": cd.get("kind", c.CD_KIND),
        "metadata": metadata,
        "spec": {field: spec[field] for field in _LEGACY_SPEC_FIELDS if field in spec},
    }
    new_status: dict[str, Any] = {
        field: status[field] for field in _LEGACY_STATUS_FIELDS if field in status
    }
    # Go's struct has no omitempty on status.status: an unset value goes out as "".
    new_status.setdefault("status", "")
    new_status["nodes"] = [
        {LEGACY_KEY: entry.get(LEGACY_KEY, "")}
        | {field: entry.get(field, 0 if field == "index" else "") for field in _ENTRY_FIELDS}
        for entry in nodes
    ]
    body["status"] = new_status
    return body
