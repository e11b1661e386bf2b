"""Graph copy nodes whose host end is ordinary (pageable) guest memory, and
stream-capture queries, over pvgpu's libcuda.so.1 against `pvgpud
--executor sim` (NVIDIA's samples simpleCudaGraphs and jacobiCudaGraphs
build such graphs; cuBLAS asks these queries during capture).

Over unix:// there is no shared window, so every host buffer here is one
the worker cannot see: the guest sends a host-to-device node's bytes with
each launch and writes a device-to-host node's result into guest memory at
the synchronisation after it (guest-lib/cuda/cuda_capture.c).  What a user
checks: each launch reads the host buffer as it is at that launch, the
results are in host memory after cuStreamSynchronize / cuEventSynchronize /
cuCtxSynchronize, and an executable graph updated from a newly captured one
writes into the new graph's buffer.  Capture queries answer as the driver
does: status, a non-zero id, the graph cuStreamEndCapture then returns
(nodes can be added to it), the dependency set, which
cuStreamUpdateCaptureDependencies changes.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from test_driver_api import BUILD, run_script  # noqa: E402
from test_graph_nodes import PRELUDE  # noqa: E402

# a, b, c of n floats (b all 1.0f), stream s, vec_add's args (c = a + b),
# copy_add_copy().
SETUP = PRELUDE + r'''
n = 256
N = 4 * n
a, b, c = c_u64(), c_u64(), c_u64()
for p in (a, b, c):
    must("cuMemAlloc_v2", ctypes.byref(p), c_size(N))
# b = 1.0f everywhere, once.
must("cuMemcpyHtoD_v2", b, struct.pack("%df" % n, *([1.0] * n)), c_size(N))
s = vp()
must("cuStreamCreate", ctypes.byref(s), 1)
cnt = c_int(n)
args = (vp * 4)(ctypes.addressof(a), ctypes.addressof(b), ctypes.addressof(c),
                ctypes.addressof(cnt))
def floats(buf, *idx):
    return tuple(ctypes.c_float.from_buffer(buf, 4 * i).value for i in idx)
def fill(buf, base):
    struct.pack_into("%df" % n, buf, 0, *[base + i for i in range(n)])
def copy_add_copy(hin, hout):
    """A new graph of three nodes: up (hin -> a), k (c = a + b) after it,
    down (c -> hout) after that: (g, up, k, down)."""
    g, up, k, down = vp(), vp(), vp(), vp()
    must("cuGraphCreate", ctypes.byref(g), 0)
    cp_in = Memcpy3D(srcMemoryType=HOST, srcHost=ctypes.addressof(hin),
                     dstMemoryType=DEVICE, dstDevice=a.value, WidthInBytes=N,
                     Height=1, Depth=1)
    must("cuGraphAddMemcpyNode", ctypes.byref(up), g, None, c_size(0), ctypes.byref(cp_in), ctx)
    kp = KernelParams(func=fn.value, gx=1, gy=1, gz=1, bx=256, by=1, bz=1, smem=0,
                      kernelParams=ctypes.cast(args, vp).value)
    must("cuGraphAddKernelNode_v2", ctypes.byref(k), g, (vp * 1)(up), c_size(1), ctypes.byref(kp))
    cp_out = Memcpy3D(srcMemoryType=DEVICE, srcDevice=c.value, dstMemoryType=HOST,
                      dstHost=ctypes.addressof(hout), WidthInBytes=N, Height=1, Depth=1)
    must("cuGraphAddMemcpyNode", ctypes.byref(down), g, (vp * 1)(k), c_size(1),
         ctypes.byref(cp_out), ctx)
    return g, up, k, down
'''

SCRIPT = SETUP + r'''

# --- explicit nodes: host in -> a, c = a + b, c -> host out ---------------
hin = ctypes.create_string_buffer(N)       # plain malloc'd memory
hout = ctypes.create_string_buffer(N)
g, up, k, down = copy_add_copy(hin, hout)
t = c_int(-1)
must("cuGraphNodeGetType", up, ctypes.byref(t))
print("staged node type", t.value)
exe = vp()
must("cuGraphInstantiateWithFlags", ctypes.byref(exe), g, c_u64(0))
fill(hin, 10.0)
must("cuGraphLaunch", exe, s)
must("cuStreamSynchronize", s)
print("explicit launch 1", floats(hout, 0, 255))
fill(hin, 100.0)                            # changed between the launches
must("cuGraphLaunch", exe, s)
ev = vp()
must("cuEventCreate", ctypes.byref(ev), 0)
must("cuEventRecord", ev, s)
must("cuEventSynchronize", ev)
print("explicit launch 2", floats(hout, 0, 255))
fill(hin, 1000.0)
must("cuGraphLaunch", exe, s)
must("cuCtxSynchronize")
print("explicit launch 3", floats(hout, 0, 255))
print("clone with staged nodes", call("cuGraphClone", ctypes.byref(vp()), g))
# The executable graph outlives its graph, and so do its buffers.
must("cuGraphDestroy", g)
fill(hin, 5.0)
must("cuGraphLaunch", exe, s)
must("cuStreamSynchronize", s)
print("after the graph is gone", floats(hout, 0, 255))
must("cuGraphExecDestroy", exe)

# --- capture queries ------------------------------------------------------
st, cid, cg, nd = c_int(-1), c_u64(7), vp(), c_size(9)
deps, edges = vp(), vp()
must("cuStreamGetCaptureInfo_v3", s, ctypes.byref(st), ctypes.byref(cid), ctypes.byref(cg),
     ctypes.byref(deps), ctypes.byref(edges), ctypes.byref(nd))
print("idle capture info", st.value, cid.value, cg.value or 0, nd.value)
mode = c_int(2)                             # RELAXED
must("cuThreadExchangeStreamCaptureMode", ctypes.byref(mode))
old = mode.value
must("cuThreadExchangeStreamCaptureMode", ctypes.byref(mode))
print("capture mode exchange", old, mode.value)

xin = ctypes.create_string_buffer(N)
xout = ctypes.create_string_buffer(N)
other_g, other = vp(), vp()
must("cuGraphCreate", ctypes.byref(other_g), 0)
must("cuGraphAddEmptyNode", ctypes.byref(other), other_g, None, c_size(0))
def capture(src, dst):
    """a <- src; memset node set as the capture's dependency writes c;
    c = a + b; dst <- c.  Returns the graph and what the queries said."""
    must("cuStreamBeginCapture_v2", s, 0)
    seen = []
    must("cuMemcpyHtoDAsync_v2", a, src, c_size(N), s)
    must("cuStreamGetCaptureInfo_v3", s, ctypes.byref(st), ctypes.byref(cid),
         ctypes.byref(cg), ctypes.byref(deps), ctypes.byref(edges), ctypes.byref(nd))
    dep = vp(ctypes.cast(deps, ctypes.POINTER(vp))[0])
    must("cuGraphNodeGetType", dep, ctypes.byref(t))
    seen.append((st.value, cid.value != 0, nd.value, t.value))
    graph = cg.value
    # An explicit node added to the graph being captured, made the
    # capture's only dependency: the kernel comes after it.
    ms = MemsetParams(dst=c.value, pitch=0, value=0x40400000, elementSize=4,
                      width=n, height=1)
    extra = vp()
    must("cuGraphAddMemsetNode", ctypes.byref(extra), vp(graph), (vp * 1)(dep), c_size(1),
         ctypes.byref(ms), ctx)
    must("cuStreamUpdateCaptureDependencies", s, (vp * 1)(extra), c_size(1), 1)
    must("cuStreamGetCaptureInfo_v2", s, ctypes.byref(st), None, None,
         ctypes.byref(deps), ctypes.byref(nd))
    seen.append((nd.value, ctypes.cast(deps, ctypes.POINTER(vp))[0] == extra.value))
    seen.append(call("cuStreamUpdateCaptureDependencies", s, (vp * 1)(other), c_size(1), 0))
    must("cuLaunchKernel", fn, 1, 1, 1, 256, 1, 1, 0, s, args, None)
    must("cuMemcpyDtoHAsync_v2", dst, c, c_size(N), s)
    out = vp()
    must("cuStreamEndCapture", s, ctypes.byref(out))
    seen.append(out.value == graph)
    return out, seen

cap, seen = capture(xin, xout)
print("capture info", seen)
count = c_size(0)
must("cuGraphGetNodes", cap, None, ctypes.byref(count))
print("captured nodes", count.value)
print("not capturing", call("cuStreamUpdateCaptureDependencies", s, None, c_size(0), 1))
cexe = vp()
must("cuGraphInstantiateWithFlags", ctypes.byref(cexe), cap, c_u64(0))
fill(xin, 20.0)
must("cuGraphLaunch", cexe, s)
must("cuStreamSynchronize", s)
print("captured launch 1", floats(xout, 0, 255))
fill(xin, 40.0)
must("cuGraphLaunch", cexe, s)
must("cuStreamSynchronize", s)
print("captured launch 2", floats(xout, 0, 255))

# As jacobiCudaGraphs does: capture again into other host memory, update
# the executable graph from it, destroy the new graph, launch.
yin = ctypes.create_string_buffer(N)
yout = ctypes.create_string_buffer(N)
cap2, _ = capture(yin, yout)
class UpdateInfo(ctypes.Structure):     # CUgraphExecUpdateResultInfo
    _fields_ = [("result", c_int), ("errorNode", vp), ("errorFromNode", vp)]
info = UpdateInfo(result=-1)
must("cuGraphExecUpdate_v2", cexe, cap2, ctypes.byref(info))
must("cuGraphDestroy", cap2)
must("cuGraphDestroy", cap)
fill(yin, 300.0)
fill(xout, 0.0)
must("cuGraphLaunch", cexe, s)
must("cuStreamSynchronize", s)
print("updated launch", info.result, floats(yout, 0, 255), floats(xout, 0))
must("cuGraphExecDestroy", cexe)
must("cuGraphDestroy", other_g)
print("PASS")
'''


def test_staged_copy_nodes_and_capture_queries(twins_daemon, libdir, tmp_path):
    image = BUILD / "tests" / "kernels" / "images" / "vecadd.fatbin"
    out, err = run_script(twins_daemon, libdir, tmp_path, SCRIPT, image, debug=True)
    assert "staged node type 1" in out, out           # CU_GRAPH_NODE_TYPE_MEMCPY
    # c = a + 1: each launch read the host buffer as it was then.
    assert "explicit launch 1 (11.0, 266.0)" in out, out
    assert "explicit launch 2 (101.0, 356.0)" in out, out
    assert "explicit launch 3 (1001.0, 1256.0)" in out, out
    assert "clone with staged nodes 0" in out, out    # test_graph_clone.py runs one
    assert "after the graph is gone (6.0, 261.0)" in out, out
    assert "idle capture info 0 0 0 0" in out, out
    # GLOBAL (0) was the thread's mode; RELAXED (2) came back.
    assert "capture mode exchange 0 2" in out, out
    # ACTIVE, an id, one dependency (the copy just captured); the set
    # replaced by the node added; a node of another graph refused
    # (CUDA_ERROR_INVALID_VALUE); cuStreamEndCapture's graph is the one.
    assert "capture info [(1, True, 1, 1), (1, True), 1, True]" in out, out
    assert "captured nodes 4" in out, out             # copy, memset, kernel, copy
    assert "not capturing 401" in out, out             # CUDA_ERROR_ILLEGAL_STATE
    assert "captured launch 1 (21.0, 276.0)" in out, out
    assert "captured launch 2 (41.0, 296.0)" in out, out
    # CU_GRAPH_EXEC_UPDATE_SUCCESS; the new buffers, not the old ones.
    assert "updated launch 0 (301.0, 556.0) (0.0,)" in out, out
    assert " start: " in twins_daemon.log()


MEM_SCRIPT = PRELUDE + r'''
n = 256
N = 4 * n
a, b, plain = c_u64(), c_u64(), c_u64()
for p in (a, b, plain):
    must("cuMemAlloc_v2", ctypes.byref(p), c_size(N))
must("cuMemcpyHtoD_v2", a, struct.pack("%df" % n, *[float(i) for i in range(n)]), c_size(N))
must("cuMemcpyHtoD_v2", b, struct.pack("%df" % n, *([2.0] * n)), c_size(N))
s = vp()
must("cuStreamCreate", ctypes.byref(s), 1)
cnt = c_int(n)
def floats(buf, *idx):
    return tuple(ctypes.c_float.from_buffer(buf, 4 * i).value for i in idx)

# CUDA_MEM_ALLOC_NODE_PARAMS: pool properties (88 bytes: pinned, device 0),
# access descriptors, their count, bytesize, dptr (written back).
params = ctypes.create_string_buffer(120)
struct.pack_into("<iiii", params, 0, 1, 0, 1, 0)
struct.pack_into("<QQQQ", params, 88, 0, 0, N, 0)
g, al, k, cp, fr = vp(), vp(), vp(), vp(), vp()
must("cuGraphCreate", ctypes.byref(g), 0)
must("cuGraphAddMemAllocNode", ctypes.byref(al), g, None, c_size(0), params)
dptr = c_u64(struct.unpack_from("<Q", params, 112)[0])
print("alloc node address", dptr.value != 0)
args = (vp * 4)(ctypes.addressof(a), ctypes.addressof(b), ctypes.addressof(dptr),
                ctypes.addressof(cnt))
kp = KernelParams(func=fn.value, gx=1, gy=1, gz=1, bx=256, by=1, bz=1, smem=0,
                  kernelParams=ctypes.cast(args, vp).value)
must("cuGraphAddKernelNode_v2", ctypes.byref(k), g, (vp * 1)(al), c_size(1), ctypes.byref(kp))
out = ctypes.create_string_buffer(N)
c3 = Memcpy3D(srcMemoryType=DEVICE, srcDevice=dptr.value, dstMemoryType=HOST,
              dstHost=ctypes.addressof(out), WidthInBytes=N, Height=1, Depth=1)
must("cuGraphAddMemcpyNode", ctypes.byref(cp), g, (vp * 1)(k), c_size(1), ctypes.byref(c3), ctx)
must("cuGraphAddMemFreeNode", ctypes.byref(fr), g, (vp * 1)(cp), c_size(1), dptr)
got = ctypes.create_string_buffer(120)
must("cuGraphMemAllocNodeGetParams", al, got)
fd = c_u64()
must("cuGraphMemFreeNodeGetParams", fr, ctypes.byref(fd))
print("params", struct.unpack_from("<Q", got, 104)[0] == N,
      struct.unpack_from("<Q", got, 112)[0] == dptr.value, fd.value == dptr.value)
t = c_int(-1)
must("cuGraphNodeGetType", al, ctypes.byref(t))
kinds = [t.value]
must("cuGraphNodeGetType", fr, ctypes.byref(t))
print("node types", kinds + [t.value])
bad = vp()
print("free node of other memory", call("cuGraphAddMemFreeNode", ctypes.byref(bad), g, None,
                                        c_size(0), plain))
print("free node of a made-up address", call("cuGraphAddMemFreeNode", ctypes.byref(bad), g,
                                             None, c_size(0), c_u64(0xdead0000)))
exe = vp()
must("cuGraphInstantiateWithFlags", ctypes.byref(exe), g, c_u64(1))  # AUTO_FREE_ON_LAUNCH
must("cuGraphLaunch", exe, s)
must("cuStreamSynchronize", s)
print("explicit", floats(out, 0, 255))
used = c_u64()
must("cuDeviceGetGraphMemAttribute", 0, 0, ctypes.byref(used))   # USED_MEM_CURRENT
print("graph memory used", used.value >= N)
zero = c_u64(0)
must("cuDeviceSetGraphMemAttribute", 0, 1, ctypes.byref(zero))    # USED_MEM_HIGH
print("set current", call("cuDeviceSetGraphMemAttribute", 0, 0, ctypes.byref(zero)))
must("cuDeviceGraphMemTrim", 0)

# cuMemAllocAsync / cuMemFreeAsync captured, as graphMemoryNodes does.
must("cuStreamBeginCapture_v2", s, 0)
tmp = c_u64()
must("cuMemAllocAsync", ctypes.byref(tmp), c_size(N), s)
args2 = (vp * 4)(ctypes.addressof(a), ctypes.addressof(a), ctypes.addressof(tmp),
                 ctypes.addressof(cnt))
must("cuLaunchKernel", fn, 1, 1, 1, 256, 1, 1, 0, s, args2, None)
out2 = ctypes.create_string_buffer(N)
must("cuMemcpyDtoHAsync_v2", out2, tmp, c_size(N), s)
must("cuMemFreeAsync", tmp, s)
cap = vp()
must("cuStreamEndCapture", s, ctypes.byref(cap))
count = c_size(0)
must("cuGraphGetNodes", cap, None, ctypes.byref(count))
print("captured nodes", count.value)
cexe = vp()
must("cuGraphInstantiateWithFlags", ctypes.byref(cexe), cap, c_u64(0))
must("cuGraphLaunch", cexe, s)
must("cuStreamSynchronize", s)
print("captured", floats(out2, 0, 255))
for x in (exe, cexe):
    must("cuGraphExecDestroy", x)
must("cuGraphDestroy", g)
must("cuGraphDestroy", cap)
print("PASS")
'''


def test_graph_memory_nodes(twins_daemon, libdir, tmp_path):
    """graphMemoryNodes / graphMemoryFootprint's calls: allocation and free
    nodes, explicit and captured; the address an allocation node gives is
    the session's to use in its graphs, and only such an address may be
    freed by a free node."""
    image = BUILD / "tests" / "kernels" / "images" / "vecadd.fatbin"
    out, _ = run_script(twins_daemon, libdir, tmp_path, MEM_SCRIPT, image)
    assert "alloc node address True" in out, out
    assert "params True True True" in out, out
    assert "node types [10, 11]" in out, out        # MEM_ALLOC, MEM_FREE
    assert "free node of other memory 1" in out, out  # CUDA_ERROR_INVALID_VALUE
    assert "free node of a made-up address 1" in out, out
    assert "explicit (2.0, 257.0)" in out, out        # a + 2
    assert "graph memory used True" in out, out
    assert "set current 1" in out, out
    assert "captured nodes 4" in out, out             # alloc, kernel, copy, free
    assert "captured (0.0, 510.0)" in out, out        # a + a


COND_SCRIPT = PRELUDE + r'''
n = 256
d = c_u64()
must("cuMemAlloc_v2", ctypes.byref(d), c_size(4 * n))
g, g2 = vp(), vp()
must("cuGraphCreate", ctypes.byref(g), 0)
must("cuGraphCreate", ctypes.byref(g2), 0)
h, h2 = c_u64(), c_u64()
must("cuGraphConditionalHandleCreate", ctypes.byref(h), g, ctx, 1, 1)  # ASSIGN_DEFAULT
must("cuGraphConditionalHandleCreate", ctypes.byref(h2), g2, ctx, 0, 0)
print("handles", h.value != 0, h.value != h2.value)
def cond(handle, kind, size):
    """CUgraphNodeParams of a conditional node (type 13)."""
    p = ctypes.create_string_buffer(256)
    struct.pack_into("<i", p, 0, 13)
    struct.pack_into("<QiIQQ", p, 16, handle.value, kind, size, 0, ctx.value)
    return p
p = cond(h, 0, 2)                                  # IF with an ELSE body
node = vp()
must("cuGraphAddNode_v2", ctypes.byref(node), g, None, None, c_size(0), p)
bodies_at = struct.unpack_from("<Q", p, 32)[0]
bodies = [vp(x) for x in (vp * 2).from_address(bodies_at)]
print("bodies", len(set(b.value for b in bodies)), all(b.value for b in bodies))
t = c_int(-1)
must("cuGraphNodeGetType", node, ctypes.byref(t))
print("conditional type", t.value)
# The bodies are graphs the program fills.
ms = MemsetParams(dst=d.value, pitch=0, value=5, elementSize=4, width=n, height=1)
inner = vp()
must("cuGraphAddMemsetNode", ctypes.byref(inner), bodies[0], None, c_size(0),
     ctypes.byref(ms), ctx)
count = c_size(0)
must("cuGraphGetNodes", bodies[0], None, ctypes.byref(count))
print("body nodes", count.value)
print("handle of another graph", call("cuGraphAddNode_v2", ctypes.byref(vp()), g, None,
                                      None, c_size(0), cond(h2, 1, 1)))
print("made-up handle", call("cuGraphAddNode_v2", ctypes.byref(vp()), g, None, None,
                             c_size(0), cond(c_u64(0x5eed), 1, 1)))
print("WHILE with two bodies", call("cuGraphAddNode_v2", ctypes.byref(vp()), g, None, None,
                                     c_size(0), cond(h, 1, 2)))
sw = cond(h, 2, 4)                                 # SWITCH of four
must("cuGraphAddNode_v2", ctypes.byref(vp()), g, (vp * 1)(node), None, c_size(1), sw)
print("switch bodies", len(set((vp * 4).from_address(struct.unpack_from("<Q", sw, 32)[0]))))
must("cuGraphDestroy", g)
print("body after its graph", call("cuGraphGetNodes", bodies[0], None, ctypes.byref(count)))
must("cuGraphDestroy", g2)
print("PASS")
'''


def test_conditional_nodes(twins_daemon, libdir, tmp_path):
    """graphConditionalNodes' structure: handles per graph, IF/WHILE/SWITCH
    nodes whose body graphs come back as graphs the program adds nodes to;
    a node may only use a handle of its own graph.  What a conditional
    node does when launched depends on kernels setting the handle on the
    GPU, which the sim does not model (no test here launches one; NVIDIA's
    graphConditionalNodes sample on the GPU machine does)."""
    image = BUILD / "tests" / "kernels" / "images" / "vecadd.fatbin"
    out, _ = run_script(twins_daemon, libdir, tmp_path, COND_SCRIPT, image)
    assert "handles True True" in out, out
    assert "bodies 2 True" in out, out
    assert "conditional type 13" in out, out
    assert "body nodes 1" in out, out
    assert "handle of another graph 1" in out, out   # CUDA_ERROR_INVALID_VALUE
    assert "made-up handle 1" in out, out
    assert "WHILE with two bodies 1" in out, out
    assert "switch bodies 4" in out, out
    assert "body after its graph 400" in out, out    # CUDA_ERROR_INVALID_HANDLE
