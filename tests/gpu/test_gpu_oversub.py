"""On the GPU: suspending sessions and oversubscribing the GPU's memory
(README "Suspending a session", "Oversubscribing a GPU's memory") as a
user and an operator see them.

- A PyTorch training run suspended between two steps goes on to the same
  losses, bit for bit, as the same run left alone, and as natively.
- How fast a session's memory goes to host memory and comes back, for
  1, 4 and 16 GiB: printed, never asserted; the data must be intact.
- Three VMs promised 1.8 times what pvgpud gives VMs of the GPU
  (`[gpu 0] memory`: the H200's 141 GB are more than this host's RAM
  could take in) take turns with their data intact, and an allocation
  that cannot fit even then is out of memory.

Each test prints a `suspend-figures:` line (pytest -s, or the failure's
output) with what pvgpud's log and the test's own clocks measured.
"""
import os
import queue
import re
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import pvgpu_wire as W  # noqa: E402
from curesult import CUDA_ERROR_OUT_OF_MEMORY  # noqa: E402
from gpu_suspend import (UNITS, gpu_memory_used_mib, moves, rate,  # noqa: E402
                         short_admin_path, state, suspend)
from pvgpud_cli import require_policy_file  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TRAIN = Path(__file__).parent / "frameworks" / "torch_train.py"
GiB = 1 << 30
MiB = 1 << 20
STEPS = 40
PAUSE_AT = 15
STEP_LINE = re.compile(r"^step (\d+) loss (\S+) (\S+) time (\S+)$", re.M)


def started(daemon):
    return [int(n) for n in re.findall(r"session (\d+) start: ", daemon.log())]


# ---- a PyTorch training run, suspended between two steps -----------------

def train_env(libdir=None, uri=None):
    """The run's environment: natively (torch's own runtime over NVIDIA's
    libcuda.so.1), or through pvgpu (its libcuda.so.1 first on the library
    path, not LD_PRELOAD: libraries dlsym the driver by name)."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PVGPU_DEVICES", "PVGPU_TOKEN", "LD_LIBRARY_PATH", "LD_PRELOAD")}
    env.update(PYTHONUNBUFFERED="1", CUBLAS_WORKSPACE_CONFIG=":4096:8")
    if uri:
        env.update(LD_LIBRARY_PATH=str(libdir), PVGPU_DEVICES=uri)
    return env


def losses(stdout):
    """{step: (loss as float.hex, its time in s)} of a finished run."""
    found = {int(m.group(1)): (m.group(2), float(m.group(4))) for m in STEP_LINE.finditer(stdout)}
    assert sorted(found) == list(range(1, STEPS + 1)), stdout[-3000:]
    assert "ballast intact True" in stdout, stdout[-3000:]
    return found


def train(env, daemon=None):
    res = subprocess.run([sys.executable, str(TRAIN)], env=env, stdin=subprocess.DEVNULL,
                         capture_output=True, text=True, errors="replace", timeout=600,
                         cwd=REPO)
    assert res.returncode == 0, f"rc {res.returncode}\n{res.stdout[-2000:]}\n" \
        f"{res.stderr[-4000:]}" + (f"\npvgpud:\n{daemon.log()[-3000:]}" if daemon else "")
    return losses(res.stdout)


class Paused:
    """The training run started with PAUSE_AT, its stdout read by a thread
    so that a hung run fails the test instead of blocking it."""

    def __init__(self, env, daemon):
        self.daemon = daemon
        # A file, not a pipe nobody reads while it runs: warnings cannot block it.
        self.err = tempfile.TemporaryFile(mode="w+", errors="replace")
        self.proc = subprocess.Popen([sys.executable, str(TRAIN), str(PAUSE_AT)], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.err, text=True, errors="replace",
                                     cwd=REPO)
        self.lines, self.out = queue.Queue(), []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.out.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def until_paused(self, timeout=300):
        """The bytes torch's allocator holds, once the run has paused."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                line = None
            if line is None:
                self.proc.kill()
                pytest.fail(f"no pause within {timeout} s:\n{''.join(self.out)[-2000:]}\n"
                            f"{self.stderr()[-4000:]}\n{self.daemon.log()[-3000:]}")
            m = re.match(r"paused at \d+ reserved (\d+)$", line.strip())
            if m:
                return int(m.group(1))

    def stderr(self):
        self.err.seek(0)
        return self.err.read()

    def go_on(self, timeout=600):
        self.proc.stdin.write("go\n")
        self.proc.stdin.close()
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        err = self.stderr()
        out = "".join(self.out)
        assert rc == 0, f"rc {rc}\n{out[-2000:]}\n{err[-4000:]}\n{self.daemon.log()[-3000:]}"
        return losses(out)


