"""pvgpu's libcuda.so.1 (issue 13): NVIDIA's own runtime, shared and
static, runs the test programs unmodified over it against
`pvgpud --executor sim`; cuGetProcAddress, the export tables and the
exported surface.

No NVIDIA libcuda.so.1 is on the path: the programs' library directory
holds only NVIDIA's libcudart.so.13 and pvgpu's libcuda.so.1, and each test
checks that pvgpud saw the session.
"""

import ctypes
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / os.environ.get("PVGPU_BUILD", "build")
LIBCUDA = BUILD / "lib" / "libcuda.so.1"
TWINS = BUILD / "tests" / "sim-twins" / "libtest-twins.so"
API_DIR = REPO / "protocol" / "api"

PROGRAMS = sorted(p.stem for p in (REPO / "tests" / "programs").glob("*.cu"))
KERNELS = sorted("kernels/" + p.stem
                 for p in (REPO / "tests" / "programs" / "kernels").glob("*.cu")
                 if p.stem != "fault")
# Lines that are measurements, not results.
TIMING = re.compile(r"\d+(\.\d+)? ?(ms|us|µs|s)\b")


def nvidia_cudart():
    found = subprocess.run(["scripts/find-cuda.sh", "--libdir"], cwd=REPO,
                           capture_output=True, text=True)
    lib = Path(found.stdout.strip()) / "libcudart.so.13"
    if found.returncode or not lib.exists():
        pytest.skip("NVIDIA's libcudart.so.13 is not installed")
    return lib.resolve()


def asan_runtime(lib):
    res = subprocess.run(["ldd", str(lib)], capture_output=True, text=True)
    for line in res.stdout.splitlines():
        parts = line.split()
        if parts and parts[0].startswith("libasan.so") and len(parts) >= 3:
            return parts[2]
    return None


@pytest.fixture(scope="module")
def libdir():
    """NVIDIA's libcudart.so.13 and pvgpu's libcuda.so.1, nothing else."""
    if not LIBCUDA.exists():
        pytest.fail(f"{LIBCUDA} is not built (run `make`)")
    d = Path(tempfile.mkdtemp(prefix="pvgpu-cu-"))
    os.symlink(nvidia_cudart(), d / "libcudart.so.13")
    os.symlink(LIBCUDA.resolve(), d / "libcuda.so.1")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def twins_daemon(start_pvgpud):
    if not TWINS.exists():
        pytest.fail(f"{TWINS} is not built (run `make test-programs`)")
    return start_pvgpud("sim", env={"PVGPU_SIM_TWINS": str(TWINS)})


def env_for(libdir, uri):
    env = {k: v for k, v in os.environ.items()
           if k not in ("PVGPU_DEVICES", "PVGPU_TOKEN", "LD_LIBRARY_PATH")}
    env["LD_LIBRARY_PATH"] = str(libdir)
    env["PVGPU_DEVICES"] = uri
    asan = asan_runtime(LIBCUDA)
    if asan:
        env["LD_PRELOAD"] = asan
        env["ASAN_OPTIONS"] = "detect_leaks=0"
    return env


def binary(name, way):
    return BUILD / "tests" / ("static/" + name if way == "static" else name)


def run(path, env):
    return subprocess.run([str(path)], env=env, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, errors="replace",
                          timeout=120, cwd=REPO)


def results(stdout):
    return [line for line in stdout.splitlines() if not TIMING.search(line)]


def sessions(daemon):
    return len(re.findall(r"session", daemon.log()))


@pytest.mark.parametrize("way", ["shared", "static"])
@pytest.mark.parametrize("name", PROGRAMS + KERNELS)
def test_nvidia_runtime_over_libcuda(programs, twins_daemon, libdir, name, way):
    path = binary(name, way)
    if not path.exists():
        pytest.fail(f"{path} is not built (run `make test-programs`)")
    if way == "shared":
        # Linked against libcudart.so.13, not pvgpu's libcuda: only the
        # library path decides which runtime it gets.
        deps = subprocess.run(["ldd", str(path)], capture_output=True,
                              text=True, env=env_for(libdir, "")).stdout
        assert str(libdir) in deps, deps
    else:
        deps = subprocess.run(["ldd", str(path)], capture_output=True,
                              text=True).stdout
        assert "libcudart" not in deps, deps
    before = sessions(twins_daemon)
    res = run(path, env_for(libdir, twins_daemon.unix))
    programs.assert_passed(res, twins_daemon)
    assert sessions(twins_daemon) > before, twins_daemon.log()
    # The same results as through pvgpu's runtime shim.
    ref = programs.run(name, programs.pvgpu_env(twins_daemon.unix))
    programs.assert_passed(ref, twins_daemon)
    assert results(res.stdout) == results(ref.stdout)


