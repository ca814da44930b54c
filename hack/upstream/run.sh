#!/usr/bin/env bash
# Runs one of NVIDIA's binaries that hack/upstream/build.sh built, with the tree's templates at
# /templates, where NVIDIA's controller reads them (an absolute path, as in its image).
#
#   hack/upstream/run.sh <bin dir printed by build.sh> <compute-domain-controller|...> [args...]
#
# The host is left untouched: in a private mount namespace (root needed), an empty tmpfs becomes
# the new root, every top-level entry of / is bound into it under its own name (so every
# absolute path, kubeconfig and certificates included, means what it means outside), the
# templates are bound read-only at /templates, and the program is exec'd chrooted there, in the
# caller's working directory. The mounts end with the process; the binary ends up with this
# script's PID, so signals reach it directly.
set -euo pipefail
if [ "$#" -lt 2 ]; then
  echo "usage: $0 <bin dir> <program> [args...]" >&2
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
mkdir -p "$root"

# shellcheck disable=SC2016  # expanded by the inner bash
exec unshare --mount --propagation private -- bash -c '
set -euo pipefail
root=$1 templates=$2 program=$3 cwd=$4
shift 4
mount -t tmpfs -o mode=0755 upstream-root "$root"
for entry in /* /.[!.]*; do
  [ -e "$entry" ] || [ -L "$entry" ] || continue
  target="$root/${entry#/}"
  if [ -L "$entry" ]; then
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
exec chroot "$root" /bin/sh -c "cd \"\$1\" && shift && exec \"\$@\"" sh "$cwd" "$program" "$@"
' run "$root" "$templates" "$program" "$PWD" "$@"
