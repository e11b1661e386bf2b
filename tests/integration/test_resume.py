"""A session survives its connection's loss: the guest library reconnects
and resumes it with the token its hello was given (README, policy key
`resume_grace`), as after a VM's live migration resets its
virtio-vsock connection.  Here a proxy in front of pvgpud cuts the
connection at random points, mid-message included."""
import os
import re
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import pvgpu_wire as W  # noqa: E402
from cutting_proxy import CuttingProxy  # noqa: E402
from pvgpu_sessions import alice_and_bob, wait_live  # noqa: E402
from pvgpud_cli import assert_vm_key_refused, require_policy_file  # noqa: E402

P = W.P
RESUME = 1 << P.FEATURES["resume"]
ALL_FEATURES = sum(1 << b for b in P.FEATURES.values())

START = re.compile(r"session (\d+) start: ")
KEPT = re.compile(r"session (\d+): vm \S+: connection lost; kept [\d.]+ s for its guest")
RESUMED = re.compile(r"session (\d+): vm \S+: resumed after ([\d.]+) s away")


def run_through_proxy(programs, daemon, tmp_path, name, tcp, seed, cuts, high):
    backend = daemon.tcp if tcp else daemon.unix
    proxy = CuttingProxy(backend, tmp_path, tcp=tcp, cuts=cuts, seed=seed,
                         low=100, high=high)
    env = programs.pvgpu_env(proxy.uri)
    env["PVGPU_DEBUG"] = "1"
    try:
        res = programs.run(name, env)
    finally:
        proxy.close()
    return res, proxy


def assert_one_session_resumed(programs, daemon, res, proxy, seed, sessions=1):
    """The program passed in one session (the `sessions`th of the
    daemon), resumed after each cut the guest noticed."""
    why = f"(seed {seed}, cuts after {proxy.cut_at} bytes)"
    programs.assert_passed(res, daemon)
    # The guest says each resume with PVGPU_DEBUG (a cut while it resumes
    # is part of that resume); pvgpud logs each detach and its resume.
    said = re.findall(r"session \d+ resumed after", res.stderr)
    assert 1 <= len(said) <= len(proxy.cut_at), \
        f"{why}\n{programs.describe(res, daemon)}"
    wait_live(daemon, 0, timeout=30)
    log = daemon.log()
    kept, resumed = KEPT.findall(log), RESUMED.findall(log)
    assert len(START.findall(log)) == sessions, f"{why}\n{log[-6000:]}"
    assert len(said) <= len(kept) == len(resumed) <= len(proxy.cut_at), \
        f"{why}\n{log[-6000:]}"
    assert "not resumed" not in log


@pytest.mark.parametrize("name,tcp,high", [
    ("memory", False, 40 << 20), ("memory", True, 40 << 20),
    ("streams", False, 2 << 20), ("copies", False, 1 << 20),
    ("threads", False, 2 << 20)],
    ids=["memory-unix", "memory-tcp", "streams-unix", "copies-unix",
         "threads-unix"])
def test_copies_survive_cuts(programs, sim_daemon, short_tmp, name, tcp, high):
    """Copies of every size both ways, synchronous and async (their DATA
    frames cut through), run to PASS while the connection is cut."""
    seed = int.from_bytes(os.urandom(4), "little")
    res, proxy = run_through_proxy(programs, sim_daemon, short_tmp, name,
                                   tcp, seed, cuts=4, high=high)
    assert_one_session_resumed(programs, sim_daemon, res, proxy, seed)


@pytest.mark.parametrize("name", ["kernels/launchloop", "kernels/streams4"])
def test_kernels_survive_cuts(programs, twins_daemon, short_tmp, name):
    """Programs that batch launches and async copies: cut mid-batch, each
    launch runs once (the programs check their results)."""
    seed = int.from_bytes(os.urandom(4), "little")
    res, proxy = run_through_proxy(programs, twins_daemon, short_tmp, name,
                                   False, seed, cuts=3, high=300_000)
    assert_one_session_resumed(programs, twins_daemon, res, proxy, seed)


@pytest.mark.parametrize("name", ["memory", "kernels/streams4"])
def test_ring_sessions_survive_cuts(programs, twins_daemon, short_tmp, name):
    """shm://: the messages go through the window's control ring, the
    socket carries wake-ups alone.  Cut at a random moment of the run, the
    socket's loss loses no message: the guest connects again and resumes,
    the worker takes the new connection, and both look at the ring again;
    the program passes, in one session.  Cut where one side wakes the
    other (the proxy keeps that wake-up), twice."""
    seed = int.from_bytes(os.urandom(4), "little")
    proxy = CuttingProxy(twins_daemon.unix, short_tmp, cuts=2, seed=seed,
                         after_kicks=(1, 6))
    env = programs.pvgpu_env("shm://" + proxy.uri[len("unix://"):])
    env["PVGPU_DEBUG"] = "1"
    try:
        res = programs.run(name, env)
    finally:
        proxy.close()
    assert "control ring" in res.stderr, programs.describe(res, twins_daemon)
    assert proxy.cut_at, f"no wake-up cut (seed {seed})\n{programs.describe(res, twins_daemon)}"
    assert_one_session_resumed(programs, twins_daemon, res, proxy, seed)


