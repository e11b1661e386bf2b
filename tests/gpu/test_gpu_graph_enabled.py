"""On the GPU: cuGraphNodeSetEnabled and cuGraphNodeGetEnabled, forwarded
by their annotation alone (protocol/api/annotations.py GENERIC), as XLA's
command buffers call them to switch a node of an instantiated graph off
and on again.

One program, run natively and through pvgpu's libcuda.so.1 against
`pvgpud --executor cuda`: a graph of one memset node, instantiated; the
node switched off, the graph launched (the memory keeps its value), then
on again (the memset happens).  Both runs print the same, and pvgpud
served the pvgpu run.  Through pvgpu, a node handle the session never
made is refused by the worker with CUDA_ERROR_INVALID_HANDLE.
"""
import os
import re
import subprocess
import sys
import textwrap

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from curesult import CUDA_ERROR_INVALID_HANDLE  # noqa: E402

PROGRAM = textwrap.dedent("""\
    import ctypes, sys
    cu = ctypes.CDLL("libcuda.so.1")

    class Memset(ctypes.Structure):     # CUDA_MEMSET_NODE_PARAMS
        _fields_ = [("dst", ctypes.c_uint64), ("pitch", ctypes.c_size_t),
                    ("value", ctypes.c_uint), ("elementSize", ctypes.c_uint),
                    ("width", ctypes.c_size_t), ("height", ctypes.c_size_t)]

    def ok(rc, what):
        if rc:
            print(what, "failed:", rc)
            sys.exit(1)

    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    ok(cu.cuInit(0), "cuInit")
    ok(cu.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    ok(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    ok(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    buf = ctypes.c_uint64()
    ok(cu.cuMemAlloc_v2(ctypes.byref(buf), 4), "cuMemAlloc")
    ok(cu.cuMemsetD32_v2(buf, 7, 1), "cuMemsetD32")
    graph, node, exe = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    ok(cu.cuGraphCreate(ctypes.byref(graph), 0), "cuGraphCreate")
    p = Memset(buf.value, 4, 0xAB, 4, 1, 1)
    ok(cu.cuGraphAddMemsetNode(ctypes.byref(node), graph, None, 0,
                               ctypes.byref(p), ctx), "cuGraphAddMemsetNode")
    ok(cu.cuGraphInstantiateWithFlags(ctypes.byref(exe), graph, 0),
       "cuGraphInstantiateWithFlags")

    def enabled():
        v = ctypes.c_uint(9)
        ok(cu.cuGraphNodeGetEnabled(exe, node, ctypes.byref(v)), "cuGraphNodeGetEnabled")
        return v.value

    def launch_and_read():
        ok(cu.cuGraphLaunch(exe, None), "cuGraphLaunch")
        ok(cu.cuCtxSynchronize(), "cuCtxSynchronize")
        out = ctypes.c_uint32()
        ok(cu.cuMemcpyDtoH_v2(ctypes.byref(out), buf, 4), "cuMemcpyDtoH")
        return hex(out.value)

    print("enabled at first:", enabled())
    ok(cu.cuGraphNodeSetEnabled(exe, node, 0), "cuGraphNodeSetEnabled 0")
    print("switched off:", enabled(), launch_and_read())
    ok(cu.cuGraphNodeSetEnabled(exe, node, 1), "cuGraphNodeSetEnabled 1")
    print("switched on:", enabled(), launch_and_read())
    if sys.argv[1:] == ["--foreign-node"]:
        print("foreign node:", cu.cuGraphNodeSetEnabled(exe, ctypes.c_void_p(0x7777), 0))
    """)


def run(env, *args):
    return subprocess.run([sys.executable, "-c", PROGRAM, *args], env=env,
                          stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=300)


def test_a_node_switched_off_and_on_as_natively(programs, native_libdir, libdir,
                                                 cuda_daemon):
    native = run(programs.native_env(native_libdir))
    assert native.returncode == 0, native.stdout + native.stderr
    assert native.stdout.splitlines() == [
        "enabled at first: 1", "switched off: 0 0x7", "switched on: 1 0xab"]

    before = len(re.findall(r"session \d+ start:", cuda_daemon.log()))
    env = programs.pvgpu_env(cuda_daemon.unix)
    pv = run(env, "--foreign-node")
    assert pv.returncode == 0, pv.stdout + pv.stderr + cuda_daemon.log()[-3000:]
    lines = pv.stdout.splitlines()
    assert lines[:3] == native.stdout.splitlines(), pv.stdout
    assert lines[3] == f"foreign node: {CUDA_ERROR_INVALID_HANDLE}", pv.stdout
    assert len(re.findall(r"session \d+ start:", cuda_daemon.log())) > before, \
        "pvgpud served no session: the program reached the GPU without pvgpu"
