#!/usr/bin/env bash
# Runs one of NVIDIA's binaries that hack/upstream/build.sh built, as its container would see the
# file system: the tree's templates at /templates (where NVIDIA's controller reads them, an
# absolute path as in its image), a private /run, and whatever the pod mounts (--bind).
#
#   hack/upstream/run.sh [--bind SRC:DST]... <bin dir printed by build.sh> <program> [args...]
#
#   --bind SRC:DST  bind the host file or directory SRC at DST in the container, e.g. the
#                   IMEX daemon's /imexd, /etc/hosts and service account token (repeatable).
#                   DST must exist, or lie in a new top-level directory, under /run or under
#                   /dev, so that nothing is created on the host. A DST under /dev gives the
#                   container a private /dev: a tmpfs holding the host's entries, each bound
#                   (e.g. CDI device nodes the stand-in kubelet makes as plain files).
#
# The host is left untouched: in a private mount namespace (root needed), an empty tmpfs becomes
# the new root, every top-level entry of / but /run is bound into it under its own name (so
# every absolute path, kubeconfig and certificates included, means what it means outside), /run
# is an empty tmpfs of its own (as in a container: /var/run/secrets/... lands there), the
# templates are bound read-only at /templates, the --bind mounts follow, and the program is
# exec'd chrooted there, in the caller's working directory. The mounts end with the process;
# the binary ends up with this script's PID, so signals reach it directly, and a probe can run
# inside the same view with `nsenter --target PID --mount --root --wd`.
set -euo pipefail
binds=()
while [ "${1:-}" = "--bind" ]; do
  if [ "$#" -lt 2 ] || [[ "$2" != *:/* ]]; then
    echo "run.sh: --bind wants SRC:/DST, got '${2:-}'" >&2
    exit 2
  fi
  binds+=("$2")
  shift 2
done
if [ "$#" -lt 2 ]; then
  echo "usage: $0 [--bind SRC:DST]... <bin dir> <program> [args...]" >&2
  exit 2
fi
bin_dir=$(cd "$1" && pwd)
program="$bin_dir/$2"
shift 2
out=$(dirname "$bin_dir")
templates="$out/templates"
root="$out/root"   # an empty mount point, used only inside the private namespaces
[ -x "$program" ] || { echo "run.sh: $program is not an executable" >&2; exit 2; }
[ -d "$templates" ] || { echo "run.sh: $templates missing (run hack/upstream/build.sh)" >&2; exit 2; }
for bind in ${binds[@]+"${binds[@]}"}; do
  [ -e "${bind%%:*}" ] || { echo "run.sh: --bind source ${bind%%:*} does not exist" >&2; exit 2; }
done
mkdir -p "$root"

# shellcheck disable=SC2016  # expanded by the inner bash
exec unshare --mount --propagation private -- bash -c '
set -euo pipefail
root=$1 templates=$2 program=$3 cwd=$4 nbinds=$5
shift 5
binds=("${@:1:$nbinds}")
shift "$nbinds"
mount -t tmpfs -o mode=0755 upstream-root "$root"
private_dev=
for bind in ${binds[@]+"${binds[@]}"}; do
  case $(realpath -m "${bind#*:}") in /dev/*) private_dev=1 ;; esac
done
for entry in /* /.[!.]*; do
  [ -e "$entry" ] || [ -L "$entry" ] || continue
  target="$root/${entry#/}"
  if [ "$entry" = /run ]; then
    mkdir "$target"
    mount -t tmpfs -o mode=0755 container-run "$target"
  elif [ "$entry" = /dev ] && [ -n "$private_dev" ]; then
    mkdir "$target"
    mount -t tmpfs -o mode=0755 container-dev "$target"
    for node in /dev/* /dev/.[!.]*; do
      [ -e "$node" ] || [ -L "$node" ] || continue
      if [ -L "$node" ]; then ln -s "$(readlink "$node")" "$target/${node#/dev/}"
      elif [ -d "$node" ]; then mkdir "$target/${node#/dev/}"; mount --rbind "$node" "$target/${node#/dev/}"
      else touch "$target/${node#/dev/}"; mount --bind "$node" "$target/${node#/dev/}"
      fi
    done
  elif [ -L "$entry" ]; then
    ln -s "$(readlink "$entry")" "$target"
  elif [ -d "$entry" ]; then
    mkdir "$target"
    mount --rbind "$entry" "$target"
  else
    touch "$target"
    mount --bind "$entry" "$target"
  fi
done
# Binding the directory that holds $root copied the new root into itself: drop that copy.
if mountpoint -q "$root$root"; then umount -R "$root$root"; fi
[ -e "$root/templates" ] || mkdir "$root/templates"
mount --bind "$templates" "$root/templates"
mount -o remount,bind,ro "$root/templates"
for bind in ${binds[@]+"${binds[@]}"}; do
  src=${bind%%:*} dst=$root$(realpath -m "${bind#*:}")
  # /var/run is a link to /run: resolve the destination inside the new root.
  case $dst in "$root"/var/run/*) dst=$root/run/${dst#"$root"/var/run/} ;; esac
  top=${dst#"$root"/}; top=${top%%/*}
  if [ ! -e "$dst" ] && [ "$top" != run ] && { [ "$top" != dev ] || [ -z "$private_dev" ]; } && [ -e "/$top" ]; then
    echo "run.sh: --bind destination ${dst#"$root"} would be created on the host" >&2
    exit 2
  fi
  if [ -d "$src" ]; then mkdir -p "$dst"; else mkdir -p "$(dirname "$dst")"; [ -e "$dst" ] || touch "$dst"; fi
  mount --bind "$src" "$dst"
done
exec chroot "$root" /bin/sh -c "cd \"\$1\" && shift && exec \"\$@\"" sh "$cwd" "$program" "$@"
' run "$root" "$templates" "$program" "$PWD" "${#binds[@]}" ${binds[@]+"${binds[@]}"} "$@"
