#!/usr/bin/env bash
# Builds NVIDIA's mock NVML (NVIDIA/k8s-test-infra pkg/gpu/mocknvml, pinned): a libnvidia-ml.so
# that fakes GPUs from a YAML profile (GB200 among them, with NVLink fabric cluster UUID and
# clique ID). The tests that run NVIDIA's compute-domain-kubelet-plugin for simulated nodes give
# it to the plugin as that node's libnvidia-ml.so.1 (computedomain/devcluster/kubeletplugin.py).
#
# Output, in a cache keyed by the source's checksum + this script + Go version: a directory
# (last line of stdout) holding `libnvidia-ml.so.<driver version>`, the links
# `libnvidia-ml.so.1` and `libnvidia-ml.so`, `configs/mock-nvml-config-<profile>.yaml` (the
# tree's profiles), `DRIVER_VERSION` (the library's version: the GB200 profile's driver
# version) and `LICENSE`.
#
# Usage: mocknvml.sh [--cached]
#
# The source, NVIDIA_MOCK_NVML_SRC: a tarball of the tree's go.mod, go.sum, pkg/gpu/mocknvml and
# pkg/fmcoord, whose SHA-256 must be the pinned one below, or the script fails. Its Go
# dependencies come from the Go module proxy (GOFLAGS=-mod=mod). Unset: a finished build of the
# pinned tarball in the cache is used; else the script prints one line saying the build is
# unavailable and exits 3 (there is no clone: NVIDIA/k8s-test-infra is a large repository). With
# --cached it never builds (exit 3 when the cache has no build).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
export GOTOOLCHAIN=local CGO_ENABLED=1 GOFLAGS=-mod=mod

PINNED_COMMIT=3b2b865d91b1844baa9feeca2820d2fab65414c7
PINNED_SHA256=48b6fa9d2fcbe612ab6e8311710b406233ac3afe9b207f426b4c2a8bd263a895
# The library's version: the GB200 profile's driver version (the name the library file carries).
DRIVER_VERSION=580.65.06
cache_root=${COMPUTEDOMAIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/computedomain}

cached_only=false
if [ "${1:-}" = "--cached" ]; then cached_only=true; shift; fi
if [ "$#" -ne 0 ]; then echo "usage: $0 [--cached]" >&2; exit 2; fi

unavailable() {
  echo "NVIDIA's mock NVML unavailable: $*" >&2
  exit 3
}

cache_key() {
  { echo "$1"; cat "$here/mocknvml.sh"; go version; go env GOOS GOARCH; } | sha256sum | cut -c1-16
}

src=${NVIDIA_MOCK_NVML_SRC:-}
if [ -z "$src" ]; then
  key=$(cache_key "$PINNED_SHA256")
  if [ -f "$cache_root/mocknvml/$key/.complete" ]; then
    echo "NVIDIA's mock NVML up to date (cache key $key, pinned tarball)" >&2
    echo "$cache_root/mocknvml/$key"; exit 0
  fi
  unavailable "NVIDIA_MOCK_NVML_SRC unset and nothing cached (the pinned tarball of" \
    "NVIDIA/k8s-test-infra $PINNED_COMMIT, SHA-256 $PINNED_SHA256)"
fi
[ -f "$src" ] || { echo "NVIDIA_MOCK_NVML_SRC: $src is not a file" >&2; exit 1; }
sum=$(sha256sum "$src" | cut -d' ' -f1)
if [ "$sum" != "$PINNED_SHA256" ]; then
  echo "NVIDIA_MOCK_NVML_SRC: $src has SHA-256 $sum, not the pinned $PINNED_SHA256" >&2
  exit 1
fi
key=$(cache_key "$sum")
out="$cache_root/mocknvml/$key"
if [ -f "$out/.complete" ]; then
  echo "NVIDIA's mock NVML up to date (cache key $key, tarball $sum)" >&2
  echo "$out"; exit 0
fi
if $cached_only; then unavailable "not built yet (cache key $key): run hack/upstream/mocknvml.sh"; fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tar -xzf "$src" -C "$tmp"
tree=$(find "$tmp" -mindepth 1 -maxdepth 1 -type d | head -n 1)
for need in go.mod go.sum LICENSE pkg/gpu/mocknvml/bridge pkg/gpu/mocknvml/configs; do
  [ -e "$tree/$need" ] || { echo "NVIDIA_MOCK_NVML_SRC: the tree lacks $need" >&2; exit 1; }
done

rm -rf "$out"
mkdir -p "$out/configs"
start=$(date +%s)
lib="libnvidia-ml.so.$DRIVER_VERSION"
echo "building NVIDIA's mock NVML $lib ..." >&2
# nopadding: no 14 MiB inert section (that only fools file-size heuristics).
(cd "$tree/pkg/gpu/mocknvml" && CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations" \
  go build -p 2 -trimpath -tags nopadding -buildmode=c-shared -o "$out/$lib" ./bridge)
# cgo writes a C header beside the library: not needed.
rm -f "$out"/*.h
ln -s "$lib" "$out/libnvidia-ml.so.1"
ln -s libnvidia-ml.so.1 "$out/libnvidia-ml.so"
cp "$tree"/pkg/gpu/mocknvml/configs/mock-nvml-config-*.yaml "$out/configs/"
cp "$tree/LICENSE" "$out/LICENSE"
echo "$DRIVER_VERSION" > "$out/DRIVER_VERSION"
secs=$(( $(date +%s) - start ))
echo "built in ${secs}s from tarball $sum (NVIDIA/k8s-test-infra $PINNED_COMMIT)" > "$out/.complete"
echo "NVIDIA's mock NVML built in ${secs}s into $out" >&2
echo "$out"
