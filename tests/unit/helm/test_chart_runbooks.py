"""prometheusRule.runbookBaseURL: no runbook_url unless a base is set; then every alert links
its own section of docs/runbooks.md under that base."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.helm.support import CHART, find, render
from tests.unit.observability.test_alerts import runbook_anchors

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = ROOT / "manifests" / "prometheus" / "prometheus_rule.yaml"


def alerts(rule: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for group in rule["spec"]["groups"] for r in group["rules"] if "alert" in r]


def test_by_default_no_alert_carries_a_runbook_url(helm: Path) -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["prometheusRule"]["runbookBaseURL"] == ""
    rendered = alerts(find(render(helm, sets=["prometheusRule.enabled=true"]), "PrometheusRule"))
    assert rendered
    assert [a["alert"] for a in rendered if "runbook_url" in a["annotations"]] == []


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
        anchor = alert["alert"].lower()
        assert annotations.pop("runbook_url") == f"{base.rstrip('/')}#{anchor}"
        assert anchor in runbook_anchors(), f"docs/runbooks.md has no section for {anchor}"
        assert annotations == source_annotations  # nothing else changes
        assert alert["expr"] == source["expr"]
