"""Soak: 32 concurrent sessions from 8 configured VMs
for a bounded run, each allocating and freeing near its VM's quota, copying
both ways and launching a kernel (vec_add, run by its CPU twin), with a
SIGHUP reload in the middle. No call may fail except allocations the quota
refuses; no VM ever holds more than its quota; when everything has ended
every VM's memory is back to its baseline. Per-VM throughput is printed
(pytest -s shows it).

The VMs are told apart by TCP tokens. PVGPU_SOAK_SESSIONS, PVGPU_SOAK_VMS and
PVGPU_SOAK_SECONDS scale it; the defaults are 32 x 8, for 20 s of
load, which keeps the whole test well under a minute on a 2-core machine,
sanitizer build included.
"""
import os
import signal
import struct
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import pvgpu_wire as W  # noqa: E402

REPO = Path(__file__).resolve().parent.parent.parent
BUILD = REPO / os.environ.get("PVGPU_BUILD", "build")
TWINS = BUILD / "tests" / "sim-twins" / "libtest-twins.so"
VECADD = BUILD / "tests" / "kernels" / "images" / "vecadd.fatbin"

SESSIONS = int(os.environ.get("PVGPU_SOAK_SESSIONS", "32"))
VMS = int(os.environ.get("PVGPU_SOAK_VMS", "8"))
SECONDS = float(os.environ.get("PVGPU_SOAK_SECONDS", "20"))

