"""The window header layout is defined once, in common/window.h (DESIGN §1).

The kernel module includes that header; the Python tools cannot, so each
Python copy of a constant, a struct format or a counter offset is checked
here against what a C compiler says about the header: change the header
without them and this fails, naming the copy that is now wrong.
"""
import importlib.util
import os
import shutil
import struct
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PROBE = r"""
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include "window.h"
int main(void)
{
	struct pvgpu_window_header h;

	printf("magic %u\nlayout %u\nhdr_size %u\nsize %zu\n",
	       PVGPU_WINDOW_MAGIC, PVGPU_WINDOW_LAYOUT, PVGPU_WINDOW_HDR_SIZE,
	       sizeof(h));
#define OFF(f) printf(#f " %zu\n", offsetof(struct pvgpu_window_header, f))
	OFF(size); OFF(window_id); OFF(staging_offset); OFF(slot_size);
	OFF(nslots); OFF(reserved); OFF(h2d_filled); OFF(h2d_done);
	OFF(d2h_ready); OFF(d2h_taken);
	memset(&h, 0, sizeof(h));
	h.magic = PVGPU_WINDOW_MAGIC; h.layout = PVGPU_WINDOW_LAYOUT;
	h.size = 16u << 20; h.window_id = 0x123456789ABCDEF0ull;
	h.staging_offset = 4096; h.slot_size = 1u << 20; h.nslots = 8;
	printf("bytes ");
	for (size_t i = 0; i < offsetof(struct pvgpu_window_header, reserved); i++)
		printf("%02x", ((unsigned char *)&h)[i]);
	printf("\n");
	return 0;
}
"""


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory):
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler to read common/window.h with")
    d = tmp_path_factory.mktemp("window")
    (d / "probe.c").write_text(PROBE)
    subprocess.run([cc, "-std=c11", f"-I{REPO}/common", "-o", str(d / "probe"),
                    str(d / "probe.c")], check=True)
    out = subprocess.run([str(d / "probe")], check=True, capture_output=True,
                         text=True).stdout
    facts = dict(line.split(" ", 1) for line in out.splitlines())
    facts = {k: (bytes.fromhex(v) if k == "bytes" else int(v)) for k, v in facts.items()}
    return facts


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(REPO, path))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


SAMPLE = dict(size=16 << 20, window_id=0x123456789ABCDEF0, staging_offset=4096,
              slot_size=1 << 20, nslots=8)


def test_qemu_device_window_py(c_layout):
    sys.path.insert(0, os.path.join(REPO, "qemu-device"))
    try:
        from pvgpuvm import window
        from pvgpuvm.spec import WindowLayout
    finally:
        sys.path.pop(0)
    assert (window.MAGIC, window.LAYOUT, window.HDR_SIZE) == \
        (c_layout["magic"], c_layout["layout"], c_layout["hdr_size"])
    packed = window.pack_header(WindowLayout(**SAMPLE))
    assert packed[:c_layout["reserved"]] == c_layout["bytes"]
    assert len(packed) == c_layout["h2d_filled"]


def test_scripts_vm_pvgpuvm_py(c_layout):
    vm = load("scripts/vm/pvgpuvm.py", "scripts_vm_pvgpuvm")
    assert (vm.WINDOW_MAGIC, vm.WINDOW_LAYOUT, vm.WINDOW_HDR_SIZE) == \
        (c_layout["magic"], c_layout["layout"], c_layout["hdr_size"])
    packed = struct.pack(vm.WINDOW_HDR_FMT, c_layout["magic"], c_layout["layout"],
                         *SAMPLE.values())
    assert packed == c_layout["bytes"]


def test_integration_test_window_literals(c_layout):
    sys.path.insert(0, os.path.join(REPO, "tests", "lib"))
    try:
        tw = load("tests/integration/test_window.py", "integration_test_window")
    finally:
        sys.path.pop(0)
    assert tw.HDR_PAGE == c_layout["hdr_size"]
    assert (tw.H2D_FILLED, tw.H2D_DONE, tw.D2H_READY, tw.D2H_TAKEN) == \
        (c_layout["h2d_filled"], c_layout["h2d_done"], c_layout["d2h_ready"],
         c_layout["d2h_taken"])
    import inspect
    defaults = inspect.signature(tw.make_window).parameters
    assert defaults["magic"].default == c_layout["magic"]
    assert defaults["layout"].default == c_layout["layout"]
