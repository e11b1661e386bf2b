"""The sim executor's module loading and CPU twins on real nvcc output.

Builds tests/sim-twins/kernels.cu with nvcc into every form a guest can
register (a bare cubin, fatbinaries with and without compression, PTX-only
fatbinaries, PTX text) and the example twins into a plugin, then runs the C
test sim_module_test (built by make into $PVGPU_BUILD/tests/unit/) on them:
function names, parameter layouts, globals, launch checks, twin results,
faults, and truncated or damaged copies of each image.  Under
PVGPU_BUILD=build-asan the same runs happen under ASan and UBSan.
"""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent
BUILD = REPO / os.environ.get("PVGPU_BUILD", "build")
BINARY = BUILD / "tests" / "unit" / "sim_module_test"
KERNELS = REPO / "tests" / "sim-twins" / "kernels.cu"
TWINS = REPO / "tests" / "sim-twins" / "example_twins.c"

SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                     "runtime error:")

# name -> nvcc arguments.  nvcc 13 compresses PTX entries with zstd by
# default and leaves small cubins plain; --compress-mode=size compresses
# the cubin too (zstd), speed uses LZ4.
FORMS = {
    "k.cubin": ["-cubin", "-arch=sm_90"],
    "k.fatbin": ["-fatbin", "-arch=sm_90"],
    "k_size.fatbin": ["-fatbin", "-arch=sm_90", "--compress-mode=size"],
    "k_none.fatbin": ["-fatbin", "-arch=sm_90", "--no-compress"],
    "k_multi.fatbin": ["-fatbin", "-gencode", "arch=compute_80,code=sm_80",
                       "-gencode", "arch=compute_90,code=sm_90"],
    "k_ptx.fatbin": ["-fatbin", "-arch=compute_90"],
    "k_ptx_lz4.fatbin": ["-fatbin", "-arch=compute_90",
                         "--compress-mode=speed"],
    "k_ptx_none.fatbin": ["-fatbin", "-arch=compute_90", "--no-compress"],
    "k.ptx": ["-ptx", "-arch=sm_90"],
}


def find_nvcc():
    nvcc = os.environ.get("PVGPU_NVCC")
    if nvcc:
        return nvcc
    try:
        root = subprocess.run([str(REPO / "scripts" / "find-cuda.sh")],
                              capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None
    nvcc = Path(root) / "bin" / "nvcc"
    return str(nvcc) if nvcc.exists() else None


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    nvcc = find_nvcc()
    if not nvcc:
        pytest.skip("no nvcc (set PVGPU_NVCC or run scripts/install-deps.sh)")
    out = tmp_path_factory.mktemp("sim-images")
    built = {}
    for name, args in FORMS.items():
        path = out / name
        proc = subprocess.run([nvcc, *args, "-o", str(path), str(KERNELS)],
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"nvcc {args}: {proc.stderr}"
        built[name] = path
    return built


@pytest.fixture(scope="module")
def twins(tmp_path_factory):
    cc = os.environ.get("CC") or shutil.which("cc") or "gcc"
    so = tmp_path_factory.mktemp("sim-twins") / "example_twins.so"
    proc = subprocess.run(
        [cc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-O1", "-shared",
         "-fPIC", "-I", str(REPO / "tests" / "sim"), "-I", str(REPO / "host-backend" / "exec"), "-o", str(so),
         str(TWINS)],
        capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return so


def run_test(args, env_extra=None):
    assert BINARY.exists(), f"{BINARY} not built: run make"
    env = dict(os.environ)
    env.pop("PVGPU_SIM_TWINS", None)
    env.update(env_extra or {})
    proc = subprocess.run([str(BINARY), *map(str, args)], capture_output=True,
                          text=True, timeout=600, env=env)
    output = proc.stdout + proc.stderr
    for marker in SANITIZER_MARKERS:
        assert marker not in output, output[-6000:]
    assert proc.returncode == 0, output[-6000:]
    last = proc.stdout.strip().splitlines()[-1]
    assert last.endswith(" 0 failed") and not last.startswith("0 passed"), last
    return output


def test_fatbin_compression_as_observed(images):
    """Guard the facts the parser relies on: default builds compress PTX
    with zstd (flag 0x8000) and keep small cubins plain; speed mode uses
    LZ4 (0x2000); size mode compresses the cubin too."""
    def entries(path):
        data = path.read_bytes()
        assert int.from_bytes(data[0:4], "little") == 0xBA55ED50
        off = int.from_bytes(data[6:8], "little")
        end = off + int.from_bytes(data[8:16], "little")
        found = []
        while off < end:
            kind = int.from_bytes(data[off:off + 2], "little")
            hsize = int.from_bytes(data[off + 4:off + 8], "little")
            size = int.from_bytes(data[off + 8:off + 16], "little")
            arch = int.from_bytes(data[off + 0x1c:off + 0x20], "little")
            flags = int.from_bytes(data[off + 0x28:off + 0x30], "little")
            found.append((kind, arch, flags & 0xA000))
            off += hsize + size
        return found

    assert entries(images["k.fatbin"]) == [(2, 90, 0), (1, 90, 0x8000)]
    assert entries(images["k_size.fatbin"]) == [(2, 90, 0x8000),
                                                (1, 90, 0x8000)]
    assert entries(images["k_ptx_lz4.fatbin"]) == [(1, 90, 0x2000)]
    assert entries(images["k_ptx_none.fatbin"]) == [(1, 90, 0)]


def test_without_images():
    """The synthetic checks alone, without twins (what test_unit runs)."""
    run_test([])


@pytest.mark.parametrize("form", sorted(FORMS))
def test_image_with_twins(images, twins, form):
    out = run_test([images[form]], {"PVGPU_SIM_TWINS": str(twins)})
    # The launch of a kernel without a twin says so, once per function.
    assert "no CPU twin is registered" in out


def test_bad_twin_plugin(images, tmp_path):
    """A PVGPU_SIM_TWINS entry that cannot be loaded fails the executor's
    open with a clear message rather than running without twins."""
    missing = tmp_path / "missing.so"
    assert BINARY.exists(), f"{BINARY} not built: run make"
    env = dict(os.environ, PVGPU_SIM_TWINS=str(missing))
    proc = subprocess.run([str(BINARY)], capture_output=True, text=True,
                          timeout=120, env=env)
    assert proc.returncode != 0
    assert "PVGPU_SIM_TWINS" in proc.stderr and "missing.so" in proc.stderr
