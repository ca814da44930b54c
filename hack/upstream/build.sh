#!/usr/bin/env bash
# Builds NVIDIA's compute-domain-controller, compute-domain-daemon and
# compute-domain-kubelet-plugin (kubernetes-sigs/dra-driver-nvidia-gpu, pinned) for the tests that
# run NVIDIA's code, into a cache keyed by the source's checksum + this script + Go version, and
# prints the directory holding the binaries (last line of stdout). Beside it in the cache:
# `templates/` (the tree's templates folder; NVIDIA's controller reads /templates/*.tmpl.yaml by
# absolute path), `chart/` (deployments/helm/...) and `VERSION`.
#
# Usage: build.sh [--cached] [v0.4.1|main]. Two targets:
#   v0.4.1 (the default): release v0.4.1, source NVIDIA_DRA_DRIVER_SRC;
#   main:   main at commit 95932046 (VERSION v0.5.0-dev, 12 days before v0.5.0; the newest source
#           to be had here), source NVIDIA_DRA_DRIVER_MAIN_SRC.
# The controller and the daemon are built without CGO, as NVIDIA's images; the kubelet plugin
# links go-nvml and needs CGO (gcc), about 3 min cold.
#
# The source (the target's variable):
#   - a tarball of the tree (with vendor/): its SHA-256 must be the pinned one below, or the
#     script fails;
#   - a directory holding the tree: trusted if it is a clean git checkout whose HEAD is the pinned
#     commit; otherwise only its VERSION file is checked and a warning says that the
#     tree itself is not verified. Its cache key is a hash of the tree's files, so a changed tree
#     builds again.
# Unset: a finished build of the pinned tarball in the cache is used; else the ref is cloned from
# GitHub (within NVIDIA_DRA_DRIVER_CLONE_TIMEOUT seconds, 20 by default: fails fast without
# network); else the script prints one line saying the build is unavailable and exits 3. With
# --cached it never builds or clones (exit 3 when the cache has no build for the source).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=vendor

REPO_URL=https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu
CLONE_TIMEOUT=${NVIDIA_DRA_DRIVER_CLONE_TIMEOUT:-20}

cached_only=false
if [ "${1:-}" = "--cached" ]; then cached_only=true; shift; fi
target=${1:-v0.4.1}
case "$target" in
  v0.4.1)
    PINNED_VERSION=v0.4.1
    PINNED_REF=v0.4.1
    PINNED_COMMIT=764900e7833798a1528bd52a2af3e1b2d5f7a616
    PINNED_SHA256=23767aee3d43bb6d91a145a821ce29b90d2e1b0520d8f4ac2cf16151ae5ab4db
    src_var=NVIDIA_DRA_DRIVER_SRC
    ;;
  main)
    PINNED_VERSION=v0.5.0-dev
    PINNED_REF=95932046683719c43b6a0dd9613c2e5aad5d6703
    PINNED_COMMIT=$PINNED_REF
    PINNED_SHA256=fca7e71ab7a09f1a7da3a0356a33a2c0541c6b5207ebedfd8f4deacd0522ae5d
    src_var=NVIDIA_DRA_DRIVER_MAIN_SRC
    ;;
  *) echo "build.sh: unknown target '$target' (v0.4.1 or main)" >&2; exit 1 ;;
esac
COMMANDS=(compute-domain-controller compute-domain-daemon compute-domain-kubelet-plugin)
cache_root=${COMPUTEDOMAIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/computedomain}

unavailable() {
  echo "NVIDIA's $target binaries unavailable: $*" >&2
  exit 3
}

# The cache key of a source whose identity is $1 (a checksum or a tree hash).
cache_key() {
  { echo "$1"; cat "$here/build.sh"; go version; go env GOOS GOARCH; } | sha256sum | cut -c1-16
}

