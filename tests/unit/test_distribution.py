"""The controller's distribution (what the image installs) holds the controller and nothing of the
lab: its wheel is built as the Dockerfile builds it, its modules listed, and every one of them
imported from the wheel alone, with the locked dependencies and without the checkout."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CONTROLLER_PACKAGES = {
    "admission",
    "api",
    "config",
    "domain",
    "kubectl",
    "observability",
    "runtime",
}
LAB_PACKAGES = {"sim", "devcluster"}
CONTROLLER_SCRIPTS = {
    "computedomain-controller",
    "compute-domain-controller",
    "kubectl-computedomain",
    "kubectl-cdom",
}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    uv = os.environ.get("UV") or shutil.which("uv")  # `uv run` names itself in UV
    if uv is None:
        pytest.fail("uv not found (run the tests with hack/test.sh or uv run)")
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [uv, "build", "--wheel", "--package", "computedomain", "--out-dir", str(out)],
        cwd=ROOT, check=True, capture_output=True, timeout=240,
    )  # fmt: skip
    (built,) = out.glob("computedomain-*.whl")
    return built


def modules_in(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as archive:
        return sorted(
            name.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
            for name in archive.namelist()
            if name.endswith(".py")
        )


def test_the_wheel_holds_the_controller_and_none_of_the_lab(wheel: Path) -> None:
    modules = modules_in(wheel)
    packages = {m.split(".")[1] for m in modules if m.count(".") >= 2}
    assert packages == CONTROLLER_PACKAGES, packages
    assert not [m for m in modules if set(m.split(".")) & LAB_PACKAGES]
    assert {"computedomain.app", "computedomain.cli", "computedomain.config"} <= set(modules)
    with zipfile.ZipFile(wheel) as archive:
        (entry_points,) = [n for n in archive.namelist() if n.endswith("entry_points.txt")]
        scripts = {
            line.split("=")[0].strip()
            for line in archive.read(entry_points).decode().splitlines()
            if "=" in line
        }
    assert scripts == CONTROLLER_SCRIPTS


def test_every_module_of_the_wheel_imports_without_the_checkout(
    wheel: Path, tmp_path: Path
) -> None:
    installed = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(installed)
    modules = [m for m in modules_in(wheel) if not m.endswith("__main__")]
    # -S: no site, so no .pth puts the checkout on the path; the locked dependencies come from
    # this environment's site-packages as a plain directory, the controller from the wheel only.
    path = os.pathsep.join([str(installed), sysconfig.get_paths()["purelib"]])
    script = (
        "import importlib, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        "import computedomain\n"
        "assert computedomain.__file__.startswith(sys.argv[1]), computedomain.__file__\n"
    )
    result = subprocess.run(
        [sys.executable, "-S", "-c", script, str(installed)],
        cwd=tmp_path, env={"PYTHONPATH": path, "PATH": os.environ.get("PATH", "")},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr


def test_the_wheel_carries_our_crds_and_the_plugin_prints_them(wheel: Path, tmp_path: Path) -> None:
    """`kubectl cdom crds` after a pip install: crds/ in the wheel as package data, the same
    bytes, printed by the plugin run from the wheel alone."""
    sources = sorted((ROOT / "crds").glob("*.yaml"))
    assert sources
    with zipfile.ZipFile(wheel) as archive:
        for source in sources:
            assert archive.read(f"computedomain/crds/{source.name}") == source.read_bytes()
        archive.extractall(tmp_path / "site")
    path = os.pathsep.join([str(tmp_path / "site"), sysconfig.get_paths()["purelib"]])
    result = subprocess.run(
        [sys.executable, "-S", "-m", "computedomain.kubectl.main", "crds"],
        cwd=tmp_path, env={"PYTHONPATH": path, "PATH": os.environ.get("PATH", "")},
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    names = [doc["metadata"]["name"] for doc in yaml.safe_load_all(result.stdout) if doc]
    assert names == [
        "computedomaincliques.resource.nvidia.com",
        "computedomains.resource.nvidia.com",
    ]
