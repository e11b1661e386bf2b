"""What the sim executor shares for CUDA IPC does not outlive its worker.

An exported allocation (cuIpcGetMemHandle) must be readable by another
session of the VM, and must leave nothing behind on the host when its
worker dies, however it dies: a worker SIGKILLed (the watchdog, the OOM
killer, a crash) runs no clean-up.  The sim keeps an export in a memfd
that the exporting worker holds, not in a file under /dev/shm, so there
is nothing to remove.  Raw protocol calls, as a guest makes them.
"""
import glob
import os
import signal
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import pvgpu_wire as W  # noqa: E402
from pvgpu_sessions import closed_by_backend, unix_session, wait_live, worker_pid  # noqa: E402

SIZE = 1 << 16


def shm_files_of(pid):
    """Files under /dev/shm whose name carries pid, as the sim's did."""
    return [f for f in glob.glob("/dev/shm/*") if f"-{pid}-" in os.path.basename(f)]


def test_an_export_leaves_no_file_behind_a_killed_worker(sim_daemon):
    exporter = W.Session(sim_daemon.unix)
    sid = exporter.hello()["session_id"]
    exporter.open_context()
    pid = worker_pid(sim_daemon, sid)
    importer = unix_session(sim_daemon)
    data = bytes((i * 13) & 0xFF for i in range(SIZE))
    dptr = exporter.alloc(SIZE)
    assert exporter.call("memcpy_htod", data_in=data, dst=dptr, size=SIZE, stream=0)[0] == 0
    st, _d, out, _ = exporter.call("ipc_get_mem_handle", dptr=dptr)
    assert st == 0, st
    # Another session of the VM reads the exporter's bytes.
    st, _d, opened, _ = importer.call("ipc_open_mem_handle", handle=out["handle"], flags=1)
    assert st == 0, st
    st, _d, _o, back = importer.call("memcpy_dtoh", src=opened["dptr"], size=SIZE, stream=0)
    assert st == 0 and back == data
    # The exporter's worker dies without a word; nothing of it stays.
    os.kill(pid, signal.SIGKILL)
    assert closed_by_backend(exporter), sim_daemon.log()
    wait_live(sim_daemon, 1)
    assert shm_files_of(pid) == []
    # What the importer mapped is its own to keep until it closes it.
    st, _d, _o, back = importer.call("memcpy_dtoh", src=opened["dptr"], size=SIZE, stream=0)
    assert st == 0 and back == data
    assert importer.call("ipc_close_mem_handle", dptr=opened["dptr"])[0] == 0
    importer.close()
