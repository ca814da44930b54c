"""Figures the benchmark scenarios share: percentiles of observed samples and a process's CPU
time (hack/bench.py, hack/versus.py)."""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Sequence
from pathlib import Path


def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (no interpolation: every figure is an observed sample)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100.0 * len(ordered)))
    return ordered[rank - 1]


def summary(values: Sequence[float]) -> dict[str, float]:
    if not values:
        return {}
    return {
        "n": len(values),
        "min": min(values),
        "p50": percentile(values, 50),
        "p95": percentile(values, 95),
        "p99": percentile(values, 99),
        "max": max(values),
        "mean": statistics.fmean(values),
    }


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of the process (all threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
