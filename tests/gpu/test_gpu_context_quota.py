"""On the GPU: a VM cannot pass its memory quota by making contexts and
streams.

Each context takes device memory of its own (about 524 MiB on an H200) and
each stream some (about 560 KiB).  pvgpud measures both at start-up and
charges them to the VM's `memory`, so a VM with memory = 2G whose programs
make contexts (one a process, as CUDA's primary) and then streams through
pvgpu's libcuda.so.1 is refused with CUDA_ERROR_OUT_OF_MEMORY before the
GPU memory its sessions hold, as NVML sees the whole device natively,
passes 2G and a little."""
import ctypes
import os
import re
import subprocess
import sys
import textwrap

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from curesult import CUDA_ERROR_OUT_OF_MEMORY  # noqa: E402
from pvgpud_cli import require_policy_file  # noqa: E402

MiB = 1 << 20
QUOTA = 2048 * MiB
SLACK = 64 * MiB
TOKEN = "ctx-quota-vm-token"
MOST_SESSIONS = 12

# One guest program: a context on device 0 and its cuMemGetInfo (pvgpu's
# libcuda makes the context on the backend at its first call; the rc
# printed), then on each "streams N" line up to N streams until one is
# refused ("made rc").
GUEST = textwrap.dedent("""\
    import ctypes, sys
    cu = ctypes.CDLL("libcuda.so.1")
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    rc = cu.cuInit(0) or cu.cuDeviceGet(ctypes.byref(dev), 0)
    rc = rc or cu.cuCtxCreate_v4(ctypes.byref(ctx), None, 0, dev)
    rc = rc or cu.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))
    print(rc, free.value, flush=True)
    for line in sys.stdin:
        made, rc = 0, 0
        for _ in range(int(line.split()[1])):
            s = ctypes.c_void_p()
            rc = cu.cuStreamCreate(ctypes.byref(s), 0)
            if rc:
                break
            made += 1
        print(made, rc, flush=True)
    """)


class NvmlMemory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong),
                ("used", ctypes.c_ulonglong)]


def nvml_used():
    """Bytes used on every GPU of the machine, as NVIDIA's NVML says."""
    nvml = ctypes.CDLL("libnvidia-ml.so.1")
    assert nvml.nvmlInit_v2() == 0
    count = ctypes.c_uint()
    assert nvml.nvmlDeviceGetCount_v2(ctypes.byref(count)) == 0
    used = 0
    for i in range(count.value):
        h, mem = ctypes.c_void_p(), NvmlMemory()
        assert nvml.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h)) == 0
        assert nvml.nvmlDeviceGetMemoryInfo(h, ctypes.byref(mem)) == 0
        used += mem.used
    nvml.nvmlShutdown()
    return used


def quota_daemon(start_pvgpud, tmp_path):
    require_policy_file()
    conf = tmp_path / "pvgpud.conf"
    conf.write_text(f"[default]\npolicy = refuse\n\n"
                    f"[vm ctx]\ntoken = {TOKEN}\nmemory = {QUOTA >> 20}M\n")
    return start_pvgpud("cuda", extra_args=["--config", str(conf)])


def guest(libdir, daemon):
    env = dict(os.environ, LD_LIBRARY_PATH=str(libdir),
               PVGPU_DEVICES=daemon.tcp, PVGPU_TOKEN=TOKEN)
    return subprocess.Popen([sys.executable, "-c", GUEST], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_contexts_and_streams_stop_at_the_quota(libdir, start_pvgpud, tmp_path):
    daemon = quota_daemon(start_pvgpud, tmp_path)
    m = re.search(r"device 0: .*; a context takes ([^,]+), a stream (.+?) \(",
                  daemon.log())
    assert m, daemon.log()
    print(f"pvgpud measured: a context takes {m.group(1)}, a stream {m.group(2)}")
    base = nvml_used()
    held, refused, peak = [], None, 0
    try:
        while refused is None and len(held) < MOST_SESSIONS:
            p = guest(libdir, daemon)
            line = p.stdout.readline()
            assert line, p.stderr.read()
            held.append(p)
            peak = max(peak, nvml_used() - base)
            st, free = map(int, line.split())
            if st:
                refused = st
            else:
                print(f"context {len(held)}: the VM has {free / MiB:.0f} MiB free")
        print(f"{len(held) - (refused is not None)} contexts held, "
              f"{peak / MiB:.0f} MiB of the GPU")
        assert refused == CUDA_ERROR_OUT_OF_MEMORY, (refused, daemon.log()[-3000:])
        assert len(held) >= 2, "the first context was refused"
        # What is left of the quota, in streams of the first session.
        held[0].stdin.write("streams 10000\n")
        held[0].stdin.flush()
        made, st = map(int, held[0].stdout.readline().split())
        peak = max(peak, nvml_used() - base)
        print(f"then {made} streams, {peak / MiB:.0f} MiB of the GPU")
        assert st == CUDA_ERROR_OUT_OF_MEMORY, (made, st)
        assert peak <= QUOTA + SLACK, f"{peak / MiB:.0f} MiB held by a VM of 2 GiB"
    finally:
        for p in held:
            p.stdin.close()
            p.wait(timeout=60)
