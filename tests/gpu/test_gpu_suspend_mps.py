"""On the GPU: what the sim can only model.

- `pvgpuctl session suspend` takes a session off the GPU through NVIDIA's
  process checkpoint (cuCheckpointProcess*): the GPU's memory comes back,
  and the guest's next call resumes the session with its data intact.
  (/metrics is checked against the sim: the GPU machine's pvgpud may be
  built without libmicrohttpd.)
- `[gpu 0] sharing = mps`: pvgpud runs NVIDIA's MPS control daemon for
  the GPU, two VMs' kernel programs at once run through it to correct
  results, and the MPS server it started is there to be listed.
"""
import os
import re
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import pvgpu_wire as W  # noqa: E402
from gpu_suspend import gpu_memory_used_mib  # noqa: E402
from pvgpud_cli import require_policy_file  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / os.environ.get("PVGPU_BUILD", "build")
PVGPUCTL = BUILD / "bin" / "pvgpuctl"
SIZE = 256 << 20


def test_a_suspended_session_leaves_the_gpu_and_comes_back_intact(start_pvgpud, tmp_path):
    admin = tmp_path / "admin.sock"
    daemon = start_pvgpud("cuda", extra_args=["--admin", str(admin)])
    s = W.Session(daemon.unix)
    s.hello()
    s.open_context()
    st, _, out, _ = s.call("mem_alloc", size=SIZE)
    assert st == 0
    dptr = out["dptr"]
    pattern = os.urandom(1 << 20) * (SIZE >> 20)
    assert s.call("memcpy_htod", dst=dptr, size=SIZE, data_in=pattern)[0] == 0
    sid = int(re.findall(r"session (\d+) start: ", daemon.log())[-1])
    before = gpu_memory_used_mib()

    res = subprocess.run([str(PVGPUCTL), "session", "suspend", str(sid), "--admin", str(admin)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, f"{res.stdout}{res.stderr}\n{daemon.log()[-3000:]}"
    assert res.stdout.strip() == f"session {sid} suspended"
    during = gpu_memory_used_mib()
    # The session's 256 MiB and its context are off the GPU.
    assert during <= before - SIZE // (1 << 20), (before, during, daemon.log()[-2000:])
    assert re.search(r"session %d suspended: .* to host memory in " % sid,
                     daemon.log()), daemon.log()[-2000:]

    st, _, _, back = s.call("memcpy_dtoh", src=dptr, size=SIZE)
    assert st == 0 and back == pattern, daemon.log()[-3000:]
    assert re.search(r"session %d resumed: " % sid, daemon.log()), daemon.log()[-3000:]
    assert gpu_memory_used_mib() >= before - 64
    s.close()


MPS_POLICY = """\
[default]
policy = refuse

[vm left]
token = left-vm-token
gpus = 0
[vm right]
token = right-vm-token
gpus = 0

[gpu 0]
sharing = mps
"""


def test_two_vms_share_the_gpu_through_mps(start_pvgpud, tmp_path, libdir):
    require_policy_file()
    control = subprocess.run(["sh", "-c", "command -v nvidia-cuda-mps-control"],
                             capture_output=True, text=True).stdout.strip()
    if not control:
        pytest.skip("no nvidia-cuda-mps-control on this machine (NVIDIA's driver utilities)")
    conf = tmp_path / "pvgpud.conf"
    conf.write_text(textwrap.dedent(MPS_POLICY))
    daemon = start_pvgpud("cuda", extra_args=["--config", str(conf)])
    started = r"mps: GPU 0: control daemon .*pipes in (\S+)\)"
    pipes = re.search(started, daemon.wait_log(started)).group(1)

    image = BUILD / "tests" / "kernels" / "images" / "vecadd.fatbin"
    ptx = BUILD / "tests" / "kernels" / "images" / "vecadd.ptx"
    # Loads vecadd from the image, then from its PTX, and launches it.
    program = BUILD / "tests" / "driver" / "ptxjit"
    if not program.exists():
        pytest.fail(f"{program} is not built (make test-programs)")
    results = {}

    def run(token):
        env = {k: v for k, v in os.environ.items()
               if k not in ("PVGPU_DEVICES", "PVGPU_TOKEN", "LD_LIBRARY_PATH", "LD_PRELOAD")}
        env.update(LD_LIBRARY_PATH=str(libdir), PVGPU_DEVICES=daemon.tcp, PVGPU_TOKEN=token)
        results[token] = subprocess.run([str(program), str(image), str(ptx)], env=env,
                                        capture_output=True, text=True, timeout=300)

    threads = [threading.Thread(target=run, args=(t,))
               for t in ("left-vm-token", "right-vm-token")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for token, res in results.items():
        assert res.returncode == 0 and res.stdout.splitlines()[-1:] == ["PASS"], \
            f"{token}: rc {res.returncode}\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}\n" \
            f"{daemon.log()[-3000:]}"
    log = daemon.log()
    for vm in ("left", "right"):
        assert re.search(r"session \d+ start: .*vm %s" % vm, log), log[-3000:]
    # The MPS server pvgpud's control daemon started for these sessions.
    servers = subprocess.run([control], input="get_server_list\n", capture_output=True,
                             text=True, timeout=60,
                             env=dict(os.environ, CUDA_MPS_PIPE_DIRECTORY=pipes))
    assert servers.returncode == 0 and re.search(r"^\d+$", servers.stdout, re.M), \
        f"{servers.stdout}{servers.stderr}\n{log[-3000:]}"
