"""mode = exclusive in the policy file: a VM in exclusive
mode has its GPUs alone. The unit is a context: while a session of an
exclusive VM holds a context on a device, other VMs' context creation there
fails with CUDA_ERROR_DEVICE_UNAVAILABLE (cudaErrorDevicesUnavailable), and
an exclusive VM cannot create a context where another VM holds one. With
exclusive_wait the refused caller waits, bounded, then is served or gets
the same error.

The sessions speak the wire protocol directly (tests/lib/pvgpu_wire.py);
one test runs an unmodified CUDA program to see the error as the runtime
names it.
"""
import os
import sys
import textwrap
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from pvgpu_sessions import hello_session as hello, wait_live  # noqa: E402

from curesult import CUDA_ERROR_DEVICE_UNAVAILABLE  # noqa: E402

BOB_TOKEN = "bob-token-1"
CAROL_TOKEN = "carol-token-2"
DAVE_TOKEN = "dave-token-3"


def policy(alice_mode="exclusive", bob_wait=None, default_wait=None,
           dave_mode="shared"):
    text = ""
    if default_wait is not None:
        text += f"""
        [default]
        exclusive_wait = {default_wait}
        """
    text += f"""
        [vm alice]
        uid = {os.getuid()}
        mode = {alice_mode}

        [vm bob]
        token = {BOB_TOKEN}
        mode = shared
        """
    if bob_wait is not None:
        text += f"""
        exclusive_wait = {bob_wait}
        """
    text += f"""
        [vm carol]
        token = {CAROL_TOKEN}

        [vm dave]
        token = {DAVE_TOKEN}
        mode = {dave_mode}
        """
    return textwrap.dedent(text)




def wait_log(daemon, text, timeout=10.0):
    deadline = time.monotonic() + timeout
    while text not in daemon.log():
        if time.monotonic() > deadline:
            raise AssertionError(f"no {text!r} in the log:\n{daemon.log()}")
        time.sleep(0.02)


def start(start_pvgpud, tmp_path, text):
    path = tmp_path / "pvgpud.conf"
    path.write_text(text)
    daemon = start_pvgpud("sim", extra_args=["--config", str(path)])
    daemon.config = path
    wait_live(daemon)
    return daemon


def ctx_create(s, device=0):
    st, _d, out, _ = s.call("ctx_create", device=device)
    return st, out.get("ctx", 0)


def with_context(daemon, token=None):
    s = hello(daemon, token)
    st, ctx = ctx_create(s)
    assert st == 0, st
    s.queue("ctx_set", ctx=ctx)
    s.ctx = ctx
    return s


def works(s):
    """The session can allocate, copy and free: it is unharmed."""
    st, _d, out, _ = s.call("mem_alloc", size=4096)
    assert st == 0, st
    data = bytes(range(256)) * 16
    assert s.call("memcpy_htod", data_in=data, dst=out["dptr"], size=4096,
                  stream=0)[0] == 0
    assert s.call("memcpy_dtoh", src=out["dptr"], size=4096, stream=0)[3] == data
    assert s.call("mem_free", dptr=out["dptr"])[0] == 0


def test_exclusive_vm_refuses_others(start_pvgpud, tmp_path):
    daemon = start(start_pvgpud, tmp_path, policy())
    a1 = with_context(daemon)
    # Another VM may connect and ask about devices, but gets no context.
    b = hello(daemon, BOB_TOKEN)
    assert b.call("device_get_count")[0] == 0
    assert ctx_create(b)[0] == CUDA_ERROR_DEVICE_UNAVAILABLE
    assert "ctx_create on device 0 refused: vm alice has device 0 in exclusive " \
           "mode (CUDA_ERROR_DEVICE_UNAVAILABLE)" in daemon.log()
    # The refused session is still alive and may try again.
    assert b.call("device_get_count")[0] == 0
    # Sessions of the exclusive VM itself share the device.
    a2 = with_context(daemon)
    works(a1)
    works(a2)
    # Once alice's last context on the device is gone, others get it at once.
    assert a1.call("ctx_destroy", ctx=a1.ctx)[0] == 0
    assert ctx_create(b)[0] == CUDA_ERROR_DEVICE_UNAVAILABLE   # a2 holds one
    assert a2.call("ctx_destroy", ctx=a2.ctx)[0] == 0
    st, ctx = ctx_create(b)
    assert st == 0
    b.queue("ctx_set", ctx=ctx)
    works(b)
    for s in (a1, a2, b):
        s.close()


def test_exclusive_vm_cannot_take_a_gpu_in_use(start_pvgpud, tmp_path):
    daemon = start(start_pvgpud, tmp_path, policy())
    b = with_context(daemon, BOB_TOKEN)
    c = with_context(daemon, CAROL_TOKEN)   # shared VMs share
    a = hello(daemon)
    assert ctx_create(a)[0] == CUDA_ERROR_DEVICE_UNAVAILABLE
    assert "refused: vm alice is in exclusive mode and vm " in daemon.log()
    works(b)
    works(c)
    b.close()
    c.close()
    wait_live(daemon, 1)   # a alone
    st, ctx = ctx_create(a)
    assert st == 0
    a.queue("ctx_set", ctx=ctx)
    works(a)
    a.close()




