#!/usr/bin/env bash
# THE test command (README, CI): from a fresh clone, installs uv if missing, syncs the locked
# environment, builds or reuses the local control plane (hack/controlplane/build.sh, cached in
# ~/.cache/computedomain) and helm (hack/helm/build.sh), and NVIDIA's controller and daemon
# (hack/upstream/build.sh, from NVIDIA_DRA_DRIVER_SRC: see README) for the differential tests, then
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
# NVIDIA's binaries for the differential tests (tests/integration/test_upstream_controller.py):
# NVIDIA_UPSTREAM_BIN (a directory hack/upstream/build.sh filled) wins; otherwise the pinned build.
# Under CI=true or with NVIDIA_DRA_DRIVER_SRC set they must be had (a failed build fails the run,
# and the tests require them); elsewhere, without a source, one line says which tests will not run.
if [ -z "${NVIDIA_UPSTREAM_BIN:-}" ]; then
  start=$(date +%s)
  upstream_status=0
  upstream_log=$(mktemp)
  upstream_dir=$(bash hack/upstream/build.sh 2>"$upstream_log" | tail -n 1) || upstream_status=$?
  if [ "$upstream_status" -eq 0 ] && [ -x "$upstream_dir/compute-domain-controller" ]; then
    cat "$upstream_log" >&2
    echo "test.sh: NVIDIA's binaries in $upstream_dir ($(( $(date +%s) - start ))s)" >&2
    export NVIDIA_UPSTREAM_BIN="$upstream_dir"
  elif [ "${CI:-}" = "true" ] || [ -n "${NVIDIA_DRA_DRIVER_SRC:-}" ]; then
    cat "$upstream_log" >&2
    echo "test.sh: FAILED: NVIDIA's binaries unavailable (hack/upstream/build.sh)" >&2
    rm -f "$upstream_log"
    exit 1
  else
    echo "test.sh: tests/integration/test_upstream_controller.py will not run:" \
      "$(tail -n 1 "$upstream_log")" >&2
  fi
  rm -f "$upstream_log"
fi
if [ "${CI:-}" = "true" ] || [ -n "${NVIDIA_DRA_DRIVER_SRC:-}" ]; then
  export COMPUTEDOMAIN_REQUIRE_UPSTREAM=1
fi
# NVIDIA's v0.4.0 chart for the swap tests (the build above brings v0.4.1's):
# NVIDIA_UPSTREAM_CHART_V040 (a directory hack/upstream/chart.sh filled) wins; otherwise the pinned
# one from NVIDIA_DRA_DRIVER_CHART_SRC or the network. Required under CI=true or with the source.
if [ -z "${NVIDIA_UPSTREAM_CHART_V040:-}" ]; then
  chart_status=0
  chart_log=$(mktemp)
  chart_dir=$(bash hack/upstream/chart.sh 2>"$chart_log" | tail -n 1) || chart_status=$?
  if [ "$chart_status" -eq 0 ] && [ -f "$chart_dir/Chart.yaml" ]; then
    export NVIDIA_UPSTREAM_CHART_V040="$chart_dir"
  elif [ "${CI:-}" = "true" ] || [ -n "${NVIDIA_DRA_DRIVER_CHART_SRC:-}" ]; then
    cat "$chart_log" >&2
    echo "test.sh: FAILED: NVIDIA's v0.4.0 chart unavailable (hack/upstream/chart.sh)" >&2
    rm -f "$chart_log"
    exit 1
  else
    echo "test.sh: the swap tests on NVIDIA's v0.4.0 chart will not run:" \
      "$(tail -n 1 "$chart_log")" >&2
  fi
  rm -f "$chart_log"
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
