"""On a machine with two or more NVIDIA GPUs: tests/programs/peer.cu
natively and through pvgpu (`pvgpud --executor cuda`), the same transcript
byte for byte; the driver's peer calls one by one, each answer
NVIDIA's; peer-copy bandwidth through pvgpu against native (criterion
>= 0.95x); through NVIDIA's runtime over pvgpu's libcuda.so.1, shared
(-cudart shared) and linked in (nvcc's default); and two sessions, each
on its own GPU, each as fast as one alone (the scheduler's turns are per
GPU).  With fewer than two GPUs every test
skips, saying so.

Figures are printed (pytest -s) and written to
$(BUILD)/tests/multigpu-gpu.json for BENCHMARKS.md.
"""
import ctypes
import difflib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from pvgpu_guest import guest_env, run_guest_script  # noqa: E402
import pvgpu_peer as peer_calls  # noqa: E402

REPO = Path(__file__).resolve().parent.parent.parent
BUILD = REPO / os.environ.get("PVGPU_BUILD", "build")
FAIR = BUILD / "bench" / "pvgpu-fair"
REPORT = BUILD / "tests" / "multigpu-gpu.json"
PEER_MIB = 256


def gpu_count():
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
        if libcuda.cuInit(0) != 0:
            return 0
        n = ctypes.c_int(0)
        return n.value if libcuda.cuDeviceGetCount(ctypes.byref(n)) == 0 else 0
    except OSError:
        return 0


_COUNT = gpu_count()
pytestmark = pytest.mark.skipif(
    _COUNT < 2, reason=f"needs at least 2 GPUs; this machine has {_COUNT}")


def record(key, value):
    data = json.loads(REPORT.read_text()) if REPORT.exists() else {}
    data[key] = value
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text(json.dumps(data, indent=2) + "\n")
    print(f"\n{key}: {json.dumps(value)}")


def peer_program_matches(programs, native_libdir, daemon, env, name="peer"):
    native = programs.run(name, programs.native_env(native_libdir))
    assert native.returncode == 0 and native.stdout.splitlines()[-1:] == ["PASS"], \
        "peer fails natively\n" + programs.describe(native)
    assert "devices: >= 2" in native.stdout
    remote = programs.run(name, env)
    programs.assert_passed(remote, daemon)
    if remote.stdout != native.stdout:
        diff = "".join(difflib.unified_diff(
            native.stdout.splitlines(keepends=True),
            remote.stdout.splitlines(keepends=True),
            fromfile="native", tofile="pvgpu"))
        pytest.fail(f"stdout differs between native and pvgpu\n{diff}")


def test_peer_program_native_and_pvgpu_match(programs, native_libdir, cuda_daemon):
    peer_program_matches(programs, native_libdir, cuda_daemon,
                         programs.pvgpu_env(cuda_daemon.unix))


def test_peer_program_native_and_libcuda_match(programs, native_libdir, libdir, cuda_daemon):
    """The program with NVIDIA's runtime linked in, natively and over
    pvgpu's libcuda.so.1: peer access and peer copies forwarded to the
    backend, the transcript as natively."""
    peer_program_matches(programs, native_libdir, cuda_daemon,
                         guest_env(libdir, cuda_daemon.unix), "static/peer")


def test_peer_driver_calls_answer_as_nvidias_driver(libdir, cuda_daemon, tmp_path):
    """The driver's peer calls one by one (tests/lib/pvgpu_peer.py):
    NVIDIA's driver gives the answers the CI test expects of pvgpu over the
    sim, and pvgpu over this GPU gives the same."""
    system = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    native, _ = run_guest_script(tmp_path, peer_calls.SCRIPT, "libcuda.so.1",
                                 system, "native")
    assert native == peer_calls.answers(native=True), native
    pvgpu, _ = run_guest_script(tmp_path, peer_calls.SCRIPT, libdir / "libcuda.so.1",
                                guest_env(libdir, cuda_daemon.unix))
    assert pvgpu == peer_calls.answers(), pvgpu


def peer_bandwidth(programs, env, name):
    res = subprocess.run([str(programs.path(name)), "bandwidth", str(PEER_MIB)],
                         env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, programs.describe(res)
    figures = dict(re.findall(r"^(peer_\w+_gbps) ([0-9.]+)$", res.stdout, re.M))
    assert len(figures) == 2, res.stdout
    access = re.search(r"^peer access: (\d)", res.stdout, re.M)
    return {k: float(v) for k, v in figures.items()}, int(access.group(1))


def peer_copy_bandwidth(programs, native_libdir, key, env, name="peer"):
    best_native, best_pvgpu = {}, {}
    for _ in range(3):              # best of three, each side
        n, access = peer_bandwidth(programs, programs.native_env(native_libdir), name)
        p, _ = peer_bandwidth(programs, env, name)
        for k in n:
            best_native[k] = max(best_native.get(k, 0), n[k])
            best_pvgpu[k] = max(best_pvgpu.get(k, 0), p[k])
    ratios = {k: best_pvgpu[k] / best_native[k] for k in best_native}
    record(key, {"mib": PEER_MIB, "peer_access": access,
                 "native_gbps": best_native, "pvgpu_gbps": best_pvgpu,
                 "ratio": ratios})
    for k, r in ratios.items():
        assert r >= 0.95, (k, best_native, best_pvgpu)


def test_peer_copy_bandwidth(programs, native_libdir, cuda_daemon):
    peer_copy_bandwidth(programs, native_libdir, "peer_copy",
                        programs.pvgpu_env(cuda_daemon.unix))


def test_peer_copy_bandwidth_over_libcuda(programs, native_libdir, libdir, cuda_daemon):
    """The same with NVIDIA's runtime linked in, on both sides."""
    peer_copy_bandwidth(programs, native_libdir, "peer_copy_static",
                        guest_env(libdir, cuda_daemon.unix), "static/peer")


def fair(programs, uri, device, extra):
    env = programs.pvgpu_env(uri)
    return subprocess.Popen(
        [str(FAIR), "--json", "--device", str(device), *extra],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def result(proc):
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, f"{out}\n{err}"
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.skipif(not FAIR.exists(), reason="bench/pvgpu-fair is not built")
def test_sessions_on_two_gpus_do_not_slow_each_other(programs, cuda_daemon):
    """Each session alone on its GPU, then both at once: each keeps >= 0.95x
    of its kernels, and the two together do >= 1.9x of one GPU."""
    cal = subprocess.run([str(FAIR), "--calibrate", "--json"],
                         env=programs.pvgpu_env(cuda_daemon.unix),
                         capture_output=True, text=True, timeout=120)
    assert cal.returncode == 0, cal.stderr
    c = json.loads(cal.stdout.strip().splitlines()[-1])
    extra = ["--seconds", "5", "--iters", str(c["iters"]),
             "--blocks", str(c["blocks"])]
    alone = [result(fair(programs, cuda_daemon.unix, d, extra))["kernels"]
             for d in (0, 1)]
    procs = [fair(programs, cuda_daemon.unix, d, extra) for d in (0, 1)]
    both = [result(p)["kernels"] for p in procs]
    record("two_gpus", {"alone": alone, "together": both,
                        "scaling": sum(both) / max(alone)})
    for a, b in zip(alone, both):
        assert b >= 0.95 * a, (alone, both)
    assert sum(both) >= 1.9 * max(alone), (alone, both)
