"""The vchan transport's decoders and checks fed garbage (no Xen needed):
tests/xen/vchan_fuzz.c, built in both builds (the sanitizer one under
ASan/UBSan when PVGPU_BUILD=build-asan)."""
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent
BUILD = REPO / os.environ.get("PVGPU_BUILD", "build")


def test_vchan_decoders_random():
    fuzz = BUILD / "xen" / "vchan-fuzz"
    if not fuzz.exists():
        pytest.fail(f"{fuzz} is not built (run `make`)")
    for seed in ("1", "0xfeedface", "12345678901"):
        out = subprocess.run([str(fuzz), "100000", seed], capture_output=True,
                             text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        assert "every invariant held" in out.stdout
