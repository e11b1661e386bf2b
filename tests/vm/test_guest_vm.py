"""Inside a real VM: QEMU 7.2 guests (Debian's kernel,
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
import signal
import subprocess
import threading
import time
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
def run_dir(short_tmp):
    """qemu-device's run directory: short, for Unix socket paths."""
    return short_tmp


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


def test_two_guests_at_once_run_the_programs_each_seeing_only_their_own(
        daemon, attach, guest_kernel, run_dir):
    """Two guests at the same time against one pvgpud: A runs every test
    program unmodified, B a few.  meminfo checks that cudaMemGetInfo
    follows exactly its own cudaMalloc/cudaFree: it would fail if the
    other guest's allocations, made meanwhile, showed in it."""
    a, b = attach("a", memory="2G"), attach("b", memory="768M")
    runs = {a.name: PROGRAMS + KERNEL_PROGRAMS, b.name: ["meminfo", "memory", "vecadd", "streams"]}
    out = {}

    def run(v):
        out[v.name] = boot(v, guest_kernel, runs[v.name], run_dir)

    threads = [threading.Thread(target=run, args=(v,)) for v in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for v in (a, b):
        status, console = out[v.name]
        assert_all_passed(runs[v.name], status, console, daemon, window=True)
    log = daemon.log()
    # Every program was a session of its VM, known by its vhost-user socket.
    for v in (a, b):
        assert log.count(f"start: vm {v.name} via vhost-user") == len(runs[v.name])
    assert "worker killed" not in log and "refused" not in log
    # Each VM's quota is its own: 2 GiB and 768 MiB, as registered.
    assert f"vm {a.name} attached" in log and "quota 2.00 GiB" in log
    assert "quota 768.0 MiB" in log
    # And every program moved its messages through the control ring in the
    # window, waking the other side over vsock.
    assert log.count("control ring: 512 KiB each way") == sum(map(len, runs.values())), \
        log[-3000:]


def test_a_dying_vhost_device_vsock_touches_no_other_vm(daemon, attach, guest_kernel, run_dir):
    """A's vhost-device-vsock is killed while A's programs run: pvgpud ends
    A's session that was going through it, pvgpu-vm supervise says so and
    starts a new one, and B, running at the same time, passes everything;
    B has no window device, so its programs run over vsock alone.
    A itself is left without vsock (QEMU 7.2 does not reconnect): its
    program waits for a reply that cannot come, so the test stops A's QEMU
    once it has seen all this."""
    a, b = attach("dies"), attach("lives")
    kdir, kver, ko = guest_kernel
    loop = ("export LD_LIBRARY_PATH=/pvgpu/lib PVGPU_DEVICES=vsock://2:7100\n"
            "insmod /pvgpu.ko\n"
            "i=0; while [ $i -lt 40 ]; do i=$((i+1)); /pvgpu/bin/memory >/dev/null 2>&1; "
            "echo \"round $i rc=$?\"; done\nexit 0\n")
    initrd = run_dir / "initrd-dies.cpio"
    vm.build_initramfs(initrd, loop, files=vm.program_files(BUILD, binaries(["memory"]), ko),
                       modules=vm.VSOCK_MODULES, kdir=kdir, kver=kver)
    out = {}

    def run_a():
        cmd = vm.qemu_command(initrd, kernel=kdir / "boot" / f"vmlinuz-{kver}",
                              memory=a.ram, extra=a.qemu_args())
        out["a"] = vm.run(cmd, BOOT_TIMEOUT, log=run_dir / "console-dies.log", echo=False)

    b_programs = ["memory", "streams", "vecadd", "meminfo"]

    def run_b():
        out["b"] = boot(b, guest_kernel, b_programs, run_dir, window=False)

    threads = [threading.Thread(target=run_a), threading.Thread(target=run_b)]
    for t in threads:
        t.start()
    # Once A has had a few sessions, its vhost-device-vsock dies.
    deadline = time.monotonic() + BOOT_TIMEOUT
    while daemon.log().count(f"start: vm {a.name} via") < 3:
        assert time.monotonic() < deadline and threads[0].is_alive(), daemon.log()[-3000:]
        time.sleep(0.2)
    pidfile = Path(a.socket).parent / "vhost-device-vsock.pid"
    os.kill(int(pidfile.read_text().strip()), signal.SIGKILL)
    threads[1].join()
    # pvgpud ends every session of A; none is left hanging on the dead socket.
    deadline = time.monotonic() + 30
    while True:
        log = daemon.log()
        if log.count(f"start: vm {a.name} via") == log.count(f"end: vm {a.name} via"):
            break
        assert time.monotonic() < deadline, log[-3000:]
        time.sleep(0.2)
    subprocess.run(["pkill", "-f", str(initrd)], check=False)
    threads[0].join()

    _status, console = out["a"]
    rounds = [line for line in console.splitlines() if line.startswith("round ")]
    assert rounds and all(r.endswith("rc=0") for r in rounds), console[-3000:]
    assert len(rounds) < 40, "A still reached pvgpud after its backend died"
    status_b, console_b = out["b"]
    assert_all_passed(b_programs, status_b, console_b, daemon, window=False)
    # B's library said why, once per program, under PVGPU_DEBUG.
    assert "no shared window (no /dev/pvgpuN device): using the socket alone" in console_b
    sup = (run_dir / "supervise-dies.log").read_text()
    assert "died" in sup and "restarting" in sup, sup
    # pvgpud goes on serving: B's sessions all started and ended ok.
    assert daemon.log().count(f"start: vm {b.name} via") == len(b_programs)
