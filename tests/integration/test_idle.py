"""Idle costs nothing: 32 sessions over shm:// against pvgpud
--executor sim use under 1% of one core between them (tests/lib/idle.py
says how it is measured; tests/gpu/test_gpu_idle.py does the same on the
real GPU)."""

import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from idle import SESSIONS, idle_sessions_share  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / os.environ.get("PVGPU_BUILD", "build")
LIBCUDA = BUILD / "lib" / "libcuda.so.1"


def test_32_idle_sessions_use_under_one_percent_of_a_core(sim_daemon, tmp_path):
    used = idle_sessions_share(sim_daemon, LIBCUDA, tmp_path)
    assert used["all"] < 0.01, \
        f"{SESSIONS} idle sessions used {used['all']:.2%} of a core; busiest " \
        f"(share, pid, thread): {used['busiest']}; pvgpud {sim_daemon.proc.pid}"
