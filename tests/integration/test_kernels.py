"""Programs with kernels (tests/programs/kernels/*.cu), unmodified, through
NVIDIA's runtime over pvgpu's libcuda.so.1 (conftest.py's pvgpu_env)
against `pvgpud --executor sim`, which runs each launch by calling
the kernel's CPU twin from tests/sim-twins/, so CI runs them without a GPU.

Every program verifies its own results and ends with PASS; the twins do
the kernels' real work, so a wrong parameter layout, a lost launch, a
misordered callback or a constant never uploaded shows up as a FAIL.
"""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from pvgpu_guest import finish_all  # noqa: E402

REPO = Path(__file__).resolve().parent.parent.parent
BUILD = REPO / os.environ.get("PVGPU_BUILD", "build")

# The acceptance list for CI.
CI_PROGRAMS = ["vecadd", "matmul", "reduce", "constant", "devglobal",
               "callback", "launchloop", "attrs"]
# Written for the GPU (tests/gpu/test_gpu_kernels.py), but their kernels have
# twins too, so they run here as well: the PTX-only build, 4 streams, 4 host
# threads. The faulting kernel has tests of its own below (the sim faults a
# twin that touches memory outside every allocation, as a GPU would).
SIM_EXTRA_PROGRAMS = ["vecadd_ptx", "streams4", "threads4"]

LAUNCHES = 11000          # launchloop: 10,000 <<<>>> + 1,000 cudaLaunchKernel (+1 warm-up)
# Generous even for the sanitizer build on a 2-core machine; a round trip
# per launch would still fit in far less, which is why the message count
# below is what really shows batching.
LAUNCHLOOP_WALL_S = 120.0

STATS_RE = re.compile(r"sent (\d+) messages: (\d+) calls, (\d+) async ops "
                      r"\((\d+) batches\), (\d+) data frames")


def kernel_program(name):
    return f"kernels/{name}"


def explain(res):
    """A hint for the most likely reasons a kernel program cannot even
    start over pvgpu's libcuda.so.1."""
    m = re.search(r"undefined symbol: (\S+)", res.stderr)
    if m:
        return (f"\nHINT: pvgpu's libcuda.so.1 does not export {m.group(1)}: "
                f"NVIDIA's runtime needs it")
    if "cudaErrorInsufficientDriver" in res.stdout + res.stderr:
        return ("\nHINT: NVIDIA's runtime found no driver it accepts: is pvgpu's "
                "libcuda.so.1 on the library path?")
    return ""


def run_kernel_program(programs, name, env, timeout=None):
    return programs.run(kernel_program(name), env,
                        timeout=timeout or programs.timeout)


def assert_kernel_program_passed(programs, res, daemon):
    try:
        programs.assert_passed(res, daemon)
    except AssertionError as e:
        raise AssertionError(f"{e}{explain(res)}") from None


@pytest.mark.parametrize("name", CI_PROGRAMS)
def test_kernel_program(programs, twins_daemon, name):
    res = run_kernel_program(programs, name,
                             programs.pvgpu_env(twins_daemon.unix))
    assert_kernel_program_passed(programs, res, twins_daemon)


@pytest.mark.parametrize("name", SIM_EXTRA_PROGRAMS)
def test_gpu_program_on_sim(programs, twins_daemon, name):
    res = run_kernel_program(programs, name,
                             programs.pvgpu_env(twins_daemon.unix))
    assert_kernel_program_passed(programs, res, twins_daemon)


def test_kernel_program_over_tcp(programs, twins_daemon):
    res = run_kernel_program(programs, "matmul",
                             programs.pvgpu_env(twins_daemon.tcp))
    assert_kernel_program_passed(programs, res, twins_daemon)


def test_same_binary_twice_gives_the_same_transcript(programs, twins_daemon):
    """The second session finds the module in the backend's cache (same
    content hash) and must behave exactly like the first."""
    env = programs.pvgpu_env(twins_daemon.unix)
    first = run_kernel_program(programs, "constant", env)
    assert_kernel_program_passed(programs, first, twins_daemon)
    second = run_kernel_program(programs, "constant", env)
    assert_kernel_program_passed(programs, second, twins_daemon)
    assert first.stdout == second.stdout


def all_pass_at_once(programs, twins_daemon, names):
    """Run the kernel programs names all at once, each a session of its own
    on twins_daemon; every one must pass."""
    env = programs.pvgpu_env(twins_daemon.unix)
    runs = [(name, subprocess.Popen(
        [str(programs.path(kernel_program(name)))], env=env,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, errors="replace")) for name in names]
    failed = [(name, res) for (name, _), res in
              zip(runs, finish_all([p for _, p in runs], programs.timeout))
              if res.returncode != 0 or res.stdout.splitlines()[-1:] != ["PASS"]]
    assert not failed, "\n\n".join(
        f"=== {n}\n{programs.describe(r)}{explain(r)}" for n, r in failed) + \
        f"\n--- pvgpud log (tail) ---\n{twins_daemon.log()[-8000:]}"


def test_kernel_programs_concurrently(programs, twins_daemon):
    """Every CI kernel program at once, each a session of its own: modules,
    globals and launches of one session never leak into another."""
    all_pass_at_once(programs, twins_daemon, CI_PROGRAMS)


