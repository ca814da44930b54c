"""Per NVLink clique: nodes in total, Ready, held by a ComputeDomain, and free (pure). Built from
listed Nodes and ComputeDomains: the node label the kubelet plugin sets says which domain holds a
node, and a domain's ``status.nodes`` says which clique its daemon on a node reports. Read by
``kubectl cdom cliques`` and by the placement webhook's decision (domain/placement.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from computedomain.api import constants as c
from computedomain.domain.topology import (
    LABEL_MISSING,
    missing_label_clique,
    ready_and_schedulable,
    reported_cliques,
)

# How nodes without the clique label (no NVLink fabric, or fabric not ready) are shown.
NO_CLIQUE = "<none>"
# Rows that are no NVLink clique: never offered to a job, listed after the cliques.
NOT_CLIQUES = (LABEL_MISSING, NO_CLIQUE)


@dataclass
class CliqueCapacity:
    clique: str
    nodes: int = 0
    ready: int = 0
    held: int = 0
    free_nodes: list[str] = field(default_factory=list)
    # "namespace/name" (or the UID of a domain that no longer exists) -> nodes it holds here
    domains: dict[str, int] = field(default_factory=dict)

    @property
    def free(self) -> int:
        return len(self.free_nodes)

    def as_dict(self) -> dict[str, Any]:
        return {
            "clique": self.clique,
            "nodes": self.nodes,
            "ready": self.ready,
            "held": self.held,
            "free": self.free,
            "domains": dict(sorted(self.domains.items())),
            "freeNodes": sorted(self.free_nodes),
        }


def clique_capacity(
    nodes: Iterable[Mapping[str, Any]], domains: Iterable[Mapping[str, Any]]
) -> list[CliqueCapacity]:
    """One row per clique (by name), then the nodes whose clique label is missing now although
    the daemon of the domain holding them reports a clique (NVIDIA's kubelet plugin removes the
    label while it restarts), then the nodes without a clique label, if any. A node is free
    when it is Ready, schedulable and held by no domain."""
    domains = list(domains)
    names = {
        str(
            cd["metadata"].get("uid")
        ): f"{cd['metadata'].get('namespace')}/{cd['metadata']['name']}"
        for cd in domains
    }
    reported = reported_cliques(domains)
    rows: dict[str, CliqueCapacity] = {}
    for node in nodes:
        labels = node["metadata"].get("labels") or {}
        clique = labels.get(c.GPU_CLIQUE_NODE_LABEL) or (
            LABEL_MISSING if missing_label_clique(node, reported) else NO_CLIQUE
        )
        row = rows.setdefault(clique, CliqueCapacity(clique))
        row.nodes += 1
        ready = ready_and_schedulable(node)
        row.ready += ready
        holder = labels.get(c.CD_LABEL)
        if holder:
            row.held += 1
            key = names.get(holder, holder)
            row.domains[key] = row.domains.get(key, 0) + 1
        elif ready:
            row.free_nodes.append(node["metadata"]["name"])
    ordered = sorted((r for k, r in rows.items() if k not in NOT_CLIQUES), key=lambda r: r.clique)
    return ordered + [rows[k] for k in NOT_CLIQUES if k in rows]


def fitting(rows: Sequence[CliqueCapacity], size: int) -> list[CliqueCapacity]:
    """The cliques with ``size`` free nodes, tightest first (a job should not take the clique a
    larger one needs). Nodes without a clique label never form one NVLink domain (those whose
    label is missing for now do again once it is back)."""
    return sorted(
        (r for r in rows if r.clique not in NOT_CLIQUES and r.free >= size),
        key=lambda r: (r.free, r.clique),
    )
