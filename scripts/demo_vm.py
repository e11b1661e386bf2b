#!/usr/bin/env python3
"""make demo: the main job, end to end, inside a virtual machine.

Starts pvgpud (the cuda executor where a GPU answers, the simulated device
otherwise, and says which) reading a VM registry, gives a guest a vGPU with
qemu-device (`pvgpu-vm qemu-args`: the shared window and the registry
entry; `pvgpu-vm supervise`: its vhost-device-vsock), boots it (Debian's
kernel and a busybox initramfs carrying pvgpu.ko, the guest library and
pvgpu-synth; KVM when it works, TCG otherwise), runs pvgpu-synth inside the
guest through pvgpu (control over virtio-vsock, bulk data through
/dev/pvgpu0), prints its table, and shuts everything down.  Nothing is left
running, whatever happens.

    scripts/demo_vm.py [--build DIR]
Exit codes: 0 success, 1 failure (one line on stderr says why), 3 no VM can
be made here (no qemu, guest kernel or vhost-device-vsock): `make demo` then
runs the same job as a local process instead (scripts/demo.sh).
"""
import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PORT = 7100


def load_pvgpuvm():
    spec = importlib.util.spec_from_file_location(
        "pvgpuvm", REPO / "scripts" / "vm" / "pvgpuvm.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def gpu_answers():
    """True when an NVIDIA driver loads and cuInit finds a device."""
    try:
        import ctypes
        return ctypes.CDLL("libcuda.so.1").cuInit(0) == 0
    except OSError:
        return False


def wait_for(path, proc, what, seconds=10):
    deadline = time.monotonic() + seconds
    while not Path(path).exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start")
        time.sleep(0.05)


def kvm_boots(vm, kdir, kver, tmp):
    """Whether a guest really boots under KVM here: /dev/kvm may exist where
    nested virtualisation cannot run a guest (DESIGN §7), so try one, briefly."""
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return False
    initrd = tmp / "probe.cpio"
    vm.build_initramfs(initrd, "exit 0\n", kdir=kdir, kver=kver)
    cmd = vm.qemu_command(initrd, kernel=kdir / "boot" / f"vmlinuz-{kver}",
                          memory="256M", accel="kvm")
    status, _ = vm.run(cmd, 20.0, echo=False)
    return status == 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.environ.get("BUILD", "build"))
    args = ap.parse_args()
    build = (REPO / args.build).resolve()
    vm = load_pvgpuvm()
    vhost = vm.vhost_device_vsock()
    if not vhost or not shutil.which("qemu-system-x86_64"):
        sys.stderr.write("demo: no qemu-system-x86_64 or vhost-device-vsock "
                         "here: no guest can be booted\n")
        return 3
    try:
        vm.kernel_dir()
    except Exception as e:  # noqa: BLE001 - the reason is the message
        sys.stderr.write(f"demo: no guest kernel: {e}\n")
        return 3

    executor = "cuda" if gpu_answers() else "sim"
    if executor == "cuda":
        print("demo: an NVIDIA GPU answers: pvgpud uses it (executor cuda)")
    else:
        print("demo: no NVIDIA GPU on this machine: pvgpud uses the simulated "
              "device (executor sim), a test fixture whose timings say nothing "
              "about a GPU")
    procs = []
    attached = None
    tmp = Path(tempfile.mkdtemp(prefix="pvdemo", dir="/tmp"))  # short: socket paths
    try:
        kdir, kver = vm.kernel_dir()
        accel = "kvm" if kvm_boots(vm, kdir, kver, tmp) else "tcg"
        print(f"demo: the guest runs under {accel.upper()}")
        try:
            # A machine without kernel headers (the GPU host) may bring one.
            ko = Path(os.environ["PVGPU_GUEST_KO"]) if os.environ.get("PVGPU_GUEST_KO") \
                else vm.guest_driver(kver, build / "guest-driver")
        except vm.VmError as e:
            ko = None
            print(f"demo: no pvgpu.ko for the guest ({e}): vsock alone, no shared window")
        env = dict(os.environ)
        if executor == "sim":
            env["PVGPU_SIM_TWINS"] = str(build / "tests" / "sim-twins" /
                                         "libbench-twins.so")
        # pvgpud reads the VM registry qemu-device writes (its own run
        # directory here, /run/pvgpu on a host) and listens for each VM.
        tmp.chmod(0o755)
        log = open(tmp / "pvgpud.log", "wb")
        daemon = subprocess.Popen(
            [str(build / "bin" / "pvgpud"), "--registry", str(tmp / "vms"),
             "--executor", executor, "--module-cache", str(tmp / "modules")],
            stdout=log, stderr=subprocess.STDOUT, env=env)
        procs.append(daemon)
        wait_for(tmp / "vms", daemon, "pvgpud")
        # The guest gets its vGPU as an operator gives one without libvirt:
        # pvgpu-vm qemu-args (window, registry entry) and supervise.
        attached = vm.AttachedVm(tmp, "demo", memory="4G", window_size="256M",
                                 ram="1G", log=tmp / "supervise.log")
        wait_for(f"{attached.entry['vsock.listen']}", daemon, "pvgpud's socket for the VM")

        synth = build / "bench" / "pvgpu-synth"
        files = vm.program_files(build, [synth], ko)
        quick = "--quick --size 1M-4M" if executor == "sim" else \
            "--size 32M-64M --seconds 1"
        script = f"export LD_LIBRARY_PATH=/pvgpu/lib PVGPU_DEVICES=vsock://2:{PORT}\n"
        if ko:
            script += ("insmod /pvgpu.ko && echo \"demo: pvgpu.ko loaded: "
                       "$(ls /dev/pvgpu*) is the shared window\"\n")
        script += f"/pvgpu/bin/pvgpu-synth {quick}\n"
        initrd = tmp / "initrd.cpio"
        vm.build_initramfs(initrd, script, files=files, modules=vm.VSOCK_MODULES,
                           kdir=kdir, kver=kver)
        cmd = vm.qemu_command(
            initrd, kernel=kdir / "boot" / f"vmlinuz-{kver}", memory=attached.ram,
            accel=accel, extra=attached.qemu_args(window=ko is not None))
        print("demo: booting the guest; pvgpu-synth runs inside it:\n")
        status, _console = vm.run(cmd, 600.0, echo=True)
        print(f"\ndemo: guest finished with status {status}; pvgpud said:")
        daemon.terminate()
        daemon.wait(timeout=15)
        log.close()
        sys.stdout.write((tmp / "pvgpud.log").read_text())
        if status != 0:
            sys.stderr.write(f"demo: pvgpu-synth in the guest failed ({status})\n")
            return 1
        return 0
    except Exception as e:  # one line, then the cleanup below
        sys.stderr.write(f"demo: {e}\n")
        return 1
    finally:
        if attached:
            attached.close()
        for p in reversed(procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
