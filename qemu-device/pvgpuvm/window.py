"""The per-VM window file: /dev/shm/pvgpu-VM, which QEMU maps as the BAR2
of an ivshmem-plain device and pvgpud maps for DMA.

It must begin with the header of common/window.h before the guest ever
sees it: pvgpu.ko binds only to ivshmem devices whose BAR2 starts with
that header, and the worker checks the layout fields once at attach time.
QEMU would happily create a zero-filled file itself, so qemu-device creates
it first, and refuses a file that is already there but is not the window it
would have made (a stale file of another size, or one whose header a guest
or another tool overwrote): mapping that would hand the guest a window that
pvgpud later rejects, or one that belongs to someone else.
"""

import grp
import os
import stat
import struct

from .errors import Failure
from .spec import WindowLayout

# ---- the layout of common/window.h -------------------------------------------
#
# The one Python description of the window header: Python that reads or
# writes a window header takes it from here (scripts/vm/pvgpuvm.py and the
# tests too).  tests/unit/test_window_layout.py compiles common/window.h and
# checks every constant, field, offset and size below against it, so that a
# change made on one side only fails there.

MAGIC = 0x57475650     # PVGPU_WINDOW_MAGIC: "PVGW" as bytes
LAYOUT = 1             # PVGPU_WINDOW_LAYOUT
HDR_SIZE = 4096        # PVGPU_WINDOW_HDR_SIZE: one page, before the data

# Each struct as (field, struct format) in order: little-endian, no padding
# (the C structs have none).

# struct pvgpu_window_counter: one ring counter alone on its cache line,
# since the two sides write different ones.
COUNTER_FIELDS = (
    ("value", "Q"),
    ("pad", "56x"),
)

# The layout fields of struct pvgpu_window_header, which whoever creates a
# window writes.
LAYOUT_FIELDS = (
    ("magic", "I"),
    ("layout", "I"),
    ("size", "Q"),
    ("window_id", "Q"),
    ("staging_offset", "Q"),
    ("slot_size", "I"),
    ("nslots", "I"),
    ("reserved", "24x"),
)

# The ring counters that follow them, starting at zero: h2d_filled and
# d2h_taken written by the guest, h2d_done and d2h_ready by the worker.
COUNTERS = ("h2d_filled", "h2d_done", "d2h_ready", "d2h_taken")

HEADER_FIELDS = LAYOUT_FIELDS + tuple(
    (name, "".join(fmt for _, fmt in COUNTER_FIELDS)) for name in COUNTERS)


def field_offsets(fields):
    """{field: (offset, size)} for one of the field lists above."""
    out, at = {}, 0
    for name, fmt in fields:
        size = struct.calcsize("<" + fmt)
        out[name] = (at, size)
        at += size
    return out


# Where each field of the header is: a ring counter's value is at its offset.
OFFSETS = {name: off for name, (off, _) in field_offsets(HEADER_FIELDS).items()}

_HDR = struct.Struct("<" + "".join(fmt for _, fmt in LAYOUT_FIELDS))


def pack_header(layout, magic=MAGIC, version=LAYOUT):
    """The layout fields of a window's header, the first _HDR.size bytes
    (the counters and the rest of the header page are zero).  magic and
    version other than ours are for tests that need a wrong header."""
    return _HDR.pack(magic, version, layout.size, layout.window_id,
                     layout.staging_offset, layout.slot_size, layout.nslots)


def unpack_header(data):
    """(magic, layout, WindowLayout) from the first bytes of a window."""
    magic, version, size, window_id, staging, slot, nslots = _HDR.unpack_from(data)
    return magic, version, WindowLayout(size, window_id, staging, slot, nslots)


