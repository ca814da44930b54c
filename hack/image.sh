#!/usr/bin/env bash
# Builds the controller image from ./Dockerfile with buildah (no Docker engine needed), tags it
# computedomain-controller:<version from pyproject.toml> and prints its size; with --run, also
# runs the image's entrypoint with podman: --help, --version, the list of installed modules (the
# controller's distribution, none of the lab's), and the controller itself
# against a local control plane until it has reconciled manifests/samples/computedomain.yaml.
#
#   hack/image.sh                  build (the base image is reused when present)
#   hack/image.sh --run            build, then the smoke run (not part of hack/test.sh: too slow)
#   hack/image.sh --rebuild-base   build the Debian stand-in base again even if present
#
# The base, FROM python:3.11-slim-bookworm: used from local storage when there, else pulled.
# Where no registry serving it is reachable, an equivalent is built from Debian bookworm packages
# with mmdebstrap (python3.11, python3-venv, python3-pip, python-is-python3, ca-certificates;
# no EXTERNALLY-MANAGED marker, so `pip install` works as in the official image), imported with
# podman and tagged under the official name, so the Dockerfile builds unchanged. It is labelled
# as such (org.opencontainers.image.description), and the label carries over to our image.
#
# TLS: the build's RUN steps reach PyPI (pip for uv, uv build for hatchling). Where egress goes
# through a TLS-inspecting proxy, they need this machine's CA bundle: it is mounted over the
# container's system bundle for the RUN steps only, with a pip.conf and a uv.toml that point pip
# and uv at it. Nothing of it lands in an image layer.
#
# Tools (buildah, podman, crun, runc, skopeo, umoci, mmdebstrap) come from Debian, installed here
# when missing (as root). Storage: containers/storage's default, overlay (kernel overlayfs: as
# root on ext4 it needs nothing else, and layers are shared, not copied per step as with vfs;
# where overlay cannot be mounted, set driver = "vfs" in /etc/containers/storage.conf on a fresh
# /var/lib/containers/storage). Runtime: crun, with buildah's OCI isolation; where crun cannot
# start a container (crun 1.8 refuses hybrid cgroup hosts), chroot isolation for the build and
# runc for podman, logged. OCI_RUNTIME and BUILDAH_ISOLATION override. Every container runs on
# the host network (the build reaches PyPI, the controller the local apiserver on 127.0.0.1).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

run=false
rebuild_base=false
for arg in "$@"; do
  case "$arg" in
    --run) run=true ;;
    --rebuild-base) rebuild_base=true ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "image.sh: unknown argument $arg (see --help)" >&2; exit 2 ;;
  esac
done

log() { echo "image.sh: $*" >&2; }
# `timed LABEL CMD...`: runs CMD and reports how long it took (a failure exits through errexit).
timed() {
  local label=$1 start=$SECONDS
  shift
  "$@"
  log "$label: $((SECONDS - start))s"
}

tools=(buildah podman crun runc skopeo umoci mmdebstrap)
missing=()
for tool in "${tools[@]}"; do command -v "$tool" >/dev/null 2>&1 || missing+=("$tool"); done
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    log "installing ${missing[*]} from Debian"
    export DEBIAN_FRONTEND=noninteractive
    install_tools() {
      apt-get update -qq
      # What podman/buildah want beside them without Recommends (runc: the fallback runtime).
      apt-get install -y -qq --no-install-recommends "${tools[@]}" uidmap fuse-overlayfs \
        netavark containernetworking-plugins >/dev/null
    }
    timed "install tools" install_tools
  else
    log "missing ${missing[*]}, and apt-get (as root) is not available to install them"
    exit 3
  fi
fi

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml | head -n 1)
image="localhost/computedomain-controller:$version"
# The base the Dockerfile names by default (ARG PYTHON_IMAGE=...), fully qualified as buildah
# resolves the short name.
base_short=$(sed -n 's/^ARG PYTHON_IMAGE=//p' Dockerfile | head -n 1)
case "$base_short" in
  */*/*) base="$base_short" ;;
  */*) base="docker.io/$base_short" ;;
  *) base="docker.io/library/$base_short" ;;
esac

