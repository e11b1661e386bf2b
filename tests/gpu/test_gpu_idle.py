"""Idle costs nothing on the real GPU too: 32 sessions over
shm://, each with a CUDA context on the GPU, once they wait: pvgpu's own
threads (pvgpud, its workers, the guests) use under 1% of one core between
them, and all of it together -- NVIDIA's driver runs an event thread in
every process with a context, waking ten times a second -- no more than
32 idle CUDA processes use natively (tests/lib/idle.py)."""

import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from idle import SESSIONS, idle_sessions_share, native_idle_share  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / os.environ.get("PVGPU_BUILD", "build")
LIBCUDA = BUILD / "lib" / "libcuda.so.1"
# The driver's event thread costs 0.06-0.10 % of a core per process from
# run to run (H100, driver 580): 32 idle sessions measured 1.99 % against
# 2.32 % natively in one run, 2.85 % against 2.15 % in another, pvgpu's own
# threads 0.02 % in both.  Room for that spread, no more.
SPREAD = 1.5


def test_32_idle_sessions_on_the_gpu(cuda_daemon, tmp_path):
    native = native_idle_share(tmp_path)
    used = idle_sessions_share(cuda_daemon, LIBCUDA, tmp_path)
    assert used["pvgpu"] < 0.01, \
        f"pvgpu's threads in {SESSIONS} idle sessions used {used['pvgpu']:.2%} " \
        f"of a core; busiest (share, pid, thread): {used['busiest']}"
    assert used["all"] <= native["all"] * SPREAD, \
        f"{SESSIONS} idle sessions used {used['all']:.3%} of a core, " \
        f"{SESSIONS} idle native processes {native['all']:.3%}; busiest " \
        f"(share, pid, thread): {used['busiest']}"
