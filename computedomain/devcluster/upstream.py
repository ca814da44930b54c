"""NVIDIA's own compute-domain binaries (kubernetes-sigs/dra-driver-nvidia-gpu, pinned), for the
differential tests: find the build, and run NVIDIA's controller against a local control plane with
the environment its Helm chart's Deployment gives it.

Two pinned targets (``TARGETS``): release v0.4.1 and main at 95932046 (v0.5.0-dev). Resolution
order of a target's build:

1. its directory variable (``NVIDIA_UPSTREAM_BIN`` for v0.4.1, ``NVIDIA_UPSTREAM_BIN_MAIN`` for
   main), a directory ``hack/upstream/build.sh`` filled (hack/test.sh exports both),
2. the build cache of ``hack/upstream/build.sh <target>`` for its source variable
   (``NVIDIA_DRA_DRIVER_SRC`` / ``NVIDIA_DRA_DRIVER_MAIN_SRC``, or, unset, the pinned tarball);
   with ``build=True`` the script builds it when missing (about 5 min once: three binaries).

The controller reads its templates from ``/templates``; ``hack/upstream/run.sh`` starts it in a
private mount namespace where that path holds the build's copy of the tree's ``templates/``.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from computedomain.devcluster.assets import REPO_ROOT
from computedomain.devcluster.podrunner import Entrypoint, PodRunError, expand, resolve_env
from computedomain.devcluster.processes import ChildProcess, spawn

UPSTREAM_BUILD_SCRIPT = REPO_ROOT / "hack" / "upstream" / "build.sh"
UPSTREAM_RUN_SCRIPT = REPO_ROOT / "hack" / "upstream" / "run.sh"
UPSTREAM_CHART_SCRIPT = REPO_ROOT / "hack" / "upstream" / "chart.sh"
MOCK_NVML_SCRIPT = REPO_ROOT / "hack" / "upstream" / "mocknvml.sh"
# NVIDIA's releases whose charts hack/upstream/chart.sh provides (the build brings v0.4.1's):
# v0.4.0, and main at 95932046 (v0.5.0-dev).
OLDER_CHART_VERSION = "v0.4.0"
MAIN_CHART = "main"
CONTROLLER = "compute-domain-controller"
DAEMON = "compute-domain-daemon"
KUBELET_PLUGIN = "compute-domain-kubelet-plugin"
# hack/upstream/build.sh's targets: NVIDIA's release v0.4.1, and main at 95932046 (v0.5.0-dev).
V041 = "v0.4.1"
MAIN = "main"
TARGETS = (V041, MAIN)
# The version each target's build reports (its VERSION file, its chart's image tag).
TARGET_VERSIONS = {V041: "v0.4.1", MAIN: "v0.5.0-dev"}
# Per target: the variable naming a finished build's bin/ directory, and the one naming its
# pinned source tarball.
_BIN_VARIABLE = {V041: "NVIDIA_UPSTREAM_BIN", MAIN: "NVIDIA_UPSTREAM_BIN_MAIN"}
_SOURCE_VARIABLE = {V041: "NVIDIA_DRA_DRIVER_SRC", MAIN: "NVIDIA_DRA_DRIVER_MAIN_SRC"}
CHART_NAME = "dra-driver-nvidia-gpu"
# The release name NVIDIA's install instructions use.
RELEASE = "nvidia-dra-driver-gpu"
# NVIDIA's ComputeDomain install instructions: its chart without the GPU kubelet plugin.
COMPUTE_DOMAIN_VALUES: dict[str, Any] = {"resources.gpus.enabled": False}
# build.sh's exit status when the binaries cannot be had (no source, or --cached and not built).
_UNAVAILABLE = 3


class UpstreamUnavailableError(RuntimeError):
    """NVIDIA's binaries could not be found or built."""


def upstream_required(env: Mapping[str, str] | None = None, target: str = V041) -> bool:
    """True where the tests on ``target``'s build must run (a missing build fails, never skips):
    under CI, when its source is given, or when hack/test.sh asks for it."""
    env = os.environ if env is None else env
    return (
        env.get("CI", "").lower() == "true"
        or bool(env.get(_SOURCE_VARIABLE[target]))
        or env.get("COMPUTEDOMAIN_REQUIRE_UPSTREAM") == "1"
    )


@dataclass(frozen=True)
class UpstreamBuild:
    """One build: ``bin/`` with the binaries, beside it ``templates/``, ``chart/``, ``VERSION``."""

    bin_dir: Path

    @property
    def controller(self) -> Path:
        return self.bin_dir / CONTROLLER

    @property
    def daemon(self) -> Path:
        return self.bin_dir / DAEMON

    @property
    def kubelet_plugin(self) -> Path:
        return self.bin_dir / KUBELET_PLUGIN

    @property
    def templates(self) -> Path:
        return self.bin_dir.parent / "templates"

    @property
    def chart(self) -> Path:
        return self.bin_dir.parent / "chart" / CHART_NAME

    @property
    def version(self) -> str:
        return (self.bin_dir.parent / "VERSION").read_text().strip()

    def check(self) -> UpstreamBuild:
        for path in (self.controller, self.daemon, self.kubelet_plugin):
            if not (path.is_file() and os.access(path, os.X_OK)):
                raise UpstreamUnavailableError(f"{path} is not an executable file")
        for path in (self.templates, self.chart):
            if not path.is_dir():
                raise UpstreamUnavailableError(f"{path} is missing")
        return self