work=$(mktemp -d)
cleanup_steps=("rm -rf '$work'")
cleanup() {
  local rc=$? i
  [ "$rc" = 0 ] || log "FAILED (exit $rc); cleaning up"
  for ((i = ${#cleanup_steps[@]} - 1; i >= 0; i--)); do eval "${cleanup_steps[i]}" || true; done
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- base image -----------------------------------------------------------------------------
build_debian_base() {
  local started=$SECONDS
  mmdebstrap --variant=minbase --mode=root \
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    --include=python3.11,python3-venv,python3-pip,python-is-python3,ca-certificates \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --customize-hook='rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/log/*' \
    bookworm "$work/base.tar" \
    "deb http://deb.debian.org/debian bookworm main" \
    "deb http://deb.debian.org/debian bookworm-updates main" \
    "deb http://deb.debian.org/debian-security bookworm-security main" \
    >"$work/mmdebstrap.log" 2>&1 || { tail -n 40 "$work/mmdebstrap.log" >&2; return 1; }
  log "mmdebstrap: $((SECONDS - started))s, rootfs tarball $(du -h "$work/base.tar" | cut -f1)"
  local description="Stand-in for $base_short: Debian bookworm python3.11 packages (mmdebstrap)"
  podman import --quiet \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change "LABEL org.opencontainers.image.description=\"$description\"" \
    --change 'CMD ["python3"]' \
    "$work/base.tar" "$base" >/dev/null
  rm -f "$work/base.tar"
}

ensure_base() {
  if ! $rebuild_base && buildah inspect --type image "$base" >/dev/null 2>&1; then
    log "base $base: present in local storage, reused"
    return 0
  fi
  if ! $rebuild_base; then
    local pull_error
    if pull_error=$(buildah pull --quiet "$base" 2>&1 >/dev/null); then
      log "base $base: pulled"
      return 0
    fi
    log "base $base cannot be pulled: $(grep -m1 'Error' <<<"$pull_error" || echo "$pull_error")"
  fi
  log "base $base: building an equivalent from Debian bookworm packages"
  build_debian_base
}
timed "base image" ensure_base

# --- OCI runtime --------------------------------------------------------------------------------
# podman's default RLIMIT_NOFILE (1048576) cannot be set where CAP_SYS_RESOURCE is not in the
# bounding set (some sandboxes): containers get this shell's hard limit, and nproc 4096.
nofile=$(ulimit -Hn)
[ "$nofile" = unlimited ] && nofile=1048576
ulimits=(--ulimit "nofile=$nofile:$nofile" --ulimit nproc=4096:4096)
# crun (1.8) refuses hosts with hybrid cgroups when the cgroup2 hierarchy has a controller
# ("cgroups in hybrid mode not supported"); there the build runs RUN steps with chroot isolation
# (no OCI runtime involved) and podman uses runc. OCI_RUNTIME / BUILDAH_ISOLATION override.
runtime=${OCI_RUNTIME:-crun}
isolation=${BUILDAH_ISOLATION:-oci}
if [ -z "${OCI_RUNTIME:-}" ] && ! probe=$(podman run --rm --runtime crun \
  --network host "${ulimits[@]}" "$base" true 2>&1); then
  log "crun cannot start a container here: $(grep -m1 'Error: ' <<<"$probe" || echo "$probe")"
  runtime=runc
  isolation=${BUILDAH_ISOLATION:-chroot}
  log "falling back to buildah --isolation $isolation and podman --runtime runc"
fi

# --- the image --------------------------------------------------------------------------------
# The CA bundle pip is configured with on this machine (PIP_CERT, pip.conf, SSL_CERT_FILE), else
# the system one; mounted for the RUN steps only.
ca_bundle=${PIP_CERT:-}
for conf in /etc/pip.conf "${XDG_CONFIG_HOME:-$HOME/.config}/pip/pip.conf"; do
  [ -z "$ca_bundle" ] && [ -f "$conf" ] && ca_bundle=$(sed -n 's/^cert *= *//p' "$conf" | head -n 1)
done
ca_bundle=${ca_bundle:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}
mounts=()
if [ -f "$ca_bundle" ]; then
  printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' >"$work/pip.conf"
  printf 'system-certs = true\n' >"$work/uv.toml"
  mounts=(
    --volume "$ca_bundle:/etc/ssl/certs/ca-certificates.crt:ro"
    --volume "$work/pip.conf:/etc/pip.conf:ro"
    --volume "$work/uv.toml:/etc/uv/uv.toml:ro"
  )
  log "build steps trust $ca_bundle"
fi

build_image() {
  # --network host: the RUN steps reach PyPI without a CNI/netavark bridge. --pull=never: the
  # base was settled above. --layers: unchanged steps come from cache on the next run.
  local how=(--isolation "$isolation")
  [ "$isolation" = chroot ] || how+=(--runtime "$runtime")
  if ! buildah build --layers --pull=never --network host "${how[@]}" "${mounts[@]}" \
    --tag "$image" --file Dockerfile . >"$work/build.log" 2>&1; then
    tail -n 40 "$work/build.log" >&2
    return 1
  fi
}
timed "image build" build_image
size=$(podman image inspect --format '{{.Size}}' "$image")
log "built $image: $((size / 1000000)) MB ($size bytes, uncompressed)"
description=$(podman image inspect --format \
  '{{index .Labels "org.opencontainers.image.description"}}' "$image" || true)
log "on base ${description:-$base}"
podman images --format '  {{.Repository}}:{{.Tag}}  {{.Size}}' |
  grep -F -e "$image" -e "$base" >&2 || true

$run || exit 0

# --- the smoke run ------------------------------------------------------------------------------
smoke() {
  local runner=(podman run --rm --runtime "$runtime" "${ulimits[@]}")
  local help
  help=$("${runner[@]}" "$image" --help)
  log "entrypoint --help: exit 0, $(wc -l <<<"$help") lines; first 3:"
  head -n 3 <<<"$help"
  log "entrypoint --version:"
  "${runner[@]}" "$image" --version
  # The controller's distribution only: the lab (simulator, dev cluster) is not installed.
  local modules
  modules=$("${runner[@]}" --entrypoint python "$image" -c 'import computedomain, pkgutil
print(" ".join(sorted(m.name for m in pkgutil.walk_packages(computedomain.__path__, "computedomain."))))')
  log "installed modules: $(wc -w <<<"$modules") under computedomain"
  case " $modules " in
    *" computedomain.sim"* | *" computedomain.devcluster"*)
      log "FAIL: the image holds the lab: $(tr ' ' '\n' <<<"$modules" | grep -E 'sim|devcluster' | head -n 3 | tr '\n' ' ')"
      return 1 ;;
  esac

  local bin_dir kubectl state
  bin_dir=${KUBEBUILDER_ASSETS:-}
  if [ -z "$bin_dir" ]; then
    bin_dir=$(bash hack/controlplane/build.sh | tail -n 1)
    export KUBEBUILDER_ASSETS="$bin_dir"
  fi
  kubectl=("$bin_dir/kubectl")
  state="$work/devcluster"
  # The control plane is stopped on any exit from here on (its own state dir: no clash with a
  # developer's .devcluster).
  cleanup_steps+=("uv run --frozen python -m computedomain.devcluster down --state-dir '$state'")
  timed "control plane up" uv run --frozen python -m computedomain.devcluster up \
    --racks 1 --non-fabric 0 --state-dir "$state" >/dev/null
  kubectl+=(--kubeconfig "$state/admin.kubeconfig")

  # The controller runs as 65532: give it a self-contained copy of the kubeconfig (certificates
  # inline) that it can read, rather than the root-only PKI files it references by path.
  "${kubectl[@]}" config view --raw --flatten --minify >"$work/kubeconfig"
  chown 65532:65532 "$work/kubeconfig"
  chmod 0400 "$work/kubeconfig"

  local namespace=nvidia-dra-driver-gpu cd_namespace=image-smoke name=computedomain-image-smoke
  "${kubectl[@]}" create namespace "$namespace" >/dev/null
  "${kubectl[@]}" create namespace "$cd_namespace" >/dev/null
  local ports
  read -r -a ports < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in socks))')

  cleanup_steps+=("podman rm --force --time 10 $name >/dev/null")
  podman run --detach --name "$name" --runtime "$runtime" "${ulimits[@]}" \
    --network host \
    --volume "$work/kubeconfig:/etc/computedomain/kubeconfig:ro" \
    --env KUBECONFIG=/etc/computedomain/kubeconfig \
    --env IMAGE_NAME=registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v0.4.0 \
    --env NAMESPACE="$namespace" --env POD_NAME="$name" \
    --env HTTP_ENDPOINT="127.0.0.1:${ports[0]}" --env PROBE_ADDRESS="127.0.0.1:${ports[1]}" \
    "$image" >/dev/null
  log "controller container $name started (metrics :${ports[0]}, probes :${ports[1]})"

  local started=$SECONDS uid
  "${kubectl[@]}" apply -n "$cd_namespace" -f manifests/samples/computedomain.yaml
  uid=$("${kubectl[@]}" get -n "$cd_namespace" -f manifests/samples/computedomain.yaml \
    -o jsonpath='{.metadata.uid}')
  if ! "${kubectl[@]}" wait -n "$cd_namespace" -f manifests/samples/computedomain.yaml \
      --for=jsonpath='{.metadata.finalizers[0]}'=resource.nvidia.com/computeDomain \
      --timeout=180s \
    || ! "${kubectl[@]}" wait -n "$namespace" --for=create \
      "daemonset/computedomain-daemon-$uid" --timeout=60s; then
    log "FAILED: the controller did not reconcile the ComputeDomain; its log:"
    podman logs --tail 40 "$name" >&2
    return 1
  fi
  log "reconciled in $((SECONDS - started))s:"
  "${kubectl[@]}" get -n "$cd_namespace" -f manifests/samples/computedomain.yaml \
    -o jsonpath='  ComputeDomain {.metadata.name}: finalizers={.metadata.finalizers}{"\n"}'
  local daemonset='  DaemonSet {.metadata.namespace}/{.metadata.name}: '
  daemonset+='image={.spec.template.spec.containers[0].image}{"\n"}'
  "${kubectl[@]}" get -n "$namespace" daemonset "computedomain-daemon-$uid" \
    -o jsonpath="$daemonset"
  python3 -c 'import sys, urllib.request
print("  controller /readyz:", urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())' \
    "http://127.0.0.1:${ports[1]}/readyz"
  log "controller log (last 5 lines):"
  podman logs --tail 5 "$name" >&2
}
timed "smoke run" smoke
