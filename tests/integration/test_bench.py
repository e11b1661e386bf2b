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


def check_round_trips(out):
    """pvgpu-latency counts the wire round trips of each test (issue 15):
    one per synchronous copy (plus the few read-backs that verify H2D
    copies), one per launch + synchronize, none for a synchronize on an
    idle device (answered in the guest)."""
    rt = {r["key"]: r["round_trips_per_op"] for r in out["results"]}
    assert rt["sync idle"] < 0.01, rt
    assert 0.99 < rt["launch+sync"] < 1.05, rt
    copies = [v for k, v in rt.items() if k.startswith("copy ")]
    assert copies and all(0.99 < v < 1.05 for v in copies), rt


@pytest.mark.parametrize("scheme", ["unix", "shm"])
def test_latency_through_pvgpu(programs, bench_daemon, scheme):
    uri = scheme + "://" + bench_daemon.unix[len("unix://"):]
    out = run_bench(programs, uri, bench_daemon, "pvgpu-latency", "--quick")
    check_round_trips(out)


def test_latency_nvidia_runtime_over_libcuda(programs, bench_daemon, tmp_path):
    """The same benchmark with NVIDIA's libcudart.so.13 over pvgpu's
    libcuda.so.1: the round trips are counted there too."""
    found = subprocess.run(["scripts/find-cuda.sh", "--libdir"], cwd=REPO,
                           capture_output=True, text=True)
    cudart = Path(found.stdout.strip()) / "libcudart.so.13"
    libcuda = BUILD / "lib" / "libcuda.so.1"
    if found.returncode or not cudart.exists():
        pytest.skip("NVIDIA's libcudart.so.13 is not installed")
    if not libcuda.exists():
        pytest.skip("libcuda.so.1 was not built (no libclang)")
    (tmp_path / "libcudart.so.13").symlink_to(cudart.resolve())
    (tmp_path / "libcuda.so.1").symlink_to(libcuda.resolve())
    env = programs.pvgpu_env("shm://" + bench_daemon.unix[len("unix://"):])
    env["LD_LIBRARY_PATH"] = str(tmp_path)
    proc = subprocess.run([str(BENCH / "pvgpu-latency"), "--json", "--quick"],
                          env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout)
    assert not out["library"]["pvgpu_shim"]
    assert out["library"]["driver"].startswith(str(tmp_path)), out["library"]
    check_round_trips(out)


def test_synth_through_pvgpu(programs, bench_daemon):
    run_bench(programs, bench_daemon.unix, bench_daemon, "pvgpu-synth", "--quick",
              "--size", "1M-4M", "--dir", "both")
