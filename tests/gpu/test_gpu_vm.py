"""The whole chain on the GPU: QEMU guests given a vGPU as an operator
gives one without libvirt (`pvgpu-vm qemu-args`: vhost-user vsock, the
ivshmem window, the registry entry; `pvgpu-vm supervise`:
vhost-device-vsock) run CUDA programs through pvgpu.ko, the window and
vsock against `pvgpud --executor cuda` on the real GPU.

The GPU machine has no QEMU and no package registry: make vm-bundle's
archive, made where QEMU is and brought as build/vm-bundle.tar.xz, gives
QEMU, vhost-device-vsock, the guest kernel and pvgpu.ko (where QEMU is
installed, the system's serve).  Guests run under KVM where one really
boots under it, TCG otherwise (this GPU machine is itself a VM whose
processors offer no virtualisation): TCG proves function, never speed.

- Two guests at once: A (4 GiB quota) runs the test programs, built with
  NVIDIA's runtime shared and static, device printf among them, and
  pvgpu-synth; every program's stdout equals the same binary's run
  natively on this host.  B (1 GiB) runs a few, then copies in a loop and
  is killed mid-copy: pvgpud ends B's session, and A, running meanwhile,
  passes everything.
- PyTorch inside a guest: the host's own root filesystem, shared
  read-only over 9p and entered with chroot (PyTorch is far too large
  for an initramfs), pvgpu's libcuda.so.1 first on the library path; a
  small training loop gives native's losses.  The guest has no NVIDIA
  kernel driver, so nothing in it can reach the GPU but through pvgpu.
"""
import difflib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from pvgpu_guest import without_managed  # noqa: E402
from vm_script import bundle, vm  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / os.environ.get("PVGPU_BUILD", "build")
PORT = 7100

# Paths under BUILD/tests: NVIDIA's runtime shared (over the guest's
# /pvgpu/lib/libcudart.so.13) and linked in (static/).
A_PROGRAMS = ["devices", "memory", "memset", "streams", "threads", "errors",
              "meminfo", "copies", "kernels/vecadd", "kernels/reduce",
              "kernels/constant", "kernels/launchloop", "kernels/printf",
              "kernels/matmul", "static/memory", "static/streams",
              "static/kernels/vecadd", "static/kernels/printf"]
B_PROGRAMS = ["meminfo", "memory", "kernels/vecadd"]
SYNTH = "--size 32M-64M --seconds 1"
# B's loop: a program that copies (`memory`), again and again.
B_LOOP = "while true; do /pvgpu/bin/memory >/dev/null 2>&1; done"
# How long into its second round of the loop B is killed: `memory`'s
# copies take the whole of a round.
KILL_AFTER = 5.0
# Under TCG a program is seconds to a minute of guest time.
RUN_TIMEOUT = 900.0


def guest_name(path):
    return path.replace("/", "-")


@pytest.fixture(scope="module")
def guest_tools(tmp_path_factory):
    """(kernel dir, version, pvgpu.ko, accel): the system's QEMU where it
    has one, else make vm-bundle's archive brought to BUILD; skip, saying
    why, where neither is."""
    saved = dict(os.environ)
    try:
        try:
            vm.qemu_binary()
        except vm.VmError as e:
            env = bundle.brought(BUILD)
            if env is None:
                pytest.skip(f"{e}, and no {BUILD}/vm-bundle.tar.xz: make vm-bundle "
                            "where QEMU is, and bring the archive here")
            os.environ.update(env)
        if not vm.vhost_device_vsock():
            pytest.skip("no vhost-device-vsock here (make vm-bundle brings one)")
        try:
            kdir, kver = vm.kernel_dir(fetch=False)
            ko = vm.guest_driver(kver, BUILD / "guest-driver")
        except vm.VmError as e:
            pytest.skip(f"no guest kernel or pvgpu.ko for it: {e}")
        accel = "kvm" if vm.kvm_boots(kdir, kver, tmp_path_factory.mktemp("probe")) \
            else "tcg"
        print(f"\nguests run under {accel.upper()}")
        yield kdir, kver, ko, accel
    finally:
        os.environ.clear()
        os.environ.update(saved)


def guest_files(programs, ko, tmp):
    """program_files for BUILD/tests programs and pvgpu-synth, each under
    /pvgpu/bin by its path with / as - (kernels/vecadd: kernels-vecadd)."""
    links = Path(tmp) / "bin"
    links.mkdir(exist_ok=True)
    binaries = []
    for name in programs:
        link = links / guest_name(name)
        if not link.exists():
            link.symlink_to(BUILD / "tests" / name)
        binaries.append(link)
    binaries.append(BUILD / "bench" / "pvgpu-synth")
    return vm.program_files(BUILD, binaries, ko)


