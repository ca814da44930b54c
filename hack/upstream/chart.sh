#!/usr/bin/env bash
# NVIDIA's Helm chart of release v0.4.0 (kubernetes-sigs/dra-driver-nvidia-gpu,
# deployments/helm/dra-driver-nvidia-gpu, pinned) for the swap tests, which install NVIDIA's
# v0.4.0 and v0.4.1 charts (v0.4.1's comes with hack/upstream/build.sh). Prints the chart's
# directory (last line of stdout), cached by the source's checksum.
#
# The source is NVIDIA_DRA_DRIVER_CHART_SRC, a tarball holding that folder of the v0.4.0 tree
# (at any depth): its SHA-256 must be the pinned one below, or the script fails.
# Unset: a cached copy is used; else tag v0.4.0 is cloned from GitHub (within
# NVIDIA_DRA_DRIVER_CLONE_TIMEOUT seconds, 20 by default) and its commit checked; else one line
# says the chart is unavailable and the script exits 3. With --cached it never clones.
set -euo pipefail
PINNED_VERSION=v0.4.0
PINNED_COMMIT=6910a2bea298933cf64cfb061ddf88b6e17743ff
PINNED_SHA256=8a94f1e096689831c46e2b793de9406f193d827b6a34f361fdf15cab20715279
REPO_URL=https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu
CHART_PATH=deployments/helm/dra-driver-nvidia-gpu
CLONE_TIMEOUT=${NVIDIA_DRA_DRIVER_CLONE_TIMEOUT:-20}
cached_only=false
if [ "${1:-}" = "--cached" ]; then cached_only=true; fi
cache_root=${COMPUTEDOMAIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/computedomain}

unavailable() {
  echo "NVIDIA's $PINNED_VERSION chart unavailable: $*" >&2
  exit 3
}

# One cache entry per pinned source: the tarball's checksum and the tag's commit name the same
# chart, so either fills it.
out="$cache_root/upstream-chart/$PINNED_VERSION-${PINNED_SHA256:0:16}"
chart="$out/dra-driver-nvidia-gpu"
if [ -f "$out/.complete" ]; then
  echo "NVIDIA's $PINNED_VERSION chart up to date ($out)" >&2
  echo "$chart"; exit 0
fi
if $cached_only; then unavailable "not cached yet: run hack/upstream/chart.sh"; fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
src=${NVIDIA_DRA_DRIVER_CHART_SRC:-}
if [ -n "$src" ]; then
  [ -f "$src" ] || { echo "NVIDIA_DRA_DRIVER_CHART_SRC: $src is not a file" >&2; exit 1; }
  sum=$(sha256sum "$src" | cut -d' ' -f1)
  if [ "$sum" != "$PINNED_SHA256" ]; then
    echo "NVIDIA_DRA_DRIVER_CHART_SRC: $src has SHA-256 $sum, not the pinned $PINNED_SHA256" >&2
    exit 1
  fi
  tar -xzf "$src" -C "$tmp"
  found=$(find "$tmp" -type d -path "*/$CHART_PATH" | head -n 1)
  [ -n "$found" ] || { echo "NVIDIA_DRA_DRIVER_CHART_SRC: no $CHART_PATH in $src" >&2; exit 1; }
  how="tarball $sum"
else
  if ! timeout "$CLONE_TIMEOUT" env GIT_TERMINAL_PROMPT=0 git clone --quiet --depth 1 \
      --branch "$PINNED_VERSION" "$REPO_URL" "$tmp/src" >/dev/null 2>&1; then
    unavailable "NVIDIA_DRA_DRIVER_CHART_SRC unset, nothing cached, and cloning" \
      "$REPO_URL $PINNED_VERSION failed (timeout ${CLONE_TIMEOUT}s)"
  fi
  head=$(git -C "$tmp/src" rev-parse HEAD)
  if [ "$head" != "$PINNED_COMMIT" ]; then
    echo "tag $PINNED_VERSION of $REPO_URL is commit $head, not the pinned $PINNED_COMMIT" >&2
    exit 1
  fi
  found="$tmp/src/$CHART_PATH"
  how="git tag $PINNED_VERSION, commit $head"
fi
[ -f "$found/Chart.yaml" ] || { echo "chart.sh: $found holds no Chart.yaml" >&2; exit 1; }
rm -rf "$out"
mkdir -p "$out"
cp -R "$found" "$chart"
touch "$out/.complete"
echo "NVIDIA's $PINNED_VERSION chart from $how" >&2
echo "$chart"
