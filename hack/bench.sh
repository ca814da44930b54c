#!/usr/bin/env bash
# Benchmark of the controller on a local control plane with a simulated GB200 fleet; see
# docs/benchmark.md. Arguments go to hack/bench.py (e.g. --quick, --racks 128, --cds 500).
set -euo pipefail
cd "$(dirname "$0")/.."

# Same binaries as the tests: a developer's KUBEBUILDER_ASSETS, else the build cache.
if [ -z "${KUBEBUILDER_ASSETS:-}" ] && [ "${USE_EXISTING_CLUSTER:-}" != "true" ]; then
  if ! bin_dir=$(bash hack/controlplane/build.sh | tail -n 1) || [ ! -x "$bin_dir/kube-apiserver" ]; then
    echo "bench.sh: FAILED: control-plane binaries unavailable (hack/controlplane/build.sh)" >&2
    exit 1
  fi
  export KUBEBUILDER_ASSETS="$bin_dir"
fi
# Start-up is measured as the image runs: with compiled bytecode (pip compiles on install; uv
# does not by default, and where PYTHONDONTWRITEBYTECODE=1 nothing writes it), else every
# start compiles ~1,000 modules, which here took ~2 s of the ~1 s start-up.
uv run --frozen python -m compileall -q -j 0 computedomain \
  "$(uv run --frozen python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
  >/dev/null
exec uv run --frozen python hack/bench.py "$@"
