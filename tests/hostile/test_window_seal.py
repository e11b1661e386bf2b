"""A guest cannot kill its worker by shrinking its shared window.

Over shm:// the guest hands its worker a memfd and keeps it; the worker
maps the whole window for the whole session.  Were the guest to truncate
the file, the worker's next touch of the lost pages would kill it with
SIGBUS.  So pvgpud takes a window only when its memfd is sealed against
shrinking (F_SEAL_SHRINK) and holds what the guest names, and refuses any
other with a line that says why; the guest library seals the windows it
makes.  A worker that dies of SIGBUS all the same gets a session-end line
that names the likely cause.  Raw protocol calls, as a guest makes them.
"""
import mmap
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "qemu-device"))
import pvgpu_wire as W  # noqa: E402
from pvgpu_guest import SCRIPT_PRELUDE, guest_env, run_guest_script  # noqa: E402
from pvgpu_sessions import closed_by_backend, unix_session, worker_pid  # noqa: E402
from pvgpuvm import window  # noqa: E402  (the header, common/window.h)
from pvgpuvm.spec import WindowLayout  # noqa: E402

LIBDIR = Path(__file__).resolve().parents[2] / os.environ.get("PVGPU_BUILD", "build") / "lib"
from curesult import CUDA_ERROR_INVALID_VALUE  # noqa: E402
WINDOW = 64 << 20
SLOT, NSLOTS = 1 << 20, 4
ARENA = window.HDR_SIZE + SLOT * NSLOTS


def window_fd(sealed):
    """A memfd holding a valid window header: (fd, its mapping)."""
    fd = W.window_memfd("hostile-window", WINDOW, sealed=sealed)
    m = mmap.mmap(fd, WINDOW)
    m[:window.HDR_SIZE] = window.pack_header(WindowLayout(
        size=WINDOW, window_id=0, staging_offset=window.HDR_SIZE,
        slot_size=SLOT, nslots=NSLOTS)).ljust(window.HDR_SIZE, b"\0")
    return fd, m


def attach(s, fd, size=WINDOW):
    """window_attach passing fd: the status."""
    return s.window_attach(fd, size=size)[0]


def copy_through_window(s, dptr):
    """A zero-copy host-to-device copy from the window's arena: the status."""
    return s.call("memcpy_htod_window", dst=dptr, offset=ARENA, size=4096, stream=0)[0]


def test_a_window_that_can_shrink_is_refused(sim_daemon):
    s = unix_session(sim_daemon)
    dptr = s.alloc(4096)
    fd, m = window_fd(sealed=False)
    assert attach(s, fd) == CUDA_ERROR_INVALID_VALUE
    assert "window file is not sealed against shrinking (F_SEAL_SHRINK)" in sim_daemon.log()
    # The guest shrinks its file: the worker has no mapping of it to die on.
    m.close()
    os.ftruncate(fd, 0)
    assert copy_through_window(s, dptr) == CUDA_ERROR_INVALID_VALUE
    assert s.call("mem_get_info")[0] == 0
    s.close()
    os.close(fd)


def test_a_sealed_window_is_used_and_cannot_shrink(sim_daemon):
    s = unix_session(sim_daemon)
    dptr = s.alloc(4096)
    fd, _m = window_fd(sealed=True)
    # Naming more than the file holds is refused, and says so.
    assert attach(s, fd, size=WINDOW * 2) == CUDA_ERROR_INVALID_VALUE
    assert f"{WINDOW * 2} bytes named, the guest's memfd holds {WINDOW}: refused" in \
        sim_daemon.log()
    s.close()
    s = unix_session(sim_daemon)
    dptr = s.alloc(4096)
    assert attach(s, fd) == 0
    assert copy_through_window(s, dptr) == 0
    # The seal holds for the guest too: it cannot take the pages away.
    try:
        os.ftruncate(fd, 0)
        shrank = True
    except PermissionError:
        shrank = False
    assert not shrank
    assert copy_through_window(s, dptr) == 0
    s.close()
    os.close(fd)


GUEST = SCRIPT_PRELUDE + r'''
context()
host = vp()
must("cuMemAllocHost_v2", ctypes.byref(host), c_size(1 << 20))
must("cuMemFreeHost", host)
print("PASS")
'''


def test_the_guest_library_seals_its_window(sim_daemon, tmp_path):
    uri = "shm://" + sim_daemon.unix[len("unix://"):]
    env = guest_env(LIBDIR, uri, PVGPU_DEBUG="1",
                    PVGPU_WINDOW_SIZE=str(64 << 20), PVGPU_WINDOW_HUGEPAGES="0")
    _out, err = run_guest_script(tmp_path, GUEST, LIBDIR / "libcuda.so.1", env)
    assert ": shared window 64 MiB" in err, err
    assert "refused the shared window" not in err, err
    assert "not sealed" not in sim_daemon.log()


def test_a_worker_killed_by_sigbus_says_why(start_pvgpud):
    # In the sanitizer build ASan would catch the signal and exit 1 with a
    # report instead: leave SIGBUS to the kernel, as in a plain build.
    asan = ":".join(filter(None, (os.environ.get("ASAN_OPTIONS"), "handle_sigbus=0")))
    sim_daemon = start_pvgpud("sim", env={"ASAN_OPTIONS": asan})
    s = W.Session(sim_daemon.unix)
    sid = s.hello()["session_id"]
    pid = worker_pid(sim_daemon, sid)
    os.kill(pid, signal.SIGBUS)
    assert closed_by_backend(s, timeout=10)
    deadline = time.monotonic() + 10
    while f"session {sid} end: " not in sim_daemon.log():
        assert time.monotonic() < deadline, sim_daemon.log()
        time.sleep(0.05)
    line = [ln for ln in sim_daemon.log().splitlines() if f"session {sid} end: " in ln][0]
    assert line.endswith("worker killed by SIGBUS (a shared window shrank under it?)"), line
