"""What every GPU test shares: the gpu marker, a skip (saying why) where no
CUDA driver answers, NVIDIA's real runtime for the native runs, pvgpu's
libcuda.so.1 beside it for the runs through pvgpu, and a pvgpud on the real
GPU."""
import ctypes
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from generated import require_generated  # noqa: E402


def gpu_problem():
    """None if the CUDA driver loads and initialises, else why not."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "no NVIDIA GPU/driver here (libcuda.so.1 not loadable)"
    rc = libcuda.cuInit(0)
    if rc != 0:
        return f"no NVIDIA GPU/driver here (cuInit failed with CUresult {rc})"
    return None


_problem = gpu_problem()


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.gpu)
            if _problem is not None:
                item.add_marker(pytest.mark.skip(reason=_problem))


@pytest.fixture(scope="module")
def native_libdir(programs):
    """The directory of NVIDIA's real libcudart.so.13."""
    res = subprocess.run([str(programs.repo / "scripts" / "find-cuda.sh"),
                          "--libdir"], capture_output=True, text=True)
    if res.returncode != 0 or not res.stdout.strip():
        pytest.fail("scripts/find-cuda.sh --libdir found no CUDA toolkit "
                    "with libcudart.so.13")
    return res.stdout.strip()


@pytest.fixture(scope="module")
def libdir(programs):
    """pvgpu's libcuda.so.1 and NVIDIA's libcudart.so.13, nothing else: the
    folder programs.pvgpu_env puts on the library path (tests/conftest.py)."""
    libcuda = Path(__file__).resolve().parents[2] / os.environ.get(
        "PVGPU_BUILD", "build") / "lib" / "libcuda.so.1"
    require_generated(libcuda, "cuda.h")
    return programs.libdir()


@pytest.fixture
def cuda_daemon(start_pvgpud):
    """pvgpud --executor cuda, listening on unix and tcp."""
    return start_pvgpud("cuda")
