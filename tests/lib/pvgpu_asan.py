"""Running a Python script over a pvgpu library that may carry ASan (the
sanitizer build): Python is not built with ASan, which refuses to start
unless its runtime is loaded first, so such runs preload it."""
import subprocess
from pathlib import Path


def asan_runtime(lib):
    """The ASan runtime lib was linked with, or None."""
    res = subprocess.run(["ldd", str(lib)], capture_output=True, text=True)
    for line in res.stdout.splitlines():
        parts = line.split()
        if parts and parts[0].startswith("libasan.so") and len(parts) >= 3:
            return parts[2]
    return None


# What a CUDA program may leave to the driver at exit (streams, events it
# never destroys): not pvgpu's leaks.  Everything else stays checked, NVIDIA's
# runtime included (it leaves nothing of its own).
DRIVER_HANDLES = Path(__file__).resolve().parent / "lsan-driver-handles.supp"


def preload_for(lib, env, leaks=False):
    """Add what env needs to load lib into a process not built with ASan;
    returns env.  leaks: keep LeakSanitizer's check (a CUDA program's own
    process), less the driver's handles above; without it (a Python, which
    leaks by design) none."""
    asan = asan_runtime(lib)
    if asan:
        env["LD_PRELOAD"] = asan
        # A CUDA program may ask for more host memory than exists (the
        # errors program does): the driver answers out of memory, and so
        # must ASan's allocator rather than abort.
        if leaks:
            env["ASAN_OPTIONS"] = "allocator_may_return_null=1"
            env["LSAN_OPTIONS"] = f"suppressions={DRIVER_HANDLES}"
        else:
            env["ASAN_OPTIONS"] = "detect_leaks=0:allocator_may_return_null=1"
    return env
