#!/usr/bin/env python3
"""make demo: the main job, end to end, inside a virtual machine.

Starts pvgpud (the cuda executor where a GPU answers, the simulated device
otherwise, and says which) reading a VM registry, gives a guest a vGPU with
qemu-device (`pvgpu-vm qemu-args`: the shared window and the registry
entry; `pvgpu-vm supervise`: its vhost-device-vsock), boots it (Debian's
kernel and a busybox initramfs carrying pvgpu.ko, pvgpu's driver front-end
libcuda.so.1 and pvgpu-synth, which carries NVIDIA's runtime linked in as
nvcc links it by default; KVM when it
works, TCG otherwise), runs pvgpu-synth inside the guest as a user's CUDA
program runs there (control over virtio-vsock, bulk data through
/dev/pvgpu0), prints its table with what the columns mean, then a summary
of what ran where, and shuts everything down.  Nothing is left running,
whatever happens.  The guest's console is shown as text: the escape codes
that firmware writes for a terminal are left out (pvgpuvm.console_text).

    scripts/demo_vm.py [--build DIR]
    scripts/demo_vm.py --legend sim|cuda [--compare]   (the legend alone)
Exit codes: 0 success, 1 failure (one line on stderr says why), 2 bad
usage, 3 no VM can be made here (no qemu, guest kernel or
vhost-device-vsock): `make demo` then runs the same job as a local process
instead (scripts/demo.sh).
"""
import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PORT = 7100

# What pvgpu-synth's table says, column by column (bench/pvgpu-synth.cu,
# print_table): a newcomer otherwise reads "10.0% / 51.7%" as a failure.
SYNTH_LEGEND = """\
What pvgpu-synth's table says: each row is one configuration (direction,
host memory, transfer/compute split); pvgpu-synth first calibrated how long
a byte of copy and a loop of its kernel take, then planned each row's steps.
  steps                 copies made, each followed by one kernel launch
  GB moved              bytes copied in all (both ways for "both")
  iters/launch          loop iterations in each kernel launch (the compute)
  seconds / planned     the row's wall time / what the plan predicted
  xfer share plan/run   share of the time meant for copies / share measured
                        (wall time less the kernels' event-timed time)
  xfer MB/s             bytes copied per second outside the kernels (nan
                        when the kernels' timed time is all of it)
"""
COMPARE_LEGEND = """\
What pvgpu-synth --compare's table says: the same plan, calibrated by the
native run (NVIDIA's runtime and driver on the GPU), run again through
pvgpu (the "pvgpu:" line names its libcuda.so.1); per configuration the wall
time of each ("seconds"), pvgpu/native (1.000: pvgpu costs nothing there)
and pvgpu's overhead in per cent.
"""
SIM_NOTE = """\
Executor sim: these are not GPU figures.  The simulated device is a test
fixture: it copies in pvgpud's memory, runs each kernel as a CPU "twin" and
times events with the host's clock, so speeds, shares and plan-versus-run
say nothing about a GPU.  With the cuda executor (a host with an NVIDIA
GPU) the same columns are the GPU's.
"""
CUDA_NOTE = """\
Executor cuda: the copies and kernels ran on the host's GPU.
"""
TCG_NOTE = """\
The guest ran under TCG (QEMU emulating its CPU), which slows every call
it makes: judge pvgpu's speed from a program on the host (make test-gpu,
BENCHMARKS.md), not from a guest here.
"""


def legend(executor, compare=False, accel=None):
    """The lines printed under pvgpu-synth's table."""
    blocks = [COMPARE_LEGEND if compare else SYNTH_LEGEND,
              SIM_NOTE if executor == "sim" else CUDA_NOTE]
    if accel == "tcg":
        blocks.append(TCG_NOTE)
    return "\n".join(blocks)


# pvgpud's log lines start with a time stamp, its name and pid and a level.
LOG_PREFIX = re.compile(r"^\S+ pvgpud\[\d+\] \w+: ")


def session_lines(log):
    """pvgpud's lines about sessions starting and ending, without the
    time stamp and pid: what the summary shows."""
    out = []
    for line in log.splitlines():
        text = LOG_PREFIX.sub("", line)
        if re.match(r"session \d+ (start|end): ", text):
            out.append(text)
    return out


def libraries_used(console):
    """The runtime and driver lines pvgpu-synth printed (bench_common.h,
    table_run_header): NVIDIA's runtime, linked in, and the libcuda.so.1 it
    loaded."""
    return [line.split(": ", 1)[1] for line in console.splitlines()
            if re.match(r"pvgpu-synth: CUDA (runtime:|driver) ", line)]


