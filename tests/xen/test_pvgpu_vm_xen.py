"""`pvgpu-vm xen attach|detach` (xen-vchan/pvgpu_xen.py, loaded by
qemu-device/pvgpu-vm) without Xen:
the policy it writes is one pvgpud loads (a [vm NAME] section per domain,
the rest of the file kept), re-attaching replaces the section, detach
removes it, the guest.conf names vchan://BACKEND/CHANNEL, and bad input is
refused with exit status 2.  The same command's files drive the domUs of
test_xen_pvgpud.py under Xen."""
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
BUILD = REPO / os.environ.get("PVGPU_BUILD", "build")
PVGPU_VM = REPO / "qemu-device" / "pvgpu-vm"


def pvgpu_vm(*args):
    return subprocess.run([str(PVGPU_VM), *args], capture_output=True, text=True)


def pvgpud_policy_line(tmp_path, config):
    """The line pvgpud logs after loading config (it then serves on a Unix
    socket; stopped with SIGTERM)."""
    sock = tmp_path / "pvgpud.sock"
    proc = subprocess.Popen([str(BUILD / "bin" / "pvgpud"), "--listen", f"unix://{sock}",
                             "--executor", "sim", "--config", str(config),
                             "--log-level", "info"],
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while not sock.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGTERM)
        err = proc.communicate(timeout=20)[1]
    return err


def test_attach_writes_a_policy_pvgpud_loads(tmp_path):
    conf = tmp_path / "pvgpud.conf"
    conf.write_text("; site policy\n[default]\npolicy = refuse\n\n[vm kvm1]\ncid = 5\n")
    guest = tmp_path / "guest.conf"
    r = pvgpu_vm("xen", "attach", "web1", "--memory", "8G", "--gpu", "0", "--weight", "3",
                 "--config", str(conf), "--guest-conf", str(guest))
    assert r.returncode == 0, r.stderr
    r = pvgpu_vm("xen", "attach", "db2", "--memory", "2G", "--mode", "exclusive",
                 "--config", str(conf))
    assert r.returncode == 0, r.stderr
    assert "vchan://0/pvgpu" in r.stdout     # printed when not written
    text = conf.read_text()
    assert text.startswith("; site policy\n[default]\npolicy = refuse\n")
    assert "[vm kvm1]\ncid = 5\n" in text
    assert "[vm web1]" in text and "memory = 8G" in text and "weight = 3" in text
    assert "[vm db2]" in text and "mode = exclusive" in text
    lines = [l for l in guest.read_text().splitlines() if l and not l.startswith("#")]
    assert lines == ["vchan://0/pvgpu"]
    err = pvgpud_policy_line(tmp_path, conf)
    assert f"policy {conf}: 3 VM(s), unknown callers refused" in err, err


def test_reattach_replaces_and_detach_removes(tmp_path):
    conf = tmp_path / "pvgpud.conf"
    for mem in ("1G", "4G"):
        r = pvgpu_vm("xen", "attach", "web1", "--memory", mem, "--config", str(conf),
                     "--backend", "3", "--channel", "gpu0")
        assert r.returncode == 0, r.stderr
    assert "vchan://3/gpu0" in r.stdout
    text = conf.read_text()
    assert text.count("[vm web1]") == 1 and "memory = 4G" in text and "1G" not in text
    r = pvgpu_vm("xen", "detach", "web1", "--config", str(conf))
    assert r.returncode == 0 and "detached: web1" in r.stdout
    assert "[vm web1]" not in conf.read_text()
    r = pvgpu_vm("xen", "detach", "web1", "--config", str(conf))
    assert r.returncode == 0 and "not attached: web1" in r.stdout


def test_bad_input_is_refused(tmp_path):
    conf = tmp_path / "pvgpud.conf"
    for args in (["web 1"], ["web1", "--memory", "lots"], ["web1", "--weight", "0"],
                 ["web1", "--channel", "a/b"], ["web1", "--backend", "-1"]):
        r = pvgpu_vm("xen", "attach", *args, "--config", str(conf))
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        assert r.stderr.startswith("pvgpu-vm: ") and r.stderr.count("\n") == 1, r.stderr
    assert not conf.exists()


def _installed(tmp_path, with_xen):
    """pvgpu-vm laid out as the packages install it: /usr/lib/pvgpu/pvgpu-vm
    and pvgpuvm/ (pvgpu-host), pvgpu_xen.py beside them (pvgpu-xen)."""
    lib = tmp_path / "usr" / "lib" / "pvgpu"
    shutil.copytree(REPO / "qemu-device" / "pvgpuvm", lib / "pvgpuvm",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(REPO / "qemu-device" / "pvgpu-vm", lib / "pvgpu-vm")
    if with_xen:
        shutil.copy2(REPO / "xen-vchan" / "pvgpu_xen.py", lib / "pvgpu_xen.py")
    return lib / "pvgpu-vm"


def test_installed_layout_finds_the_xen_glue(tmp_path):
    conf = tmp_path / "pvgpud.conf"
    tool = _installed(tmp_path, with_xen=True)
    r = subprocess.run([str(tool), "xen", "attach", "web1", "--memory", "1G",
                        "--config", str(conf)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "[vm web1]" in conf.read_text() and "vchan://0/pvgpu" in r.stdout


def test_without_pvgpu_xen_says_what_to_install(tmp_path):
    tool = _installed(tmp_path, with_xen=False)
    r = subprocess.run([str(tool), "xen", "attach", "web1", "--config",
                        str(tmp_path / "pvgpud.conf")], capture_output=True, text=True)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "pvgpu-xen" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert not (tmp_path / "pvgpud.conf").exists()
    # the rest of pvgpu-vm works without it
    r = subprocess.run([str(tool), "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "xen" in r.stdout