def program_lines(names):
    """Shell lines running each program and printing its stdout between
    markers, with its exit status and whether it used the window."""
    lines = []
    for name in names:
        g = guest_name(name)
        lines += [f"/pvgpu/bin/{g} >/tmp/{g}.out 2>/tmp/{g}.err; rc=$?",
                  f"grep -q '{vm.WINDOW_LINE}' /tmp/{g}.err && w=yes || w=no",
                  f"echo '==== {g} begin'; cat /tmp/{g}.out",
                  f"echo \"==== {g} end rc=$rc window=$w\"",
                  f"[ $rc = 0 ] || {{ failed=1; tail -n 20 /tmp/{g}.err; }}"]
    return lines


def guest_script(names, then=""):
    return "\n".join(
        [f"export LD_LIBRARY_PATH=/pvgpu/lib PVGPU_DEVICES=vsock://2:{PORT} PVGPU_DEBUG=1",
         "insmod /pvgpu.ko || echo 'FAIL: insmod pvgpu.ko'", "failed=0"]
        + program_lines(names)
        + [f"/pvgpu/bin/pvgpu-synth {SYNTH} >/tmp/synth.out 2>&1; "
           "echo \"==== synth rc=$?\"; tail -n 3 /tmp/synth.out", then,
           "exit $failed"]) + "\n"


def outputs(console):
    """{guest name: (stdout, rc, window)} from a guest_script console."""
    return {m.group(1): (m.group(2), int(m.group(3)), m.group(4) == "yes")
            for m in re.finditer(r"==== (\S+) begin\n(.*?)==== \1 end rc=(\d+) "
                                 r"window=(yes|no)\n", console, re.S)}


def session_ends(log, name):
    """(calls, bytes to the device) of each session of VM `name`, in the
    order they started."""
    ends = re.findall(r"session (\d+) end: vm %s via .*?, (\d+) calls, (.+?) to device"
                      % re.escape(name), log)
    return [(int(calls), moved) for _, calls, moved in
            sorted(ends, key=lambda e: int(e[0]))]


def same_as_native(name, native, got, console, log):
    want = "".join(without_managed(native.splitlines(keepends=True)))
    have = "".join(without_managed(got.splitlines(keepends=True)))
    if want != have:
        diff = "".join(difflib.unified_diff(want.splitlines(keepends=True),
                                            have.splitlines(keepends=True),
                                            fromfile="native", tofile="guest"))
        pytest.fail(f"{name}: the guest's stdout differs from native\n{diff}\n"
                    f"--- console (tail) ---\n{console[-3000:]}\n"
                    f"--- pvgpud (tail) ---\n{log[-3000:]}")


@pytest.fixture(scope="module")
def natives(programs, native_libdir):
    """Each program's stdout run natively on this host, NVIDIA's driver."""
    out = {}
    for name in sorted(set(A_PROGRAMS) | set(B_PROGRAMS)):
        res = programs.run(name, programs.native_env(native_libdir))
        assert res.returncode == 0 and res.stdout.splitlines()[-1:] == ["PASS"], \
            f"{name} fails natively\n" + programs.describe(res)
        out[guest_name(name)] = res.stdout
    return out


