#!/usr/bin/env bash
# Builds the controller image for linux/amd64 and linux/arm64 from ./Dockerfile with buildah (no
# Docker engine needed): computedomain-controller:<version>-amd64 and -arm64, both in ONE
# manifest list, computedomain-controller:<version> (the version of pyproject.toml). The list is
# also written with both images as an OCI layout, dist/computedomain-controller-<version>.oci,
# and its digest printed: `skopeo copy --all --preserve-digests
# oci:dist/computedomain-controller-<version>.oci:<version> docker://<registry>/<name>:<version>`
# publishes it under that same digest. Each architecture's size is printed; then the list's
# arm64 entry is checked to be the arm64 image, whose --version runs under emulation (podman run
# --arch arm64; it checks that the process runs as aarch64). With
# --run, also the smoke run of this machine's architecture's image with podman: --help,
# --version, the list of installed modules (the controller's distribution, none of the lab's),
# and the controller itself against a local control plane until it has reconciled
# manifests/samples/computedomain.yaml.
#
#   hack/image.sh                  build both architectures, the list, and arm64's --version
#   hack/image.sh --run            ... then the smoke run (not part of hack/test.sh: too slow)
#   hack/image.sh --rebuild-base   build the Debian stand-in bases again even if present
#
# The base is pinned by digest, one of two ways; each image names its base in its labels
# org.opencontainers.image.base.name and org.opencontainers.image.base.digest:
# - Official: the Dockerfile's default, python:3.11-slim-bookworm@sha256:<manifest list digest>
#   (Docker Hub's list, both architectures). Used from local storage, else pulled, per
#   architecture from that list. A newer base is a change to the Dockerfile's ARG, reviewed.
# - Stand-in, where that cannot be pulled (no Docker Hub): per architecture, a base built from
#   Debian bookworm packages with mmdebstrap --architectures=<arch> (python3.11, python3-venv,
#   python3-pip, python-is-python3, ca-certificates; no EXTERNALLY-MANAGED marker, so
#   `pip install` works as in the official image), imported as
#   localhost/python-bookworm-stand-in:3.11-<arch> and labelled as a stand-in
#   (org.opencontainers.image.description, which carries over to our image). The build is
#   FROM localhost/python-bookworm-stand-in@sha256:<that image's digest>, read back after the
#   import (or from local storage when reused) and printed, so no other image, and no other
#   image tagged under the official name, can stand in silently.
#
# Emulation: the other architecture's RUN steps (and mmdebstrap's maintainer scripts) run under
# Debian's qemu-user-static through binfmt_misc. As root, this script mounts binfmt_misc when it
# is not mounted, installs qemu-user-static when missing and registers qemu-aarch64 (or
# qemu-x86_64 on an arm64 host) from its binfmt.d file, each only when needed; where it cannot
# (not root, binfmt_misc not mountable) it says so in one line and exits 3.
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
as_root() { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; }
apt_install() {
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

tools=(buildah podman crun runc skopeo umoci mmdebstrap)
missing=()
for tool in "${tools[@]}"; do command -v "$tool" >/dev/null 2>&1 || missing+=("$tool"); done
if [ "${#missing[@]}" -gt 0 ]; then
  if as_root; then
    log "installing ${missing[*]} from Debian"
    # What podman/buildah want beside them without Recommends (runc: the fallback runtime).
    timed "install tools" apt_install "${tools[@]}" uidmap fuse-overlayfs netavark \
      containernetworking-plugins
  else
    log "missing ${missing[*]}, and apt-get (as root) is not available to install them"
    exit 3
  fi
fi

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml | head -n 1)
image="localhost/computedomain-controller:$version"
arches=(amd64 arm64)
native=$(podman info --format '{{.Host.Arch}}')
layout="dist/computedomain-controller-$version.oci"
# The base the Dockerfile names by default (ARG PYTHON_IMAGE=...@sha256:...), fully qualified as
# buildah resolves the short name.
base_short=$(sed -n 's/^ARG PYTHON_IMAGE=//p' Dockerfile | head -n 1)
case "$base_short" in
  */*/*) official="$base_short" ;;
  */*) official="docker.io/$base_short" ;;
  *) official="docker.io/library/$base_short" ;;
esac
case "$official" in
  *@sha256:*) ;;
  *) log "the Dockerfile's base $base_short is not pinned by digest (ARG PYTHON_IMAGE=...@sha256:...)"; exit 2 ;;
esac
stand_in_repo=localhost/python-bookworm-stand-in

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

