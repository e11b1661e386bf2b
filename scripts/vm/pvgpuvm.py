#!/usr/bin/env python3
"""Boot a small Debian guest under QEMU for pvgpu's VM tests and demo.

Three pieces, usable from Python (tests/vm/) or from the command line:

  window     create a host window file (/dev/shm/NAME) that starts with a
             pvgpu window header (common/window.h).  Test-only: the real
             host half, with staging slots, is qemu-device/.
  initramfs  build a busybox initramfs: busybox, kernel modules from the
             fetched Debian kernel (with their dependencies, in load order),
             extra files (pvgpu.ko, test programs) and a script that /init
             runs before powering the guest off.
  run        start qemu-system-x86_64 (TCG unless told otherwise) with the
             kernel, the initramfs and ivshmem-plain windows; stream the
             serial console's text (no terminal escape codes) to stdout
             and a log; stop when the guest powers off or at a timeout.
             The exit status is the guest script's.

The kernel comes from scripts/vm/fetch-kernel.sh (.deps/vm/KVER/).  On a
machine without QEMU, vhost-device-vsock, busybox or a guest kernel (the GPU
host), make vm-bundle's archive brings them all; its `env` prints the
variables that point this file at them: PVGPU_QEMU, PVGPU_VHOST_DEVICE_VSOCK,
PVGPU_BUSYBOX, PVGPU_GUEST_KERNEL and PVGPU_GUEST_KO.

  python3 scripts/vm/pvgpuvm.py window /dev/shm/pvgpu-w0 --size 16M --id 7
  python3 scripts/vm/pvgpuvm.py initramfs -o /tmp/i.cpio \\
      --file build/guest-driver/pvgpu.ko:/pvgpu.ko --script test.sh
  python3 scripts/vm/pvgpuvm.py run --initrd /tmp/i.cpio \\
      --window /dev/shm/pvgpu-w0 --timeout 60 --log /tmp/console.log
"""

import argparse
import codecs
import lzma
import os
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
DEPS_VM = REPO / ".deps" / "vm"

# Debian packages this tooling needs (the lead folds them into
# scripts/install-deps.sh).  linux-headers-amd64 is for building pvgpu.ko;
# the guest kernel itself is fetched with `apt-get download`, not installed.
APT_PACKAGES = ["qemu-system-x86", "busybox-static", "linux-headers-amd64",
                "kmod"]


def _qemu_device(*modules):
    """Modules of qemu-device's pvgpuvm package, loaded by path: this file
    is called pvgpuvm too, and is itself imported under that name."""
    import importlib.util
    name = "_pvgpu_qemu_device"
    if name not in sys.modules:
        pkg = REPO / "qemu-device" / "pvgpuvm"
        spec = importlib.util.spec_from_file_location(
            name, pkg / "__init__.py", submodule_search_locations=[str(pkg)])
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return [importlib.import_module(f"{name}.{m}") for m in modules]


# The window header (common/window.h), as qemu-device describes it.
_window, _spec = _qemu_device("window", "spec")
WINDOW_MAGIC = _window.MAGIC
WINDOW_LAYOUT = _window.LAYOUT
WINDOW_HDR_SIZE = _window.HDR_SIZE

# The line /init prints when the script is done; run() reads the status.
EXIT_MARK = "pvgpu-guest: exit "

# Virtio and vsock modules for a guest that talks to pvgpud over
# vhost-user-vsock (DESIGN section 7), in load order.
VSOCK_MODULES = ["virtio_ring", "virtio", "virtio_pci_legacy_dev",
                 "virtio_pci_modern_dev", "virtio_pci", "vsock",
                 "vmw_vsock_virtio_transport_common",
                 "vmw_vsock_virtio_transport"]

# 9p over virtio, for a guest given a host folder with QEMU's -virtfs
# (virtfs_args): the GPU tests enter the host's own root filesystem with
# it, read-only, to run frameworks far too large for an initramfs.
NINEP_MODULES = ["netfs", "fscache", "9pnet", "9pnet_virtio", "9p"]


class VmError(Exception):
    """Something needed to boot a guest is missing or wrong."""


def vhost_device_vsock():
    """The vhost-device-vsock binary ($PVGPU_VHOST_DEVICE_VSOCK, as
    `pvgpu-vm supervise` takes it, else PATH or where cargo installs it),
    or None."""
    given = os.environ.get("PVGPU_VHOST_DEVICE_VSOCK")
    if given:
        return given if os.access(given, os.X_OK) else None
    cargo = Path.home() / ".cargo" / "bin" / "vhost-device-vsock"
    return shutil.which("vhost-device-vsock") or (str(cargo) if cargo.exists() else None)


