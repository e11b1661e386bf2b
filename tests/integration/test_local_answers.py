"""What the guest already knows it answers itself (DESIGN §4): a
synchronize or a stream/event query with nothing forwarded since the last
one that found its object idle does not cross the wire; one after async
work does, and an error of that async work is still reported there.

Counted with the client's own round-trip counter (pvgpu_wire_stats, which
pvgpu's libcuda.so.1 exports), for libcuda.so.1 driven directly and for
NVIDIA's runtime over it, over shm:// (the control ring) and unix://.
"""

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from pvgpu_guest import SCRIPT_PRELUDE, guest_env, run_guest_script  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / os.environ.get("PVGPU_BUILD", "build")
LIBCUDA = BUILD / "lib" / "libcuda.so.1"

# The library the steps call (libcuda.so.1 or NVIDIA's runtime) is cu; lib
# is the one that counts (libcuda.so.1).
COMMON = SCRIPT_PRELUDE + r'''
lib = cu
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

# Each front-end's words for the same steps.
DRIVER_API = r"""
dev, ctx = context()
d = c_u64()
must("cuMemAlloc_v2", ctypes.byref(d), c_size(64))
ctx_sync = lambda: call("cuCtxSynchronize")
stream_sync = lambda s: call("cuStreamSynchronize", s)
stream_query = lambda s: call("cuStreamQuery", s)
event_sync = lambda e: call("cuEventSynchronize", e)
event_query = lambda e: call("cuEventQuery", e)
fill = lambda v, s: must("cuMemsetD32Async", d, v, c_size(16), s)
def new_stream():
    s = vp()
    must("cuStreamCreate", ctypes.byref(s), 0)
    return s
def new_event():
    e = vp()
    must("cuEventCreate", ctypes.byref(e), 0)
    return e
record = lambda e, s: must("cuEventRecord", e, s)
def values():
    buf = (ctypes.c_uint32 * 16)()
    must("cuMemcpyDtoH_v2", buf, d, c_size(64))
    return sorted(set(buf))
# The default stream by its other names: per-thread and legacy handles.
other_defaults = lambda: [call("cuStreamSynchronize_ptsz", None),
                          call("cuStreamQuery", vp(1)), call("cuStreamQuery", vp(2))]
"""

RUNTIME_API = r"""
lib = ctypes.CDLL("libcuda.so.1")   # the one NVIDIA's runtime loads too
d = vp()
must("cudaMalloc", ctypes.byref(d), c_size(64))
ctx_sync = lambda: call("cudaDeviceSynchronize")
stream_sync = lambda s: call("cudaStreamSynchronize", s)
stream_query = lambda s: call("cudaStreamQuery", s)
event_sync = lambda e: call("cudaEventSynchronize", e)
event_query = lambda e: call("cudaEventQuery", e)
fill = lambda v, s: must("cudaMemsetAsync", d, v, c_size(64), s)
def new_stream():
    s = vp()
    must("cudaStreamCreate", ctypes.byref(s))
    return s
def new_event():
    e = vp()
    must("cudaEventCreate", ctypes.byref(e))
    return e
record = lambda e, s: must("cudaEventRecord", e, s)
def values():
    buf = (ctypes.c_uint8 * 64)()
    must("cudaMemcpy", buf, d, c_size(64), 2)
    return sorted(set(buf))
other_defaults = lambda: [call("cudaStreamSynchronize", vp(2)),
                          call("cudaStreamQuery", vp(1)), call("cudaStreamQuery", vp(2))]
"""

STEPS = r"""
step("setup")
print("first-sync", ctx_sync())
step("crossed")
r = [ctx_sync() for _ in range(5)]
r += [stream_sync(None), stream_query(None)] + other_defaults()
step("idle", *r)
# Async work on the legacy stream: the next synchronize crosses, once.
fill(7, None)
step("queued")
print("sync-after-work", ctx_sync())
step("crossed")
step("again", ctx_sync(), stream_query(None))
print("values", *values())
step("copy")
# A stream of its own: its synchronize crosses, then is known.
s, e = new_stream(), new_event()
fill(9, s)
record(e, s)
step("stream-work")
print("stream-sync", stream_sync(s))
step("crossed")
# The stream is known idle; the event of that stream is not (yet).
step("stream-again", stream_sync(s), stream_query(s))
print("event-query", event_query(e))
step("crossed")
step("event-again", event_query(e), event_sync(e))
# The legacy stream was not synchronized since the stream's work.
print("legacy", stream_query(None))
step("crossed")
"""

# An async error (a stream memory operation past the allocation's end):
# reported by the next synchronize, which crosses; reported once; and the
# failed synchronize was no idle answer, so the one after it crosses too.
DRIVER_ERROR = r"""
must("cuStreamWriteValue32_v2", s, c_u64(d.value + 62), ctypes.c_uint32(1), 0)
step("bad-work")
print("error", ctx_sync())
step("crossed")
print("after-error", ctx_sync())
step("crossed")
step("idle-again", ctx_sync(), stream_sync(s), event_sync(e))
"""

DRIVER_SCRIPT = COMMON + DRIVER_API + STEPS + DRIVER_ERROR + 'print("PASS")\n'
RUNTIME_SCRIPT = COMMON + RUNTIME_API + STEPS + 'print("PASS")\n'


def run_script(tmp_path, script, lib, uri):
    """script over lib (argv[1]), with lib's folder alone on the library
    path: that folder's libcuda.so.1 is the driver."""
    if not lib.exists():
        pytest.fail(f"{lib} is not built (run `make`)")
    out, _ = run_guest_script(tmp_path, script, lib, guest_env(lib.parent, uri))
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


def check_common(got, out):
    """What both front-ends answer alike (STEPS)."""
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


@pytest.mark.parametrize("transport", ["shm", "unix"])
def test_driver_front_end_answers_idle_syncs_locally(sim_daemon, tmp_path, transport):
    got, out = run_script(tmp_path, DRIVER_SCRIPT, LIBCUDA,
                          uri_of(sim_daemon, transport))
    check_common(got, out)
    # The async error reaches the next synchronize (CUDA_ERROR_INVALID_VALUE)...
    assert got["error"] == ["1"] and crossed(out, "error") == 1, out
    # ... once; the one after it crosses too, and then all is known idle.
    assert got["after-error"] == ["0"] and crossed(out, "after-error") == 1
    assert got["idle-again"] == ["0", "0", "0", "0"], out


@pytest.mark.parametrize("transport", ["shm", "unix"])
def test_nvidia_runtime_answers_idle_syncs_locally(sim_daemon, libdir, tmp_path, transport):
    # NVIDIA's runtime adds no round trip of its own to these calls.
    got, out = run_script(tmp_path, RUNTIME_SCRIPT, libdir / "libcudart.so.13",
                          uri_of(sim_daemon, transport))
    check_common(got, out)
