"""Idle costs nothing on the real GPU too (issue 15): 32 sessions over
shm://, each with a CUDA context on the GPU (NVIDIA's driver adds threads
of its own to every worker), use under 1% of one core between them once
they wait -- pvgpud, its workers and the guests together
(tests/lib/idle.py)."""

import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from idle import SESSIONS, idle_sessions_share  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / os.environ.get("PVGPU_BUILD", "build")
LIBCUDA = BUILD / "lib" / "libcuda.so.1"


def test_32_idle_sessions_on_the_gpu_use_under_one_percent_of_a_core(cuda_daemon, tmp_path):
    share, busiest = idle_sessions_share(cuda_daemon, LIBCUDA, tmp_path)
    assert share < 0.01, \
        f"{SESSIONS} idle sessions on the GPU used {share:.2%} of a core; " \
        f"busiest (pid, ns): {busiest}; pvgpud {cuda_daemon.proc.pid}"