def test_two_guests_on_the_gpu(guest_tools, start_pvgpud, natives):
    kdir, kver, ko, accel = guest_tools
    run_dir = Path(tempfile.mkdtemp(prefix="pvgpu-"))
    daemon = start_pvgpud("cuda", extra_args=["--registry", str(run_dir / "vms")])
    attached, threads, results = [], [], {}
    try:
        a = vm.AttachedVm(run_dir, f"ga{os.getpid()}", memory="4G", window_size="256M",
                          log=run_dir / "supervise-a.log")
        attached.append(a)
        b = vm.AttachedVm(run_dir, f"gb{os.getpid()}", memory="1G", window_size="256M",
                          log=run_dir / "supervise-b.log")
        attached.append(b)
        scripts = {"a": guest_script(A_PROGRAMS),
                   "b": guest_script(B_PROGRAMS, then=(
                       f"echo '==== B loops'\n{B_LOOP}"))}
        initrds = {}
        for key, names in (("a", A_PROGRAMS), ("b", B_PROGRAMS)):
            initrds[key] = run_dir / f"initrd-{key}.cpio"
            vm.build_initramfs(initrds[key], scripts[key],
                               files=guest_files(names, ko, run_dir),
                               modules=vm.VSOCK_MODULES, kdir=kdir, kver=kver)

        def boot(key, v):
            cmd = vm.qemu_command(initrds[key], kernel=kdir / "boot" / f"vmlinuz-{kver}",
                                  memory=v.ram, accel=accel, smp=2, extra=v.qemu_args())
            results[key] = vm.run(cmd, RUN_TIMEOUT, log=run_dir / f"console-{key}.log",
                                  echo=False)

        threads = [threading.Thread(target=boot, args=("a", a)),
                   threading.Thread(target=boot, args=("b", b))]
        for t in threads:
            t.start()
        # B copies in its loop; a few seconds into its second round, B's
        # QEMU is killed, while A's programs go on.
        deadline = time.monotonic() + RUN_TIMEOUT
        console_b = run_dir / "console-b.log"
        while not (console_b.exists() and "==== B loops" in console_b.read_text()):
            assert time.monotonic() < deadline and threads[1].is_alive(), \
                f"B never reached its loop\n{console_b.read_text()[-3000:]}\n" \
                f"{daemon.log()[-3000:]}"
            time.sleep(0.5)
        while daemon.log().count(f"start: vm {b.name} via") < len(B_PROGRAMS) + 3:
            assert time.monotonic() < deadline, daemon.log()[-3000:]
            time.sleep(0.2)
        time.sleep(KILL_AFTER)
        # A is mid-way through its programs: it must not notice.
        assert threads[0].is_alive(), "A was done before B was killed"
        subprocess.run(["pkill", "-KILL", "-f", str(initrds["b"])], check=False)
        threads[1].join(60)
        threads[0].join(RUN_TIMEOUT)
        assert not threads[0].is_alive()
        deadline = time.monotonic() + 60
        while True:
            log = daemon.log()
            if log.count(f"start: vm {b.name} via") == log.count(f"end: vm {b.name} via"):
                break
            assert time.monotonic() < deadline, \
                f"pvgpud did not end B's session after its QEMU was killed\n{log[-3000:]}"
            time.sleep(0.5)
    finally:
        for initrd in (run_dir / "initrd-a.cpio", run_dir / "initrd-b.cpio"):
            subprocess.run(["pkill", "-KILL", "-f", str(initrd)], check=False)
        for t in threads:
            t.join(30)
        for v in attached:
            v.close()

    status_a, console_a = results["a"]
    _, console_b = results["b"]
    try:
        got = outputs(console_a)
        assert sorted(got) == sorted(guest_name(n) for n in A_PROGRAMS), console_a[-4000:]
        for name, (stdout, rc, window) in got.items():
            assert rc == 0 and window, f"{name}: rc={rc} window={window}\n{console_a[-4000:]}"
            same_as_native(name, natives[name], stdout, console_a, log)
        assert "==== synth rc=0" in console_a, console_a[-3000:]
        assert status_a == 0, console_a[-3000:]
        got_b = outputs(console_b)
        assert sorted(got_b) == sorted(guest_name(n) for n in B_PROGRAMS), console_b[-4000:]
        for name, (stdout, rc, window) in got_b.items():
            assert rc == 0 and window, f"{name}: rc={rc}\n{console_b[-4000:]}"
            same_as_native(name, natives[name], stdout, console_b, log)
        assert "FAIL" not in console_b, console_b[-3000:]
        # pvgpud's log names each VM's sessions and quota; every session
        # of A (its programs and pvgpu-synth) started and ended well.
        assert log.count(f"start: vm {a.name} via vhost-user") == len(A_PROGRAMS) + 1, \
            log[-4000:]
        # B's last session was cut mid-way through `memory`: data had
        # moved, and fewer calls were made than in a whole round.
        rounds = session_ends(log, b.name)[len(B_PROGRAMS) + 1:]
        assert len(rounds) >= 2, log[-4000:]
        assert rounds[-1][0] < rounds[0][0] and rounds[-1][1] != "0 B", rounds
        assert "quota 4.00 GiB" in log and "quota 1.00 GiB" in log, log[-4000:]
        assert "worker killed" not in log, log[-4000:]
        print("\npvgpud's sessions:\n" + "\n".join(
                  line for line in log.splitlines() if " end: vm " in line))
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)


TORCH_SCRIPT = REPO / "tests" / "gpu" / "frameworks" / "torch_tiny.py"
# Importing PyTorch is minutes of emulated CPU.
TORCH_TIMEOUT = 540.0


def torch_lines(text):
    """torch_tiny.py's results: its loss and tokens lines."""
    return [line for line in text.splitlines() if line.startswith(("loss ", "tokens "))]


def losses_close(native, guest):
    """Each step's loss within rounding of native's (the GPU's reductions
    may add in another order from run to run); the tokens equal."""
    assert len(native) == len(guest), (native, guest)
    for want, got in zip(native, guest):
        if want.startswith("tokens "):
            assert want == got, (want, got)
            continue
        a, b = float(want.split()[2]), float(got.split()[2])
        assert abs(a - b) <= 1e-5 * max(abs(a), 1.0), (want, got)


