"""The compute-domain configs a ResourceClaim carries for NVIDIA's driver (contract: the opaque
``ComputeDomainChannelConfig`` / ``ComputeDomainDaemonConfig`` parameters): read by the
simulated kubelet plugin from an allocation, and by ``kubectl cdom describe`` from a claim's
spec."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from computedomain.api import constants as c


@dataclass(frozen=True)
class DriverConfig:
    """One compute-domain opaque config."""

    kind: str
    domain_id: str
    allocation_mode: str | None = None


def driver_configs(devices: Mapping[str, Any]) -> list[DriverConfig]:
    """The opaque configs for NVIDIA's compute-domain driver in ``devices`` (a claim's
    ``spec.devices`` or ``status.allocation.devices``)."""
    configs: list[DriverConfig] = []
    for config in devices.get("config") or []:
        opaque = config.get("opaque") or {}
        if opaque.get("driver") != c.DRIVER_NAME:
            continue
        parameters = opaque.get("parameters") or {}
        configs.append(
            DriverConfig(
                kind=str(parameters.get("kind", "")),
                domain_id=str(parameters.get("domainID", "")),
                allocation_mode=parameters.get("allocationMode"),
            )
        )
    return configs
