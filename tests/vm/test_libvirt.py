"""pvgpu-vm attach/detach against a real libvirt 9.0 daemon started by the test.

libvirtd runs as root (qemu:///system: QEMU as libvirt-qemu, the case an
operator has) with its own configuration and its client socket in a
temporary directory; virtlogd, which the QEMU driver needs for the guest's
console log, is started as well when none runs.  Without systemd both are
run directly.  The QEMU driver's state directories (/run/libvirt/qemu,
/etc/libvirt/qemu, /var/lib/libvirt/qemu) are fixed for a privileged
daemon, so the test's domain has a name of its own and is undefined at the
end.  Where a system libvirtd already runs, the test uses it instead.

The domain is type 'qemu' (TCG; nested KVM does not boot here, DESIGN §7)
and has no disk: the test checks what libvirt and QEMU make of the
attached vGPU (QEMU runs with the ivshmem device, its BAR2 is the window
file, vhost-user-vsock is connected), not a guest.

If libvirtd is installed but cannot run, the test fails with the daemon's
own words: an operator needs the exact reason, not a quiet skip.
"""

import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from vm_script import vm

REPO = Path(__file__).resolve().parents[2]
PVGPU_VM = REPO / "qemu-device" / "pvgpu-vm"
QEMU_NS = "http://libvirt.org/schemas/domain/qemu/1.0"
MIB = 1 << 20

pytestmark = pytest.mark.vm

DOMAIN_XML = """\
<domain type='qemu'>
  <name>{name}</name>
  <memory unit='MiB'>256</memory>
  <vcpu>1</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type></os>
  <features><acpi/></features>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <serial type='pty'/>
  </devices>
</domain>
"""


def need(binary, package):
    path = shutil.which(binary) or (f"/usr/sbin/{binary}" if os.path.exists(f"/usr/sbin/{binary}") else None)
    if not path:
        pytest.skip(f"{binary} is not installed (apt-get install {package}; "
                    "scripts/install-deps.sh installs it)")
    return path


def tail(path, lines=15):
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