def _cache_root(env: Mapping[str, str]) -> Path:
    return Path(
        env.get("COMPUTEDOMAIN_CACHE")
        or Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "computedomain"
    )


def find_upstream(
    *, build: bool = False, env: Mapping[str, str] | None = None, target: str = V041
) -> UpstreamBuild:
    """NVIDIA's build of ``target``: its bin variable wins, then the cache (built when
    ``build``). Unavailable too where hack/upstream/run.sh cannot run it (not root: no mount
    namespace)."""
    env = os.environ if env is None else env
    if target not in TARGETS:
        raise ValueError(f"unknown NVIDIA target {target!r} (one of {', '.join(TARGETS)})")
    if os.geteuid() != 0:
        raise UpstreamUnavailableError(
            "hack/upstream/run.sh needs root (a private mount namespace)"
        )
    if env.get(_BIN_VARIABLE[target]):
        return UpstreamBuild(Path(env[_BIN_VARIABLE[target]])).check()
    bin_dir = _run_script(UPSTREAM_BUILD_SCRIPT, build=build, env=env, extra=[target])
    return UpstreamBuild(bin_dir).check()


def older_chart_required(env: Mapping[str, str] | None = None) -> bool:
    """True where the tests on NVIDIA's v0.4.0 chart must run: under CI, or with its source
    given."""
    env = os.environ if env is None else env
    return env.get("CI", "").lower() == "true" or bool(env.get("NVIDIA_DRA_DRIVER_CHART_SRC"))


def find_older_chart(*, fetch: bool = False, env: Mapping[str, str] | None = None) -> Path:
    """NVIDIA's v0.4.0 chart: ``NVIDIA_UPSTREAM_CHART_V040`` (a directory chart.sh filled)
    wins, then hack/upstream/chart.sh's cache (filled first when ``fetch``)."""
    return _find_chart(OLDER_CHART_VERSION, "NVIDIA_UPSTREAM_CHART_V040", fetch=fetch, env=env)


def main_chart_required(env: Mapping[str, str] | None = None) -> bool:
    """True where the tests on NVIDIA's main (v0.5.0-dev) chart must run: under CI, or with its
    source given."""
    env = os.environ if env is None else env
    return env.get("CI", "").lower() == "true" or bool(env.get("NVIDIA_DRA_DRIVER_MAIN_SRC"))


def find_main_chart(*, fetch: bool = False, env: Mapping[str, str] | None = None) -> Path:
    """NVIDIA's chart of main at 95932046 (v0.5.0-dev): ``NVIDIA_UPSTREAM_CHART_MAIN`` (a
    directory chart.sh filled) wins, then hack/upstream/chart.sh's cache (filled first when
    ``fetch``, from ``NVIDIA_DRA_DRIVER_MAIN_SRC`` or GitHub)."""
    return _find_chart(MAIN_CHART, "NVIDIA_UPSTREAM_CHART_MAIN", fetch=fetch, env=env)


def mock_nvml_required(env: Mapping[str, str] | None = None) -> bool:
    """True where the tests on NVIDIA's mock NVML (NVIDIA's kubelet plugin for simulated nodes)
    must run: under CI, or with its source given (not merely NVIDIA's driver source: the mock is
    a separate input)."""
    env = os.environ if env is None else env
    return env.get("CI", "").lower() == "true" or bool(env.get("NVIDIA_MOCK_NVML_SRC"))


@dataclass(frozen=True)
class MockNvml:
    """NVIDIA's mock NVML as hack/upstream/mocknvml.sh built it: ``libnvidia-ml.so.<driver
    version>``, its profiles under ``configs/``."""

    directory: Path

    @property
    def driver_version(self) -> str:
        return (self.directory / "DRIVER_VERSION").read_text().strip()

    @property
    def library(self) -> Path:
        return self.directory / f"libnvidia-ml.so.{self.driver_version}"

    def profile(self, name: str = "gb200") -> Path:
        """The YAML profile ``name`` (``configs/mock-nvml-config-<name>.yaml``)."""
        return self.directory / "configs" / f"mock-nvml-config-{name}.yaml"

    def check(self) -> MockNvml:
        if not (self.directory / "DRIVER_VERSION").is_file() or not self.library.is_file():
            raise UpstreamUnavailableError(f"{self.directory} holds no mock NVML library")
        if not self.profile().is_file():
            raise UpstreamUnavailableError(f"{self.profile()} is missing")
        return self


def find_mock_nvml(*, build: bool = False, env: Mapping[str, str] | None = None) -> MockNvml:
    """NVIDIA's mock NVML: ``NVIDIA_MOCK_NVML`` (a directory hack/upstream/mocknvml.sh filled)
    wins, then that script's cache (built first when ``build``, from ``NVIDIA_MOCK_NVML_SRC``)."""
    env = os.environ if env is None else env
    if env.get("NVIDIA_MOCK_NVML"):
        return MockNvml(Path(env["NVIDIA_MOCK_NVML"])).check()
    return MockNvml(_run_script(MOCK_NVML_SCRIPT, build=build, env=env)).check()


