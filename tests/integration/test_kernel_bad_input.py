"""Bad input for kernels, spoken directly on the wire
(tests/lib/pvgpu_wire.py) against `pvgpud --executor sim` with the test
programs' CPU twins: a malformed module image, a function handle the session
never got, a parameter buffer shorter than the layout, launch dimensions or
shared memory beyond the device's limits, and a kernel that faults. Each
gets a CUDA error for that session only; the session (or, after a fault,
the next one) keeps working, and so does every other session.

The images come from the build: $(BUILD)/tests/kernels/images/ holds
vecadd.cu and fault.cu compiled with `nvcc -fatbin/-cubin/-ptx`.
"""
import os
import random
import struct
import sys
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import pvgpu_wire as W  # noqa: E402

REPO = Path(__file__).resolve().parent.parent.parent
BUILD = REPO / os.environ.get("PVGPU_BUILD", "build")
IMAGES = BUILD / "tests" / "kernels" / "images"

from curesult import (  # noqa: E402
    CUDA_SUCCESS, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_NO_BINARY_FOR_GPU,
    CUDA_ERROR_INVALID_IMAGE, CUDA_ERROR_INVALID_PTX,
    CUDA_ERROR_INVALID_HANDLE, CUDA_ERROR_NOT_FOUND,
    CUDA_ERROR_ILLEGAL_ADDRESS, CUDA_ERROR_NOT_SUPPORTED,
    CUDA_ERROR_INVALID_CLUSTER_SIZE,
    CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE)

# What a malformed image may be answered with: what the driver itself says
# for such an image, or the generic invalid value (also acceptable: the
# caller learns the image was refused either way).
BAD_IMAGE = {CUDA_ERROR_INVALID_IMAGE, CUDA_ERROR_INVALID_VALUE}
# Random bytes are not an ELF or fatbinary, so a driver tries them as PTX
# text; "invalid PTX" is its answer to that.
BAD_BYTES = BAD_IMAGE | {CUDA_ERROR_INVALID_PTX}

FATBIN_MAGIC = 0xBA55ED50


def image(name):
    path = IMAGES / name
    if not path.exists():
        pytest.fail(f"{path} is not built (run `make test-programs`)")
    return path.read_bytes()


@pytest.fixture
def daemon(twins_daemon):
    """This file's daemon: the conftest's, with the programs' twins."""
    return twins_daemon


def session(daemon):
    s = W.Session(daemon.unix)
    s.hello()
    s.open_context()
    return s


def load(s, blob):
    """module_load: (status, module handle, hash)."""
    st, _d, out, _ = s.call("module_load", data_in=blob, size=len(blob))
    return st, out.get("module", 0), out.get("hash", b"")


def get_function(s, module, name):
    st, _d, out, _ = s.call("module_get_function", module=module, name=name)
    return st, out


def sync(s):
    """ctx_synchronize: the first error, whether it is the call's own status
    or a deferred one from queued work."""
    st, deferred, _, _ = s.call("ctx_synchronize")
    return st or deferred


