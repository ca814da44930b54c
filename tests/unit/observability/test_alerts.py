"""The shipped alerts: a runbook section for each, promtool cases that fire and that do not,
and a dashboard panel showing each alert's signal."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.kit.promql import metric_names

ROOT = Path(__file__).resolve().parents[3]
RULE = ROOT / "manifests" / "prometheus" / "prometheus_rule.yaml"
RULE_TESTS = ROOT / "manifests" / "prometheus" / "prometheus_rule_test.yaml"
RUNBOOKS = ROOT / "docs" / "runbooks.md"
DASHBOARD = ROOT / "manifests" / "dashboards" / "computedomain.json"


def alerts() -> list[dict[str, Any]]:
    document = yaml.safe_load(RULE.read_text())
    return [r for g in document["spec"]["groups"] for r in g["rules"] if "alert" in r]


def alert_names() -> list[str]:
    return [a["alert"] for a in alerts()]


def runbook_anchors() -> set[str]:
    """GitHub's anchors of docs/runbooks.md's headings (lower case, spaces to dashes)."""
    anchors = set()
    for line in RUNBOOKS.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^a-z0-9 _-]", "", title).replace(" ", "-"))
    return anchors


def test_metric_names_are_found_in_expressions() -> None:
    expr = (
        'sum by (le) (rate(a_bucket{job="$job", x=~"y|z"}[5m])) / on (x) group_left (w) '
        'b_total offset 5m > 15 * 60 unless absent(up{job="j"} == 1) and time() - c'
    )
    assert metric_names(expr) == {"a_bucket", "b_total", "up", "c"}


@pytest.mark.parametrize("name", alert_names())
def test_every_alert_has_a_runbook_section_and_no_link_that_may_not_resolve(name: str) -> None:
    (alert,) = [a for a in alerts() if a["alert"] == name]
    # runbook_url only where it is known to resolve: the chart adds it for a configured base.
    assert "runbook_url" not in alert["annotations"]
    assert name.lower() in runbook_anchors(), f"docs/runbooks.md has no section '## {name}'"
    section = RUNBOOKS.read_text().split(f"## {name}\n", 1)[1].split("\n## ", 1)[0]
    for part in ("**Meaning.**", "**Confirm.**", "**Fix"):
        assert part in section, f"{name}: runbook section lacks {part}"
    assert "```bash" in section
    assert "```promql" in section


def test_every_runbook_section_is_an_alert() -> None:
    sections = re.findall(r"^## (\S+)$", RUNBOOKS.read_text(), flags=re.MULTILINE)
    assert sections == alert_names()


@pytest.mark.parametrize("name", alert_names())
def test_every_alert_has_promtool_cases_that_fire_and_that_do_not(name: str) -> None:
    cases = [
        case
        for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]
        for case in test.get("alert_rule_test", [])
        if case["alertname"] == name
    ]
    assert any(case.get("exp_alerts") for case in cases), f"{name}: no case where it fires"
    assert any(not case.get("exp_alerts") for case in cases), f"{name}: no quiet case"


def dashboard_expressions() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", []) if "expr" in t]


@pytest.mark.parametrize("name", alert_names())
def test_every_alerts_signal_has_a_dashboard_panel(name: str) -> None:
    (alert,) = [a for a in alerts() if a["alert"] == name]
    shown = set().union(*(metric_names(e) for e in dashboard_expressions()))
    missing = metric_names(alert["expr"]) - shown
    assert not missing, f"{name}: no dashboard panel queries {sorted(missing)}"
