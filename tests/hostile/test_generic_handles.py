"""The generic driver call against a guest that forges handles or borrows
another session's: every handle argument of a moved call (annotations.py
GENERIC) is checked once by the worker (host-backend/session/generic.c),
and a wrong one is CUDA_ERROR_INVALID_HANDLE for that call alone, while
the session and its neighbour go on working; a device argument other than
the current context's is CUDA_ERROR_INVALID_DEVICE.  Against `pvgpud --executor
sim` and through a front `--executor remote` to a sim node.
"""
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import pvgpu_wire as W  # noqa: E402
from curesult import (CUDA_SUCCESS, CUDA_ERROR_INVALID_DEVICE,  # noqa: E402
                      CUDA_ERROR_INVALID_HANDLE)

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / os.environ.get("PVGPU_BUILD", "build")
IMAGE = BUILD / "tests" / "kernels" / "images" / "vecadd.fatbin"
G = W.GENERIC


@pytest.fixture(params=["sim", "remote"])
def daemon(request, start_pvgpud):
    """The sim, or a front `pvgpud --executor remote` before one."""
    back = start_pvgpud("sim")
    if request.param == "sim":
        return back
    return start_pvgpud("remote", extra_args=["--remote", back.tcp])


def module_function(s):
    st, _d, out, _ = s.call("module_load", data_in=IMAGE.read_bytes(),
                            size=IMAGE.stat().st_size)
    assert st == CUDA_SUCCESS, st
    st, _d, f, _ = s.call("module_get_function", module=out["module"], name="vec_add")
    assert st == CUDA_SUCCESS, st
    return f["func"]


def objects(s, pad=0):
    """One handle of each kind the moved calls take, made in session s
    after pad streams (so that its ids are not the other session's
    numbers): {call: [its arguments, the handle in place]}."""
    for _ in range(pad):
        assert s.call("stream_create", flags=1, priority=0)[0] == CUDA_SUCCESS
    fn = module_function(s)
    st, arr = s.array(16, 16, flags=2)                  # SURFACE_LDST
    assert st == CUDA_SUCCESS, st
    tex = dict(address0=1, address1=1, address2=0, filter=1, flags=2, max_aniso=0,
               mip_filter=0, mip_bias=0.0, mip_min=0.0, mip_max=1.0, border0=0.0,
               border1=0.0, border2=0.0, border3=1.0, res_flags=0, format=0,
               channels=0, width=0, height=0, pitch=0, size=0)
    st, _d, t, _ = s.call("tex_create", res_type=0, handle=arr, **tex)
    assert st == CUDA_SUCCESS, st
    st, _d, sf, _ = s.call("surf_create", array=arr)
    assert st == CUDA_SUCCESS, st
    st, res = s.driver("cuGraphCreate", 1, 0)
    assert st == CUDA_SUCCESS, st
    graph = res[0]
    node_st, _d, node, _ = s.call("graph_add_node", graph=graph, type=5, deps=[], func=0,
                             grid_x=0, grid_y=0, grid_z=0, block_x=0, block_y=0,
                             block_z=0, shared_bytes=0, params=b"", dst=0, src=0,
                             pitch=0, width=0, height=0, value=0, elem_size=0, host=0)
    events = []
    for _ in range(3):
        st, e = s.event_create()
        assert st == CUDA_SUCCESS, st
        events.append(e)
        s.queue("driver_call_async", fn=G["cuEventRecord"], args=[e, 0])
    assert s.call("ctx_synchronize")[0] == CUDA_SUCCESS
    return {
        "cuEventElapsedTime_v2": [1] + events[:2],
        "cuEventQuery": [events[0]],
        "cuEventSynchronize": [events[1]],
        "cuEventDestroy_v2": [events[2]],
        "cuFuncGetAttribute": [1, 0, fn],
        "cuFuncSetAttribute": [fn, 8, 1024],
        "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags": [1, fn, 128, 0, 0],
        "cuOccupancyAvailableDynamicSMemPerBlock": [1, fn, 2, 128],
        "cuTexObjectDestroy": [t["obj"]],
        "cuSurfObjectDestroy": [sf["obj"]],
        "cuArrayDestroy": [arr],
        "cuGraphDestroyNode": [node["node"]] if node_st == CUDA_SUCCESS else None,
    }


HANDLES = {"CUfunction", "CUarray", "CUtexObject", "CUsurfObject", "CUgraphNode",
           "CUevent"}


def handle_at(name):
    """Which arguments of generic call name are handles (annotations.py)."""
    return [t.rstrip("!*") in HANDLES and not t.endswith("*")
            for t in W.GENERIC_ARGS[G[name]][0]]


def replaced(name, args, by):
    """args with each handle argument i replaced by by(i)."""
    return [by(i) if h else a for i, (a, h) in enumerate(zip(args, handle_at(name)))]


def test_moved_calls_check_every_handle(daemon):
    """Each moved call with a handle made up, or another session's, is
    CUDA_ERROR_INVALID_HANDLE for that call alone; with its own, it works,
    and both sessions go on working."""
    a, b = W.context_session(daemon.unix), W.context_session(daemon.unix)
    mine, theirs = objects(a), objects(b, pad=8)
    for name, args in mine.items():
        if args is None:                # an executor without explicit nodes
            continue
        assert any(handle_at(name)), name
        made_up = replaced(name, args, lambda i: args[i] ^ 0x5eed0000)
        assert a.driver(name, *made_up)[0] == CUDA_ERROR_INVALID_HANDLE, name
        other = theirs[name]
        borrowed = other and replaced(name, args, lambda i: other[i])
        # Texture and surface objects are the driver's values, which two
        # sessions' drivers may both hand out: only a different one counts.
        if borrowed and borrowed != args:
            assert a.driver(name, *borrowed)[0] == CUDA_ERROR_INVALID_HANDLE, name
        st, _ = a.driver(name, *args)
        assert st == CUDA_SUCCESS, (name, st)
    for name, args in theirs.items():
        if args is not None:
            assert b.driver(name, *args)[0] == CUDA_SUCCESS, name


def test_device_is_the_current_contexts(daemon):
    """A device argument (annotations.py `CUdevice@ctx`) that is not the
    current context's device is CUDA_ERROR_INVALID_DEVICE for that call
    alone: the guest reaches no other GPU's graph memory through it."""
    s = W.context_session(daemon.unix)
    for dev in (1, 99, (1 << 64) - 1, 1 << 32):
        assert s.driver("cuDeviceGraphMemTrim", dev)[0] == CUDA_ERROR_INVALID_DEVICE, dev
        st, _d, _o, _ = s.call("driver_call_data", fn=G["cuDeviceGetGraphMemAttribute"],
                               args=[dev, 0, 1], input=b"")
        assert st == CUDA_ERROR_INVALID_DEVICE, dev
        st, _d, _o, _ = s.call("driver_call_data", fn=G["cuDeviceSetGraphMemAttribute"],
                               args=[dev, 1, 1], input=bytes(8))
        assert st == CUDA_ERROR_INVALID_DEVICE, dev
    assert s.driver("cuDeviceGraphMemTrim", 0)[0] == CUDA_SUCCESS
