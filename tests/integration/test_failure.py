"""Failure: a guest process killed mid-copy, a connection
dropped mid-copy, a worker that is killed or crashes, a kernel that never
ends (the call watchdog), pvgpud restarted under load. Every time,
everything the session held is freed (the VM's memory use, as another
session of the same VM sees it through mem_get_info, returns to its
baseline), the log says what happened, and a session of another VM running
all along never sees an error.

Sessions speak the wire protocol (tests/lib/pvgpu_wire.py). Kernels that
hang or crash are CPU twins from tests/sim-twins/failure_twins.c, a
test-only plugin, launched from a small PTX image this file writes.
"""
import os
import re
import signal
import struct
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import pvgpu_wire as W  # noqa: E402
from pvgpu_sessions import closed_by_backend, wait_live, worker_pid  # noqa: E402

REPO = Path(__file__).resolve().parent.parent.parent
BUILD = REPO / os.environ.get("PVGPU_BUILD", "build")
TWINS = BUILD / "tests" / "sim-twins" / "libtest-twins.so"
FAILURE_TWINS = BUILD / "tests" / "sim-twins" / "libfailure-twins.so"
IMAGES = BUILD / "tests" / "kernels" / "images"

MiB = 1 << 20
ALICE_QUOTA = 256 * MiB
BOB_TOKEN = "bob-failure-token"
CALL_TIMEOUT = 2.0          # alice's call_timeout in the policy

# Two kernels with no CUDA source: the sim runs failure_twins.c for them.
FAILURE_PTX = b"""
.version 9.0
.target sm_90
.address_size 64

.visible .entry pvgpu_test_hang(
	.param .u32 pvgpu_test_hang_param_0
)
{
	ret;
}

.visible .entry pvgpu_test_crash(
	.param .u32 pvgpu_test_crash_param_0
)
{
	ret;
}
"""

POLICY = f"""
    [vm alice]
    uid = {os.getuid()}
    memory = 256M
    call_timeout = {CALL_TIMEOUT}s

    [vm bob]
    token = {BOB_TOKEN}
    memory = 64M
    """


def twins_env():
    for path in (TWINS, FAILURE_TWINS):
        if not path.exists():
            pytest.fail(f"{path} is not built (run `make test-programs`)")
    return {"PVGPU_SIM_TWINS": f"{TWINS}:{FAILURE_TWINS}"}


@pytest.fixture
def daemon(start_pvgpud, tmp_path):
    path = tmp_path / "pvgpud.conf"
    path.write_text(textwrap.dedent(POLICY))
    d = start_pvgpud("sim", extra_args=["--config", str(path)], env=twins_env())
    wait_live(d)
    return d




