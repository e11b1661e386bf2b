"""Workers of one VM stopped at random moments stop nothing else (DESIGN §5).

A tenant's worker can be stopped at any instruction: SIGSTOP, a debugger,
a cgroup freezer.  Workers of every VM share locks (a VM's quota, the
GPUs' exclusive mode, the IPC registry, the scheduler's per-device lock),
and a robust mutex is handed on when its holder dies, not when it stops:
were the supervisor to wait on one, a worker stopped inside would freeze
every VM's admissions, the watchdog, reaping and SIGTERM; were workers to
wait on one for good, it would freeze other VMs' sessions.

Here VM alice's sessions take those locks all the time: contexts made
again and again, allocations and frees charged to its quota in batches,
IPC exports, kernel launches through the scheduler.  The session table
is large (--max-sessions), which lengthens each hold, as the charges and
the scheduler scan it, so that many stops land inside one.  Meanwhile
the test stops and continues alice's workers at random, thousands of
times, leaving some stopped for a few seconds, past the bound after which
a waiter kills a stopped holder, and some for good (among those it caught
running their own code, where locks are held).  VM bob opens one session
after another, each of which must be admitted and served (a context, a
module, memory, a launch) within BOB_BOUND_S.  Afterwards the supervisor
has reaped every worker that died, no worker of bob was killed, each
worker killed over a lock has its session's end line, and SIGTERM ends
pvgpud cleanly, leaving no worker behind.
"""
import os
import random
import re
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import pvgpu_wire as W  # noqa: E402
from pvgpu_sessions import alice_and_bob, wait_live  # noqa: E402
from idle import children  # noqa: E402
from workers import (KILLED, Workers, live_in_log, signal_if_alive,  # noqa: E402
                     stop_at_random, zombies)

BUILD = Path(__file__).resolve().parents[2] / os.environ.get("PVGPU_BUILD", "build")
IMAGE = BUILD / "tests" / "kernels" / "images" / "vecadd.fatbin"
TWINS = BUILD / "tests" / "sim-twins" / "libtest-twins.so"
BOB_TOKEN = "bob-stopped-31f4"

LOAD_S = 30.0           # how long alice is stopped and continued
TENANTS = 3             # alice's guests, each a session after another
BATCH = 48              # allocations sent at once, then freed at once
ROUNDS = 10             # batches per session before it ends
STALL_S = 1.5           # a guest gives up on a session that long silent
SHORT_STOP_S = 0.004    # most stops are shorter than this
LONG_STOP_S = (2.5, 4.0)    # past the 2 s bound (shlock.h), then continued
LONG_STOPS = 0.03       # share of stops that are long
FOREVER = 6             # workers left stopped for good,
FOREVER_TRIES = 0.05    # of the stops that land in their own code
BOB_BOUND_S = 10.0      # a loaded 2-core machine; a wedge is for ever
REAP_S = 15.0
STOP_S = 10.0           # SIGTERM to exit



def pipeline(s, op, calls):
    """calls (keyword dicts) of the sync op op sent at once, then their
    replies read: [(status, outputs)]."""
    first = s.next_id
    s.next_id += len(calls)
    s.send(b"".join(W.message(op, first + i, **kw) for i, kw in enumerate(calls)))
    out = []
    for _ in calls:
        _op, _flags, _id, payload = s.read_message()
        out.append((struct.unpack_from("<i", payload)[0],
                    W.decode_fields(W.P.OPS[op][4], payload[8:])))
    return out


def vec_add(s, blob, n=256):
    """vecadd.fatbin's kernel loaded in session s: its handle, its
    parameters over three fresh buffers, and the first buffer."""
    st, _, out, _ = s.call("module_load", data_in=blob, size=len(blob))
    assert st == 0, st
    st, _, fn, _ = s.call("module_get_function", module=out["module"], name="vec_add")
    assert st == 0, st
    raw = bytearray(fn["param_offset"][-1] + fn["param_size"][-1])
    bufs = [s.alloc(4 * n) for _ in range(3)]
    for i, buf in enumerate(bufs):
        struct.pack_into("<Q", raw, fn["param_offset"][i], buf)
    struct.pack_into("<i", raw, fn["param_offset"][3], n)
    return fn["func"], bytes(raw), bufs[0]


def launch(s, func, params, count=1):
    for _ in range(count):
        s.queue("launch_kernel", func=func, grid_x=1, grid_y=1, grid_z=1,
                block_x=256, block_y=1, block_z=1, shared_bytes=0, stream=0,
                params=params)
    st, deferred, _, _ = s.call("ctx_synchronize")
    return st or deferred


def tenant(uri, blob):
    """One of alice's guests: sessions that take the shared locks all the
    time, one after another, until it is killed.  A session whose worker
    is stopped or killed is left for a new one."""
    while True:
        s = None
        try:
            s = W.Session(uri, timeout=STALL_S)
            s.hello()
            s.open_context()                        # the GPUs' lock
            func, params, buf = vec_add(s, blob)
            for _ in range(ROUNDS):
                got = pipeline(s, "mem_alloc", [{"size": 4096}] * BATCH)   # the quota's
                pipeline(s, "mem_free", [{"dptr": o["dptr"]} for st, o in got if st == 0])
                s.call("ipc_get_mem_handle", dptr=buf)     # the registry's
                launch(s, func, params, 4)          # the scheduler's
        except (OSError, EOFError, AssertionError, struct.error):
            pass
        finally:
            if s:
                s.close()


