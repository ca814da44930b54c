#!/usr/bin/env bash
# Builds helm from the pinned Go tools module (go.mod/go.sum here) into a cache keyed by
# go.mod + go.sum + this script + Go version, and prints the directory holding the binary (last
# line of stdout). Skips the build when the cache stamp exists; with --cached, never builds and
# exits 3 when the cache lacks it.
#
# A helm a user already has can be supplied as HELM=<path>; tests and hack/test.sh resolve that
# before this cache (see computedomain/devcluster/helm.py).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=readonly
key=$( { cat "$here/go.mod" "$here/go.sum" "$here/build.sh"; go version; go env GOOS GOARCH; } | sha256sum | cut -c1-16)
cache_root=${COMPUTEDOMAIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/computedomain}
bin="$cache_root/helm/$key/bin"
stamp="$bin/.complete"
if [ -f "$stamp" ]; then
  echo "helm up to date (cache key $key)" >&2
  echo "$bin"; exit 0
fi
if [ "${1:-}" = "--cached" ]; then
  echo "helm not built yet (cache key $key): run hack/helm/build.sh" >&2
  exit 3
fi
mkdir -p "$bin"
start=$(date +%s)
cd "$here"
HELM_VERSION=$(go list -m -f '{{.Version}}' helm.sh/helm/v3)
# As helm's Makefile: the version, and the default Kubernetes version (`helm template`, `helm
# lint` capabilities) from the client-go it is built with, so kubeVersion constraints and
# deprecation checks see a current cluster rather than the compiled-in v1.20.
kv=$(go list -m -f '{{.Version}}' k8s.io/client-go)  # v0.37.0 -> Kubernetes 1.37
kv=${kv#v}; k8s_major=$(( ${kv%%.*} + 1 )); k8s_minor=${kv#*.}; k8s_minor=${k8s_minor%%.*}
H=helm.sh/helm/v3
ldflags="-s -w -X $H/internal/version.version=$HELM_VERSION \
 -X $H/internal/version.gitCommit=0000000000000000000000000000000000000000 \
 -X $H/internal/version.gitTreeState=clean \
 -X $H/pkg/lint/rules.k8sVersionMajor=$k8s_major -X $H/pkg/lint/rules.k8sVersionMinor=$k8s_minor \
 -X $H/pkg/chartutil.k8sVersionMajor=$k8s_major -X $H/pkg/chartutil.k8sVersionMinor=$k8s_minor"
echo "building helm $HELM_VERSION ..." >&2
go build -p 2 -trimpath -ldflags "$ldflags" -o "$bin/helm" helm.sh/helm/v3/cmd/helm
"$bin/helm" version >&2
secs=$(( $(date +%s) - start ))
echo "built in ${secs}s" > "$stamp"
echo "helm built in ${secs}s into $bin" >&2
echo "$bin"
