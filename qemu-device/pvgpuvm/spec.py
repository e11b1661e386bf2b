"""What a vGPU attached to one VM consists of, and the small rules every
other module shares: which VM names are allowed, how sizes are written,
where the files of a VM live.

Everything here is pure (no files touched), so the generators and the tests
can use it without root, libvirt or QEMU.
"""

import os
import re
from dataclasses import dataclass
from typing import Optional

from .errors import UsageError

MIB = 1 << 20

# libvirt allows nearly anything in a domain name, but the name ends up in
# a file name under /dev/shm, in a <shmem name=...> (which libvirt turns into
# that path) and in QEMU option strings, where ',' and '=' have meaning.
# Refusing everything else is simpler than quoting it in three syntaxes.
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")

DEFAULT_WINDOW_SIZE = 256 * MIB
MIN_WINDOW_SIZE = MIB
DEFAULT_RUN_DIR = "/run/pvgpu"
SHM_DIR = "/dev/shm"  # libvirt's <shmem> always uses this directory
DEFAULT_PORT = 7100   # pvgpud's vsock port (DESIGN §6: vsock://2:7100)

VSOCK_KERNEL = "kernel"        # /dev/vhost-vsock, libvirt's <vsock>
VSOCK_VHOST_USER = "vhost-user"  # vhost-device-vsock + vhost-user-vsock-pci

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text, what="size"):
    """Parse '256M', '8G', '1048576' or '512KiB' into bytes (binary units,
    as QEMU and libvirt read them)."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMGTB]?)(?:I?B)?\s*", str(text), re.IGNORECASE)
    if not m:
        raise UsageError(f"bad {what} {text!r}: expected a number with an optional K, M, G or T suffix")
    return int(m.group(1)) * _UNITS[m.group(2).upper()]


def qemu_size(nbytes):
    """A size as QEMU options write it, in the largest exact unit."""
    for suffix, unit in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if nbytes % unit == 0:
            return f"{nbytes // unit}{suffix}"
    return str(nbytes)


def check_vm_name(name):
    """Refuse VM names that would need quoting in a path or QEMU option."""
    if not _NAME_RE.match(name or ""):
        raise UsageError(
            f"VM name {name!r} is not supported: use letters, digits, '.', '_' and '-' "
            "(at most 63, starting with a letter or digit)")
    return name


def check_window_size(size):
    """A window must be a power of two of at least 1 MiB: ivshmem's BAR2 is a
    power of two, and libvirt refuses anything else in <shmem><size>."""
    if size < MIN_WINDOW_SIZE or size & (size - 1):
        raise UsageError(f"window size {size} bytes is not a power of two of at least 1 MiB")
    return size


def window_name(vm):
    """The <shmem name=...> of a VM's window; libvirt maps it to /dev/shm/NAME."""
    return f"pvgpu-{vm}"


@dataclass
class WindowLayout:
    """The fields of common/window.h that qemu-device chooses."""
    size: int
    window_id: int
    staging_offset: int
    slot_size: int
    nslots: int


def default_layout(size, window_id):
    """Staging ring right after the header page: 8 slots of 4 MiB, smaller
    slots in small windows so the ring never takes more than half of it
    (the rest is for the guest's pinned allocations).  Windows are powers
    of two of at least 1 MiB, so size/16 is at least the 64 KiB slot the
    worker accepts (host-backend/session/window.c)."""
    # Here, not at the top: window.py imports WindowLayout from this module.
    from .window import HDR_SIZE

    slot = min(4 * MIB, size // 16)
    return WindowLayout(size=size, window_id=window_id, staging_offset=HDR_SIZE,
                        slot_size=slot, nslots=8)


@dataclass
class VsockSpec:
    """How the VM's virtio-vsock is wired."""
    kind: str                          # VSOCK_KERNEL or VSOCK_VHOST_USER
    cid: int
    socket: Optional[str] = None       # vhost-user: QEMU <-> vhost-device-vsock
    uds_path: Optional[str] = None     # vhost-user: host side; guest port P -> uds_path_P
    port: int = DEFAULT_PORT


@dataclass
class VgpuSpec:
    """Everything attached to one VM."""
    vm: str
    window_path: str
    layout: WindowLayout
    vsock: VsockSpec
    gpu: int = 0
    memory: Optional[int] = None       # vGPU memory quota in bytes (DESIGN §5)
    qemu_uid: Optional[int] = None     # who QEMU runs as: owns the window and
    qemu_gid: Optional[int] = None     # may connect to the vhost-user socket

    @property
    def window_name(self):
        return window_name(self.vm)


def vsock_dir(run_dir, vm):
    """Where the vhost-user sockets of one VM live."""
    return os.path.join(run_dir, "vsock", vm)


def vhost_user_paths(run_dir, vm):
    """(socket, uds_path) for vhost-device-vsock of one VM."""
    d = vsock_dir(run_dir, vm)
    return os.path.join(d, "vhost.sock"), os.path.join(d, "vsock.sock")


def default_vsock_kind():
    """Kernel vhost-vsock where the host has it, vhost-user otherwise
    (DESIGN §7: the development machines have no /dev/vhost-vsock)."""
    return VSOCK_KERNEL if os.path.exists("/dev/vhost-vsock") else VSOCK_VHOST_USER
