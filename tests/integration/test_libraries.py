"""NVIDIA's libraries start and stop over pvgpu's libcuda.so.1,
against `pvgpud --executor sim`, with no NVIDIA driver anywhere on the path.

Covered: each library's initialisation and teardown as a program makes
them — cublasCreate/cublasGetVersion/cublasDestroy, cublasLtCreate/Destroy,
cufftPlan1d and cufftPlan2d (which load cuFFT's kernels and enumerate them
through the driver's tools-module table) and cufftDestroy, cudnnCreate and
cudnnDestroy — every driver call, export table and module load they make
on the way, and the session's clean end in pvgpud's log.

Not covered here: anything that runs their kernels (a GEMM's or an FFT's
numbers): the sim executes no GPU code.  tests/gpu runs those on the GPU.

The libraries are NVIDIA's PyPI wheels, installed by scripts/install-deps.sh
into .deps/cuda-libs (about 1.1 GB to download).
"""

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
sys.path.insert(0, os.path.dirname(__file__))
from pvgpu_sessions import wait_live  # noqa: E402
from test_driver_api import LIBCUDA  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
LIBS = REPO / ".deps" / "cuda-libs" / "nvidia"

PROBE = r"""
import ctypes, os, sys
lib = sys.argv[1]
vp = ctypes.c_void_p
def load(n):
    return ctypes.CDLL(os.path.join(lib, n))
h, v, plan = vp(), ctypes.c_int(), ctypes.c_int()
blas = load("libcublas.so.13")
print("cublasCreate", blas.cublasCreate_v2(ctypes.byref(h)))
print("cublasGetVersion", blas.cublasGetVersion_v2(h, ctypes.byref(v)), v.value > 0)
print("cublasDestroy", blas.cublasDestroy_v2(h))
lt = load("libcublasLt.so.13")
print("cublasLtCreate", lt.cublasLtCreate(ctypes.byref(h)))
print("cublasLtDestroy", lt.cublasLtDestroy(h))
fft = load("libcufft.so.12")
print("cufftPlan1d", fft.cufftPlan1d(ctypes.byref(plan), 1024, 0x29, 1))  # C2C
print("cufftDestroy", fft.cufftDestroy(plan))
print("cufftPlan2d", fft.cufftPlan2d(ctypes.byref(plan), 64, 64, 0x2a))   # R2C
print("cufftDestroy", fft.cufftDestroy(plan))
dnn = load("libcudnn.so.9")
print("cudnnCreate", dnn.cudnnCreate(ctypes.byref(h)))
print("cudnnDestroy", dnn.cudnnDestroy(h))
# The driver this process uses is pvgpu's, nothing else.
maps = open("/proc/self/maps").read()
print("drivers", sorted({l.split()[-1] for l in maps.splitlines() if "libcuda.so" in l}))
"""


@pytest.fixture(scope="module")
def libdir(programs):
    """pvgpu's libcuda.so.1, NVIDIA's runtime and libraries, nothing else."""
    if not LIBS.is_dir():
        pytest.skip(".deps/cuda-libs is missing: scripts/install-deps.sh could not "
                    "download NVIDIA's library wheels")
    if not LIBCUDA.exists():
        pytest.fail(f"{LIBCUDA} is not built (run `make`)")
    d = Path(tempfile.mkdtemp(prefix="pvgpu-libs-"))
    os.symlink(LIBCUDA.resolve(), d / "libcuda.so.1")
    os.symlink((programs.libdir() / "libcudart.so.13").resolve(), d / "libcudart.so.13")
    for so in sorted(LIBS.glob("*/lib/lib*.so.*")):
        if not (d / so.name).exists():
            os.symlink(so, d / so.name)
    yield d
    for f in d.iterdir():
        f.unlink()
    d.rmdir()


@pytest.mark.plain_build("the ASan build of libcuda.so.1 cannot be loaded by a plain Python")
def test_library_init_and_teardown(start_pvgpud, libdir):
    daemon = start_pvgpud("sim")
    before = daemon.log().count(" start: ")
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH",)}
    env.update(LD_LIBRARY_PATH=str(libdir), PVGPU_DEVICES=daemon.unix)
    res = subprocess.run([sys.executable, "-c", PROBE, str(libdir)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    out = dict(line.split(" ", 1) for line in res.stdout.splitlines())
    for call in ("cublasCreate", "cublasDestroy", "cublasLtCreate", "cublasLtDestroy",
                 "cufftPlan1d", "cufftPlan2d", "cudnnCreate", "cudnnDestroy"):
        assert out[call] == "0", f"{call} -> {out[call]}\n{res.stdout}{res.stderr}"
    assert out["cublasGetVersion"] == "0 True"
    assert out["cufftDestroy"] == "0"
    assert out["drivers"] == repr([str(LIBCUDA.resolve())]), out["drivers"]
    # pvgpud served the session, and it ended when the program did.
    assert daemon.log().count(" start: ") > before
    wait_live(daemon, 0)
