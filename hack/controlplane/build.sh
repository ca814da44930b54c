#!/usr/bin/env bash
# Builds the local control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# kubectl, kwok) from the pinned Go tools module into a cache keyed by go.mod + go.sum + Go version,
# and prints the directory holding the binaries (last line of stdout).
#
# Skips the build when the cache stamp matches. Binaries a user already has can be supplied with
# the envtest conventions: KUBEBUILDER_ASSETS (a directory) or TEST_ASSET_<NAME> per binary;
# tests and hack/cluster.py resolve those before this cache (see computedomain/testing/assets.py).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=readonly
KUBE_VERSION=$(cd "$here" && go list -m -f '{{.Version}}' k8s.io/kubernetes)
minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
key=$( { cat "$here/go.mod" "$here/go.sum" "$here/build.sh"; go version; go env GOOS GOARCH; } | sha256sum | cut -c1-16)
cache_root=${COMPUTEDOMAIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/computedomain}
bin="$cache_root/controlplane/$key/bin"
stamp="$bin/.complete"
if [ -f "$stamp" ]; then
  echo "control plane binaries up to date (cache key $key)" >&2
  echo "$bin"; exit 0
fi
mkdir -p "$bin"
start=$(date +%s)
V=k8s.io/component-base/version
ldflags="-s -w -X $V.gitMajor=1 -X $V.gitMinor=$minor -X $V.gitVersion=$KUBE_VERSION \
 -X $V.gitCommit=0000000000000000000000000000000000000000 -X $V.gitTreeState=clean \
 -X $V.buildDate=1970-01-01T00:00:00Z"
cd "$here"
echo "building kube-apiserver, kube-controller-manager, kube-scheduler, kubectl $KUBE_VERSION ..." >&2
# One go build for the four shares compilation of common packages; -p 2 bounds peak memory.
go build -p 2 -trimpath -ldflags "$ldflags" -o "$bin/" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl
echo "building etcd and kwok ..." >&2
go build -trimpath -ldflags "-s -w" -o "$bin/etcd" go.etcd.io/etcd/server/v3
kwok_version=$(go list -m -f '{{.Version}}' sigs.k8s.io/kwok)
kv=sigs.k8s.io/kwok/pkg/consts
go build -trimpath -ldflags "-s -w -X $kv.Version=$kwok_version" -o "$bin/kwok" sigs.k8s.io/kwok/cmd/kwok
"$bin/kube-apiserver" --version >&2
secs=$(( $(date +%s) - start ))
echo "built in ${secs}s" > "$stamp"
echo "control plane built in ${secs}s into $bin" >&2
echo "$bin"
