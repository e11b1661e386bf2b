"""Suspending and resuming a session (README "Suspending a session"):
`pvgpuctl session suspend ID` moves the session's device memory to host
memory (the sim's model of NVIDIA's process checkpoint), /metrics shows
it as suspended bytes, and the guest's next call resumes the session
with its data intact; other VMs' sessions go on meanwhile."""
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import pvgpu_wire as W  # noqa: E402
from pvgpu_sessions import alice_and_bob, tcp_session, unix_session, wait_live  # noqa: E402

BOB_TOKEN = "bob-suspend-token"
PVGPUCTL = os.path.join(W.REPO, os.environ.get("PVGPU_BUILD", "build"), "bin", "pvgpuctl")
SIZE = 4 << 20
PATTERN = bytes((i * 7 + 3) & 0xFF for i in range(SIZE))


def pvgpuctl(daemon, *args, timeout=60):
    return subprocess.run([str(PVGPUCTL), "session", *args, "--admin", daemon.admin],
                          capture_output=True, text=True, timeout=timeout)


def suspend_daemon(start_pvgpud, programs, extra=(), env=None, policy=True):
    """pvgpud (sim) with an admin socket and metrics; vm alice over Unix,
    vm bob over TCP when policy."""
    admin = f"/tmp/pvgpu-admin-{os.getpid()}-{time.monotonic_ns()}.sock"
    port = programs.free_tcp_port()
    args = ("--admin", admin, "--metrics", f"127.0.0.1:{port}", *extra)
    if policy:
        import pathlib
        import tempfile
        tmp = pathlib.Path(tempfile.mkdtemp(prefix="pvgpu-"))
        d = alice_and_bob(start_pvgpud, tmp, BOB_TOKEN, extra_args=args, env=env)
    else:
        d = start_pvgpud("sim", extra_args=args, env=env)
    d.admin = admin
    d.url = f"http://127.0.0.1:{port}/metrics"
    wait_live(d, 0)
    return d


def metric(daemon, name, vm):
    text = urllib.request.urlopen(daemon.url, timeout=10).read().decode()
    m = re.search(r'^%s\{vm="%s"\} (\S+)$' % (name, re.escape(vm)), text, re.M)
    assert m, f"no {name} for vm {vm} in:\n{text}"
    return float(m.group(1))


def wait_metric(daemon, name, vm, want, timeout=10):
    """Figures are taken when they change and once a second."""
    deadline = time.monotonic() + timeout
    while metric(daemon, name, vm) != want:
        assert time.monotonic() < deadline, (name, vm, metric(daemon, name, vm), want)
        time.sleep(0.1)


def session_id(daemon):
    """The number of the newest session, from its start line."""
    return int(re.findall(r"session (\d+) start: ", daemon.log())[-1])


def filled(daemon):
    s = unix_session(daemon)
    dptr = s.alloc(SIZE)
    assert s.call("memcpy_htod", data_in=PATTERN, dst=dptr, size=SIZE, stream=0)[0] == 0
    return s, dptr


def listed(daemon, sid):
    res = pvgpuctl(daemon, "list")
    assert res.returncode == 0, res.stderr
    rows = [line.split() for line in res.stdout.splitlines()[1:]]
    return next(r for r in rows if r[0] == str(sid))


def test_suspend_then_a_call_resumes_with_data_intact(start_pvgpud, programs):
    daemon = suspend_daemon(start_pvgpud, programs)
    s, dptr = filled(daemon)
    sid = session_id(daemon)
    wait_metric(daemon, "pvgpu_vm_memory_used_bytes", "alice", SIZE)

    res = pvgpuctl(daemon, "suspend", str(sid))
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == f"session {sid} suspended"
    assert listed(daemon, sid)[1:3] == ["alice", "suspended"]
    wait_metric(daemon, "pvgpu_vm_suspended_bytes", "alice", SIZE)
    wait_metric(daemon, "pvgpu_vm_memory_used_bytes", "alice", 0)
    assert re.search(r"session %d suspended: vm alice, 4.0 MiB to host memory in " % sid,
                     daemon.log())

    # The guest's next call: it waits for the resume and sees its data.
    st, _, _, back = s.call("memcpy_dtoh", src=dptr, size=SIZE, stream=0)
    assert st == 0 and back == PATTERN
    assert listed(daemon, sid)[1:3] == ["alice", "running"]
    wait_metric(daemon, "pvgpu_vm_suspended_bytes", "alice", 0)
    wait_metric(daemon, "pvgpu_vm_memory_used_bytes", "alice", SIZE)
    daemon.wait_log(r"session %d resumed: vm alice, 4.0 MiB back to the device in " % sid)
    s.close()