KiB, MiB = 1 << 10, 1 << 20
N = 32 * 1024                   # floats per vector: 128 KiB buffers
QUOTA = 4 * MiB                 # per VM
PER_VM = -(-SESSIONS // VMS)
PINNED = PER_VM * 4 * MiB       # each worker stages through 4 x 1 MiB

CUDA_ERROR_OUT_OF_MEMORY = 2


def token(v):
    return f"soak-vm{v}-token"


def policy(reloads=0):
    text = "[default]\npolicy = refuse\n"
    for v in range(VMS):
        text += textwrap.dedent(f"""
            [vm vm{v}]
            token = {token(v)}
            memory = {QUOTA}
            pinned = {PINNED}
            max_sessions = {PER_VM}
            weight = {1 + (v + reloads) % 3}
            """)
    if reloads:
        text += "\n[vm late]\ntoken = soak-late-token\nmemory = 1M\n"
    return text


class VM:
    """What the test knows a VM holds: raised after the backend said yes,
    lowered before the test asks to free, so it never overstates what the
    backend has; if it ever exceeds the quota, the backend let it."""

    def __init__(self, name):
        self.name = name
        self.lock = threading.Lock()
        self.held = 0
        self.peak = 0
        self.bytes = self.launches = self.rounds = self.refused = 0
        self.errors = []

    def take(self, size):
        with self.lock:
            self.held += size
            self.peak = max(self.peak, self.held)
            if self.held > QUOTA:
                self.errors.append(f"holds {self.held} bytes, quota {QUOTA}")

    def give(self, size):
        with self.lock:
            self.held -= size


class Session(threading.Thread):
    def __init__(self, daemon, vm, index, image, stop):
        super().__init__(daemon=True)
        self.vm, self.index, self.image, self.stop = vm, index, image, stop
        self.s = W.Session(daemon.tcp, timeout=60)
        self.s.hello(token=token(int(vm.name[2:])))
        self.s.open_context()
        self.a = struct.pack(f"<{N}f", *[float(i % 1000) for i in range(N)])
        self.b = struct.pack(f"<{N}f", *[float((index * 7 + i) % 513) for i in range(N)])
        self.c = struct.pack(f"<{N}f", *[float(i % 1000 + (index * 7 + i) % 513)
                                         for i in range(N)])

    def check(self, what, st):
        if st:
            raise AssertionError(f"{what}: CUresult {st}")

    def alloc(self, size):
        st, _, out, _ = self.s.call("mem_alloc", size=size)
        if st == 0:
            self.vm.take(size)
            return out["dptr"]
        if st != CUDA_ERROR_OUT_OF_MEMORY:
            self.check("mem_alloc", st)
        return None

    def free(self, ptr, size):
        self.vm.give(size)
        self.check("mem_free", self.s.call("mem_free", dptr=ptr)[0])

    def setup(self):
        s = self.s
        st, _, out, _ = s.call("module_load", data_in=self.image, size=len(self.image))
        self.check("module_load", st)
        self.vm.take(len(self.image))     # charged at its image size
        st, _, f, _ = s.call("module_get_function", module=out["module"], name="vec_add")
        self.check("module_get_function", st)
        self.func, self.offsets = f["func"], f["param_offset"]

    def round(self, i):
        s, vm = self.s, self.vm
        bufs = []
        try:
            for _ in range(3):
                p = self.alloc(4 * N)
                if p is None:
                    vm.refused += 1
                    return
                bufs.append(p)
            for p, data in zip(bufs, (self.a, self.b)):
                self.check("memcpy_htod", s.call("memcpy_htod", data_in=data, dst=p,
                                                 size=len(data), stream=0)[0])
            params = bytearray(self.offsets[3] + 4)
            for k, p in enumerate(bufs):
                struct.pack_into("<Q", params, self.offsets[k], p)
            struct.pack_into("<i", params, self.offsets[3], N)
            s.queue("launch_kernel", func=self.func, grid_x=N // 256, grid_y=1, grid_z=1,
                    block_x=256, block_y=1, block_z=1, shared_bytes=0, stream=0,
                    params=bytes(params))
            st, deferred, _, _ = s.call("ctx_synchronize")
            self.check("ctx_synchronize", st or deferred)
            st, _, _, back = s.call("memcpy_dtoh", src=bufs[2], size=4 * N, stream=0)
            self.check("memcpy_dtoh", st)
            if back != self.c:
                raise AssertionError("vec_add gave wrong sums")
            # Pressure: a large allocation the quota refuses now and then.
            size = (512 + (i * 97 + self.index * 31) % 2048) * KiB
            p = self.alloc(size)
            if p is None:
                vm.refused += 1
            else:
                self.free(p, size)
            with vm.lock:
                vm.bytes += 3 * 4 * N
                vm.launches += 1
                vm.rounds += 1
        finally:
            for p in bufs:
                self.free(p, 4 * N)

    def run(self):
        try:
            self.setup()
            i = 0
            while not self.stop.is_set():
                self.round(i)
                i += 1
        except Exception as e:  # noqa: BLE001 - every failure is a finding
            self.vm.errors.append(f"session {self.index}: {e!r}")
        finally:
            self.s.close()


def wait_idle(daemon, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        log = daemon.log()
        if log.count(" start: ") == log.count(" end: "):
            return
        time.sleep(0.05)
    raise AssertionError("sessions did not end:\n" + daemon.log()[-5000:])


def test_soak(start_pvgpud, tmp_path):
    for path in (TWINS, VECADD):
        if not path.exists():
            pytest.fail(f"{path} is not built (run `make test-programs`)")
    t_start = time.monotonic()
    config = tmp_path / "pvgpud.conf"
    config.write_text(policy())
    daemon = start_pvgpud("sim", extra_args=["--config", str(config), "--log-level", "info"],
                          env={"PVGPU_SIM_TWINS": str(TWINS)})
    wait_idle(daemon)
    image = VECADD.read_bytes()
    vms = [VM(f"vm{v}") for v in range(VMS)]
    stop = threading.Event()
    sessions = [Session(daemon, vms[i % VMS], i, image, stop) for i in range(SESSIONS)]
    t0 = time.monotonic()
    for s in sessions:
        s.start()

    # Halfway: reload the policy under load (new weights, one VM more).
    time.sleep(SECONDS / 2)
    config.write_text(policy(reloads=1))
    before = daemon.log().count(" policy ")
    daemon.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while daemon.log().count(" policy ") == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert daemon.log().count(" policy ") > before, daemon.log()[-3000:]
    time.sleep(max(0.0, SECONDS - (time.monotonic() - t0)))
    stop.set()
    for s in sessions:
        s.join(timeout=120)
    elapsed = time.monotonic() - t0
    assert not any(s.is_alive() for s in sessions), "sessions did not stop"

    print(f"\nsoak: {SESSIONS} sessions, {VMS} VMs, {elapsed:.1f} s of load, "
          f"quota {QUOTA // MiB} MiB per VM")
    print(f"{'vm':>5} {'rounds':>7} {'launch/s':>9} {'MiB/s':>8} {'refused':>8} "
          f"{'peak KiB':>9}")
    for vm in vms:
        print(f"{vm.name:>5} {vm.rounds:7d} {vm.launches / elapsed:9.1f} "
              f"{vm.bytes / MiB / elapsed:8.1f} {vm.refused:8d} {vm.peak // KiB:9d}")
    errors = [e for vm in vms for e in vm.errors]
    assert not errors, "\n".join(errors[:20]) + "\n" + daemon.log()[-5000:]
    assert all(vm.rounds > 0 for vm in vms), [vm.rounds for vm in vms]

    # Everything ended: every VM has its whole quota again.
    wait_idle(daemon)
    for v in range(VMS):
        s = W.Session(daemon.tcp)
        s.hello(token=token(v))
        s.open_context()
        st, _, out, _ = s.call("mem_get_info")
        assert st == 0 and (out["free"], out["total"]) == (QUOTA, QUOTA), (v, st, out)
        s.close()
    log = daemon.log()
    # The fixture's readiness probe on the Unix socket is a caller no [vm] names.
    bad = [line for line in log.splitlines()
           if (" warn: " in line or " error: " in line) and
           "its identity names no [vm]" not in line]
    assert not bad, "\n".join(bad[:20])
    print(f"soak: whole test {time.monotonic() - t_start:.1f} s")
