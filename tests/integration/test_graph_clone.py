"""cuGraphClone of graphs the guest keeps something of, host functions
launched in a capture, capture into an existing graph, and graph memory freed outside any graph, over pvgpu's
libcuda.so.1 against `pvgpud --executor sim` (as NVIDIA's samples
simpleCudaGraphs, graphConditionalNodes, graphMemoryFootprint use them).

What a user checks: a clone of a graph with staged copy nodes (pageable
host memory at either end) and a host node runs as the original does --
each launch reads the host buffer as it is then, writes the result into
host memory, calls the host function after the device work -- even after
the original graph is gone, and the clone's copies do not share the
original's staging buffers; cuGraphNodeFindInClone names the clone's node.
cuLaunchHostFunc on a capturing stream becomes a host node of the graph,
run by each launch (of the graph and of its clone), not at capture.
cuStreamBeginCaptureToGraph captures after a given node into a graph the
program made, and cuStreamEndCapture returns that graph; a graph or node
that is not the session's is refused.  Memory a graph allocation node made
is freed by cuMemFree / cuMemFreeAsync once, and copies on it worked before.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from test_driver_api import BUILD, run_script  # noqa: E402
from test_graph_staged import SETUP  # noqa: E402

SCRIPT = SETUP + r'''

# --- hin -> a, c = a + b, c -> hout, host node: sums hout -----------------
hin = ctypes.create_string_buffer(N)
hout = ctypes.create_string_buffer(N)
sums = []
HOSTFN = ctypes.CFUNCTYPE(None, vp)
@HOSTFN
def host_sum(data):
    sums.append((data or 0, sum(floats(hout, *range(n)))))
class HostParams(ctypes.Structure):     # CUDA_HOST_NODE_PARAMS
    _fields_ = [("fn", HOSTFN), ("userData", vp)]
g, up, k, down = copy_add_copy(hin, hout)
h = vp()
hp = HostParams(fn=host_sum, userData=7)
must("cuGraphAddHostNode", ctypes.byref(h), g, (vp * 1)(down), c_size(1), ctypes.byref(hp))

cl = vp()
must("cuGraphClone", ctypes.byref(cl), g)
t = c_int(-1)
found = []
for node in (up, k, down, h):
    cn = vp()
    must("cuGraphNodeFindInClone", ctypes.byref(cn), node, cl)
    must("cuGraphNodeGetType", cn, ctypes.byref(t))
    found.append((cn.value not in (None, node.value), t.value))
print("found in clone", found)
cn = vp()
print("find in the original", call("cuGraphNodeFindInClone", ctypes.byref(cn), up, g))
print("find a stranger", call("cuGraphNodeFindInClone", ctypes.byref(cn), vp(0xdead0000), cl))
# The clone's kernel node answers GetParams as the original's does.
must("cuGraphNodeFindInClone", ctypes.byref(cn), k, cl)
got = KernelParams()
must("cuGraphKernelNodeGetParams_v2", cn, ctypes.byref(got))
print("cloned kernel params", got.func == fn.value, got.bx,
      ctypes.cast(got.kernelParams, ctypes.POINTER(vp))[3] is not None)

ex_g, ex_c = vp(), vp()
must("cuGraphInstantiateWithFlags", ctypes.byref(ex_g), g, c_u64(0))
must("cuGraphInstantiateWithFlags", ctypes.byref(ex_c), cl, c_u64(0))
fill(hin, 10.0)
must("cuGraphLaunch", ex_c, s)
must("cuStreamSynchronize", s)
print("clone launch 1", floats(hout, 0, 255), sums[-1])
fill(hin, 100.0)
must("cuGraphLaunch", ex_g, s)
fill(hin, 1000.0)                           # the clone reads it as it is now
must("cuGraphLaunch", ex_c, s)
must("cuCtxSynchronize")
print("original then clone", floats(hout, 0, 255), len(sums))
# The clone outlives its original, with buffers of its own.
must("cuGraphExecDestroy", ex_g)
must("cuGraphDestroy", g)
ex2 = vp()
must("cuGraphInstantiateWithFlags", ctypes.byref(ex2), cl, c_u64(0))
fill(hin, 5.0)
must("cuGraphLaunch", ex2, s)
must("cuStreamSynchronize", s)
print("clone alone", floats(hout, 0, 255), sums[-1])
must("cuGraphExecDestroy", ex2)
must("cuGraphExecDestroy", ex_c)
must("cuGraphDestroy", cl)

# --- captured, as simpleCudaGraphs does: copies of pageable memory, the
# kernel, cuLaunchHostFunc last; the graph and its clone launched ---------
must("cuStreamBeginCapture_v2", s, 0)
must("cuMemcpyHtoDAsync_v2", a, hin, c_size(N), s)
must("cuLaunchKernel", fn, 1, 1, 1, 256, 1, 1, 0, s, args, None)
must("cuMemcpyDtoHAsync_v2", hout, c, c_size(N), s)
before = len(sums)
must("cuLaunchHostFunc", s, host_sum, vp(9))
ran_at_capture = len(sums) - before
cap = vp()
must("cuStreamEndCapture", s, ctypes.byref(cap))
count = c_size(0)
must("cuGraphGetNodes", cap, None, ctypes.byref(count))
capc = vp()
must("cuGraphClone", ctypes.byref(capc), cap)
xs = []
for graph in (cap, capc):
    x = vp()
    must("cuGraphInstantiateWithFlags", ctypes.byref(x), graph, c_u64(0))
    xs.append(x)
fill(hin, 20.0)
must("cuGraphLaunch", xs[0], s)
must("cuStreamSynchronize", s)
first = sums[-1]
fill(hin, 30.0)
must("cuGraphLaunch", xs[1], s)
must("cuStreamSynchronize", s)
print("captured host function", ran_at_capture, count.value, first, sums[-1])
for x in xs:
    must("cuGraphExecDestroy", x)
must("cuGraphDestroy", capc)
must("cuGraphDestroy", cap)

# --- cuStreamBeginCaptureToGraph: a graph with an empty node, then the
# kernel captured after it ---------------------------------------------------
must("cuMemcpyHtoD_v2", a, struct.pack("%df" % n, *[float(i) for i in range(n)]), c_size(N))
g2, first = vp(), vp()
must("cuGraphCreate", ctypes.byref(g2), 0)
must("cuGraphAddEmptyNode", ctypes.byref(first), g2, None, c_size(0))
other_g, other = vp(), vp()
must("cuGraphCreate", ctypes.byref(other_g), 0)
must("cuGraphAddEmptyNode", ctypes.byref(other), other_g, None, c_size(0))
print("node of another graph", call("cuStreamBeginCaptureToGraph", s, g2, (vp * 1)(other),
                                    None, c_size(1), 0))
print("not a graph", call("cuStreamBeginCaptureToGraph", s, vp(0xdead0000), None, None,
                          c_size(0), 0))
must("cuStreamBeginCaptureToGraph", s, g2, (vp * 1)(first), None, c_size(1), 0)
st = c_int(-1)
must("cuStreamIsCapturing", s, ctypes.byref(st))
must("cuLaunchKernel", fn, 1, 1, 1, 256, 1, 1, 0, s, args, None)
out = vp()
must("cuStreamEndCapture", s, ctypes.byref(out))
count = c_size(0)
must("cuGraphGetNodes", g2, None, ctypes.byref(count))
print("captured into", st.value, out.value == g2.value, count.value)
must("cuMemsetD32_v2", c, 0, c_size(n))
ex3 = vp()
must("cuGraphInstantiateWithFlags", ctypes.byref(ex3), g2, c_u64(0))
must("cuGraphLaunch", ex3, s)
must("cuStreamSynchronize", s)
res = (ctypes.c_float * n)()
must("cuMemcpyDtoH_v2", res, c, c_size(N))
print("capture-to-graph launch", res[0], res[255])
must("cuGraphExecDestroy", ex3)
must("cuGraphDestroy", g2)
must("cuGraphDestroy", other_g)

# --- graph memory freed outside any graph -----------------------------------
params = ctypes.create_string_buffer(120)
struct.pack_into("<iiii", params, 0, 1, 0, 1, 0)
struct.pack_into("<QQQQ", params, 88, 0, 0, N, 0)
freed = []
for how in ("cuMemFree_v2", "cuMemFreeAsync"):
    gm, al = vp(), vp()
    must("cuGraphCreate", ctypes.byref(gm), 0)
    struct.pack_into("<Q", params, 112, 0)
    must("cuGraphAddMemAllocNode", ctypes.byref(al), gm, None, c_size(0), params)
    dptr = c_u64(struct.unpack_from("<Q", params, 112)[0])
    exm = vp()
    must("cuGraphInstantiateWithFlags", ctypes.byref(exm), gm, c_u64(0))
    must("cuGraphLaunch", exm, s)
    must("cuStreamSynchronize", s)
    must("cuMemsetD32_v2", dptr, 0x3f800000, c_size(n))
    must("cuMemcpyDtoD_v2", c, dptr, c_size(N))
    must("cuMemcpyDtoH_v2", res, c, c_size(N))
    interior = call(how, c_u64(dptr.value + 4), *([s] if how == "cuMemFreeAsync" else []))
    r = call(how, dptr, *([s] if how == "cuMemFreeAsync" else []))
    again = call("cuMemFree_v2", dptr)
    freed.append((res[255], interior, r, again))
    must("cuGraphExecDestroy", exm)
    must("cuGraphDestroy", gm)
print("graph memory freed", freed)
print("PASS")
'''


def test_clone_capture_to_graph_and_graph_memory_free(twins_daemon, libdir, tmp_path):
    image = BUILD / "tests" / "kernels" / "images" / "vecadd.fatbin"
    out, err = run_script(twins_daemon, libdir, tmp_path, SCRIPT, image, debug=True)
    # MEMCPY 1, KERNEL 0, MEMCPY 1, HOST 3: each the clone's own node.
    assert "found in clone [(True, 1), (True, 0), (True, 1), (True, 3)]" in out, out
    # A node looked up in a graph that is not its clone, a node that is
    # nobody's: CUDA_ERROR_INVALID_HANDLE (400).
    assert "find in the original 400" in out, out
    assert "find a stranger 400" in out, out
    assert "cloned kernel params True 256 True" in out, out
    # c = a + 1 into hout; the host function ran after it, with its data.
    total = sum(11.0 + i for i in range(256))
    assert "clone launch 1 (11.0, 266.0) (7, %r)" % total in out, out
    # Both launches ran (two host calls more); the clone's result last.
    assert "original then clone (1001.0, 1256.0) 3" in out, out
    total = sum(6.0 + i for i in range(256))
    assert "clone alone (6.0, 261.0) (7, %r)" % total in out, out
    # cuLaunchHostFunc in a capture: not run then, a host node of the
    # graph (copy, kernel, copy, host), run by each launch of the graph
    # and of its clone after the copy back, with its data.
    assert "captured host function 0 4 (9, %r) (9, %r)" % (
        sum(21.0 + i for i in range(256)), sum(31.0 + i for i in range(256))) in out, out
    assert "node of another graph 1" in out, out     # CUDA_ERROR_INVALID_VALUE
    assert "not a graph 400" in out, out             # CUDA_ERROR_INVALID_HANDLE
    # ACTIVE while capturing; EndCapture gave g2; empty node + kernel.
    assert "captured into 1 True 2" in out, out
    assert "capture-to-graph launch 1.0 256.0" in out, out
    # The copy read 1.0f; an interior pointer refused (1); freed (0); a
    # second free refused (1).
    assert "graph memory freed [(1.0, 1, 0, 1), (1.0, 1, 0, 1)]" in out, out


QUOTA_SCRIPT = r'''
import ctypes, struct, sys
cu = ctypes.CDLL(sys.argv[1])
vp, c_u64, c_size = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t
assert cu.cuInit(0) == 0
dev, ctx, g, al, x, p = ctypes.c_int(), vp(), vp(), vp(), vp(), c_u64()
assert cu.cuDeviceGet(ctypes.byref(dev), 0) == 0
assert cu.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev) == 0
params = ctypes.create_string_buffer(120)      # CUDA_MEM_ALLOC_NODE_PARAMS
struct.pack_into("<iiii", params, 0, 1, 0, 1, 0)
struct.pack_into("<QQQQ", params, 88, 0, 0, 12 << 20, 0)
assert cu.cuGraphCreate(ctypes.byref(g), 0) == 0
assert cu.cuGraphAddMemAllocNode(ctypes.byref(al), g, None, c_size(0), params) == 0
mem = c_u64(struct.unpack_from("<Q", params, 112)[0])
assert cu.cuGraphInstantiateWithFlags(ctypes.byref(x), g, c_u64(0)) == 0
assert cu.cuGraphLaunch(x, None) == 0
assert cu.cuCtxSynchronize() == 0
r1 = cu.cuMemAlloc_v2(ctypes.byref(p), c_size(12 << 20))
r2 = cu.cuMemFree_v2(mem)
r3 = cu.cuMemAlloc_v2(ctypes.byref(p), c_size(12 << 20))
# An asynchronous launch's error may come back with the next call.
r4 = cu.cuGraphLaunch(x, None) or cu.cuCtxSynchronize()
r5 = cu.cuMemFree_v2(p)
r6 = cu.cuGraphLaunch(x, None) or cu.cuCtxSynchronize()
r7 = cu.cuMemAlloc_v2(ctypes.byref(p), c_size(12 << 20))
print(r1, r2, r3, r4, r5, r6, r7)
'''


def test_graph_memory_freed_leaves_the_quota(start_pvgpud, libdir, short_tmp):
    """Graph memory counts against the VM's quota until cuMemFree frees it:
    12 MiB of a 16 MiB quota held by an allocation node leave no room for
    12 MiB more (out of memory) until it is freed, then there is.  A launch
    of the graph maps its memory again, so it counts again: with the other
    12 MiB held the launch is out of memory, and once they are freed it
    runs."""
    from test_driver_programs import script_with_quota
    res = script_with_quota(start_pvgpud, libdir, short_tmp, QUOTA_SCRIPT, "16M")
    assert res.stdout.split() == ["2", "0", "0", "2", "0", "0", "2"], res.stdout
