"""On a machine with an NVIDIA GPU: programs that talk
to libcuda.so.1 — the test programs built with NVIDIA's runtime (shared and
static), PyTorch and CuPy — run through pvgpu's libcuda.so.1 against
`pvgpud --executor cuda`, and give what they give natively.

NVIDIA's own libcuda.so.1 is on this machine, so a program could reach the
GPU without pvgpu and pass for the wrong reason: pvgpu's library comes
first on LD_LIBRARY_PATH (not LD_PRELOAD: libraries dlsym the driver by
name), and every test checks that pvgpud served a session for the run.
"""
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / os.environ.get("PVGPU_BUILD", "build")
FRAMEWORKS = Path(__file__).parent / "frameworks"
PROGRAMS = sorted(p.stem for p in (REPO / "tests" / "programs").glob("*.cu"))
KERNELS = sorted("kernels/" + p.stem
                 for p in (REPO / "tests" / "programs" / "kernels").glob("*.cu")
                 if p.stem != "fault")
TIMING = re.compile(r"\d+(\.\d+)? ?(ms|us|µs|s|GB/s|MiB/s)\b")


def clean_env():
    env = {k: v for k, v in os.environ.items()
           if k not in ("PVGPU_DEVICES", "PVGPU_TOKEN", "LD_LIBRARY_PATH",
                        "LD_PRELOAD")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def pvgpu_env(libdir, uri):
    env = clean_env()
    env["LD_LIBRARY_PATH"] = str(libdir)
    env["PVGPU_DEVICES"] = uri
    return env


def sessions(daemon):
    return len(re.findall(r"session \d+ start:", daemon.log()))


def run(cmd, env, timeout=300):
    return subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, errors="replace",
                          timeout=timeout, cwd=REPO)


def results(stdout):
    return [line for line in stdout.splitlines() if not TIMING.search(line)]


def shm(daemon):
    return "shm://" + daemon.unix[len("unix://"):]


@pytest.mark.parametrize("way", ["shared", "static"])
@pytest.mark.parametrize("name", PROGRAMS + KERNELS)
def test_program_over_libcuda(programs, native_libdir, cuda_daemon, libdir,
                              name, way):
    path = BUILD / "tests" / ("static/" + name if way == "static" else name)
    if not path.exists():
        pytest.fail(f"{path} is not built (make test-programs)")
    native_env = clean_env()
    if way == "shared":
        native_env["LD_LIBRARY_PATH"] = native_libdir
    native = run([str(path)], native_env)
    assert native.returncode == 0 and native.stdout.splitlines()[-1:] == ["PASS"], \
        "fails natively:\n" + native.stdout[-2000:] + native.stderr[-2000:]
    before = sessions(cuda_daemon)
    remote = run([str(path)], pvgpu_env(libdir, shm(cuda_daemon)))
    assert remote.returncode == 0, \
        f"rc {remote.returncode}\n{remote.stdout[-3000:]}\n{remote.stderr[-3000:]}\n" \
        f"pvgpud:\n{cuda_daemon.log()[-3000:]}"
    assert sessions(cuda_daemon) > before, "pvgpud saw no session:\n" + cuda_daemon.log()
    assert results(remote.stdout) == results(native.stdout)


def framework(script, env):
    return framework_args([script], env)


def framework_args(args, env):
    script = args[0]
    res = run([sys.executable, str(FRAMEWORKS / script)] + args[1:], env, timeout=600)
    lines = [line for line in res.stdout.splitlines() if line.startswith("{")]
    assert res.returncode == 0 and lines, \
        f"{script} rc {res.returncode}\n{res.stdout[-3000:]}\n{res.stderr[-5000:]}"
    return json.loads(lines[-1])


def compare(native, remote, rel=1e-5):
    """Results equal within the framework's own determinism; *_s keys are
    timings and total memory is the VM's quota, so they are not compared."""
    wrong = []
    for key, want in native.items():
        got = remote.get(key)
        if key.endswith("_s") or key.startswith("mem_"):
            continue
        if isinstance(want, float):
            if got is None or abs(got - want) > rel * max(1.0, abs(want)):
                wrong.append(f"{key}: native {want} pvgpu {got}")
        elif got != want:
            wrong.append(f"{key}: native {want} pvgpu {got}")
    return wrong


