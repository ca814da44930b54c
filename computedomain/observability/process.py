"""Process-level series on the controller's registry: `process_*`, `python_info`, build info.

A private `CollectorRegistry` (what the controller serves) has none of the collectors that
prometheus-client puts on its global default registry, so they are registered here:

- `process_*` (ProcessCollector, from /proc/self): resident and virtual memory, CPU seconds,
  open and max file descriptors, start time (a restart shows as a change of
  `process_start_time_seconds`);
- `python_info` (PlatformCollector): the interpreter's version and implementation;
- `computedomain_build_info` = 1, labelled with what is running.
"""

from __future__ import annotations

import platform

from prometheus_client import CollectorRegistry, Gauge, PlatformCollector, ProcessCollector

from computedomain import distribution_version

BUILD_INFO = "computedomain_build_info"


def build_labels() -> dict[str, str]:
    return {
        "version": distribution_version(),
        "python_version": platform.python_version(),
        "python_implementation": platform.python_implementation(),
    }


def register_process_metrics(registry: CollectorRegistry) -> None:
    """Registers the three on `registry`; a second call on the same registry raises ValueError."""
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    labels = build_labels()
    info = Gauge(
        BUILD_INFO,
        "Always 1; the labels say which computedomain version runs on which Python.",
        list(labels),
        registry=registry,
    )
    info.labels(**labels).set(1)
