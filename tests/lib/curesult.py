"""CUresult values by name, read from the cuda.h the build uses
(scripts/find-cuda.sh --include), so that no test writes NVIDIA's numbers
down again:

    from curesult import CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY
"""
import re
import subprocess
from functools import lru_cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@lru_cache(maxsize=None)
def values():
    """{name: value} of cuda.h's cudaError_enum."""
    inc = subprocess.run([str(REPO / "scripts" / "find-cuda.sh"), "--include"],
                         capture_output=True, text=True).stdout.strip()
    if not inc:
        raise ImportError("no CUDA headers (scripts/find-cuda.sh --include "
                          "found none: run make deps)")
    text = (Path(inc) / "cuda.h").read_text()
    found = dict(re.findall(r"\b(CUDA_SUCCESS|CUDA_ERROR_\w+)\s*=\s*(\d+)", text))
    return {name: int(v) for name, v in found.items()}


def __getattr__(name):
    if name.startswith("CUDA_"):
        try:
            return values()[name]
        except KeyError:
            pass
    raise AttributeError(f"module 'curesult' has no attribute {name!r}")
