"""Texture and surface objects on the wire (ops.spec tex_create/surf_create,
the generic cuTexObjectDestroy/cuSurfObjectDestroy) and arrays with
layered/cubemap/surface/gather flags, spoken directly (tests/lib/pvgpu_wire.py) against `pvgpud --executor
sim`.  The sim cannot sample a texture: its objects are opaque values, so
these tests check the protocol, the worker's checks of every descriptor
field, and that a session names only its own objects.  What a kernel reads
through them is tests/programs/kernels/textures.cu, run on the GPU by
tests/gpu (its sim twin is left out: the sim has no texture unit).
"""
import math
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import pvgpu_wire as W  # noqa: E402

from curesult import (  # noqa: E402
    CUDA_SUCCESS, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_INVALID_HANDLE,
    CUDA_ERROR_NOT_SUPPORTED)
FLOAT = 0x20
RES_ARRAY, RES_MIPMAPPED, RES_LINEAR, RES_PITCH2D = 0, 1, 2, 3
LAYERED, SURFACE_LDST, CUBEMAP, GATHER, SPARSE = 0x01, 0x02, 0x04, 0x08, 0x40
NORMALIZED = 0x02


def session(daemon):
    s = W.Session(daemon.unix)
    s.hello()
    ctx = s.open_context()
    return s, ctx


@pytest.fixture
def s(start_pvgpud):
    return session(start_pvgpud("sim"))[0]


def array(s, width=16, height=8, **kw):
    return s.array(width, height, **kw)


def alloc(s, size):
    return s.alloc(size)


TEX = dict(address0=1, address1=1, address2=1, filter=1, flags=NORMALIZED, max_aniso=0,
           mip_filter=0, mip_bias=0.0, mip_min=0.0, mip_max=0.0,
           border0=0.0, border1=0.0, border2=0.0, border3=0.0)


def tex(s, res_type=RES_ARRAY, handle=0, **kw):
    f = dict(res_type=res_type, handle=handle, format=0, channels=0, width=0, height=0,
             pitch=0, size=0, res_flags=0, **TEX)
    f.update(kw)
    st, _, out, _ = s.call("tex_create", **f)
    return st, out.get("obj", 0)


def test_texture_on_an_array(s):
    st, a = array(s)
    assert st == CUDA_SUCCESS
    st, t = tex(s, RES_ARRAY, a)
    assert st == CUDA_SUCCESS and t
    st, t2 = tex(s, RES_ARRAY, a, filter=0, flags=0)
    assert st == CUDA_SUCCESS and t2 and t2 != t
    assert s.driver("cuTexObjectDestroy", t)[0] == CUDA_SUCCESS
    assert s.driver("cuTexObjectDestroy", t)[0] == CUDA_ERROR_INVALID_HANDLE
    assert s.driver("cuTexObjectDestroy", t2)[0] == CUDA_SUCCESS


def test_texture_on_device_memory(s):
    d = alloc(s, 4096)
    st, lin = tex(s, RES_LINEAR, d, format=FLOAT, channels=1, size=4096)
    assert st == CUDA_SUCCESS and lin
    st, p2d = tex(s, RES_PITCH2D, d + 512, format=FLOAT, channels=2, width=16, height=7,
                  pitch=512)
    assert st == CUDA_SUCCESS and p2d
    for t in (lin, p2d):
        assert s.driver("cuTexObjectDestroy", t)[0] == CUDA_SUCCESS


@pytest.mark.parametrize("kw,want", [
    (dict(res_type=9), CUDA_ERROR_INVALID_VALUE),
    (dict(res_type=RES_MIPMAPPED), CUDA_ERROR_NOT_SUPPORTED),
    (dict(res_flags=1), CUDA_ERROR_INVALID_VALUE),
    (dict(format=FLOAT), CUDA_ERROR_INVALID_VALUE),          # array: no linear fields
    (dict(address0=4), CUDA_ERROR_INVALID_VALUE),
    (dict(address2=0xffffffff), CUDA_ERROR_INVALID_VALUE),
    (dict(filter=2), CUDA_ERROR_INVALID_VALUE),
    (dict(mip_filter=7), CUDA_ERROR_INVALID_VALUE),
    (dict(flags=0x80), CUDA_ERROR_INVALID_VALUE),
    # The driver clamps these for every program: they pass.
    (dict(max_aniso=1000, mip_max=math.inf, mip_bias=math.nan), CUDA_SUCCESS),
])
def test_bad_texture_descriptors(s, kw, want):
    st, a = array(s)
    assert st == CUDA_SUCCESS
    f = dict(res_type=RES_ARRAY, handle=a)
    f.update(kw)
    assert tex(s, **f)[0] == want
    st, t = tex(s, RES_ARRAY, a)            # the session goes on
    assert st == CUDA_SUCCESS and t


