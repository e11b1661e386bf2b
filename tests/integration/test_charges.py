"""What counts against a VM besides its allocations: a
loaded module is charged to its memory quota at its image size, and the
worker's pinned staging buffers to its host pinned quota (policy key
`pinned`), a figure apart from device memory. Also: policy values the
daemon must refuse.
"""
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import pvgpu_wire as W  # noqa: E402

REPO = Path(__file__).resolve().parent.parent.parent
BUILD = REPO / os.environ.get("PVGPU_BUILD", "build")
VECADD = BUILD / "tests" / "kernels" / "images" / "vecadd.fatbin"

from curesult import CUDA_ERROR_OUT_OF_MEMORY  # noqa: E402
MiB = 1 << 20


def start(start_pvgpud, tmp_path, text, extra=()):
    path = tmp_path / "pvgpud.conf"
    path.write_text(textwrap.dedent(text))
    daemon = start_pvgpud("sim", extra_args=["--config", str(path), *extra])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        log = daemon.log()
        if log.count(" start: ") == log.count(" end: "):
            break
        time.sleep(0.02)
    return daemon


def session(daemon):
    s = W.Session(daemon.unix, timeout=30)
    s.hello()
    s.ctx = s.open_context()
    return s


def mem_info(s):
    st, _, out, _ = s.call("mem_get_info")
    assert st == 0, st
    return out["free"], out["total"]


def image():
    if not VECADD.exists():
        pytest.fail(f"{VECADD} is not built (run `make test-programs`)")
    return VECADD.read_bytes()


def load(s, blob):
    st, _, out, _ = s.call("module_load", data_in=blob, size=len(blob))
    return st, out.get("module", 0)


def test_module_is_charged_at_its_image_size(start_pvgpud, tmp_path):
    blob = image()
    daemon = start(start_pvgpud, tmp_path, f"""
        [vm alice]
        uid = {os.getuid()}
        memory = 1M
        """)
    s, observer = session(daemon), session(daemon)
    assert mem_info(observer) == (MiB, MiB)
    st, module = load(s, blob)
    assert st == 0
    assert mem_info(observer) == (MiB - len(blob), MiB)
    assert s.call("module_unload", module=module)[0] == 0
    assert mem_info(observer) == (MiB, MiB)
    # Destroying the context gives back what its modules were charged.
    assert load(s, blob)[0] == 0
    assert load(s, blob)[0] == 0
    assert mem_info(observer) == (MiB - 2 * len(blob), MiB)
    assert s.call("ctx_destroy", ctx=s.ctx)[0] == 0
    assert mem_info(observer) == (MiB, MiB)
    # A module past the quota is refused like an allocation.
    st, _, out, _ = observer.call("mem_alloc", size=MiB - len(blob) + 1)
    assert st == 0
    s.open_context()
    assert load(s, blob)[0] == CUDA_ERROR_OUT_OF_MEMORY
    assert observer.call("mem_free", dptr=out["dptr"])[0] == 0
    assert load(s, blob)[0] == 0
    # And the session's end gives it back too.
    s.close()
    deadline = time.monotonic() + 10
    while mem_info(observer) != (MiB, MiB) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert mem_info(observer) == (MiB, MiB)
    observer.close()


# Past the worker's small-copy limit (64 KiB, host-backend/session/copy.c):
# a synchronous copy this size goes through the pinned staging buffers.
STAGED = 128 << 10


def copy(s, size=STAGED):
    st, _, out, _ = s.call("mem_alloc", size=size)
    assert st == 0, st
    return s.call("memcpy_htod", data_in=b"\x5a" * size, dst=out["dptr"],
                  size=size, stream=0)[0]


def test_pinned_staging_is_counted_against_its_own_quota(start_pvgpud, tmp_path):
    # One worker's staging: 4 buffers of the 1 MiB block.
    daemon = start(start_pvgpud, tmp_path, f"""
        [vm alice]
        uid = {os.getuid()}
        memory = 64M
        pinned = 4M
        """)
    a1, a2 = session(daemon), session(daemon)
    assert copy(a1) == 0
    # a1's staging is all the pinned memory alice may have.
    assert copy(a2) == CUDA_ERROR_OUT_OF_MEMORY
    assert "over the pinned quota of vm alice" in daemon.log()
    # Pinned memory is not device memory: the device quota is untouched.
    assert mem_info(a2) == (64 * MiB - 2 * STAGED, 64 * MiB)
    # a1 leaves its context: its staging goes with it, and a2 may stage.
    assert a1.call("ctx_destroy", ctx=a1.ctx)[0] == 0
    assert copy(a2) == 0
    a1.close()
    a2.close()


@pytest.mark.parametrize("line,why", [
    ("exclusive_wait = 2h", "exclusive_wait = 2h is not a duration"),
    ("exclusive_wait = 3601", "exclusive_wait = 3601 is not a duration"),
    ("call_timeout = -1", "call_timeout = -1 is not a duration"),
    ("call_timeout = soon", "call_timeout = soon is not a duration"),
    ("pinned = lots", "pinned = lots is not a size"),
    ("mode = alone", "mode must be shared or exclusive"),
])
def test_bad_policy_values_are_refused(tmp_path, line, why):
    path = tmp_path / "pvgpud.conf"
    path.write_text(f"[vm alice]\nuid = 12345\n{line}\n")
    res = subprocess.run(
        [str(BUILD / "bin" / "pvgpud"), "--listen", f"unix://{tmp_path}/s.sock",
         "--executor", "sim", "--config", str(path)],
        capture_output=True, text=True, timeout=30)
    assert res.returncode == 1, res.stderr
    assert why in res.stderr, res.stderr
