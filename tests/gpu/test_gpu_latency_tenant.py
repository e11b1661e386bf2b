"""On the GPU: a latency VM beside training VMs (scripts/tenants.py).

A batch-1 decode tenant runs alone and then beside three GPT-2 training
tenants, each a VM of one pvgpud on an MPS GPU (`[gpu 0] sharing = mps`,
the trainers at `mps_threads = 80`); each token is timed to the device.
Its P99 beside them is read against its P99 alone from the same run.

Why MPS: measured on the H200 (BENCHMARKS.md, "Real tenants side by
side"), beside seven trainers a decode tenant's P99 went to 7.5x its solo
P99 under pvgpud's turns with the latency class, 2.4x under the GPU's own
time slicing, and 1.9x through pvgpud on MPS with the trainers at 80 % of
the SMs, whose steps/s stayed at MPS's.  The bound below is the MPS
route's, with room for a loaded machine; the target (1.2x) is
BENCHMARKS.md's, not this test's.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from pvgpud_cli import require_policy_file  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / os.environ.get("PVGPU_BUILD", "build")
# Beside the trainers, at most this many times its solo P99.
P99_BOUND = 3.0


def test_a_decode_vm_keeps_its_tail_beside_trainers_on_mps(tmp_path):
    for module in ("torch", "transformers"):
        if subprocess.run([sys.executable, "-c", f"import {module}"],
                          capture_output=True).returncode:
            pytest.skip(f"{module} is not installed in {sys.executable}")
    if not shutil.which("nvidia-cuda-mps-control"):
        pytest.skip("no nvidia-cuda-mps-control on this machine (NVIDIA's driver utilities)")
    require_policy_file()
    out = tmp_path / "tenants.json"
    res = subprocess.run([sys.executable, str(REPO / "scripts" / "tenants.py"),
                          "--build", str(BUILD), "--mix", "decode:1,train:3", "--solo",
                          "--modes", "pvgpu-mps", "--mps-threads", "train=80",
                          "--seconds", "8", "--json", str(out)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    print("\n" + res.stdout)
    (entry,) = json.loads(out.read_text())
    decode, solo = entry["summary"]["decode"], entry["solo"]
    train = entry["summary"]["train"]
    assert train["tenants"] == 3 and train["min"] > 0, res.stdout
    assert decode["p99_ms"] <= P99_BOUND * solo["p99_ms"], res.stdout
