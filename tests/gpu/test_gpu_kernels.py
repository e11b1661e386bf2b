"""On a machine with an NVIDIA GPU: every program with kernels
(tests/programs/kernels/*.cu, plus vecadd_ptx, the PTX-only build JIT-compiled
in the worker) natively (NVIDIA's libcudart.so.13 over NVIDIA's driver) and
through pvgpu (the same runtime over pvgpu's libcuda.so.1, against
`pvgpud --executor cuda` over unix). stdout must be the same byte for byte
(`make test-gpu`).

`fault` writes through a wild pointer: natively and through pvgpu it must
report cudaErrorIllegalAddress (its transcript says so, and the two must
match), and the next session on the same pvgpud must be healthy.

The launch loop's timing (stderr) and libcuda.so.1's message count are
printed (pytest -s) and written to $(BUILD)/tests/kernels/launchloop-gpu.json.
"""

import difflib
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent
BUILD = REPO / os.environ.get("PVGPU_BUILD", "build")

# Every kernel program, known from the sources so that collection works
# before anything is built, and the PTX-only build.
KERNEL_PROGRAMS = sorted(
    p.stem for p in (REPO / "tests" / "programs" / "kernels").glob("*.cu")
) + ["vecadd_ptx"]

LOOP_RE = re.compile(r"launchloop: (\d+) launches: ([\d.]+) ms to queue, "
                     r"([\d.]+) ms including the synchronize")
STATS_RE = re.compile(r"sent (\d+) messages: (\d+) calls, (\d+) async ops "
                      r"\((\d+) batches\), (\d+) data frames")


def kernel_program(name):
    return f"kernels/{name}"


def passed(res):
    return res.returncode == 0 and res.stdout.splitlines()[-1:] == ["PASS"]


def assert_same_stdout(native, remote):
    if remote.stdout != native.stdout:
        diff = "".join(difflib.unified_diff(
            native.stdout.splitlines(keepends=True),
            remote.stdout.splitlines(keepends=True),
            fromfile="native", tofile="pvgpu"))
        pytest.fail(f"stdout differs between native and pvgpu\n"
                    f"--- diff ---\n{diff}\n"
                    f"--- native stdout ---\n{native.stdout}\n"
                    f"--- pvgpu stdout ---\n{remote.stdout}")


@pytest.mark.parametrize("name", KERNEL_PROGRAMS)
def test_native_and_pvgpu_match(programs, native_libdir, cuda_daemon, name):
    prog = kernel_program(name)
    native = programs.run(prog, programs.native_env(native_libdir))
    # The program must pass natively first: otherwise the test (or the
    # machine) is wrong, not pvgpu.
    assert passed(native), "the program fails natively\n" + \
        programs.describe(native)

    remote = programs.run(prog, programs.pvgpu_env(cuda_daemon.unix))
    programs.assert_passed(remote, cuda_daemon)
    assert_same_stdout(native, remote)


def test_fault_then_a_healthy_session(programs, native_libdir, cuda_daemon):
    """The faulting kernel reports cudaErrorIllegalAddress through pvgpu as
    natively; it poisons only its own context: the next session on the same
    pvgpud (and so the same GPU) runs vecadd correctly, twice."""
    native = programs.run(kernel_program("fault"),
                          programs.native_env(native_libdir))
    assert passed(native), "fault fails natively\n" + programs.describe(native)
    assert "cudaErrorIllegalAddress" in native.stdout

    env = programs.pvgpu_env(cuda_daemon.unix)
    remote = programs.run(kernel_program("fault"), env)
    programs.assert_passed(remote, cuda_daemon)
    assert "cudaDeviceSynchronize after the faulting kernel: " \
           "cudaErrorIllegalAddress" in remote.stdout, \
        programs.describe(remote, cuda_daemon)
    assert_same_stdout(native, remote)

    for _ in range(2):
        after = programs.run(kernel_program("vecadd"), env)
        programs.assert_passed(after, cuda_daemon)


def test_fault_beside_a_running_session(programs, cuda_daemon):
    """A session faults while another one is in the middle of its work on
    the same GPU: the other finishes with correct results."""
    env = programs.pvgpu_env(cuda_daemon.unix)
    busy = subprocess.Popen(
        [str(programs.path(kernel_program("streams4")))], env=env,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, errors="replace")
    try:
        fault = programs.run(kernel_program("fault"), env)
        programs.assert_passed(fault, cuda_daemon)
        out, err = busy.communicate(timeout=programs.timeout)
    finally:
        if busy.poll() is None:
            busy.kill()
            busy.communicate()
    res = subprocess.CompletedProcess(busy.args, busy.returncode, out, err)
    programs.assert_passed(res, cuda_daemon)


def test_launch_loop_timing(programs, native_libdir, cuda_daemon):
    """The 10,000-launch loop natively and through pvgpu, with the number of
    messages libcuda.so.1 sent (PVGPU_DEBUG=1, its line at exit: missing,
    the test fails), printed and kept.  Batching is asserted: far fewer
    messages than launches."""
    prog = kernel_program("launchloop")
    native = programs.run(prog, programs.native_env(native_libdir))
    assert passed(native), programs.describe(native)
    env = programs.pvgpu_env(cuda_daemon.unix)
    env["PVGPU_DEBUG"] = "1"
    remote = programs.run(prog, env)
    programs.assert_passed(remote, cuda_daemon)

    report = {"device": "gpu"}
    for label, res in (("native", native), ("pvgpu", remote)):
        m = LOOP_RE.search(res.stderr)
        assert m, f"no timing line from launchloop ({label})\n" + \
            programs.describe(res)
        report[label] = {"launches": int(m.group(1)),
                         "queue_ms": float(m.group(2)),
                         "total_ms": float(m.group(3))}
    m = STATS_RE.search(remote.stderr)
    assert m, "no message count at exit with PVGPU_DEBUG=1\n" + \
        programs.describe(remote, cuda_daemon)
    sends, calls, async_ops, batches, frames = map(int, m.groups())
    report["pvgpu"].update(messages=sends, calls=calls,
                           async_ops=async_ops, batches=batches,
                           data_frames=frames)
    out = BUILD / "tests" / "kernels" / "launchloop-gpu.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nlaunchloop on the GPU: {json.dumps(report)}")
    assert report["pvgpu"]["messages"] <= 1100, report
