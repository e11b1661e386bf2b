"""Managed memory in the shared window, from the backend's side: the
guest names where it has the window mapped (window_attach's guest_base),
the worker maps it at that same address where it can, and managed_alloc
pins a part of it whose GPU address is the guest's pointer.
Speaks the wire protocol directly (tests/lib/pvgpu_wire.py), as a guest
that sends what pvgpu's library never would; the library's side is the
driver program tests/programs/driver/managed.c (test_driver_programs.py).
"""
import ctypes
import os
import sys
import textwrap
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
sys.path.insert(0, os.path.dirname(__file__))
import pvgpu_wire as W  # noqa: E402
from test_window import ARENA, WINDOW, make_window  # noqa: E402

from curesult import (  # noqa: E402
    CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY,
    CUDA_ERROR_NOT_SUPPORTED)
HOST_MEMORY_ALREADY_REGISTERED = 712
ATTACH_GLOBAL, ATTACH_HOST = 1, 2
MiB = 1 << 20
FIRST = (ARENA + 4095) & ~4095      # the arena's first page


def address(m):
    return ctypes.addressof(ctypes.c_char.from_buffer(m))


def attach(s, fd, **fields):
    """window_attach with a file descriptor; (status, outputs)."""
    return s.window_attach(fd, size=WINDOW, **fields)


def session(daemon):
    s = W.Session(daemon.unix, timeout=30)
    s.hello()
    s.ctx = s.open_context()
    return s


def windowed(daemon, same=True):
    """A session whose window the worker maps at our address (same) or not."""
    s = session(daemon)
    fd, m = make_window()
    st, out = attach(s, fd, guest_base=address(m) if same else 0)
    os.close(fd)
    assert st == 0
    assert out["same_address"] == (1 if same else 0)
    return s, m


def used(s):
    st, _, out, _ = s.call("device_usage", device=0)
    assert st == 0, st
    return out["used"]


def test_managed_memory_is_one_memory_for_guest_and_device(sim_daemon):
    """What the guest writes at its pointer the device reads there, and what
    the device writes the guest reads, with no copy in between."""
    s, m = windowed(sim_daemon)
    before = used(s)
    st, _, out, _ = s.call("managed_alloc", offset=FIRST, size=MiB, flags=ATTACH_GLOBAL)
    assert st == 0, st
    assert out["dptr"] == address(m) + FIRST
    managed = out["dptr"]
    assert used(s) == before + MiB          # counted against the VM
    pattern = bytes((i * 13) & 0xFF for i in range(MiB))
    m[FIRST:FIRST + MiB] = pattern
    # The device reads the guest's bytes at the guest's pointer ...
    dev = s.alloc(MiB)
    s.queue("memcpy_dtod_async", dst=dev, src=managed, size=MiB, stream=0)
    st, _, _, data = s.call("memcpy_dtoh", src=dev, size=MiB, stream=0)
    assert st == 0 and data == pattern
    # ... and writes there what the guest then reads from its memory.
    s.queue("memset_async", dst=managed + 4096, value=0xAB, elem_size=1, count=100, stream=0)
    assert s.call("ctx_synchronize")[0] == 0
    assert m[FIRST + 4096:FIRST + 4196] == b"\xab" * 100
    assert m[FIRST:FIRST + 4096] == pattern[:4096]
    # Freed: no longer the session's, and no longer counted.
    assert s.call("window_unregister", offset=FIRST)[0] == 0
    assert used(s) == before + MiB          # the device buffer alone
    s.queue("memset_async", dst=managed, value=1, elem_size=1, count=16, stream=0)
    st, deferred, _, _ = s.call("ctx_synchronize")
    assert CUDA_ERROR_INVALID_VALUE in (st, deferred)