# --- emulation of the other architecture --------------------------------------------------------
qemu_name() { case "$1" in arm64) echo aarch64 ;; amd64) echo x86_64 ;; *) echo "$1" ;; esac; }
ensure_emulation() {
  local arch=$1 binfmt=/proc/sys/fs/binfmt_misc qemu conf wanted=()
  qemu=qemu-$(qemu_name "$arch")
  conf=/usr/lib/binfmt.d/$qemu.conf
  # qemu-user-static runs the other architecture's code; mmdebstrap wants arch-test to check it.
  [ -f "$conf" ] || wanted+=(qemu-user-static)
  command -v arch-test >/dev/null 2>&1 || wanted+=(arch-test)
  if [ "${#wanted[@]}" -gt 0 ]; then
    as_root || { log "cannot build for $arch: ${wanted[*]} missing, and apt-get (as root) is not available"; exit 3; }
    log "installing ${wanted[*]} from Debian (runs $arch code)"
    timed "install ${wanted[*]}" apt_install "${wanted[@]}"
  fi
  if [ "$(head -n 1 "$binfmt/$qemu" 2>/dev/null)" = enabled ]; then
    log "$arch: $qemu already registered in binfmt_misc"
    return 0
  fi
  if [ "$(id -u)" != 0 ]; then
    log "cannot build for $arch: $qemu is not registered in binfmt_misc, and registering it needs root"
    exit 3
  fi
  if [ ! -e "$binfmt/register" ] && ! mount -t binfmt_misc binfmt_misc "$binfmt" 2>/dev/null; then
    log "cannot build for $arch: binfmt_misc is not mounted at $binfmt and cannot be mounted here"
    exit 3
  fi
  if [ -e "$binfmt/$qemu" ]; then
    echo 1 >"$binfmt/$qemu"  # registered but disabled
  else
    grep -v '^#' "$conf" >"$binfmt/register"
  fi
  log "$arch: $qemu registered in binfmt_misc ($(sed -n 's/^interpreter //p' "$binfmt/$qemu"))"
}
for arch in "${arches[@]}"; do
  [ "$arch" = "$native" ] || ensure_emulation "$arch"
done