def test_operator_resume_and_wrong_states(start_pvgpud, programs):
    daemon = suspend_daemon(start_pvgpud, programs)
    s, dptr = filled(daemon)
    sid = session_id(daemon)
    res = pvgpuctl(daemon, "resume", str(sid))
    assert res.returncode == 1 and f"session {sid} is running" in res.stderr
    assert pvgpuctl(daemon, "suspend", str(sid)).returncode == 0
    res = pvgpuctl(daemon, "suspend", str(sid))
    assert res.returncode == 1 and f"session {sid} is suspended" in res.stderr
    res = pvgpuctl(daemon, "resume", str(sid))
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == f"session {sid} running"
    st, _, _, back = s.call("memcpy_dtoh", src=dptr, size=SIZE, stream=0)
    assert st == 0 and back == PATTERN
    s.close()


def test_suspend_under_load_leaves_other_vms_unharmed(start_pvgpud, programs):
    daemon = suspend_daemon(start_pvgpud, programs)
    s, dptr = filled(daemon)
    sid = session_id(daemon)
    errors, stop = [], threading.Event()

    def bob(n):
        try:
            b = tcp_session(daemon, BOB_TOKEN)
            data = bytes([n]) * (256 << 10)
            d = b.alloc(len(data))
            while not stop.is_set():
                assert b.call("memcpy_htod", data_in=data, dst=d, size=len(data),
                              stream=0)[0] == 0
                st, _, _, back = b.call("memcpy_dtoh", src=d, size=len(data), stream=0)
                assert st == 0 and back == data
            b.close()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"bob {n}: {e!r}")

    threads = [threading.Thread(target=bob, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    try:
        for _ in range(3):
            assert pvgpuctl(daemon, "suspend", str(sid)).returncode == 0
            st, _, _, back = s.call("memcpy_dtoh", src=dptr, size=SIZE, stream=0)
            assert st == 0 and back == PATTERN
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert not errors, errors
    assert daemon.log().count(f"session {sid} suspended: ") == 3
    s.close()


def test_hung_checkpointer_is_killed_and_the_session_goes_on(start_pvgpud, programs):
    daemon = suspend_daemon(start_pvgpud, programs, extra=("--suspend-timeout", "1"),
                            env={"PVGPU_SIM_CHECKPOINT_HANG_MS": "30000"})
    s, dptr = filled(daemon)
    sid = session_id(daemon)
    t0 = time.monotonic()
    res = pvgpuctl(daemon, "suspend", str(sid))
    assert res.returncode == 1 and "it is running" in res.stderr, res.stderr
    assert time.monotonic() - t0 < 25
    lines = [line for line in daemon.log().splitlines() if f"session {sid}: suspend" in line]
    assert len(lines) == 1 and "no answer within 1.0 s" in lines[0] and \
        "it stays running" in lines[0], lines
    st, _, _, back = s.call("memcpy_dtoh", src=dptr, size=SIZE, stream=0)
    assert st == 0 and back == PATTERN
    s.close()


def test_no_resume_in_time_ends_the_session_with_one_line(start_pvgpud, programs):
    """A worker whose resume never comes (its supervisor stopped from
    the outside, as a debugger would) ends its session rather than make
    up an answer."""
    daemon = suspend_daemon(start_pvgpud, programs, extra=("--suspend-timeout", "0.5"),
                            policy=False)
    s, dptr = filled(daemon)
    sid = session_id(daemon)
    assert pvgpuctl(daemon, "suspend", str(sid)).returncode == 0
    os.kill(daemon.proc.pid, 19)  # SIGSTOP: nobody resumes
    try:
        s.sock.settimeout(30)
        try:
            s.call("memcpy_dtoh", src=dptr, size=SIZE, stream=0)
            ended = False
        except (EOFError, ConnectionResetError):
            ended = True
    finally:
        os.kill(daemon.proc.pid, 18)  # SIGCONT
    assert ended
    text = daemon.wait_log(r"session %d end: " % sid)
    assert len(re.findall(r"session %d: a call waited \S+ s for its session's resume in vain"
                          % sid, text)) == 1
