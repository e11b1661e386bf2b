"""On a machine with an NVIDIA GPU: every test program natively (NVIDIA's
libcudart.so.13) and through pvgpu (the shim, against `pvgpud --executor
cuda` over unix). The program cannot tell the difference, so its stdout
must be the same byte for byte (issue 2, acceptance; `make test-gpu`).

`program` is parametrized over every tests/programs/*.cu by conftest.py.
"""

import ctypes
import difflib
import subprocess

import pytest


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

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(_problem is not None, reason=_problem or ""),
]


@pytest.fixture(scope="module")
def native_libdir(programs):
    """The directory of NVIDIA's real libcudart.so.13."""
    res = subprocess.run([str(programs.repo / "scripts" / "find-cuda.sh"),
                          "--libdir"], capture_output=True, text=True)
    if res.returncode != 0 or not res.stdout.strip():
        pytest.fail("scripts/find-cuda.sh --libdir found no CUDA toolkit "
                    "with libcudart.so.13")
    return res.stdout.strip()


@pytest.fixture
def cuda_daemon(start_pvgpud):
    """pvgpud --executor cuda, listening on unix and tcp."""
    return start_pvgpud("cuda")


def test_native_and_pvgpu_match(programs, native_libdir, cuda_daemon,
                                program):
    native = programs.run(program, programs.native_env(native_libdir))
    # The program must pass natively first: otherwise the test (or the
    # machine) is wrong, not pvgpu.
    assert native.returncode == 0 and \
        native.stdout.splitlines()[-1:] == ["PASS"], \
        "the program fails natively\n" + programs.describe(native)

    remote = programs.run(program, programs.pvgpu_env(cuda_daemon.unix))
    programs.assert_passed(remote, cuda_daemon)

    if remote.stdout != native.stdout:
        diff = "".join(difflib.unified_diff(
            native.stdout.splitlines(keepends=True),
            remote.stdout.splitlines(keepends=True),
            fromfile="native", tofile="pvgpu"))
        pytest.fail(f"stdout differs between native and pvgpu\n"
                    f"--- diff ---\n{diff}\n"
                    f"--- native stdout ---\n{native.stdout}\n"
                    f"--- pvgpu stdout ---\n{remote.stdout}")
