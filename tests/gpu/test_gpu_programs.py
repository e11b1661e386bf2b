"""On a machine with an NVIDIA GPU: every test program natively (NVIDIA's
libcudart.so.13) and through pvgpu (the shim, against `pvgpud --executor
cuda` over unix). The program cannot tell the difference, so its stdout
must be the same byte for byte (`make test-gpu`).

`program` is parametrized over every tests/programs/*.cu by conftest.py.
"""

import difflib

import pytest


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
