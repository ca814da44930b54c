#!/usr/bin/env bash
# Regenerates go.mod/go.sum of the helm tools module from scratch.
# Run only when bumping HELM_VERSION; the committed go.mod/go.sum are the lock.
set -euo pipefail
cd "$(dirname "$0")"
export GOTOOLCHAIN=local GOFLAGS=-mod=mod
HELM_VERSION=${HELM_VERSION:-v3.22.0}

rm -f go.mod go.sum
go mod init computedomain.local/hack/helm >/dev/null
go mod edit -go=1.26.0
# the explicit version: a bare package path means @upgrade (the newest release)
go get -tool "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
go mod tidy
go list -m helm.sh/helm/v3 | grep -q " $HELM_VERSION\$" || { echo "helm drifted from $HELM_VERSION" >&2; exit 1; }
echo "regenerated go.mod: helm $HELM_VERSION"
