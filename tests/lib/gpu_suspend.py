"""What the GPU tests of suspend and oversubscription share: the GPU's
memory as nvidia-smi reports it, `pvgpuctl session suspend`, and the
figures pvgpud's suspend and resume lines give."""
import os
import re
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PVGPUCTL = REPO / os.environ.get("PVGPU_BUILD", "build") / "bin" / "pvgpuctl"

# "session 12 suspended: vm alice, 4.51 GiB to host memory in 1.23 s"
# (pvgpu_human_bytes: GiB with two places, MiB with one, or bytes).
MOVED = re.compile(r"session (\d+) (suspended|resumed): vm (\S+), ([\d.]+) (GiB|MiB|B) "
                   r"(?:to host memory|back to the device) in ([\d.]+) s")
UNITS = {"GiB": 1 << 30, "MiB": 1 << 20, "B": 1}


def gpu_memory_used_mib():
    """Device 0's memory in use, all processes', as nvidia-smi says."""
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits",
                          "-i", "0"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.split()[0])


def short_admin_path():
    """An admin socket path short enough for a Unix socket (tmp_path may not be)."""
    return f"/tmp/pvgpu-admin-{os.getpid()}-{time.monotonic_ns()}.sock"


def suspend(sid, admin, daemon):
    """`pvgpuctl session suspend sid`, which must succeed: its wall time in s."""
    t0 = time.monotonic()
    res = subprocess.run([str(PVGPUCTL), "session", "suspend", str(sid), "--admin", str(admin)],
                         capture_output=True, text=True, timeout=600)
    took = time.monotonic() - t0
    assert res.returncode == 0, f"{res.stdout}{res.stderr}\n{daemon.log()[-3000:]}"
    assert res.stdout.strip() == f"session {sid} suspended", res.stdout
    return took


def state(sid, admin):
    """The session's STATE column in `pvgpuctl session list`, or None."""
    res = subprocess.run([str(PVGPUCTL), "session", "list", "--admin", str(admin)],
                         capture_output=True, text=True, timeout=60)
    for row in (line.split() for line in res.stdout.splitlines()[1:]):
        if row and row[0] == str(sid):
            return row[2]
    return None


def moves(log, sid, what):
    """[(bytes, seconds)] of each `session sid what:` line (what: suspended
    or resumed), in order; bytes as the line rounds them."""
    return [(float(m.group(4)) * UNITS[m.group(5)], float(m.group(6)))
            for m in MOVED.finditer(log) if int(m.group(1)) == sid and m.group(2) == what]


def rate(nbytes, secs):
    """'X s (Y GB/s)' for a move of nbytes in secs."""
    return f"{secs:.2f} s ({nbytes / 1e9 / secs:.2f} GB/s)" if secs > 0 else f"{secs:.2f} s"