def test_waits_then_served_when_the_exclusive_vm_leaves(start_pvgpud, tmp_path):
    daemon = start(start_pvgpud, tmp_path, policy(bob_wait="10s"))
    a = with_context(daemon)
    b = hello(daemon, BOB_TOKEN)
    result = {}

    def create():
        t0 = time.monotonic()
        result["st"] = ctx_create(b)
        result["took"] = time.monotonic() - t0

    waiter = threading.Thread(target=create)
    waiter.start()
    wait_log(daemon, "ctx_create on device 0 waits up to 10.0 s: vm alice has "
                     "device 0 in exclusive mode")
    time.sleep(0.3)
    assert "st" not in result    # still waiting
    a.close()                    # the exclusive VM leaves: its worker ends
    waiter.join(timeout=15)
    assert not waiter.is_alive()
    st, ctx = result["st"]
    assert st == 0, st
    assert result["took"] < 9.0, result
    assert "device 0 free after waiting" in daemon.log()
    b.queue("ctx_set", ctx=ctx)
    works(b)
    b.close()


def test_waits_then_times_out_with_a_clear_error(start_pvgpud, tmp_path):
    # [default] exclusive_wait holds for every VM that sets none of its own.
    daemon = start(start_pvgpud, tmp_path, policy(default_wait="1.5s"))
    a = with_context(daemon)
    c = hello(daemon, CAROL_TOKEN)
    t0 = time.monotonic()
    st, _ = ctx_create(c)
    took = time.monotonic() - t0
    assert st == CUDA_ERROR_DEVICE_UNAVAILABLE
    assert 1.4 <= took < 6.0, took
    log = daemon.log()
    assert "ctx_create on device 0 waits up to 1.5 s: vm alice has device 0 " \
           "in exclusive mode" in log
    assert "ctx_create on device 0 refused after waiting 1." in log
    assert "(CUDA_ERROR_DEVICE_UNAVAILABLE)" in log
    # The holder never noticed.
    works(a)
    a.close()
    c.close()


def test_two_exclusive_vms_racing_for_one_gpu(start_pvgpud, tmp_path):
    """Check and take are one step across worker processes: when sessions of
    two exclusive VMs ask at the same moment, all winners are of one VM."""
    daemon = start(start_pvgpud, tmp_path, policy(dave_mode="exclusive"))
    for _round in range(3):
        sessions = [hello(daemon) for _ in range(4)] + \
                   [hello(daemon, DAVE_TOKEN) for _ in range(4)]
        barrier = threading.Barrier(len(sessions))
        results = [None] * len(sessions)

        def go(i):
            barrier.wait()
            results[i] = ctx_create(sessions[i])[0]

        threads = [threading.Thread(target=go, args=(i,)) for i in range(len(sessions))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        won = {("alice" if i < 4 else "dave") for i, st in enumerate(results) if st == 0}
        assert len(won) == 1, results
        assert all(st in (0, CUDA_ERROR_DEVICE_UNAVAILABLE) for st in results), results
        # Every session of the winner got it, none of the loser.
        winner = won.pop()
        for i, st in enumerate(results):
            assert (st == 0) == ((i < 4) == (winner == "alice")), results
        for s in sessions:
            s.close()
        wait_live(daemon)


def test_reload_to_shared_lets_others_in(start_pvgpud, tmp_path):
    import signal
    daemon = start(start_pvgpud, tmp_path, policy())
    a = with_context(daemon)
    b = hello(daemon, BOB_TOKEN)
    assert ctx_create(b)[0] == CUDA_ERROR_DEVICE_UNAVAILABLE
    daemon.config.write_text(policy(alice_mode="shared"))
    before = daemon.log().count("policy ")
    daemon.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 5
    while daemon.log().count("policy ") == before and time.monotonic() < deadline:
        time.sleep(0.02)
    st, ctx = ctx_create(b)
    assert st == 0
    b.queue("ctx_set", ctx=ctx)
    works(a)
    works(b)
    a.close()
    b.close()


def test_cuda_program_sees_devices_unavailable(programs, start_pvgpud, tmp_path):
    """An unmodified program of another VM, while alice has the GPU: its
    first CUDA call that needs a context fails with
    cudaErrorDevicesUnavailable, and it exits 1 without crashing."""
    daemon = start(start_pvgpud, tmp_path, policy())
    a = with_context(daemon)
    env = programs.pvgpu_env(daemon.tcp)
    env["PVGPU_TOKEN"] = BOB_TOKEN
    res = programs.run("memory", env, timeout=60)
    assert res.returncode == 1, programs.describe(res, daemon)
    assert "cudaErrorDevicesUnavailable" in res.stdout + res.stderr, \
        programs.describe(res, daemon)
    works(a)
    a.close()
