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
from computedomain.domain.labels import cd_uid_of
from computedomain.runtime.objects import condition_true, label, name

NodeLookup = Mapping[str, Mapping[str, Any]] | Callable[[str], Mapping[str, Any] | None]


def clique_of(node: Mapping[str, Any] | None) -> str | None:
    """The node's GFD clique label; None when missing or empty (no NVLink fabric)."""
    return label(node, c.GPU_CLIQUE_NODE_LABEL)


def ready_and_schedulable(node: Mapping[str, Any]) -> bool:
    """Ready and not cordoned: a workload pod can land there."""
    unschedulable = bool((node.get("spec") or {}).get("unschedulable"))
    return condition_true(node, "Ready") and not unschedulable


@dataclass(frozen=True)
class CliqueInventory:
    """Nodes per clique, which CD (by UID) each labelled node currently serves, and which nodes
    are Ready and schedulable."""

    nodes_by_clique: Mapping[str, frozenset[str]]
    cd_by_node: Mapping[str, str]
    ready: frozenset[str] = frozenset()

    @classmethod
    def from_nodes(cls, nodes: Iterable[Mapping[str, Any]]) -> CliqueInventory:
        by_clique: dict[str, set[str]] = {}
        cd_by_node: dict[str, str] = {}
        ready: set[str] = set()
        for node in nodes:
            node_name = name(node)
            if not node_name:
                continue
            clique = clique_of(node)
            if clique is not None:
                by_clique.setdefault(clique, set()).add(node_name)
            uid = cd_uid_of(node)
            if uid:
                cd_by_node[node_name] = uid
            if ready_and_schedulable(node):
                ready.add(node_name)
        return cls({k: frozenset(v) for k, v in by_clique.items()}, cd_by_node, frozenset(ready))

    def domains_in(self, clique: str) -> set[str]:
        """UIDs of the CDs using nodes of ``clique``."""
        return {
            uid
            for node_name in self.nodes_by_clique.get(clique, frozenset())
            if (uid := self.cd_by_node.get(node_name))
        }

    def free_nodes(self, clique: str) -> frozenset[str]:
        """Nodes of ``clique`` serving no CD."""
        return frozenset(
            n for n in self.nodes_by_clique.get(clique, frozenset()) if n not in self.cd_by_node
        )

    def usage(self) -> dict[str, dict[str, int]]:
        """Per clique, its nodes by state (the metric's ``state`` label): ``total``, ``ready``
        (Ready and schedulable), ``held`` (by a CD) and ``free`` (ready, held by none): the
        numbers ``kubectl cdom cliques`` prints."""
        counts: dict[str, dict[str, int]] = {}
        for clique, nodes in self.nodes_by_clique.items():
            held = {n for n in nodes if n in self.cd_by_node}
            counts[clique] = {
                "total": len(nodes),
                "ready": len(nodes & self.ready),
                "held": len(held),
                "free": len((nodes & self.ready) - held),
            }
        return counts

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
    for node_name in node_names:
        node = lookup(node_name)
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
