"""On the GPU: pynvml natively (NVIDIA's
libnvidia-ml.so.1) and through pvgpu's libnvidia-ml.so.1 against
pvgpud --executor cuda see the same GPUs: the count, names, UUIDs and PCI
bus ids are equal, and through pvgpu a VM with a quota sees the quota as
its memory total.  Not compared: memory used and utilisation (natively
every process on the host; through pvgpu this VM's only).

The view runs as a separate process (tests/lib/nvml_view.py) whose
libnvidia-ml.so.1 is checked: NVIDIA's natively, pvgpu's through pvgpu;
pvgpud's log shows the session.
"""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from generated import require_generated  # noqa: E402
from pvgpud_cli import require_policy_file  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / os.environ.get("PVGPU_BUILD", "build")
LIBNVML = BUILD / "lib" / "libnvidia-ml.so.1"
VIEW = REPO / "tests" / "lib" / "nvml_view.py"
TOKEN = "nvml-vm-token"
QUOTA = 1 << 30


def need_pynvml():
    try:
        import pynvml  # noqa: F401
    except ImportError:
        pytest.skip("pynvml (NVIDIA's nvidia-ml-py) is not installed in this python")
    require_generated(LIBNVML, "nvml.h", "make; it needs libclang and nvml.h")


def view(env):
    res = subprocess.run([sys.executable, str(VIEW), "--json"], env=env,
                         capture_output=True, text=True, timeout=120, cwd=REPO)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout.splitlines()[0])


def pvgpu_env(daemon):
    env = dict(os.environ)
    old = env.get("LD_LIBRARY_PATH")
    env["LD_LIBRARY_PATH"] = str(BUILD / "lib") + (":" + old if old else "")
    env["PVGPU_DEVICES"] = daemon.tcp
    env["PVGPU_TOKEN"] = TOKEN
    return env


def test_pynvml_through_pvgpu_matches_native(start_pvgpud, tmp_path):
    need_pynvml()
    require_policy_file()
    native = view({k: v for k, v in os.environ.items()
                   if not k.startswith("PVGPU_")})
    assert native["library"] and "libnvidia-ml" in native["library"]
    assert not native["library"].startswith(str(BUILD)), native["library"]

    conf = tmp_path / "pvgpud.conf"
    conf.write_text(textwrap.dedent(f"""
        [default]
        policy = refuse

        [vm nvml]
        token = {TOKEN}
        memory = {QUOTA >> 20}M
        """))
    daemon = start_pvgpud("cuda", extra_args=["--config", str(conf)])
    ours = view(pvgpu_env(daemon))
    assert ours["library"] == str(LIBNVML.resolve()), ours["library"]

    assert ours["count"] == native["count"]
    # CUDA's order (the backend's) may differ from NVML's (PCI order): by UUID.
    by_uuid = {d["uuid"]: d for d in native["devices"]}
    assert {d["uuid"] for d in ours["devices"]} == set(by_uuid)
    for d in ours["devices"]:
        n = by_uuid[d["uuid"]]
        assert d["name"] == n["name"]
        assert d["bus_id"] == n["bus_id"]
        assert d["pci_device_id"] == n["pci_device_id"]
        assert d["compute_capability"] == n["compute_capability"]
        assert d["memory"]["total"] == QUOTA
        assert d["memory"]["used"] <= QUOTA
    assert ours["cuda"] == native["cuda"]
    # The host's driver version, read by the worker from the NVIDIA module.
    assert ours["driver"] == native["driver"]
    assert "vm nvml" in daemon.log()
    assert "hello from 'python" in daemon.log()
