"""Just enough PromQL reading for the monitoring tests: which metric names an expression selects."""

from __future__ import annotations

import re

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
