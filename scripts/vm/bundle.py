#!/usr/bin/env python3
"""make vm-bundle: everything a guest VM needs, in one archive, for a
machine that has none of it (the GPU host: no package registry, no QEMU).

    scripts/vm/bundle.py -o build/vm-bundle.tar.xz [--build build]

The archive unpacks into vm-bundle/:

  bin/qemu                  QEMU's launcher: this bundle's libraries, TCG
                            module and firmware, wherever it is unpacked
  bin/qemu-system-x86_64    the same launcher, for PATH
  bin/vhost-device-vsock    the vsock back-end (pvgpu-vm supervise)
  bin/busybox               static, for the initramfs
  env                       prints the variables that point
                            scripts/vm/pvgpuvm.py at all of this:
                            eval "$(vm-bundle/env)"
  libexec/, lib/, share/qemu/   QEMU itself, every library it loads but
                            glibc's own, its TCG module, its firmware
  guest/KVER/               the guest kernel and the modules the initramfs
                            loads (pvgpuvm.VSOCK_MODULES, NINEP_MODULES), as .deps/vm/KVER
  guest/pvgpu.ko            built for that kernel

The same inputs give the same bytes (names sorted, times, owners and modes
fixed, xz without a time stamp).  It prints its size and fails, leaving no
archive, when that is over the limit (64 MiB: what one call to the GPU
machine carries).  Exit codes: 0 done, 1 failure (one line on stderr).
"""
import argparse
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path


