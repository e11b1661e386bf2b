"""qemu-device without libvirt: window files, the registry, the XML and QEMU
arguments pvgpu-vm generates, and the vhost-device-vsock supervisor.

The XML is checked with libvirt's own schema (virt-xml-validate), and the
QEMU arguments by starting QEMU with them, so that "it validates" means what
libvirt and QEMU 7.2 accept, not what we believe they accept.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
QEMU_DEVICE = REPO / "qemu-device"
PVGPU_VM = QEMU_DEVICE / "pvgpu-vm"
sys.path.insert(0, str(QEMU_DEVICE))

from pvgpuvm import domain, generate, registry, spec, supervise, window  # noqa: E402
from pvgpuvm.errors import Failure, UsageError  # noqa: E402

pytestmark = pytest.mark.vm

MIB = 1 << 20


def run_vm(*args, run_dir, check=True, **kw):
    """Run pvgpu-vm; with check, fail on a non-zero exit with its stderr."""
    proc = subprocess.run([str(PVGPU_VM), "--run-dir", str(run_dir), *args],
                          capture_output=True, text=True, timeout=60, **kw)
    if check and proc.returncode != 0:
        pytest.fail(f"pvgpu-vm {' '.join(args)} exited {proc.returncode}: {proc.stderr}")
    return proc


def unique(name):
    return f"pvgpu-t-{name}-{os.getpid()}"


@pytest.fixture
def run_dir():
    """A run directory short enough for Unix socket paths (108 bytes), which
    pytest's tmp_path is not."""
    path = Path(tempfile.mkdtemp(prefix="pv", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def shm_name(request):
    """A VM name whose /dev/shm window is removed after the test."""
    vm = unique(request.node.name.replace("_", "")[:20])
    yield vm
    try:
        os.unlink(f"/dev/shm/pvgpu-{vm}")
    except FileNotFoundError:
        pass


# ---- window files ------------------------------------------------------------

def layout(size=16 * MIB, wid=0x1234_5678_9ABC_DEF0):
    return spec.default_layout(size, wid)


def test_window_created_with_valid_header(tmp_path, monkeypatch):
    monkeypatch.setattr(window, "daemon_group", lambda: None)  # no pvgpu group
    path = tmp_path / "pvgpu-w"
    lay = layout()
    assert window.ensure_window(str(path), lay) is True
    st = path.stat()
    assert st.st_size == 16 * MIB
    assert st.st_mode & 0o777 == 0o600
    data = path.read_bytes()[:window.HDR_SIZE]
    magic, version, got = window.unpack_header(data)
    assert (magic, version) == (window.MAGIC, window.LAYOUT)
    assert got == lay
    assert got.staging_offset == window.HDR_SIZE and got.nslots == 8 and got.slot_size == MIB
    counters = window.OFFSETS["h2d_filled"]
    assert data[counters:window.HDR_SIZE] == bytes(window.HDR_SIZE - counters), \
        "counters and the rest of the page start at zero"
    # A second time it is accepted as it is, not rewritten.
    assert window.ensure_window(str(path), lay) is False


def test_window_shared_with_the_daemon_group(tmp_path, monkeypatch):
    """Where the pvgpu group exists (the Debian package makes it), the
    window belongs to it, mode 0660: pvgpud runs as user pvgpu and must map
    the file QEMU's user owns; others still cannot."""
    group = os.getegid()
    monkeypatch.setattr(window, "daemon_group", lambda: group)
    path = tmp_path / "pvgpu-w"
    assert window.ensure_window(str(path), layout()) is True
    st = path.stat()
    assert (st.st_mode & 0o777, st.st_gid) == (0o660, group)
    path.chmod(0o600)  # an existing window is given the same access again
    assert window.ensure_window(str(path), layout()) is False
    assert path.stat().st_mode & 0o777 == 0o660


def test_window_wrong_header_refused(tmp_path):
    path = tmp_path / "pvgpu-w"
    path.write_bytes(b"\xff" * (16 * MIB))
    with pytest.raises(Failure, match="magic is 0xffffffff.*refused"):
        window.ensure_window(str(path), layout())
    assert path.read_bytes()[:4] == b"\xff" * 4, "a refused file is left alone"


def test_window_other_id_refused(tmp_path):
    path = tmp_path / "pvgpu-w"
    window.ensure_window(str(path), layout(wid=1))
    with pytest.raises(Failure, match="window_id"):
        window.ensure_window(str(path), layout(wid=2))


def test_window_size_mismatch_refused(tmp_path):
    path = tmp_path / "pvgpu-w"
    window.ensure_window(str(path), layout(size=16 * MIB))
    with pytest.raises(Failure, match="size disagrees"):
        window.ensure_window(str(path), layout(size=32 * MIB))
    # The file keeps its size, but the header says otherwise: also refused.
    window.ensure_window(str(tmp_path / "other"), layout(size=32 * MIB))
    with open(tmp_path / "other", "r+b") as f:
        f.truncate(16 * MIB)
    with pytest.raises(Failure, match="size"):
        window.ensure_window(str(tmp_path / "other"), layout(size=16 * MIB))


def test_window_symlink_refused(tmp_path):
    target = tmp_path / "target"
    window.ensure_window(str(target), layout())
    link = tmp_path / "pvgpu-w"
    link.symlink_to(target)
    with pytest.raises(Failure, match="symbolic link"):
        window.ensure_window(str(link), layout())


@pytest.mark.parametrize("size", [1 * MIB, 2 * MIB, 16 * MIB, 64 * MIB, 256 * MIB, 1 << 30])
def test_default_layout_is_one_the_worker_accepts(size):
    """host-backend/session/window.c: 2..64 slots of 64 KiB..64 MiB, inside the window."""
    lay = spec.default_layout(size, 1)
    assert 2 <= lay.nslots <= 64
    assert 64 * 1024 <= lay.slot_size <= 64 * MIB
    assert lay.staging_offset >= window.HDR_SIZE
    assert lay.staging_offset + lay.slot_size * lay.nslots <= size // 2 + window.HDR_SIZE


@pytest.mark.parametrize("size", [0, 512 * 1024, 3 * MIB, 256 * MIB + 4096])
def test_window_size_must_be_power_of_two(size):
    with pytest.raises(UsageError, match="power of two"):
        spec.check_window_size(size)


# ---- registry ----------------------------------------------------------------

def make_spec(vm="web1", kind=spec.VSOCK_VHOST_USER, cid=3):
    sock, uds = spec.vhost_user_paths("/run/pvgpu", vm)
    v = spec.VsockSpec(kind=kind, cid=cid)
    if kind == spec.VSOCK_VHOST_USER:
        v.socket, v.uds_path = sock, uds
    return spec.VgpuSpec(vm=vm, window_path=f"/dev/shm/pvgpu-{vm}",
                         layout=spec.default_layout(256 * MIB, 0xFEDCBA9876543210),
                         vsock=v, gpu=1, memory=8 << 30, qemu_uid=64055, qemu_gid=107)


@pytest.mark.parametrize("kind", [spec.VSOCK_KERNEL, spec.VSOCK_VHOST_USER])
def test_registry_round_trip(tmp_path, kind):
    reg = registry.Registry(str(tmp_path / "vms"))
    s = make_spec(kind=kind)
    reg.save(s)
    text = (tmp_path / "vms" / "web1.conf").read_text()
    assert "window.id = 0xfedcba9876543210" in text
    assert "vsock.cid = 3" in text
    if kind == spec.VSOCK_VHOST_USER:
        assert "vsock.listen = /run/pvgpu/vsock/web1/vsock.sock_7100" in text
    assert reg.load("web1") == s
    assert reg.names() == ["web1"]
    assert reg.remove("web1") and reg.load("web1") is None


def test_registry_allocates_distinct_cids_and_stable_ids(tmp_path):
    reg = registry.Registry(str(tmp_path / "vms"))
    others = {"a": make_spec("a", cid=3), "b": make_spec("b", cid=5)}
    assert reg.allocate_cid("c", others) == 4
    assert reg.allocate_cid("a", others) == 3, "its own entry does not count as taken"
    wid = reg.allocate_window_id("c", {})
    assert wid != 0 and wid == reg.allocate_window_id("c", {})
    clash = make_spec("d")
    clash.layout.window_id = wid
    assert reg.allocate_window_id("c", {"d": clash}) != wid


def test_registry_damaged_entry_refused(tmp_path):
    (tmp_path / "vms").mkdir()
    (tmp_path / "vms" / "x.conf").write_text("format = 1\nvm = x\n")
    reg = registry.Registry(str(tmp_path / "vms"))
    with pytest.raises(Failure, match="missing key"):
        reg.load("x")
    assert reg.load_all() == {}


# ---- XML ---------------------------------------------------------------------

BASE_XML = """\
<domain type='qemu' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>
  <name>{name}</name>
  <uuid>3e3fce45-4f53-4fa7-bb32-11f34168b82b</uuid>
  <metadata>
    <app:info xmlns:app='http://example.org/app/1'>keep me</app:info>
  </metadata>
  <memory unit='KiB'>262144</memory>
  {memory_backing}
  <vcpu>1</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type></os>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <controller type='pci' index='0' model='pci-root'/>
    <memballoon model='virtio'>
      <address type='pci' domain='0x0000' bus='0x00' slot='0x1f' function='0x0'/>
    </memballoon>
  </devices>
  <qemu:commandline>
    <qemu:arg value='-msg'/>
    <qemu:arg value='timestamp=on'/>
  </qemu:commandline>
</domain>
"""

HUGEPAGES = "<memoryBacking><hugepages/><nosharepages/></memoryBacking>"


def canonical(xml_text):
    return ET.canonicalize(xml_text, strip_text=True)


def virt_xml_validate():
    tool = shutil.which("virt-xml-validate")
    if not tool or not shutil.which("xmllint"):
        pytest.skip("virt-xml-validate/xmllint missing: apt-get install libvirt-clients "
                    "libxml2-utils (scripts/install-deps.sh)")
    return tool


@pytest.mark.parametrize("kind", [spec.VSOCK_KERNEL, spec.VSOCK_VHOST_USER])
@pytest.mark.parametrize("backing", ["", HUGEPAGES])
def test_xml_validates_and_detach_restores(tmp_path, run_dir, kind, backing):
    tool = virt_xml_validate()
    vm = "xmltest"
    original = BASE_XML.format(name=vm, memory_backing=backing)
    src = tmp_path / "domain.xml"
    src.write_text(original)
    out = run_vm("xml", vm, "--domain-xml", str(src), "--vsock", kind, "--memory", "8G",
                 run_dir=run_dir).stdout
    attached = tmp_path / "attached.xml"
    attached.write_text(out)
    check = subprocess.run([tool, str(attached), "domain"], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr + check.stdout

    root = ET.fromstring(out)
    shmem = root.find("devices/shmem")
    assert shmem.get("name") == f"pvgpu-{vm}"
    assert shmem.find("model").get("type") == "ivshmem-plain"
    assert (shmem.find("size").get("unit"), shmem.find("size").text) == ("M", "256")
    assert root.find("metadata/{http://example.org/app/1}info").text == "keep me"
    args = [a.get("value") for a in root.iter(f"{{{generate.QEMU_NS}}}arg")]
    assert args[:2] == ["-msg", "timestamp=on"], "other <qemu:commandline> arguments kept"
    record = root.find(f"metadata/{{{generate.PVGPU_NS}}}vgpu")
    assert record.get("vsock") == kind and record.get("memory") == str(8 << 30)
    if kind == spec.VSOCK_KERNEL:
        vsock = root.find("devices/vsock")
        assert vsock.get("model") == "virtio"
        assert vsock.find("cid").get("auto") == "no" and vsock.find("cid").get("address") == "3"
        assert root.find("memoryBacking") is None if not backing else True
        assert len(args) == 2
    else:
        assert root.find("devices/vsock") is None
        mb = root.find("memoryBacking")
        assert mb.find("source").get("type") == "memfd"
        assert mb.find("access").get("mode") == "shared"
        if backing:
            assert mb.find("hugepages") is not None, "hugepages kept"
        assert args[2] == "-chardev"
        assert args[3].startswith("socket,id=pvgpu-vsock,path=")
        assert args[3].endswith(f"/vsock/{vm}/vhost.sock")
        assert args[4] == "-device"
        device = json.loads(args[5])
        # slot 0x1f is the balloon's in BASE_XML: the next one down is free.
        assert device == {"driver": "vhost-user-vsock-pci", "chardev": "pvgpu-vsock",
                          "id": "pvgpu-vsock-dev", "bus": "pci.0", "addr": "0x1e"}

    removed = run_vm("xml", vm, "--domain-xml", str(attached), "--remove",
                     run_dir=run_dir).stdout
    assert canonical(removed) == canonical(original)


def test_xml_fragments(run_dir):
    out = run_vm("xml", "frag", "--vsock", "kernel", run_dir=run_dir).stdout
    assert "<vsock model=\"virtio\">" in out and "<model type=\"ivshmem-plain\" />" in out
    out = run_vm("xml", "frag", "--vsock", "vhost-user", run_dir=run_dir).stdout
    assert "<qemu:commandline" in out and "<source type=\"memfd\" />" in out


def test_xml_existing_foreign_vsock_refused(tmp_path):
    xml = BASE_XML.format(name="v", memory_backing="").replace(
        "</devices>", "<vsock model='virtio'><cid auto='yes'/></vsock></devices>")
    src = tmp_path / "d.xml"
    src.write_text(xml)
    proc = run_vm("xml", "v", "--domain-xml", str(src), "--vsock", "kernel",
                  run_dir=tmp_path, check=False)
    assert proc.returncode == 1
    assert "already has a <vsock>" in proc.stderr and proc.stderr.count("\n") == 1


def test_q35_slot_avoids_ich9():
    root = domain.parse(BASE_XML.format(name="q", memory_backing="")
                        .replace("machine='pc'", "machine='q35'")
                        .replace("pci-root", "pcie-root")
                        .replace("slot='0x1f'", "slot='0x1e'"))
    assert domain.free_root_slot(root) == ("pcie.0", 0x1d)


# ---- command line ------------------------------------------------------------

@pytest.mark.parametrize("args,message", [
    (["xml", "bad/name"], "not supported"),
    (["xml", "ok", "--window-size", "3M"], "power of two"),
    (["xml", "ok", "--window-size", "lots"], "bad window size"),
    (["qemu-args", "ok", "--cid", "2", "--dry-run"], "CID"),
    (["frobnicate"], "invalid choice"),
    (["xml", "ok", "--remove"], "--remove needs --domain-xml"),
    (["migrate", "ok", "--from", "/tmp/q"], "required: --to, --uri"),
    (["--run-dir", "/tmp/" + "d" * 90, "xml", "ok", "--vsock", "vhost-user"], "shorter --run-dir"),
])
def test_usage_errors_exit_2_with_one_line(tmp_path, args, message):
    proc = run_vm(*args, run_dir=tmp_path, check=False)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert proc.stderr.count("\n") == 1 and proc.stderr.startswith("pvgpu-vm: ")


def test_qemu_args_vhost_user(run_dir, shm_name):
    """DESIGN §7's arguments; the window file and registry entry exist after."""
    argv = json.loads(run_vm("qemu-args", shm_name, "--vsock", "vhost-user", "--ram", "512M",
                             "--gpu", "1", "--format", "json", run_dir=run_dir).stdout)
    sock = f"{run_dir}/vsock/{shm_name}/vhost.sock"
    joined = " ".join(argv)
    assert "-m 512M" in joined
    assert "-object memory-backend-memfd,id=pvgpu-ram,size=512M,share=on" in joined
    assert "-numa node,memdev=pvgpu-ram" in joined
    assert f"-chardev socket,id=pvgpu-vsock,path={sock}" in joined
    assert "-device vhost-user-vsock-pci,chardev=pvgpu-vsock" in joined
    assert (f"-object memory-backend-file,id=pvgpu-win,mem-path=/dev/shm/pvgpu-{shm_name},"
            "size=256M,share=on") in joined
    # master=on: QEMU blocks migrating an ivshmem device in peer mode.
    assert "-device ivshmem-plain,memdev=pvgpu-win,id=pvgpu-ivshmem,master=on" in joined
    # The vsock device last: a migration's destination leaves it out
    # without moving the window to another PCI slot.
    assert argv[-1].startswith("vhost-user-vsock-pci,")

    # A migration's destination: the same, less the vsock, waiting at URI.
    dest = json.loads(run_vm("qemu-args", shm_name, "--vsock", "vhost-user", "--ram", "512M",
                             "--gpu", "1", "--format", "json", "--incoming", "unix:/tmp/m",
                             run_dir=run_dir).stdout)
    assert dest == [a for a in argv[:-4]] + ["-incoming", "unix:/tmp/m"]

    entry = registry.Registry(str(run_dir / "vms")).load(shm_name)
    assert entry.gpu == 1 and entry.vsock.socket == sock
    window.check_window(entry.window_path, entry.layout)

    # Again: same CID, same window, accepted as it is.
    again = json.loads(run_vm("qemu-args", shm_name, "--vsock", "vhost-user", "--ram", "512M",
                              "--format", "json", run_dir=run_dir).stdout)
    assert again == argv

    # A different size for the same VM: the existing file disagrees.
    proc = run_vm("qemu-args", shm_name, "--vsock", "vhost-user", "--window-size", "64M",
                  run_dir=run_dir, check=False)
    assert proc.returncode == 1 and "size disagrees" in proc.stderr
    assert proc.stderr.count("\n") == 1

    run_vm("release", shm_name, run_dir=run_dir)
    assert not os.path.exists(f"/dev/shm/pvgpu-{shm_name}")
    assert registry.Registry(str(run_dir / "vms")).load(shm_name) is None


def test_qemu_args_kernel_vsock(run_dir, shm_name):
    argv = run_vm("qemu-args", shm_name, "--vsock", "kernel", "--window-size", "16M",
                  "--cid", "42", "--format", "lines", run_dir=run_dir).stdout.split("\n")
    assert "vhost-vsock-pci,guest-cid=42,id=pvgpu-vsock-dev" in argv
    assert "memory-backend-memfd" not in " ".join(argv)
    assert any(a.startswith("memory-backend-file,") and "size=16M" in a for a in argv)
    # Another VM may not take CID 42.
    other = shm_name + "b"
    proc = run_vm("qemu-args", other, "--vsock", "kernel", "--cid", "42", "--dry-run",
                  run_dir=run_dir, check=False)
    assert proc.returncode == 1 and f"belongs to VM {shm_name}" in proc.stderr
    run_vm("release", shm_name, run_dir=run_dir)


def test_qemu_args_refuse_foreign_window(run_dir, shm_name):
    with open(f"/dev/shm/pvgpu-{shm_name}", "wb") as f:
        f.truncate(256 * MIB)
    proc = run_vm("qemu-args", shm_name, run_dir=run_dir, check=False)
    assert proc.returncode == 1
    assert "not a pvgpu window" in proc.stderr and proc.stderr.count("\n") == 1


# ---- QEMU itself -------------------------------------------------------------

def qmp(path, *commands, timeout=20.0):
    """Send QMP commands (name, args) over a Unix socket; return their results."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            s = socket.socket(socket.AF_UNIX)
            s.connect(str(path))
            break
        except OSError:
            s.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
    f = s.makefile("rw")

    def call(name, args=None):
        f.write(json.dumps({"execute": name, **({"arguments": args} if args else {})}) + "\n")
        f.flush()
        while True:
            reply = json.loads(f.readline())
            if "return" in reply or "error" in reply:
                return reply

    json.loads(f.readline())  # greeting
    call("qmp_capabilities")
    results = [call(name, args) for name, args in commands]
    s.close()
    return results


def fake_vhost_device_vsock(path):
    """A stand-in that creates its --vm socket= and waits: the supervisor
    only cares that it runs, makes its socket and may die."""
    path.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import socket, sys, time
        opts = dict(kv.split("=", 1) for kv in sys.argv[2].split(","))
        s = socket.socket(socket.AF_UNIX)
        s.bind(opts["socket"])
        s.listen(1)
        time.sleep(3600)
        """))
    path.chmod(0o755)
    return path


def wait_for(predicate, timeout=10.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}")


def read_pid(path):
    try:
        return int(Path(path).read_text())
    except (FileNotFoundError, ValueError):
        return None


def test_supervisor_restarts_and_refuses_second(tmp_path, run_dir, shm_name):
    run_vm("qemu-args", shm_name, "--vsock", "vhost-user", run_dir=run_dir)
    fake = fake_vhost_device_vsock(tmp_path / "fake-vdv")
    log = open(tmp_path / "supervise.log", "w+")
    sup = subprocess.Popen([str(PVGPU_VM), "--run-dir", str(run_dir), "supervise", shm_name,
                            "--vhost-device-vsock", str(fake)], stderr=log)
    try:
        vdir = run_dir / "vsock" / shm_name
        pidfile = vdir / "vhost-device-vsock.pid"
        first = wait_for(lambda: read_pid(pidfile), what="the first vhost-device-vsock")
        # The child makes the socket; the supervisor then gives it to QEMU's
        # user (0660): wait for both, not just the first.
        wait_for(lambda: (vdir / "vhost.sock").exists() and
                 (vdir / "vhost.sock").stat().st_mode & 0o777 == 0o660,
                 what="its socket, mode 0660")

        second = run_vm("supervise", shm_name, "--vhost-device-vsock", str(fake),
                        run_dir=run_dir, check=False)
        assert second.returncode == 1 and "already supervised" in second.stderr

        os.kill(first, signal.SIGKILL)
        restarted = wait_for(lambda: (read_pid(pidfile) or first) != first and read_pid(pidfile),
                             what="a restarted vhost-device-vsock")
        assert restarted != first
        log.seek(0)
        deaths = [line for line in log.read().splitlines() if "died" in line]
        assert len(deaths) == 1 and f"pid {first}" in deaths[0] and "SIGKILL" in deaths[0]
    finally:
        sup.send_signal(signal.SIGTERM)
        assert sup.wait(timeout=15) == 0
    assert not (run_dir / "vsock" / shm_name / "vhost.sock").exists()
    assert not pidfile.exists()
    with pytest.raises(ProcessLookupError):
        os.kill(restarted, 0)
    run_vm("release", shm_name, run_dir=run_dir)


def test_qemu_starts_with_generated_args(tmp_path, run_dir, shm_name):
    """QEMU 7.2 accepts the arguments: the guest has an ivshmem device whose
    BAR2 is the window file, and a vhost-user-vsock device served by a
    supervised vhost-device-vsock."""
    qemu = shutil.which("qemu-system-x86_64")
    if not qemu:
        pytest.skip("qemu-system-x86_64 missing: apt-get install qemu-system-x86")
    try:
        vdv = supervise.find_binary()
    except Failure as e:
        pytest.skip(str(e))
    argv = json.loads(run_vm("qemu-args", shm_name, "--vsock", "vhost-user", "--ram", "256M",
                             "--window-size", "16M", "--format", "json",
                             run_dir=run_dir).stdout)
    sup = subprocess.Popen([str(PVGPU_VM), "--run-dir", str(run_dir), "supervise", shm_name,
                            "--vhost-device-vsock", vdv], stderr=subprocess.DEVNULL)
    qmp_path = run_dir / "qmp.sock"
    vm = None
    try:
        wait_for(lambda: (run_dir / "vsock" / shm_name / "vhost.sock").exists(),
                 what="vhost-device-vsock's socket")
        vm = subprocess.Popen([qemu, "-accel", "tcg", "-S", "-display", "none",
                               "-nodefaults", "-qmp", f"unix:{qmp_path},server=on,wait=off",
                               *argv], stderr=subprocess.PIPE, text=True)
        wait_for(lambda: qmp_path.exists() or vm.poll() is not None, what="QEMU's QMP socket")
        if vm.poll() is not None:
            pytest.fail(f"QEMU refused the arguments: {vm.stderr.read()}")
        (pci,) = qmp(qmp_path, ("query-pci", None))
        devices = [(d["id"]["vendor"], d["id"]["device"], d.get("qdev_id"))
                   for bus in pci["return"] for d in bus["devices"]]
        assert (0x1AF4, 0x1110, "pvgpu-ivshmem") in devices
        assert (0x1AF4, 0x1053, "pvgpu-vsock-dev") in devices
        maps = Path(f"/proc/{vm.pid}/maps").read_text()
        assert f"/dev/shm/pvgpu-{shm_name}" in maps
    finally:
        if vm:
            vm.kill()
            vm.wait()
        sup.send_signal(signal.SIGTERM)
        sup.wait(timeout=15)
        run_vm("release", shm_name, run_dir=run_dir, check=False)
