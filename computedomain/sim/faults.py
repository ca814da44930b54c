"""Fault knobs of the simulated fleet and the per-daemon / per-node fates drawn from them.

Every random choice comes from one seeded ``random.Random``, so a run is reproducible for a
given seed and event order. A node named explicitly always gets its fault; the probabilities
apply to everyone else.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}


def parse_duration(text: str) -> float:
    """``"500ms"``, ``"2s"``, ``"1.5"`` (seconds), ``"1m"`` → seconds."""
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f"invalid duration {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


@dataclass(frozen=True)
class DelayRange:
    """A uniform distribution over ``[low, high]`` seconds."""

    low: float
    high: float

    def __post_init__(self) -> None:
        if self.low < 0 or self.high < self.low:
            raise ValueError(f"invalid delay range {self.low}-{self.high}")

    @classmethod
    def parse(cls, text: str) -> DelayRange:
        """``"0.5-3s"``, ``"200ms-1s"``, ``"2s"`` (fixed). A unit on the upper bound only
        applies to both bounds (``"0.5-3s"`` is 0.5 s to 3 s)."""
        low_text, sep, high_text = text.partition("-")
        if not sep:
            value = parse_duration(text)
            return cls(value, value)
        high_match = _DURATION.match(high_text)
        low_match = _DURATION.match(low_text)
        if high_match is None or low_match is None:
            raise ValueError(f"invalid delay range {text!r}")
        unit = high_match.group(2)
        low_unit = low_match.group(2) or unit
        return cls(
            float(low_match.group(1)) * _UNITS[low_unit],
            float(high_match.group(1)) * _UNITS[unit],
        )

    @classmethod
    def fixed(cls, seconds: float) -> DelayRange:
        return cls(seconds, seconds)

    def sample(self, rng: random.Random) -> float:
        return self.low if self.low == self.high else rng.uniform(self.low, self.high)

    def __str__(self) -> str:
        return f"{self.low:g}s" if self.low == self.high else f"{self.low:g}-{self.high:g}s"


def _probability(value: float, name: str) -> float:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be within [0, 1], got {value}")
    return value


# A simulated IMEX start-up failure, worded the way a Go daemon reports a taken port.
DEFAULT_FAIL_START_MESSAGE = (
    "failed to start IMEX daemon: listen tcp 0.0.0.0:50000: bind: address already in use"
)


@dataclass(frozen=True)
class FaultSettings:
    """What can go wrong in the simulated fleet, and how fast things happen."""

    daemon_delay: DelayRange = field(default_factory=lambda: DelayRange(0.5, 3.0))
    """IMEX start-up time: from the daemon joining its clique to its pod turning Ready."""

    never_ready_nodes: frozenset[str] = frozenset()
    never_ready_probability: float = 0.0
    """Daemons that never pass their startup probe (a misconfigured IMEX, upstream #289)."""

    fail_start_nodes: frozenset[str] = frozenset()
    fail_start_probability: float = 0.0
    fail_start_message: str = DEFAULT_FAIL_START_MESSAGE
    """Daemons whose container exits at start with this termination message, then stays in
    CrashLoopBackOff without joining (e.g. the host's nvidia-imex.service holds the port, #524)."""

    crash_nodes: frozenset[str] = frozenset()
    crash_probability: float = 0.0
    crash_after: DelayRange = field(default_factory=lambda: DelayRange(5.0, 30.0))
    """Time a Ready daemon runs before it crashes (once per pod)."""
    restart_delay: DelayRange = field(default_factory=lambda: DelayRange(1.0, 1.0))
    """Time a crashed daemon spends in CrashLoopBackOff before it restarts with a new IP."""

    node_not_ready_nodes: frozenset[str] = frozenset()
    node_not_ready_probability: float = 0.0
    node_delete_nodes: frozenset[str] = frozenset()
    node_delete_probability: float = 0.0
    node_fault_after: DelayRange = field(default_factory=lambda: DelayRange(5.0, 30.0))
    """Time after a node's daemon first turns Ready until that node's fault strikes."""

    def __post_init__(self) -> None:
        for name in (
            "never_ready_probability",
            "fail_start_probability",
            "crash_probability",
            "node_not_ready_probability",
            "node_delete_probability",
        ):
            _probability(getattr(self, name), name)


@dataclass(frozen=True)
class DaemonFate:
    start_delay: float
    never_ready: bool = False
    # The container exits at start with this message (None: it starts).
    fail_start: str | None = None
    crash_after: float | None = None
    restart_delay: float = 1.0


@dataclass(frozen=True)
class NodeFate:
    not_ready_after: float | None = None
    delete_after: float | None = None

    @property
    def any(self) -> bool:
        return self.not_ready_after is not None or self.delete_after is not None


def parse_node_list(text: str) -> frozenset[str]:
    return frozenset(part.strip() for part in text.split(",") if part.strip())


class FaultPlanner:
    """Draws fates. A daemon crashes at most once per pod, a node fails at most once."""

    def __init__(self, settings: FaultSettings, rng: random.Random) -> None:
        self.settings = settings
        self._rng = rng
        self._crashed_pods: set[str] = set()
        self._failed_nodes: set[str] = set()

    def _hit(self, node_name: str, nodes: Iterable[str], probability: float) -> bool:
        if node_name in nodes:
            return True
        return probability > 0.0 and self._rng.random() < probability

    def daemon_fate(self, node_name: str, pod_uid: str) -> DaemonFate:
        s = self.settings
        delay = s.daemon_delay.sample(self._rng)
        fail_start = self._hit(node_name, s.fail_start_nodes, s.fail_start_probability)
        never_ready = not fail_start and self._hit(
            node_name, s.never_ready_nodes, s.never_ready_probability
        )
        crash_after: float | None = None
        if (
            not never_ready
            and not fail_start
            and pod_uid not in self._crashed_pods
            and self._hit(node_name, s.crash_nodes, s.crash_probability)
        ):
            crash_after = s.crash_after.sample(self._rng)
            self._crashed_pods.add(pod_uid)
        return DaemonFate(
            start_delay=delay,
            never_ready=never_ready,
            fail_start=s.fail_start_message if fail_start else None,
            crash_after=crash_after,
            restart_delay=s.restart_delay.sample(self._rng),
        )

    def node_fate(self, node_name: str) -> NodeFate:
        """Called when a node's daemon first turns Ready; a second call returns no fault."""
        if node_name in self._failed_nodes:
            return NodeFate()
        s = self.settings
        delete_after = not_ready_after = None
        if self._hit(node_name, s.node_delete_nodes, s.node_delete_probability):
            delete_after = s.node_fault_after.sample(self._rng)
        elif self._hit(node_name, s.node_not_ready_nodes, s.node_not_ready_probability):
            not_ready_after = s.node_fault_after.sample(self._rng)
        fate = NodeFate(not_ready_after=not_ready_after, delete_after=delete_after)
        if fate.any:
            self._failed_nodes.add(node_name)
        return fate