def record(name, native, remote):
    out = BUILD / "tests" / f"frameworks-{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"native": native, "pvgpu": remote}, indent=1))


@pytest.mark.parametrize("script,module", [("torch_check.py", "torch"),
                                           ("cupy_check.py", "cupy"),
                                           ("jax_check.py", "jax")])
def test_framework_over_libcuda(cuda_daemon, libdir, script, module):
    if subprocess.run([sys.executable, "-c", f"import {module}"],
                      capture_output=True).returncode:
        pytest.skip(f"{module} is not installed in {sys.executable}")
    native = framework(script, clean_env())
    before = sessions(cuda_daemon)
    remote = framework(script, pvgpu_env(libdir, shm(cuda_daemon)))
    assert sessions(cuda_daemon) > before, "pvgpud saw no session:\n" + cuda_daemon.log()
    record(module, native, remote)
    wrong = compare(native, remote)
    assert not wrong, "\n".join(wrong)


LIBRARY_MODULE = {"cublaslt": "torch", "cudnn": "torch"}


@pytest.mark.parametrize("library", ["cublas", "cublaslt", "cufft", "curand",
                                     "cusparse", "cusolver", "cudnn", "nccl"])
def test_library_over_libcuda(cuda_daemon, libdir, library):
    """One NVIDIA library at a time, reached as Python users reach
    it (CuPy or PyTorch), natively and through pvgpu's libcuda.so.1: the
    same figures, and pvgpud served the session."""
    module = LIBRARY_MODULE.get(library, "cupy")
    if subprocess.run([sys.executable, "-c", f"import {module}"],
                      capture_output=True).returncode:
        pytest.skip(f"{module} is not installed in {sys.executable}")
    native = framework_args(["libs_check.py", library], clean_env())
    assert "error" not in native, f"{library} fails natively: {native['error']}"
    before = sessions(cuda_daemon)
    remote = framework_args(["libs_check.py", library],
                            pvgpu_env(libdir, shm(cuda_daemon)))
    assert sessions(cuda_daemon) > before, "pvgpud saw no session:\n" + cuda_daemon.log()
    record("lib-" + library, native, remote)
    wrong = compare(native, remote)
    assert not wrong, "\n".join(wrong)


# ---- round trips per call on the real GPU ---------------------------------

LATENCY = BUILD / "bench" / "pvgpu-latency"


