#!/usr/bin/env bash
# THE test command (README, CI): from a fresh clone, installs uv if missing, syncs the locked
# environment, builds or reuses the local control plane (hack/controlplane/build.sh, cached in
# ~/.cache/computedomain) and helm (hack/helm/build.sh), and NVIDIA's controller, daemon and kubelet
# plugin of v0.4.1 and of main (hack/upstream/build.sh, from NVIDIA_DRA_DRIVER_SRC and
# NVIDIA_DRA_DRIVER_MAIN_SRC: see README) and NVIDIA's mock NVML (hack/upstream/mocknvml.sh, from
# NVIDIA_MOCK_NVML_SRC) for the tests that run NVIDIA's code, then
# runs the unit and integration tests against the real binaries.
# Extra arguments go to pytest. Fails when the binaries cannot be had or when no test ran.
set -euo pipefail
cd "$(dirname "$0")/.."

uv=(uv)
if ! command -v uv >/dev/null 2>&1; then
  echo "test.sh: installing uv" >&2
  python3 -m pip install --quiet uv==0.13.9 \
    || python3 -m pip install --quiet --break-system-packages uv==0.13.9
  command -v uv >/dev/null 2>&1 || uv=(python3 -m uv)
fi
"${uv[@]}" sync --locked --all-groups

# Binaries a developer supplies (envtest conventions) win; otherwise build once into the cache.
if [ -z "${KUBEBUILDER_ASSETS:-}" ] && [ "${USE_EXISTING_CLUSTER:-}" != "true" ]; then
  start=$(date +%s)
  if ! bin_dir=$(bash hack/controlplane/build.sh | tail -n 1) || [ ! -x "$bin_dir/kube-apiserver" ]; then
    echo "test.sh: FAILED: control-plane binaries unavailable (hack/controlplane/build.sh)" >&2
    exit 1
  fi
  echo "test.sh: control plane binaries in $bin_dir ($(( $(date +%s) - start ))s)" >&2
  export KUBEBUILDER_ASSETS="$bin_dir"
fi
# helm for the chart tests: HELM (a path) wins; otherwise the pinned build (hack/helm/build.sh).
if [ -z "${HELM:-}" ]; then
  start=$(date +%s)
  if ! helm_dir=$(bash hack/helm/build.sh | tail -n 1) || [ ! -x "$helm_dir/helm" ]; then
    echo "test.sh: FAILED: helm unavailable (hack/helm/build.sh)" >&2
    exit 1
  fi
  echo "test.sh: helm in $helm_dir ($(( $(date +%s) - start ))s)" >&2
  export HELM="$helm_dir/helm"
fi
# NVIDIA's own code for the tests that run it: its binaries of two targets, v0.4.1 and main
# (v0.5.0-dev) (hack/upstream/build.sh; the differential tests, the swap tests, the tests on
# NVIDIA's IMEX daemon and kubelet plugin), its v0.4.0 chart and its main chart
# (hack/upstream/chart.sh; the v0.4.1 build brings v0.4.1's). A directory given in
# NVIDIA_UPSTREAM_BIN / NVIDIA_UPSTREAM_BIN_MAIN / NVIDIA_UPSTREAM_CHART_V040 /
# NVIDIA_UPSTREAM_CHART_MAIN wins;
# otherwise the pinned source. Under CI=true, or with the source variable set, what cannot be had
# fails the run (and the tests require it); elsewhere one line says which tests will not run.
upstream_input() { # script, variable to export, file the path must hold, what, source, tests, [arg]
  local script=$1 var=$2 check=$3 what=$4 source=$5 tests=$6 arg=${7:-} status=0 log dir start
  start=$(date +%s)
  log=$(mktemp)
  dir=$(bash "hack/upstream/$script" ${arg:+"$arg"} 2>"$log" | tail -n 1) || status=$?
  if [ "$status" -eq 0 ] && [ -e "$dir/$check" ]; then
    cat "$log" >&2
    echo "test.sh: $what in $dir ($(( $(date +%s) - start ))s)" >&2
    export "$var=$dir"
  elif [ "${CI:-}" = "true" ] || [ -n "$source" ]; then
    cat "$log" >&2
    rm -f "$log"
    echo "test.sh: FAILED: $what unavailable (hack/upstream/$script)" >&2
    exit 1
  else
    echo "test.sh: $tests will not run: $(tail -n 1 "$log")" >&2
  fi
  rm -f "$log"
}
if [ -z "${NVIDIA_UPSTREAM_BIN:-}" ]; then
  upstream_input build.sh NVIDIA_UPSTREAM_BIN compute-domain-kubelet-plugin "NVIDIA's v0.4.1 binaries" \
    "${NVIDIA_DRA_DRIVER_SRC:-}" \
    "tests/integration/test_upstream_controller.py, test_swap.py and test_nvidia_daemon.py (NVIDIA's controller and IMEX daemon)" \
    v0.4.1