def wait_for(what, cond, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def alice(daemon):
    s = W.Session(daemon.unix, timeout=30)
    s.info = s.hello()
    s.open_context()
    return s


def bob(daemon):
    s = W.Session(daemon.tcp, timeout=30)
    s.info = s.hello(token=BOB_TOKEN)
    s.open_context()
    return s


def back_to_baseline(daemon, observer, baseline):
    """The observer (same VM) sees the VM's memory use return to baseline."""
    try:
        wait_for("the VM's memory use to return to its baseline",
                 lambda: observer.mem_info() == baseline)
    except AssertionError:
        raise AssertionError(f"mem_get_info {observer.mem_info()}, baseline "
                             f"{baseline}\n{daemon.log()}") from None


class OtherVM(threading.Thread):
    """A session of bob copying and checking in a loop the whole time: it
    must never see an error, whatever happens to alice's sessions."""

    def __init__(self, daemon):
        super().__init__(daemon=True)
        self.s = bob(daemon)
        self.ptr = self.s.alloc(MiB)
        self.data = os.urandom(MiB)
        self.stop = threading.Event()
        self.errors = []
        self.rounds = 0

    def run(self):
        try:
            while not self.stop.is_set():
                st = self.s.call("memcpy_htod", data_in=self.data, dst=self.ptr,
                                 size=MiB, stream=0)[0]
                if st:
                    self.errors.append(f"memcpy_htod: {st}")
                st, _, _, back = self.s.call("memcpy_dtoh", src=self.ptr,
                                             size=MiB, stream=0)
                if st or back != self.data:
                    self.errors.append(f"memcpy_dtoh: {st}, data "
                                       f"{'equal' if back == self.data else 'differ'}")
                self.rounds += 1
        except Exception as e:  # noqa: BLE001 - any failure is the finding
            self.errors.append(repr(e))

    def finish(self):
        # Some rounds after the failure too, not just before it.
        start = self.rounds
        wait_for("the other VM to go on", lambda: self.rounds >= start + 3 or
                 self.errors or not self.is_alive())
        self.stop.set()
        self.join(timeout=30)
        assert not self.is_alive()
        assert not self.errors, self.errors
        assert self.s.call("mem_free", dptr=self.ptr)[0] == 0
        self.s.close()


CHILD = r"""
import os, sys, time
sys.path.insert(0, sys.argv[1])
import pvgpu_wire as W
s = W.Session(sys.argv[2], timeout=30)
info = s.hello()
s.open_context()
st, _, out, _ = s.call("mem_alloc", size=64 << 20)
assert st == 0, st
# A 64 MiB copy of which only 8 MiB ever arrive: killed in the middle.
s.send(W.message("memcpy_htod", 99, dst=out["dptr"], size=64 << 20, stream=0) +
       W.data_frames(os.urandom(8 << 20), 99))
print(info["session_id"], flush=True)
time.sleep(600)
"""


def test_guest_process_killed_mid_copy(daemon):
    observer = alice(daemon)
    baseline = observer.mem_info()
    assert baseline == (ALICE_QUOTA, ALICE_QUOTA)
    other = OtherVM(daemon)
    other.start()
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(REPO / "tests" / "lib"), daemon.unix],
        stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        session_id = int(child.stdout.readline())
        wait_for("the copy to be under way",
                 lambda: observer.mem_info()[0] == baseline[0] - 64 * MiB)
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=10)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdout.close()
    back_to_baseline(daemon, observer, baseline)
    # The worker gives its memory back before it exits; the line comes after.
    wait_for("the session to end", lambda: f"session {session_id} end: " in daemon.log())
    log = daemon.log()
    assert f"session {session_id}: connection closed by the guest during " \
           f"memcpy_htod" in log, log
    assert re.search(rf"session {session_id} end: .*vm alice.*, ok", log), log
    other.finish()
    observer.close()


def test_connection_dropped_mid_copy_from_the_device(daemon):
    observer = alice(daemon)
    baseline = observer.mem_info()
    other = OtherVM(daemon)
    other.start()
    victim = alice(daemon)
    ptr = victim.alloc(64 * MiB)
    victim.send(W.message("memcpy_dtoh", 7, src=ptr, size=64 * MiB, stream=0))
    got = 0
    while got < 2 * MiB:            # a little of the 64 MiB, then hang up
        _op, _fl, _id, payload = victim.read_message()
        got += len(payload)
    victim.close()
    back_to_baseline(daemon, observer, baseline)
    sid = victim.info["session_id"]
    wait_for("the session to end", lambda: f"session {sid} end: " in daemon.log())
    log = daemon.log()
    assert re.search(rf"session {sid}: connection lost while sending during "
                     r"memcpy_dtoh: (Broken pipe|Connection reset by peer)", log), log
    other.finish()
    observer.close()


def load_failure_kernels(s):
    st, _, out, _ = s.call("module_load", data_in=FAILURE_PTX, size=len(FAILURE_PTX))
    assert st == 0, st
    funcs = {}
    for name in ("pvgpu_test_hang", "pvgpu_test_crash"):
        st, _, f, _ = s.call("module_get_function", module=out["module"], name=name)
        assert st == 0, st
        funcs[name] = f["func"]
    return funcs


def launch(s, func):
    s.queue("launch_kernel", func=func, grid_x=1, grid_y=1, grid_z=1,
            block_x=1, block_y=1, block_z=1, shared_bytes=0, stream=0,
            params=struct.pack("<i", 0))


