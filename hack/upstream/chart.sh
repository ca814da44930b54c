#!/usr/bin/env bash
# NVIDIA's Helm chart (kubernetes-sigs/dra-driver-nvidia-gpu, deployments/helm/dra-driver-nvidia-gpu,
# pinned) of a release the build (hack/upstream/build.sh, v0.4.1) does not bring:
#   v0.4.0 (the default): for the swap tests, which install NVIDIA's v0.4.0 and v0.4.1 charts;
#   main: main at commit 95932046 (VERSION v0.5.0-dev), the newest source to be had, for the
#     tests under the RBAC each NVIDIA chart renders (tests/integration/test_nvidia_rbac.py).
# Prints the chart's directory (last line of stdout), cached by the source's checksum.
#
# Usage: chart.sh [--cached] [v0.4.0|main]. The source is a tarball holding that folder of the
# tree (at any depth), whose SHA-256 must be the pinned one below, or the script fails:
# NVIDIA_DRA_DRIVER_CHART_SRC for v0.4.0 (the chart folder alone), NVIDIA_DRA_DRIVER_MAIN_SRC for
# main (the whole tree). Unset: a cached copy is used; else the tag (v0.4.0) or the commit (main)
# is fetched from GitHub (within NVIDIA_DRA_DRIVER_CLONE_TIMEOUT seconds, 20 by default) and its
# commit checked; else one line says the chart is unavailable and the script exits 3. With
# --cached it never fetches.
set -euo pipefail
REPO_URL=https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu
CHART_PATH=deployments/helm/dra-driver-nvidia-gpu
CLONE_TIMEOUT=${NVIDIA_DRA_DRIVER_CLONE_TIMEOUT:-20}
cached_only=false
if [ "${1:-}" = "--cached" ]; then cached_only=true; shift; fi
release=${1:-v0.4.0}
case "$release" in
  v0.4.0)
    PINNED_REF=v0.4.0
    PINNED_COMMIT=6910a2bea298933cf64cfb061ddf88b6e17743ff
    PINNED_SHA256=8a94f1e096689831c46e2b793de9406f193d827b6a34f361fdf15cab20715279
    src_var=NVIDIA_DRA_DRIVER_CHART_SRC
    ;;
  main)
    PINNED_REF=95932046683719c43b6a0dd9613c2e5aad5d6703
    PINNED_COMMIT=$PINNED_REF
    PINNED_SHA256=fca7e71ab7a09f1a7da3a0356a33a2c0541c6b5207ebedfd8f4deacd0522ae5d
    src_var=NVIDIA_DRA_DRIVER_MAIN_SRC
    ;;
  *) echo "chart.sh: unknown release '$release' (v0.4.0 or main)" >&2; exit 1 ;;
esac
cache_root=${COMPUTEDOMAIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/computedomain}

unavailable() {
  echo "NVIDIA's $release chart unavailable: $*" >&2
  exit 3
}

# One cache entry per pinned source: the tarball's checksum and the commit name the same
# chart, so either fills it.
out="$cache_root/upstream-chart/$release-${PINNED_SHA256:0:16}"
chart="$out/dra-driver-nvidia-gpu"
if [ -f "$out/.complete" ]; then
  echo "NVIDIA's $release chart up to date ($out)" >&2
  echo "$chart"; exit 0
fi
if $cached_only; then unavailable "not cached yet: run hack/upstream/chart.sh $release"; fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
src=${!src_var:-}
if [ -n "$src" ]; then
  [ -f "$src" ] || { echo "$src_var: $src is not a file" >&2; exit 1; }
  sum=$(sha256sum "$src" | cut -d' ' -f1)
  if [ "$sum" != "$PINNED_SHA256" ]; then
    echo "$src_var: $src has SHA-256 $sum, not the pinned $PINNED_SHA256" >&2
    exit 1
  fi
  # Only the chart's folder: a whole tree with vendor/ is large.
  tar -xzf "$src" -C "$tmp" --wildcards "*$CHART_PATH/*"
  found=$(find "$tmp" -type d -path "*/$CHART_PATH" | head -n 1)
  [ -n "$found" ] || { echo "$src_var: no $CHART_PATH in $src" >&2; exit 1; }
  how="tarball $sum"
else
  if [ "$PINNED_REF" = "$PINNED_COMMIT" ]; then  # a commit: fetched by its name
    fetch=(sh -c 'git init --quiet "$1" && git -C "$1" fetch --quiet --depth 1 "$2" "$3" \
      && git -C "$1" checkout --quiet FETCH_HEAD' _ "$tmp/src" "$REPO_URL" "$PINNED_REF")
  else  # a tag
    fetch=(git clone --quiet --depth 1 --branch "$PINNED_REF" "$REPO_URL" "$tmp/src")
  fi
  if ! timeout "$CLONE_TIMEOUT" env GIT_TERMINAL_PROMPT=0 "${fetch[@]}" >/dev/null 2>&1; then
    unavailable "$src_var unset, nothing cached, and fetching" \
      "$REPO_URL $PINNED_REF failed (timeout ${CLONE_TIMEOUT}s)"
  fi
  head=$(git -C "$tmp/src" rev-parse HEAD)
  if [ "$head" != "$PINNED_COMMIT" ]; then
    echo "$PINNED_REF of $REPO_URL is commit $head, not the pinned $PINNED_COMMIT" >&2
    exit 1
  fi
  found="$tmp/src/$CHART_PATH"
  how="git $PINNED_REF, commit $head"
fi
[ -f "$found/Chart.yaml" ] || { echo "chart.sh: $found holds no Chart.yaml" >&2; exit 1; }
rm -rf "$out"
mkdir -p "$out"
cp -R "$found" "$chart"
touch "$out/.complete"
echo "NVIDIA's $release chart from $how" >&2
echo "$chart"
