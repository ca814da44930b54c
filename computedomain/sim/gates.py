"""Feature gates as a v0.4.0 daemon reads them from its ``FEATURE_GATES`` environment variable."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from computedomain.api import constants as c
from computedomain.runtime.featuregates import FeatureGateError, parse_gates


class InvalidFeatureGatesError(ValueError):
    """The string is not ``Name=bool,...``; the real daemon refuses to start."""


def parse_feature_gates(value: str | None) -> dict[str, bool]:
    """``A=true,B=false,`` (trailing comma allowed) as a mapping; a malformed pair raises.
    Unknown names are kept: whether to reject them is the caller's decision."""
    try:
        return parse_gates(value)
    except FeatureGateError as err:
        raise InvalidFeatureGatesError(str(err)) from None


@dataclass(frozen=True)
class DaemonGates:
    """The two gates that pick the daemon's protocol (contract §15), v0.4.0 defaults."""

    dns_names: bool = True
    cliques: bool = True

    @classmethod
    def from_env(cls, value: str | None) -> DaemonGates:
        gates = parse_feature_gates(value)
        return cls(
            dns_names=gates.get(c.GATE_DNS_NAMES, True),
            cliques=gates.get(c.GATE_CLIQUES, True),
        )

    @property
    def valid(self) -> bool:
        # Cliques need DNS names: the binaries refuse to start otherwise (ValidateFeatureGates).
        return self.dns_names or not self.cliques


def container_env(pod: Mapping[str, Any], container_name: str | None = None) -> dict[str, str]:
    """Literal ``env`` values of a container (the first one when no name is given).

    ``valueFrom`` entries are skipped: the simulator knows the values they would resolve to
    (node name, pod IP, ...) better than the downward API it does not run.
    """
    containers: Sequence[Mapping[str, Any]] = (pod.get("spec") or {}).get("containers") or []
    for container in containers:
        if container_name is not None and container.get("name") != container_name:
            continue
        return {
            str(item["name"]): str(item["value"])
            for item in container.get("env") or []
            if "name" in item and "value" in item
        }
    return {}


def max_nodes_from_env(env: Mapping[str, str]) -> int:
    raw = env.get(c.MAX_NODES_PER_IMEX_DOMAIN_ENV, "")
    try:
        value = int(raw)
    except ValueError:
        return c.DEFAULT_MAX_NODES_PER_IMEX_DOMAIN
    return value if value > 0 else c.DEFAULT_MAX_NODES_PER_IMEX_DOMAIN
