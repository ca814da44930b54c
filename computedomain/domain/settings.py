"""What the reconciler is configured with (pure data; ``computedomain.config`` fills it in)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from computedomain.api import constants as c


@dataclass(frozen=True, kw_only=True)
class DaemonSettings:
    """What the daemon DaemonSet and its claim template depend on besides the CD itself."""

    # Where the IMEX DaemonSets, daemon RCTs, daemon pods and cliques live.
    driver_namespace: str
    image: str
    log_verbosity: int
    image_pull_secrets: tuple[str, ...] = ()
    max_nodes_per_imex_domain: int = c.DEFAULT_MAX_NODES_PER_IMEX_DOMAIN
    # The controller's effective gates; only those the daemon knows are passed on.
    feature_gates: Mapping[str, bool] = field(default_factory=lambda: dict(c.DEFAULT_FEATURE_GATES))
    # Optional additions for #1107 (upstream sets neither).
    priority_class_name: str | None = None
    # Container resources, e.g. {"requests": {"cpu": "10m"}, "limits": {...}}.
    daemon_resources: Mapping[str, Mapping[str, str]] | None = None


@dataclass(frozen=True, kw_only=True)
class ReconcilerSettings:
    daemon: DaemonSettings
    # Namespaces searched besides the driver namespace (after the driver moved namespaces).
    additional_namespaces: tuple[str, ...] = ()
    # How long a CD UID must stay unknown before what names it is removed.
    orphan_grace_period: float = 5.0
    # On deletion, how long daemon pods may take to stop before the finalizer goes anyway.
    daemon_pod_wait_timeout: float = 60.0
    # On deletion, how long the IMEX daemons stay while workload pods still use the CD's
    # channel (0: they go at once, as NVIDIA's controller does).
    workload_release_timeout: float = 300.0
    # How long a daemon may be not ready (starting) before that is a problem worth a Warning.
    daemon_ready_grace_period: float = 120.0
    # driverManaged: IMEX daemons in a DaemonSet per CD; hostManaged: the host's nvidia-imex,
    # and per CD only the workload RCT (contract §18).
    imex_mode: str = c.IMEX_MODE_DRIVER
    # Status changes this soon after the CD's last status write wait for the window's end and
    # go out as one write (0: no waiting).
    status_coalesce_window: float = 1.0
    # How long a CD may wait for its workload, and a workload pod stay Pending, before the
    # controller reads the CD's Pending workload pods and says why they do not start
    # (WorkloadPodsNotStarting); and the shortest time between two such reads of one CD.
    workload_start_grace_period: float = 300.0
    workload_pod_check_interval: float = 60.0

    @property
    def driver_namespace(self) -> str:
        return self.daemon.driver_namespace

    @property
    def managed_namespaces(self) -> tuple[str, ...]:
        """Namespaces where DaemonSets, daemon pods and cliques live (driver namespace first)."""
        return tuple(dict.fromkeys([self.driver_namespace, *self.additional_namespaces]))

    @property
    def host_managed(self) -> bool:
        return self.imex_mode == c.IMEX_MODE_HOST

    @property
    def cliques_enabled(self) -> bool:
        return bool(self.daemon.feature_gates.get(c.GATE_CLIQUES, False))
