"""manifests/dashboards/computedomain.json, statically: variables, no hard-coded job, per-domain
panels filtered by the namespace and ComputeDomain variables, the process panels.
tests/integration/test_dashboard.py runs every query against a real Prometheus."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.kit.promql import metric_names

ROOT = Path(__file__).resolve().parents[3]
DASHBOARD = ROOT / "manifests" / "dashboards" / "computedomain.json"
RULES = ROOT / "manifests" / "prometheus" / "prometheus_rule.yaml"
# Panels that count the domains an alert pages for: the alert's expression, per domain.
COUNTS_OF_ALERT = (
    "ComputeDomainNotReady",
    "ComputeDomainWorkloadNotStarting",
    "ComputeDomainCliqueSplit",
)
FILTERS = ', namespace=~"$namespace", name=~"$name"'
# Metrics labelled namespace/name: their panels follow the two variables.
PER_DOMAIN = frozenset(
    {
        "computedomain_status_condition",
        "computedomain_status_condition_reason",
        "computedomain_nodes",
        "computedomain_cliques",
        "computedomain_clique_split",
        "computedomain_deletion_started_timestamp_seconds",
    }
)


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def targets() -> list[tuple[str, str]]:
    return [
        (panel["title"], target["expr"])
        for panel in dashboard()["panels"]
        for target in panel.get("targets", [])
    ]


def test_variables() -> None:
    variables = {v["name"]: v for v in dashboard()["templating"]["list"]}
    assert list(variables) == ["datasource", "job", "namespace", "name"]
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert "computedomain_build_info" in variables["job"]["query"]
    for name in ("namespace", "name"):
        assert variables[name]["includeAll"] is True
        assert variables[name]["allValue"] == ".*"
        assert 'job="$job"' in variables[name]["query"]
    assert 'namespace=~"$namespace"' in variables["name"]["query"]


def test_every_panel_uses_the_datasource_variable() -> None:
    for panel in dashboard()["panels"]:
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]


def test_no_hard_coded_job() -> None:
    text = DASHBOARD.read_text()
    assert "computedomain-controller-metrics" not in text
    for title, expr in targets():
        selectors = expr.count("{")
        assert expr.count('job="$job"') == selectors, f"{title}: a selector without the job: {expr}"


@pytest.mark.parametrize(("title", "expr"), targets())
def test_per_domain_series_follow_the_namespace_and_name_variables(title: str, expr: str) -> None:
    for metric in metric_names(expr) & PER_DOMAIN:
        chunks = expr.split(metric + "{")
        for at, part in enumerate(chunks[1:], start=1):
            before = (metric + "{").join(chunks[:at])
            if "unless on (namespace, name)" in before:
                continue  # removes domains from a set selected already (as the alert does)
            matchers = part.split("}", 1)[0]
            assert 'namespace=~"$namespace"' in matchers, f"{title}: {metric}"
            assert 'name=~"$name"' in matchers, f"{title}: {metric}"


def one_line(expr: str) -> str:
    return " ".join(expr.split()).replace("( ", "(").replace(" )", ")")


@pytest.mark.parametrize("alert", COUNTS_OF_ALERT)
def test_a_panel_named_after_an_alert_counts_the_domains_that_alert_pages_for(alert: str) -> None:
    """The panel's query is the alert's, on the dashboard's job, with its selection filtered by
    the namespace and name variables, counted: an SRE who opens the dashboard from the alert
    sees the same domains (a panel that also counted idle ones once disagreed with it)."""
    rules = yaml.safe_load(RULES.read_text())
    expressions = {
        rule["alert"]: rule["expr"]
        for group in rules["spec"]["groups"]
        for rule in group["rules"]
        if "alert" in rule
    }
    panel = [expr for title, expr in targets() if title.endswith(f"(alert {alert})")]
    assert len(panel) == 1, f"one panel titled '... (alert {alert})', found {len(panel)}"
    expected = one_line(expressions[alert]).replace(
        'job="computedomain-controller-metrics"', 'job="$job"'
    )
    assert one_line(panel[0]).replace(FILTERS, "") == f"count({expected}) or vector(0)"


def test_process_panels() -> None:
    exprs = [expr for _, expr in targets()]
    assert any(e.startswith("process_resident_memory_bytes{") for e in exprs)
    assert any(e.startswith("rate(process_cpu_seconds_total{") for e in exprs)
    assert any(e.startswith("changes(process_start_time_seconds{") for e in exprs)


def test_ids_are_unique_and_panels_do_not_overlap() -> None:
    panels = dashboard()["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        mine = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not mine & cells, f"{panel['title']} overlaps another panel"
        cells |= mine