def test_what_a_guest_names_outside_its_window_is_refused(sim_daemon):
    """Offsets, sizes and flags are checked: an error for that call of that
    session, which then goes on working; another session is untouched."""
    s, m = windowed(sim_daemon)
    other, om = windowed(sim_daemon)
    st, _, out, _ = other.call("managed_alloc", offset=FIRST, size=MiB, flags=ATTACH_GLOBAL)
    assert st == 0
    om[FIRST:FIRST + 4] = b"mine"
    for offset, size in ((WINDOW - 4096, 8192), (0, 4096), (4096, 4096),
                         (FIRST + 1, 4096), (FIRST, 0), (1 << 62, 4096),
                         (FIRST, 1 << 63), (WINDOW, 4096)):
        assert s.call("managed_alloc", offset=offset, size=size,
                      flags=ATTACH_GLOBAL)[0] == CUDA_ERROR_INVALID_VALUE, (offset, size)
    for flags in (0, 3, 4, 0xFFFFFFFF):
        assert s.call("managed_alloc", offset=FIRST, size=4096,
                      flags=flags)[0] == CUDA_ERROR_INVALID_VALUE, flags
    assert s.call("managed_alloc", offset=FIRST, size=2 * MiB, flags=ATTACH_HOST)[0] == 0
    assert s.call("managed_alloc", offset=FIRST + MiB, size=4096,
                  flags=ATTACH_GLOBAL)[0] == HOST_MEMORY_ALREADY_REGISTERED
    assert s.call("window_register", offset=FIRST, size=4096)[0] == HOST_MEMORY_ALREADY_REGISTERED
    # The other session's memory and work are as they were.
    assert bytes(om[FIRST:FIRST + 4]) == b"mine"
    dev = other.alloc(4)
    other.queue("memcpy_dtod_async", dst=dev, src=out["dptr"], size=4, stream=0)
    assert other.call("memcpy_dtoh", src=dev, size=4, stream=0)[3] == b"mine"


def test_no_managed_memory_where_the_window_is_not_at_the_guests_address(sim_daemon):
    """No guest_base, or one the worker will not map at (unaligned, in the
    lowest 16 MiB, beyond user space): the window still works for copies,
    and managed memory is refused."""
    s, m = windowed(sim_daemon, same=False)
    assert s.call("managed_alloc", offset=FIRST, size=4096,
                  flags=ATTACH_GLOBAL)[0] == CUDA_ERROR_NOT_SUPPORTED
    for base in (lambda m: address(m) + 8, lambda m: 4096,
                 lambda m: 0xFFFF800000000000, lambda m: (1 << 64) - 4096):
        s2 = session(sim_daemon)
        fd, m2 = make_window()
        st, out = attach(s2, fd, guest_base=base(m2))
        os.close(fd)
        assert st == 0 and out["same_address"] == 0, hex(base(m2))
        assert s2.call("managed_alloc", offset=FIRST, size=4096,
                       flags=ATTACH_GLOBAL)[0] == CUDA_ERROR_NOT_SUPPORTED
        dptr = s2.alloc(16)
        m2[FIRST:FIRST + 16] = b"0123456789abcdef"
        assert s2.call("memcpy_htod_window", dst=dptr, offset=FIRST, size=16, stream=0)[0] == 0
        assert s2.call("memcpy_dtoh", src=dptr, size=16, stream=0)[3] == b"0123456789abcdef"
        s2.close()
    assert "not free here" in sim_daemon.log()


def test_no_managed_memory_without_a_window(sim_daemon):
    s = session(sim_daemon)
    assert s.call("managed_alloc", offset=FIRST, size=4096,
                  flags=ATTACH_GLOBAL)[0] == CUDA_ERROR_NOT_SUPPORTED


def test_managed_memory_counts_against_the_quota(start_pvgpud, tmp_path):
    path = tmp_path / "pvgpud.conf"
    path.write_text(textwrap.dedent(f"""
        [vm alice]
        uid = {os.getuid()}
        memory = 4M
        """))
    daemon = start_pvgpud("sim", extra_args=["--config", str(path)])
    s, _m = windowed(daemon)
    assert s.call("managed_alloc", offset=FIRST, size=8 * MiB,
                  flags=ATTACH_GLOBAL)[0] == CUDA_ERROR_OUT_OF_MEMORY
    assert s.call("managed_alloc", offset=FIRST, size=3 * MiB, flags=ATTACH_GLOBAL)[0] == 0
    st, _, out, _ = s.call("mem_get_info")
    assert st == 0 and (out["free"], out["total"]) == (MiB, 4 * MiB)
    assert s.call("mem_alloc", size=2 * MiB)[0] == CUDA_ERROR_OUT_OF_MEMORY
    assert s.call("window_unregister", offset=FIRST)[0] == 0
    assert s.call("mem_get_info")[2]["free"] == 4 * MiB
    # A context's end gives back what it held too.
    assert s.call("managed_alloc", offset=FIRST, size=3 * MiB, flags=ATTACH_GLOBAL)[0] == 0
    assert s.call("ctx_destroy", ctx=s.ctx)[0] == 0
    deadline = time.monotonic() + 5
    observer = session(daemon)
    while observer.call("mem_get_info")[2]["free"] != 4 * MiB and time.monotonic() < deadline:
        time.sleep(0.02)
    assert observer.call("mem_get_info")[2]["free"] == 4 * MiB
