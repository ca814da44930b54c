"""One version per release (CHANGELOG.md, "Cutting a release"): pyproject.toml holds it, and
every copy agrees with it: the chart's version and appVersion (the chart's default controller
image tag is appVersion), the kustomize image tag, the installed distribution (what
`computedomain-controller --version` prints) and the CHANGELOG's newest release heading."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.kit.release import (
    CHART,
    PROJECT_VERSION,
    changelog_newest_release,
    chart,
    kustomize_image_tag,
)


def test_the_version_is_spelled_alike_by_pep_440_and_semver() -> None:
    # Helm wants SemVer, Python PEP 440: X.Y.Z is the spelling both keep unchanged (a pre-release
    # would be 0.2.0rc1 in one and 0.2.0-rc.1 in the other, and the copies could never agree).
    assert re.fullmatch(r"\d+\.\d+\.\d+", PROJECT_VERSION), PROJECT_VERSION


def test_every_copy_of_the_version_is_pyprojects() -> None:
    metadata = chart()
    copies = {
        "Chart.yaml version": str(metadata["version"]),
        "Chart.yaml appVersion": str(metadata["appVersion"]),
        "manifests/manager/kustomization.yaml newTag": kustomize_image_tag(),
        "the installed distribution (importlib.metadata)": importlib.metadata.version(
            "computedomain"
        ),
        "CHANGELOG.md newest release heading": str(changelog_newest_release()),
    }
    differ = {where: version for where, version in copies.items() if version != PROJECT_VERSION}
    assert not differ, f"pyproject.toml says {PROJECT_VERSION}, these differ: {differ}"


def test_the_charts_default_controller_image_tag_is_its_app_version() -> None:
    # The rendered image is checked in tests/unit/helm/test_values.py (needs helm); here the
    # two facts it rests on: no tag in values, and the template's fallback to appVersion.
    values = yaml.safe_load((CHART.parent / "values.yaml").read_text())
    assert values["controllerImage"]["tag"] == ""
    helpers = (CHART.parent / "templates" / "_helpers.tpl").read_text()
    assert ".Values.controllerImage.tag | default .Chart.AppVersion" in helpers


@pytest.mark.parametrize("script", ["computedomain-controller", "kubectl-cdom"])
def test_the_console_scripts_print_the_version(script: str) -> None:
    path = Path(sys.executable).parent / script
    result = subprocess.run(
        [str(path), "--version"], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout == f"{script} {PROJECT_VERSION}\n"
