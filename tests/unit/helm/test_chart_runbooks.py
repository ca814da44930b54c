"""prometheusRule.runbookBaseURL: every alert's runbook_url moves to the given base."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.helm.support import CHART, find, render

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = ROOT / "manifests" / "prometheus" / "prometheus_rule.yaml"
SHIPPED_BASE = "https://github.com/computedomain/computedomain/blob/main/docs/runbooks.md"


def alerts(rule: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for group in rule["spec"]["groups"] for r in group["rules"] if "alert" in r]


def test_the_values_default_is_the_base_of_the_shipped_rule() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["prometheusRule"]["runbookBaseURL"] == SHIPPED_BASE
    for alert in alerts(yaml.safe_load(SHIPPED.read_text())):
        assert alert["annotations"]["runbook_url"].startswith(SHIPPED_BASE + "#")


@pytest.mark.parametrize("base", ["https://wiki.example.com/ops/runbooks", "https://x.test/rb/"])
def test_runbook_base_url_replaces_every_alerts_base(helm: Path, base: str) -> None:
    objects = render(
        helm, sets=["prometheusRule.enabled=true", f"prometheusRule.runbookBaseURL={base}"]
    )
    rendered = alerts(find(objects, "PrometheusRule"))
    shipped = alerts(yaml.safe_load(SHIPPED.read_text()))
    assert [a["alert"] for a in rendered] == [a["alert"] for a in shipped]
    for alert, source in zip(rendered, shipped, strict=True):
        annotations, source_annotations = dict(alert["annotations"]), dict(source["annotations"])
        assert annotations.pop("runbook_url") == f"{base.rstrip('/')}#{alert['alert'].lower()}"
        source_annotations.pop("runbook_url")
        assert annotations == source_annotations  # nothing else changes
        assert alert["expr"] == source["expr"]