@pytest.mark.parametrize("kw", [
    dict(res_type=RES_LINEAR, size=0),
    dict(res_type=RES_LINEAR, size=4098),                      # not whole elements
    dict(res_type=RES_LINEAR, size=64, channels=3),
    dict(res_type=RES_LINEAR, size=64, format=0x77),
    dict(res_type=RES_LINEAR, size=64, width=4),               # a pitch2D field
    dict(res_type=RES_PITCH2D, width=16, height=8, pitch=32),  # pitch under a row
    dict(res_type=RES_PITCH2D, width=0, height=8, pitch=512),
    dict(res_type=RES_PITCH2D, width=1 << 40, height=1 << 40, pitch=1 << 62),  # wraps
    dict(res_type=RES_PITCH2D, width=16, height=1 << 30, pitch=1 << 40),  # wraps
    dict(res_type=RES_PITCH2D, width=16, height=8, pitch=512, size=4),
])
def test_bad_device_resources(s, kw):
    d = alloc(s, 4096)
    kw = dict(kw)
    ptr = d + kw.pop("offset", 0)
    f = dict(format=FLOAT, channels=1)
    f.update(kw)
    assert tex(s, handle=ptr, **f)[0] == CUDA_ERROR_INVALID_VALUE


@pytest.mark.parametrize("kw", [
    dict(res_type=RES_LINEAR, size=8192),                      # past the allocation
    dict(res_type=RES_LINEAR, size=64, offset=4090 - 2),       # runs off its end
    dict(res_type=RES_PITCH2D, width=16, height=9, pitch=512),  # rows past its end
])
def test_texture_may_run_past_its_allocation(s, kw):
    """As NVIDIA's driver allows (its convolutionFFT2D sample relies on it):
    the base must be the session's memory, the span may run past the end,
    where only this session's own address space lies (one per worker)."""
    d = alloc(s, 4096)
    kw = dict(kw)
    ptr = d + kw.pop("offset", 0)
    f = dict(format=FLOAT, channels=1)
    f.update(kw)
    st, t = tex(s, handle=ptr, **f)
    assert st == CUDA_SUCCESS and t
    assert s.driver("cuTexObjectDestroy", t)[0] == CUDA_SUCCESS
    # Past the end of the allocation, the base itself: not the session's.
    f["handle"] = d + 4096 + 4096
    assert tex(s, **f)[0] == CUDA_ERROR_INVALID_VALUE


def test_forged_and_foreign_values(s):
    st, a = array(s)
    assert tex(s, RES_ARRAY, 12345)[0] == CUDA_ERROR_INVALID_HANDLE
    assert tex(s, RES_LINEAR, 0x1000, format=FLOAT, channels=1, size=64)[0] == \
        CUDA_ERROR_INVALID_VALUE                       # not the session's memory
    st, t = tex(s, RES_ARRAY, a)
    assert st == CUDA_SUCCESS
    for v in (0, 12345, t + 1, (1 << 64) - 1):
        assert s.driver("cuTexObjectDestroy", v)[0] == CUDA_ERROR_INVALID_HANDLE
    assert s.driver("cuSurfObjectDestroy", t)[0] == CUDA_ERROR_INVALID_HANDLE  # a texture
    assert s.driver("cuTexObjectDestroy", t)[0] == CUDA_SUCCESS


def test_objects_are_per_session(start_pvgpud):
    d = start_pvgpud("sim")
    (a, _), (b, _) = session(d), session(d)
    st, arr = array(a, flags=SURFACE_LDST)
    st, t = tex(a, RES_ARRAY, arr)
    assert st == CUDA_SUCCESS
    st, _, out, _ = a.call("surf_create", array=arr)
    assert st == CUDA_SUCCESS
    sf = out["obj"]
    # b made nothing: a's values mean nothing there, and a's array is not b's.
    assert b.driver("cuTexObjectDestroy", t)[0] == CUDA_ERROR_INVALID_HANDLE
    assert b.driver("cuSurfObjectDestroy", sf)[0] == CUDA_ERROR_INVALID_HANDLE
    assert tex(b, RES_ARRAY, arr)[0] == CUDA_ERROR_INVALID_HANDLE
    assert b.call("surf_create", array=arr)[0] == CUDA_ERROR_INVALID_HANDLE
    assert a.driver("cuTexObjectDestroy", t)[0] == CUDA_SUCCESS
    assert a.driver("cuSurfObjectDestroy", sf)[0] == CUDA_SUCCESS


