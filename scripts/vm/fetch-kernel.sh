#!/usr/bin/env bash
# Fetch Debian's kernel image for the test guest, matching the installed
# linux-headers-*-amd64 (pvgpu.ko is built against those headers, and a
# module loads only into the kernel it was built for).
#
#   scripts/vm/fetch-kernel.sh [--print] [KVER]
#
# KVER defaults to the newest /usr/src/linux-headers-*-amd64 here.  The
# package is downloaded with `apt-get download` (no root needed, nothing is
# installed) and unpacked into .deps/vm/KVER/: boot/vmlinuz-KVER and
# lib/modules/KVER/.  Runs quickly when that is already there.  On success
# the last line on stdout is the unpacked directory.  --print only prints
# the directory that would be used (exit 1 if it is not unpacked yet).
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
log() { echo "fetch-kernel: $*" >&2; }

print_only=0
if [ "${1:-}" = "--print" ]; then
    print_only=1
    shift
fi

kver=${1:-}
if [ -z "$kver" ]; then
    kver=$("$repo_root/scripts/vm/kernel-version.sh") || {
        log "no /usr/src/linux-headers-*-amd64: install linux-headers-amd64"
        exit 1
    }
fi

dest="$repo_root/.deps/vm/$kver"
if [ -f "$dest/boot/vmlinuz-$kver" ] && [ -f "$dest/lib/modules/$kver/modules.dep" ]; then
    echo "$dest"
    exit 0
fi
if [ "$print_only" = 1 ]; then
    log "kernel $kver not fetched yet (run scripts/vm/fetch-kernel.sh)"
    exit 1
fi

command -v apt-get >/dev/null 2>&1 || { log "apt-get not found"; exit 1; }
command -v dpkg-deb >/dev/null 2>&1 || { log "dpkg-deb not found"; exit 1; }
mkdir -p "$repo_root/.deps"

# One fetch at a time: make test starts the VM suites (deploy, Soft-RoCE,
# Xen) side by side, and two unpacking into one folder break each other's
# depmod.  The one that waited finds the kernel there.
exec 9>"$repo_root/.deps/vm-fetch.lock"
flock 9
if [ -f "$dest/boot/vmlinuz-$kver" ] && [ -f "$dest/lib/modules/$kver/modules.dep" ]; then
    echo "$dest"
    exit 0
fi

pkg="linux-image-$kver"
tmp=$(mktemp -d "$repo_root/.deps/vm-fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

log "downloading $pkg"
# apt-get download writes into the current directory; as root it drops
# privileges to _apt, which must be able to write there.
chmod 0777 "$tmp"
if ! (cd "$tmp" && apt-get download -q "$pkg" >&2); then
    # The signed image is a separate source package; the unsigned one holds
    # the same kernel and modules.
    log "$pkg not downloadable, trying $pkg-unsigned"
    (cd "$tmp" && apt-get download -q "$pkg-unsigned" >&2) || {
        log "cannot download $pkg (is it in the apt lists? try apt-get update)"
        exit 1
    }
fi

mkdir -p "$tmp/root"
dpkg-deb -x "$tmp"/linux-image-*.deb "$tmp/root"
if [ ! -f "$tmp/root/boot/vmlinuz-$kver" ]; then
    log "the package has no boot/vmlinuz-$kver"
    exit 1
fi

mkdir -p "$dest"
rm -rf "$dest/boot" "$dest/lib"
mv "$tmp/root/boot" "$dest/boot"
mv "$tmp/root/lib" "$dest/lib"
# The package ships no modules.dep (postinst runs depmod); make one.
if [ ! -f "$dest/lib/modules/$kver/modules.dep" ]; then
    depmod=$(command -v depmod || echo /sbin/depmod)
    [ -x "$depmod" ] || { log "depmod not found (apt-get install kmod)"; exit 1; }
    "$depmod" -b "$dest" "$kver"
fi
log "kernel $kver ready in $dest"
echo "$dest"