def victim_holding_things(daemon):
    """An alice session with device memory, a module and staging buffers."""
    s = alice(daemon)
    ptr = s.alloc(32 * MiB)
    data = os.urandom(4 * MiB)
    assert s.call("memcpy_htod", data_in=data, dst=ptr, size=len(data), stream=0)[0] == 0
    s.funcs = load_failure_kernels(s)
    return s


def test_worker_killed(daemon):
    observer = alice(daemon)
    baseline = observer.mem_info()
    other = OtherVM(daemon)
    other.start()
    victim = victim_holding_things(daemon)
    assert observer.mem_info()[0] < baseline[0] - 32 * MiB   # memory and module
    sid = victim.info["session_id"]
    os.kill(worker_pid(daemon, sid), signal.SIGKILL)
    assert closed_by_backend(victim, 30.0)
    back_to_baseline(daemon, observer, baseline)
    wait_for("the session to end", lambda: f"session {sid} end: " in daemon.log())
    assert re.search(rf"session {sid} end: .*vm alice.*worker killed by signal 9 "
                     r"\(Killed\)", daemon.log()), daemon.log()
    other.finish()
    # The VM can use all of its quota again.
    big = observer.alloc(ALICE_QUOTA)
    assert observer.call("mem_free", dptr=big)[0] == 0
    victim.close()
    observer.close()


def test_kernel_that_crashes_the_worker(daemon):
    observer = alice(daemon)
    baseline = observer.mem_info()
    other = OtherVM(daemon)
    other.start()
    victim = victim_holding_things(daemon)
    launch(victim, victim.funcs["pvgpu_test_crash"])
    try:
        victim.send(W.message("ctx_synchronize", 1000))
    except (BrokenPipeError, ConnectionResetError):
        pass    # the sim runs the launch at once: the worker may be gone already
    assert closed_by_backend(victim, 30.0)
    back_to_baseline(daemon, observer, baseline)
    sid = victim.info["session_id"]
    wait_for("the session to end", lambda: f"session {sid} end: " in daemon.log())
    assert re.search(rf"session {sid} end: .*vm alice.*worker killed by signal 6 "
                     r"\(Aborted\)", daemon.log()), daemon.log()
    other.finish()
    victim.close()
    observer.close()


def test_watchdog_kills_a_call_that_hangs(daemon):
    observer = alice(daemon)
    baseline = observer.mem_info()
    other = OtherVM(daemon)       # bob: no call_timeout, the daemon's 300 s
    other.start()
    victim = victim_holding_things(daemon)
    sid = victim.info["session_id"]
    pid = worker_pid(daemon, sid)
    t0 = time.monotonic()
    launch(victim, victim.funcs["pvgpu_test_hang"])
    victim.send(W.message("ctx_synchronize", 1000))
    assert closed_by_backend(victim, 30.0)
    took = time.monotonic() - t0
    assert CALL_TIMEOUT <= took < CALL_TIMEOUT + 8, took
    back_to_baseline(daemon, observer, baseline)
    wait_for("the session to end", lambda: f"session {sid} end: " in daemon.log())
    log = daemon.log()
    assert re.search(rf"session {sid} \(uid=\d+,pid=\d+, vm alice\): watchdog: "
                     rf"launch_kernel has run 2\.\d s, past the call timeout of "
                     rf"2\.0 s; killing worker pid {pid}", log), log
    assert re.search(rf"session {sid} end: .*worker killed by the watchdog", log), log
    other.finish()
    victim.close()
    observer.close()


def test_slow_guest_is_not_a_hung_call(daemon):
    """Time a call spends waiting on its guest is not the call's: a copy
    whose guest pauses longer than the call timeout still completes."""
    s = alice(daemon)
    ptr = s.alloc(4 * MiB)
    data = os.urandom(4 * MiB)
    frames = W.data_frames(data, 5)
    half = len(frames) // 2
    s.send(W.message("memcpy_htod", 5, dst=ptr, size=len(data), stream=0) + frames[:half])
    time.sleep(CALL_TIMEOUT + 1.0)
    s.send(frames[half:])
    _op, _fl, rid, payload = s.read_message()
    assert rid == 5 and struct.unpack_from("<i", payload)[0] == 0
    s.next_id = 6
    assert s.call("memcpy_dtoh", src=ptr, size=len(data), stream=0)[3] == data
    assert "watchdog" not in daemon.log()
    s.close()


