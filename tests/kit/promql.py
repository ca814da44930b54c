"""Just enough PromQL reading for the monitoring tests: which metric names an expression selects."""

from __future__ import annotations

import re

from prometheus_client import CollectorRegistry

from computedomain.observability.metrics import DomainMetrics
from computedomain.runtime.metrics import RuntimeMetrics

# Words of PromQL that are not metric names.
PROMQL_WORDS = frozenset(
    {
        "and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right",
        "bool", "offset", "inf", "nan",
    }
)  # fmt: skip


def metric_names(expr: str) -> set[str]:
    """Metric names a PromQL expression selects (enough for our rules and dashboard: string
    literals, label matchers, durations and grouping clauses are dropped, then every
    identifier that is neither a keyword nor a function call is a metric name)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    text = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", text)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        word = match.group(0)
        if word.lower() in PROMQL_WORDS or text[match.end() :].lstrip().startswith("("):
            continue
        if match.start() > 0 and text[match.start() - 1] in "0123456789.":  # 15m, 1e3
            continue
        names.add(word)
    return names


def _controller_registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    DomainMetrics(registry)
    RuntimeMetrics(registry)
    return registry


def exported_metric_names() -> set[str]:
    """Every family the controller's registry exports, counters with their `_total`."""
    return {
        family.name + ("_total" if family.type == "counter" else "")
        for family in _controller_registry().collect()
    }


def exported_label_names() -> set[str]:
    """Label names of the series a fresh controller exports (build_info's, the runtime's)."""
    return {
        label
        for family in _controller_registry().collect()
        for sample in family.samples
        for label in sample.labels
    }
