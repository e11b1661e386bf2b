"""The generic driver call as the default route (protocol/api/annotations.py
GENERIC): calls whose handler would only look handles up and call the
driver travel as one annotation line each, checked by the worker in one
place (host-backend/session/generic.c).  The same list passes against
`pvgpud --executor sim` and through a front `pvgpud --executor remote` to
a sim node (which forwards every generic call with one function): through
pvgpu's libcuda.so.1 as a program calls them (tests/hostile/
test_generic_handles.py sends them the handles a hostile guest would).
"""
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import pvgpu_wire as W  # noqa: E402
from pvgpu_guest import SCRIPT_PRELUDE, guest_env, run_guest_script  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / os.environ.get("PVGPU_BUILD", "build")
LIBCUDA = BUILD / "lib" / "libcuda.so.1"
IMAGE = BUILD / "tests" / "kernels" / "images" / "vecadd.fatbin"

# What a program sees of each moved call, in the order the script prints.
CALLS_SCRIPT = SCRIPT_PRELUDE + r'''
class Desc3(ctypes.Structure):
    _fields_ = [("Width", sz), ("Height", sz), ("Depth", sz), ("Format", ctypes.c_int),
                ("NumChannels", ctypes.c_uint), ("Flags", ctypes.c_uint)]
class Res(ctypes.Structure):          # CUDA_RESOURCE_DESC
    _fields_ = [("resType", ctypes.c_int), ("res", u64 * 16), ("flags", ctypes.c_uint)]
class Tex(ctypes.Structure):          # CUDA_TEXTURE_DESC
    _fields_ = [("addressMode", ctypes.c_int * 3), ("filterMode", ctypes.c_int),
                ("flags", ctypes.c_uint), ("maxAnisotropy", ctypes.c_uint),
                ("mipmapFilterMode", ctypes.c_int), ("mip", ctypes.c_float * 3),
                ("borderColor", ctypes.c_float * 4), ("reserved", ctypes.c_int * 12)]
MAX_THREADS, NUM_REGS, MAX_DYN_SMEM = 0, 4, 8
dev, ctx = context()
mod, fn = vp(), vp()
must("cuModuleLoadData", ctypes.byref(mod), open(sys.argv[2], "rb").read())
must("cuModuleGetFunction", ctypes.byref(fn), mod, b"vec_add")
v = c_int(-1)
print("max threads", call("cuFuncGetAttribute", ctypes.byref(v), MAX_THREADS, fn), v.value)
print("set dyn smem", call("cuFuncSetAttribute", fn, MAX_DYN_SMEM, 1024))
print("dyn smem", call("cuFuncGetAttribute", ctypes.byref(v), MAX_DYN_SMEM, fn), v.value)
print("set regs", call("cuFuncSetAttribute", fn, NUM_REGS, 10))
n = c_int(-1)
r = call("cuOccupancyMaxActiveBlocksPerMultiprocessor", ctypes.byref(n), fn, 128, sz(0))
print("occupancy", r, n.value > 0)
r = call("cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", ctypes.byref(n), fn, 128,
         sz(0), 1)
print("occupancy flags", r, n.value > 0)
smem = sz(0)
r = call("cuOccupancyAvailableDynamicSMemPerBlock", ctypes.byref(smem), fn, 2, 128)
print("available smem", r, smem.value > 0)
a = vp()
must("cuArray3DCreate_v2", ctypes.byref(a), ctypes.byref(Desc3(16, 16, 0, 0x20, 1, 2)))
res = Res(resType=0)
res.res[0] = a.value
tex = Tex(filterMode=1, flags=2)
t, s = u64(), u64()
must("cuTexObjectCreate", ctypes.byref(t), ctypes.byref(res), ctypes.byref(tex), None)
must("cuSurfObjectCreate", ctypes.byref(s), ctypes.byref(res))
print("tex destroy", call("cuTexObjectDestroy", t), call("cuTexObjectDestroy", t))
print("surf destroy", call("cuSurfObjectDestroy", s), call("cuSurfObjectDestroy", s))
print("array destroy", call("cuArrayDestroy", a), call("cuArrayDestroy", a))
g, node = vp(), vp()
must("cuGraphCreate", ctypes.byref(g), 0)
r = call("cuGraphAddEmptyNode", ctypes.byref(node), g, None, sz(0))
if r:
    print("no explicit nodes", r)
else:
    print("node destroy", call("cuGraphDestroyNode", node), call("cuGraphDestroyNode", node))
must("cuGraphDestroy", g)
e1, e2 = vp(), vp()
must("cuEventCreate", ctypes.byref(e1), 0)
must("cuEventCreate", ctypes.byref(e2), 0)
ms = ctypes.c_float(-1)
print("elapsed unrecorded", call("cuEventElapsedTime_v2", ctypes.byref(ms), e1, e2))
must("cuEventRecord", e1, None)
must("cuEventRecord", e2, None)
must("cuEventSynchronize", e2)
r = call("cuEventElapsedTime", ctypes.byref(ms), e1, e2)
print("elapsed", r, 0.0 <= ms.value < 1000.0)
print("record flags", call("cuEventRecordWithFlags", e1, None, 0),
      call("cuEventSynchronize", e1))
# Async: a refused flag is the next synchronising call's error.
print("record flags bad", call("cuEventRecordWithFlags", e1, None, 8),
      call("cuCtxSynchronize"))
strm = vp()
must("cuStreamCreate", ctypes.byref(strm), 1)
print("wait event", call("cuStreamWaitEvent", strm, e2, 0), call("cuStreamQuery", strm),
      call("cuEventQuery", e2))
print("event destroy", call("cuEventDestroy_v2", e1), call("cuEventDestroy_v2", e1))
USED_MEM_CURRENT, USED_MEM_HIGH = 0, 1
used, zero = c_u64(7), c_u64(0)
print("graph mem used", call("cuDeviceGetGraphMemAttribute", dev, USED_MEM_CURRENT,
                             ctypes.byref(used)), used.value)
print("graph mem reset", call("cuDeviceSetGraphMemAttribute", dev, USED_MEM_HIGH,
                              ctypes.byref(zero)),
      call("cuDeviceSetGraphMemAttribute", dev, USED_MEM_CURRENT, ctypes.byref(zero)))
print("graph mem high", call("cuDeviceGetGraphMemAttribute", dev, USED_MEM_HIGH,
                             ctypes.byref(used)), used.value)
print("graph mem bad", call("cuDeviceGetGraphMemAttribute", dev, 99, ctypes.byref(used)),
      call("cuDeviceGetGraphMemAttribute", 99, USED_MEM_CURRENT, ctypes.byref(used)))
print("graph mem trim", call("cuDeviceGraphMemTrim", dev))
print("PASS")
'''


