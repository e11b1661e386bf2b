"""On a machine with an NVIDIA GPU: the driver-API test programs
(tests/programs/driver/*.c) natively and through pvgpu's libcuda.so.1 over
shm:// and unix:// against `pvgpud --executor cuda` give the same
transcript.  pvgpu's library is first on the library path (NVIDIA's
libcuda.so.1 is on this machine too) and each run checks that pvgpud
served a session, so that nothing passes by reaching the GPU directly."""
import os
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / os.environ.get("PVGPU_BUILD", "build")
IMAGE = BUILD / "tests" / "kernels" / "images" / "vecadd.fatbin"
PTX = BUILD / "tests" / "kernels" / "images" / "vecadd.ptx"
DRIVER_PROGRAMS = sorted(p.stem for p in (REPO / "tests" / "programs" / "driver").glob("*.c"))
# Mapped host memory and managed memory need a window both sides see:
# over unix:// the program says "not supported", which a native run never
# does.
NEEDS_WINDOW = {"zerocopy", "hostreg", "managed"}


def run(path, env):
    return subprocess.run([str(path), str(IMAGE), str(PTX)], env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, errors="replace",
                          timeout=300, cwd=REPO)


def clean_env():
    return {k: v for k, v in os.environ.items()
            if k not in ("PVGPU_DEVICES", "PVGPU_TOKEN", "LD_LIBRARY_PATH", "LD_PRELOAD")}


@pytest.mark.parametrize("transport", ["shm", "unix"])
@pytest.mark.parametrize("name", DRIVER_PROGRAMS)
def test_driver_program_native_and_pvgpu(cuda_daemon, libdir, name, transport):
    if transport == "unix" and name in NEEDS_WINDOW:
        pytest.skip(f"{name} needs a shared window (shm://); over unix:// it is "
                    "CUDA_ERROR_NOT_SUPPORTED, tested against the sim")
    path = BUILD / "tests" / "driver" / name
    if not path.exists():
        pytest.fail(f"{path} is not built (make test-programs)")
    native = run(path, clean_env())
    assert native.returncode == 0 and native.stdout.splitlines()[-1:] == ["PASS"], \
        "fails natively:\n" + native.stdout[-2000:] + native.stderr[-2000:]
    env = clean_env()
    env["LD_LIBRARY_PATH"] = str(libdir)
    env["PVGPU_DEVICES"] = (cuda_daemon.unix if transport == "unix" else
                            "shm://" + cuda_daemon.unix[len("unix://"):])
    before = len(re.findall(r"session \d+ start:", cuda_daemon.log()))
    remote = run(path, env)
    assert remote.returncode == 0, \
        f"rc {remote.returncode}\n{remote.stdout[-3000:]}\n{remote.stderr[-3000:]}\n" \
        f"pvgpud:\n{cuda_daemon.log()[-3000:]}"
    assert len(re.findall(r"session \d+ start:", cuda_daemon.log())) > before, \
        "pvgpud saw no session:\n" + cuda_daemon.log()
    assert remote.stdout == native.stdout
