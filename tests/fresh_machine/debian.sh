#!/usr/bin/env bash
# The check of issue "a fresh machine": a Debian bookworm with only git and make (debootstrap's minbase), a clone
# of this repository and nothing beside it, then `CI=true bash .ci/run` inside a chroot. Not part of CI (it needs
# root, ~1 GB of packages and 30-60 minutes); run it by hand after changing .ci/run or the dependencies.
#
#   sudo bash tests/fresh_machine/debian.sh DIR [REPO [BRANCH]]
#
# DIR: where the Debian tree goes (kept for a re-run: an existing tree is reused, the clone is made afresh).
# REPO: what to clone (default: this checkout); BRANCH: its branch (default: the checked-out one).
# The machine's added CA certificates (/usr/local/share/ca-certificates) and proxy variables are carried in, since
# package registries may only be reachable through them. Prints the run's output and ends with its exit code.
set -euo pipefail

dir=${1:?usage: debian.sh DIR [REPO [BRANCH]]}
here=$(cd "$(dirname "$0")/../.." && pwd)
repo=${2:-$here}
branch=${3:-$(git -C "$repo" rev-parse --abbrev-ref HEAD)}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}

if [ "$(id -u)" != 0 ]; then echo "debian.sh: needs root (debootstrap, chroot, mount)" >&2; exit 2; fi
command -v debootstrap >/dev/null || { echo "debian.sh: needs debootstrap (apt-get install debootstrap)" >&2; exit 2; }

if [ ! -x "$dir/usr/bin/apt-get" ] || [ ! -e "$dir/.debootstrap-done" ]; then
  debootstrap --variant=minbase --include=git,make,ca-certificates bookworm "$dir" "$mirror"
  touch "$dir/.debootstrap-done"
fi

# A chroot has no init: packages must not try to start their services at install time (.ci/run starts
# PostgreSQL itself), as on any Debian chroot or container image.
printf '#!/bin/sh\nexit 101\n' > "$dir/usr/sbin/policy-rc.d"
chmod +x "$dir/usr/sbin/policy-rc.d"

# Carry in name resolution, added CA certificates and proxy variables.
cp /etc/resolv.conf "$dir/etc/resolv.conf"
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
  mkdir -p "$dir/usr/local/share/ca-certificates"
  cp /usr/local/share/ca-certificates/*.crt "$dir/usr/local/share/ca-certificates/"
  chroot "$dir" update-ca-certificates >/dev/null
fi
proxy_env=()
for v in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
  if [ -n "${!v:-}" ]; then proxy_env+=("$v=${!v}"); fi
done
if [ -n "${http_proxy:-${HTTP_PROXY:-}}" ]; then
  echo "Acquire::http::Proxy \"${http_proxy:-$HTTP_PROXY}\";" > "$dir/etc/apt/apt.conf.d/90proxy"
fi

mounted=()
cleanup() { for ((i=${#mounted[@]}-1; i>=0; i--)); do umount -l "${mounted[$i]}" || true; done; }
trap cleanup EXIT
for m in proc sys dev dev/pts; do
  mkdir -p "$dir/$m"
  case $m in
    proc) mount -t proc proc "$dir/proc" ;;
    sys) mount -t sysfs sys "$dir/sys" ;;
    dev) mount --bind /dev "$dir/dev" ;;
    dev/pts) mount --bind /dev/pts "$dir/dev/pts" ;;
  esac
  mounted+=("$dir/$m")
done
mkdir -p "$dir/dev/shm"

# The clone: from the repository alone (a local path is cloned into the tree first; nothing else is copied).
rm -rf "$dir/root/tileplan" "$dir/root/source.git"
if [ -d "$repo" ]; then
  git clone -q --bare "$repo" "$dir/root/source.git"
  src=/root/source.git
else
  src=$repo
fi
chroot "$dir" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  LANG=C.UTF-8 "${proxy_env[@]}" git clone -q --branch "$branch" "$src" /root/tileplan

# The chroot shares this machine's network: its PostgreSQL takes a port of its own, so the tests cannot reach a
# server running outside.
pg_port=${TILEPLAN_CI_PG_PORT:-55432}

set +e
chroot "$dir" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  LANG=C.UTF-8 CI=true TILEPLAN_CI_PG_PORT="$pg_port" "${proxy_env[@]}" bash -c 'cd /root/tileplan && bash .ci/run'
code=$?
echo "debian.sh: CI=true bash .ci/run exited $code"
# A PostgreSQL started by .ci/run inside the tree is stopped so the mounts can go.
chroot "$dir" bash -c 'command -v pg_ctlcluster >/dev/null && for v in /etc/postgresql/*; do pg_ctlcluster "${v##*/}" main stop; done' >/dev/null 2>&1
exit $code
