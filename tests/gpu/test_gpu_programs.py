"""On a machine with an NVIDIA GPU: every test program natively (NVIDIA's
libcudart.so.13 over NVIDIA's driver) and through pvgpu (the same runtime
over pvgpu's libcuda.so.1, against `pvgpud --executor cuda`). The program
cannot tell the difference, so its stdout must be the same: byte for byte
over shm://, and over unix:// but for the managed-memory lines, which
libcuda.so.1 answers 0 without a window at the program's own address, on
purpose (`make test-gpu`).

`program` is parametrized over every tests/programs/*.cu by conftest.py.
"""

import difflib
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from pvgpu_guest import without_managed  # noqa: E402


@pytest.mark.parametrize("transport", ["unix", "shm"])
def test_native_and_pvgpu_match(programs, native_libdir, cuda_daemon,
                                program, transport):
    native = programs.run(program, programs.native_env(native_libdir))
    # The program must pass natively first: otherwise the test (or the
    # machine) is wrong, not pvgpu.
    assert native.returncode == 0 and \
        native.stdout.splitlines()[-1:] == ["PASS"], \
        "the program fails natively\n" + programs.describe(native)

    uri = cuda_daemon.unix if transport == "unix" else \
        "shm://" + cuda_daemon.unix[len("unix://"):]
    remote = programs.run(program, programs.pvgpu_env(uri))
    programs.assert_passed(remote, cuda_daemon)

    want, got = native.stdout, remote.stdout
    if transport == "unix":
        want = "".join(without_managed(want.splitlines(keepends=True)))
        got = "".join(without_managed(got.splitlines(keepends=True)))
    if got != want:
        diff = "".join(difflib.unified_diff(
            want.splitlines(keepends=True), got.splitlines(keepends=True),
            fromfile="native", tofile="pvgpu"))
        pytest.fail(f"stdout differs between native and pvgpu ({transport})\n"
                    f"--- diff ---\n{diff}\n"
                    f"--- native stdout ---\n{native.stdout}\n"
                    f"--- pvgpu stdout ---\n{remote.stdout}")


@pytest.mark.parametrize("name", ["memory", "streams"])
def test_pinned_copies_from_a_window_of_huge_pages(programs, native_libdir,
                                                   cuda_daemon, name,
                                                   reserved_hugepages):
    """cudaMallocHost memory in a shm:// window of huge pages
    (PVGPU_WINDOW_HUGEPAGES): the GPU copies straight from it, and the
    program prints what it prints natively."""
    native = programs.run(name, programs.native_env(native_libdir))
    assert native.returncode == 0, programs.describe(native)
    env = programs.pvgpu_env("shm://" + cuda_daemon.unix[len("unix://"):])
    env.update(PVGPU_WINDOW_HUGEPAGES="1", PVGPU_WINDOW_SIZE="128M",
               PVGPU_DEBUG="1")
    remote = programs.run(name, env)
    programs.assert_passed(remote, cuda_daemon)
    assert "window: 128 MiB of huge pages" in remote.stderr, remote.stderr[-2000:]
    assert remote.stdout == native.stdout
