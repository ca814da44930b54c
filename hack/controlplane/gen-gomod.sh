#!/usr/bin/env bash
# Regenerates go.mod/go.sum of the control-plane tools module from scratch.
# Run only when bumping versions; the committed go.mod/go.sum are the lock.
set -euo pipefail
cd "$(dirname "$0")"
export GOTOOLCHAIN=local GOFLAGS=-mod=mod
KUBE_VERSION=${KUBE_VERSION:-v1.36.3}
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
STAGING_VERSION="v0.${KUBE_VERSION#v1.}"

rm -f go.mod go.sum
go mod init computedomain.local/hack/controlplane >/dev/null
go mod edit -go=1.26.0
gomod=$(go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" | jq -r .GoMod)
# k8s.io/kubernetes requires each staging module at v0.0.0 and replaces it with ./staging/...;
# replace directives only act in the main module, so pin each to its published version here.
go mod edit -json "$gomod" \
  | jq -r '.Replace[] | select(.New.Path | startswith("./staging/")) | .Old.Path' \
  | while read -r m; do go mod edit -replace="$m=$m@$STAGING_VERSION"; done
missing=0
for m in $(go mod edit -json "$gomod" | jq -r '.Require[] | select(.Version=="v0.0.0") | .Path'); do
  go mod edit -json | jq -e --arg m "$m" '.Replace[]|select(.Old.Path==$m)' >/dev/null \
    || { echo "missing replace for $m" >&2; missing=1; }
done
[ "$missing" = 0 ]
go get "k8s.io/kubernetes@$KUBE_VERSION"
# every path needs the explicit version: a bare package path means @upgrade (the newest release)
go get -tool "k8s.io/kubernetes/cmd/kube-apiserver@$KUBE_VERSION" \
  "k8s.io/kubernetes/cmd/kube-controller-manager@$KUBE_VERSION" \
  "k8s.io/kubernetes/cmd/kube-scheduler@$KUBE_VERSION" "k8s.io/kubernetes/cmd/kubectl@$KUBE_VERSION"
go get -tool "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
go get -tool "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
go mod tidy
go list -m k8s.io/kubernetes | grep -q " $KUBE_VERSION\$" || { echo "k8s.io/kubernetes drifted from $KUBE_VERSION" >&2; exit 1; }
echo "regenerated go.mod: kubernetes $KUBE_VERSION, etcd $ETCD_VERSION, kwok $KWOK_VERSION"
