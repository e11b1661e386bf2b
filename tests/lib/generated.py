"""pvgpu's libraries generated from NVIDIA's headers with libclang
(libcuda.so.1 from cuda.h, libnvidia-ml.so.1 from nvml.h): a test that
needs one skips, saying why, where make could not generate it (no
libclang in this python3), and fails where make should have."""

import subprocess
import sys

import pytest


def require_generated(lib, header, hint="run make"):
    if lib.exists():
        return
    if subprocess.run([sys.executable, "-c", "import clang.cindex"],
                      capture_output=True).returncode:
        pytest.skip(f"{lib.name} was not built: it is generated from {header} "
                    "with libclang, which this python3 lacks (make said so); "
                    "give it the libclang wheel (pip install libclang)")
    pytest.fail(f"{lib} is not built ({hint})")
