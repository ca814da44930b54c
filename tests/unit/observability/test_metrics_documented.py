"""docs/operations.md's metrics tables name every family the controller's registry exports."""

from __future__ import annotations

from pathlib import Path

from tests.kit.promql import exported_metric_names

ROOT = Path(__file__).resolve().parents[3]


def test_every_exported_metric_is_in_the_metrics_tables() -> None:
    text = (ROOT / "docs" / "operations.md").read_text()
    metrics = text.split("\n## Metrics\n", 1)[1].split("\n## Alerts", 1)[0]
    names = exported_metric_names()
    assert {"computedomain_build_info", "process_resident_memory_bytes", "python_info"} <= names
    undocumented = sorted(
        name
        for name in names
        if f"`{name}`" not in metrics
        # The runtime table abbreviates controller_runtime_ families as `…_<rest>`.
        and f"`…{name.removeprefix('controller_runtime')}`" not in metrics
    )
    assert not undocumented, f"docs/operations.md, Metrics, does not document {undocumented}"
