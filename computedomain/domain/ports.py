"""What the domain logic needs from the outside world, as protocols.

The reconciler reports to these; observability implements them. Keeping the protocol here
lets the domain layer stay free of prometheus-client.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol


class DomainMetricsSink(Protocol):
    def observe_domain(
        self,
        namespace: str,
        name: str,
        *,
        conditions: Mapping[str, str],
        nodes_by_status: Mapping[str, int],
        cliques: int,
        global_status: str,
        reasons: Mapping[str, str] | None = None,
        clique_split: bool = False,
    ) -> None: ...

    def forget_domain(self, namespace: str, name: str) -> None: ...

    def observe_deletion_started(self, namespace: str, name: str, timestamp: float) -> None:
        """A CD being finalized since ``timestamp`` (Unix seconds); ``forget_domain`` ends it."""

    def observe_time_to_ready(self, seconds: float) -> None: ...

    def observe_daemon_ready_latency(self, seconds: float) -> None: ...

    def set_clique_inventory(self, nodes_by_state: Mapping[str, Mapping[str, int]]) -> None: ...

    def inc_orphan_cleanup(self, kind: str) -> None: ...

    def inc_foreign_refused(self, kind: str) -> None: ...


class CoexistenceMetricsSink(Protocol):
    def set_crd_missing_status_fields(self, count: int) -> None: ...

    def set_concurrent_controllers(self, count: int) -> None: ...

    def set_standing_by(self, standing_by: bool) -> None:
        """This replica leads and stands by (writes nothing to ComputeDomains)."""

    def set_daemon_image_drift(self, count: int) -> None:
        """NVIDIA's kubelet plugin DaemonSets whose image is not our IMAGE_NAME."""
