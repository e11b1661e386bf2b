"""Explicit CUDA graph nodes over pvgpu's libcuda.so.1
against `pvgpud --executor sim`: a graph built node by node (memset ->
kernel -> memcpy), instantiated, launched twice, its executable kernel
node updated; node handles checked by the worker (a node of another
graph, a stale one or a made-up one is refused); what pvgpu cannot carry
(a node after a host node, other node types) is
CUDA_ERROR_NOT_SUPPORTED naming why.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
from test_driver_api import BUILD, LIBCUDA, run_script  # noqa: E402
from pvgpu_guest import SCRIPT_PRELUDE, guest_env, run_guest_script  # noqa: E402

# What both scripts start with: the driver's structs, a context, vec_add.
PRELUDE = SCRIPT_PRELUDE + r'''
image = open(sys.argv[2], "rb").read()

class KernelParams(ctypes.Structure):   # CUDA_KERNEL_NODE_PARAMS (v2)
    _fields_ = [("func", vp)] + [(f, c_uint) for f in (
        "gx", "gy", "gz", "bx", "by", "bz", "smem")] + [
        ("kernelParams", vp), ("extra", vp), ("kern", vp), ("ctx", vp)]
class MemsetParams(ctypes.Structure):   # CUDA_MEMSET_NODE_PARAMS
    _fields_ = [("dst", c_u64), ("pitch", c_size), ("value", c_uint),
                ("elementSize", c_uint), ("width", c_size), ("height", c_size)]
def end(p):
    return [(p + "XInBytes", c_size), (p + "Y", c_size), (p + "Z", c_size),
            (p + "LOD", c_size), (p + "MemoryType", c_int), (p + "Host", vp),
            (p + "Device", c_u64), (p + "Array", vp), (p + "reserved", vp),
            (p + "Pitch", c_size), (p + "Height", c_size)]
class Memcpy3D(ctypes.Structure):       # CUDA_MEMCPY3D
    _fields_ = end("src") + end("dst") + [("WidthInBytes", c_size),
                                          ("Height", c_size), ("Depth", c_size)]
DEVICE, HOST = 2, 1                     # CUmemorytype

dev, ctx = context()
mod, fn = vp(), vp()
must("cuModuleLoadData", ctypes.byref(mod), image)
must("cuModuleGetFunction", ctypes.byref(fn), mod, b"vec_add")
'''

SCRIPT = PRELUDE + r'''
n = 1000
a, b, c, d = c_u64(), c_u64(), c_u64(), c_u64()
for p in (a, b, c, d):
    must("cuMemAlloc_v2", ctypes.byref(p), c_size(4 * n))
must("cuMemcpyHtoD_v2", a, struct.pack("%df" % n, *[float(i) for i in range(n)]),
     c_size(4 * n))
s = vp()
must("cuStreamCreate", ctypes.byref(s), 1)
def result(p):
    out = (ctypes.c_float * n)()
    must("cuMemcpyDtoH_v2", out, p, c_size(4 * n))
    return out[10], out[999]

g = vp()
must("cuGraphCreate", ctypes.byref(g), 0)
# b = 2.0f everywhere; c = a + b; d = c.
ms = MemsetParams(dst=b.value, pitch=0, value=0x40000000, elementSize=4, width=n, height=1)
m_node, k_node, c_node = vp(), vp(), vp()
must("cuGraphAddMemsetNode", ctypes.byref(m_node), g, None, c_size(0), ctypes.byref(ms), ctx)
cnt = c_int(n)
args = (vp * 4)(ctypes.addressof(a), ctypes.addressof(b), ctypes.addressof(c),
                ctypes.addressof(cnt))
kp = KernelParams(func=fn.value, gx=4, gy=1, gz=1, bx=256, by=1, bz=1, smem=0,
                  kernelParams=ctypes.cast(args, vp).value)
deps = (vp * 1)(m_node)
must("cuGraphAddKernelNode_v2", ctypes.byref(k_node), g, deps, c_size(1), ctypes.byref(kp))
cp = Memcpy3D(srcMemoryType=DEVICE, srcDevice=c.value, dstMemoryType=DEVICE,
              dstDevice=d.value, WidthInBytes=4 * n, Height=1, Depth=1)
deps = (vp * 1)(k_node)
must("cuGraphAddMemcpyNode", ctypes.byref(c_node), g, deps, c_size(1), ctypes.byref(cp), ctx)
types = []
for node in (m_node, k_node, c_node):
    t = c_int(-1)
    must("cuGraphNodeGetType", node, ctypes.byref(t))
    types.append(t.value)
print("types", types)
count = c_size(0)
must("cuGraphGetNodes", g, None, ctypes.byref(count))
print("nodes", count.value)

exe = vp()
must("cuGraphInstantiateWithFlags", ctypes.byref(exe), g, c_u64(0))
print("before launch", result(d))
must("cuGraphLaunch", exe, s)
must("cuStreamSynchronize", s)
print("first launch", result(d))
must("cuMemsetD32_v2", d, 0, c_size(n))
must("cuGraphLaunch", exe, s)
must("cuStreamSynchronize", s)
print("second launch", result(d))

# The executable graph's kernel node: c = a + a.  The graph keeps its own.
args2 = (vp * 4)(ctypes.addressof(a), ctypes.addressof(a), ctypes.addressof(c),
                 ctypes.addressof(cnt))
kp2 = KernelParams(func=fn.value, gx=4, gy=1, gz=1, bx=256, by=1, bz=1, smem=0,
                   kernelParams=ctypes.cast(args2, vp).value)
must("cuGraphExecKernelNodeSetParams_v2", exe, k_node, ctypes.byref(kp2))
must("cuGraphLaunch", exe, s)
must("cuStreamSynchronize", s)
print("after exec update", result(d))
got = KernelParams()
must("cuGraphKernelNodeGetParams_v2", k_node, ctypes.byref(got))
kargs = ctypes.cast(got.kernelParams, ctypes.POINTER(vp))
print("graph's node", got.func == fn.value, got.gx, got.bx,
      ctypes.c_int.from_address(kargs[3]).value,
      c_u64.from_address(kargs[1]).value == b.value)
print("exec set on a memset node", call("cuGraphExecKernelNodeSetParams_v2", exe, m_node,
                                         ctypes.byref(kp2)))
# A new executable graph from the graph: a + b again.
exe2 = vp()
must("cuGraphInstantiateWithFlags", ctypes.byref(exe2), g, c_u64(0))
must("cuGraphLaunch", exe2, s)
must("cuStreamSynchronize", s)
print("fresh instance", result(d))

# A clone: its own nodes, listed with their types; its kernel node
# changed (c = a + a) and exe2 updated from it.
cl = vp()
must("cuGraphClone", ctypes.byref(cl), g)
count = c_size(8)
cnodes = (vp * 8)()
must("cuGraphGetNodes", cl, cnodes, ctypes.byref(count))
ctypes_ = []
for i in range(count.value):
    must("cuGraphNodeGetType", vp(cnodes[i]), ctypes.byref(t := c_int(-1)))
    ctypes_.append(t.value)
print("clone", count.value, sorted(ctypes_),
      not set(cnodes[:count.value]) & {m_node.value, k_node.value, c_node.value})
ck = vp(cnodes[ctypes_.index(0)])
must("cuGraphKernelNodeSetParams_v2", ck, ctypes.byref(kp2))
class UpdateInfo(ctypes.Structure):     # CUgraphExecUpdateResultInfo
    _fields_ = [("result", c_int), ("errorNode", vp), ("errorFromNode", vp)]
info = UpdateInfo(result=-1)
must("cuGraphExecUpdate_v2", exe2, cl, ctypes.byref(info))
print("update", info.result)
must("cuGraphLaunch", exe2, s)
must("cuStreamSynchronize", s)
print("after exec update from the clone", result(d))
extra = vp()
must("cuGraphAddEmptyNode", ctypes.byref(extra), cl, None, c_size(0))
info = UpdateInfo(result=-1)
print("topology changed", call("cuGraphExecUpdate_v2", exe2, cl, ctypes.byref(info)),
      info.result)
must("cuGraphDestroy", cl)

# A captured graph's nodes get ids too.
cap = vp()
must("cuStreamBeginCapture_v2", s, 0)
must("cuLaunchKernel", fn, 4, 1, 1, 256, 1, 1, 0, s, args, None)
must("cuLaunchKernel", fn, 4, 1, 1, 256, 1, 1, 0, s, args2, None)
must("cuStreamEndCapture", s, ctypes.byref(cap))
count = c_size(8)
must("cuGraphGetNodes", cap, cnodes, ctypes.byref(count))
kinds = []
for i in range(count.value):
    must("cuGraphNodeGetType", vp(cnodes[i]), ctypes.byref(t))
    kinds.append(t.value)
print("captured", count.value, kinds)
must("cuGraphDestroy", cap)

# Handles the worker refuses.
t = c_int(-1)
print("made-up node", call("cuGraphNodeGetType", vp(0x12345), ctypes.byref(t)))
g2, e2, e3 = vp(), vp(), vp()
must("cuGraphCreate", ctypes.byref(g2), 0)
deps = (vp * 1)(k_node)
print("dep of another graph", call("cuGraphAddEmptyNode", ctypes.byref(e2), g2, deps, c_size(1)))
must("cuGraphAddEmptyNode", ctypes.byref(e2), g2, None, c_size(0))
print("edge across graphs", call("cuGraphAddDependencies", g2, (vp * 1)(k_node),
                                 (vp * 1)(e2), c_size(1)))
deps = (vp * 2)(e2, e2)
print("repeated dep", call("cuGraphAddEmptyNode", ctypes.byref(e3), g2, deps, c_size(2)))
print("no params", call("cuGraphAddKernelNode_v2", ctypes.byref(e3), g2, None, c_size(0),
                        ctypes.byref(KernelParams(func=fn.value, gx=1, gy=1, gz=1,
                                                  bx=1, by=1, bz=1))))
past = MemsetParams(dst=a.value + 4 * n - 4, value=0, elementSize=4, width=2, height=1)
print("memset past the end", call("cuGraphAddMemsetNode", ctypes.byref(e3), g2, None,
                                  c_size(0), ctypes.byref(past), ctx))
host = (ctypes.c_float * n)()
hp = Memcpy3D(srcMemoryType=DEVICE, srcDevice=c.value, dstMemoryType=HOST,
              dstHost=ctypes.addressof(host), WidthInBytes=4 * n, Height=1, Depth=1)
print("host copy node", call("cuGraphAddMemcpyNode", ctypes.byref(e3), g2, None, c_size(0),
                             ctypes.byref(hp), ctx))
# A host node runs the guest's function after the graph's device work.
ran = []
HostFn = ctypes.CFUNCTYPE(None, vp)
hostfn = HostFn(lambda data: ran.append(data))
g3, hn, after, exe4, cl3 = vp(), vp(), vp(), vp(), vp()
must("cuGraphCreate", ctypes.byref(g3), 0)
ms3 = MemsetParams(dst=d.value, value=9, elementSize=4, width=n, height=1)
must("cuGraphAddMemsetNode", ctypes.byref(e3), g3, None, c_size(0), ctypes.byref(ms3), ctx)
hp_ = (vp * 2)(ctypes.cast(hostfn, vp), vp(42))
must("cuGraphAddHostNode", ctypes.byref(hn), g3, (vp * 1)(e3), c_size(1), hp_)
must("cuGraphNodeGetType", hn, ctypes.byref(t))
print("host node type", t.value)
print("after a host node", call("cuGraphAddEmptyNode", ctypes.byref(after), g3,
                                (vp * 1)(hn), c_size(1)))
print("clone with a host node", call("cuGraphClone", ctypes.byref(cl3), g3))
must("cuGraphInstantiateWithFlags", ctypes.byref(exe4), g3, c_u64(0))
must("cuGraphLaunch", exe4, s)
must("cuGraphLaunch", exe4, s)
words = (ctypes.c_uint32 * n)()
must("cuMemcpyDtoH_v2", words, d, c_size(4 * n))
print("host node ran", ran, words[0])
must("cuGraphExecDestroy", exe4)
must("cuGraphDestroy", g3)
# cuGraphAddNode_v2: a memset node by CUgraphNodeParams; a host node is refused.
params = ctypes.create_string_buffer(256)
struct.pack_into("<i12x", params, 0, 2)            # CU_GRAPH_NODE_TYPE_MEMSET
struct.pack_into("<QQIIQQQ", params, 16, d.value, 0, 7, 4, n, 1, 0)
e4 = vp()
must("cuGraphAddNode_v2", ctypes.byref(e4), g2, (vp * 1)(e2), None, c_size(1), params)
struct.pack_into("<i", params, 0, 4)               # CU_GRAPH_NODE_TYPE_GRAPH
print("child graph by AddNode", call("cuGraphAddNode_v2", ctypes.byref(e3), g2, None, None,
                              c_size(0), params))
exe3 = vp()
must("cuGraphInstantiateWithFlags", ctypes.byref(exe3), g2, c_u64(0))
must("cuGraphLaunch", exe3, s)
must("cuStreamSynchronize", s)
words = (ctypes.c_uint32 * n)()
must("cuMemcpyDtoH_v2", words, d, c_size(4 * n))
print("AddNode memset", words[0], words[999])
must("cuGraphDestroyNode", e2)
print("destroyed node", call("cuGraphNodeGetType", e2, ctypes.byref(t)))
must("cuGraphExecDestroy", exe3)
must("cuGraphDestroy", g2)
print("node of a destroyed graph", call("cuGraphNodeGetType", e4, ctypes.byref(t)))
must("cuGraphExecDestroy", exe)
must("cuGraphExecDestroy", exe2)
must("cuGraphDestroy", g)
print("PASS")
'''


def test_explicit_graph_nodes(twins_daemon, libdir, tmp_path):
    """What a user of cuGraphAdd*Node checks: the graph computes what its
    nodes say, every launch, and an executable graph's update changes that
    instance only."""
    image = BUILD / "tests" / "kernels" / "images" / "vecadd.fatbin"
    out, err = run_script(twins_daemon, libdir, tmp_path, SCRIPT, image, debug=True)
    assert "types [2, 0, 1]" in out, out           # memset, kernel, memcpy
    assert "nodes 3" in out
    assert "before launch (0.0, 0.0)" in out       # nothing runs until launched
    # d = a + 2.0 after each launch (the memset node sets b).
    assert "first launch (12.0, 1001.0)" in out, out
    assert "second launch (12.0, 1001.0)" in out, out
    assert "after exec update (20.0, 1998.0)" in out, out
    assert "graph's node True 4 256 1000 True" in out, out
    assert "exec set on a memset node 1" in out    # CUDA_ERROR_INVALID_VALUE
    assert "fresh instance (12.0, 1001.0)" in out, out
    assert "clone 3 [0, 1, 2] True" in out, out    # new nodes, same types
    assert "update 0" in out                       # CU_GRAPH_EXEC_UPDATE_SUCCESS
    assert "after exec update from the clone (20.0, 1998.0)" in out, out
    # CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, ..._ERROR_TOPOLOGY_CHANGED
    assert "topology changed 910 2" in out, out
    assert "captured 2 [0, 0]" in out, out
    assert "made-up node 400" in out               # CUDA_ERROR_INVALID_HANDLE
    assert "dep of another graph 1" in out
    assert "edge across graphs 1" in out
    assert "repeated dep 1" in out
    assert "no params 1" in out
    assert "memset past the end 1" in out
    # Host memory outside the window: a staged node (test_graph_staged.py).
    assert "host copy node 0" in out
    assert "host node type 3" in out               # CU_GRAPH_NODE_TYPE_HOST
    assert "after a host node 801" in out
    assert "clone with a host node 0" in out      # test_graph_clone.py runs one
    # Each launch ran the host function once, after the memset before it.
    assert "host node ran [42, 42] 9" in out, out
    assert "child graph by AddNode 801" in out
    assert "AddNode memset 7 7" in out, out
    assert "destroyed node 400" in out
    assert "node of a destroyed graph 400" in out
    # Each refusal says why, when PVGPU_DEBUG is set.
    assert "a node after a host node is not supported" in err
    assert "node type 4 is not supported" in err
    assert " start: " in twins_daemon.log()


SHM_SCRIPT = PRELUDE + r'''
n = 1000
a, c = c_u64(), c_u64()
for p in (a, c):
    must("cuMemAlloc_v2", ctypes.byref(p), c_size(4 * n))
hin, hout = vp(), vp()
must("cuMemHostAlloc", ctypes.byref(hin), c_size(4 * n), 0)
must("cuMemHostAlloc", ctypes.byref(hout), c_size(4 * n), 0)
fin = (ctypes.c_float * n).from_address(hin.value)
fout = (ctypes.c_float * n).from_address(hout.value)
g = vp()
must("cuGraphCreate", ctypes.byref(g), 0)
up, k, down = vp(), vp(), vp()
cp = Memcpy3D(srcMemoryType=HOST, srcHost=hin.value, dstMemoryType=DEVICE,
              dstDevice=a.value, WidthInBytes=4 * n, Height=1, Depth=1)
must("cuGraphAddMemcpyNode", ctypes.byref(up), g, None, c_size(0), ctypes.byref(cp), ctx)
cnt = c_int(n)
args = (vp * 4)(ctypes.addressof(a), ctypes.addressof(a), ctypes.addressof(c),
                ctypes.addressof(cnt))
kp = KernelParams(func=fn.value, gx=4, gy=1, gz=1, bx=256, by=1, bz=1,
                  kernelParams=ctypes.cast(args, vp).value)
must("cuGraphAddKernelNode_v2", ctypes.byref(k), g, (vp * 1)(up), c_size(1), ctypes.byref(kp))
cp = Memcpy3D(srcMemoryType=DEVICE, srcDevice=c.value, dstMemoryType=HOST,
              dstHost=hout.value, WidthInBytes=4 * n, Height=1, Depth=1)
must("cuGraphAddMemcpyNode", ctypes.byref(down), g, (vp * 1)(k), c_size(1), ctypes.byref(cp), ctx)
exe, s = vp(), vp()
must("cuStreamCreate", ctypes.byref(s), 1)
must("cuGraphInstantiateWithFlags", ctypes.byref(exe), g, c_u64(0))
for scale in (1.0, 3.0):
    for i in range(n):
        fin[i] = scale * i
    must("cuGraphLaunch", exe, s)
    must("cuStreamSynchronize", s)
    print("launch", scale, fout[10], fout[999])
must("cuGraphExecDestroy", exe)
must("cuGraphDestroy", g)
print("PASS")
'''


def test_copy_nodes_with_window_memory(twins_daemon, libdir, tmp_path):
    """Over shm://, host memory from cuMemHostAlloc lies in the shared
    window, pinned: a graph's copy nodes read and write it on every launch,
    so what the program writes there before a launch is what the graph
    sees."""
    image = BUILD / "tests" / "kernels" / "images" / "vecadd.fatbin"
    uri = "shm://" + twins_daemon.unix[len("unix://"):]
    out, _ = run_guest_script(tmp_path, SHM_SCRIPT, LIBCUDA, guest_env(libdir, uri), image)
    # c = a + a, from the host buffer as it was at each launch.
    assert out[:2] == ["launch 1.0 20.0 1998.0", "launch 3.0 60.0 5994.0"], out
