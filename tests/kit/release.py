"""The release's version and every place that repeats it. pyproject.toml holds it; Helm and
kustomize cannot read pyproject, so the chart and the kustomize image tag carry copies, and the
CHANGELOG names it in its newest release heading. tests/unit/test_release.py checks they agree;
tests that render the chart or the krew manifest expect ``PROJECT_VERSION`` rather than a
literal, so a release bumps the copies and no test."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = ROOT / "pyproject.toml"
CHART = ROOT / "manifests" / "helm" / "computedomain-controller" / "Chart.yaml"
KUSTOMIZATION = ROOT / "manifests" / "manager" / "kustomization.yaml"
CHANGELOG = ROOT / "CHANGELOG.md"

# "## [0.1.0] - 2026-12-07" (Keep a Changelog); "## [Unreleased]" has no date and is skipped.
RELEASE_HEADING = re.compile(r"^## \[(?P<version>[^\]]+)\] - (?P<date>\d{4}-\d{2}-\d{2})$", re.M)


def project_version() -> str:
    version = tomllib.loads(PYPROJECT.read_text())["project"]["version"]
    assert isinstance(version, str)
    return version


PROJECT_VERSION = project_version()


def chart() -> dict[str, Any]:
    document = yaml.safe_load(CHART.read_text())
    assert isinstance(document, dict)
    return document


def kustomize_image_tag() -> str:
    """The tag kustomize gives the controller image (`images: - name: controller`)."""
    images = yaml.safe_load(KUSTOMIZATION.read_text())["images"]
    (controller,) = [image for image in images if image["name"] == "controller"]
    return str(controller["newTag"])


def changelog_newest_release() -> str | None:
    match = RELEASE_HEADING.search(CHANGELOG.read_text())
    return match["version"] if match else None
