"""Inside a real VM: a QEMU 7.2 guest (Debian's kernel, TCG) with virtio-vsock
through vhost-device-vsock runs the unmodified CUDA test programs through
pvgpu against `pvgpud --executor sim` on the host (issue 5, acceptance).

The guest connects to CID 2 port 7100; vhost-device-vsock turns that into a
connection to the Unix socket `<uds-path>_7100` on the host (DESIGN §7),
where pvgpud listens.  The guest carries only ld.so, libc, the shim and the
programs: nothing in them was rebuilt for the VM.
"""
import importlib.util
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent
BUILD = REPO / os.environ.get("PVGPU_BUILD", "build")
BOOT_TIMEOUT = 240.0
GUEST_CID = 4
PORT = 7100
PROGRAMS = ["devices", "memory", "memset", "streams", "threads", "errors",
            "meminfo"]
KERNEL_PROGRAMS = ["vecadd", "reduce", "constant", "launchloop"]

pytestmark = pytest.mark.vm


def load_pvgpuvm():
    spec = importlib.util.spec_from_file_location(
        "pvgpuvm", REPO / "scripts" / "vm" / "pvgpuvm.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


vm = load_pvgpuvm()



@pytest.fixture(scope="module")
def kernel():
    try:
        return vm.kernel_dir()
    except Exception as e:  # noqa: BLE001 - any reason is the skip's reason
        pytest.skip(f"no Debian guest kernel: {e}")


def guest_files():
    """(host, guest) pairs: the programs, the libraries they load as the
    host's loader resolves them, and the shim in place of libcudart."""
    files = [(str(BUILD / "lib" / "libcudart.so.13"), "/pvgpu/lib/libcudart.so.13")]
    binaries = [BUILD / "tests" / n for n in PROGRAMS] + \
        [BUILD / "tests" / "kernels" / n for n in KERNEL_PROGRAMS]
    for binary in binaries:
        if not binary.exists():
            pytest.fail(f"{binary} is missing (run make)")
        files.append((str(binary), f"/pvgpu/bin/{binary.name}"))
    libs = {}
    for binary in binaries + [BUILD / "lib" / "libcudart.so.13"]:
        libs.update({guest: host for host, guest in vm.guest_libraries(binary)})
    files += [(host, guest) for guest, host in sorted(libs.items())]
    return files


def guest_script(programs):
    lines = ["export LD_LIBRARY_PATH=/pvgpu/lib", "export PVGPU_DEBUG=1",
             f"export PVGPU_DEVICES=vsock://2:{PORT}",
             "failed=0"]
    for name in programs:
        lines += [f"/pvgpu/bin/{name} > /tmp/{name}.out 2>/tmp/{name}.err; rc=$?",
                  f"echo \"result {name} rc=$rc last=$(tail -n 1 /tmp/{name}.out)\"",
                  f"[ $rc = 0 ] || {{ failed=1; tail -n 20 /tmp/{name}.out /tmp/{name}.err; }}"]
    lines.append("exit $failed")
    return "\n".join(lines) + "\n"


class Host:
    """pvgpud (sim) behind one vhost-device-vsock, for one guest."""

    def __init__(self, start_pvgpud, tmp, kernel):
        binary = vm.vhost_device_vsock()
        if not binary:
            pytest.skip("no vhost-device-vsock (cargo install vhost-device-vsock@0.3.0)")
        self.tmp = tmp
        self.uds = tmp / "vm.vsock"
        self.vhost_sock = tmp / "vhost.sock"
        twins = BUILD / "tests" / "sim-twins" / "libtest-twins.so"
        self.daemon = start_pvgpud(
            "sim", extra_args=["--listen", f"unix://{self.uds}_{PORT}"],
            env={"PVGPU_SIM_TWINS": str(twins)})
        self.vhost = subprocess.Popen(
            [binary, "--vm",
             f"guest-cid={GUEST_CID},socket={self.vhost_sock},uds-path={self.uds}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while not self.vhost_sock.exists():
            assert time.monotonic() < deadline, "vhost-device-vsock did not start"
            assert self.vhost.poll() is None, "vhost-device-vsock exited"
            time.sleep(0.05)
        self.kdir, self.kver = kernel

    def boot(self, programs, memory="1G"):
        initrd = self.tmp / "initrd.cpio"
        vm.build_initramfs(initrd, guest_script(programs), files=guest_files(),
                           modules=vm.VSOCK_MODULES, kdir=self.kdir, kver=self.kver)
        extra = ["-object", f"memory-backend-memfd,id=mem,size={memory},share=on",
                 "-numa", "node,memdev=mem",
                 "-chardev", f"socket,id=vs,path={self.vhost_sock}",
                 "-device", "vhost-user-vsock-pci,chardev=vs"]
        cmd = vm.qemu_command(initrd, kernel=self.kdir / "boot" / f"vmlinuz-{self.kver}",
                              memory=memory, extra=extra)
        return vm.run(cmd, BOOT_TIMEOUT, log=self.tmp / "console.log", echo=False)

    def close(self):
        self.vhost.terminate()
        try:
            self.vhost.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.vhost.kill()


def test_programs_run_unmodified_inside_a_vm(start_pvgpud, tmp_path, kernel):
    if not shutil.which("qemu-system-x86_64"):
        pytest.skip("no qemu-system-x86_64 (apt-get install qemu-system-x86)")
    host = Host(start_pvgpud, tmp_path, kernel)
    try:
        status, console = host.boot(PROGRAMS + KERNEL_PROGRAMS)
    finally:
        host.close()
    results = [line for line in console.splitlines() if line.startswith("result ")]
    assert len(results) == len(PROGRAMS + KERNEL_PROGRAMS), console[-4000:]
    for line in results:
        assert "rc=0 last=PASS" in line, f"{line}\n{console[-4000:]}\n{host.daemon.log()[-3000:]}"
    assert status == 0, console[-4000:]
    log = host.daemon.log()
    # Every program was a session of its own, opened and closed cleanly.
    assert log.count("session") and "worker killed" not in log
