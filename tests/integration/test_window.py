"""Shared windows (shm://) from the backend's side: a guest hands over a
memfd, and every offset, header field and ring counter it controls is
checked.  Speaks the wire protocol directly (tests/lib/pvgpu_wire.py)."""
import ctypes
import mmap
import os
import struct
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "qemu-device"))
import pvgpu_wire as W  # noqa: E402
from pvgpuvm import window  # noqa: E402  (the header, common/window.h)
from pvgpuvm.spec import WindowLayout  # noqa: E402

from curesult import CUDA_ERROR_INVALID_VALUE  # noqa: E402
WINDOW = 64 << 20
SLOT, NSLOTS = 1 << 20, 4
STAGING = window.HDR_SIZE
ARENA = STAGING + SLOT * NSLOTS
H2D_FILLED = window.OFFSETS["h2d_filled"]
H2D_DONE = window.OFFSETS["h2d_done"]


def make_window(size=WINDOW, magic=window.MAGIC, layout=window.LAYOUT,
                hdr_size=None, staging=STAGING, slot=SLOT, nslots=NSLOTS):
    fd = W.window_memfd("test-window", size)
    m = mmap.mmap(fd, size)
    hdr = window.pack_header(WindowLayout(size=hdr_size or size, window_id=0,
                                          staging_offset=staging, slot_size=slot,
                                          nslots=nslots), magic, layout)
    m[:len(hdr)] = hdr
    return fd, m


def attach(s, fd, size=WINDOW):
    return s.window_attach(fd, size=size)[0]


def session(daemon):
    s = W.Session(daemon.unix)
    s.hello()
    s.open_context()
    return s


def test_zero_copy_round_trip_through_the_window(sim_daemon):
    s = session(sim_daemon)
    fd, m = make_window()
    assert attach(s, fd) == 0
    st, _, out, _ = s.call("mem_alloc", size=1 << 20)
    dptr = out["dptr"]
    pattern = bytes((i * 7) & 0xFF for i in range(1 << 20))
    m[ARENA:ARENA + len(pattern)] = pattern
    assert s.call("memcpy_htod_window", dst=dptr, offset=ARENA, size=len(pattern), stream=0)[0] == 0
    m[ARENA:ARENA + len(pattern)] = bytes(len(pattern))
    assert s.call("memcpy_dtoh_window", src=dptr, offset=ARENA + 8192, size=len(pattern), stream=0)[0] == 0
    assert m[ARENA + 8192:ARENA + 8192 + len(pattern)] == pattern


def test_offsets_outside_the_window_are_refused(sim_daemon):
    s = session(sim_daemon)
    fd, m = make_window()
    assert attach(s, fd) == 0
    st, _, out, _ = s.call("mem_alloc", size=1 << 20)
    dptr = out["dptr"]
    for offset, size in ((WINDOW - 100, 200), (0, 100), (1 << 62, 16), (ARENA, 1 << 63)):
        assert s.call("memcpy_htod_window", dst=dptr, offset=offset, size=size,
                      stream=0)[0] == CUDA_ERROR_INVALID_VALUE, (offset, size)
        assert s.call("memcpy_dtoh_window", src=dptr, offset=offset, size=size,
                      stream=0)[0] == CUDA_ERROR_INVALID_VALUE, (offset, size)
    # And the session still works.
    assert s.call("memcpy_htod_window", dst=dptr, offset=ARENA, size=16, stream=0)[0] == 0


def test_bad_window_headers_are_refused(sim_daemon):
    cases = [dict(magic=0x1234), dict(layout=9), dict(hdr_size=WINDOW * 2),
             dict(nslots=1), dict(slot=100), dict(staging=0),
             dict(staging=WINDOW - SLOT)]
    for bad in cases:
        s = session(sim_daemon)
        fd, _m = make_window(**bad)
        assert attach(s, fd) == CUDA_ERROR_INVALID_VALUE, bad
        os.close(fd)
        s.close()
    # A window larger than its file, and an attach without any fd.
    s = session(sim_daemon)
    fd, _m = make_window()
    assert attach(s, fd, size=WINDOW * 4) == CUDA_ERROR_INVALID_VALUE
    assert s.call("window_attach", size=WINDOW)[0] == CUDA_ERROR_INVALID_VALUE
    assert "not a valid pvgpu layout" in sim_daemon.log()