@pytest.mark.parametrize("name", ["kernels/vecadd", "memory"])
def test_nvidia_runtime_over_shm(programs, twins_daemon, libdir, name):
    uri = "shm://" + twins_daemon.unix[len("unix://"):]
    res = run(binary(name, "shared"), env_for(libdir, uri))
    programs.assert_passed(res, twins_daemon)


# ---- the surface, without a backend --------------------------------------

class Cuda:
    def __init__(self):
        self.lib = ctypes.CDLL(str(LIBCUDA))
        self.gpa = self.lib.cuGetProcAddress_v2
        self.gpa.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p),
                             ctypes.c_int, ctypes.c_uint64,
                             ctypes.POINTER(ctypes.c_int)]
        self.gpa.restype = ctypes.c_int

    def addr(self, name):
        return ctypes.cast(getattr(self.lib, name), ctypes.c_void_p).value

    def proc(self, name, version=13000, flags=0):
        pfn = ctypes.c_void_p()
        status = ctypes.c_int(-1)
        rc = self.gpa(name.encode(), ctypes.byref(pfn), version, flags,
                      ctypes.byref(status))
        return rc, pfn.value, status.value


@pytest.fixture(scope="module")
def cuda():
    if not LIBCUDA.exists():
        pytest.fail(f"{LIBCUDA} is not built (run `make`)")
    return Cuda()


PER_THREAD = 2  # CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM


@pytest.mark.parametrize("name,version,flags,symbol", [
    ("cuMemAlloc", 3000, 0, "cuMemAlloc"),
    ("cuMemAlloc", 13000, 0, "cuMemAlloc_v2"),
    ("cuCtxGetDevice", 12080, 0, "cuCtxGetDevice"),
    ("cuCtxGetDevice", 13000, 0, "cuCtxGetDevice_v2"),
    ("cuCtxSynchronize", 13000, 0, "cuCtxSynchronize_v2"),
    ("cuMemcpyHtoD", 13000, 0, "cuMemcpyHtoD_v2"),
    ("cuMemcpyHtoD", 13000, PER_THREAD, "cuMemcpyHtoD_v2_ptds"),
    ("cuLaunchKernel", 13000, PER_THREAD, "cuLaunchKernel_ptsz"),
    ("cuLaunchKernel", 13000, 1, "cuLaunchKernel"),
    ("cuCtxCreate", 13000, 0, "cuCtxCreate_v4"),
    ("cuGetProcAddress", 13000, 0, "cuGetProcAddress_v2"),
    ("cuStreamGetCaptureInfo", 13000, PER_THREAD, "cuStreamGetCaptureInfo_v3_ptsz"),
])
def test_proc_address_versions(cuda, name, version, flags, symbol):
    rc, pfn, status = cuda.proc(name, version, flags)
    assert (rc, status) == (0, 0)
    assert pfn == cuda.addr(symbol)


@pytest.mark.parametrize("name", ["", "cuNoSuchFunction", "cudaMalloc"])
def test_proc_address_unknown(cuda, name):
    # What driver 580 answers (DESIGN §2b): success, no entry, not found.
    assert cuda.proc(name) == (0, None, 1)


def test_proc_address_matches_driver_580(cuda):
    """Every (name, version, flags) measured on the H100 (procaddr.tsv):
    the same result, status and entry point (by symbol name)."""
    tsv = API_DIR / "procaddr.tsv"
    if not tsv.exists():
        pytest.skip("no procaddr.tsv")
    wrong = []
    rows = tsv.read_text().splitlines()[1:]
    for row in rows:
        name, version, flags, result, status, symbol = row.split("\t")
        rc, pfn, st = cuda.proc(name, int(version), int(flags))
        want = None if symbol == "-" else cuda.addr(symbol)
        if (rc, st, pfn) != (int(result), int(status), want):
            wrong.append(row)
    assert not wrong, f"{len(wrong)} of {len(rows)} differ, e.g. {wrong[:10]}"


