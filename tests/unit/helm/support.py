"""Running the pinned helm on the chart: locate it (skip, or fail under hack/test.sh and CI),
render with `helm template`, pick objects out of the result. Also used by
tests/integration/test_helm.py."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml

from computedomain.devcluster.helm import HelmUnavailableError, find_helm

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "manifests" / "helm" / "computedomain-controller"
NVIDIA_VALUES = ROOT / "tests" / "fixtures" / "helm" / "nvidia-values.yaml"
OUR_NVIDIA_VALUES = ROOT / "tests" / "fixtures" / "helm" / "nvidia-values-ours.yaml"

Obj = dict[str, Any]


def helm_required() -> bool:
    """Under hack/test.sh (COMPUTEDOMAIN_REQUIRE_CONTROL_PLANE=1) and CI a missing helm fails."""
    return (
        os.environ.get("COMPUTEDOMAIN_REQUIRE_CONTROL_PLANE") == "1"
        or os.environ.get("CI", "").lower() == "true"
    )


def helm_or_skip() -> Path:
    """HELM, else the pinned build (built on first use, minutes once)."""
    try:
        return find_helm(build=True)
    except HelmUnavailableError as error:
        if helm_required():
            pytest.fail(f"helm unavailable: {error}")
        pytest.skip(f"no helm found or built (set HELM or run hack/helm/build.sh): {error}")


def run_helm(helm: Path, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(helm), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def template_args(
    release: str = "computedomain-controller",
    namespace: str = "computedomain-system",
    values: Iterable[Path] = (),
    sets: Iterable[str] = (),
    set_json: Iterable[str] = (),
) -> list[str]:
    args = ["template", release, str(CHART), "--namespace", namespace]
    for path in values:
        args += ["--values", str(path)]
    for item in sets:
        args += ["--set", item]
    for item in set_json:
        args += ["--set-json", item]
    return args


def render(helm: Path, **kwargs: Any) -> list[Obj]:
    """Objects `helm template` renders (crds/ not included)."""
    result = run_helm(helm, *template_args(**kwargs))
    assert result.returncode == 0, result.stderr
    return [doc for doc in yaml.safe_load_all(result.stdout) if doc]


def render_error(helm: Path, **kwargs: Any) -> str:
    """stderr of a `helm template` that must fail."""
    result = run_helm(helm, *template_args(**kwargs))
    assert result.returncode != 0, f"rendered although it should fail:\n{result.stdout[:2000]}"
    return result.stderr


def find(objects: list[Obj], kind: str, name: str | None = None) -> Obj:
    matches = [
        o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]
    assert len(matches) == 1, f"want one {kind} {name or ''}, got {len(matches)}"
    return matches[0]


def kinds(objects: list[Obj]) -> set[tuple[str, str]]:
    return {(o["kind"], o["metadata"]["name"]) for o in objects}


def container(objects: list[Obj]) -> Obj:
    deployment = find(objects, "Deployment")
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["controller"]
    first: Obj = containers[0]
    return first


def env_of(objects: list[Obj]) -> dict[str, Any]:
    """name -> value (a string) or valueFrom (a dict); duplicates are an error."""
    env = container(objects)["env"]
    names = [e["name"] for e in env]
    assert len(names) == len(set(names)), f"duplicate env names: {names}"
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in env}
