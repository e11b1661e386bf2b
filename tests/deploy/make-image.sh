#!/usr/bin/env bash
# Build the Debian 12 disk image the deployment tests boot (tests/deploy/).
#
#   tests/deploy/make-image.sh [DIR]      (as root; DIR defaults to build/deploy)
#
# debootstrap makes a minimal bookworm system with systemd, sshd, Python
# (for Ansible), Debian's kernel with its headers and DKMS (for pvgpu-dkms),
# and the shared libraries pvgpud links against, so that installing the
# pvgpu packages needs no network inside the guest.  The result, all under
# DIR (nothing is cached outside the clone):
#   DIR/base.img      raw ext4 root file system (the tests boot a qcow2
#                     overlay on it, so every run starts from a fresh system)
#   DIR/vmlinuz, DIR/initrd.img   the image's own kernel and initramfs
#   DIR/id_ed25519    the key root logs in with over SSH
#   DIR/debs-cache/   debootstrap's download cache
# Runs quickly when DIR/base.img is there and newer than this script (and
# tests/deploy/zipimport_cache.py, which the image holds); a
# second run while one is under way waits for it.
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
dir=$(realpath -m "${1:-$repo_root/build/deploy}")
mirror=${PVGPU_DEBIAN_MIRROR:-http://deb.debian.org/debian}
log() { echo "make-image: $*" >&2; }

# One build at a time: `make test` starts one beside its own build, and the
# suite's call then waits here for it and finds the image made.
mkdir -p "$dir"
exec 9>"$dir/.make-image.lock"
flock 9

zipcache=$repo_root/tests/deploy/zipimport_cache.py
if [ -f "$dir/base.img" ] && [ "$dir/base.img" -nt "${BASH_SOURCE[0]}" ] &&
   [ "$dir/base.img" -nt "$zipcache" ] &&
   [ -f "$dir/vmlinuz" ] && [ -f "$dir/initrd.img" ] && [ -f "$dir/id_ed25519" ]; then
    echo "$dir"; exit 0
fi
[ "$(id -u)" = 0 ] || { log "needs root (debootstrap, chroot)"; exit 1; }
for c in debootstrap mke2fs ssh-keygen; do
    command -v "$c" >/dev/null || { log "$c not found (scripts/install-deps.sh)"; exit 1; }
done

# What the guest needs beyond minbase: boot (systemd, udev, kernel), login
# (sshd, networkd via systemd), Ansible (python3, python3-apt, sudo), the
# pvgpu packages' dependencies (dkms and the headers, libinih1,
# libmicrohttpd12, libcurl4).
include=systemd,systemd-sysv,udev,dbus,kmod,iproute2,openssh-server,sudo
include+=,python3,python3-apt,linux-image-amd64,linux-headers-amd64,dkms
include+=,libinih1,libmicrohttpd12,libcurl4,ca-certificates,procps

rootfs=$dir/rootfs
mkdir -p "$dir/debs-cache"
rm -rf "$rootfs" "$dir/base.img.tmp"
log "debootstrap bookworm into $rootfs (a few minutes)"
debootstrap --variant=minbase --include="$include" \
    --cache-dir="$dir/debs-cache" bookworm "$rootfs" "$mirror" >"$dir/debootstrap.log" 2>&1 || {
    tail -n 30 "$dir/debootstrap.log" >&2; log "debootstrap failed"; exit 1; }

# Login: root with the test key only.
[ -f "$dir/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C pvgpu-deploy-test -f "$dir/id_ed25519"
install -d -m 0700 "$rootfs/root/.ssh"
install -m 0600 "$dir/id_ed25519.pub" "$rootfs/root/.ssh/authorized_keys"
echo pvgpu-deploy > "$rootfs/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 pvgpu-deploy\n' > "$rootfs/etc/hosts"
echo '/dev/vda / ext4 defaults,errors=remount-ro 0 1' > "$rootfs/etc/fstab"
# The network: QEMU's user-mode NIC, by DHCP.
cat > "$rootfs/etc/systemd/network/10-qemu.network" <<NET
[Match]
Name=en* eth*
[Network]
DHCP=yes
NET
chroot "$rootfs" systemctl enable systemd-networkd.service ssh.service >/dev/null 2>&1
# Nothing may take the dpkg lock behind Ansible's back, and a slow TCG boot
# must not wait for the network to be "online".
chroot "$rootfs" systemctl mask apt-daily.timer apt-daily-upgrade.timer \
    systemd-networkd-wait-online.service e2scrub_reap.service >/dev/null 2>&1
echo 'deb http://deb.debian.org/debian bookworm main' > "$rootfs/etc/apt/sources.list"
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*_Packages
# The VM is thrown away after the run (-snapshot): dpkg need not fsync
# every file it unpacks, which costs seconds per package under TCG.
echo force-unsafe-io > "$rootfs/etc/dpkg/dpkg.cfg.d/pvgpu-test-unsafe-io"

# Ansible's modules reach the guest as zips whose Python source is
# compiled again at every task, most of each task's seconds under TCG:
# the image's Python keeps that compiled code (tests/deploy/zipimport_cache.py
# says how; zip imports only).
pydist=$rootfs/usr/lib/python3/dist-packages
install -m 0644 "$zipcache" "$pydist/zipimport_cache.py"
echo 'import zipimport_cache' > "$pydist/zz-pvgpu-test-zipimport-cache.pth"
chroot "$rootfs" python3 -m py_compile /usr/lib/python3/dist-packages/zipimport_cache.py

# DKMS signs the modules it builds, with a key it makes at its first build
# (an RSA key: seconds of TCG); made here instead, by DKMS's own command.
install -d -m 0755 "$rootfs/var/lib/dkms"
chroot "$rootfs" openssl req -new -x509 -nodes -days 36500 \
    -subj "/CN=DKMS module signing key" -newkey rsa:2048 \
    -keyout /var/lib/dkms/mok.key -outform DER -out /var/lib/dkms/mok.pub >/dev/null 2>&1

kernel=$(ls "$rootfs"/boot/vmlinuz-* | sort -V | tail -n 1)
initrd=$(ls "$rootfs"/boot/initrd.img-* | sort -V | tail -n 1)
cp "$kernel" "$dir/vmlinuz"
cp "$initrd" "$dir/initrd.img"

# DKMS runs depmod -a, which reads every module of the kernel, at each
# install and removal of pvgpu.ko (four times a run); under TCG that took up to
# a minute each with Debian's ~4000 modules.  Drop the driver families
# this VM (virtio disk and NIC, no USB, sound or real hardware) never
# loads, about half of them; the initramfs above was made before and keeps
# what booting needs.  net/wireless stays: udev loads cfg80211 at boot.
kmods=$(dirname "$(ls -d "$rootfs"/lib/modules/*/kernel | sort -V | tail -n 1)")/kernel
for d in drivers/media drivers/iio sound drivers/usb drivers/hid drivers/hwmon \
         drivers/comedi drivers/mtd drivers/staging drivers/net/wireless \
         drivers/net/ethernet drivers/net/can drivers/net/usb drivers/infiniband \
         drivers/bluetooth net/bluetooth net/mac80211 drivers/isdn drivers/nfc \
         net/nfc drivers/platform drivers/watchdog drivers/gpu/drm/amd \
         drivers/gpu/drm/nouveau drivers/gpu/drm/i915 drivers/gpu/drm/radeon; do
    rm -rf "${kmods:?}/$d"
done
chroot "$rootfs" depmod -a "$(basename "$(dirname "$kmods")")"

log "making the ext4 image"
mke2fs -q -t ext4 -L pvgpu-root -d "$rootfs" "$dir/base.img.tmp" 4G
mv "$dir/base.img.tmp" "$dir/base.img"
rm -rf "$rootfs"
log "ready: $dir/base.img ($(basename "$kernel"))"
echo "$dir"
