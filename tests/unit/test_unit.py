"""Run the C unit tests (tests/unit/*_test.c, built by make into
$PVGPU_BUILD/tests/unit/) and check each reports no failure."""
import glob
import os
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.join(REPO, os.environ.get("PVGPU_BUILD", "build"))
SOURCES = sorted(glob.glob(os.path.join(REPO, "tests", "unit", "*_test.c")))


@pytest.mark.parametrize("name", [os.path.basename(s)[:-2] for s in SOURCES])
def test_c_unit(name):
    binary = os.path.join(BUILD, "tests", "unit", name)
    assert os.path.exists(binary), f"{binary} not built: run make"
    proc = subprocess.run([binary], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    last = proc.stdout.strip().splitlines()[-1]
    assert last.endswith(" 0 failed") and not last.startswith("0 passed"), last
