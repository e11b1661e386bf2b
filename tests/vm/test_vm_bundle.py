"""make vm-bundle's archive (scripts/vm/bundle.py) without a boot of its own
(test_guest_vm.py boots its guests from it): built twice, byte for byte the
same and small enough for one call to the GPU machine; what it holds; and
its QEMU loading every library but glibc's from the bundle."""
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent
BUILD = REPO / os.environ.get("PVGPU_BUILD", "build")
SCRIPT = REPO / "scripts" / "vm" / "bundle.py"

pytestmark = pytest.mark.vm


def test_two_builds_are_the_same_bytes_and_under_64_mib(bundle_script, vm_bundle, tmp_path):
    """The second build as make vm-bundle runs it, into another folder."""
    again = tmp_path / "again" / "vm-bundle.tar.xz"
    # From the system's inputs, as the first, never from a bundle unpacked.
    env = {k: v for k, v in os.environ.items() if k not in bundle_script.ENV_VARS}
    out = subprocess.run([sys.executable, str(SCRIPT), "--build", str(BUILD),
                          "-o", str(again)], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert again.read_bytes() == vm_bundle.read_bytes()
    size = os.path.getsize(again)
    assert size < 64 << 20
    # What it prints: where, how big, the limit.
    assert re.fullmatch(rf"vm-bundle: {re.escape(str(again))}: {size / 2**20:.1f} MiB "
                        rf"\({size} bytes, \d+ files; limit 64 MiB\)\n", out.stdout), out.stdout


def test_over_the_limit_it_fails_and_leaves_no_archive(bundle_script, tmp_path, monkeypatch):
    """Contents that do not compress below the limit: no archive, and the
    message says the size and the limit."""
    monkeypatch.setattr(bundle_script, "gather",
                        lambda *_: ({"bin/noise": (os.urandom(8192), 0o644)}, {}))
    out = tmp_path / "small.tar.xz"
    with pytest.raises(bundle_script.TooBig, match=r"\(\d+ bytes\), over the limit of 4096 bytes"):
        bundle_script.build_bundle(out, BUILD, limit=4 << 10)
    assert not list(tmp_path.iterdir())
    bundle_script.build_bundle(out, BUILD, limit=16 << 10)
    assert out.exists() and [p.name for p in tmp_path.iterdir()] == [out.name]


def test_it_holds_what_a_guest_needs_owned_by_nobody_at_time_0(bundle_script, vm_bundle):
    with tarfile.open(vm_bundle) as tar:
        members = {m.name: m for m in tar.getmembers()}
    top = bundle_script.TOP
    for name in ("bin/qemu", "libexec/qemu-system-x86_64", "bin/vhost-device-vsock",
                 "bin/busybox", "env", "guest/pvgpu.ko"):
        assert members[f"{top}/{name}"].isfile(), name
    assert members[f"{top}/bin/qemu-system-x86_64"].linkname == "qemu"
    for name in bundle_script.FIRMWARE:
        assert f"{top}/share/qemu/{name}" in members, name
    kernels = [n for n in members if re.fullmatch(rf"{top}/guest/[^/]+/boot/vmlinuz-.*", n)]
    assert len(kernels) == 1, kernels
    # The modules of vsock (every guest) and of 9p (the GPU tests' guest
    # that enters the host's root filesystem).
    kos = {os.path.basename(n).split(".ko")[0].replace("-", "_") for n in members
           if re.search(r"/lib/modules/.*\.ko", n)}
    wanted = bundle_script.vm.VSOCK_MODULES + bundle_script.vm.NINEP_MODULES
    assert set(wanted) <= kos, set(wanted) - kos
    # glibc's own libraries stay the host's.
    libs = {os.path.basename(n) for n in members if n.startswith(f"{top}/lib/")}
    assert libs and not libs & bundle_script.GLIBC, libs & bundle_script.GLIBC
    assert {(m.uid, m.gid, m.uname, m.gname, m.mtime) for m in members.values()} == \
        {(0, 0, "", "", 0)}
    assert list(members) == sorted(members)


def test_its_qemu_loads_every_library_but_glibcs_from_the_bundle(bundle_script, vm_bundle_env):
    """As the launcher (bin/qemu) runs it: the loader resolves each library
    QEMU and its TCG module load to the bundle's lib/, but glibc's own."""
    top = vm_bundle_env["dir"]
    loaded = [top / "libexec" / "qemu-system-x86_64"] + \
        sorted((top / "lib" / "qemu").glob("*.so"))
    for binary in loaded:
        out = subprocess.run(["ldd", str(binary)], capture_output=True, text=True,
                             env={"LD_LIBRARY_PATH": str(top / "lib"),
                                  "PATH": os.environ["PATH"]}, timeout=30).stdout
        for line in out.splitlines():
            name = line.split()[0]
            if "=>" not in line or os.path.basename(name) in bundle_script.GLIBC:
                continue
            assert f"=> {top}/lib/{name} " in line, f"{binary}: {line.strip()}"
    # The launcher runs from anywhere; this one says its version.
    res = subprocess.run([str(top / "bin" / "qemu-system-x86_64"), "-version"],
                         capture_output=True, text=True, timeout=30,
                         env={"PATH": "/usr/bin:/bin"})
    assert res.returncode == 0 and res.stdout.startswith("QEMU emulator version"), \
        res.stdout + res.stderr
