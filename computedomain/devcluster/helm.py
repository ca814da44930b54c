"""Find ``helm`` for the chart tests (manifests/helm/computedomain-controller).

Resolution order:

1. ``HELM``, a path to a helm binary (a developer's own helm, or what hack/test.sh exports),
2. the build cache filled by ``hack/helm/build.sh`` from the pinned Go tools module
   (``hack/helm/go.mod``); with ``build=True`` the script builds it when missing (minutes once,
   a no-op afterwards), with ``build=False`` it only reports what the cache holds.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

from computedomain.devcluster.assets import REPO_ROOT

HELM_BUILD_SCRIPT = REPO_ROOT / "hack" / "helm" / "build.sh"
# build.sh's exit status with --cached when the cache holds no helm for the current key.
_NOT_CACHED = 3


class HelmUnavailableError(RuntimeError):
    """No helm binary could be found or built."""


def _cache_root(env: Mapping[str, str]) -> Path:
    return Path(
        env.get("COMPUTEDOMAIN_CACHE")
        or Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "computedomain"
    )


def _run_build_script(script: Path, *, build: bool, env: Mapping[str, str]) -> Path:
    if not script.is_file():
        raise HelmUnavailableError(f"build script {script} not found")
    args = ["bash", str(script)] if build else ["bash", str(script), "--cached"]
    cache_root = _cache_root(env)
    cache_root.mkdir(parents=True, exist_ok=True)
    # Concurrent callers (parallel sessions) compile once; the others then find the stamp. A
    # lock of its own, so locating helm never waits for a control-plane build.
    with (cache_root / "helm-build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            out = subprocess.run(
                args,
                capture_output=True,
                text=True,
                check=False,
                env=dict(env),
            )
        except OSError as exc:
            raise HelmUnavailableError(f"cannot run {script}: {exc}") from exc
    lines = out.stdout.strip().splitlines()
    if out.returncode == _NOT_CACHED and not build:
        raise HelmUnavailableError(f"helm is not in the build cache (run {script})")
    if out.returncode != 0 or not lines:
        tail = "\n".join(out.stderr.strip().splitlines()[-5:])
        raise HelmUnavailableError(f"{script} failed with exit code {out.returncode}: {tail}")
    return Path(lines[-1]) / "helm"


def find_helm(
    *,
    build: bool = True,
    env: Mapping[str, str] | None = None,
    build_script: Path = HELM_BUILD_SCRIPT,
) -> Path:
    """Path of a usable helm: ``HELM`` wins, then the build cache (built when ``build``)."""
    env = os.environ if env is None else env
    if env.get("HELM"):
        path = Path(env["HELM"])
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise HelmUnavailableError(f"HELM={path} is not an executable file")
        return path
    path = _run_build_script(build_script, build=build, env=env)
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise HelmUnavailableError(f"build cache {path.parent} lacks helm")
    return path


def helm_version(path: Path) -> str:
    """``helm version --short`` (e.g. ``v3.22.0+g0000000``), or ``"?"`` if it fails."""
    try:
        out = subprocess.run(
            [str(path), "version", "--short"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"? ({exc})"
    return out.stdout.strip() or "?"