# A directory's content hash: every file but .git, by relative path and content.
tree_hash() {
  (cd "$1" && find . -path ./.git -prune -o -type f -print0 | LC_ALL=C sort -z \
    | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
}

src=${!src_var:-}
tmp=""
cleanup() { if [ -n "$tmp" ]; then rm -rf "$tmp"; fi; }
trap cleanup EXIT

if [ -z "$src" ]; then
  key=$(cache_key "$PINNED_SHA256")
  if [ -f "$cache_root/upstream/$key/bin/.complete" ]; then
    echo "NVIDIA's $target binaries up to date (cache key $key, pinned tarball)" >&2
    echo "$cache_root/upstream/$key/bin"; exit 0
  fi
  if $cached_only; then unavailable "$src_var unset and nothing cached"; fi
  tmp=$(mktemp -d)
  # A tag clones shallow; a commit is fetched alone (GitHub serves any reachable commit).
  if ! timeout "$CLONE_TIMEOUT" env GIT_TERMINAL_PROMPT=0 bash -c '
      git init --quiet "$1" && cd "$1" && git fetch --quiet --depth 1 "$2" "$3" \
        && git checkout --quiet FETCH_HEAD' clone "$tmp/src" "$REPO_URL" "$PINNED_REF" \
      >/dev/null 2>&1; then
    unavailable "$src_var unset, nothing cached, and fetching" \
      "$REPO_URL $PINNED_REF failed (timeout ${CLONE_TIMEOUT}s)"
  fi
  src="$tmp/src"
fi

if [ -f "$src" ]; then
  sum=$(sha256sum "$src" | cut -d' ' -f1)
  if [ "$sum" != "$PINNED_SHA256" ]; then
    echo "$src_var: $src has SHA-256 $sum, not the pinned $PINNED_SHA256" >&2
    exit 1
  fi
  key=$(cache_key "$sum")
  kind="tarball $sum"
elif [ -d "$src" ]; then
  version=$(cat "$src/VERSION" 2>/dev/null || true)
  if [ "$version" != "$PINNED_VERSION" ]; then
    echo "$src_var: $src/VERSION says '${version}', not $PINNED_VERSION" >&2
    exit 1
  fi
  head=$(git -C "$src" rev-parse HEAD 2>/dev/null || true)
  if [ "$head" = "$PINNED_COMMIT" ] && [ -z "$(git -C "$src" status --porcelain 2>/dev/null)" ]; then
    kind="git checkout of $PINNED_COMMIT"
  else
    echo "WARNING: $src_var: $src is not a clean git checkout of $PINNED_COMMIT;" \
      "only its VERSION file ($version) is checked, the tree itself is not verified" >&2
    kind="directory"
  fi
  hash=$(tree_hash "$src")
  key=$(cache_key "$hash")
  kind="$kind, tree $hash"
else
  echo "$src_var: $src is neither a file nor a directory" >&2
  exit 1
fi

out="$cache_root/upstream/$key"
bin="$out/bin"
stamp="$bin/.complete"
if [ -f "$stamp" ]; then
  echo "NVIDIA's $target binaries up to date (cache key $key, $kind)" >&2
  echo "$bin"; exit 0
fi
if $cached_only; then unavailable "not built yet (cache key $key): run hack/upstream/build.sh $target"; fi

if [ -f "$src" ]; then
  tmp=${tmp:-$(mktemp -d)}
  tar -xzf "$src" -C "$tmp"
  tree=$(find "$tmp" -mindepth 1 -maxdepth 1 -type d | head -n 1)
else
  tree="$src"
fi
for need in VERSION go.mod vendor/modules.txt templates deployments/helm/dra-driver-nvidia-gpu \
    "${COMMANDS[@]/#/cmd/}"; do
  [ -e "$tree/$need" ] || { echo "$src_var: the tree lacks $need" >&2; exit 1; }
done

rm -rf "$out"
mkdir -p "$bin"
start=$(date +%s)
version=$(cat "$tree/VERSION")
# As NVIDIA's Makefile: the version (and commit, when known) into internal/info.
ldflags="-s -w -X sigs.k8s.io/dra-driver-nvidia-gpu/internal/info.version=$version"
case "$kind" in
  directory*) ;;
  *) ldflags="$ldflags -X sigs.k8s.io/dra-driver-nvidia-gpu/internal/info.gitCommit=$PINNED_COMMIT" ;;
esac
for cmd in "${COMMANDS[@]}"; do
  cgo=0
  if [ "$cmd" = compute-domain-kubelet-plugin ]; then cgo=1; fi
  echo "building NVIDIA's $cmd $version (CGO_ENABLED=$cgo) ..." >&2
  # go-nvml's header marks many functions deprecated: gcc's warnings about them are noise here.
  (cd "$tree" && CGO_ENABLED=$cgo CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations" go build -p 2 -trimpath -ldflags "$ldflags" -o "$bin/$cmd" "./cmd/$cmd")
done
cp -R "$tree/templates" "$out/templates"
mkdir -p "$out/chart"
cp -R "$tree/deployments/helm/dra-driver-nvidia-gpu" "$out/chart/"
cp "$tree/VERSION" "$out/VERSION"
secs=$(( $(date +%s) - start ))
echo "built in ${secs}s from $kind" > "$stamp"
echo "NVIDIA's $target binaries built in ${secs}s into $bin" >&2
echo "$bin"
