"""Every benchmark runs for a few seconds through pvgpu against the simulated
device (with CPU twins of its kernels) and verifies the bytes it moved.  No
figure is judged here: the sim executor says nothing about performance
(those numbers come from the H100, see BENCHMARKS.md)."""
import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent
BUILD = REPO / os.environ.get("PVGPU_BUILD", "build")
BENCH = BUILD / "bench"


@pytest.fixture
def bench_daemon(start_pvgpud):
    """A sim daemon with CPU twins of the benchmarks' kernels."""
    twins = BUILD / "tests" / "sim-twins" / "libbench-twins.so"
    return start_pvgpud("sim", env={"PVGPU_SIM_TWINS": str(twins)})


def run_bench(programs, uri, daemon, name, *args, timeout=180):
    proc = subprocess.run([str(BENCH / name), "--json", *args],
                          env=programs.pvgpu_env(uri),
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, \
        f"{name} failed:\n{proc.stdout}\n{proc.stderr}\n{daemon.log()[-3000:]}"
    out = json.loads(proc.stdout)
    assert out["library"]["pvgpu_shim"], "the benchmark did not load the pvgpu shim"
    return out


@pytest.mark.parametrize("scheme", ["unix", "shm"])
def test_bandwidth_through_pvgpu(programs, bench_daemon, scheme):
    uri = scheme + "://" + bench_daemon.unix[len("unix://"):]
    out = run_bench(programs, uri, bench_daemon, "pvgpu-bandwidth", "--quick",
                    "--socket-baseline")
    cells = out["results"]
    assert {(c["direction"], c["memory"]) for c in cells} == {
        ("h2d", "pinned"), ("d2h", "pinned"), ("h2d", "pageable"), ("d2h", "pageable")}
    assert all(c["verified"] for c in cells)


def test_latency_through_pvgpu(programs, bench_daemon):
    run_bench(programs, bench_daemon.unix, bench_daemon, "pvgpu-latency", "--quick")


def test_synth_through_pvgpu(programs, bench_daemon):
    run_bench(programs, bench_daemon.unix, bench_daemon, "pvgpu-synth", "--quick",
              "--size", "1M-4M", "--dir", "both")