def listening(path):
    """Whether a daemon answers on the unix socket `path`.  A socket file
    alone proves nothing: a daemon killed without its cleanup (a CI
    machine's image, an earlier run's SIGKILL) leaves it behind, and
    libvirt then fails every start with "Connection refused"."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        try:
            s.connect(path)
            return True
        except OSError:
            return False


def stop(proc):
    if proc and proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def kvm_for_qemu_user(workdir, command):
    """Where /dev/kvm is root's alone (no udev here), run `command` in a
    private mount namespace whose /dev/kvm is 0660 root:kvm, as Debian's
    udev rules make it on a real host.

    libvirt 9.0 checks whether the QEMU user may open /dev/kvm and, when it
    may not while its QEMU probe (as root) found KVM, it throws its
    capability cache away and probes every QEMU binary again on every API
    call that needs them: "KVM was enabled when probing ..., but it is not
    available now".  That costs 30 s per define on this machine and a
    5-minute test.  Nothing outside the namespace changes; the domain is
    type 'qemu' (TCG) either way."""
    try:
        st = os.stat("/dev/kvm")
    except FileNotFoundError:
        return command
    if st.st_mode & 0o066 or not shutil.which("unshare") or not shutil.which("mount"):
        return command
    node = workdir / "kvm"
    script = (f"mknod -m 0660 {node} c {os.major(st.st_rdev)} {os.minor(st.st_rdev)} && "
              f"chgrp kvm {node} && mount --bind {node} /dev/kvm && exec \"$@\"")
    return ["unshare", "--mount", "--propagation", "private", "--",
            "sh", "-c", script, "sh", *command]


class Libvirt:
    """A libvirtd the test talks to, and how to reach it."""

    def __init__(self, uri, workdir):
        self.uri = uri
        self.workdir = workdir

    def virsh(self, *args, check=True):
        proc = subprocess.run(["virsh", "-c", self.uri, *args],
                              capture_output=True, text=True, timeout=120)
        if check and proc.returncode != 0:
            pytest.fail(f"virsh {' '.join(args)}: {proc.stderr.strip()}")
        return proc.stdout


@pytest.fixture(scope="module")
def libvirt():
    need("virsh", "libvirt-clients")
    libvirtd = need("libvirtd", "libvirt-daemon-system")
    virtlogd = need("virtlogd", "libvirt-daemon-system")
    need("qemu-system-x86_64", "qemu-system-x86")
    if not os.path.exists("/usr/bin/python3") or subprocess.run(
            ["/usr/bin/python3", "-c", "import libvirt"], capture_output=True).returncode:
        pytest.skip("python3-libvirt is not installed for /usr/bin/python3 (apt-get install "
                    "python3-libvirt; scripts/install-deps.sh installs it)")
    if os.geteuid() != 0:
        pytest.fail("libvirtd cannot run here: qemu:///system needs root and the tests run "
                    f"as uid {os.geteuid()}")

    workdir = Path(tempfile.mkdtemp(prefix="pvlv", dir="/tmp"))
    procs = []
    try:
        if listening("/run/libvirt/libvirt-sock"):
            # A system daemon runs: a second privileged one would fight it
            # over /run/libvirt/qemu; use the one there is.
            yield Libvirt("qemu:///system", workdir)
            return
        if not listening("/run/libvirt/virtlogd-sock"):
            # A stale socket would keep our virtlogd from binding its own.
            for stale in ("/run/libvirt/virtlogd-sock", "/run/libvirt/virtlogd-admin-sock"):
                try:
                    os.unlink(stale)
                except FileNotFoundError:
                    pass
            (workdir / "virtlogd.conf").write_text(
                f'log_outputs = "3:file:{workdir}/virtlogd.log"\n')
            procs.append(subprocess.Popen(
                [virtlogd, "-f", str(workdir / "virtlogd.conf"), "-p", str(workdir / "virtlogd.pid")],
                stdout=subprocess.DEVNULL, stderr=open(workdir / "virtlogd.err", "w")))
        (workdir / "libvirtd.conf").write_text(
            f'unix_sock_dir = "{workdir}"\n'
            'unix_sock_rw_perms = "0700"\n'
            'unix_sock_ro_perms = "0700"\n'
            'auth_unix_rw = "none"\n'
            'auth_unix_ro = "none"\n'
            f'log_outputs = "3:file:{workdir}/libvirtd.log"\n')
        command = [libvirtd, "-f", str(workdir / "libvirtd.conf"),
                   "-p", str(workdir / "libvirtd.pid")]
        daemon = subprocess.Popen(kvm_for_qemu_user(workdir, command),
                                  stdout=subprocess.DEVNULL,
                                  stderr=open(workdir / "libvirtd.err", "w"))
        procs.append(daemon)
        uri = f"qemu:///system?socket={workdir}/libvirt-sock"
        deadline = time.monotonic() + 30
        while True:
            if daemon.poll() is not None:
                pytest.fail(f"libvirtd cannot run here: it exited with status {daemon.returncode}: "
                            f"{tail(workdir / 'libvirtd.err')} {tail(workdir / 'libvirtd.log')}")
            probe = subprocess.run(["virsh", "-c", uri, "version"], capture_output=True, text=True)
            if probe.returncode == 0:
                break
            if time.monotonic() > deadline:
                pytest.fail(f"libvirtd cannot run here: no answer in 30 s: {probe.stderr.strip()} "
                            f"{tail(workdir / 'libvirtd.log')}")
            time.sleep(0.2)
        yield Libvirt(uri, workdir)
    finally:
        for proc in reversed(procs):
            stop(proc)
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def domain(libvirt):
    """A defined, stopped domain, undefined afterwards (with whatever pvgpu
    left of it)."""
    name = f"pvgpu-lv-{os.getpid()}"
    run_dir = Path(tempfile.mkdtemp(prefix="pvrun", dir="/tmp"))
    run_dir.chmod(0o755)   # QEMU, as libvirt-qemu, must reach the vhost-user socket
    path = run_dir / "domain.xml"
    path.write_text(DOMAIN_XML.format(name=name))
    libvirt.virsh("define", str(path))
    yield name, run_dir
    libvirt.virsh("destroy", name, check=False)
    run_pvgpu_vm(libvirt, run_dir, "detach", name, check=False)
    libvirt.virsh("undefine", name, check=False)
    try:
        os.unlink(f"/dev/shm/pvgpu-{name}")
    except FileNotFoundError:
        pass
    shutil.rmtree(run_dir, ignore_errors=True)


def run_pvgpu_vm(libvirt, run_dir, *args, check=True):
    proc = subprocess.run([str(PVGPU_VM), "--run-dir", str(run_dir), *args, "-c", libvirt.uri],
                          capture_output=True, text=True, timeout=120)
    if check and proc.returncode != 0:
        pytest.fail(f"pvgpu-vm {' '.join(args)} exited {proc.returncode}: {proc.stderr}")
    return proc


def start_supervisor(run_dir, name):
    """`pvgpu-vm supervise NAME`, once its vhost-device-vsock has made the
    socket QEMU connects to; the caller stops it."""
    supervisor = subprocess.Popen([str(PVGPU_VM), "--run-dir", str(run_dir), "supervise", name],
                                  stderr=open(run_dir / "supervise.log", "w"))
    sock = run_dir / "vsock" / name / "vhost.sock"
    deadline = time.monotonic() + 15
    while not sock.exists():
        if supervisor.poll() is not None or time.monotonic() > deadline:
            stop(supervisor)
            pytest.fail(f"vhost-device-vsock made no socket: {tail(run_dir / 'supervise.log')}")
        time.sleep(0.1)
    return supervisor


def inactive_xml(libvirt, name):
    return libvirt.virsh("dumpxml", "--inactive", name)


def canonical(xml_text):
    return ET.canonicalize(xml_text, strip_text=True)


def qemu_pid(name):
    pidfile = Path(f"/run/libvirt/qemu/{name}.pid")
    return int(pidfile.read_text().strip())


def one_line_failure(proc, *words):
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    for word in words:
        assert word in proc.stderr


def test_attach_start_detach_vhost_user(libvirt, domain):
    name, run_dir = domain
    before = inactive_xml(libvirt, name)

    run_pvgpu_vm(libvirt, run_dir, "attach", name, "--memory", "1G", "--gpu", "0",
                 "--vsock", "vhost-user")
    xml = inactive_xml(libvirt, name)
    root = ET.fromstring(xml)
    shmem = root.find("devices/shmem")
    assert shmem is not None and shmem.get("name") == f"pvgpu-{name}"
    assert shmem.find("model").get("type") == "ivshmem-plain"
    assert shmem.get("role") == "master"    # migratable: QEMU's master=on
    assert shmem.find("size").text == "256"
    mb = root.find("memoryBacking")
    assert mb.find("source").get("type") == "memfd" and mb.find("access").get("mode") == "shared"
    args = [a.get("value") for a in root.iter(f"{{{QEMU_NS}}}arg")]
    assert any("vhost-user-vsock-pci" in a for a in args)

    window = Path(f"/dev/shm/pvgpu-{name}")
    st = window.stat()
    assert st.st_size == 256 * MIB
    assert vm.read_window_header(window)["magic"] == vm.WINDOW_MAGIC
    assert st.st_mode & 0o777 == 0o600
    caps = libvirt.virsh("capabilities")
    label = re.search(r"<baselabel type='qemu'>\+(\d+):\+(\d+)</baselabel>", caps)
    if label:
        assert (st.st_uid, st.st_gid) == (int(label.group(1)), int(label.group(2)))

    # Same settings again: nothing to do, even while running (below).
    assert "already attached" in run_pvgpu_vm(libvirt, run_dir, "attach", name, "--memory", "1G",
                                              "--vsock", "vhost-user").stdout

    supervisor = start_supervisor(run_dir, name)
    try:

        libvirt.virsh("start", name)
        pid = qemu_pid(name)
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        assert "ivshmem-plain" in cmdline and "vhost-user-vsock-pci" in cmdline
        assert f"/dev/shm/pvgpu-{name}" in Path(f"/proc/{pid}/maps").read_text()
        pci = libvirt.virsh("qemu-monitor-command", name, "--hmp", "info pci")
        assert "1af4:1110" in pci, pci      # ivshmem
        assert "1af4:1053" in pci, pci      # virtio-vsock (modern)

        assert "already attached" in run_pvgpu_vm(libvirt, run_dir, "attach", name, "--memory",
                                                  "1G", "--vsock", "vhost-user").stdout
        one_line_failure(run_pvgpu_vm(libvirt, run_dir, "attach", name, "--memory", "2G",
                                      "--vsock", "vhost-user", check=False),
                         "is running", "restart")
        one_line_failure(run_pvgpu_vm(libvirt, run_dir, "detach", name, check=False),
                         "is running", "restart")

        libvirt.virsh("destroy", name)
        assert window.exists(), "the window survives the domain stopping"

        run_pvgpu_vm(libvirt, run_dir, "detach", name)
        assert supervisor.wait(timeout=20) == 0, "detach stops the supervisor"
    finally:
        stop(supervisor)
    assert canonical(inactive_xml(libvirt, name)) == canonical(before)
    assert not window.exists()
    assert not (run_dir / "vms" / f"{name}.conf").exists()
    assert "no vGPU attached" in run_pvgpu_vm(libvirt, run_dir, "detach", name).stdout


def test_attach_detach_kernel_vsock(libvirt, domain):
    """The kernel-vsock XML is accepted by libvirt; starting it needs
    /dev/vhost-vsock, which only some hosts have."""
    name, run_dir = domain
    before = inactive_xml(libvirt, name)
    run_pvgpu_vm(libvirt, run_dir, "attach", name, "--vsock", "kernel", "--window-size", "64M")
    root = ET.fromstring(inactive_xml(libvirt, name))
    vsock = root.find("devices/vsock")
    assert vsock is not None and vsock.get("model") == "virtio"
    assert vsock.find("cid").get("auto") == "no"
    assert root.find("devices/shmem/size").text == "64"
    assert root.find("memoryBacking") is None
    if os.path.exists("/dev/vhost-vsock"):
        libvirt.virsh("start", name)
        pid = qemu_pid(name)
        assert f"/dev/shm/pvgpu-{name}" in Path(f"/proc/{pid}/maps").read_text()
        libvirt.virsh("destroy", name)
    run_pvgpu_vm(libvirt, run_dir, "detach", name)
    assert canonical(inactive_xml(libvirt, name)) == canonical(before)


def test_attach_unknown_domain(libvirt):
    run_dir = Path(tempfile.mkdtemp(prefix="pvrun", dir="/tmp"))
    try:
        proc = run_pvgpu_vm(libvirt, run_dir, "attach", "no-such-domain-pvgpu", check=False)
        one_line_failure(proc, "no libvirt domain")
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


GUEST_XML = """\
<domain type='qemu'>
  <name>{name}</name>
  <memory unit='MiB'>1024</memory>
  <vcpu>1</vcpu>
  <os>
    <type arch='x86_64' machine='pc'>hvm</type>
    <kernel>{kernel}</kernel>
    <initrd>{initrd}</initrd>
    <cmdline>{cmdline}</cmdline>
  </os>
  <features><acpi/></features>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>destroy</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <emulator>/usr/bin/qemu-system-x86_64</emulator>
    <serial type='file'><source path='{console}'/></serial>
  </devices>
