"""A guest process over pvgpu's libcuda.so.1, as the integration tests run
one: its environment, and a ctypes script that must end with PASS."""
import os
import subprocess
import sys
import time
from pathlib import Path

from pvgpu_asan import preload_for


def guest_env(libdir, uri, token=None, lib=None, **extra):
    """The environment of a process whose libraries come from libdir alone,
    talking to pvgpud at uri (with token, if given: none of the caller's
    device list or token goes through), with extra variables; ASan's runtime
    comes first where lib (libdir's libcuda.so.1 unless named) is
    sanitized."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PVGPU_DEVICES", "PVGPU_TOKEN", "LD_LIBRARY_PATH")}
    env.update(LD_LIBRARY_PATH=str(libdir), PVGPU_DEVICES=uri, **extra)
    if token:
        env["PVGPU_TOKEN"] = token
    return preload_for(lib or Path(libdir) / "libcuda.so.1", env)


def without_managed(lines):
    """A program's stdout lines but its managed-memory attribute, which
    differs from the host's by design where the guest has no window at
    its own address (unix://, tcp://): libcuda.so.1 offers managed memory
    only there (guest-lib/cuda/cuda_managed.c)."""
    return [line for line in lines
            if not line.startswith(("  managed memory:", "  attribute ManagedMemory:"))]


def run_guest_script(tmp_path, text, lib, env, *args, name="script.py", timeout=60):
    """Write text to tmp_path/name and run it with Python, lib (argv[1])
    and args after it, in env; it must exit 0 with PASS as its last line.
    Its stdout lines and its stderr."""
    script = Path(tmp_path) / name
    script.write_text(text)
    res = subprocess.run([sys.executable, str(script), str(lib)] + [str(a) for a in args],
                         env=env, capture_output=True, text=True, timeout=timeout)
    out = res.stdout.splitlines()
    assert res.returncode == 0 and out[-1:] == ["PASS"], res.stdout + res.stderr
    return out, res.stderr


def finish_all(procs, timeout):
    """Wait for the started processes procs, all within timeout seconds from
    now (one still running then is killed): a CompletedProcess each, in
    order."""
    deadline = time.monotonic() + timeout
    done = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return done


# What a ctypes script run by run_guest_script starts with: the library
# (argv[1]) as cu, short names of ctypes' types, must() (a call that has to
# succeed, else the script exits saying which) and context().
SCRIPT_PRELUDE = r'''
import ctypes, struct, sys
cu = ctypes.CDLL(sys.argv[1])
c_u64, c_int, c_uint, c_size, vp = (ctypes.c_uint64, ctypes.c_int, ctypes.c_uint,
                                    ctypes.c_size_t, ctypes.c_void_p)
u64, u32, sz = c_u64, ctypes.c_uint32, c_size
def call(name, *args):
    return getattr(cu, name)(*args)
def must(name, *args):
    r = call(name, *args)
    if r:
        sys.exit("%s -> %d" % (name, r))
def context():
    """cuInit, then a new context on device 0, current: (device, context)."""
    must("cuInit", 0)
    dev, ctx = c_int(), vp()
    must("cuDeviceGet", ctypes.byref(dev), 0)
    must("cuCtxCreate_v2", ctypes.byref(ctx), 0, dev)
    return dev, ctx
'''