def test_training_suspended_between_steps_gives_the_same_losses(start_pvgpud, libdir):
    if subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode:
        pytest.skip(f"torch is not installed in {sys.executable}")
    admin = short_admin_path()
    daemon = start_pvgpud("cuda", extra_args=["--admin", admin, "--suspend-timeout", "300"])
    uri = "shm://" + daemon.unix[len("unix://"):]
    native = train(train_env())
    before = len(started(daemon))
    plain = train(train_env(libdir, uri), daemon)
    assert len(started(daemon)) > before, "pvgpud saw no session:\n" + daemon.log()[-3000:]

    before = started(daemon)
    run = Paused(train_env(libdir, uri), daemon)
    reserved = run.until_paused()
    new = [n for n in started(daemon) if n not in before]
    assert len(new) == 1, f"sessions {new} for one run:\n{daemon.log()[-3000:]}"
    sid = new[0]
    used = gpu_memory_used_mib()
    suspend_wall = suspend(sid, admin, daemon)
    during = gpu_memory_used_mib()
    # What torch's allocator holds (the 1 GiB ballast in it) left the GPU.
    assert during <= used - reserved // MiB, (used, during, reserved, daemon.log()[-2000:])
    # The run is idle at its pause: nothing of it should have resumed it.
    still = state(sid, admin)
    suspended = run.go_on()
    log = daemon.log()
    out_moves, back_moves = moves(log, sid, "suspended"), moves(log, sid, "resumed")
    assert len(out_moves) == 1 and len(back_moves) == 1, log[-3000:]

    times = [t for step, (_, t) in suspended.items() if step not in (1, PAUSE_AT + 1)]
    median = statistics.median(times)
    first = suspended[PAUSE_AT + 1][1]
    same_as_native = all(native[k][0] == plain[k][0] for k in native)
    worst = max(abs(float.fromhex(native[k][0]) - float.fromhex(plain[k][0])) /
                abs(float.fromhex(native[k][0])) for k in native)
    print(f"suspend-figures: torch run, session {sid}: "
          f"suspend {rate(*out_moves[0])} of {out_moves[0][0] / GiB:.2f} GiB "
          f"(pvgpuctl {suspend_wall:.2f} s), resume {rate(*back_moves[0])}; "
          f"step {PAUSE_AT + 1} took {first * 1e3:.1f} ms against a median step of "
          f"{median * 1e3:.1f} ms: first call +{(first - median) * 1e3:.1f} ms; "
          f"state before go: {still}; pvgpu against native: "
          f"{'bit for bit' if same_as_native else f'max relative difference {worst:.3g}'}")

    wrong = [f"step {k}: pvgpu {plain[k][0]} suspended {suspended[k][0]}"
             for k in plain if plain[k][0] != suspended[k][0]]
    assert not wrong, "\n".join(wrong)
    # The same GPU, libraries and deterministic kernels: pvgpu forwards
    # them, so natively the losses should be the same too.  Held to 1e-6
    # relative, not bits, so that a library choosing another kernel for
    # what pvgpu reports (memory total: a VM's quota) is not taken for a
    # wrong result; the figures line says which it was.
    assert worst <= 1e-6, [(k, native[k][0], plain[k][0]) for k in native
                           if native[k][0] != plain[k][0]]


# ---- suspend and resume rates -------------------------------------------

CHUNK = 256 * MiB
SAMPLE = MiB


def chunk_word(i):
    """The 32-bit value chunk i is filled with: differs between chunks."""
    return 0x5A000000 | (i * 0x9E37) & 0xFFFFFF


