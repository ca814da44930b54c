import os
from pathlib import Path

import pytest

from computedomain.devcluster import assets
from computedomain.devcluster.assets import (
    BINARIES,
    AssetsUnavailableError,
    env_var_for,
    find_assets,
)


def fake_binary(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\necho fake 1.0\n")
    path.chmod(0o755)
    return path


@pytest.fixture(autouse=True)
def no_default_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(assets, "DEFAULT_ASSETS_DIR", tmp_path / "nowhere")


def test_env_var_names_follow_envtest_style() -> None:
    assert env_var_for("kube-apiserver") == "TEST_ASSET_KUBE_APISERVER"
    assert env_var_for("kube-controller-manager") == "TEST_ASSET_KUBE_CONTROLLER_MANAGER"
    assert env_var_for("etcd") == "TEST_ASSET_ETCD"
    assert env_var_for("kwok") == "TEST_ASSET_KWOK"


def test_per_binary_variable_wins_over_kubebuilder_assets(tmp_path: Path) -> None:
    directory = tmp_path / "assets"
    for name in BINARIES:
        fake_binary(directory / name)
    override = fake_binary(tmp_path / "custom" / "my-etcd")
    env = {"KUBEBUILDER_ASSETS": str(directory), "TEST_ASSET_ETCD": str(override)}
    found = find_assets(build=False, env=env)
    assert found["etcd"] == override
    assert found.sources["etcd"] == "TEST_ASSET_ETCD"
    assert found["kwok"] == directory / "kwok"
    assert found.sources["kwok"] == "KUBEBUILDER_ASSETS"
    assert found.versions()["kwok"] == "fake 1.0"


def test_missing_binaries_are_named_when_building_is_not_allowed(tmp_path: Path) -> None:
    directory = tmp_path / "assets"
    fake_binary(directory / "etcd")
    with pytest.raises(AssetsUnavailableError, match="kube-apiserver"):
        find_assets(build=False, env={"KUBEBUILDER_ASSETS": str(directory)})


def test_non_executable_override_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "etcd"
    path.write_text("")
    os.chmod(path, 0o644)
    with pytest.raises(AssetsUnavailableError, match="TEST_ASSET_ETCD"):
        find_assets(build=False, env={"TEST_ASSET_ETCD": str(path)})


def test_missing_binaries_come_from_the_build_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache" / "bin"
    for name in BINARIES:
        fake_binary(cache / name)
    script = tmp_path / "build.sh"
    script.write_text(f"echo building >&2\necho {cache}\n")
    monkeypatch.setenv("COMPUTEDOMAIN_CACHE", str(tmp_path / "cache-root"))
    found = find_assets(build=True, env={}, build_script=script)
    assert found["kube-apiserver"] == cache / "kube-apiserver"
    assert found.sources["kube-apiserver"] == "build cache"