def test_proc_address_version_too_old(cuda):
    rc, pfn, status = cuda.proc("cuMemAllocAsync", 10000)
    assert (rc, pfn, status) == (0, None, 2)  # driver 580


EXPORT_TABLES = {
    "runtime interface": "6bd5fb6c5bf4e74a8987d93912fd9df9",
    "tools TLS": "42d85a8123f6cb478298f6e78a3aecdc",
    "tools callback hooks": "a094798c2e742e7493f20800200c0a66",
    "context-local storage": "c693336e1121df11a8c368f355d89593",
    "context checks": "263e88607cd2614392f6bbd5006dfa7e",
    "integrity check": "d4082055bde6704b8d34ba123c66e1f2",
    "extended device attributes": "b10541e1f7c7c74a9f64f223be99f1e2",
}


def export_table(cuda, uuid_hex):
    f = cuda.lib.cuGetExportTable
    f.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p]
    f.restype = ctypes.c_int
    table = ctypes.c_void_p()
    rc = f(ctypes.byref(table), bytes.fromhex(uuid_hex))
    return rc, table.value


@pytest.mark.parametrize("name", sorted(EXPORT_TABLES))
def test_export_table_before_init(cuda, name):
    rc, table = export_table(cuda, EXPORT_TABLES[name])
    assert rc == 0 and table
    words = (ctypes.c_size_t * 2).from_address(table)
    if name == "context-local storage":
        assert words[0] != 0     # no size word: slot 0 is an entry point
    else:
        # First words driver 580 gives (/work/facts, H100).
        n = {"context checks": 15, "tools TLS": 3, "runtime interface": 13,
             "tools callback hooks": 7, "integrity check": 3}.get(name)
        assert words[0] % 8 == 0 and words[0] >= 16
        if n:
            assert words[0] == 8 * n


def test_export_table_unknown(cuda):
    assert export_table(cuda, "00112233445566778899aabbccddeeff") == (801, None)


def test_integrity_check_is_deterministic(cuda):
    rc, table = export_table(cuda, EXPORT_TABLES["integrity check"])
    assert rc == 0
    fn = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_uint32, ctypes.c_uint64,
                          ctypes.POINTER(ctypes.c_uint64 * 2))(
        ctypes.c_void_p.from_address(table + 8).value)
    a, b = (ctypes.c_uint64 * 2)(), (ctypes.c_uint64 * 2)()
    assert fn(13002, 1700000000, ctypes.byref(a)) == 0
    assert fn(13002, 1700000000, ctypes.byref(b)) == 0
    assert list(a) == list(b) and any(a)
    assert fn(13000, 0, ctypes.byref(a)) == 0
    assert list(a) == [0x3341181c03cb675c, 0x8ed383aa1f4cd1e8]


