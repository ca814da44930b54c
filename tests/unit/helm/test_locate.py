"""Locating helm: HELM wins, then hack/helm/build.sh's cache (fake build scripts here)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from computedomain.devcluster.helm import (
    HELM_BUILD_SCRIPT,
    HelmUnavailableError,
    find_helm,
    helm_version,
)
from tests.unit.helm.support import ROOT


def executable(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def fake_build_script(tmp_path: Path) -> Path:
    """Prints a bin dir holding a fake helm; with --cached, reports an empty cache (exit 3)."""
    bin_dir = tmp_path / "cache" / "helm" / "key" / "bin"
    return executable(
        tmp_path / "build.sh",
        f'[ "${{1:-}}" = --cached ] && exit 3\n'
        f"mkdir -p {bin_dir}\n"
        f"printf '#!/bin/sh\\necho v0.0.0-fake\\n' > {bin_dir}/helm\n"
        f"chmod +x {bin_dir}/helm\necho {bin_dir}\n",
    )


def env_for(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {"PATH": os.environ["PATH"], "COMPUTEDOMAIN_CACHE": str(tmp_path / "cache"), **extra}


def test_helm_variable_wins(tmp_path: Path) -> None:
    own = executable(tmp_path / "my-helm", "#!/bin/sh\necho v3.99.0\n")
    script = fake_build_script(tmp_path)
    assert find_helm(env=env_for(tmp_path, HELM=str(own)), build_script=script) == own
    assert not (tmp_path / "cache" / "helm").exists()  # the build never ran
    assert helm_version(own) == "v3.99.0"


def test_helm_variable_must_be_executable(tmp_path: Path) -> None:
    path = tmp_path / "helm"
    path.write_text("")
    with pytest.raises(HelmUnavailableError, match="HELM="):
        find_helm(env=env_for(tmp_path, HELM=str(path)), build_script=fake_build_script(tmp_path))


def test_cache_without_building_reports_an_empty_cache(tmp_path: Path) -> None:
    script = fake_build_script(tmp_path)
    with pytest.raises(HelmUnavailableError, match="not in the build cache"):
        find_helm(build=False, env=env_for(tmp_path), build_script=script)


def test_building_fills_the_cache(tmp_path: Path) -> None:
    path = find_helm(env=env_for(tmp_path), build_script=fake_build_script(tmp_path))
    assert path == tmp_path / "cache" / "helm" / "key" / "bin" / "helm"
    assert (tmp_path / "cache" / "helm-build.lock").exists()


def test_failing_build_is_an_error(tmp_path: Path) -> None:
    script = executable(tmp_path / "build.sh", "echo 'go: not found' >&2\nexit 1\n")
    with pytest.raises(HelmUnavailableError, match="exit code 1: go: not found"):
        find_helm(env=env_for(tmp_path), build_script=script)


def test_the_pinned_helm_is_the_one_tests_use(helm: Path) -> None:
    pinned = re.search(r"^\thelm\.sh/helm/v3 (v\S+)", (ROOT / "hack/helm/go.mod").read_text(), re.M)
    assert pinned, "hack/helm/go.mod pins no helm.sh/helm/v3"
    assert "helm.sh/helm/v3/cmd/helm" in (ROOT / "hack/helm/go.mod").read_text()
    assert HELM_BUILD_SCRIPT.is_file()
    version = helm_version(helm)
    if os.environ.get("HELM") and "/computedomain/helm/" not in os.environ["HELM"]:
        pytest.skip(f"HELM={os.environ['HELM']} is a helm of your own ({version})")
    assert version.startswith(pinned.group(1) + "+g"), version
