"""Idle costs nothing: SESSIONS sessions over shm:// (the
control ring in a shared window) that made their calls and then wait use
under 1% of one core between them -- pvgpud, its workers and the guest
processes together -- measured from the kernel's per-thread run time
(/proc/PID/task/TID/schedstat, nanoseconds).  Used against the sim in CI
(tests/integration/test_idle.py) and the real GPU (tests/gpu), where
NVIDIA's driver runs a thread of its own in every process with a context
(natively too), counted apart."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pvgpu_guest import guest_env

SESSIONS = 32
MEASURE_S = 3.0
SETTLE_S = 1.0

GUEST = r'''
import ctypes, sys
cu = ctypes.CDLL(sys.argv[1])
def must(name, *args):
    r = getattr(cu, name)(*args)
    if r:
        sys.exit("%s -> %d" % (name, r))
must("cuInit", 0)
dev, ctx, d = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
must("cuDeviceGet", ctypes.byref(dev), 0)
must("cuCtxCreate_v2", ctypes.byref(ctx), 0, dev)
must("cuMemAlloc_v2", ctypes.byref(d), ctypes.c_size_t(4096))
must("cuMemsetD8Async", d, 1, ctypes.c_size_t(4096), None)
must("cuCtxSynchronize")
print("ready", flush=True)
sys.stdin.read()            # idle until the test closes our stdin
must("cuCtxSynchronize")
print("done", flush=True)
'''


def thread_ns(pids):
    """{(pid, tid): (thread name, nanoseconds run so far)} of pids' threads."""
    found = {}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except FileNotFoundError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/comm") as f:
                    name = f.read().strip()
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    found[(pid, int(tid))] = (name, int(f.read().split()[0]))
            except (FileNotFoundError, ProcessLookupError, ValueError):
                pass
    return found


def driver_thread(name):
    """A thread NVIDIA's driver starts in every process with a context
    (cuda-EvtHandlr, cudaNNNN...): there natively as well."""
    return name.startswith("cuda")


def measure(pids):
    """After SETTLE_S, the share of one core pids used over MEASURE_S:
    {"all": share, "pvgpu": share without NVIDIA's driver threads,
    "busiest": [(share, pid, thread name)] of the top five}."""
    time.sleep(SETTLE_S)            # past every bounded spin
    before = thread_ns(pids)
    t0 = time.monotonic()
    time.sleep(MEASURE_S)
    elapsed = (time.monotonic() - t0) * 1e9
    after = thread_ns(pids)
    used = {k: (name, ns - before[k][1]) for k, (name, ns) in after.items()
            if k in before}
    return {
        "all": sum(ns for _, ns in used.values()) / elapsed,
        "pvgpu": sum(ns for name, ns in used.values()
                     if not driver_thread(name)) / elapsed,
        "busiest": sorted(((ns / elapsed, k[0], name) for k, (name, ns) in used.items()),
                          reverse=True)[:5],
    }


def start_guests(guests, script, libcuda, env, sessions):
    """Start `sessions` guests into the list guests (so the caller's
    stop_guests() reaches every one started, even if one fails) and wait
    until each says it is ready."""
    for _ in range(sessions):
        guests.append(subprocess.Popen([sys.executable, str(script), str(libcuda)],
                                       env=env, stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True))
    for g in guests:
        line = g.stdout.readline()
        assert line.strip() == "ready", line + g.stderr.read()


def stop_guests(guests):
    for g in guests:
        if g.poll() is None:
            g.kill()
            g.wait()


def children(pid):
    """The processes whose parent is pid (pvgpud's workers: one per
    session)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue            # gone meanwhile
        # pid (comm) state ppid ...: comm may hold spaces, so after ')'.
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry))
    return found


def idle_sessions_share(daemon, libcuda, tmp_path, sessions=SESSIONS):
    """Start `sessions` guests on daemon (a started pvgpud) over shm://,
    let them go idle and measure pvgpud, its workers and the guests
    together (measure()); then check every guest still answers."""
    if not Path("/proc/self/task").exists() or \
            not Path(f"/proc/self/task/{os.getpid()}/schedstat").exists():
        pytest.skip("no /proc/PID/task/TID/schedstat (kernel without schedstats)")
    if not Path(libcuda).exists():
        pytest.fail(f"{libcuda} is not built (run `make`)")
    script = tmp_path / "guest.py"
    script.write_text(GUEST)
    # A small window each: 32 of the default 1 GiB would be 32 GiB of memfd
    # (touched only where used, but counted against the memfd limits);
    # PVGPU_DEBUG says whether the ring was taken.
    env = guest_env(Path(libcuda).parent, "shm://" + daemon.unix[len("unix://"):],
                    lib=libcuda, PVGPU_WINDOW_SIZE="64M", PVGPU_STAGING_SLOT="1M",
                    PVGPU_STAGING_SLOTS="4", PVGPU_DEBUG="1")
    guests = []
    try:
        start_guests(guests, script, libcuda, env, sessions)
        workers = children(daemon.proc.pid)
        assert len(workers) >= sessions, workers
        used = measure([daemon.proc.pid] + workers + [g.pid for g in guests])
        print(f"{sessions} idle sessions: {used['all']:.3%} of a core, "
              f"pvgpu's own threads {used['pvgpu']:.3%}")
        # And they still answer.
        for g in guests:
            out, err = g.communicate("", timeout=60)
            assert g.returncode == 0 and out.strip() == "done", out + err
            assert "control ring" in err, err
    finally:
        stop_guests(guests)
    return used


def native_idle_share(tmp_path, sessions=SESSIONS):
    """The same guests on NVIDIA's own libcuda.so.1, no pvgpu: measure()."""
    script = tmp_path / "native.py"
    script.write_text(GUEST)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PVGPU_DEVICES", "LD_LIBRARY_PATH", "LD_PRELOAD")}
    guests = []
    try:
        start_guests(guests, script, "libcuda.so.1", env, sessions)
        used = measure([g.pid for g in guests])
        print(f"{sessions} idle native processes: {used['all']:.3%} of a core")
    finally:
        stop_guests(guests)
    return used