def summary(accel, kver, executor, window, console, log):
    """What ran where, in a few lines, and pvgpud's session lines."""
    libs = libraries_used(console) or ["(pvgpu-synth printed no library lines)"]
    host = ("the simulated device, a test fixture (no NVIDIA GPU here)"
            if executor == "sim" else "the host's NVIDIA GPU")
    lines = ["demo: summary",
             f"  guest    Debian kernel {kver} under {accel.upper()}, a busybox initramfs",
             "  program  pvgpu-synth, unmodified: NVIDIA's runtime (linked in) over",
             "           pvgpu's driver front-end libcuda.so.1; it says:"]
    lines += [f"             {x}" for x in libs]
    lines.append("  channel  virtio-vsock to pvgpud" +
                 (", bulk data through /dev/pvgpu0 (pvgpu.ko)" if window
                  else " (no pvgpu.ko: no shared window)"))
    lines.append(f"  host     pvgpud --executor {executor}: {host}")
    sessions = session_lines(log) or ["(pvgpud logged no session)"]
    lines.append(f"  pvgpud   {sessions[0]}")
    lines += [f"           {x}" for x in sessions[1:]]
    return "\n".join(lines) + "\n"


def load_vm_script(name):
    """scripts/vm/NAME.py, loaded by path (qemu-device has a package
    called pvgpuvm too)."""
    spec = importlib.util.spec_from_file_location(
        name, REPO / "scripts" / "vm" / f"{name}.py")
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


def sessions_ended(log_path, seconds=10):
    """Wait until pvgpud has logged an end for every session it started: a
    session ends once its worker has seen the guest's program go, and
    stopping pvgpud before that kills the worker instead."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        text = Path(log_path).read_text(errors="replace")
        if len(re.findall(r" session \d+ start: ", text)) <= \
                len(re.findall(r" session \d+ end: ", text)):
            return
        time.sleep(0.05)


def use_vm_bundle(build):
    """On a machine without QEMU (the GPU host: no package registry),
    make vm-bundle's archive, where one was brought to build/, unpacked
    and its variables set, so the guest boots with its QEMU,
    vhost-device-vsock, kernel and pvgpu.ko.  Whether there was one."""
    env = load_vm_script("bundle").brought(build)
    if env is None:
        return False
    os.environ.update(env)
    print(f"demo: no QEMU installed here: the guest boots with make vm-bundle's "
          f"QEMU and kernel ({build / 'vm-bundle.tar.xz'})")
    return True


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.environ.get("BUILD", "build"))
    ap.add_argument("--legend", choices=["sim", "cuda"],
                    help="print only the legend of pvgpu-synth's table for "
                    "this executor (scripts/demo.sh uses it)")
    ap.add_argument("--compare", action="store_true",
                    help="with --legend: the legend of --compare's table")
    args = ap.parse_args()
    if args.legend:
        sys.stdout.write(legend(args.legend, args.compare))
        return 0
    build = (REPO / args.build).resolve()
    vm = load_vm_script("pvgpuvm")
    try:
        vm.qemu_binary()
    except vm.VmError as e:
        if not use_vm_bundle(build):
            sys.stderr.write(f"demo: {e}, and no {build}/vm-bundle.tar.xz "
                             "(make vm-bundle, on a machine that has QEMU): "
                             "no guest can be booted\n")
            return 3
    if not vm.vhost_device_vsock():
        sys.stderr.write("demo: no vhost-device-vsock here: no guest can be booted\n")
        return 3
    try:
        vm.kernel_dir()
    except Exception as e:  # noqa: BLE001 - the reason is the message
        sys.stderr.write(f"demo: no guest kernel: {e}\n")
        return 3
    # The guest runs what a user's program runs: pvgpu's libcuda.so.1 under
    # NVIDIA's runtime, here linked into pvgpu-synth (DESIGN §2b).
    if not (build / "lib" / "libcuda.so.1").exists():
        sys.stderr.write(f"demo: {build}/lib/libcuda.so.1 is not built: make "
                         "generates it from cuda.h with libclang (make deps "
                         "installs it)\n")
        return 1

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
        accel = "kvm" if vm.kvm_boots(kdir, kver, tmp) else "tcg"
        print(f"demo: the guest runs under {accel.upper()}")
        try:
            # A machine without kernel headers (the GPU host) may bring one
            # (PVGPU_GUEST_KO: pvgpuvm.guest_driver).
            ko = vm.guest_driver(kver, build / "guest-driver")
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
        # Named by the process, as its window file (/dev/shm/pvgpu-NAME) is
        # the host's: two demos at once on one machine must not meet.
        attached = vm.AttachedVm(tmp, f"demo{os.getpid()}", memory="4G",
                                 window_size="256M", ram="1G",
                                 log=tmp / "supervise.log")
        wait_for(f"{attached.entry['vsock.listen']}", daemon, "pvgpud's socket for the VM")

        synth = build / "bench" / "pvgpu-synth"
        files = vm.program_files(build, [synth], ko, runtime=False)
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
        status, console = vm.run(cmd, 600.0, echo=True)
        sessions_ended(tmp / "pvgpud.log")
        daemon.terminate()
        daemon.wait(timeout=15)
        log.close()
        daemon_log = (tmp / "pvgpud.log").read_text(errors="replace")
        if status != 0:
            sys.stdout.write(f"\ndemo: pvgpud's log:\n{daemon_log}")
            sys.stderr.write(f"demo: pvgpu-synth in the guest failed ({status})\n")
            return 1
        sys.stdout.write("\n" + legend(executor, accel=accel) + "\n")
        sys.stdout.write(summary(accel, kver, executor, ko is not None,
                                 console, daemon_log))
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
