"""Inside a real VM (issue 5, acceptance): QEMU 7.2 guests (Debian's kernel,
TCG) given a vGPU by qemu-device exactly as an operator would without
libvirt — `pvgpu-vm qemu-args` (vhost-user vsock, an ivshmem-plain window,
the registry entry) and `pvgpu-vm supervise` (vhost-device-vsock) — run the
unmodified CUDA test programs through pvgpu against one `pvgpud --executor
sim --registry`.

The guest loads pvgpu.ko, and the guest library then moves bulk data and
pinned memory through /dev/pvgpu0; without the window the same programs run
over vsock alone.  Two guests at once each see only their own quota and
allocations.  The guest carries only ld.so, libc, the shim and the programs:
nothing in them was rebuilt for the VM.
"""
import importlib.util
import os
import shutil
import tempfile
import threading
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent
BUILD = REPO / os.environ.get("PVGPU_BUILD", "build")
BOOT_TIMEOUT = 300.0
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
def guest_kernel(tmp_path_factory):
    """(kernel dir, version, pvgpu.ko built for it)."""
    if not shutil.which("qemu-system-x86_64"):
        pytest.skip("no qemu-system-x86_64 (apt-get install qemu-system-x86)")
    if not vm.vhost_device_vsock():
        pytest.skip("no vhost-device-vsock (cargo install vhost-device-vsock@0.3.0)")
    try:
        kdir, kver = vm.kernel_dir()
    except Exception as e:  # noqa: BLE001 - any reason is the skip's reason
        pytest.skip(f"no Debian guest kernel: {e}")
    ko = vm.guest_driver(kver, BUILD / "guest-driver")
    return kdir, kver, ko


@pytest.fixture
def run_dir():
    """qemu-device's run directory: short, for Unix socket paths."""
    path = Path(tempfile.mkdtemp(prefix="pv", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def daemon(start_pvgpud, run_dir):
    twins = BUILD / "tests" / "sim-twins" / "libtest-twins.so"
    return start_pvgpud("sim", extra_args=["--registry", str(run_dir / "vms")],
                        env={"PVGPU_SIM_TWINS": str(twins)})


@pytest.fixture
def attach(run_dir):
    vms = []

    def make(name, memory=None):
        v = vm.AttachedVm(run_dir, f"g{os.getpid()}-{name}", memory=memory,
                          window_size="256M", log=run_dir / f"supervise-{name}.log")
        vms.append(v)
        return v

    yield make
    for v in vms:
        v.close()


def binaries(programs):
    return [BUILD / "tests" / ("kernels" if name in KERNEL_PROGRAMS else "") / name
            for name in programs]


def boot(v, kernel, programs, tmp, window=True):
    kdir, kver, ko = kernel
    initrd = tmp / f"initrd-{v.name}.cpio"
    vm.build_initramfs(initrd, vm.program_script(programs, PORT, window),
                       files=vm.program_files(BUILD, binaries(programs), ko),
                       modules=vm.VSOCK_MODULES,
                       kdir=kdir, kver=kver)
    cmd = vm.qemu_command(initrd, kernel=kdir / "boot" / f"vmlinuz-{kver}",
                          memory=v.ram, extra=v.qemu_args(window=window))
    return vm.run(cmd, BOOT_TIMEOUT, log=tmp / f"console-{v.name}.log", echo=False)


def assert_all_passed(programs, status, console, daemon, window):
    got = vm.program_results(console)
    assert sorted(got) == sorted(programs), console[-4000:]
    for name, line in got.items():
        assert "rc=0" in line and "last=PASS" in line, \
            f"{line}\n{console[-4000:]}\n{daemon.log()[-3000:]}"
        assert f"window={'yes' if window else 'no'}" in line, f"{line}\n{console[-3000:]}"
    assert status == 0, console[-4000:]


def test_programs_run_unmodified_with_the_window(daemon, attach, guest_kernel, run_dir):
    v = attach("win", memory="2G")
    programs = PROGRAMS + KERNEL_PROGRAMS
    status, console = boot(v, guest_kernel, programs, run_dir)
    assert_all_passed(programs, status, console, daemon, window=True)
    log = daemon.log()
    # Every program was a session of the VM, known by its vhost-user socket.
    assert log.count(f"start: vm {v.name} via vhost-user") == len(programs)
    assert "worker killed" not in log and "refused" not in log


def test_programs_run_over_vsock_alone_without_the_window(daemon, attach, guest_kernel,
                                                          run_dir):
    v = attach("nowin")
    programs = ["memory", "streams", "vecadd", "meminfo"]
    status, console = boot(v, guest_kernel, programs, run_dir, window=False)
    assert_all_passed(programs, status, console, daemon, window=False)
    # The library said why, once per program, under PVGPU_DEBUG.
    assert "no shared window (no /dev/pvgpuN device): using the socket alone" in console


def test_two_guests_at_once_each_see_only_their_own(daemon, attach, guest_kernel, run_dir):
    """Both run at the same time against one pvgpud.  meminfo checks that
    cudaMemGetInfo follows exactly its own cudaMalloc/cudaFree: it would
    fail if the other guest's allocations, made meanwhile, showed in it."""
    a, b = attach("a", memory="1G"), attach("b", memory="768M")
    programs = ["meminfo", "memory", "vecadd", "streams"]
    out = {}

    def run(v):
        out[v.name] = boot(v, guest_kernel, programs, run_dir)

    threads = [threading.Thread(target=run, args=(v,)) for v in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for v in (a, b):
        status, console = out[v.name]
        assert_all_passed(programs, status, console, daemon, window=True)
    log = daemon.log()
    assert log.count(f"start: vm {a.name} via vhost-user") == 4
    assert log.count(f"start: vm {b.name} via vhost-user") == 4
    # Each VM's quota is its own: 1 GiB and 768 MiB, as registered.
    assert f"vm {a.name} attached" in log and "quota 1.00 GiB" in log
    assert "quota 768.0 MiB" in log
