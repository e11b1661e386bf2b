"""What the guest already knows it answers itself (issue 15, DESIGN §4): a
synchronize or a stream/event query with nothing forwarded since the last
one that found its object idle does not cross the wire; one after async
work does, and an error of that async work is still reported there.

Counted with the client's own round-trip counter (pvgpu_wire_stats, which
both front-ends export), for pvgpu's libcuda.so.1 driven directly and for
the runtime shim, over shm:// (the control ring) and unix://.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / os.environ.get("PVGPU_BUILD", "build")
LIBCUDA = BUILD / "lib" / "libcuda.so.1"
SHIM = BUILD / "lib" / "libcudart.so.13"

COMMON = r'''
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
c_u64, c_int, c_size, vp = ctypes.c_uint64, ctypes.c_int, ctypes.c_size_t, ctypes.c_void_p
def call(name, *args):
    return getattr(lib, name)(*args)
def must(name, *args):
    r = call(name, *args)
    if r:
        sys.exit("%s -> %d" % (name, r))
stats = (ctypes.c_ulonglong * 5)()
def rt():
    assert lib.pvgpu_wire_stats(stats) >= 1
    return stats[1]
last = [0]
def step(label, *results):
    """One line: the step, the round trips since the last step, results."""
    now = rt()
    print(label, now - last[0], *results)
    last[0] = now
'''

DRIVER_SCRIPT = COMMON + r'''
must("cuInit", 0)
dev, ctx = c_int(), vp()
must("cuDeviceGet", ctypes.byref(dev), 0)
must("cuCtxCreate_v2", ctypes.byref(ctx), 0, dev)
d = c_u64()
must("cuMemAlloc_v2", ctypes.byref(d), c_size(64))
step("setup")
print("first-sync", call("cuCtxSynchronize"))
step("crossed")
r = [call("cuCtxSynchronize") for _ in range(5)]
r += [call("cuStreamSynchronize", None), call("cuStreamQuery", None),
      call("cuStreamSynchronize_ptsz", None), call("cuStreamQuery", vp(1)),
      call("cuStreamQuery", vp(2))]
step("idle", *r)
# Async work on the legacy stream: the next synchronize crosses, once.
must("cuMemsetD32Async", d, 7, c_size(16), None)
step("queued")
print("sync-after-work", call("cuCtxSynchronize"))
step("crossed")
step("again", call("cuCtxSynchronize"), call("cuStreamQuery", None))
buf = (ctypes.c_uint32 * 16)()
must("cuMemcpyDtoH_v2", buf, d, c_size(64))
print("values", *sorted(set(buf)))
step("copy")
# A stream of its own: its synchronize crosses, then is known.
s, e = vp(), vp()
must("cuStreamCreate", ctypes.byref(s), 0)
must("cuEventCreate", ctypes.byref(e), 0)
must("cuMemsetD32Async", d, 9, c_size(16), s)
must("cuEventRecord", e, s)
step("stream-work")
print("stream-sync", call("cuStreamSynchronize", s))
step("crossed")
# The stream is known idle; the event of that stream is not (yet).
step("stream-again", call("cuStreamSynchronize", s), call("cuStreamQuery", s))
print("event-query", call("cuEventQuery", e))
step("crossed")
step("event-again", call("cuEventQuery", e), call("cuEventSynchronize", e))
# The legacy stream was not synchronized since the stream's work.
print("legacy", call("cuStreamQuery", None))
step("crossed")
# An async error: reported by the next synchronize, which crosses.
must("cuStreamWriteValue32_v2", s, c_u64(d.value + 62), ctypes.c_uint32(1), 0)
step("bad-work")
print("error", call("cuCtxSynchronize"))
step("crossed")
# Reported once; the error was no idle answer, so this crosses again.
print("after-error", call("cuCtxSynchronize"))
step("crossed")
step("idle-again", call("cuCtxSynchronize"), call("cuStreamSynchronize", s),
     call("cuEventSynchronize", e))
print("PASS")
'''

SHIM_SCRIPT = COMMON + r'''
p = vp()
must("cudaMalloc", ctypes.byref(p), c_size(64))
step("setup")
print("first-sync", call("cudaDeviceSynchronize"))
step("crossed")
r = [call("cudaDeviceSynchronize") for _ in range(5)]
r += [call("cudaStreamSynchronize", None), call("cudaStreamQuery", None)]
step("idle", *r)
must("cudaMemsetAsync", p, 7, c_size(64), None)
step("queued")
print("sync-after-work", call("cudaDeviceSynchronize"))
step("crossed")
step("again", call("cudaDeviceSynchronize"), call("cudaStreamQuery", None))
s, e = vp(), vp()
must("cudaStreamCreate", ctypes.byref(s))
must("cudaEventCreate", ctypes.byref(e))
must("cudaMemsetAsync", p, 9, c_size(64), s)
must("cudaEventRecord", e, s)
step("stream-work")
print("stream-sync", call("cudaStreamSynchronize", s))
step("crossed")
step("stream-again", call("cudaStreamSynchronize", s), call("cudaStreamQuery", s))
print("event-query", call("cudaEventQuery", e))
step("crossed")
step("event-again", call("cudaEventQuery", e), call("cudaEventSynchronize", e))
buf = (ctypes.c_uint8 * 64)()
must("cudaMemcpy", buf, p, c_size(64), 2)
print("values", *sorted(set(buf)))
print("PASS")
'''


def asan_runtime(lib):
    res = subprocess.run(["ldd", str(lib)], capture_output=True, text=True)
    for line in res.stdout.splitlines():
        parts = line.split()
        if parts and parts[0].startswith("libasan.so") and len(parts) >= 3:
            return parts[2]
    return None


def run_script(tmp_path, script, lib, uri):
    if not lib.exists():
        pytest.fail(f"{lib} is not built (run `make`)")
    path = tmp_path / "script.py"
    path.write_text(script)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PVGPU_DEVICES", "PVGPU_TOKEN", "LD_LIBRARY_PATH")}
    env["LD_LIBRARY_PATH"] = str(lib.parent)
    env["PVGPU_DEVICES"] = uri
    asan = asan_runtime(lib)
    if asan:
        env["LD_PRELOAD"] = asan
        env["ASAN_OPTIONS"] = "detect_leaks=0:allocator_may_return_null=1"
    res = subprocess.run([sys.executable, str(path), str(lib)], env=env,
                         capture_output=True, text=True, timeout=60)
    out = res.stdout.splitlines()
    assert res.returncode == 0 and out[-1:] == ["PASS"], res.stdout + res.stderr
    return {line.split()[0]: line.split()[1:] for line in out
            if line.split()[0] not in ("crossed",)}, out


def crossed(out, after):
    """Round trips counted by the 'crossed' step right after `after`."""
    i = next(k for k, line in enumerate(out) if line.split()[0] == after)
    line = out[i + 1].split()
    assert line[0] == "crossed", out
    return int(line[1])


def uri_of(daemon, transport):
    return daemon.unix if transport == "unix" else \
        "shm://" + daemon.unix[len("unix://"):]


@pytest.mark.parametrize("transport", ["shm", "unix"])
def test_driver_front_end_answers_idle_syncs_locally(sim_daemon, tmp_path, transport):
    got, out = run_script(tmp_path, DRIVER_SCRIPT, LIBCUDA,
                          uri_of(sim_daemon, transport))
    assert got["first-sync"] == ["0"] and crossed(out, "first-sync") == 1
    # Five synchronizes and five default-stream syncs/queries: no round trip.
    assert got["idle"] == ["0"] * 11, out
    # After async work the synchronize crosses, once.
    assert crossed(out, "sync-after-work") == 1 and got["sync-after-work"] == ["0"]
    assert got["again"] == ["0", "0", "0"], out
    assert got["values"] == ["7"], out
    assert crossed(out, "stream-sync") == 1 and got["stream-sync"] == ["0"]
    assert got["stream-again"] == ["0", "0", "0"], out
    # The event was not known idle by its stream's sync alone: one query.
    assert crossed(out, "event-query") == 1 and got["event-query"] == ["0"]
    assert got["event-again"] == ["0", "0", "0"], out
    assert crossed(out, "legacy") == 1 and got["legacy"] == ["0"]
    # The async error reaches the next synchronize (CUDA_ERROR_INVALID_VALUE)...
    assert got["error"] == ["1"] and crossed(out, "error") == 1, out
    # ... once; the one after it crosses too, and then all is known idle.
    assert got["after-error"] == ["0"] and crossed(out, "after-error") == 1
    assert got["idle-again"] == ["0", "0", "0", "0"], out


@pytest.mark.parametrize("transport", ["shm", "unix"])
def test_runtime_shim_answers_idle_syncs_locally(sim_daemon, tmp_path, transport):
    got, out = run_script(tmp_path, SHIM_SCRIPT, SHIM, uri_of(sim_daemon, transport))
    assert got["first-sync"] == ["0"] and crossed(out, "first-sync") == 1
    assert got["idle"] == ["0"] * 8, out
    assert crossed(out, "sync-after-work") == 1 and got["sync-after-work"] == ["0"]
    assert got["again"] == ["0", "0", "0"], out
    assert crossed(out, "stream-sync") == 1 and got["stream-sync"] == ["0"]
    assert got["stream-again"] == ["0", "0", "0"], out
    assert crossed(out, "event-query") == 1 and got["event-query"] == ["0"]
    assert got["event-again"] == ["0", "0", "0"], out
    assert got["values"] == ["9"], out