@pytest.fixture(params=["sim", "remote"])
def daemon(request, start_pvgpud):
    """The sim, or a front `pvgpud --executor remote` before one."""
    back = start_pvgpud("sim")
    front = back
    if request.param == "remote":
        front = start_pvgpud("remote", extra_args=["--remote", back.tcp])
    front.executor = request.param
    return front


@pytest.fixture(scope="module")
def libdir(tmp_path_factory):
    """pvgpu's libcuda.so.1 alone: ctypes loads it by path."""
    if not LIBCUDA.exists():
        pytest.fail(f"{LIBCUDA} is not built (run `make`)")
    return tmp_path_factory.mktemp("lib")


def test_moved_calls_through_libcuda(daemon, libdir, tmp_path):
    """Function attributes, occupancy, array / texture / surface / graph
    node destroys, events and stream queries, event timing and graph memory
    attributes answer through
    libcuda.so.1 as NVIDIA's driver does: a value set is read back, a bad
    one refused, a second destroy is CUDA_ERROR_INVALID_HANDLE."""
    out, err = run_guest_script(tmp_path, CALLS_SCRIPT, LIBCUDA,
                                guest_env(libdir, daemon.unix, lib=LIBCUDA), IMAGE)
    text = "\n".join(out) + err
    for want in ("max threads 0 1024", "set dyn smem 0", "dyn smem 0 1024",
                 "set regs 1", "occupancy 0 True", "occupancy flags 0 True",
                 "available smem 0 True", "tex destroy 0 400", "surf destroy 0 400",
                 "array destroy 0 400", "elapsed unrecorded 400", "elapsed 0 True",
                 "record flags 0 0", "record flags bad 0 1", "wait event 0 0 0",
                 "event destroy 0 400",
                 "graph mem used 0 0", "graph mem reset 0 1", "graph mem high 0 0",
                 "graph mem bad 1 101", "graph mem trim 0"):
        assert want in out, want + "\n" + text
    # The remote executor has no explicit graph nodes (NOT_SUPPORTED).
    assert "node destroy 0 400" in out or "no explicit nodes 801" in out, text
    assert "node destroy 0 400" in out or daemon.executor == "remote", text


def test_structures_cross_every_hop(daemon):
    """A generic call with structures (driver_call_data: a stream attribute
    set, then read back) gives back what was set, on the sim and through
    the remote executor, which forwards them with the call."""
    s = W.context_session(daemon.unix)
    st, _d, out, _ = s.call("stream_create", flags=1, priority=0)
    assert st == 0, st
    stream, policy = out["stream"], 3          # CU_STREAM_ATTRIBUTE_SYNCHRONIZATION_POLICY
    value = bytes([3]) + bytes(63)              # a CUstreamAttrValue: CU_SYNC_POLICY_YIELD
    st, _d, _o, _ = s.call("driver_call_data", fn=W.GENERIC["cuStreamSetAttribute"],
                           args=[stream, policy, 1], input=value)
    assert st == 0, st
    st, _d, got, _ = s.call("driver_call_data", fn=W.GENERIC["cuStreamGetAttribute"],
                            args=[stream, policy, 1], input=b"")
    assert st == 0, st
    assert got["output"][:4] == bytes([3, 0, 0, 0]), got
