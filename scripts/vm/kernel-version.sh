#!/usr/bin/env bash
# Print the version of the newest installed Debian amd64 kernel headers
# (e.g. 6.1.0-56-amd64): the kernel pvgpu.ko is built for and the guest
# kernel the VM tests boot.  Exit 1 if there are none.
set -euo pipefail
# A machine without the headers (the GPU host) names the kernel it carries.
if [ -n "${PVGPU_GUEST_KVER:-}" ]; then
    echo "$PVGPU_GUEST_KVER"
    exit 0
fi
ver=$(ls -d /usr/src/linux-headers-*-amd64 2>/dev/null \
      | sed 's|.*/linux-headers-||' | sort -V | tail -n 1)
[ -n "$ver" ] || exit 1
echo "$ver"