def test_objects_go_with_their_context(start_pvgpud):
    s, ctx = session(start_pvgpud("sim"))
    st, a = array(s, flags=SURFACE_LDST)
    st, t = tex(s, RES_ARRAY, a)
    assert st == CUDA_SUCCESS
    st, _, out, _ = s.call("surf_create", array=a)
    assert st == CUDA_SUCCESS
    assert s.call("ctx_destroy", ctx=ctx)[0] == CUDA_SUCCESS
    s.open_context()
    assert s.driver("cuTexObjectDestroy", t)[0] == CUDA_ERROR_INVALID_HANDLE
    assert s.driver("cuSurfObjectDestroy", out["obj"])[0] == CUDA_ERROR_INVALID_HANDLE


def test_surface_needs_load_store_array(s):
    st, plain = array(s)
    assert s.call("surf_create", array=plain)[0] == CUDA_ERROR_INVALID_VALUE
    assert s.call("surf_create", array=999)[0] == CUDA_ERROR_INVALID_HANDLE
    st, a = array(s, flags=SURFACE_LDST)
    assert st == CUDA_SUCCESS
    st, _, out, _ = s.call("surf_create", array=a)
    assert st == CUDA_SUCCESS and out["obj"]
    assert s.driver("cuTexObjectDestroy", out["obj"])[0] == CUDA_ERROR_INVALID_HANDLE
    assert s.driver("cuSurfObjectDestroy", out["obj"])[0] == CUDA_SUCCESS
    assert s.driver("cuSurfObjectDestroy", out["obj"])[0] == CUDA_ERROR_INVALID_HANDLE


@pytest.mark.parametrize("shape,want", [
    (dict(width=64, height=0, depth=4, flags=LAYERED), CUDA_SUCCESS),        # 1D layered
    (dict(width=16, height=8, depth=3, flags=LAYERED), CUDA_SUCCESS),        # 2D layered
    (dict(width=16, height=8, depth=0, flags=LAYERED), CUDA_ERROR_INVALID_VALUE),
    (dict(width=8, height=8, depth=6, flags=CUBEMAP), CUDA_SUCCESS),
    (dict(width=8, height=8, depth=12, flags=CUBEMAP | LAYERED), CUDA_SUCCESS),
    (dict(width=8, height=4, depth=6, flags=CUBEMAP), CUDA_ERROR_INVALID_VALUE),  # square faces
    (dict(width=8, height=8, depth=5, flags=CUBEMAP), CUDA_ERROR_INVALID_VALUE),
    (dict(width=8, height=8, depth=12, flags=CUBEMAP), CUDA_ERROR_INVALID_VALUE),
    (dict(width=8, height=8, depth=9, flags=CUBEMAP | LAYERED), CUDA_ERROR_INVALID_VALUE),
    (dict(width=16, height=8, flags=GATHER), CUDA_SUCCESS),
    (dict(width=16, height=8, depth=2, flags=GATHER), CUDA_ERROR_INVALID_VALUE),
    (dict(width=16, height=8, flags=SURFACE_LDST | LAYERED, depth=2), CUDA_SUCCESS),
    (dict(width=16, height=8, flags=SPARSE), CUDA_ERROR_NOT_SUPPORTED),
])
def test_array_flags(s, shape, want):
    assert array(s, **shape)[0] == want


def test_layered_and_cubemap_charge_and_boxes(s):
    """A cubemap holds 6 faces, a layered array its layers: both are charged
    in full, and a copy reaches the last face or layer and no further."""
    st, _, base, _ = s.call("mem_get_info")
    assert st == CUDA_SUCCESS
    st, cube = array(s, width=64, height=64, depth=6, flags=CUBEMAP)
    assert st == CUDA_SUCCESS
    st, _, after, _ = s.call("mem_get_info")
    assert base["free"] - after["free"] == 64 * 64 * 6 * 4
    src = alloc(s, 64 * 64 * 4)
    box = dict(array=cube, x=0, y=0, width=256, height=64, depth=1, dptr=src, pitch=256,
               rows=64, to_array=1, stream=0)
    assert s.call("array_copy", z=5, **box)[0] == CUDA_SUCCESS
    assert s.call("array_copy", z=6, **box)[0] == CUDA_ERROR_INVALID_VALUE
    st, lay = array(s, width=64, height=0, depth=3, flags=LAYERED)
    assert st == CUDA_SUCCESS
    box.update(array=lay, height=1, rows=1)
    assert s.call("array_copy", z=2, **box)[0] == CUDA_SUCCESS
    assert s.call("array_copy", z=3, **box)[0] == CUDA_ERROR_INVALID_VALUE