</domain>
"""
GUEST_PROGRAMS = ["memory", "streams", "meminfo", "vecadd"]


def test_guest_runs_in_a_domain_libvirt_started(libvirt, start_pvgpud):
    """The whole operator path: `pvgpuctl attach` gives a defined domain a
    vGPU through the libvirt API, `pvgpu-vm supervise` runs its
    vhost-device-vsock, libvirt starts it (QEMU as libvirt-qemu), and the
    CUDA programs in the guest run through pvgpu with pvgpu.ko and the
    window, against pvgpud --registry."""
    if not vm.vhost_device_vsock():
        pytest.skip("no vhost-device-vsock (cargo install vhost-device-vsock@0.3.0)")
    try:
        kdir, kver = vm.kernel_dir()
    except Exception as e:  # noqa: BLE001 - any reason is the skip's reason
        pytest.skip(f"no Debian guest kernel: {e}")
    build = REPO / os.environ.get("PVGPU_BUILD", "build")
    ko = vm.guest_driver(kver, build / "guest-driver")
    name = f"pvgpu-lvg-{os.getpid()}"
    run_dir = Path(tempfile.mkdtemp(prefix="pvrun", dir="/tmp"))
    run_dir.chmod(0o755)   # QEMU, as libvirt-qemu, reads the kernel and the sockets
    env = dict(os.environ, PVGPU_RUN_DIR=str(run_dir))
    pvgpuctl = build / "bin" / "pvgpuctl"
    supervisor = None
    try:
        kernel = run_dir / "vmlinuz"
        shutil.copy(kdir / "boot" / f"vmlinuz-{kver}", kernel)
        initrd = run_dir / "initrd.cpio"
        binaries = [build / "tests" / ("kernels" if p == "vecadd" else "") / p
                    for p in GUEST_PROGRAMS]
        vm.build_initramfs(initrd, vm.program_script(GUEST_PROGRAMS),
                           files=vm.program_files(build, binaries, ko),
                           modules=vm.VSOCK_MODULES, kdir=kdir, kver=kver)
        console = run_dir / "console.log"
        (run_dir / "domain.xml").write_text(GUEST_XML.format(
            name=name, kernel=kernel, initrd=initrd, console=console,
            cmdline=vm.GUEST_CMDLINE))
        libvirt.virsh("define", str(run_dir / "domain.xml"))

        daemon = start_pvgpud("sim", extra_args=["--registry", str(run_dir / "vms")],
                              env={"PVGPU_SIM_TWINS": str(build / "tests" / "sim-twins" /
                                                          "libtest-twins.so")})
        proc = subprocess.run([str(pvgpuctl), "attach", name, "--memory", "2G",
                               "--vsock", "vhost-user", "-c", libvirt.uri],
                              capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert f"attached: {name}" in proc.stdout
        supervisor = start_supervisor(run_dir, name)

        libvirt.virsh("start", name)
        deadline = time.monotonic() + 300
        while libvirt.virsh("domstate", name).strip() != "shut off":
            assert time.monotonic() < deadline, tail(console, 40)
            time.sleep(1)
        text = console.read_text(errors="replace").replace("\r\n", "\n")
        results = vm.program_results(text)
        assert sorted(results) == sorted(GUEST_PROGRAMS), text[-4000:]
        for line in results.values():
            assert "rc=0" in line and "last=PASS" in line and "window=yes" in line, \
                f"{line}\n{text[-3000:]}\n{daemon.log()[-2000:]}"
        assert f"{vm.EXIT_MARK}0" in text
        assert daemon.log().count(f"start: vm {name} via vhost-user") == len(GUEST_PROGRAMS)

        proc = subprocess.run([str(pvgpuctl), "detach", name, "-c", libvirt.uri],
                              capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 0 and f"detached: {name}" in proc.stdout, proc.stderr
    finally:
        libvirt.virsh("destroy", name, check=False)
        subprocess.run([str(pvgpuctl), "detach", name, "-c", libvirt.uri],
                       capture_output=True, env=env, timeout=120)
        libvirt.virsh("undefine", name, check=False)
        stop(supervisor)
        try:
            os.unlink(f"/dev/shm/pvgpu-{name}")
        except FileNotFoundError:
            pass
        shutil.rmtree(run_dir, ignore_errors=True)
