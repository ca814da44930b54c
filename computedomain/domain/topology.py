"""NVLink clique inventory from Node labels (pure).

Each NVLink node carries ``nvidia.com/gpu.clique=<clusterUUID>.<cliqueId>``: set by GPU Feature
Discovery, or, since NVIDIA's DRA driver v0.5 (``GPU_CLIQUE_LABEL_ENABLED``, which GPU Operator
turns on), by NVIDIA's kubelet plugin, which sets it when it starts and removes it when it
stops. IMEX connects nodes only within one clique, and two ComputeDomains in one clique
interfere (upstream #892), so the controller reports both situations.

The label can therefore be missing for a while from a node that is in a clique (a rolling
upgrade of the plugin takes it off every node in turn). Such a node is *label-missing* when
its clique is still known: the IMEX daemon of the domain holding it reports one (``status.nodes``
of that domain), or, for the controller's own inventory, the node carried the label earlier in
this process. Label-missing nodes keep their clique for the sharing findings and are counted in
the inventory under ``LABEL_MISSING``, apart from nodes that never had a label (no NVLink).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from computedomain.api import constants as c
from computedomain.domain.labels import cd_uid_of
from computedomain.runtime.objects import condition_true, label, name

NodeLookup = Mapping[str, Mapping[str, Any]] | Callable[[str], Mapping[str, Any] | None]
# (node name, CD UID) -> the clique that CD's daemon on that node reports.
Reported = Mapping[tuple[str, str], str]

# The inventory row (and the gauge's ``clique`` value) of label-missing nodes.
LABEL_MISSING = "<label missing>"


def clique_of(node: Mapping[str, Any] | None) -> str | None:
    """The node's clique label; None when missing or empty (no NVLink fabric, or the label is
    missing for now)."""
    return label(node, c.GPU_CLIQUE_NODE_LABEL)


def reported_cliques(domains: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], str]:
    """What the domains' daemons report: (node, CD UID) -> clique, from each CD's
    ``status.nodes`` (written by the legacy daemons, or projected from their cliques); entries
    without a clique (no NVLink fabric) report none."""
    found: dict[tuple[str, str], str] = {}
    for cd in domains:
        uid = (cd.get("metadata") or {}).get("uid")
        if not uid:
            continue
        for entry in (cd.get("status") or {}).get("nodes") or []:
            node_name, clique = entry.get("name"), entry.get("cliqueID")
            if node_name and clique:
                found[(str(node_name), str(uid))] = str(clique)
    return found


def missing_label_clique(
    node: Mapping[str, Any],
    reported: Reported,
    last_seen: Mapping[str, str] | None = None,
) -> str | None:
    """The clique of a node whose clique label is missing now, if it is known: what the daemon
    of the domain holding the node (its CD label) reports, else the label the node carried
    before (``last_seen``). None for a labelled node, and for one never known in a clique."""
    if clique_of(node) is not None:
        return None
    node_name = name(node) or ""
    holder = cd_uid_of(node)
    if holder and (clique := reported.get((node_name, holder))):
        return clique
    return (last_seen or {}).get(node_name)


def ready_and_schedulable(node: Mapping[str, Any]) -> bool:
    """Ready and not cordoned: a workload pod can land there."""
    unschedulable = bool((node.get("spec") or {}).get("unschedulable"))
    return condition_true(node, "Ready") and not unschedulable


@dataclass(frozen=True)
class CliqueInventory:
    """Nodes per clique, which CD (by UID) each node currently serves, which nodes are Ready
    and schedulable, and the label-missing nodes with the clique each is known to be in."""

    nodes_by_clique: Mapping[str, frozenset[str]]
    cd_by_node: Mapping[str, str]
    ready: frozenset[str] = frozenset()
    label_missing: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_nodes(
        cls,
        nodes: Iterable[Mapping[str, Any]],
        reported: Reported | None = None,
        last_seen: Mapping[str, str] | None = None,
    ) -> CliqueInventory:
        """``reported``: the daemons' cliques (``reported_cliques``); ``last_seen``: node ->
        the clique label it carried before (``known_cliques`` of an earlier inventory)."""
        by_clique: dict[str, set[str]] = {}
        cd_by_node: dict[str, str] = {}
        ready: set[str] = set()
        missing: dict[str, str] = {}
        for node in nodes:
            node_name = name(node)
            if not node_name:
                continue
            clique = clique_of(node)
            if clique is not None:
                by_clique.setdefault(clique, set()).add(node_name)
            elif known := missing_label_clique(node, reported or {}, last_seen):
                missing[node_name] = known
            uid = cd_uid_of(node)
            if uid:
                cd_by_node[node_name] = uid
            if ready_and_schedulable(node):
                ready.add(node_name)
        return cls(
            {k: frozenset(v) for k, v in by_clique.items()},
            cd_by_node,
            frozenset(ready),
            missing,
        )

    def members(self, clique: str) -> frozenset[str]:
        """Nodes in ``clique``: labelled with it, or label-missing and known to be in it."""
        labelled = self.nodes_by_clique.get(clique, frozenset())
        return labelled | {n for n, known in self.label_missing.items() if known == clique}

    def domains_in(self, clique: str) -> set[str]:
        """UIDs of the CDs using nodes of ``clique`` (also nodes whose label is missing now)."""
        return {
            uid for node_name in self.members(clique) if (uid := self.cd_by_node.get(node_name))
        }

    def free_nodes(self, clique: str) -> frozenset[str]:
        """Nodes labelled ``clique`` serving no CD (a label-missing node is no room for a job
        pinned to the clique by its label)."""
        return frozenset(
            n for n in self.nodes_by_clique.get(clique, frozenset()) if n not in self.cd_by_node
        )

    def usage(self) -> dict[str, dict[str, int]]:
        """Per clique, its labelled nodes by state (the metric's ``state`` label): ``total``,
        ``ready`` (Ready and schedulable), ``held`` (by a CD) and ``free`` (ready, held by
        none): the numbers ``kubectl cdom cliques`` prints; then, under ``LABEL_MISSING``, the
        label-missing nodes counted the same way (absent when there are none)."""
        groups: dict[str, frozenset[str]] = dict(self.nodes_by_clique)
        if self.label_missing:
            groups[LABEL_MISSING] = frozenset(self.label_missing)
        counts: dict[str, dict[str, int]] = {}
        for clique, nodes in groups.items():
            held = {n for n in nodes if n in self.cd_by_node}
            counts[clique] = {
                "total": len(nodes),
                "ready": len(nodes & self.ready),
                "held": len(held),
                "free": len((nodes & self.ready) - held),
            }
        return counts

    def domain_cliques(self) -> dict[str, set[str]]:
        """CD UID → cliques its nodes lie in (labelled, or label-missing and known)."""
        result: dict[str, set[str]] = {}
        for clique in set(self.nodes_by_clique) | set(self.label_missing.values()):
            for uid in self.domains_in(clique):
                result.setdefault(uid, set()).add(clique)
        return result

    def known_cliques(self) -> dict[str, str]:
        """Node → the clique it is in, labelled or label-missing: what the next inventory
        takes as ``last_seen`` (a node no longer listed is forgotten)."""
        known = dict(self.label_missing)
        for clique, nodes in self.nodes_by_clique.items():
            known.update(dict.fromkeys(nodes, clique))
        return known


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
