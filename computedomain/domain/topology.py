"""NVLink clique inventory from Node labels (pure).

GPU Feature Discovery labels each node ``nvidia.com/gpu.clique=<clusterUUID>.<cliqueId>``.
IMEX connects nodes only within one clique, and two ComputeDomains in one clique interfere
(upstream #892), so the controller reports both situations.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from computedomain.api import constants as c

NodeLookup = Mapping[str, Mapping[str, Any]] | Callable[[str], Mapping[str, Any] | None]


def _labels(node: Mapping[str, Any]) -> Mapping[str, Any]:
    labels = (node.get("metadata") or {}).get("labels") or {}
    return labels if isinstance(labels, Mapping) else {}


def clique_of(node: Mapping[str, Any]) -> str | None:
    """The node's GFD clique label; None when missing or empty (no NVLink fabric)."""
    value = _labels(node).get(c.GPU_CLIQUE_NODE_LABEL)
    return value if isinstance(value, str) and value else None


def _node_name(node: Mapping[str, Any]) -> str:
    return str((node.get("metadata") or {}).get("name") or "")


@dataclass(frozen=True)
class CliqueInventory:
    """Nodes per clique, and which CD (by UID) each labelled node currently serves."""

    nodes_by_clique: Mapping[str, frozenset[str]]
    cd_by_node: Mapping[str, str]

    @classmethod
    def from_nodes(cls, nodes: Iterable[Mapping[str, Any]]) -> CliqueInventory:
        by_clique: dict[str, set[str]] = {}
        cd_by_node: dict[str, str] = {}
        for node in nodes:
            name = _node_name(node)
            if not name:
                continue
            clique = clique_of(node)
            if clique is not None:
                by_clique.setdefault(clique, set()).add(name)
            uid = _labels(node).get(c.CD_LABEL)
            if isinstance(uid, str) and uid:
                cd_by_node[name] = uid
        return cls({k: frozenset(v) for k, v in by_clique.items()}, cd_by_node)

    def domains_in(self, clique: str) -> set[str]:
        """UIDs of the CDs using nodes of ``clique``."""
        return {
            uid
            for name in self.nodes_by_clique.get(clique, frozenset())
            if (uid := self.cd_by_node.get(name))
        }

    def free_nodes(self, clique: str) -> frozenset[str]:
        """Nodes of ``clique`` serving no CD."""
        return frozenset(
            n for n in self.nodes_by_clique.get(clique, frozenset()) if n not in self.cd_by_node
        )

    def domain_cliques(self) -> dict[str, set[str]]:
        """CD UID → cliques its labelled nodes lie in."""
        result: dict[str, set[str]] = {}
        for clique in self.nodes_by_clique:
            for uid in self.domains_in(clique):
                result.setdefault(uid, set()).add(clique)
        return result


def cliques_spanned(node_names: Iterable[str], nodes: NodeLookup) -> set[str]:
    """Distinct cliques of the named nodes (unknown or unlabelled nodes count for nothing)."""
    lookup = nodes.get if isinstance(nodes, Mapping) else nodes
    spanned: set[str] = set()
    for name in node_names:
        node = lookup(name)
        if node is not None and (clique := clique_of(node)) is not None:
            spanned.add(clique)
    return spanned


def shared_cliques(domain_cliques: Mapping[str, set[str]]) -> dict[str, set[str]]:
    """Clique → the domains in it, for cliques used by more than one domain."""
    by_clique: dict[str, set[str]] = {}
    for domain, cliques in domain_cliques.items():
        for clique in cliques:
            by_clique.setdefault(clique, set()).add(domain)
    return {clique: domains for clique, domains in by_clique.items() if len(domains) > 1}