def _find_chart(release: str, variable: str, *, fetch: bool, env: Mapping[str, str] | None) -> Path:
    env = os.environ if env is None else env
    chart = (
        Path(env[variable])
        if env.get(variable)
        else _run_script(UPSTREAM_CHART_SCRIPT, build=fetch, env=env, extra=[release])
    )
    if not (chart / "Chart.yaml").is_file():
        raise UpstreamUnavailableError(f"{chart} holds no Chart.yaml")
    return chart


def _run_script(
    script: Path, *, build: bool, env: Mapping[str, str], extra: Sequence[str] = ()
) -> Path:
    """What one of the hack/upstream scripts prints last (a path); one build at a time.
    ``extra``: the script's arguments after ``--cached``."""
    args = ["bash", str(script)] + ([] if build else ["--cached"]) + list(extra)
    cache_root = _cache_root(env)
    cache_root.mkdir(parents=True, exist_ok=True)
    with (cache_root / "upstream-build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            out = subprocess.run(args, capture_output=True, text=True, check=False, env=dict(env))
        except OSError as exc:
            raise UpstreamUnavailableError(f"cannot run {script}: {exc}") from exc
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        why = out.stderr.strip().splitlines()[-1:] or [f"exit code {out.returncode}"]
        if out.returncode == _UNAVAILABLE:
            raise UpstreamUnavailableError(why[0])
        raise UpstreamUnavailableError(f"hack/upstream/{script.name} failed: {why[0]}")
    return Path(lines[-1])


def render_chart(
    helm: Path,
    chart: Path,
    namespace: str,
    values: Mapping[str, Any] | None = None,
    *,
    show_only: str | None = None,
) -> list[dict[str, Any]]:
    """The objects NVIDIA's ``chart`` renders (``helm template`` as release RELEASE into
    ``namespace``, each value given with ``--set-json``; ``show_only``: one template file)."""
    args = [str(helm), "template", RELEASE, str(chart), "--namespace", namespace]
    for key, value in (values or {}).items():
        args += ["--set-json", f"{key}={json.dumps(value)}"]
    if show_only:
        args += ["--show-only", show_only]
    out = subprocess.run(args, capture_output=True, text=True, check=False, timeout=60)
    if out.returncode != 0:
        raise RuntimeError(f"helm template of NVIDIA's chart failed: {out.stderr.strip()}")
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def chart_controller_container(
    helm: Path, build: UpstreamBuild, namespace: str, values: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The controller container of NVIDIA's chart (the build's copy), rendered by ``helm
    template`` into ``namespace`` with the chart's defaults (and ``values``)."""
    for doc in render_chart(helm, build.chart, namespace, values):
        if doc.get("kind") == "Deployment" and doc["metadata"]["name"].endswith("-controller"):
            container: dict[str, Any] = doc["spec"]["template"]["spec"]["containers"][0]
            return container
    raise RuntimeError("NVIDIA's chart rendered no controller Deployment")


def container_environment(
    container: Mapping[str, Any], pod_name: str, namespace: str
) -> dict[str, str]:
    """The container's env as the kubelet would resolve it for a pod ``namespace/pod_name``
    (the stand-in kubelet's own resolution)."""
    return resolve_env({"metadata": {"name": pod_name, "namespace": namespace}}, container)


def controller_entrypoint(build: UpstreamBuild) -> Entrypoint:
    """What NVIDIA's image runs for a controller container: the build's binary, through
    hack/upstream/run.sh (templates at /templates), with the container's arguments. For pods of
    NVIDIA's Deployment that the stand-in kubelet runs."""

    def argv(container: Mapping[str, Any]) -> list[str]:
        command = [*(container.get("command") or []), *(container.get("args") or [])]
        if not command or Path(command[0]).name != CONTROLLER:
            raise PodRunError(f"unexpected controller command {command}")
        return ["bash", str(UPSTREAM_RUN_SCRIPT), str(build.bin_dir), CONTROLLER, *command[1:]]

    return argv


def start_nvidia_controller(
    build: UpstreamBuild,
    kubeconfig: Path,
    container: Mapping[str, Any],
    env: Mapping[str, str],
    log: Path,
) -> ChildProcess:
    """NVIDIA's controller as the container would run it (its command, ``env``), against
    ``kubeconfig``, with the build's templates at /templates (hack/upstream/run.sh)."""
    command = [expand(arg, env) for arg in container["command"]]
    if Path(command[0]).name != CONTROLLER:
        raise ValueError(f"unexpected controller command {command}")
    full_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **env}
    full_env["KUBECONFIG"] = str(kubeconfig)
    argv = ["bash", str(UPSTREAM_RUN_SCRIPT), str(build.bin_dir), CONTROLLER, *command[1:]]
    return spawn(CONTROLLER, argv, log, env=full_env)