fi
if [ -z "${NVIDIA_UPSTREAM_BIN_MAIN:-}" ]; then
  upstream_input build.sh NVIDIA_UPSTREAM_BIN_MAIN compute-domain-kubelet-plugin \
    "NVIDIA's main (v0.5.0-dev) binaries" "${NVIDIA_DRA_DRIVER_MAIN_SRC:-}" \
    "the tests on NVIDIA's v0.5.0-dev controller, daemon and kubelet plugin" main
fi
# NVIDIA's mock NVML (hack/upstream/mocknvml.sh, from NVIDIA_MOCK_NVML_SRC): the library NVIDIA's
# kubelet plugin loads as each simulated node's libnvidia-ml.so.1 (required by the tests under CI
# or with NVIDIA_MOCK_NVML_SRC set: devcluster/upstream.py mock_nvml_required).
if [ -z "${NVIDIA_MOCK_NVML:-}" ]; then
  upstream_input mocknvml.sh NVIDIA_MOCK_NVML DRIVER_VERSION "NVIDIA's mock NVML" \
    "${NVIDIA_MOCK_NVML_SRC:-}" "tests/integration/test_nvidia_plugin.py (NVIDIA's kubelet plugin per simulated node)"
fi
if [ "${CI:-}" = "true" ] || [ -n "${NVIDIA_DRA_DRIVER_SRC:-}" ] \
    || [ -n "${NVIDIA_DRA_DRIVER_MAIN_SRC:-}" ]; then
  export COMPUTEDOMAIN_REQUIRE_UPSTREAM=1
fi
if [ -z "${NVIDIA_UPSTREAM_CHART_V040:-}" ]; then
  upstream_input chart.sh NVIDIA_UPSTREAM_CHART_V040 Chart.yaml "NVIDIA's v0.4.0 chart" \
    "${NVIDIA_DRA_DRIVER_CHART_SRC:-}" "the swap tests on NVIDIA's v0.4.0 chart"
fi
if [ -z "${NVIDIA_UPSTREAM_CHART_MAIN:-}" ]; then
  upstream_input chart.sh NVIDIA_UPSTREAM_CHART_MAIN Chart.yaml "NVIDIA's main (v0.5.0-dev) chart" \
    "${NVIDIA_DRA_DRIVER_MAIN_SRC:-}" "the test under NVIDIA's v0.5.0-dev chart's RBAC" main
fi
# Integration tests must run, never skip, under this script.
export COMPUTEDOMAIN_REQUIRE_CONTROL_PLANE=1

# Static checks first: they take seconds and fail fast.
"${uv[@]}" run --locked ruff check .
"${uv[@]}" run --locked ruff format --check computedomain tests hack
"${uv[@]}" run --locked mypy
# The layer rules of docs/design.md ([tool.importlinter] in pyproject.toml).
"${uv[@]}" run --locked lint-imports

status=0
"${uv[@]}" run --locked pytest tests/unit tests/integration "$@" || status=$?
if [ "$status" -eq 5 ]; then
  echo "test.sh: FAILED: pytest collected no tests" >&2
  exit 1
fi
exit "$status"