def test_pytorch_in_a_guest_on_the_host_root(guest_tools, start_pvgpud, libdir, tmp_path):
    """PyTorch in a guest: the host's root filesystem over 9p, read-only,
    entered with chroot; pvgpu's libcuda.so.1 (with NVIDIA's runtime, the
    folder `libdir`, alone) first on the library path.  The guest kernel
    has no NVIDIA driver: only pvgpu can serve it, and pvgpud's log names
    the VM's session."""
    try:
        import torch  # noqa: F401
    except ImportError:
        pytest.skip("no PyTorch in this python3")
    kdir, kver, ko, accel = guest_tools
    native = subprocess.run([sys.executable, str(TORCH_SCRIPT)], capture_output=True,
                            text=True, timeout=300, cwd="/")
    assert native.returncode == 0 and "PASS" in native.stdout, native.stdout + native.stderr
    run_dir = Path(tempfile.mkdtemp(prefix="pvgpu-"))
    daemon = start_pvgpud("cuda", extra_args=["--registry", str(run_dir / "vms")])
    v = None
    try:
        v = vm.AttachedVm(run_dir, f"gt{os.getpid()}", memory="8G", window_size="256M",
                          ram="6G", log=run_dir / "supervise.log")
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/dev/shm",
               "TMPDIR": "/dev/shm", "LD_LIBRARY_PATH": str(libdir),
               "PVGPU_DEVICES": f"vsock://2:{PORT}", "HF_HUB_OFFLINE": "1",
               "TRANSFORMERS_OFFLINE": "1", "PYTHONDONTWRITEBYTECODE": "1"}
        for key in ("PYTHONPATH", "PYTHONHOME"):
            if os.environ.get(key):
                env[key] = os.environ[key]
        exports = " ".join(f"{k}='{val}'" for k, val in env.items())
        script = "\n".join([
            "insmod /pvgpu.ko || echo 'FAIL: insmod pvgpu.ko'",
            "mkdir -p /host",
            "mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=524288 "
            "hostroot /host || echo 'FAIL: mount 9p'",
            "mount -t proc proc /host/proc && mount -t sysfs sysfs /host/sys && "
            "mount -t devtmpfs devtmpfs /host/dev && mkdir -p /host/dev/shm && "
            "mount -t tmpfs tmpfs /host/dev/shm || echo 'FAIL: mounts'",
            "ls -l /host/dev/pvgpu0 || echo 'FAIL: no /dev/pvgpu0'",
            "ls /host/dev/nvidia* 2>/dev/null && echo 'FAIL: an NVIDIA device in the guest'",
            # Straight to the console, line by line: where a slow guest
            # runs out of time, its last line says how far it got.
            "echo '==== torch begin'",
            f"chroot /host /usr/bin/env -i {exports} {sys.executable} -u {TORCH_SCRIPT} "
            "2>/tmp/torch.err; rc=$?",
            "echo \"==== torch end rc=$rc\"",
            "[ $rc = 0 ] || tail -n 30 /tmp/torch.err",
            "exit $rc"]) + "\n"
        initrd = run_dir / "initrd.cpio"
        vm.build_initramfs(initrd, script, files=[(str(ko), "/pvgpu.ko")],
                           modules=vm.VSOCK_MODULES + vm.NINEP_MODULES,
                           kdir=kdir, kver=kver)
        cpu = ["-cpu", "host" if accel == "kvm" else "max"]
        cmd = vm.qemu_command(initrd, kernel=kdir / "boot" / f"vmlinuz-{kver}",
                              memory=v.ram, accel=accel, smp=4,
                              extra=v.qemu_args() + cpu + vm.virtfs_args("/", "hostroot"))
        started = time.monotonic()
        status, console = vm.run(cmd, TORCH_TIMEOUT, log=run_dir / "console.log", echo=False)
        took = time.monotonic() - started
        log = daemon.log()
        assert status == 0 and "FAIL" not in console, \
            f"status {status} after {took:.0f} s (timeout {TORCH_TIMEOUT:.0f} s)\n" \
            f"{console[-5000:]}\n{log[-3000:]}"
        m = re.search(r"==== torch begin\n(.*?)==== torch end rc=0", console, re.S)
        assert m, console[-5000:]
        guest = m.group(1)
        losses_close(torch_lines(native.stdout), torch_lines(guest))
        assert f"start: vm {v.name} via vhost-user" in log, log[-3000:]
        times = [line for line in guest.splitlines() if line.startswith("time ")]
        print(f"\nPyTorch in a {accel.upper()} guest: the guest ran {took:.0f} s; "
              + "; ".join(times) + "\nnative: " + "; ".join(
                  line for line in native.stdout.splitlines() if line.startswith("time ")))
    finally:
        if v:
            v.close()
        shutil.rmtree(run_dir, ignore_errors=True)