def bob_session(daemon, blob):
    """One session of bob, admitted and served: seconds it took."""
    t0 = time.monotonic()
    s = W.Session(daemon.tcp, timeout=BOB_BOUND_S)
    try:
        s.hello(token=BOB_TOKEN)
        s.open_context()
        func, params, _ = vec_add(s, blob)
        assert launch(s, func, params) == 0
    finally:
        s.close()
    return time.monotonic() - t0



def test_stopped_workers_stop_nothing_else(start_pvgpud, tmp_path):
    for path in (IMAGE, TWINS):
        if not path.exists():
            pytest.fail(f"{path} is not built (run `make`)")
    blob = IMAGE.read_bytes()
    daemon = alice_and_bob(start_pvgpud, tmp_path, BOB_TOKEN, "memory = 1G",
                           extra_args=("--max-sessions", "65536"),
                           env={"PVGPU_SIM_TWINS": str(TWINS)})
    wait_live(daemon)
    workers = Workers(daemon)
    seed = random.randrange(1 << 30)
    bob_took, bob_failed, done = [], [], threading.Event()

    def bob():
        while not done.is_set():
            try:
                bob_took.append(bob_session(daemon, blob))
            except Exception as e:     # noqa: BLE001 -- reported below
                bob_failed.append(f"{type(e).__name__}: {e}")
                return
            if bob_took[-1] > BOB_BOUND_S:
                return
            time.sleep(0.2)

    script = tmp_path / "tenant.py"
    script.write_text(f"import sys\nsys.path.insert(0, {str(Path(__file__).parent)!r})\n"
                      f"import test_stopped_workers as t\n"
                      f"t.tenant({daemon.unix!r}, open({str(IMAGE)!r}, 'rb').read())\n")
    tenants = [subprocess.Popen([sys.executable, str(script)], env=dict(os.environ),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
               for _ in range(TENANTS)]
    bob_thread = threading.Thread(target=bob, daemon=True)
    forever = []
    try:
        bob_thread.start()
        t0 = time.monotonic()
        stops, forever = stop_at_random(
            daemon.log_path, daemon.proc.pid, seed, ["alice"],
            lambda: time.monotonic() - t0 >= LOAD_S or not bob_thread.is_alive(),
            short_s=SHORT_STOP_S, long_s=LONG_STOP_S, long_share=LONG_STOPS,
            forever_max=FOREVER, forever_share=FOREVER_TRIES, pause_s=0)
        done.set()
        bob_thread.join(timeout=BOB_BOUND_S + 5)
        print(f"seed {seed}: {stops} stops, {len(forever)} left stopped; "
              f"bob's {len(bob_took)} sessions took at most "
              f"{max(bob_took, default=0):.2f} s")
        assert not bob_failed and not bob_thread.is_alive(), \
            f"seed {seed}: a session of bob failed or hung after {len(bob_took)} " \
            f"({bob_failed}):\n{daemon.log()[-4000:]}"
        assert len(bob_took) >= 5 and max(bob_took) <= BOB_BOUND_S, (seed, bob_took)
        assert stops >= 1000, stops

        # Alice's guests go; the workers stopped for a while go on and end.
        for t in tenants:
            t.kill()
            t.wait()
        deadline = time.monotonic() + REAP_S
        while True:
            log = daemon.log()
            live = [p for p in children(daemon.proc.pid) if p not in zombies(daemon.proc.pid)]
            if not zombies(daemon.proc.pid) and live_in_log(log) == len(live):
                break
            assert time.monotonic() < deadline, \
                f"seed {seed}: not reaped: {len(live)} workers, {live_in_log(log)} " \
                f"sessions not ended in the log:\n{log[-4000:]}"
            time.sleep(0.1)
        # Killed over a lock: only stopped workers (alice's), each session ended.
        killed = KILLED.findall(log)
        print(f"{len(killed)} worker(s) killed for holding a shared lock")
        for _whose, _pid, session, vm in killed:
            assert vm == "alice", (seed, _whose)
            assert re.search(rf" info: session {session} end: .*, worker killed by signal 9 ", log), \
                (seed, session)
        print(f"{log.count('its slot is kept until a scheduler lock is free')} "
              f"reap(s) found a scheduler lock busy")
        # Those still stopped, and everyone else, go with pvgpud's SIGTERM.
        left = children(daemon.proc.pid)
        stopped = [p for p in forever if workers.alive(p)]
        t1 = time.monotonic()
        daemon.proc.send_signal(signal.SIGTERM)
        assert daemon.proc.wait(timeout=STOP_S) == 0, daemon.log()[-4000:]
        print(f"SIGTERM with {len(left)} worker(s), {len(stopped)} of them stopped: "
              f"exited in {time.monotonic() - t1:.2f} s")
        assert [p for p in left if os.path.exists(f"/proc/{p}")] == []
    finally:
        done.set()
        for t in tenants:
            if t.poll() is None:
                t.kill()
                t.wait()
        workers.refresh()
        for pid in list(workers.vm):
            signal_if_alive(workers, pid, signal.SIGKILL)
        if daemon.proc.poll() is None:
            daemon.proc.kill()
            daemon.proc.wait()
