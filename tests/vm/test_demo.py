"""make demo (scripts/demo_vm.py) as a newcomer meets it: one guest boot
(about a minute under TCG), then what they would check by eye — the output
is plain text a terminal shows as it is (no escape codes or CRs from the
guest's console), the table comes with its legend, pvgpu-synth ran over
pvgpu's driver front-end libcuda.so.1 with NVIDIA's runtime above it,
linked into the program, and pvgpud logged the guest's session.
"""
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent
BUILD = REPO / os.environ.get("PVGPU_BUILD", "build")


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, REPO / path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


vm = load("scripts/vm/pvgpuvm.py", "pvgpuvm")
demo = load("scripts/demo_vm.py", "demo_vm")


def test_guest_carries_libcuda_and_no_runtime_library():
    """What the demo puts in the guest: pvgpu-synth, with NVIDIA's runtime
    linked in, and pvgpu's libcuda.so.1 alone in /pvgpu/lib, as a user's
    guest has them; no libcudart.so.13 of anyone's."""
    synth = BUILD / "bench" / "pvgpu-synth"
    if not (BUILD / "lib" / "libcuda.so.1").exists() or not synth.exists():
        pytest.skip("libcuda.so.1 or pvgpu-synth is not built (run make)")
    files = {guest: Path(host) for host, guest in
             vm.program_files(BUILD, [synth], runtime=False)}
    assert files["/pvgpu/lib/libcuda.so.1"].resolve() == \
        (BUILD / "lib" / "libcuda.so.1").resolve()
    assert [g for g in files if g.startswith("/pvgpu/lib/")] == ["/pvgpu/lib/libcuda.so.1"]
    assert not [g for g in files if "libcudart" in g], files
    assert files["/pvgpu/bin/pvgpu-synth"] == synth


@pytest.mark.vm
def test_demo_output_is_plain_and_says_what_ran_where():
    try:
        vm.qemu_binary()
    except vm.VmError as e:
        pytest.skip(f"{e}: no guest to boot")
    if not vm.vhost_device_vsock():
        pytest.skip("no vhost-device-vsock: no guest to boot")
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "demo_vm.py"),
                           "--build", str(BUILD)], capture_output=True, timeout=600)
    out, err = proc.stdout, proc.stderr.decode(errors="replace")
    text = out.decode(errors="replace")
    if proc.returncode == 3:
        pytest.skip(f"no guest can be booted here: {err.strip()}")
    assert proc.returncode == 0, text[-4000:] + err
    # A terminal shows it as it is: only printable text, newlines and tabs.
    controls = sorted({b for b in out if (b < 0x20 and b not in b"\n\t") or b == 0x7f})
    assert not controls, f"control bytes {controls} in\n{text[-4000:]}"
    # The guest's console came through: its firmware and its /init.
    assert "SeaBIOS" in text and "pvgpu-guest: exit 0" in text, text[-4000:]

    # pvgpu-synth's table, then its legend, columns and executor explained.
    table = text.index("xfer share plan/run")
    assert text.index(demo.SYNTH_LEGEND.splitlines()[0]) > table, text[-4000:]
    for column in ("steps", "GB moved", "iters/launch", "xfer share plan/run",
                   "xfer MB/s"):
        assert f"  {column} " in text[table + 1:], column
    executor = "sim" if "executor sim" in text.splitlines()[0] else "cuda"
    note = demo.SIM_NOTE if executor == "sim" else demo.CUDA_NOTE
    assert note in text, text[-4000:]

    # Through pvgpu's driver front-end, under NVIDIA's runtime linked in;
    # the summary repeats both lines.
    for line in ("CUDA runtime: NVIDIA's, linked in",
                 "CUDA driver /pvgpu/lib/libcuda.so.1 (pvgpu's front-end)"):
        assert f"pvgpu-synth: {line}" in text, text[-4000:]
        assert f"             {line}" in text[text.index("demo: summary"):], text[-4000:]

    # The summary, last: where it ran and pvgpud's own session lines.
    summary = text[text.index("demo: summary"):]
    assert re.search(r"guest +Debian kernel \S+ under (TCG|KVM)", summary), summary
    assert f"pvgpud --executor {executor}" in summary, summary
    assert re.search(r"pvgpud +session \d+ start: vm demo\d+ via vhost-user", summary), summary
    assert re.search(r"session \d+ end: vm demo\d+ .*, \d+ calls, .*, ok$", summary,
                     re.M), summary


@pytest.mark.vm
def test_without_qemu_the_demo_takes_a_vm_bundle_from_build(vm_bundle, tmp_path, monkeypatch):
    """On a machine without QEMU (the GPU host), a vm-bundle.tar.xz
    brought into the build folder is what the demo boots with: unpacked
    once into build/vm-bundle/, its variables set.  (The boot itself from
    an unpacked bundle is test_guest_vm.py's.)"""
    build = tmp_path / "build"
    build.mkdir()
    assert not demo.use_vm_bundle(build)
    shutil.copy(vm_bundle, build / "vm-bundle.tar.xz")
    for key in ("PVGPU_QEMU", "PVGPU_GUEST_KERNEL", "PVGPU_GUEST_KO",
                "PVGPU_VHOST_DEVICE_VSOCK", "PVGPU_BUSYBOX"):
        monkeypatch.delenv(key, raising=False)
    assert demo.use_vm_bundle(build)
    top = build / "vm-bundle" / "vm-bundle"
    assert os.environ["PVGPU_QEMU"] == str(top / "bin" / "qemu")
    assert os.environ["PVGPU_GUEST_KO"] == str(top / "guest" / "pvgpu.ko")
    assert vm.qemu_binary() == str(top / "bin" / "qemu")
    # Once per archive: the same one again is not unpacked again.
    marker = top / "unpacked-once"
    marker.write_text("")
    assert demo.use_vm_bundle(build) and marker.exists()