def resumable_session(uri, token=""):
    s = W.Session(uri)
    st, _d, outs, _ = s.call("hello", version_min=1, version_max=P.VERSION,
                             pid=os.getpid(), token=token, client="pytest",
                             features=ALL_FEATURES & ~(1 << P.FEATURES["ring"]))
    assert st == 0, st
    assert outs["features"] & RESUME
    assert outs["resume_lo"] | outs["resume_hi"]
    return s, outs


def resume_hello(uri, outs, last_reply, token=""):
    """A new connection asking to resume: (status, outputs, session)."""
    s = W.Session(uri)
    st, _d, rep, _ = s.call("hello", version_min=1, version_max=P.VERSION,
                            pid=os.getpid(), token=token, client="pytest",
                            features=outs["features"],
                            resume_lo=outs["resume_lo"],
                            resume_hi=outs["resume_hi"],
                            last_reply=last_reply)
    return st, rep, s


def resume_when_detached(daemon, uri, outs, last_reply, token=""):
    """Resume, trying again while pvgpud has not yet seen the old
    connection go (CUDA_ERROR_NOT_READY)."""
    deadline = time.monotonic() + 10
    while True:
        st, rep, s = resume_hello(uri, outs, last_reply, token)
        if st != 600 or time.monotonic() > deadline:
            return st, rep, s
        s.close()
        time.sleep(0.05)


def test_resume_keeps_the_session(sim_daemon):
    """Memory allocated before the cut is the session's after it: same
    session id, the bytes still there, one session in the log."""
    s, outs = resumable_session(sim_daemon.unix)
    s.open_context()
    dptr = s.alloc(4096)
    st, _d, _o, _ = s.call("memcpy_htod", data_in=b"x" * 4096, dst=dptr,
                           size=4096)
    assert st == 0
    last = s.next_id - 1
    s.close()
    st, rep, s2 = resume_when_detached(sim_daemon, sim_daemon.unix, outs, last)
    assert st == 0, sim_daemon.log()[-3000:]
    assert rep["session_id"] == outs["session_id"]
    assert rep["last_received"] == last
    s2.next_id = last + 100
    st, _d, _o, data = s2.call("memcpy_dtoh", src=dptr, size=4096)
    assert (st, data) == (0, b"x" * 4096)
    s2.call("bye")
    s2.close()
    wait_live(sim_daemon, 0)
    assert len(START.findall(sim_daemon.log())) == 1


def test_lost_reply_is_sent_again(sim_daemon):
    """A reply the guest did not get comes again on resume, and the
    request is not run twice: an allocation made once."""
    s, outs = resumable_session(sim_daemon.unix)
    s.open_context()
    # Sent, answered, but never read: the connection goes first.
    msg_id = s.next_id
    s.send(W.message("mem_alloc", msg_id, size=1 << 20))
    wait = sim_daemon.wait_log(r"mem_alloc|session \d+ start", timeout=10)
    assert wait
    time.sleep(0.2)
    s.close()
    st, rep, s2 = resume_when_detached(sim_daemon, sim_daemon.unix, outs,
                                       msg_id - 1)
    assert st == 0
    assert rep["last_received"] == msg_id
    opcode, flags, rid, payload = s2.read_message()
    assert (opcode, rid) == (P.OPS["mem_alloc"][0], msg_id)
    status = W.struct.unpack_from("<i", payload)[0]
    assert status == 0
    s2.next_id = msg_id + 1
    free, total = s2.mem_info()
    assert total - free == 1 << 20 or total - free >= 1 << 20
    s2.call("bye")
    s2.close()


def test_expired_grace_ends_the_session(start_pvgpud, tmp_path):
    """Nobody comes back: past resume_grace the session ends as any other
    and its memory is the VM's again."""
    d = alice_and_bob(start_pvgpud, tmp_path, "bobtoken",
                      alice_extra="memory = 64M\nresume_grace = 0.5")
    s, outs = resumable_session(d.unix)
    assert outs["resume_grace_ms"] == 500
    s.open_context()
    s.alloc(32 << 20)
    s.close()
    d.wait_log(r"not resumed within 0\.5 s")
    wait_live(d, 0)
    # Its memory is back: a new session may have all of the quota.
    s2 = W.Session(d.unix)
    s2.hello()
    s2.open_context()
    free, total = s2.mem_info()
    assert free == total == 64 << 20
    # And its token is void.
    st, _rep, s3 = resume_hello(d.unix, outs, 0)
    assert st == 800, st    # CUDA_ERROR_NOT_PERMITTED
    s3.close()
    s2.close()


