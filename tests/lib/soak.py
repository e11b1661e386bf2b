"""What the soak tests share (tests/integration/test_soak.py, and the
hostile one in tests/hostile): a session that works in rounds --
allocations near its VM's quota, copies both ways, a vec_add launch run by
the sim's CPU twin, a large allocation the quota refuses now and then --
and the per-VM account of what the backend let it hold.

Every round checks the kernel's sums and every call's status: a call may
fail only as an allocation the quota refuses (counted apart)."""
import os
import struct
import threading
import time
from pathlib import Path

import pvgpu_wire as W
from curesult import CUDA_ERROR_OUT_OF_MEMORY

BUILD = Path(__file__).resolve().parents[2] / os.environ.get("PVGPU_BUILD", "build")
TWINS = BUILD / "tests" / "sim-twins" / "libtest-twins.so"
VECADD = BUILD / "tests" / "kernels" / "images" / "vecadd.fatbin"

KiB, MiB = 1 << 10, 1 << 20


class VM:
    """What the test knows a VM holds: raised after the backend said yes,
    lowered before the test asks to free, so it never overstates what the
    backend has; if it ever exceeds the quota, the backend let it."""

    def __init__(self, name, quota, token):
        self.name, self.quota, self.token = name, quota, token
        self.lock = threading.Lock()
        self.held = 0
        self.peak = 0
        self.bytes = self.launches = self.rounds = self.refused = 0
        self.errors = []

    def take(self, size):
        with self.lock:
            self.held += size
            self.peak = max(self.peak, self.held)
            if self.held > self.quota:
                self.errors.append(f"{self.name} holds {self.held} bytes, quota {self.quota}")

    def give(self, size):
        with self.lock:
            self.held -= size


def vectors(index, n):
    """vec_add's inputs for session index, and the sums it must give."""
    a = struct.pack(f"<{n}f", *[float(i % 1000) for i in range(n)])
    b = struct.pack(f"<{n}f", *[float((index * 7 + i) % 513) for i in range(n)])
    c = struct.pack(f"<{n}f", *[float(i % 1000 + (index * 7 + i) % 513) for i in range(n)])
    return a, b, c


class Worker:
    """One session of vm doing rounds on daemon's TCP listener.  open()
    connects, says hello and makes a context; setup() loads the module
    (charged to the VM at its image size); round(i) is one round of work;
    close() ends it, and forgets what it held."""

    def __init__(self, uri, vm, index, image, n, timeout=60):
        self.uri, self.vm, self.index, self.image, self.n = uri, vm, index, image, n
        self.timeout = timeout
        self.a, self.b, self.c = vectors(index, n)
        self.s = None
        self.module_charged = False

    def check(self, what, st):
        if st:
            raise AssertionError(f"{what}: CUresult {st}")

    def open(self):
        self.s = W.Session(self.uri, timeout=self.timeout)
        self.s.hello(token=self.vm.token)
        self.s.open_context()

    def release(self):
        """Before the session ends: the backend frees its module then."""
        if self.module_charged:
            self.vm.give(len(self.image))
            self.module_charged = False

    def close(self):
        self.release()
        if self.s:
            self.s.close()
            self.s = None

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
        """The module, loaded; False when the quota refused it."""
        s = self.s
        st, _, out, _ = s.call("module_load", data_in=self.image, size=len(self.image))
        if st == CUDA_ERROR_OUT_OF_MEMORY:
            return False
        self.check("module_load", st)
        self.vm.take(len(self.image))     # charged at its image size
        self.module_charged = True
        st, _, f, _ = s.call("module_get_function", module=out["module"], name="vec_add")
        self.check("module_get_function", st)
        self.func, self.offsets = f["func"], f["param_offset"]
        return True

    def pressure(self, i):
        """Round i's large allocation: an eighth to five eighths of the quota."""
        return self.vm.quota // 8 + (i * 97 + self.index * 31) % (self.vm.quota // 2)

    def round(self, i):
        """One round; False when the quota refused one of its buffers."""
        s, vm, n = self.s, self.vm, self.n
        bufs = []
        try:
            for _ in range(3):
                p = self.alloc(4 * n)
                if p is None:
                    with vm.lock:
                        vm.refused += 1
                    return False
                bufs.append(p)
            for p, data in zip(bufs, (self.a, self.b)):
                self.check("memcpy_htod", s.call("memcpy_htod", data_in=data, dst=p,
                                                 size=len(data), stream=0)[0])
            params = bytearray(self.offsets[3] + 4)
            for k, p in enumerate(bufs):
                struct.pack_into("<Q", params, self.offsets[k], p)
            struct.pack_into("<i", params, self.offsets[3], n)
            s.queue("launch_kernel", func=self.func, grid_x=-(-n // 256), grid_y=1,
                    grid_z=1, block_x=256, block_y=1, block_z=1, shared_bytes=0,
                    stream=0, params=bytes(params))
            st, deferred, _, _ = s.call("ctx_synchronize")
            self.check("ctx_synchronize", st or deferred)
            st, _, _, back = s.call("memcpy_dtoh", src=bufs[2], size=4 * n, stream=0)
            self.check("memcpy_dtoh", st)
            if back != self.c:
                raise AssertionError("vec_add gave wrong sums")
            # Pressure: a large allocation the quota refuses now and then.
            size = self.pressure(i)
            p = self.alloc(size)
            if p is None:
                with vm.lock:
                    vm.refused += 1
            else:
                self.free(p, size)
            with vm.lock:
                vm.bytes += 3 * 4 * n
                vm.launches += 1
                vm.rounds += 1
            return True
        finally:
            for p in bufs:
                self.free(p, 4 * n)


def wait_idle(daemon, timeout=30.0):
    """Every session the log says started has ended."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        log = daemon.log()
        if log.count(" start: ") == log.count(" end: "):
            return
        time.sleep(0.05)
    raise AssertionError("sessions did not end:\n" + daemon.log()[-5000:])


def assert_quota_back(daemon, vms):
    """Every VM has its whole quota again (cuMemGetInfo through the
    protocol: the quota as total, what the VM has left as free)."""
    for vm in vms:
        s = W.Session(daemon.tcp)
        s.hello(token=vm.token)
        s.open_context()
        st, _, out, _ = s.call("mem_get_info")
        assert st == 0 and (out["free"], out["total"]) == (vm.quota, vm.quota), \
            (vm.name, st, out)
        s.close()


def print_table(vms, elapsed):
    print(f"{'vm':>6} {'rounds':>7} {'launch/s':>9} {'MiB/s':>8} {'refused':>8} "
          f"{'peak KiB':>9}")
    for vm in vms:
        print(f"{vm.name:>6} {vm.rounds:7d} {vm.launches / elapsed:9.1f} "
              f"{vm.bytes / MiB / elapsed:8.1f} {vm.refused:8d} {vm.peak // KiB:9d}")