# --- base images, pinned by digest ---------------------------------------------------------------
# from[arch]: what the build's FROM names (always ...@sha256:...); from_name[arch]: the base's
# human name for the label; pull[arch]: the build's pull policy.
declare -A from from_name pull
build_debian_base() {
  local arch=$1 tag=$2 started=$SECONDS
  mmdebstrap --variant=minbase --mode=root --architectures="$arch" \
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    --include=python3.11,python3-venv,python3-pip,python-is-python3,ca-certificates \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --customize-hook='rm -f "$1"/usr/lib/python3*/EXTERNALLY-MANAGED' \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/log/*' \
    bookworm "$work/base-$arch.tar" \
    "deb http://deb.debian.org/debian bookworm main" \
    "deb http://deb.debian.org/debian bookworm-updates main" \
    "deb http://deb.debian.org/debian-security bookworm-security main" \
    >"$work/mmdebstrap-$arch.log" 2>&1 || { tail -n 40 "$work/mmdebstrap-$arch.log" >&2; return 1; }
  log "$arch: mmdebstrap $((SECONDS - started))s, rootfs tarball $(du -h "$work/base-$arch.tar" | cut -f1)"
  local description="Stand-in for $base_short: Debian bookworm python3.11 packages (mmdebstrap)"
  podman import --quiet --os linux --arch "$arch" \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change "LABEL org.opencontainers.image.description=\"$description\"" \
    --change 'CMD ["python3"]' \
    "$work/base-$arch.tar" "$tag" >/dev/null
  rm -f "$work/base-$arch.tar"
}

ensure_base() {
  local arch=$1 tag="$stand_in_repo:3.11-$1" pull_error digest
  if ! $rebuild_base; then
    # From local storage when there (policy missing), else from the list at its digest.
    if pull_error=$(buildah pull --quiet --policy missing --platform "linux/$arch" "$official" \
      2>&1 >/dev/null); then
      log "$arch: base $official (official, pinned by its list digest)"
      from[$arch]=$official from_name[$arch]=$official pull[$arch]=missing
      return 0
    fi
    log "$arch: base $official cannot be pulled: $(grep -m1 'Error' <<<"$pull_error" || echo "$pull_error")"
  fi
  if $rebuild_base || ! buildah inspect --type image "$tag" >/dev/null 2>&1; then
    log "$arch: building a stand-in base from Debian bookworm packages"
    build_debian_base "$arch" "$tag"
  else
    log "$arch: stand-in base $tag present in local storage, reused"
  fi
  digest=$(podman image inspect --format '{{.Digest}}' "$tag")
  from[$arch]="$stand_in_repo@$digest" from_name[$arch]=$tag pull[$arch]=never
  log "$arch: base ${from[$arch]} (stand-in $tag)"
}
for arch in "${arches[@]}"; do timed "$arch: base image" ensure_base "$arch"; done

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
  --network host "${ulimits[@]}" "${from[$native]}" true 2>&1); then
  log "crun cannot start a container here: $(grep -m1 'Error: ' <<<"$probe" || echo "$probe")"
  runtime=runc
  isolation=${BUILDAH_ISOLATION:-chroot}
  log "falling back to buildah --isolation $isolation and podman --runtime runc"
fi

# --- the images and their list ------------------------------------------------------------------
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
  # --network host: the RUN steps reach PyPI without a CNI/netavark bridge. --layers: unchanged
  # steps come from cache on the next run. The base: the digest settled above, nothing else.
  local arch=$1 how=(--isolation "$isolation")
  [ "$isolation" = chroot ] || how+=(--runtime "$runtime")
  if ! buildah build --layers --pull="${pull[$arch]}" --platform "linux/$arch" --network host \
    "${how[@]}" "${mounts[@]}" \
    --build-arg "PYTHON_IMAGE=${from[$arch]}" \
    --label "org.opencontainers.image.base.name=${from_name[$arch]}" \
    --label "org.opencontainers.image.base.digest=${from[$arch]##*@}" \
    --label "org.opencontainers.image.version=$version" \
    --tag "$image-$arch" --file Dockerfile . >"$work/build-$arch.log" 2>&1; then
    tail -n 40 "$work/build-$arch.log" >&2
    return 1
  fi
  log "$arch: built $image-$arch FROM ${from[$arch]}"
}
for arch in "${arches[@]}"; do timed "$arch: image build" build_image "$arch"; done

make_list() {
  # A list left by an earlier run (or a single-architecture image under the same name) goes.
  if buildah manifest exists "$image"; then
    buildah manifest rm "$image" >/dev/null
  elif buildah inspect --type image "$image" >/dev/null 2>&1; then
    buildah rmi "$image" >/dev/null
  fi
  buildah manifest create "$image" >/dev/null
  for arch in "${arches[@]}"; do
    buildah manifest add "$image" "containers-storage:$image-$arch" >/dev/null
  done
  # The list as a registry would receive it (layers compressed): its digest is the release's.
  rm -rf "$layout"
  mkdir -p "$(dirname "$layout")"
  buildah manifest push --quiet --all --format oci --digestfile "$work/list.digest" \
    "$image" "oci:$layout:$version" >/dev/null
}
timed "manifest list" make_list
list_digest=$(cat "$work/list.digest")
log "manifest list $image: $list_digest ($layout, tag $version)"
# Per architecture: the platform the list says, the image's size unpacked (as podman counts it)
# and compressed (what a node pulls), read from the layout just written.
python3 - "$layout" "$list_digest" <<'PY' >&2
import json, sys
from pathlib import Path
layout, digest = Path(sys.argv[1]), sys.argv[2]
def blob(d): return json.loads((layout / "blobs" / d.replace(":", "/")).read_text())
for entry in blob(digest)["manifests"]:
    platform, manifest = entry["platform"], blob(entry["digest"])
    pulled = sum(layer["size"] for layer in manifest["layers"]) + manifest["config"]["size"]
    print(f"image.sh:   {platform['os']}/{platform['architecture']}: manifest {entry['digest']} (as pushed), "
          f"{pulled / 1e6:.0f} MB compressed")
PY
for arch in "${arches[@]}"; do
  size=$(podman image inspect --format '{{.Size}}' "$image-$arch")
  log "  $arch: $image-$arch $((size / 1000000)) MB ($size bytes, uncompressed), on base ${from_name[$arch]}"
done
description=$(podman image inspect --format \
  '{{index .Labels "org.opencontainers.image.description"}}' "$image-$native" || true)
[ -z "$description" ] || log "  ($description)"

# --- arm64 under emulation ----------------------------------------------------------------------
# The image the list names for linux/arm64 (its entry's digest checked against the image's), run
# by its own tag: podman 4.3 runs the right entry through the list with --arch arm64 but warns
# that the list's platform is the host's, which would only confuse this output.
arm64_check() {
  local entry own runner=(podman run --rm --runtime "$runtime" "${ulimits[@]}" --arch arm64)
  local machine running=natively
  entry=$(buildah manifest inspect "$image" | python3 -c 'import json, sys
print(*[m["digest"] for m in json.load(sys.stdin)["manifests"] if m["platform"]["architecture"] == "arm64"])')
  own=$(podman image inspect --format '{{.Digest}}' "$image-arm64")
  [ "$entry" = "$own" ] || { log "FAIL: the list's arm64 entry is $entry, not $image-arm64 ($own)"; return 1; }
  [ "$native" = arm64 ] || running="under emulation ($(qemu_name arm64) through binfmt_misc)"
  machine=$("${runner[@]}" --entrypoint python "$image-arm64" -c 'import platform; print(platform.machine())')
  log "arm64 image (the list's linux/arm64 entry $entry), run $running: machine $machine; --version:"
  "${runner[@]}" "$image-arm64" --version
  [ "$machine" = aarch64 ] || { log "FAIL: the arm64 image runs as $machine"; return 1; }
}
timed "arm64 --version" arm64_check

$run || exit 0

# --- the smoke run ------------------------------------------------------------------------------
smoke() {
  local runner=(podman run --rm --runtime "$runtime" "${ulimits[@]}")
  local help
  help=$("${runner[@]}" "$image-$native" --help)
  log "entrypoint --help: exit 0, $(wc -l <<<"$help") lines; first 3:"
  head -n 3 <<<"$help"
  log "entrypoint --version:"
  "${runner[@]}" "$image-$native" --version
  # The controller's distribution only: the lab (simulator, dev cluster) is not installed.
  local modules
  modules=$("${runner[@]}" --entrypoint python "$image-$native" -c 'import computedomain, pkgutil
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
    "$image-$native" >/dev/null
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