def launch_loop_stats(programs, twins_daemon, uri, static=False):
    """Run launchloop with PVGPU_DEBUG=1 through uri: (sends, calls,
    async ops, batches) from libcuda.so.1's exit line, which must be
    there.  NVIDIA's runtime shared, or linked in (static)."""
    env = programs.pvgpu_env(uri)
    env["PVGPU_DEBUG"] = "1"
    start = time.monotonic()
    res = run_kernel_program(programs, "launchloop", env) if not static else \
        programs.run("static/kernels/launchloop", env)
    wall = time.monotonic() - start
    assert_kernel_program_passed(programs, res, twins_daemon)
    assert wall < LAUNCHLOOP_WALL_S, \
        f"launchloop took {wall:.1f} s\n{programs.describe(res, twins_daemon)}"

    m = STATS_RE.search(res.stderr)
    assert m, ("no message count at exit with PVGPU_DEBUG=1 (expected 'sent "
               "N messages: C calls, A async ops (B batches), D data "
               "frames')\n" + programs.describe(res, twins_daemon))
    sends, calls, async_ops, batches, _frames = map(int, m.groups())
    loop = re.search(r"launchloop: .*", res.stderr)
    print(f"\nlaunchloop on the sim ({uri.split(':')[0]}, "
          f"{'static' if static else 'shared'} runtime): program {wall:.2f} s; "
          f"{loop.group(0) if loop else 'no loop timing'}; {sends} messages, "
          f"{calls} calls, {async_ops} async ops in {batches} batches")
    assert async_ops >= LAUNCHES, m.group(0)
    # The round trips are the program's handful of synchronous calls, not
    # one per launch.
    assert calls <= 200, m.group(0)
    return sends, async_ops, batches, m.group(0)


def test_launch_loop_is_batched(programs, twins_daemon):
    """11,000 fire-and-forget launches must not cost 11,000 messages over a
    socket, where each is a system call: libcuda.so.1 batches them
    (DESIGN §3).  With PVGPU_DEBUG=1 it reports at exit how many messages
    it sent;
    a missing line fails the test (nothing could be counted)."""
    sends, _ops, _batches, line = launch_loop_stats(programs, twins_daemon,
                                                    twins_daemon.unix)
    assert sends <= LAUNCHES // 10, line


def test_launch_loop_is_batched_over_libcuda(programs, twins_daemon):
    """The same with NVIDIA's runtime linked in (nvcc's default): its
    launches reach libcuda.so.1 the same way and are batched the same."""
    sends, _ops, _batches, line = launch_loop_stats(programs, twins_daemon,
                                                    twins_daemon.unix, static=True)
    assert sends <= LAUNCHES // 10, line


def test_launch_loop_streams_through_the_ring(programs, twins_daemon):
    """Over shm://'s control ring a message is a store, not a system call:
    each launch goes to the worker at once, unbatched, so that the driver
    works on it while the program goes on (launch + synchronize then costs
    the ring's crossing, not the launch's time on top)."""
    uri = "shm://" + twins_daemon.unix[len("unix://"):]
    sends, async_ops, batches, line = launch_loop_stats(programs, twins_daemon, uri)
    assert batches == 0 and sends >= async_ops, line


def test_fault_poisons_only_its_own_session(programs, twins_daemon):
    """A kernel that writes through a wild pointer: the program sees
    cudaErrorIllegalAddress at the next synchronize and from every call
    after it; the daemon stays up and the next session is healthy."""
    env = programs.pvgpu_env(twins_daemon.unix)
    res = run_kernel_program(programs, "fault", env)
    assert_kernel_program_passed(programs, res, twins_daemon)
    assert "cudaDeviceSynchronize after the faulting kernel: " \
           "cudaErrorIllegalAddress" in res.stdout, programs.describe(res)
    after = run_kernel_program(programs, "vecadd", env)
    assert_kernel_program_passed(programs, after, twins_daemon)


def test_fault_beside_a_concurrent_session(programs, twins_daemon):
    """While one session faults, others running at the same time on the
    same daemon (and so the same simulated device) get correct results."""
    all_pass_at_once(programs, twins_daemon, ["matmul", "fault", "reduce", "fault", "vecadd"])


def test_kernel_without_a_twin_fails_clearly(programs, start_pvgpud):
    """The sim cannot run a kernel no plugin has a twin for: the launch
    fails (the program reports an error and exits 1, no crash, no hang) and
    the daemon's log names the kernel."""
    bench_twins = BUILD / "tests" / "sim-twins" / "libbench-twins.so"
    if not bench_twins.exists():
        pytest.fail(f"{bench_twins} is not built (run `make test-programs`)")
    # Twins for other kernels only.
    daemon = start_pvgpud("sim", env={"PVGPU_SIM_TWINS": str(bench_twins)})
    res = run_kernel_program(programs, "vecadd",
                             programs.pvgpu_env(daemon.unix), timeout=60)
    assert res.returncode == 1, programs.describe(res, daemon) + explain(res)
    assert res.stdout.splitlines()[-1].startswith("FAIL:"), \
        programs.describe(res, daemon)
    log = daemon.log()
    assert "vec_add" in log and "twin" in log, programs.describe(res, daemon)
    # The daemon is fine: a program without kernels still passes.
    ok = programs.run("memory", programs.pvgpu_env(daemon.unix))
    programs.assert_passed(ok, daemon)