def guest_libraries(binary, skip=("libcudart",)):
    """(host path, guest path) for each shared library `binary` loads, as the
    host's loader resolves them (ldd), so a guest can carry them; libraries
    whose names contain a `skip` entry are left out (the guest has its own)."""
    out = subprocess.run(["ldd", str(binary)], capture_output=True,
                         text=True).stdout
    pairs = []
    for line in out.splitlines():
        parts = line.split()
        path = parts[2] if "=>" in parts and len(parts) > 2 else parts[0]
        if path.startswith("/") and not any(k in path for k in skip):
            pairs.append((os.path.realpath(path), path))
    return pairs


# ---- a VM with a vGPU, as qemu-device gives it --------------------------------

PVGPU_VM = REPO / "qemu-device" / "pvgpu-vm"


def guest_driver(kver, outdir):
    """pvgpu.ko built for the guest kernel kver into outdir, or raise VmError
    saying why it cannot be (no kernel build tree, a compiler error).  A
    machine without kernel headers (the GPU host) brings one built
    elsewhere, for that kernel: $PVGPU_GUEST_KO (make vm-bundle's)."""
    given = os.environ.get("PVGPU_GUEST_KO")
    if given:
        if not Path(given).is_file():
            raise VmError(f"PVGPU_GUEST_KO={given}: no such file")
        return Path(given)
    if not Path(f"/lib/modules/{kver}/build/Makefile").exists():
        raise VmError(f"no kernel build tree for {kver} (apt-get install linux-headers-amd64)")
    proc = subprocess.run(["make", "-C", str(REPO / "guest-driver"), f"OUTDIR={outdir}",
                           f"KVER={kver}"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise VmError(f"building pvgpu.ko: {(proc.stdout + proc.stderr)[-2000:]}")
    return Path(outdir) / "pvgpu.ko"


# What the guest library prints (PVGPU_DEBUG) once it uses /dev/pvgpuN.
WINDOW_LINE = "shared window of the pvgpu device"


def nvidia_runtime():
    """NVIDIA's own libcudart.so.13 (scripts/find-cuda.sh --libdir: the
    toolkit's, or the PyPI wheel's in .deps/cuda-py), or raise VmError."""
    found = subprocess.run([str(REPO / "scripts" / "find-cuda.sh"), "--libdir"],
                           capture_output=True, text=True)
    lib = Path(found.stdout.strip()) / "libcudart.so.13"
    if found.returncode or not lib.exists():
        raise VmError("no NVIDIA libcudart.so.13 (make deps installs the CUDA "
                      "runtime from PyPI into .deps/cuda-py)")
    return lib.resolve()


def program_files(build, binaries, ko=None, runtime=None):
    """(host, guest) pairs for an initramfs running CUDA programs through
    pvgpu as a user's program runs: the programs under /pvgpu/bin; in
    /pvgpu/lib pvgpu's driver front-end libcuda.so.1 with NVIDIA's
    libcudart.so.13 beside it (`runtime`, else as nvidia_runtime() finds
    it; runtime=False: none, for programs with the runtime linked in);
    every library they load as the host's loader resolves it, and pvgpu.ko
    as /pvgpu.ko if given."""
    lib = Path(build) / "lib"
    guest_libs = {lib / "libcuda.so.1": "/pvgpu/lib/libcuda.so.1"}
    if runtime is not False:
        guest_libs[Path(runtime or nvidia_runtime())] = "/pvgpu/lib/libcudart.so.13"
    files = [(str(host), guest) for host, guest in guest_libs.items()]
    if ko:
        files.append((str(ko), "/pvgpu.ko"))
    libs = {}
    for binary in list(binaries) + list(guest_libs):
        if not Path(binary).exists():
            raise VmError(f"{binary} is missing (run make)")
        if Path(binary) not in guest_libs:
            files.append((str(binary), f"/pvgpu/bin/{Path(binary).name}"))
        # The host's libcuda.so.1, if any, is NVIDIA's: never the guest's.
        libs.update({guest: host for host, guest in
                     guest_libraries(binary, skip=("libcudart", "libcuda.so"))})
    return files + [(host, guest) for guest, host in sorted(libs.items())]


def program_script(names, port=7100, window=True):
    """A guest script that runs each /pvgpu/bin program through pvgpu over
    vsock and prints `result NAME rc=N window=yes|no last=LAST LINE`; with
    window, it loads pvgpu.ko first.  Exits non-zero if any program failed."""
    lines = ["export LD_LIBRARY_PATH=/pvgpu/lib PVGPU_DEBUG=1",
             f"export PVGPU_DEVICES=vsock://2:{port}"]
    if window:
        lines += ["insmod /pvgpu.ko || echo 'FAIL: insmod pvgpu.ko'",
                  "ls -l /dev/pvgpu0 || echo 'FAIL: no /dev/pvgpu0'"]
    lines.append("failed=0")
    for name in names:
        lines += [f"/pvgpu/bin/{name} > /tmp/{name}.out 2>/tmp/{name}.err; rc=$?",
                  f"grep -q '{WINDOW_LINE}' /tmp/{name}.err && w=yes || w=no",
                  f"echo \"result {name} rc=$rc window=$w last=$(tail -n 1 /tmp/{name}.out)\"",
                  f"[ $rc = 0 ] || {{ failed=1; tail -n 20 /tmp/{name}.out /tmp/{name}.err; }}"]
    lines += ["grep -h 'shared window' /tmp/*.err | sort | uniq -c | sed 's/^/window: /'",
              "exit $failed"]
    return "\n".join(lines) + "\n"


def program_results(console):
    """{name: its `result` line} from a console of program_script."""
    return {line.split()[1]: line for line in console.splitlines()
            if line.startswith("result ")}


class AttachedVm:
    """One VM given a vGPU by qemu-device, as an operator without libvirt
    would: `pvgpu-vm qemu-args` (vhost-user vsock; the window file and the
    registry entry pvgpud reads) and `pvgpu-vm supervise` running its
    vhost-device-vsock.  close() releases all of it."""

    def __init__(self, run_dir, name, memory=None, window_size="64M", ram="1G",
                 log=None):
        binary = vhost_device_vsock()
        if not binary:
            raise VmError("no vhost-device-vsock (cargo install vhost-device-vsock@0.3.0)")
        self.run_dir, self.name, self.ram = str(run_dir), name, ram
        self.supervisor = None
        self._options = ["--vsock", "vhost-user", "--window-size", window_size,
                         "--ram", ram] + (["--memory", memory] if memory else [])
        self.args = self._pvgpu_vm_args()
        self.entry = self._entry()
        self.socket = self.entry["vsock.socket"]
        self.window_path = self.entry["window.path"]
        out = open(log, "wb") if log else subprocess.DEVNULL
        self.supervisor = subprocess.Popen(
            [str(PVGPU_VM), "--run-dir", self.run_dir, "supervise", name,
             "--vhost-device-vsock", binary], stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while not os.path.exists(self.socket):
            if self.supervisor.poll() is not None or time.monotonic() > deadline:
                self.close()
                raise VmError(f"vhost-device-vsock of {name} did not start")
            time.sleep(0.05)

    def _entry(self):
        entry = {}
        with open(os.path.join(self.run_dir, "vms", f"{self.name}.conf")) as f:
            for line in f:
                key, sep, value = line.partition("=")
                if sep and not line.startswith("#"):
                    entry[key.strip()] = value.strip()
        return entry

    def _pvgpu_vm_args(self, *extra):
        """What `pvgpu-vm qemu-args` prints for this VM, one per item."""
        proc = subprocess.run([str(PVGPU_VM), "--run-dir", self.run_dir, "qemu-args",
                               self.name, *self._options, *extra, "--format", "lines"],
                              capture_output=True, text=True, timeout=60)
        if proc.returncode != 0:
            raise VmError(f"pvgpu-vm qemu-args {self.name}: {proc.stderr.strip()}")
        return proc.stdout.split("\n")[:-1]

    def qemu_args(self, window=True):
        """The arguments qemu-args printed, less -m (qemu_command sets it)
        and, without `window`, less the ivshmem window: vsock alone."""
        return self._filtered(self.args, window)

    def incoming_args(self, uri):
        """qemu_args() of a live migration's destination waiting at `uri`
        (`pvgpu-vm qemu-args --incoming`: no vsock device)."""
        return self._filtered(self._pvgpu_vm_args("--incoming", uri), True)

    @staticmethod
    def _filtered(args, window):
        out, args = [], list(args)
        while args:
            opt = args.pop(0)
            value = args.pop(0) if args and not args[0].startswith("-") else None
            if opt == "-m":
                continue
            if not window and value and ("ivshmem" in value or "pvgpu-win" in value):
                continue
            out += [opt] + ([value] if value is not None else [])
        return out

    def close(self):
        if self.supervisor and self.supervisor.poll() is None:
            self.supervisor.terminate()
            try:
                self.supervisor.wait(10)
            except subprocess.TimeoutExpired:
                self.supervisor.kill()
                self.supervisor.wait()
        subprocess.run([str(PVGPU_VM), "--run-dir", self.run_dir, "release", self.name],
                       capture_output=True, timeout=60)


# ---- window files -----------------------------------------------------------

def parse_size(text):
    """'16M' -> 16777216; plain numbers are bytes."""
    m = re.fullmatch(r"(\d+)([KMG]?)i?B?", str(text).strip(), re.I)
    if not m:
        raise ValueError(f"bad size: {text!r}")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[
        m.group(2).upper()]


def make_window(path, size, window_id, magic=WINDOW_MAGIC,
                layout=WINDOW_LAYOUT, header_size=None):
    """Create (or overwrite) a window file of `size` bytes with a header.

    header_size is the size the header claims (default: the real size);
    magic, layout and header_size let tests write wrong headers.
    """
    if size < WINDOW_HDR_SIZE or size & (size - 1):
        raise ValueError("a window is a power of two, at least 4 KiB")
    hdr = _window.pack_header(
        _spec.WindowLayout(size=size if header_size is None else header_size,
                           window_id=window_id, staging_offset=WINDOW_HDR_SIZE,
                           slot_size=0, nslots=0),
        magic, layout)
    with open(path, "wb") as f:
        f.truncate(size)
        f.write(hdr)


def read_window_header(path):
    with open(path, "rb") as f:
        data = f.read(WINDOW_HDR_SIZE)
    magic, layout, fields = _window.unpack_header(data)
    return dict(magic=magic, layout=layout, **vars(fields))


# ---- a minimal ivshmem server (ivshmem-doorbell) ---------------------------

class IvshmemServer:
    """Serve one window to one QEMU ivshmem-doorbell device; test-only.

    Speaks QEMU's ivshmem server protocol (docs/specs/ivshmem-spec.rst):
    every message is a little-endian int64, some carry a file descriptor.
    The guest is peer GUEST_ID; the host is peer HOST_ID, with one eventfd
    per vector.  The guest rings the host with the doorbell register
    (peer HOST_ID); the host interrupts the guest by writing the guest's
    eventfd.  With `echo`, every ring on vector 0 is answered with an
    interrupt on vector 0, and counted in `rings`.

    The real host half (several VMs, reconnects) is qemu-device/.
    """

    GUEST_ID = 0
    HOST_ID = 1

    def __init__(self, sock_path, window_path, vectors=1, echo=True):
        self.sock_path = str(sock_path)
        self.window_path = str(window_path)
        self.vectors = vectors
        self.echo = echo
        self.rings = 0
        self.error = None
        self.host_fds = [os.eventfd(0, os.EFD_NONBLOCK)
                         for _ in range(vectors)]
        self.guest_fds = [os.eventfd(0) for _ in range(vectors)]
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.sock_path)
        self.listener.listen(1)
        self.stop_r, self.stop_w = os.pipe()
        self.conn = None
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def qemu_args(self, index=0):
        return ["-chardev", f"socket,id=ivsh{index},path={self.sock_path}",
                "-device",
                f"ivshmem-doorbell,chardev=ivsh{index},vectors={self.vectors}"]

    def interrupt(self, vector=0):
        os.eventfd_write(self.guest_fds[vector], 1)

    def _send(self, value, fd=None):
        data = struct.pack("<q", value)
        if fd is None:
            self.conn.sendall(data)
        else:
            socket.send_fds(self.conn, [data], [fd])

    def _serve(self):
        try:
            ready, _, _ = select.select([self.listener, self.stop_r], [], [])
            if self.stop_r in ready:
                return
            self.conn, _ = self.listener.accept()
            self._send(0)                       # protocol version
            self._send(self.GUEST_ID)           # the guest's peer id
            shm = os.open(self.window_path, os.O_RDWR)
            try:
                self._send(-1, shm)             # the shared memory
            finally:
                os.close(shm)
            for fd in self.host_fds:            # an existing peer: us
                self._send(self.HOST_ID, fd)
            for fd in self.guest_fds:           # the guest's own vectors
                self._send(self.GUEST_ID, fd)
            while True:
                ready, _, _ = select.select(
                    [self.host_fds[0], self.stop_r, self.conn], [], [])
                if self.stop_r in ready:
                    return
                if self.conn in ready and not self.conn.recv(1):
                    return                      # QEMU went away
                if self.host_fds[0] in ready:
                    n = os.eventfd_read(self.host_fds[0])
                    self.rings += n
                    if self.echo:
                        self.interrupt(0)
        except OSError as e:
            self.error = e

    def close(self):
        os.write(self.stop_w, b"x")
        self.thread.join(5)
        for fd in self.host_fds + self.guest_fds + [self.stop_r,
                                                   self.stop_w]:
            os.close(fd)
        if self.conn:
            self.conn.close()
        self.listener.close()
        try:
            os.unlink(self.sock_path)
        except FileNotFoundError:
            pass


# ---- the guest kernel ---------------------------------------------------------

# A guest kernel brought from elsewhere (make vm-bundle's), where none can
# be fetched: a folder laid out as fetch-kernel.sh leaves .deps/vm/KVER.
GUEST_KERNEL_ENV = "PVGPU_GUEST_KERNEL"


def _given_kernel():
    """(folder, version) of $PVGPU_GUEST_KERNEL, None where it is unset, or
    raise VmError where it holds no single kernel with its modules.dep."""
    given = os.environ.get(GUEST_KERNEL_ENV)
    if not given:
        return None
    kdir = Path(given)
    kvers = [p.name[len("vmlinuz-"):] for p in (kdir / "boot").glob("vmlinuz-*")]
    if len(kvers) != 1 or not (kdir / "lib" / "modules" / kvers[0] / "modules.dep").exists():
        raise VmError(f"{GUEST_KERNEL_ENV}={given}: not one boot/vmlinuz-KVER "
                      "with its lib/modules/KVER/modules.dep")
    return kdir, kvers[0]


def kernel_version():
    """The version of the installed headers, which is the guest's too (or
    of the kernel $PVGPU_GUEST_KERNEL names)."""
    given = _given_kernel()
    if given:
        return given[1]
    out = subprocess.run([str(REPO / "scripts/vm/kernel-version.sh")],
                         capture_output=True, text=True)
    if out.returncode != 0:
        raise VmError("no /usr/src/linux-headers-*-amd64 "
                      "(apt-get install linux-headers-amd64)")
    return out.stdout.strip()


def kernel_dir(kver=None, fetch=True):
    """.deps/vm/KVER, fetching the Debian kernel package if needed; or the
    folder $PVGPU_GUEST_KERNEL names, which must hold kver if given."""
    given = _given_kernel()
    if given:
        if kver and kver != given[1]:
            raise VmError(f"{GUEST_KERNEL_ENV} holds kernel {given[1]}, not {kver}")
        return given
    kver = kver or kernel_version()
    args = [str(REPO / "scripts/vm/fetch-kernel.sh")]
    if not fetch:
        args.append("--print")
    out = subprocess.run(args + [kver], capture_output=True, text=True)
    if out.returncode != 0:
        raise VmError(f"kernel {kver}: {out.stderr.strip()}")
    return Path(out.stdout.strip().splitlines()[-1]), kver


def _mod_name(path):
    name = os.path.basename(path).split(".ko")[0]
    return name.replace("-", "_")


def resolve_modules(kdir, kver, names):
    """Module files for `names` and everything they need, in load order.

    Built-in modules are skipped.  Returns [(name, path)].
    """
    moddir = Path(kdir) / "lib" / "modules" / kver
    deps = {}
    paths = {}
    for line in (moddir / "modules.dep").read_text().splitlines():
        mod, _, rest = line.partition(":")
        name = _mod_name(mod)
        paths[name] = moddir / mod
        deps[name] = [_mod_name(d) for d in rest.split()]
    builtin = set()
    builtin_file = moddir / "modules.builtin"
    if builtin_file.exists():
        builtin = {_mod_name(x) for x in builtin_file.read_text().split()}

    order = []

    def visit(name, chain):
        if name in order or name in builtin:
            return
        if name not in paths:
            raise VmError(f"kernel {kver} has no module {name}")
        if name in chain:
            raise VmError(f"module dependency loop at {name}")
        for dep in deps[name]:
            visit(dep, chain + [name])
        order.append(name)

    for name in names:
        visit(name.replace("-", "_"), [])
    return [(name, paths[name]) for name in order]


def _module_bytes(path):
    data = Path(path).read_bytes()
    if str(path).endswith(".xz"):
        return lzma.decompress(data)
    if str(path).endswith(".zst"):
        return subprocess.run(["zstd", "-dc", str(path)], check=True,
                              capture_output=True).stdout
    return data


# ---- initramfs ----------------------------------------------------------------

class Cpio:
    """A newc cpio archive in memory (what the kernel unpacks as rootfs)."""

    def __init__(self):
        self.parts = []
        self.ino = 1
        self.dirs = set()

    def _entry(self, name, mode, data=b"", rdev=(0, 0)):
        name_b = name.encode() + b"\0"
        fields = [self.ino, mode, 0, 0, 1, 0, len(data), 0, 0,
                  rdev[0], rdev[1], len(name_b), 0]
        self.ino += 1
        hdr = b"070701" + b"".join(b"%08X" % f for f in fields)
        self.parts.append(hdr + name_b)
        self.parts.append(b"\0" * (-(len(hdr) + len(name_b)) % 4))
        self.parts.append(data)
        self.parts.append(b"\0" * (-len(data) % 4))

    def mkdir(self, path):
        path = path.strip("/")
        if not path or path in self.dirs:
            return
        self.mkdir(os.path.dirname(path))
        self.dirs.add(path)
        self._entry(path, 0o040755)

    def file(self, path, data, mode=0o644):
        path = path.strip("/")
        self.mkdir(os.path.dirname(path))
        self._entry(path, 0o100000 | mode, data)

    def symlink(self, path, target):
        path = path.strip("/")
        self.mkdir(os.path.dirname(path))
        self._entry(path, 0o120777, target.encode())

    def chardev(self, path, major, minor, mode=0o600):
        path = path.strip("/")
        self.mkdir(os.path.dirname(path))
        self._entry(path, 0o020000 | mode, rdev=(major, minor))

    def bytes(self):
        self._entry("TRAILER!!!", 0)
        data = b"".join(self.parts)
        return data + b"\0" * (-len(data) % 512)


INIT_SCRIPT = """#!/bin/busybox sh
/bin/busybox --install -s
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
while read -r m; do
    [ -n "$m" ] || continue
    insmod "/lib/modules/$m.ko" || echo "pvgpu-guest: insmod $m failed"
done < /etc/pvgpu-modules
echo "pvgpu-guest: running /pvgpu-run"
sh /pvgpu-run
rc=$?
echo "pvgpu-guest: exit $rc"
sync
poweroff -f
"""


def _is_static_elf(path):
    """True for an ELF executable without a program interpreter."""
    with open(path, "rb") as f:
        ehdr = f.read(64)
        if ehdr[:4] != b"\x7fELF" or ehdr[4] != 2:    # 64-bit only
            return False
        phoff, = struct.unpack_from("<Q", ehdr, 32)
        phentsize, phnum = struct.unpack_from("<HH", ehdr, 54)
        f.seek(phoff)
        phdrs = f.read(phentsize * phnum)
    for i in range(phnum):
        p_type, = struct.unpack_from("<I", phdrs, i * phentsize)
        if p_type == 3:                                  # PT_INTERP
            return False
    return True


def busybox_path():
    """A static busybox for the initramfs: $PVGPU_BUSYBOX (make vm-bundle's),
    /bin/busybox, /usr/bin/busybox or busybox on PATH."""
    given = os.environ.get("PVGPU_BUSYBOX")
    if given:
        if not (os.path.exists(given) and _is_static_elf(given)):
            raise VmError(f"PVGPU_BUSYBOX={given}: not a static busybox")
        return given
    on_path = shutil.which("busybox")
    for cand in ("/bin/busybox", "/usr/bin/busybox") + ((on_path,) if on_path else ()):
        if os.path.exists(cand) and _is_static_elf(cand):
            return cand
    raise VmError("no static busybox (apt-get install busybox-static)")


def build_initramfs(out, script, files=(), modules=(), kdir=None, kver=None,
                    busybox=None):
    """Write an initramfs to `out`.

    script: shell text /init runs (its exit status becomes run()'s).
    files: [(host_path, guest_path)], made executable when the host file is.
    modules: kernel module names, loaded with their dependencies in order.
    """
    cpio = Cpio()
    for d in ("bin", "sbin", "usr/bin", "usr/sbin", "proc", "sys", "dev",
              "tmp", "etc", "lib/modules", "root"):
        cpio.mkdir(d)
    cpio.chardev("dev/console", 5, 1)
    cpio.chardev("dev/null", 1, 3, 0o666)
    cpio.file("bin/busybox", Path(busybox or busybox_path()).read_bytes(),
              0o755)
    cpio.symlink("bin/sh", "busybox")
    cpio.file("init", INIT_SCRIPT.encode(), 0o755)
    cpio.file("pvgpu-run", script.encode(), 0o755)

    names = []
    if modules:
        if kdir is None:
            kdir, kver = kernel_dir(kver)
        for name, path in resolve_modules(kdir, kver, modules):
            cpio.file(f"lib/modules/{name}.ko", _module_bytes(path))
            names.append(name)
    cpio.file("etc/pvgpu-modules", "".join(n + "\n" for n in names).encode())

    for src, dst in files:
        mode = 0o755 if os.access(src, os.X_OK) else 0o644
        cpio.file(dst, Path(src).read_bytes(), mode)

    Path(out).write_bytes(cpio.bytes())
    return names


# ---- running the guest --------------------------------------------------------

def qemu_binary():
    """$PVGPU_QEMU (make vm-bundle's bin/qemu, on a machine without QEMU),
    else qemu-system-x86_64 on PATH; or raise VmError."""
    given = os.environ.get("PVGPU_QEMU")
    if given:
        if not os.access(given, os.X_OK):
            raise VmError(f"PVGPU_QEMU={given}: not an executable")
        return given
    path = shutil.which("qemu-system-x86_64")
    if not path:
        raise VmError("no qemu-system-x86_64 (apt-get install qemu-system-x86)")
    return path


def window_args(windows):
    """QEMU arguments for ivshmem-plain windows: [(path, size)]."""
    args = []
    for i, (path, size) in enumerate(windows):
        args += ["-object",
                 f"memory-backend-file,id=pvgpuw{i},mem-path={path},"
                 f"size={size},share=on",
                 "-device", f"ivshmem-plain,memdev=pvgpuw{i}"]
    return args


GUEST_CMDLINE = ("console=ttyS0 panic=-1 quiet no_timer_check nosoftlockup "
                 "rcupdate.rcu_cpu_stall_suppress=1")


def qemu_command(initrd, kernel=None, append="", windows=(), memory="1G",
                 smp=1, accel="tcg", extra=()):
    if kernel is None:
        kdir, kver = kernel_dir()
        kernel = kdir / "boot" / f"vmlinuz-{kver}"
    # panic=-1 and -no-reboot: a guest that panics ends QEMU at once.
    # no_timer_check: on a loaded host a TCG guest's early check of the
    # IO-APIC timer can see no tick in its window and panic ("IO-APIC +
    # timer doesn't work!"), as a make test run here did; it is the usual
    # setting for virtual machines, whose timer is known to work.
    # nosoftlockup: a TCG guest whose QEMU a loaded host leaves unscheduled
    # for half a minute reports a soft lockup, with a BUG: line and a call
    # trace (one make test run here, in the guest's crypto self-test at
    # boot): the host's doing, which the tests that read dmesg for BUG:
    # must not take for the driver's.
    # rcupdate.rcu_cpu_stall_suppress=1: the same starvation past 21 s
    # reads as an RCU CPU stall, with call traces (a CI run, before the
    # driver was even loaded).  A driver that really stalled a CPU still
    # fails its test: the guest never reports back.
    cmdline = f"{GUEST_CMDLINE} " + append
    return ([qemu_binary(), "-accel", accel, "-m", str(memory),
             "-smp", str(smp), "-nographic", "-no-reboot",
             # No network card or display: nothing to probe, no option ROM.
             "-nic", "none", "-vga", "none",
             "-kernel", str(kernel), "-initrd", str(initrd),
             "-append", cmdline.strip()]
            + window_args(windows) + list(extra))


def virtfs_args(path, tag, readonly=True):
    """QEMU arguments sharing the host folder `path` with the guest as 9p
    mount tag `tag` (the guest: mount -t 9p -o trans=virtio TAG DIR).
    multidevs=remap: a folder holding other mounts (/) has files of several
    host devices, whose inode numbers would clash in the guest."""
    opts = [f"local,path={path}", f"mount_tag={tag}", "security_model=none",
            "multidevs=remap"] + (["readonly=on"] if readonly else [])
    return ["-virtfs", ",".join(opts)]


def kvm_boots(kdir, kver, tmp):
    """Whether a guest really boots under KVM here: /dev/kvm may exist where
    nested virtualisation cannot run a guest (DESIGN section 7), so try
    one, briefly."""
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return False
    initrd = Path(tmp) / "probe.cpio"
    build_initramfs(initrd, "exit 0\n", kdir=kdir, kver=kver)
    cmd = qemu_command(initrd, kernel=Path(kdir) / "boot" / f"vmlinuz-{kver}",
                       memory="256M", accel="kvm")
    status, _ = run(cmd, 20.0, echo=False)
    return status == 0


# ---- the console's text ----------------------------------------------------------
#
# A serial console carries what firmware and the guest write for a terminal,
# not for a log: SeaBIOS resets the terminal (ESC c), clears it, switches
# auto-wrap off (ESC [?7l) and never back on, and lines end in CR LF.  Passed
# through, that wipes the lines above it and leaves the user's shell without
# line wrap; in a log or an assertion it is noise.  So what is shown or kept
# is the text alone: escape sequences, CR and every other control character
# but newline and tab removed.

_ESCAPES = re.compile(
    r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)"    # OSC ... BEL or ST: a window title
    r"|\x1b[PX^_][^\x1b]*\x1b\\"            # DCS, SOS, PM, APC ... ST
    r"|\x1b\[[0-?]*[ -/]*[@-~]"             # CSI: ESC [2J, ESC [?7l, colours
    r"|\x9b[0-?]*[ -/]*[@-~]"               # CSI as one C1 character
    r"|\x1b[ -/]*[0-OQ-WYZ\\`-~]")          # ESC c, ESC 7, ESC ( B: any final
                                            # but those opening the above
# What is left of a sequence cut at the end of a piece of output.
_ESCAPE_TAIL = re.compile(
    r"(?:\x1b(?:\][^\x07\x1b]*\x1b?|[PX^_][^\x1b]*\x1b?|\[[0-?]*[ -/]*|[ -/]*)"
    r"|\x9b[0-?]*[ -/]*)\Z")
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def console_text(text):
    """The console's text: `text` without terminal escape sequences (CSI,
    OSC, ESC c and the like), CRs or other control characters; newlines and
    tabs stay.  Of a sequence that never finishes only the ESC goes."""
    return _CONTROLS.sub("", _ESCAPES.sub("", text))


class ConsoleFilter:
    """console_text() for output that arrives in pieces: feed() takes bytes
    as they come and returns the text ready to show; a multibyte character
    or an escape sequence cut between two pieces is held until the next
    (up to HOLD_MAX characters of it: a longer one is taken for a sequence
    that never finishes).  feed(b"", final=True) returns what is held."""

    HOLD_MAX = 256

    def __init__(self):
        self._decode = codecs.getincrementaldecoder("utf-8")(errors="replace").decode
        self._held = ""

    def feed(self, data, final=False):
        text = self._held + self._decode(data, final)
        self._held = ""
        if not final:
            cut = _ESCAPE_TAIL.search(text)
            if cut and len(text) - cut.start() <= self.HOLD_MAX:
                text, self._held = text[:cut.start()], text[cut.start():]
        return console_text(text)


def run(cmd, timeout=120.0, log=None, echo=True, stop=None):
    """Run QEMU until it exits or `timeout` seconds pass (or `stop`, a
    threading.Event, is set: counted as a timeout).

    Returns (status, console): the guest script's exit status, 124 on a
    timeout, or 125 when the guest stopped without reporting one (a panic,
    QEMU refusing its arguments).  What is echoed, logged and returned is
    the console's text (console_text()): no escape sequences, no CRs.
    """
    logf = open(log, "w", encoding="utf-8") if log else None
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    chunks = []
    text = ConsoleFilter()
    deadline = time.monotonic() + timeout
    timed_out = False
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or (stop is not None and stop.is_set()):
                timed_out = True
                break
            ready, _, _ = select.select([proc.stdout], [], [], min(left, 1.0))
            if not ready:
                continue
            data = os.read(proc.stdout.fileno(), 65536)
            if not data:
                break
            shown = text.feed(data)
            chunks.append(shown)
            if echo:
                sys.stdout.write(shown)
                sys.stdout.flush()
            if logf:
                logf.write(shown)
                logf.flush()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        proc.stdout.close()
        rest = text.feed(b"", final=True)
        chunks.append(rest)
        if echo:
            sys.stdout.write(rest)
            sys.stdout.flush()
        if logf:
            logf.write(rest)
            logf.close()

    console = "".join(chunks)
    if timed_out:
        return 124, console
    m = re.search(re.escape(EXIT_MARK) + r"(\d+)", console)
    return (int(m.group(1)) if m else 125), console


# ---- command line ---------------------------------------------------------------

def _file_arg(text):
    src, _, dst = text.partition(":")
    return src, dst or "/" + os.path.basename(src)


def _window_arg(text):
    path, _, size = text.partition(":")
    if not size:
        size = os.path.getsize(path)
    return path, parse_size(size)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)

    w = sub.add_parser("window", help="create a window file with a header")
    w.add_argument("path")
    w.add_argument("--size", default="16M")
    w.add_argument("--id", type=int, default=1)
    w.add_argument("--magic", type=lambda s: int(s, 0), default=WINDOW_MAGIC)
    w.add_argument("--layout", type=int, default=WINDOW_LAYOUT)
    w.add_argument("--header-size", type=parse_size,
                   help="size the header claims (default: the file's)")

    i = sub.add_parser("initramfs", help="build a busybox initramfs")
    i.add_argument("-o", "--output", required=True)
    i.add_argument("--script", required=True,
                   help="shell script /init runs; its status is the VM's")
    i.add_argument("--file", action="append", default=[], type=_file_arg,
                   metavar="SRC[:DEST]")
    i.add_argument("--module", action="append", default=[],
                   help="kernel module to load (dependencies follow); "
                   "'vsock' for the whole virtio-vsock stack")
    i.add_argument("--kver", help="default: the installed headers' version")

    r = sub.add_parser("run", help="boot the guest; exit with its status")
    r.add_argument("--initrd", required=True)
    r.add_argument("--kernel", help="default: the fetched Debian kernel")
    r.add_argument("--append", default="", help="more kernel arguments")
    r.add_argument("--window", action="append", default=[], type=_window_arg,
                   metavar="PATH[:SIZE]", help="an ivshmem-plain window")
    r.add_argument("--memory", default="1G")
    r.add_argument("--smp", type=int, default=1)
    r.add_argument("--accel", default="tcg")
    r.add_argument("--timeout", type=float, default=120)
    r.add_argument("--log", help="copy of the serial console")
    r.add_argument("qemu_args", nargs="*", help="after --: more for QEMU")

    a = ap.parse_args(argv)
    try:
        if a.cmd == "window":
            make_window(a.path, parse_size(a.size), a.id, a.magic, a.layout,
                        a.header_size)
            return 0
        if a.cmd == "initramfs":
            mods = []
            for m in a.module:
                mods += {"vsock": VSOCK_MODULES, "9p": NINEP_MODULES}.get(m, [m])
            kdir, kver = (None, None)
            if mods:
                kdir, kver = kernel_dir(a.kver)
            build_initramfs(a.output, Path(a.script).read_text(), a.file,
                            mods, kdir, kver)
            return 0
        cmd = qemu_command(a.initrd, a.kernel, a.append, a.window, a.memory,
                           a.smp, a.accel, a.qemu_args)
        status, _ = run(cmd, a.timeout, a.log)
        if status == 124:
            print(f"pvgpuvm: guest still running after {a.timeout:g} s; "
                  "stopped it", file=sys.stderr)
        elif status == 125:
            print("pvgpuvm: guest stopped without reporting a status",
                  file=sys.stderr)
        return status
    except (VmError, OSError, ValueError) as e:
        print(f"pvgpuvm: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