def test_grace_zero_ends_at_once(start_pvgpud, tmp_path):
    """resume_grace = 0: no token, and a lost connection ends the session."""
    d = alice_and_bob(start_pvgpud, tmp_path, "bobtoken",
                      alice_extra="resume_grace = 0")
    s = W.Session(d.unix)
    st, _d, outs, _ = s.call("hello", version_min=1, version_max=P.VERSION,
                             pid=os.getpid(), token="", client="pytest",
                             features=RESUME | 3)
    assert st == 0
    assert outs["resume_lo"] == outs["resume_hi"] == 0
    s.close()
    wait_live(d, 0)
    assert "kept" not in d.log()


def test_bye_ends_at_once(sim_daemon):
    """bye is the guest's goodbye: no wait for a resume."""
    s, _outs = resumable_session(sim_daemon.unix)
    st, _d, _o, _ = s.call("bye")
    assert st == 0
    s.close()
    wait_live(sim_daemon, 0, timeout=5)
    assert "kept" not in sim_daemon.log()


def test_old_guest_is_not_kept(sim_daemon):
    """A guest that does not know the feature gets no token and its
    session ends with its connection, as before."""
    s = W.Session(sim_daemon.unix)
    st, _d, outs, _ = s.call("hello", version_min=1, version_max=P.VERSION,
                             pid=os.getpid(), token="", client="pytest")
    assert st == 0
    assert "resume_lo" not in outs or outs["resume_lo"] == 0
    s.close()
    wait_live(sim_daemon, 0, timeout=5)
    assert "kept" not in sim_daemon.log()


def test_resume_over_tcp_needs_the_same_vm_token(start_pvgpud, tmp_path):
    """Over TCP the VM is its token: bob's resume works with bob's token."""
    d = alice_and_bob(start_pvgpud, tmp_path, "bobtoken")
    s, outs = resumable_session(d.tcp, token="bobtoken")
    last = s.next_id - 1
    s.close()
    st, rep, s2 = resume_when_detached(d, d.tcp, outs, last, token="bobtoken")
    assert st == 0, d.log()[-3000:]
    assert rep["session_id"] == outs["session_id"]
    s2.call("bye")
    s2.close()


def test_bad_resume_grace_is_refused(tmp_path):
    """Like every duration key: refused at start-up with the file's line."""
    require_policy_file()
    assert_vm_key_refused(tmp_path, "resume_grace", ["soon", "-1", "2h", "50ms"],
                          "bad.conf:3")


def test_detached_session_holds_its_slot(start_pvgpud, tmp_path):
    """While it waits for its guest a session is still the VM's: with
    max_sessions = 1 another session is refused, and the resume is not."""
    d = alice_and_bob(start_pvgpud, tmp_path, "bobtoken",
                      alice_extra="max_sessions = 1")
    s, outs = resumable_session(d.unix)
    last = s.next_id - 1
    s.close()
    d.wait_log(r"vm alice: connection lost; kept")
    other = W.Session(d.unix)
    st, _d, _o, _ = other.call("hello", version_min=1, version_max=P.VERSION,
                               pid=os.getpid(), token="", client="pytest")
    assert st == 800, st
    other.close()
    assert "already has 1 session(s), its max_sessions" in d.log()
    st, rep, s2 = resume_when_detached(d, d.unix, outs, last)
    assert st == 0
    assert rep["session_id"] == outs["session_id"]
    s2.call("bye")
    s2.close()


def test_a_session_with_a_window_is_not_kept(sim_daemon):
    """shm://: the window's ring and staging positions go with the
    connection, so such a session ends with it, saying why."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..",
                                    "qemu-device"))
    import mmap
    from pvgpuvm import window
    from pvgpuvm.spec import WindowLayout
    s, _outs = resumable_session(sim_daemon.unix)
    size = 16 << 20
    fd = W.window_memfd("resume-window", size)
    with mmap.mmap(fd, size) as m:
        m[:window.HDR_SIZE] = window.pack_header(WindowLayout(
            size=size, window_id=0, staging_offset=window.HDR_SIZE,
            slot_size=1 << 20, nslots=4)).ljust(window.HDR_SIZE, b"\0")
    assert s.window_attach(fd, size=size)[0] == 0
    s.close()
    os.close(fd)
    sim_daemon.wait_log(r"connection lost; not kept for a resume: the session has a shared window")
    wait_live(sim_daemon, 0)
    assert "kept 10.0 s" not in sim_daemon.log()