def _header_problem(data, expected):
    """Why the header in `data` is not the one we would write, or None."""
    if len(data) < _HDR.size:
        return "it is shorter than a header"
    magic, version, got = unpack_header(data)
    if magic != MAGIC:
        return f"its magic is {magic:#010x}, not {MAGIC:#010x} (not a pvgpu window)"
    if version != LAYOUT:
        return f"its layout is {version}, not {LAYOUT}"
    for field in ("size", "window_id", "staging_offset", "slot_size", "nslots"):
        have, want = getattr(got, field), getattr(expected, field)
        if have != want:
            return f"its header says {field} {have:#x}, expected {want:#x}"
    return None


def check_window(path, expected):
    """Raise Failure unless `path` is a regular file of exactly the expected
    size whose header matches `expected`; return its os.stat_result."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise Failure(f"window file {path} does not exist")
    except OSError as e:
        raise Failure(f"cannot open window file {path}: {e.strerror}"
                      + (" (a symbolic link?)" if e.errno == 40 else ""))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Failure(f"window file {path} is not a regular file: refused")
        if st.st_size != expected.size:
            raise Failure(f"window file {path} is {st.st_size} bytes but the window is "
                          f"{expected.size}: size disagrees, refused (remove it or attach "
                          "with the size it has)")
        problem = _header_problem(os.pread(fd, _HDR.size, 0), expected)
        if problem:
            raise Failure(f"window file {path} exists but {problem}: refused "
                          "(remove it if it is stale)")
        return st
    finally:
        os.close(fd)


# The group pvgpud runs in (debian/pvgpu-host.postinst makes it): where it
# exists, a window belongs to QEMU's user and this group, mode 0660, so
# that pvgpud (user pvgpu) maps what QEMU maps and nobody else does.
DAEMON_GROUP = "pvgpu"


def daemon_group():
    """The gid of DAEMON_GROUP, or None where there is no such group."""
    try:
        return grp.getgrnam(DAEMON_GROUP).gr_gid
    except KeyError:
        return None


def ensure_window(path, layout, uid=None, gid=None, mode=0o600):
    """Create the window file with its header, or accept an existing one
    that is exactly what we would create.  Returns True if it was created.

    The file is built under a temporary name and linked into place, so
    nobody (QEMU starting early, pvgpud) ever sees a window without its
    header, and a file that appears meanwhile is never overwritten.
    `uid`/`gid` are who QEMU runs as (None: leave as the caller), the
    group pvgpud's where that group exists (mode 0660 then); an
    existing file owned by anyone other than root or that user is refused,
    since /dev/shm is writable by everyone.
    """
    group = daemon_group()
    if group is not None:
        gid, mode = group, 0o660
    want_uid = os.geteuid() if uid is None else uid
    if os.path.lexists(path):
        st = check_window(path, layout)
        if st.st_uid not in (0, want_uid):
            raise Failure(f"window file {path} is owned by uid {st.st_uid}, not by "
                          f"uid {want_uid} or root: refused")
        _set_owner(path, uid, gid, mode)
        return False

    directory, base = os.path.split(path)
    tmp = os.path.join(directory, f".{base}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.ftruncate(fd, layout.size)
        os.pwrite(fd, pack_header(layout), 0)
        if uid is not None or gid is not None:
            os.fchown(fd, -1 if uid is None else uid, -1 if gid is None else gid)
        os.fchmod(fd, mode)
        os.close(fd)
        fd = -1
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise Failure(f"window file {path} appeared while it was being created: refused")
    finally:
        if fd >= 0:
            os.close(fd)
        os.unlink(tmp)
    return True


def _set_owner(path, uid, gid, mode):
    """Give an accepted existing window the owner and mode asked for."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if uid is not None or gid is not None:
            os.fchown(fd, -1 if uid is None else uid, -1 if gid is None else gid)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def remove_window(path, layout=None):
    """Remove a VM's window file.  With `layout`, only if it is still a
    window of that layout: a file someone else put there is left alone."""
    if not os.path.lexists(path):
        return False
    if layout is not None:
        check_window(path, layout)
    os.unlink(path)
    return True
