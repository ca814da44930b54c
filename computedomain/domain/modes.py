"""How a ComputeDomain's status is made this reconcile, decided once (the status path reads it,
never the settings, daemonsets or CRD again).

- host-managed IMEX (contract §18): no daemons, cliques or node labels; Ready means admitted
  with its workload claim template;
- the legacy protocol: daemons write ``status.nodes`` themselves, so there are no clique entries
  of ours to prune and no nodes to project beyond theirs;
- an outdated CRD: the apiserver prunes our status fields, so only upstream's are written and
  the conditions live in memory.

Pure: ``observe.status_mode`` reads what decides it.
"""

from __future__ import annotations

from dataclasses import dataclass

# Status fields NVIDIA's CRD has; everything else in our status is our addition.
UPSTREAM_STATUS_FIELDS: tuple[str, ...] = ("status", "nodes")
OUR_STATUS_FIELDS: tuple[str, ...] = (
    "conditions",
    "observedGeneration",
    "nodeCount",
    "readyNodeCount",
    "cliqueCount",
)


@dataclass(frozen=True)
class StatusMode:
    host_managed: bool = False
    legacy: bool = False
    # Our status fields the installed CRD prunes (empty: it keeps them all).
    pruned_fields: tuple[str, ...] = ()

    @property
    def upstream_only(self) -> bool:
        """Write ``status.status`` and ``status.nodes`` only (the CRD would drop the rest)."""
        return bool(self.pruned_fields)

    @property
    def prunes_cliques(self) -> bool:
        """Stale clique entries are ours to remove (cliques protocol, driver-managed)."""
        return not self.host_managed and not self.legacy