def test_call_timeout_flag_without_a_policy(start_pvgpud):
    d = start_pvgpud("sim", extra_args=["--call-timeout", "1"], env=twins_env())
    s = W.Session(d.unix, timeout=30)
    sid = s.hello()["session_id"]
    s.open_context()
    funcs = load_failure_kernels(s)
    launch(s, funcs["pvgpu_test_hang"])
    s.send(W.message("ctx_synchronize", 1000))
    assert closed_by_backend(s, 30.0)
    assert re.search(rf"session {sid} \(uid=\d+,pid=\d+, vm -\): watchdog: "
                     r"launch_kernel has run 1\.\d s, past the call timeout of 1\.0 s",
                     d.log()), d.log()
    s.close()
    # The daemon serves the next session as ever.
    t = W.Session(d.unix)
    t.hello()
    t.open_context()
    assert t.call("mem_alloc", size=4096)[0] == 0
    t.close()


class Load:
    """Sessions of both VMs copying until the daemon goes away under them."""

    def __init__(self, daemon, n=4):
        self.sessions = [alice(daemon) if i % 2 else bob(daemon) for i in range(n)]
        self.outcomes = [None] * n
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True)
                        for i in range(n)]
        self.rounds = [0] * n
        for t in self.threads:
            t.start()

    def _run(self, i):
        s = self.sessions[i]
        data = os.urandom(256 * 1024)
        try:
            ptr = s.alloc(len(data))
            while True:
                assert s.call("memcpy_htod", data_in=data, dst=ptr,
                              size=len(data), stream=0)[0] == 0
                assert s.call("memcpy_dtoh", src=ptr, size=len(data),
                              stream=0)[3] == data
                self.rounds[i] += 1
        except (EOFError, ConnectionError) as e:
            self.outcomes[i] = e      # the daemon went away: expected
        except Exception as e:  # noqa: BLE001
            self.outcomes[i] = AssertionError(repr(e))

    def busy(self):
        wait_for("load", lambda: all(r >= 2 for r in self.rounds))

    def ended_by_disconnect(self):
        for t in self.threads:
            t.join(timeout=30)
        for s in self.sessions:
            s.close()
        bad = [o for o in self.outcomes if not isinstance(o, (EOFError, ConnectionError))]
        assert not bad, self.outcomes


def served(daemon):
    for s in (alice(daemon), bob(daemon)):
        ptr = s.alloc(MiB)
        data = os.urandom(MiB)
        assert s.call("memcpy_htod", data_in=data, dst=ptr, size=MiB, stream=0)[0] == 0
        assert s.call("memcpy_dtoh", src=ptr, size=MiB, stream=0)[3] == data
        assert s.mem_info()[0] < s.mem_info()[1]
        s.close()


def test_restart_under_load(daemon):
    load = Load(daemon)
    load.busy()
    assert daemon.stop() == 0                  # SIGTERM, with sessions running
    log = daemon.log()
    assert "Terminated: shutting down (4 live session(s))" in log, log
    assert log.count(" end: ") == log.count(" start: "), log
    load.ended_by_disconnect()
    daemon.start()                             # same socket path, same port
    wait_live(daemon)
    served(daemon)


def test_restart_after_the_supervisor_is_killed(daemon):
    load = Load(daemon)
    load.busy()
    pids = [worker_pid(daemon, s.info["session_id"]) for s in load.sessions]
    daemon.proc.send_signal(signal.SIGKILL)
    daemon.proc.wait(timeout=10)
    daemon._log_file.close()
    load.ended_by_disconnect()

    def gone(pid):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        # A zombie is gone for our purposes: it holds nothing.
        try:
            return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] == "Z"
        except (FileNotFoundError, IndexError):
            return True

    # Workers die with their supervisor (PR_SET_PDEATHSIG), GPU state and all.
    wait_for("the workers to die with the supervisor",
             lambda: all(gone(p) for p in pids))
    daemon.start()
    wait_live(daemon)
    served(daemon)