def test_staged_copy_through_the_ring(sim_daemon):
    """Play the guest's half of a staged copy: fill slots, watch h2d_done."""
    s = session(sim_daemon)
    fd, m = make_window()
    assert attach(s, fd) == 0
    size = SLOT * 10 + 123
    st, _, out, _ = s.call("mem_alloc", size=size)
    dptr = out["dptr"]
    data = os.urandom(size)

    def u64(off):
        return struct.unpack_from("<Q", m, off)[0]

    # One 8-byte store, as a guest must publish a counter: struct.pack_into
    # zeroes its destination first, and the backend (rightly) fails a copy
    # whose counter it sees going backwards.
    filled = ctypes.c_uint64.from_buffer(m, H2D_FILLED)

    msg_id = s.next_id
    s.next_id += 1
    s.send(W.message("memcpy_htod_staged", msg_id, dst=dptr, size=size, stream=0))
    blocks = (size + SLOT - 1) // SLOT
    deadline = time.monotonic() + 30
    for k in range(blocks):
        while k >= NSLOTS and u64(H2D_DONE) < k - NSLOTS + 1:
            assert time.monotonic() < deadline, sim_daemon.log()[-2000:]
        chunk = data[k * SLOT:(k + 1) * SLOT]
        slot = STAGING + (k % NSLOTS) * SLOT
        m[slot:slot + len(chunk)] = chunk
        filled.value = k + 1
    del filled  # the mmap cannot close while a ctypes view holds it
    _op, _fl, rid, payload = s.read_message()
    status, _deferred, ring_seq = struct.unpack_from("<iiQ", payload)
    assert (rid, status, ring_seq) == (msg_id, 0, blocks)
    st, _, _, back = s.call("memcpy_dtoh", src=dptr, size=size, stream=0)
    assert st == 0 and back == data


def test_impossible_ring_counter_fails_only_that_copy(sim_daemon):
    s = session(sim_daemon)
    fd, m = make_window()
    assert attach(s, fd) == 0
    st, _, out, _ = s.call("mem_alloc", size=SLOT * 2)
    struct.pack_into("<Q", m, H2D_FILLED, 1 << 40)   # claims far more than sent
    st, _, outs, _ = s.call("memcpy_htod_staged", dst=out["dptr"], size=SLOT * 2, stream=0)
    assert st == CUDA_ERROR_INVALID_VALUE
    assert "impossible" in sim_daemon.log()
    # The session goes on over the socket.
    assert s.call("memcpy_htod", data_in=b"x" * 64, dst=out["dptr"], size=64, stream=0)[0] == 0


def test_pinning_parts_of_the_window(sim_daemon):
    s = session(sim_daemon)
    fd, _m = make_window()
    assert attach(s, fd) == 0
    arena = (ARENA + 4095) & ~4095
    assert s.call("window_register", offset=arena, size=1 << 20)[0] == 0
    # Overlapping an existing pin, inside the staging slots, unaligned, past the end.
    assert s.call("window_register", offset=arena + 4096, size=4096)[0] == 712  # ALREADY_REGISTERED
    for offset, size in ((STAGING, 4096), (arena + 1, 4096), (WINDOW - 4096, 8192), (arena, 0)):
        assert s.call("window_register", offset=offset, size=size)[0] == CUDA_ERROR_INVALID_VALUE
    assert s.call("window_unregister", offset=arena)[0] == 0
    assert s.call("window_unregister", offset=arena)[0] == 713  # NOT_REGISTERED


# --- a window of huge pages (PVGPU_WINDOW_HUGEPAGES) ------------------------

def shm_env(daemon, **kw):
    env = daemon.env("shm://" + daemon.unix[len("unix://"):])
    env.update(PVGPU_DEBUG="1", **kw)
    return env


def test_window_of_huge_pages(programs, sim_daemon, reserved_hugepages):
    # reserved_hugepages (tests/conftest.py): 64 pages, 128 MiB.
    env = shm_env(sim_daemon, PVGPU_WINDOW_HUGEPAGES="1", PVGPU_WINDOW_SIZE="128M")
    res = programs.run("memory", env)
    programs.assert_passed(res, sim_daemon)
    assert "window: 128 MiB of huge pages" in res.stderr, res.stderr[-2000:]


def test_window_falls_back_to_ordinary_pages(programs, sim_daemon):
    # More than the host has free (none, on most machines): the window is
    # made of ordinary pages and the program does not notice.
    size = (programs.free_hugepages() + 64) * 2
    env = shm_env(sim_daemon, PVGPU_WINDOW_HUGEPAGES="1", PVGPU_WINDOW_SIZE=f"{size}M")
    res = programs.run("memory", env)
    programs.assert_passed(res, sim_daemon)
    assert f"{size} MiB of huge pages not free" in res.stderr, res.stderr[-2000:]
    assert "shared window" in res.stderr


def test_window_of_ordinary_pages_by_default(programs, sim_daemon):
    res = programs.run("memory", shm_env(sim_daemon, PVGPU_WINDOW_SIZE="128M"))
    programs.assert_passed(res, sim_daemon)
    assert "huge pages" not in res.stderr