class VecAdd:
    """vec_add(a, b, c, n) from vecadd.fatbin, with buffers to run it on."""

    def __init__(self, s, n=1000, blob=None):
        self.s, self.n = s, n
        st, self.module, self.hash = load(s, blob or image("vecadd.fatbin"))
        assert st == CUDA_SUCCESS, st
        st, out = get_function(s, self.module, "vec_add")
        assert st == CUDA_SUCCESS, st
        self.func = out["func"]
        self.offsets, self.sizes = out["param_offset"], out["param_size"]
        assert self.sizes == [8, 8, 8, 4], self.sizes
        self.bufs = []
        for _ in range(3):
            st, _, o, _ = s.call("mem_alloc", size=4 * n)
            assert st == CUDA_SUCCESS
            self.bufs.append(o["dptr"])
        self.a = [float(i % 100) for i in range(n)]
        self.b = [float(3 * i % 71) * 0.5 for i in range(n)]
        for buf, vals in zip(self.bufs, (self.a, self.b)):
            raw = struct.pack(f"<{n}f", *vals)
            assert s.call("memcpy_htod", data_in=raw, dst=buf, size=len(raw),
                          stream=0)[0] == CUDA_SUCCESS

    def params(self, n=None):
        n = self.n if n is None else n
        size = self.offsets[-1] + self.sizes[-1]
        raw = bytearray(size)
        for i, v in enumerate(self.bufs):
            struct.pack_into("<Q", raw, self.offsets[i], v)
        struct.pack_into("<i", raw, self.offsets[3], n)
        return bytes(raw)

    def launch(self, grid=None, block=(256, 1, 1), shared=0, params=None,
               func=None):
        grid = grid or ((self.n + 255) // 256, 1, 1)
        self.s.queue("launch_kernel", func=self.func if func is None else func,
                     grid_x=grid[0], grid_y=grid[1], grid_z=grid[2],
                     block_x=block[0], block_y=block[1], block_z=block[2],
                     shared_bytes=shared, stream=0,
                     params=self.params() if params is None else params)

    def run_and_check(self):
        """A good launch gives the right sums."""
        zero = bytes(4 * self.n)
        assert self.s.call("memcpy_htod", data_in=zero, dst=self.bufs[2],
                           size=len(zero), stream=0)[0] == CUDA_SUCCESS
        self.launch()
        assert sync(self.s) == CUDA_SUCCESS
        st, _, _, back = self.s.call("memcpy_dtoh", src=self.bufs[2],
                                     size=4 * self.n, stream=0)
        assert st == CUDA_SUCCESS
        got = struct.unpack(f"<{self.n}f", back)
        want = [x + y for x, y in zip(self.a, self.b)]
        assert list(got) == want


def assert_bad_image(s, blob, allowed):
    """The image is refused, at the upload or (if the backend loads it
    lazily) when a function is looked up in it: with one of `allowed`."""
    st, module, _ = load(s, blob)
    if st == CUDA_SUCCESS:
        st, _ = get_function(s, module, "vec_add")
    assert st in allowed, f"got CUresult {st}, expected one of {sorted(allowed)}"


# ---- module images ------------------------------------------------------

def test_truncated_fatbinary(daemon):
    s = session(daemon)
    fatbin = image("vecadd.fatbin")
    for cut in (8, 16, len(fatbin) // 3, len(fatbin) // 2, len(fatbin) - 1):
        assert_bad_image(s, fatbin[:cut], BAD_IMAGE)
    # The session is unharmed: the whole image loads and runs.
    VecAdd(s).run_and_check()


def test_malformed_fatbinary_headers(daemon):
    s = session(daemon)
    fatbin = bytearray(image("vecadd.fatbin"))
    magic, _ver, hdr_size, fat_size = struct.unpack_from("<IHHQ", fatbin)
    assert magic == FATBIN_MAGIC
    # The payload size claims far more than there is.
    bad = bytearray(fatbin)
    struct.pack_into("<Q", bad, 8, fat_size + (1 << 40))
    assert_bad_image(s, bytes(bad), BAD_IMAGE)
    # The first entry's offset and size point outside the image.
    bad = bytearray(fatbin)
    struct.pack_into("<I", bad, hdr_size + 4, 0xFFFFFFF0)   # entry header size
    struct.pack_into("<Q", bad, hdr_size + 8, 1 << 50)      # entry payload size
    assert_bad_image(s, bytes(bad), BAD_IMAGE)
    VecAdd(s).run_and_check()


def test_corrupted_cubin(daemon):
    s = session(daemon)
    cubin = image("vecadd.cubin")
    assert cubin[:4] == b"\x7fELF"
    # An ELF header and then nothing.
    assert_bad_image(s, cubin[:64], BAD_IMAGE)
    # The section header table moved past the end.
    bad = bytearray(cubin)
    struct.pack_into("<Q", bad, 0x28, len(cubin) + 4096)     # e_shoff
    assert_bad_image(s, bytes(bad), BAD_IMAGE)
    # The whole cubin, fine on its own, runs.
    VecAdd(s, blob=cubin).run_and_check()


def test_random_bytes_as_an_image(daemon):
    s = session(daemon)
    rng = random.Random(3)
    for size in (1, 7, 64, 4096, 100000):
        # Starts with a byte no text, ELF or fatbinary starts with.
        blob = b"\xfe" + bytes(rng.getrandbits(8) for _ in range(size - 1))
        assert_bad_image(s, blob, BAD_BYTES)
    VecAdd(s).run_and_check()


def test_ptx_only_image_loads(daemon):
    """A PTX image (what a -arch=compute_90 build carries) is JIT-loaded
    and its kernel runs: the parameter layout comes from the PTX."""
    s = session(daemon)
    VecAdd(s, blob=image("vecadd.ptx")).run_and_check()


def test_module_cache_is_shared_by_hash(daemon):
    a, b = session(daemon), session(daemon)
    va = VecAdd(a)
    assert len(va.hash) == 32
    st, _, out, _ = b.call("module_lookup", hash=va.hash)
    assert st == CUDA_SUCCESS, st
    st, fn = get_function(b, out["module"], "vec_add")
    assert st == CUDA_SUCCESS and fn["param_size"] == [8, 8, 8, 4]
    # A hash no upload produced names nothing.
    st, _, _, _ = b.call("module_lookup", hash=bytes(32))
    assert st != CUDA_SUCCESS
    st, _, _, _ = b.call("module_lookup", hash=b"short")
    assert st != CUDA_SUCCESS
    va.run_and_check()


def test_unknown_kernel_name_and_module_handle(daemon):
    s = session(daemon)
    va = VecAdd(s)
    st, _ = get_function(s, va.module, "no_such_kernel")
    assert st == CUDA_ERROR_NOT_FOUND
    st, _ = get_function(s, 0xDEAD0000, "vec_add")
    assert st == CUDA_ERROR_INVALID_HANDLE
    va.run_and_check()


# ---- launches -----------------------------------------------------------

def test_function_handle_never_registered(daemon):
    s = session(daemon)
    va = VecAdd(s)
    st, _ = s.driver("cuFuncGetAttribute", 1, 0, 0x12345678)
    assert st == CUDA_ERROR_INVALID_HANDLE
    va.launch(func=0x12345678)
    assert sync(s) == CUDA_ERROR_INVALID_HANDLE
    # Another session's function is not this session's either.
    other = session(daemon)
    other_va = VecAdd(other)
    va.launch(func=other_va.func if other_va.func != va.func else 0x7777)
    assert sync(s) == CUDA_ERROR_INVALID_HANDLE
    # Reported once; the session goes on.
    va.run_and_check()
    other_va.run_and_check()


def test_parameters_shorter_than_the_layout(daemon):
    s = session(daemon)
    va = VecAdd(s)
    good = va.params()
    for short in (b"", good[:8], good[:-1]):
        va.launch(params=short)
        assert sync(s) == CUDA_ERROR_INVALID_VALUE, len(short)
    va.run_and_check()


@pytest.mark.parametrize("grid,block", [
    ((1, 1, 1), (2048, 1, 1)),       # more than 1024 threads
    ((1, 1, 1), (32, 32, 2)),        # 2048 threads in three dimensions
    ((1, 1, 1), (1, 1, 65)),         # block z beyond 64
    ((1, 1, 1), (1, 2048, 1)),       # block y beyond 1024
    ((1, 65536, 1), (32, 1, 1)),     # grid y beyond 65535
    ((1, 1, 65536), (32, 1, 1)),     # grid z beyond 65535
    ((1 << 31, 1, 1), (32, 1, 1)),   # grid x beyond 2^31 - 1
    ((0, 1, 1), (32, 1, 1)),         # empty grid
    ((1, 1, 1), (0, 1, 1)),          # empty block
])
def test_launch_dimensions_beyond_the_limits(daemon, grid, block):
    s = session(daemon)
    va = VecAdd(s)
    va.launch(grid=grid, block=block)
    assert sync(s) == CUDA_ERROR_INVALID_VALUE
    va.run_and_check()


def test_shared_memory_above_the_limit(daemon):
    s = session(daemon)
    va = VecAdd(s)
    # vec_add never opted in: anything above 48 KiB is refused, and so is
    # anything above what any device has.
    for shared in (48 * 1024 + 1, 1 << 20, 0xFFFFFFFF):
        va.launch(shared=shared)
        assert sync(s) == CUDA_ERROR_INVALID_VALUE, shared
    # Opting in beyond the device's maximum is refused too.
    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
    st, _ = s.driver("cuFuncSetAttribute", va.func,
                     CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 1 << 20)
    assert st == CUDA_ERROR_INVALID_VALUE
    va.launch(shared=48 * 1024)    # the default limit itself is fine
    assert sync(s) == CUDA_SUCCESS
    va.run_and_check()


# ---- faults -------------------------------------------------------------

def launch_wild_write(s):
    """wild_write(p, v) from fault.fatbin with p far from any allocation."""
    st, module, _ = load(s, image("fault.fatbin"))
    assert st == CUDA_SUCCESS, st
    st, fn = get_function(s, module, "wild_write")
    assert st == CUDA_SUCCESS, st
    assert fn["param_size"] == [8, 4], fn
    params = bytearray(fn["param_offset"][-1] + 4)
    struct.pack_into("<Q", params, fn["param_offset"][0], 0x10)
    struct.pack_into("<i", params, fn["param_offset"][1], 7)
    s.queue("launch_kernel", func=fn["func"], grid_x=1, grid_y=1, grid_z=1,
            block_x=32, block_y=1, block_z=1, shared_bytes=0, stream=0,
            params=bytes(params))


def test_fault_poisons_only_its_own_session(daemon):
    """Session A's kernel faults while B is open on the same device: A gets
    CUDA_ERROR_ILLEGAL_ADDRESS at its next synchronize and from then on (its
    context is unusable, as on a GPU); B, before and after, runs correctly,
    and so does a session opened afterwards."""
    a, b = session(daemon), session(daemon)
    vb = VecAdd(b)
    vb.run_and_check()

    launch_wild_write(a)
    assert sync(a) == CUDA_ERROR_ILLEGAL_ADDRESS
    assert sync(a) == CUDA_ERROR_ILLEGAL_ADDRESS       # sticky
    st, _, _, _ = a.call("mem_alloc", size=64)
    assert st == CUDA_ERROR_ILLEGAL_ADDRESS

    vb.run_and_check()
    vb.run_and_check()
    c = session(daemon)
    VecAdd(c).run_and_check()


# ---- launch attributes (launch_kernel_ex) ----------------------------------

ATTR_COOPERATIVE, ATTR_CLUSTER, ATTR_EVENT, ATTR_PRIORITY = 2, 4, 7, 8


def launch_ex(v, attrs, grid=None):
    grid = grid or ((v.n + 255) // 256, 1, 1)
    v.s.queue("launch_kernel_ex", func=v.func, grid_x=grid[0], grid_y=grid[1],
              grid_z=grid[2], block_x=256, block_y=1, block_z=1,
              shared_bytes=0, stream=0, attrs=attrs, params=v.params())


@pytest.mark.parametrize("attrs,want", [
    ([ATTR_PRIORITY, 0, 0], CUDA_ERROR_INVALID_VALUE),       # not 4 words each
    ([ATTR_PRIORITY, 0, 0, 0] * 17, CUDA_ERROR_INVALID_VALUE),  # more than 16
    ([ATTR_EVENT, 1, 0, 0], CUDA_ERROR_NOT_SUPPORTED),       # carries an event
    ([99, 0, 0, 0], CUDA_ERROR_NOT_SUPPORTED),               # unknown
    ([ATTR_COOPERATIVE, 1, 5, 0], CUDA_ERROR_INVALID_VALUE),  # unused word set
    ([ATTR_CLUSTER, 0, 1, 1], CUDA_ERROR_INVALID_CLUSTER_SIZE),
    ([ATTR_CLUSTER, 3, 1, 1], CUDA_ERROR_INVALID_CLUSTER_SIZE),  # 4 blocks / 3
    ([ATTR_CLUSTER, 0xffffffff, 0xffffffff, 1], CUDA_ERROR_INVALID_CLUSTER_SIZE),
])
def test_bad_launch_attributes(daemon, attrs, want):
    """Every attribute word the guest sends is checked by the worker: the
    launch is refused with a CUDA error for this session, which then runs
    the same kernel correctly."""
    s = session(daemon)
    v = VecAdd(s)
    launch_ex(v, attrs)
    assert sync(s) == want
    v.run_and_check()


def test_good_launch_attributes(daemon):
    """Cluster dimensions that tile the grid, a priority and a cooperative
    launch the device can hold all run the kernel; a cooperative grid larger
    than what is resident at once is refused."""
    s = session(daemon)
    v = VecAdd(s, n=1024)
    for attrs in ([ATTR_CLUSTER, 2, 1, 1, ATTR_PRIORITY, 0xfffffffb, 0, 0],
                  [ATTR_COOPERATIVE, 1, 0, 0], [0 + ATTR_PRIORITY, 0, 0, 0]):
        zero = bytes(4 * v.n)
        assert s.call("memcpy_htod", data_in=zero, dst=v.bufs[2], size=len(zero),
                      stream=0)[0] == CUDA_SUCCESS
        launch_ex(v, attrs)
        assert sync(s) == CUDA_SUCCESS, attrs
        st, _, _, back = s.call("memcpy_dtoh", src=v.bufs[2], size=4 * v.n, stream=0)
        got = struct.unpack(f"<{v.n}f", back)
        assert list(got) == [x + y for x, y in zip(v.a, v.b)], attrs
    launch_ex(v, [ATTR_COOPERATIVE, 1, 0, 0], grid=(100000, 1, 1))
    assert sync(s) == CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE
