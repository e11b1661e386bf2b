"""TMA descriptors (cuTensorMapEncodeTiled/Im2col): the backend's driver
encodes them (the 128 bytes are NVIDIA's own encoding; the sim writes a
plain one of its own so that each field can be seen arriving).  The base
address must be the session's memory; counts must match the rank; a bad
request is refused for that session only."""
import os
import struct
import sys
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import pvgpu_wire as W  # noqa: E402
from pvgpu_guest import SCRIPT_PRELUDE, guest_env, run_guest_script  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / os.environ.get("PVGPU_BUILD", "build")
LIBCUDA = BUILD / "lib" / "libcuda.so.1"
from curesult import CUDA_SUCCESS, CUDA_ERROR_INVALID_VALUE  # noqa: E402
FLOAT32 = 7

TILED = dict(im2col=0, dtype=FLOAT32, rank=2, dims=[64, 32], strides=[256], box=[16, 8],
             lower=[], upper=[], channels=0, pixels=0, elem_strides=[1, 1],
             interleave=0, swizzle=3, l2=2, oob=0)


@pytest.fixture
def s(start_pvgpud):
    s = W.Session(start_pvgpud("sim").unix)
    s.hello()
    s.open_context()
    return s


def encode(s, **kw):
    f = dict(TILED)
    f.update(kw)
    st, _, out, _ = s.call("tensor_map_encode", **f)
    return st, out.get("desc", [])


def test_tiled_map_of_the_sessions_memory(s):
    d = s.alloc(64 * 32 * 4)
    st, desc = encode(s, address=d)
    assert st == CUDA_SUCCESS and len(desc) == 16
    assert desc[0] == d and desc[1] & 0xff == FLOAT32 and (desc[1] >> 8) & 0xff == 2
    assert desc[2:4] == [64, 32] and desc[12] == 256


def test_im2col_map(s):
    d = s.alloc(1 << 16)
    st, desc = encode(s, address=d, im2col=1, rank=4, dims=[8, 16, 16, 2],
                      strides=[32, 512, 8192], box=[], lower=[-1, -1], upper=[1, 1],
                      channels=8, pixels=64, elem_strides=[1, 1, 1, 1])
    assert st == CUDA_SUCCESS and (desc[1] >> 16) & 1 == 1


@pytest.mark.parametrize("kw", [
    dict(rank=0, dims=[], strides=[], box=[], elem_strides=[]),
    dict(rank=6),
    dict(dims=[64]),                                 # fewer than the rank
    dict(strides=[256, 512]),                        # more than rank - 1
    dict(box=[16]),
    dict(elem_strides=[1, 1, 1]),
    dict(lower=[0]),                                 # an im2col field on a tiled map
    dict(im2col=1, rank=2, box=[]),                  # im2col needs rank 3 or more
    dict(im2col=2),
])
def test_counts_must_match_the_rank(s, kw):
    d = s.alloc(8192)
    assert encode(s, address=d, **kw)[0] == CUDA_ERROR_INVALID_VALUE
    assert encode(s, address=d)[0] == CUDA_SUCCESS      # the session goes on


def test_base_must_be_the_sessions(s, start_pvgpud):
    d = s.alloc(8192)
    assert encode(s, address=d + 8192 + 4096)[0] == CUDA_ERROR_INVALID_VALUE
    assert encode(s, address=0x7f0000000000)[0] == CUDA_ERROR_INVALID_VALUE
    other = W.Session(start_pvgpud("sim").unix)
    other.hello()
    other.open_context()
    assert encode(other, address=d)[0] == CUDA_ERROR_INVALID_VALUE
    # Past the allocation's end from a base inside it: the driver's to judge.
    assert encode(s, address=d, dims=[4096, 32])[0] == CUDA_SUCCESS


ENCODE = SCRIPT_PRELUDE + r"""
must("cuInit", 0)
ctx = ctypes.c_void_p()
must("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), 0)
must("cuCtxSetCurrent", ctx)
d = u64()
must("cuMemAlloc_v2", ctypes.byref(d), ctypes.c_size_t(64 * 32 * 4))
m = (u64 * 16)()
dims, strides = (u64 * 2)(64, 32), (u64 * 1)(256)
box, es = (u32 * 2)(16, 8), (u32 * 2)(1, 1)
must("cuTensorMapEncodeTiled", m, 7, 2, ctypes.c_void_p(d.value), dims, strides, box, es,
     0, 3, 2, 0)
print("tiled", m[0] == d.value, m[2], m[3])
print("no box", cu.cuTensorMapEncodeTiled(m, 7, 2, ctypes.c_void_p(d.value), dims, strides,
                                          None, es, 0, 3, 2, 0))
print("replace", cu.cuTensorMapReplaceAddress(m, ctypes.c_void_p(d.value)))
print("PASS")
"""


def test_through_libcuda(start_pvgpud, tmp_path):
    if not LIBCUDA.exists():
        pytest.fail(f"{LIBCUDA} is not built (run `make`)")
    daemon = start_pvgpud("sim")
    out, _ = run_guest_script(tmp_path, ENCODE, LIBCUDA, guest_env(LIBCUDA.parent, daemon.unix))
    assert "tiled True 64 32" in out
    assert "no box 1" in out
    assert "replace 801" in out                 # not supported (yet), said so
