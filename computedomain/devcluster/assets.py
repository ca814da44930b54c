"""Find the control-plane binaries (etcd, kube-apiserver, KCM, scheduler, kubectl, kwok).

Resolution order per binary, following envtest's conventions and extending them in the same
style for what envtest lacks:

1. ``TEST_ASSET_<NAME>`` (e.g. ``TEST_ASSET_KUBE_APISERVER``, ``TEST_ASSET_KWOK``),
2. the directory ``KUBEBUILDER_ASSETS``,
3. ``/usr/local/kubebuilder/bin``,
4. the build cache filled by ``hack/controlplane/build.sh`` (run when allowed; it is a no-op
   when the cache stamp matches, so calling it is cheap once built).
"""

from __future__ import annotations

import fcntl
import os
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

BINARIES: tuple[str, ...] = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
    "kwok",
)
DEFAULT_ASSETS_DIR = Path("/usr/local/kubebuilder/bin")
REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "hack" / "controlplane" / "build.sh"


class AssetsUnavailableError(RuntimeError):
    """No usable set of control-plane binaries could be found or built."""


def env_var_for(binary: str) -> str:
    """``kube-apiserver`` -> ``TEST_ASSET_KUBE_APISERVER``."""
    return "TEST_ASSET_" + binary.upper().replace("-", "_")


@dataclass(frozen=True)
class Assets:
    paths: Mapping[str, Path]
    # Where each binary came from (env var name, directory, or "build cache"), for test headers.
    sources: Mapping[str, str] = field(default_factory=dict)

    def __getitem__(self, binary: str) -> Path:
        return self.paths[binary]

    def versions(self) -> dict[str, str]:
        """First line of ``<binary> --version`` for each binary (``"?"`` if it fails)."""
        return {name: binary_version(path) for name, path in self.paths.items()}


def binary_version(path: Path) -> str:
    # kubectl has no --version flag; everything else here does.
    args = ["version", "--client"] if path.name == "kubectl" else ["--version"]
    try:
        out = subprocess.run(
            [str(path), *args], capture_output=True, text=True, timeout=20, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"? ({exc})"
    text = (out.stdout or out.stderr).strip()
    return text.splitlines()[0] if text else "?"


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _resolve_without_building(
    env: Mapping[str, str],
) -> tuple[dict[str, Path], dict[str, str], list[str]]:
    found: dict[str, Path] = {}
    sources: dict[str, str] = {}
    missing: list[str] = []
    directories: list[tuple[str, Path]] = []
    if env.get("KUBEBUILDER_ASSETS"):
        directories.append(("KUBEBUILDER_ASSETS", Path(env["KUBEBUILDER_ASSETS"])))
    directories.append((str(DEFAULT_ASSETS_DIR), DEFAULT_ASSETS_DIR))
    for binary in BINARIES:
        var = env_var_for(binary)
        if env.get(var):
            path = Path(env[var])
            if not _is_executable(path):
                raise AssetsUnavailableError(f"{var}={path} is not an executable file")
            found[binary], sources[binary] = path, var
            continue
        for label, directory in directories:
            if _is_executable(directory / binary):
                found[binary], sources[binary] = directory / binary, label
                break
        else:
            missing.append(binary)
    return found, sources, missing


def build_binaries(build_script: Path = BUILD_SCRIPT) -> Path:
    """Run the cached build and return its bin directory (the script's last stdout line).

    A file lock serialises concurrent callers (parallel test sessions, ``up`` while tests run)
    so that only one of them compiles; the others then find the cache stamp.
    """
    if not build_script.is_file():
        raise AssetsUnavailableError(f"build script {build_script} not found")
    cache_root = Path(
        os.environ.get("COMPUTEDOMAIN_CACHE")
        or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "computedomain"
    )
    cache_root.mkdir(parents=True, exist_ok=True)
    with (cache_root / "build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            out = subprocess.run(
                ["bash", str(build_script)], stdout=subprocess.PIPE, text=True, check=False
            )
        except OSError as exc:
            raise AssetsUnavailableError(f"cannot run {build_script}: {exc}") from exc
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        raise AssetsUnavailableError(f"{build_script} failed with exit code {out.returncode}")
    return Path(lines[-1])


def find_assets(
    *,
    build: bool = True,
    env: Mapping[str, str] | None = None,
    build_script: Path = BUILD_SCRIPT,
) -> Assets:
    """Locate every binary; build the missing ones from the Go tools module if ``build``."""
    env = os.environ if env is None else env
    found, sources, missing = _resolve_without_building(env)
    if missing:
        if not build:
            raise AssetsUnavailableError(
                "missing control-plane binaries: "
                + ", ".join(missing)
                + " (set KUBEBUILDER_ASSETS or TEST_ASSET_*, or run hack/controlplane/build.sh)"
            )
        bin_dir = build_binaries(build_script)
        for binary in missing:
            path = bin_dir / binary
            if not _is_executable(path):
                raise AssetsUnavailableError(f"build cache {bin_dir} lacks {binary}")
            found[binary], sources[binary] = path, "build cache"
    return Assets(paths=found, sources=sources)