def exported():
    out = subprocess.run(["nm", "-D", "--defined-only", str(LIBCUDA)],
                         capture_output=True, text=True, check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


def test_nm_coverage(cuda):
    names = exported()
    cov = (REPO / "docs" / "api-coverage.md").read_text()
    listed = set(re.findall(r"^\| `(cu\w+)` \|", cov, re.M))
    assert len(listed) >= 634
    assert listed <= names, sorted(listed - names)[:20]
    nm580 = API_DIR / "libcuda580.nm"
    if nm580.exists():
        want = {w.split()[-1] for w in nm580.read_text().splitlines()
                if w.strip() and w.split()[-1].startswith("cu")}
        assert want <= names, sorted(want - names)[:20]
    # Nothing but the driver's names leaks out.
    assert all(n.startswith("cu") for n in names), \
        sorted(n for n in names if not n.startswith("cu"))[:20]


def test_coverage_doc_up_to_date():
    gen = BUILD / "gen" / "api-coverage.md"
    assert gen.exists()
    assert (REPO / "docs" / "api-coverage.md").read_text() == gen.read_text(), \
        "docs/api-coverage.md is stale: cp build/gen/api-coverage.md docs/"


def test_not_supported_is_clean(cuda):
    f = cuda.lib.cuGraphCreate
    f.restype = ctypes.c_int
    assert f(None, 0) == 801


# ---- device printf and assert (DESIGN §3, issue 13 item 6) ----------------
# What a session's kernels print reaches that program's stdout/stderr at the
# synchronisation after the launch, through both front-ends; never pvgpud's
# log, never another session.  The sim's twins print through the same path
# as the CUDA driver: the worker's fd 1/2, handed to the guest before a reply.

PRINTF = "kernels/printf"
ASSERT_LINE = "Assertion `v[i] == i` failed."


def expected_stdout(tag):
    def say(lines):
        return [f"device: tag {tag} line {i + 1} of {lines}"
                for i in range(lines)]
    return (["program: printf", "host: launched"] + say(3) +
            ["host: synchronized"] + say(200) +
            ["host: stream synchronized"] + say(1) +
            ["host: copied back", "assert: cudaErrorAssert", "PASS"])


def start_tagged(path, env, tag):
    env = dict(env, PVGPU_TEST_TAG=str(tag))
    return subprocess.Popen([str(path)], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, errors="replace")


def check_one(tag, out, err, rc, tags, how):
    assert rc == 0, f"{how}: exit {rc}\n{out}\n{err}"
    assert out.splitlines() == expected_stdout(tag), f"{how}:\n{out}\n{err}"
    assert err.count(ASSERT_LINE) == 1, f"{how}: stderr:\n{err}"
    for other in tags:
        if other != tag:
            assert f"tag {other} " not in out + err, \
                f"{how} got session {other}'s output:\n{out}\n{err}"


def test_device_output_goes_to_its_own_program(programs, twins_daemon,
                                               libdir):
    """Four sessions at once, two through the shim and two through NVIDIA's
    runtime (shared and static) over libcuda.so.1, each printing its own
    tag: each gets exactly its own lines, in program order, and the daemon's
    log holds none of them."""
    shim_env = programs.pvgpu_env(twins_daemon.unix)
    shm_uri = "shm://" + twins_daemon.unix[len("unix://"):]
    runs = [
        (101, "shim unix", programs.path(PRINTF), shim_env),
        (202, "shim shm", programs.path(PRINTF), programs.pvgpu_env(shm_uri)),
        (303, "libcuda shared", binary(PRINTF, "shared"),
         env_for(libdir, twins_daemon.unix)),
        (404, "libcuda static", binary(PRINTF, "static"),
         env_for(libdir, shm_uri)),
    ]
    for _, _, path, _ in runs:
        if not path.exists():
            pytest.fail(f"{path} is not built (run `make test-programs`)")
    procs = [(tag, how, start_tagged(path, env, tag)) for tag, how, path, env in runs]
    deadline = time.monotonic() + programs.timeout
    tags = [tag for tag, _, _ in procs]
    for tag, how, proc in procs:
        try:
            out, err = proc.communicate(
                timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        check_one(tag, out, err, proc.returncode, tags, how)
    log = twins_daemon.log()
    assert "device: tag" not in log, log[-4000:]
    assert ASSERT_LINE not in log, log[-4000:]
    # The operator still learns that a kernel failed, in the log.
    assert "device assert" in log, log[-4000:]


def test_old_guest_gets_no_output_frames(programs, twins_daemon):
    """A guest that does not know the output feature (an older client) is
    never sent OUTPUT frames: the device output is dropped, the session
    works, and nothing lands in the daemon's log."""
    env = programs.pvgpu_env(twins_daemon.unix)
    env["PVGPU_TEST_TAG"] = "505"
    env["PVGPU_WITHHOLD_FEATURES"] = str(1 << 8)   # output
    res = subprocess.run([str(programs.path(PRINTF))], env=env,
                         stdin=subprocess.DEVNULL, capture_output=True,
                         text=True, errors="replace", timeout=programs.timeout)
    assert res.returncode == 0, programs.describe(res)
    assert "device: tag" not in res.stdout, res.stdout
    assert "device: tag 505" not in twins_daemon.log()
