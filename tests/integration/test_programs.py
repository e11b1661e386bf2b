"""The CUDA test programs, unmodified, through pvgpu (NVIDIA's runtime over
pvgpu's libcuda.so.1: conftest.py's pvgpu_env) against
`pvgpud --executor sim` over unix, tcp and shm.

`program` is parametrized over every tests/programs/*.cu by conftest.py.
"""

import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from pvgpu_guest import finish_all  # noqa: E402

# meminfo compares cudaMemGetInfo before and after its own allocations, which
# other sessions allocating at the same moment would disturb: it runs alone.
NOT_CONCURRENT = {"meminfo"}


@pytest.mark.parametrize("transport", ["unix", "tcp", "shm"])
def test_program(programs, sim_daemon, program, transport):
    # shm:// is the same socket plus a shared window for the bulk data.
    uri = {"unix": sim_daemon.unix, "tcp": sim_daemon.tcp,
           "shm": "shm://" + sim_daemon.unix[len("unix://"):]}[transport]
    res = programs.run(program, programs.pvgpu_env(uri))
    programs.assert_passed(res, sim_daemon)


def test_programs_concurrently(programs, sim_daemon):
    """Several programs at once against one daemon, each a session of its
    own, over both transports: every one passes."""
    runs = []
    for program in programs.names:
        if program in NOT_CONCURRENT:
            continue
        for uri in (sim_daemon.unix, sim_daemon.tcp):
            proc = subprocess.Popen(
                [str(programs.path(program))], env=programs.pvgpu_env(uri),
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, text=True, errors="replace")
            runs.append((program, uri, proc))
    assert len(runs) >= 4

    results = [(program, uri, res) for (program, uri, _), res in
               zip(runs, finish_all([p for _, _, p in runs], programs.timeout))]

    failed = [(p, u, r) for p, u, r in results
              if r.returncode != 0 or r.stdout.splitlines()[-1:] != ["PASS"]]
    assert not failed, "\n\n".join(
        f"=== {p} over {u}\n{programs.describe(r)}" for p, u, r in failed) + \
        f"\n--- pvgpud log (tail) ---\n{sim_daemon.log()[-8000:]}"
    for _, _, res in results:
        programs.assert_passed(res, sim_daemon)


def unreachable_uri(programs, short_tmp, transport):
    if transport == "unix":
        return f"unix://{short_tmp}/nobody-listens.sock"
    return f"tcp://127.0.0.1:{programs.free_tcp_port()}"


@pytest.mark.parametrize("transport", ["unix", "tcp"])
def test_unreachable_backend(programs, short_tmp, transport):
    """No backend behind PVGPU_DEVICES: cudaGetDeviceCount reports
    cudaErrorNoDevice and `devices` fails cleanly, without a signal."""
    uri = unreachable_uri(programs, short_tmp, transport)
    res = programs.run("devices", programs.pvgpu_env(uri), timeout=60)
    assert res.returncode >= 0, \
        f"killed by signal {-res.returncode}\n{programs.describe(res)}"
    assert res.returncode == 1, programs.describe(res)
    assert "cudaGetDeviceCount: cudaErrorNoDevice" in res.stdout, \
        programs.describe(res)
    assert res.stdout.splitlines()[-1].startswith("FAIL:"), \
        programs.describe(res)


def test_unreachable_backend_every_program(programs, short_tmp, program):
    """Every program's first call fails the same way; none crashes."""
    uri = unreachable_uri(programs, short_tmp, "unix")
    res = programs.run(program, programs.pvgpu_env(uri), timeout=60)
    assert res.returncode == 1, programs.describe(res)
    assert "cudaGetDeviceCount: cudaErrorNoDevice" in res.stdout, \
        programs.describe(res)


@pytest.mark.parametrize("transport", ["unix", "shm"])
def test_copy_bugs_nvidias_samples_met(programs, sim_daemon, transport):
    """The two copy bugs NVIDIA's samples met: a zero-length
    device-to-device copy one past the end of its allocations (mergeSort)
    and a host-to-device copy from a host buffer whose guest address is also
    inside a device allocation (warpAggregatedAtomicsCG).  The sim's device
    addresses are free in the guest, so the aliasing buffer really is made
    there: the program says so on stderr."""
    uri = {"unix": sim_daemon.unix,
           "shm": "shm://" + sim_daemon.unix[len("unix://"):]}[transport]
    res = programs.run("copies", programs.pvgpu_env(uri))
    programs.assert_passed(res, sim_daemon)
    assert "host buffer aliases a device allocation" in res.stderr, \
        programs.describe(res)
    assert "mergeSort tail: ok" in res.stdout