@pytest.mark.skipif(not LATENCY.exists(), reason="bench/pvgpu-latency is not built")
def test_round_trips_per_call(programs, cuda_daemon, libdir):
    """pvgpu-latency (NVIDIA's runtime linked in) over pvgpu's libcuda.so.1
    on the GPU: a synchronize on an idle device is answered in the guest
    (no round trip), a synchronous copy and a launch + synchronize take one
    each.  The figures go to $(BUILD)/tests/latency-libcuda.json for
    BENCHMARKS.md."""
    env = pvgpu_env(libdir, shm(cuda_daemon))
    before = sessions(cuda_daemon)
    res = run([str(LATENCY), "--json", "--tests", "copy,launch,sync",
               "--sizes", "1,64", "--iters", "2000"], env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert sessions(cuda_daemon) > before, "pvgpud saw no session:\n" + cuda_daemon.log()
    out = json.loads(res.stdout)
    assert out["library"]["driver_pvgpu"], out["library"]
    (BUILD / "tests").mkdir(parents=True, exist_ok=True)
    (BUILD / "tests" / "latency-libcuda.json").write_text(res.stdout)
    rt = {r["key"]: r["round_trips_per_op"] for r in out["results"]}
    assert rt["sync idle"] < 0.01, rt
    assert 0.99 < rt["launch+sync"] < 1.05, rt
    copies = [v for k, v in rt.items() if k.startswith("copy ")]
    assert copies and all(0.99 < v < 1.05 for v in copies), rt


def test_torch_features_over_libcuda(cuda_daemon, libdir):
    """PyTorch's CUDA graphs, streams and events, expandable segments (VMM),
    torch.compile with Triton and memory statistics give through pvgpu
    what they give natively (each feature in its own process)."""
    if subprocess.run([sys.executable, "-c", "import torch"],
                      capture_output=True).returncode:
        pytest.skip(f"torch is not installed in {sys.executable}")
    native = framework("torch_features.py", clean_env())
    before = sessions(cuda_daemon)
    remote = framework("torch_features.py", pvgpu_env(libdir, shm(cuda_daemon)))
    assert sessions(cuda_daemon) > before, "pvgpud saw no session:\n" + cuda_daemon.log()
    record("torch-features", native, remote)
    broken_natively = {k: v for k, v in native.items() if v.startswith("error")}
    assert not broken_natively, broken_natively
    wrong = {k: (native[k], remote.get(k)) for k in native if remote.get(k) != native[k]}
    assert not wrong, json.dumps(wrong, indent=1)


# ---- TMA descriptors: the backend's driver encodes them -------------------

TENSOR_MAPS = r"""
import ctypes, sys
pv = ctypes.CDLL(sys.argv[1])
nv = ctypes.CDLL(sys.argv[2])          # NVIDIA's, by its path: host-side encoding only
u64, u32 = ctypes.c_uint64, ctypes.c_uint32
def must(lib, name, *args):
    r = getattr(lib, name)(*args)
    if r:
        sys.exit("%s -> %d" % (name, r))
for lib in (pv, nv):
    must(lib, "cuInit", 0)
ctx = ctypes.c_void_p()
must(pv, "cuDevicePrimaryCtxRetain", ctypes.byref(ctx), 0)
must(pv, "cuCtxSetCurrent", ctx)
d = u64()
must(pv, "cuMemAlloc_v2", ctypes.byref(d), ctypes.c_size_t(1 << 20))
nctx = ctypes.c_void_p()
must(nv, "cuDevicePrimaryCtxRetain", ctypes.byref(nctx), 0)
must(nv, "cuCtxSetCurrent", nctx)
def tiled(lib, swizzle):
    m = (u64 * 16)()
    r = lib.cuTensorMapEncodeTiled(m, 7, 2, ctypes.c_void_p(d.value), (u64 * 2)(128, 64),
                                   (u64 * 1)(512), (u32 * 2)(32, 16), (u32 * 2)(1, 1),
                                   0, swizzle, 2, 0)
    return r, list(m)
def im2col(lib):
    m = (u64 * 16)()
    r = lib.cuTensorMapEncodeIm2col(m, 6, 4, ctypes.c_void_p(d.value),
                                    (u64 * 4)(16, 8, 8, 2), (u64 * 3)(32, 256, 2048),
                                    (ctypes.c_int * 2)(-1, -1), (ctypes.c_int * 2)(1, 1),
                                    16, 32, (u32 * 4)(1, 1, 1, 1), 0, 0, 2, 0)
    return r, list(m)
for name, f in (("tiled none", lambda l: tiled(l, 0)), ("tiled 128B", lambda l: tiled(l, 3)),
                ("im2col", im2col)):
    a, b = f(pv), f(nv)
    print(name, a[0], b[0], a == b)
print("PASS")
"""


def nvidia_libcuda():
    out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if line.strip().startswith("libcuda.so.1 ") and "=>" in line:
            return line.split("=>")[1].strip()
    return None


def test_tensor_maps_are_nvidias(cuda_daemon, libdir, tmp_path):
    """cuTensorMapEncodeTiled/Im2col through pvgpu give the same 128 bytes
    as NVIDIA's driver in this process for the same memory (the address is
    the backend's, which the guest shares)."""
    nv = nvidia_libcuda()
    if not nv:
        pytest.skip("ldconfig knows no libcuda.so.1 of NVIDIA's to compare with")
    script = tmp_path / "tmaps.py"
    script.write_text(TENSOR_MAPS)
    before = sessions(cuda_daemon)
    res = run([sys.executable, str(script), str(libdir / "libcuda.so.1"), nv],
              pvgpu_env(libdir, shm(cuda_daemon)))
    out = res.stdout.splitlines()
    assert res.returncode == 0 and out[-1:] == ["PASS"], res.stdout + res.stderr
    assert sessions(cuda_daemon) > before, "pvgpud saw no session:\n" + cuda_daemon.log()
    assert out[:3] == ["tiled none 0 0 True", "tiled 128B 0 0 True", "im2col 0 0 True"], out
