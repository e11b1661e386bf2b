"""CUDA arrays on the wire (ops.spec array_create/array_copy, the generic
cuArrayDestroy),
spoken directly (tests/lib/pvgpu_wire.py) against `pvgpud --executor sim`:
a box goes into an array and comes back; every shape, box and handle the
guest sends is checked by the worker, and a bad one is a CUDA error for
that session only.  The runtime's view (cudaMallocArray, cudaMemcpy2DToArray,
cudaMemcpy3D with arrays) is tests/programs/kernels/arrays.cu, run by
test_driver_api.py.
"""
import os
import struct
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import pvgpu_wire as W  # noqa: E402

from curesult import (  # noqa: E402
    CUDA_SUCCESS, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_INVALID_HANDLE,
    CUDA_ERROR_NOT_SUPPORTED)
FLOAT, UINT8 = 0x20, 0x01


@pytest.fixture
def s(start_pvgpud):
    d = start_pvgpud("sim")
    s = W.Session(d.unix)
    s.hello()
    s.open_context()
    return s


def create(s, width=37, height=5, depth=0, fmt=FLOAT, channels=1, flags=0):
    return s.array(width, height, depth, fmt, channels, flags)


def alloc(s, size):
    return s.alloc(size)


def copy(s, array, dptr, x=0, y=0, z=0, width=16, height=2, depth=1, pitch=None,
         rows=0, to_array=1):
    return s.call("array_copy", array=array, x=x, y=y, z=z, width=width, height=height,
                  depth=depth, dptr=dptr, pitch=width if pitch is None else pitch,
                  rows=rows, to_array=to_array, stream=0)[0]


def test_box_round_trip(s):
    """Rows in, a sub-box out from an offset: the bytes a user wrote."""
    st, a = create(s, width=8, height=4)
    assert st == CUDA_SUCCESS and a
    src, dst = alloc(s, 4096), alloc(s, 4096)
    data = struct.pack("<32f", *range(32))
    assert s.call("memcpy_htod", data_in=data, dst=src, size=len(data), stream=0)[0] == 0
    assert copy(s, a, src, width=32, height=4) == CUDA_SUCCESS
    # 3 floats x 2 rows from (x = 2 floats, y = 1).
    assert copy(s, a, dst, x=8, y=1, width=12, height=2, to_array=0) == CUDA_SUCCESS
    st, _, _, back = s.call("memcpy_dtoh", src=dst, size=24, stream=0)
    assert st == CUDA_SUCCESS
    assert struct.unpack("<6f", back) == (10.0, 11.0, 12.0, 18.0, 19.0, 20.0)
    assert s.driver("cuArrayDestroy", a)[0] == CUDA_SUCCESS
    assert s.driver("cuArrayDestroy", a)[0] == CUDA_ERROR_INVALID_HANDLE
    assert copy(s, a, src) == CUDA_ERROR_INVALID_HANDLE


@pytest.mark.parametrize("shape,want", [
    (dict(fmt=0x77), CUDA_ERROR_NOT_SUPPORTED),          # not a format pvgpu takes
    (dict(channels=3), CUDA_ERROR_INVALID_VALUE),
    (dict(width=0), CUDA_ERROR_INVALID_VALUE),
    (dict(width=1 << 40), CUDA_ERROR_INVALID_VALUE),
    (dict(height=0, depth=4), CUDA_ERROR_INVALID_VALUE),  # 3D needs rows
    (dict(width=1 << 17, height=1 << 17, depth=1 << 17), CUDA_ERROR_INVALID_VALUE),
])
def test_bad_shapes(s, shape, want):
    assert create(s, **shape)[0] == want
    st, a = create(s)                    # the session goes on
    assert st == CUDA_SUCCESS and a


@pytest.mark.parametrize("box", [
    dict(x=2),                           # not a whole element
    dict(width=6),
    dict(x=37 * 4 - 8, width=16),        # past the end of a row
    dict(y=4, height=2),                 # past the last row
    dict(z=1),                           # a 2D array has one slice
    dict(pitch=8),                       # narrower than the box
    dict(height=5, pitch=1024),          # device side past its allocation
    dict(depth=2, rows=1),               # slices shorter than the box
    dict(x=(1 << 64) - 4),               # wraps
])
def test_bad_boxes(s, box):
    st, a = create(s)
    src = alloc(s, 4096)
    assert copy(s, a, src, **box) == CUDA_ERROR_INVALID_VALUE
    assert copy(s, a, src) == CUDA_SUCCESS


def test_unknown_handles_and_memory(s):
    st, a = create(s)
    src = alloc(s, 4096)
    assert copy(s, 12345, src) == CUDA_ERROR_INVALID_HANDLE
    assert copy(s, a, 0x1000) == CUDA_ERROR_INVALID_VALUE     # not the session's memory
    assert s.driver("cuArrayDestroy", (1 << 24) | 1)[0] == CUDA_ERROR_INVALID_HANDLE  # the context


def test_arrays_are_per_session(start_pvgpud):
    d = start_pvgpud("sim")
    a, b = W.Session(d.unix), W.Session(d.unix)
    for x in (a, b):
        x.hello()
        x.open_context()
    st, arr = create(a)
    assert st == CUDA_SUCCESS
    dptr = alloc(b, 4096)
    # The same id means nothing in b's session (b has no array at all).
    assert copy(b, arr, dptr) == CUDA_ERROR_INVALID_HANDLE
    assert b.driver("cuArrayDestroy", arr)[0] == CUDA_ERROR_INVALID_HANDLE
    assert copy(a, arr, alloc(a, 4096)) == CUDA_SUCCESS