def _load_pvgpuvm():
    """pvgpuvm.py, beside this file, which finds and builds what goes in:
    loaded by path, since `import pvgpuvm` may find qemu-device's package
    of that name (already imported in a test run, or first on the path)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "pvgpuvm", Path(__file__).resolve().parent / "pvgpuvm.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


vm = _load_pvgpuvm()

LIMIT = 64 << 20
TOP = "vm-bundle"

# glibc's own libraries stay the host's: they call each other through
# GLIBC_PRIVATE symbols, so one of them from another glibc breaks the rest.
GLIBC = {"ld-linux-x86-64.so.2", "libc.so.6", "libm.so.6", "libpthread.so.0",
         "libdl.so.2", "librt.so.1", "libresolv.so.2", "libutil.so.1",
         "libanl.so.1", "libmvec.so.1"}

# What `qemu_command` (-kernel, -nic none, -vga none) reads of QEMU's data:
# SeaBIOS and the option ROM that loads the kernel over fw_cfg DMA (without
# either no guest boots under TCG: tests/vm/test_guest_vm.py boots with the
# system's folders of QEMU's data hidden), and the one KVM's APIC loads, for
# a guest under KVM where it works (scripts/demo_vm.py tries it).
FIRMWARE = ["bios-256k.bin", "kvmvapic.bin", "linuxboot_dma.bin"]

# QEMU's loadable modules that such a guest needs: Debian builds TCG as one.
QEMU_MODULES = ["accel-tcg-x86_64.so"]

LAUNCHER = """#!/bin/sh
# qemu-system-x86_64 from pvgpu's VM bundle, wherever it was unpacked: its
# own libraries (before the host's), TCG module and firmware.
top=$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)
LD_LIBRARY_PATH="$top/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
QEMU_MODULE_DIR="$top/lib/qemu"
export LD_LIBRARY_PATH QEMU_MODULE_DIR
exec "$top/libexec/qemu-system-x86_64" -L "$top/share/qemu" "$@"
"""

# The variables `env` sets (scripts/vm/pvgpuvm.py reads them).
ENV_VARS = ("PVGPU_QEMU", "PVGPU_VHOST_DEVICE_VSOCK", "PVGPU_BUSYBOX",
            "PVGPU_GUEST_KERNEL", "PVGPU_GUEST_KVER", "PVGPU_GUEST_KO")

ENV_SCRIPT = """#!/bin/sh
# The variables that point scripts/vm/pvgpuvm.py (make demo, tests/vm) at
# this bundle: eval "$(PATH/TO/vm-bundle/env)"
top=$(cd "$(dirname "$(readlink -f "$0")")" && pwd)
echo "export PVGPU_QEMU='$top/bin/qemu'"
echo "export PVGPU_VHOST_DEVICE_VSOCK='$top/bin/vhost-device-vsock'"
echo "export PVGPU_BUSYBOX='$top/bin/busybox'"
echo "export PVGPU_GUEST_KERNEL='$top/guest/{kver}'"
echo "export PVGPU_GUEST_KVER='{kver}'"
echo "export PVGPU_GUEST_KO='$top/guest/pvgpu.ko'"
"""


class BundleError(Exception):
    """Something the bundle needs is missing, or the bundle is too big."""


class TooBig(BundleError):
    """The bundle is over its limit."""


def qemu_data_dirs(qemu):
    """The folders QEMU searches for firmware (`-L help`)."""
    out = subprocess.run([qemu, "-L", "help"], capture_output=True, text=True,
                         timeout=30).stdout
    return [Path(line.strip()).resolve() for line in out.splitlines()
            if line.strip().startswith("/")]


def qemu_module_dir(qemu):
    """The folder of QEMU's loadable modules beside its binary, or None
    where it was built with none."""
    prefix = Path(qemu).resolve().parent.parent
    for cand in (prefix / "lib" / "x86_64-linux-gnu" / "qemu", prefix / "lib64" / "qemu",
                 prefix / "lib" / "qemu"):
        if (cand / QEMU_MODULES[0]).exists():
            return cand
    return None


def find_in(dirs, name):
    for d in dirs:
        if (d / name).is_file():
            return (d / name).resolve()
    raise BundleError(f"QEMU's {name} is in none of {', '.join(map(str, dirs))}")


def gather(build, qemu=None, vhost=None):
    """{name in the archive: (host file or bytes, mode)} and the symlinks
    {name: target}; raises BundleError naming what is missing."""
    qemu = qemu or shutil.which("qemu-system-x86_64")
    if not qemu:
        raise BundleError("no qemu-system-x86_64 (apt-get install qemu-system-x86)")
    qemu = str(Path(qemu).resolve())
    vhost = vhost or vm.vhost_device_vsock()
    if not vhost:
        raise BundleError("no vhost-device-vsock (cargo install vhost-device-vsock@0.3.0)")
    try:
        kdir, kver = vm.kernel_dir()
        ko = vm.guest_driver(kver, Path(build).resolve() / "guest-driver")
        busybox = vm.busybox_path()
        modules = vm.resolve_modules(kdir, kver, vm.VSOCK_MODULES + vm.NINEP_MODULES)
    except vm.VmError as e:
        raise BundleError(str(e)) from e

    files = {"bin/qemu": (LAUNCHER.encode(), 0o755),
             "env": (ENV_SCRIPT.replace("{kver}", kver).encode(), 0o755),
             "libexec/qemu-system-x86_64": (qemu, 0o755),
             "bin/vhost-device-vsock": (str(Path(vhost).resolve()), 0o755),
             "bin/busybox": (busybox, 0o755),
             "guest/pvgpu.ko": (str(ko), 0o644)}
    links = {"bin/qemu-system-x86_64": "qemu"}

    loaded = [qemu]
    moddir = qemu_module_dir(qemu)
    if moddir:
        for name in QEMU_MODULES:
            files[f"lib/qemu/{name}"] = (str(moddir / name), 0o644)
            loaded.append(str(moddir / name))
    for binary in loaded:
        for host, path in vm.guest_libraries(binary, skip=()):
            name = os.path.basename(path)
            if name not in GLIBC:
                files[f"lib/{name}"] = (host, 0o644)

    data = qemu_data_dirs(qemu)
    for name in FIRMWARE:
        files[f"share/qemu/{name}"] = (str(find_in(data, name)), 0o644)

    # The kernel as .deps/vm/KVER holds it, but for the modules the
    # initramfs loads: modules.dep names those alone, so it is whole.
    guest = f"guest/{kver}"
    kmods = Path(kdir) / "lib" / "modules" / kver
    files[f"{guest}/boot/vmlinuz-{kver}"] = (str(Path(kdir) / "boot" / f"vmlinuz-{kver}"), 0o644)
    keep = {str(Path(p).relative_to(kmods)) for _, p in modules}
    dep = [line for line in (kmods / "modules.dep").read_text().splitlines()
           if line.partition(":")[0] in keep]
    files[f"{guest}/lib/modules/{kver}/modules.dep"] = (("\n".join(dep) + "\n").encode(), 0o644)
    if (kmods / "modules.builtin").exists():
        files[f"{guest}/lib/modules/{kver}/modules.builtin"] = \
            (str(kmods / "modules.builtin"), 0o644)
    for rel in keep:
        files[f"{guest}/lib/modules/{kver}/{rel}"] = (str(kmods / rel), 0o644)
    return files, links


def _is_elf(path):
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def content(src, name, tmp):
    """The bytes the archive holds for `name`: programs and libraries with
    their debug information and unneeded symbols stripped (copies; the
    kernel modules keep their signatures, busybox is small already)."""
    if isinstance(src, bytes):
        return src
    if name.startswith(("libexec/", "lib/", "bin/vhost")) and _is_elf(src):
        out = Path(tmp) / "stripped"
        proc = subprocess.run(["strip", "--strip-unneeded", "-o", str(out), src],
                              capture_output=True, text=True)
        if proc.returncode == 0:
            return out.read_bytes()
    return Path(src).read_bytes()


def tar_bytes(files, links):
    """An uncompressed tar of `files` and `links` under TOP/, the same bytes
    for the same contents: sorted, time 0, owner 0:0 without names."""
    buf = io.BytesIO()
    with tempfile.TemporaryDirectory() as tmp, \
            tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        entries = {**{n: ("file", v) for n, v in files.items()},
                   **{n: ("link", v) for n, v in links.items()}}
        dirs = set()
        for name in entries:
            parent = os.path.dirname(name)
            while parent:
                dirs.add(parent)
                parent = os.path.dirname(parent)
        for name in sorted(set(entries) | dirs | {""}):
            info = tarfile.TarInfo(f"{TOP}/{name}".rstrip("/"))
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            kind, value = entries.get(name, ("dir", None))
            if kind == "dir":
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            elif kind == "link":
                info.type, info.mode, info.linkname = tarfile.SYMTYPE, 0o777, value
                tar.addfile(info)
            else:
                src, info.mode = value
                data = content(src, name, tmp)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


# xz's fastest preset: on this project's 2-core CI machine it compresses
# the 59 MiB in about 5 CPU-seconds to 22 MiB, where the default (-6) takes
# 37 for 20 MiB; the VM tests build the bundle twice.
PRESET = 0


def build_bundle(out, build="build", qemu=None, vhost=None, limit=LIMIT, preset=PRESET):
    """Write the bundle to `out`; return (its size, how many files)."""
    import lzma
    files, links = gather(build, qemu, vhost)
    data = lzma.compress(tar_bytes(files, links), format=lzma.FORMAT_XZ,
                         check=lzma.CHECK_CRC64, preset=preset)
    if len(data) > limit:
        raise TooBig(f"{out} would be {len(data) / 2**20:.1f} MiB ({len(data)} bytes), "
                     f"over the limit of {limit} bytes ({limit / 2**20:g} MiB)")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    part = out.with_name(out.name + ".part")
    part.write_bytes(data)
    part.replace(out)
    return len(data), len(files)


def unpack(archive, where):
    """The bundle at `archive` unpacked into `where` (tar's data filter:
    nothing outside it, no devices), and the variables its `env` prints:
    {PVGPU_QEMU: ..., ...}."""
    import tarfile
    with tarfile.open(archive) as tar:
        tar.extractall(where, filter="data")
    return unpack_env(where)


def unpack_env(where):
    """The variables the `env` of a bundle unpacked into `where` prints."""
    import shlex
    printed = subprocess.run([str(Path(where) / TOP / "env")], capture_output=True,
                             text=True, check=True, timeout=30).stdout
    return dict(shlex.split(line)[1].split("=", 1) for line in printed.splitlines())


def brought(build):
    """Where a machine without QEMU (the GPU host) was brought make
    vm-bundle's archive, as BUILD/vm-bundle.tar.xz: unpacked into
    BUILD/vm-bundle/ once per archive; the variables its `env` prints, or
    None where there is no archive."""
    archive = Path(build) / "vm-bundle.tar.xz"
    if not archive.is_file():
        return None
    where = Path(build) / "vm-bundle"
    stamp = where / ".from"
    said = f"{archive.stat().st_size} {archive.stat().st_mtime_ns}\n"
    if stamp.is_file() and stamp.read_text() == said:
        return unpack_env(where)
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    env = unpack(archive, where)
    stamp.write_text(said)
    return env


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--output", required=True)
    ap.add_argument("--build", default="build",
                    help="build tree pvgpu.ko is built into (BUILD/guest-driver)")
    ap.add_argument("--qemu", help="default: qemu-system-x86_64 on PATH")
    ap.add_argument("--vhost-device-vsock", help="default: as pvgpuvm finds it")
    a = ap.parse_args(argv)
    try:
        size, count = build_bundle(a.output, a.build, a.qemu, a.vhost_device_vsock)
    except (BundleError, OSError, subprocess.SubprocessError) as e:
        print(f"vm-bundle: {e}", file=sys.stderr)
        return 1
    print(f"vm-bundle: {a.output}: {size / 2**20:.1f} MiB ({size} bytes, {count} files; "
          f"limit {LIMIT >> 20} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
