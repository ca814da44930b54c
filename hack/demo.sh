#!/usr/bin/env bash
# THE demo command (README): from a fresh clone, installs uv if missing, syncs the locked
# environment, builds or reuses the local control plane (hack/controlplane/build.sh, cached in
# ~/.cache/computedomain), then runs computedomain.devcluster.demo. Arguments go to the demo;
# `hack/demo.sh --help` lists them.
set -euo pipefail
cd "$(dirname "$0")/.."

uv=(uv)
if ! command -v uv >/dev/null 2>&1; then
  echo "demo.sh: installing uv" >&2
  python3 -m pip install --quiet uv==0.13.9 \
    || python3 -m pip install --quiet --break-system-packages uv==0.13.9
  command -v uv >/dev/null 2>&1 || uv=(python3 -m uv)
fi
"${uv[@]}" sync --locked --all-groups --quiet

# Binaries a developer supplies (envtest conventions) win; otherwise build once into the cache.
if [ -z "${KUBEBUILDER_ASSETS:-}" ]; then
  if ! bin_dir=$(bash hack/controlplane/build.sh | tail -n 1) || [ ! -x "$bin_dir/kube-apiserver" ]; then
    echo "demo.sh: FAILED: control-plane binaries unavailable (hack/controlplane/build.sh)" >&2
    exit 1
  fi
  export KUBEBUILDER_ASSETS="$bin_dir"
fi

exec "${uv[@]}" run --frozen python -m computedomain.devcluster.demo "$@"