def sampled(size):
    """The chunks checked: the first, the last and six between."""
    n = size // CHUNK
    return sorted({0, n - 1, *(i * n // 7 for i in range(1, 7))})


def tiny_call(s, dptr):
    t0 = time.perf_counter()
    st, _, _, back = s.call("memcpy_dtoh", src=dptr, size=4096, stream=0)
    took = time.perf_counter() - t0
    assert st == 0 and len(back) == 4096, st
    return took


@pytest.mark.parametrize("gib", [1, 4, 16])
def test_suspend_and_resume_rates(start_pvgpud, gib):
    """SIZE GiB of a session's memory to host memory and back: each chunk
    filled with its own word, a random MiB written in the middle of the
    sampled ones; after the resume both are read back from those."""
    size = gib * GiB
    admin = short_admin_path()
    daemon = start_pvgpud("cuda", extra_args=["--admin", admin, "--suspend-timeout", "600"])
    s = W.Session(daemon.unix, timeout=600)
    s.hello()
    s.open_context()
    dptr = s.alloc(size)
    for i in range(size // CHUNK):
        s.queue("memset_async", dst=dptr + i * CHUNK, value=chunk_word(i), elem_size=4,
                count=CHUNK // 4, stream=0)
    st, deferred, _, _ = s.call("ctx_synchronize")
    assert st == 0 and deferred == 0, (st, deferred)
    noise = {i: os.urandom(SAMPLE) for i in sampled(size)}
    for i, data in noise.items():
        st = s.call("memcpy_htod", dst=dptr + i * CHUNK + CHUNK // 2, size=SAMPLE,
                    data_in=data, stream=0)[0]
        assert st == 0
    resident = statistics.median(tiny_call(s, dptr) for _ in range(5))
    sid = started(daemon)[-1]
    before = gpu_memory_used_mib()

    suspend_wall = suspend(sid, admin, daemon)
    during = gpu_memory_used_mib()
    assert during <= before - size // MiB, (before, during, daemon.log()[-2000:])
    first = tiny_call(s, dptr)       # the guest's next call resumes the session
    log = daemon.wait_log(r"session %d resumed: " % sid)
    out_moves, back_moves = moves(log, sid, "suspended"), moves(log, sid, "resumed")
    assert len(out_moves) == 1 and len(back_moves) == 1, log[-3000:]
    print(f"suspend-figures: {gib} GiB suspend {rate(*out_moves[0])}, "
          f"resume {rate(*back_moves[0])}, first call +{(first - resident) * 1e3:.1f} ms "
          f"({first * 1e3:.1f} ms, resident {resident * 1e3:.3f} ms; pvgpuctl suspend "
          f"{suspend_wall:.2f} s; moved {out_moves[0][0] / GiB:.2f} GiB as pvgpud counts it)")

    for i, data in noise.items():
        st, _, _, back = s.call("memcpy_dtoh", src=dptr + i * CHUNK + CHUNK // 2, size=SAMPLE,
                                stream=0)
        assert st == 0 and back == data, f"chunk {i}: its random MiB differs"
        st, _, _, back = s.call("memcpy_dtoh", src=dptr + i * CHUNK, size=SAMPLE, stream=0)
        assert st == 0 and back == struct.pack("<I", chunk_word(i)) * (SAMPLE // 4), \
            f"chunk {i}: its fill differs"
    assert gpu_memory_used_mib() >= before - 64
    s.close()


# ---- three VMs over what pvgpud gives VMs of the GPU --------------------

CAP = 8 * GiB                   # [gpu 0] memory: what VMs may have of the GPU
QUOTA = CAP * 6 // 10           # 4.8 GiB each: three of them 1.8 x the cap
VMS = ("alice", "bob", "carol")


def vm_alloc(daemon):
    """Each VM's allocation: whole chunks that fit its quota beside its
    context (which the quota and the cap count too: 523.6 MiB on an H200
    with driver 580, as pvgpud's start-up line says), more than half the
    cap, so that no two sessions fit it together."""
    m = re.search(r"device 0: .* a context takes ([\d.]+) (GiB|MiB|B)", daemon.log())
    assert m, daemon.log()[-3000:]
    ctx = int(float(m.group(1)) * UNITS[m.group(2)])
    alloc = (QUOTA - ctx - 16 * MiB) // CHUNK * CHUNK
    assert alloc > CAP // 2, f"a context of {ctx} bytes leaves too little of a quota " \
        f"of {QUOTA} for two sessions not to fit {CAP} together"
    return alloc


def oversub_daemon(start_pvgpud, tmp_path):
    conf = tmp_path / "pvgpud.conf"
    text = (f"[default]\npolicy = refuse\n\n[gpu 0]\nmemory = {CAP}\n"
            f"oversubscribe = 1.8\n\n")
    for vm in VMS + ("dave",):
        quota = 12 * GiB if vm == "dave" else QUOTA
        text += f"[vm {vm}]\ntoken = {vm}-gpu-oversub\nmemory = {quota}\n\n"
    conf.write_text(text)
    return start_pvgpud("cuda", extra_args=["--config", str(conf),
                                            "--suspend-timeout", "300"])


def vm_session(daemon, vm):
    s = W.Session(daemon.tcp, timeout=600)
    s.hello(token=f"{vm}-gpu-oversub")
    s.open_context()
    return s


def vm_word(n, i):
    return 0x3C000000 | (n << 16) | i


def fill_vm(s, n, dptr, alloc):
    """Each 256 MiB of the VM's allocation its own word, and a random MiB
    at the start of the first and last chunk: {offset: bytes} to check."""
    for i in range(alloc // CHUNK):
        s.queue("memset_async", dst=dptr + i * CHUNK, value=vm_word(n, i), elem_size=4,
                count=CHUNK // 4, stream=0)
    st, deferred, _, _ = s.call("ctx_synchronize")
    assert st == 0 and deferred == 0, (st, deferred)
    want = {}
    for off in (0, alloc - CHUNK):
        want[off] = os.urandom(SAMPLE)
        assert s.call("memcpy_htod", dst=dptr + off, size=SAMPLE, data_in=want[off],
                      stream=0)[0] == 0
    for i in (1, alloc // CHUNK // 2):
        want[i * CHUNK] = struct.pack("<I", vm_word(n, i)) * (SAMPLE // 4)
    return want


def intact(s, dptr, want):
    for off, data in want.items():
        st, _, _, back = s.call("memcpy_dtoh", src=dptr + off, size=len(data), stream=0)
        if st or back != data:
            return False
    return True


def test_three_vms_over_the_gpu_memory_cap_take_turns(start_pvgpud, tmp_path):
    require_policy_file()
    daemon = oversub_daemon(start_pvgpud, tmp_path)
    alloc = vm_alloc(daemon)
    ss, ptrs, want = {}, {}, {}
    t0 = time.monotonic()
    for n, vm in enumerate(VMS):
        ss[vm] = vm_session(daemon, vm)
        st, _, out, _ = ss[vm].call("mem_alloc", size=alloc)
        assert st == 0, (vm, st, daemon.log()[-3000:])
        ptrs[vm] = out["dptr"]
        want[vm] = fill_vm(ss[vm], n, ptrs[vm], alloc)
    log = daemon.log()
    # Each allocation past the first suspended the session before it.
    assert len(re.findall(r"session \d+: suspending it to make room on device 0", log)) >= 2, \
        log[-3000:]
    # Each check resumes its session, suspending another to make room; twice round.
    for _ in range(2):
        for vm in VMS:
            assert intact(ss[vm], ptrs[vm], want[vm]), (vm, daemon.log()[-3000:])
    turns = time.monotonic() - t0
    log = daemon.log()
    ids = dict((vm, int(sid)) for sid, vm in
               re.findall(r"session (\d+) start: .*?vm (\w+)", log))
    out_moves = [m for vm in VMS for m in moves(log, ids[vm], "suspended")]
    back_moves = [m for vm in VMS for m in moves(log, ids[vm], "resumed")]
    assert len(back_moves) >= 4, log[-3000:]
    print(f"suspend-figures: three VMs of {alloc / GiB:.2f} GiB under a {CAP / GiB:.0f} GiB "
          f"cap: {len(out_moves)} suspends, {len(back_moves)} resumes in {turns:.1f} s; "
          f"suspend median {statistics.median(t for _, t in out_moves):.2f} s, resume median "
          f"{statistics.median(t for _, t in back_moves):.2f} s")

    # More than the cap even with everybody else moved out: out of memory,
    # and nobody suspended for it.
    suspends = len(out_moves)
    dave = vm_session(daemon, "dave")
    assert dave.call("mem_alloc", size=CAP + GiB)[0] == CUDA_ERROR_OUT_OF_MEMORY
    daemon.wait_log(r"mem_alloc of %d bytes on device 0: out of memory after making room"
                    % (CAP + GiB))
    log = daemon.log()
    assert sum(len(moves(log, ids[vm], "suspended")) for vm in VMS) == suspends, log[-3000:]
    for vm in VMS:
        assert intact(ss[vm], ptrs[vm], want[vm]), (vm, daemon.log()[-3000:])
    for s in list(ss.values()) + [dave]:
        s.close()
