"""pvgpu's libcuda.so.1: NVIDIA's own runtime, shared and
static, runs the test programs unmodified over it against
`pvgpud --executor sim`; cuGetProcAddress, the export tables and the
exported surface.

No NVIDIA libcuda.so.1 is on the path: the programs' library directory
(tests/conftest.py's guest_libdir) holds only NVIDIA's libcudart.so.13 and
pvgpu's libcuda.so.1, and each test checks that pvgpud saw the session.
"""

import ctypes
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from pvgpu_guest import (SCRIPT_PRELUDE, finish_all, guest_env, run_guest_script,  # noqa: E402
                         without_managed)

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / os.environ.get("PVGPU_BUILD", "build")
LIBCUDA = BUILD / "lib" / "libcuda.so.1"
TWINS = BUILD / "tests" / "sim-twins" / "libtest-twins.so"
API_DIR = REPO / "protocol" / "api"

PROGRAMS = sorted(p.stem for p in (REPO / "tests" / "programs").glob("*.cu"))
KERNELS = sorted("kernels/" + p.stem
                 for p in (REPO / "tests" / "programs" / "kernels").glob("*.cu")
                 if p.stem != "fault")
# Programs the sim cannot run: it has no texture unit, so a kernel that
# fetches has no CPU twin.  test_texture_objects below and
# test_textures.py check what the sim can (the protocol, the checks, the
# guest's descriptors); tests/gpu runs the program on the GPU.
GPU_ONLY = {"kernels/textures": "the sim cannot fetch textures (no CPU twin): "
                                "tests/gpu/test_gpu_driver_api.py runs it"}
# Lines that are measurements, not results.
TIMING = re.compile(r"\d+(\.\d+)? ?(ms|us|µs|s)\b")


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
    """The program built -cudart shared over unix://, or with the runtime
    linked in over shm://; the static one's results must be the shared
    one's, but for managed memory: libcuda.so.1 offers it only in a
    window at the program's own address, so not over unix://, on
    purpose."""
    if name in GPU_ONLY:
        pytest.skip(GPU_ONLY[name])
    path = binary(name, way)
    if not path.exists():
        pytest.fail(f"{path} is not built (run `make test-programs`)")
    if way == "shared":
        # Linked against libcudart.so.13, not pvgpu's libcuda: only the
        # library path decides which runtime it gets.
        deps = subprocess.run(["ldd", str(path)], capture_output=True,
                              text=True, env=guest_env(libdir, "")).stdout
        assert str(libdir) in deps, deps
    else:
        deps = subprocess.run(["ldd", str(path)], capture_output=True,
                              text=True).stdout
        assert "libcudart" not in deps, deps
    uri = twins_daemon.unix if way == "shared" else \
        "shm://" + twins_daemon.unix[len("unix://"):]
    before = sessions(twins_daemon)
    res = run(path, guest_env(libdir, uri))
    programs.assert_passed(res, twins_daemon)
    assert sessions(twins_daemon) > before, twins_daemon.log()
    if way == "shared":
        return
    ref = run(binary(name, "shared"), guest_env(libdir, twins_daemon.unix))
    programs.assert_passed(ref, twins_daemon)
    assert without_managed(results(res.stdout)) == without_managed(results(ref.stdout))


@pytest.mark.parametrize("name", ["kernels/vecadd", "memory"])
def test_nvidia_runtime_over_shm(programs, twins_daemon, libdir, name):
    uri = "shm://" + twins_daemon.unix[len("unix://"):]
    res = run(binary(name, "shared"), guest_env(libdir, uri))
    programs.assert_passed(res, twins_daemon)


RUNS_RE = re.compile(r"session \d+: (\d+) launches went to the GPU as (\d+) runs of (\d+)")


@pytest.mark.parametrize("transport", ["unix", "shm"])
def test_identical_launches_go_as_runs(programs, twins_daemon, libdir, transport):
    """launchruns' thousands of identical launches, between memsets, events,
    a second stream, a capture and attribute changes: every count right
    (the program checks), and the worker took the repeated launches as
    runs (host-backend/session/runs.c; the sim runs a run as its
    launches).  Over unix:// a batch holds them all, so runs always form;
    over shm:// only while the guest is ahead of the worker, which the
    sim's speed decides, so there the count is printed, not judged."""
    uri = ("shm://" if transport == "shm" else "unix://") + \
        twins_daemon.unix[len("unix://"):]
    for way in ("shared", "static"):
        res = run(binary("kernels/launchruns", way), guest_env(libdir, uri))
        programs.assert_passed(res, twins_daemon)
    twins_daemon.stop()     # the sessions' last lines are in the log
    runs = [tuple(map(int, m.groups())) for m in RUNS_RE.finditer(twins_daemon.log())]
    print(f"\nlaunchruns over {transport}://: launches in runs, runs, run length: {runs}")
    if transport == "unix":
        assert len(runs) == 2, twins_daemon.log()[-4000:]
        for launches, n, size in runs:
            assert size == 32 and launches == n * size and n >= 50, runs


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


# ctypes loads libcuda.so.1 into this Python, which the ASan build's
# library refuses (its runtime must come first); the programs above run
# the ASan build in processes of their own.
in_process = pytest.mark.plain_build("loads libcuda.so.1 into the test's own Python, "
                                     "which the ASan build cannot be")


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
@in_process
def test_proc_address_versions(cuda, name, version, flags, symbol):
    rc, pfn, status = cuda.proc(name, version, flags)
    assert (rc, status) == (0, 0)
    assert pfn == cuda.addr(symbol)


@pytest.mark.parametrize("name", ["", "cuNoSuchFunction", "cudaMalloc"])
@in_process
def test_proc_address_unknown(cuda, name):
    # What driver 580 answers (DESIGN §2b): success, no entry, not found.
    assert cuda.proc(name) == (0, None, 1)


@in_process
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


@in_process
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
    "tools context": "21318c60971432488ca641ff7324c8f2",
    "clusters": "1734dc26800d47458726c0f1e7dd8bca",
    "tools module": "6e163fbeb958444d835ce182aff1991e",
}


def export_table(cuda, uuid_hex):
    f = cuda.lib.cuGetExportTable
    f.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_char_p]
    f.restype = ctypes.c_int
    table = ctypes.c_void_p()
    rc = f(ctypes.byref(table), bytes.fromhex(uuid_hex))
    return rc, table.value


@pytest.mark.parametrize("name", sorted(EXPORT_TABLES))
@in_process
def test_export_table_before_init(cuda, name):
    rc, table = export_table(cuda, EXPORT_TABLES[name])
    assert rc == 0 and table
    words = (ctypes.c_size_t * 2).from_address(table)
    if name == "context-local storage":
        assert words[0] != 0     # no size word: slot 0 is an entry point
    else:
        # First words driver 580 gives (/work/facts, H100).
        n = {"context checks": 15, "tools TLS": 3, "runtime interface": 13,
             "tools callback hooks": 7, "integrity check": 3, "tools context": 93,
             "clusters": 17, "tools module": 99}.get(name)
        assert words[0] % 8 == 0 and words[0] >= 16
        if n:
            assert words[0] == 8 * n


@in_process
def test_export_table_unknown(cuda):
    assert export_table(cuda, "00112233445566778899aabbccddeeff") == (801, None)


@in_process
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


@in_process
def test_nm_coverage(cuda):
    names = exported()
    cov = (BUILD / "gen" / "api-coverage.md").read_text()
    listed = set(re.findall(r"^\| `(cu\w+)` \|", cov, re.M))
    assert len(listed) >= 634
    assert listed <= names, sorted(listed - names)[:20]
    nm580 = API_DIR / "libcuda580.nm"
    if nm580.exists():
        want = {w.split()[-1] for w in nm580.read_text().splitlines()
                if w.strip() and w.split()[-1].startswith("cu")}
        assert want <= names, sorted(want - names)[:20]
    # Nothing but the driver's names leaks out, and pvgpu's own exports
    # for benchmarks (the wire round trips and wake-ups).
    own = {"pvgpu_wire_stats", "pvgpu_ring_wakes"}
    assert all(n.startswith("cu") or n in own for n in names), \
        sorted(n for n in names if not n.startswith("cu") and n not in own)[:20]


@in_process
def test_not_supported_is_clean(cuda):
    f = cuda.lib.cuGraphAddExternalSemaphoresSignalNode
    f.restype = ctypes.c_int
    assert f(None, 0) == 801


# ---- device printf and assert (DESIGN §3) ---------------------------------
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
            ["host: synchronized", "host: event done"] + say(2) +
            ["host: synchronized again"] + say(200) +
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
    """Four sessions at once, NVIDIA's runtime over libcuda.so.1 shared
    and static, each over unix:// and shm://, each printing its own tag:
    each gets exactly its own lines, in program order, and the daemon's
    log holds none of them."""
    shm_uri = "shm://" + twins_daemon.unix[len("unix://"):]
    runs = [
        (101, "shared unix", binary(PRINTF, "shared"), programs.pvgpu_env(twins_daemon.unix)),
        (202, "shared shm", binary(PRINTF, "shared"), programs.pvgpu_env(shm_uri)),
        (303, "static unix", binary(PRINTF, "static"),
         guest_env(libdir, twins_daemon.unix)),
        (404, "static shm", binary(PRINTF, "static"),
         guest_env(libdir, shm_uri)),
    ]
    for _, _, path, _ in runs:
        if not path.exists():
            pytest.fail(f"{path} is not built (run `make test-programs`)")
    procs = [(tag, how, start_tagged(path, env, tag)) for tag, how, path, env in runs]
    tags = [tag for tag, _, _ in procs]
    for (tag, how, _), res in zip(procs, finish_all([p for _, _, p in procs], programs.timeout)):
        check_one(tag, res.stdout, res.stderr, res.returncode, tags, how)
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


# ---- the generic driver call (protocol/api/annotations.py GENERIC) -------

GENERIC_SCRIPT = SCRIPT_PRELUDE + r'''
dev, ctx = context()
# Limits and cache config live on the backend, per context.
v = c_size(0)
must("cuCtxGetLimit", ctypes.byref(v), 0x01)           # printf FIFO
print("printf fifo", v.value)
must("cuCtxSetLimit", 0x02, c_size(64 << 20))          # malloc heap
must("cuCtxGetLimit", ctypes.byref(v), 0x02)
print("heap", v.value)
print("bad limit", call("cuCtxSetLimit", 0x7f, c_size(1)))
least, greatest = c_int(9), c_int(9)
must("cuCtxGetStreamPriorityRange", ctypes.byref(least), ctypes.byref(greatest))
print("priorities", least.value, greatest.value)
must("cuCtxGetStreamPriorityRange", None, ctypes.byref(greatest))
must("cuCtxSetCacheConfig", 2)
cfg = c_int(-1)
must("cuCtxGetCacheConfig", ctypes.byref(cfg))
print("cache config", cfg.value)
# Stream memory operations: device ranges checked by the worker.
d, s = c_u64(), ctypes.c_void_p()
must("cuMemAlloc_v2", ctypes.byref(d), c_size(64))
must("cuStreamCreate", ctypes.byref(s), 0)
must("cuStreamWriteValue32_v2", s, c_u64(d.value + 4), ctypes.c_uint32(0xfeed), 0)
must("cuStreamWriteValue64", s, c_u64(d.value + 8), c_u64(0x1234567890), 0)
must("cuStreamWaitValue32_v2", s, c_u64(d.value + 4), ctypes.c_uint32(0xfeed), 1)
must("cuStreamSynchronize", s)
buf = (ctypes.c_uint8 * 16)()
must("cuMemcpyDtoH_v2", buf, c_u64(d.value), c_size(16))
print("words", hex(int.from_bytes(bytes(buf[4:8]), "little")),
      hex(int.from_bytes(bytes(buf[8:16]), "little")))
# Past the end of the allocation: refused, surfacing at the next sync.
must("cuStreamWriteValue32_v2", s, c_u64(d.value + 62), ctypes.c_uint32(1), 0)
print("past the end", call("cuStreamSynchronize", s))
# Pitched memory and 2D memsets (by hand, row by row in one batch).
pd, pitch = c_u64(), c_size()
must("cuMemAllocPitch_v2", ctypes.byref(pd), ctypes.byref(pitch), c_size(100), c_size(3), 4)
print("pitch", pitch.value)
must("cuMemsetD8_v2", pd, 0, c_size(pitch.value * 3))
must("cuMemsetD2D8Async", pd, pitch, ctypes.c_ubyte(7), c_size(100), c_size(3), s)
must("cuMemsetD2D32_v2", c_u64(pd.value + 2 * pitch.value + 200), pitch, ctypes.c_uint(0x01020304), c_size(2), c_size(1))
rows = (ctypes.c_uint8 * (pitch.value * 3))()
must("cuMemcpyDtoH_v2", rows, pd, c_size(pitch.value * 3))
print("rows", rows[0], rows[99], rows[100], rows[pitch.value + 50], rows[2 * pitch.value + 99],
      list(rows[2 * pitch.value + 200: 2 * pitch.value + 204]))
print("2d past the end", call("cuMemsetD2D8_v2", pd, pitch, ctypes.c_ubyte(1), c_size(100), c_size(4)))
# Stream-ordered allocation: made at once, freed after the stream's work.
ad = c_u64()
must("cuMemAllocAsync", ctypes.byref(ad), c_size(4096), s)
must("cuMemsetD32Async", ad, 5, c_size(1024), s)
must("cuMemFreeAsync", ad, s)
print("free twice", call("cuMemFreeAsync", ad, s))
# NULL is free(NULL) for the driver's frees (cuSPARSE's destroy calls rely on it).
print("free null", call("cuMemFreeAsync", c_u64(0), s), call("cuMemFreeHost", None),
      call("cuMemFree_v2", c_u64(0)))
print("PASS")
'''


def test_generic_driver_call(twins_daemon, libdir, tmp_path):
    """Functions forwarded by one annotation line each: limits, cache
    config and stream priorities answered by the backend, stream memory
    operations whose device range the worker checks."""
    check_generic_driver_call(twins_daemon, libdir, tmp_path)


def run_script(daemon, libdir, tmp_path, text, *args, debug=False):
    """A ctypes script over pvgpu's libcuda.so.1 (argv[1]) and args: its
    stdout lines and stderr, once it has ended with PASS."""
    env = guest_env(libdir, daemon.unix, **({"PVGPU_DEBUG": "1"} if debug else {}))
    return run_guest_script(tmp_path, text, LIBCUDA, env, *args)


def check_generic_driver_call(daemon, libdir, tmp_path):
    out, _ = run_script(daemon, libdir, tmp_path, GENERIC_SCRIPT)
    assert "printf fifo 1048576" in out
    assert "heap 67108864" in out
    assert "bad limit 1" in out                 # CUDA_ERROR_INVALID_VALUE
    assert "priorities 0 -5" in out
    assert "cache config 2" in out
    assert "words 0xfeed 0x1234567890" in out
    assert "past the end 1" in out, out
    assert "pitch 512" in out
    assert "rows 7 7 0 7 7 [4, 3, 2, 1]" in out, out
    assert "2d past the end 1" in out
    assert "free twice 1" in out
    assert "free null 0 0 0" in out, out


GRAPH_SCRIPT = SCRIPT_PRELUDE + r'''
image = open(sys.argv[2], "rb").read()
dev, ctx = context()
mod, fn = vp(), vp()
must("cuModuleLoadData", ctypes.byref(mod), image)
must("cuModuleGetFunction", ctypes.byref(fn), mod, b"vec_add")
n = 1000
a, b, c = c_u64(), c_u64(), c_u64()
for p in (a, b, c):
    must("cuMemAlloc_v2", ctypes.byref(p), c_size(4 * n))
ha = struct.pack("%df" % n, *[float(i) for i in range(n)])
hb = struct.pack("%df" % n, *[0.5] * n)
must("cuMemcpyHtoD_v2", a, ha, c_size(4 * n))
must("cuMemcpyHtoD_v2", b, hb, c_size(4 * n))
must("cuMemsetD32_v2", c, 0, c_size(n))
s = vp()
must("cuStreamCreate", ctypes.byref(s), 1)
status = c_int(-1)
must("cuStreamIsCapturing", s, ctypes.byref(status))
print("capturing before", status.value)
must("cuStreamBeginCapture_v2", s, 0)          # global mode
must("cuStreamIsCapturing", s, ctypes.byref(status))
print("capturing during", status.value)
cnt = c_int(n)
params = (vp * 4)(ctypes.addressof(a), ctypes.addressof(b), ctypes.addressof(c),
                  ctypes.addressof(cnt))
# c = a + b, then c = c + b: two launches in the graph.
must("cuLaunchKernel", fn, 4, 1, 1, 256, 1, 1, 0, s, params, None)
params2 = (vp * 4)(ctypes.addressof(c), ctypes.addressof(b), ctypes.addressof(c),
                   ctypes.addressof(cnt))
must("cuLaunchKernel", fn, 4, 1, 1, 256, 1, 1, 0, s, params2, None)
graph, exe = vp(), vp()
must("cuStreamEndCapture", s, ctypes.byref(graph))
must("cuStreamIsCapturing", s, ctypes.byref(status))
print("capturing after", status.value)
out = (ctypes.c_float * n)()
must("cuMemcpyDtoH_v2", out, c, c_size(4 * n))
print("before launch", out[10])                 # nothing ran while capturing
# What cudart 13 gets for "cuGraphInstantiate": cuGraphInstantiate_v2.
must("cuGraphInstantiate_v2", ctypes.byref(exe), graph, c_u64(0))
must("cuGraphLaunch", exe, s)
must("cuGraphLaunch", exe, s)
must("cuStreamSynchronize", s)
must("cuMemcpyDtoH_v2", out, c, c_size(4 * n))
print("after two launches", out[10], out[999])
must("cuGraphExecDestroy", exe)
print("destroyed twice", call("cuGraphExecDestroy", exe))
must("cuGraphDestroy", graph)
print("bogus graph", call("cuGraphLaunch", vp(0x12345), s))
print("legacy stream", call("cuStreamBeginCapture_v2", None, 0))
print("sync after bogus", call("cuCtxSynchronize"))
print("PASS")
'''


def test_stream_capture_and_graphs(twins_daemon, libdir, tmp_path):
    """Capture is a state of the stream on the backend: launches made while
    it lasts are recorded, not run; the graph's handles live in the
    worker's table (the guest never sees the executor's values) and a
    stale or foreign one is refused there."""
    check_stream_capture_and_graphs(twins_daemon, libdir, tmp_path)


def check_stream_capture_and_graphs(daemon, libdir, tmp_path):
    image = BUILD / "tests" / "kernels" / "images" / "vecadd.fatbin"
    out, _ = run_script(daemon, libdir, tmp_path, GRAPH_SCRIPT, image)
    assert out[:3] == ["capturing before 0", "capturing during 1",
                       "capturing after 0"], out
    assert "before launch 0.0" in out
    # c = a + b + b after each launch of the graph: 10 + 1.0, both times.
    assert "after two launches 11.0 1000.0" in out, out
    assert "destroyed twice 400" in out             # CUDA_ERROR_INVALID_HANDLE
    # An unknown graph is refused by the worker; the launch is async, so
    # the error comes at the next synchronising call.
    assert "bogus graph 0" in out and "sync after bogus 400" in out, out
    assert "legacy stream 900" in out, out  # STREAM_CAPTURE_UNSUPPORTED


# The tools context and cluster tables (cuBLAS, cuBLASLt): their slots
# answer from the session, as the driver's do (slot order: DESIGN §7).
TABLE_PROBE = r"""
import ctypes, sys
cu = ctypes.CDLL(sys.argv[1])
def ok(rc, what):
    assert rc == 0, f"{what}: {rc}"
ok(cu.cuInit(0), "cuInit")
ctx = ctypes.c_void_p()
ok(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0), "retain")
ok(cu.cuCtxSetCurrent(ctx), "set current")
stream = ctypes.c_void_p()
ok(cu.cuStreamCreate(ctypes.byref(stream), 1), "stream")  # non-blocking
def table(uuid):
    t = ctypes.c_void_p()
    ok(cu.cuGetExportTable(ctypes.byref(t), bytes.fromhex(uuid)), uuid)
    return t.value
def slot(t, i, *argtypes):
    return ctypes.CFUNCTYPE(ctypes.c_int, *argtypes)(
        ctypes.c_void_p.from_address(t + 8 * i).value)
P, U32, U64, U8 = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_uint8
tc = table("21318c60971432488ca641ff7324c8f2")
dev, cid, want = U32(7), U64(), ctypes.c_ulonglong()
ok(slot(tc, 3, P, P)(ctx, ctypes.byref(dev)), "CtxGetDevice")
ok(slot(tc, 4, P, P)(ctx, ctypes.byref(cid)), "CtxGetId")
ok(cu.cuCtxGetId(ctx, ctypes.byref(want)), "cuCtxGetId")
pub, tools, yes = P(), P(), U8(9)
ok(slot(tc, 17, P, P, P)(ctx, stream, ctypes.byref(tools)), "StreamGetToolsHandle")
ok(slot(tc, 16, P, P)(tools, ctypes.byref(pub)), "StreamGetPublicHandle")
ok(slot(tc, 32, P, P)(tools, ctypes.byref(yes)), "StreamIsNonBlocking")
null = U8(9)
ok(slot(tc, 12, P, P, P)(ctx, None, ctypes.byref(null)), "StreamIsNullStream")
ok(slot(tc, 1, P, P)(ctx, tools), "StreamSynchronize")
unknown = slot(tc, 90, P)(None)
cl = table("1734dc26800d47458726c0f1e7dd8bca")
sup, attr = ctypes.c_int(-1), ctypes.c_int(-2)
ok(slot(cl, 8, ctypes.c_int, P)(0, ctypes.byref(sup)), "GetDeviceClusterLaunchSupported")
ok(cu.cuDeviceGetAttribute(ctypes.byref(attr), 120, 0), "CLUSTER_LAUNCH")
print(dev.value, cid.value == want.value, pub.value == stream.value, yes.value,
      null.value, unknown, sup.value == attr.value)
print("PASS")
"""


def test_tools_context_and_cluster_tables(start_pvgpud, libdir, tmp_path):
    d = start_pvgpud("sim")
    out, _ = run_script(d, libdir, tmp_path, TABLE_PROBE)
    # device 0; the context's id; the stream handle back; non-blocking; the
    # NULL stream is the null stream; an unknown slot: not supported; the
    # cluster query agrees with the device attribute.
    assert out[0].split() == ["0", "True", "True", "1", "1", "801", "True"], out
    assert " start: " in d.log()


MODULE_FUNCTIONS = r"""
import ctypes, sys
cu = ctypes.CDLL(sys.argv[1])
image = open(sys.argv[2], "rb").read()
vp = ctypes.c_void_p
def ok(rc, what):
    assert rc == 0, f"{what}: {rc}"
ok(cu.cuInit(0), "cuInit")
ctx, mod = vp(), vp()
ok(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0), "retain")
ok(cu.cuCtxSetCurrent(ctx), "set current")
ok(cu.cuModuleLoadData(ctypes.byref(mod), image), "load")
n = ctypes.c_uint(99)
ok(cu.cuModuleGetFunctionCount(ctypes.byref(n), mod), "count")
fs = (vp * n.value)()
ok(cu.cuModuleEnumerateFunctions(fs, n.value, mod), "enumerate")
names = []
for f in fs:
    name = ctypes.c_char_p()
    ok(cu.cuFuncGetName(ctypes.byref(name), vp(f)), "name")
    names.append(name.value.decode())
byname = vp()
ok(cu.cuModuleGetFunction(ctypes.byref(byname), mod, b"vec_add"), "by name")
# cuFFT's enumeration: tools module table, slot 7.
t = vp()
ok(cu.cuGetExportTable(ctypes.byref(t), bytes.fromhex("6e163fbeb958444d835ce182aff1991e")), "table")
seen = []
CB = ctypes.CFUNCTYPE(None, vp, vp)
cb = CB(lambda user, f: seen.append(f))
slot7 = ctypes.CFUNCTYPE(ctypes.c_int, vp, vp, CB, vp)(
    ctypes.c_void_p.from_address(t.value + 8 * 7).value)
got = slot7(ctx, mod, cb, None)
print(n.value, names, fs[0] == byname.value, got, seen == [byname.value])
print("PASS")
"""


def test_module_functions(start_pvgpud, libdir, tmp_path):
    """cuModuleGetFunctionCount / cuModuleEnumerateFunctions name the
    module's kernels (the backend lists them); the handles are those
    cuModuleGetFunction gives, and cuFFT's tools-module enumeration
    reports the same through its callback."""
    image = BUILD / "tests" / "kernels" / "images" / "vecadd.fatbin"
    out, _ = run_script(start_pvgpud("sim"), libdir, tmp_path, MODULE_FUNCTIONS, image)
    assert out[0] == "1 ['vec_add'] True 1 True", out


PEER_COPY = r"""
import ctypes, sys
cu = ctypes.CDLL(sys.argv[1])
vp, u64 = ctypes.c_void_p, ctypes.c_uint64
def ok(rc, what):
    assert rc == 0, f"{what}: {rc}"
ok(cu.cuInit(0), "cuInit")
ctx = [vp(), vp()]
buf = [u64(), u64(), u64()]
for d in (0, 1):
    ok(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx[d]), d), "retain")
ok(cu.cuCtxSetCurrent(ctx[0]), "current 0")
ok(cu.cuMemAlloc_v2(ctypes.byref(buf[0]), ctypes.c_size_t(1 << 20)), "alloc 0")
ok(cu.cuMemAlloc_v2(ctypes.byref(buf[2]), ctypes.c_size_t(1 << 20)), "alloc 0b")
ok(cu.cuCtxSetCurrent(ctx[1]), "current 1")
ok(cu.cuMemAlloc_v2(ctypes.byref(buf[1]), ctypes.c_size_t(1 << 20)), "alloc 1")
data = bytes(range(256)) * 4096
ok(cu.cuCtxSetCurrent(ctx[0]), "current 0")
ok(cu.cuMemcpyHtoD_v2(buf[0], data, ctypes.c_size_t(len(data))), "upload")
# device 0 -> device 0 (another allocation), on a stream; then 0 -> 1
ok(cu.cuMemcpyPeerAsync(buf[2], ctx[0], buf[0], ctx[0], ctypes.c_size_t(len(data)), None), "same device")
ok(cu.cuMemcpyPeer(buf[1], ctx[1], buf[2], ctx[0], ctypes.c_size_t(len(data))), "across")
ok(cu.cuCtxSetCurrent(ctx[1]), "current 1")
back = ctypes.create_string_buffer(len(data))
ok(cu.cuMemcpyDtoH_v2(back, buf[1], ctypes.c_size_t(len(data))), "download")
print(back.raw == data, cu.cuMemcpyPeer(buf[1], None, buf[0], ctx[0], ctypes.c_size_t(16)))
print("PASS")
"""


def test_memcpy_peer(start_pvgpud, libdir, tmp_path):
    """cuMemcpyPeer(Async) within a device and between two of one backend
    (GPU to GPU on the host); a bogus context is refused."""
    d = start_pvgpud("sim", env={"PVGPU_SIM_DEVICES": "2"})
    out, _ = run_script(d, libdir, tmp_path, PEER_COPY)
    assert out[0].split() == ["True", "201"], out  # INVALID_CONTEXT


LAUNCH_EX_SCRIPT = SCRIPT_PRELUDE + r'''
image = open(sys.argv[2], "rb").read()
class Attr(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4),
                ("value", ctypes.c_uint * 16)]
class Config(ctypes.Structure):
    _fields_ = [("grid", c_uint * 3), ("block", c_uint * 3), ("smem", c_uint),
                ("stream", vp), ("attrs", ctypes.POINTER(Attr)), ("n", c_uint)]
class Params(ctypes.Structure):
    _fields_ = [("function", vp), ("grid", c_uint * 3), ("block", c_uint * 3),
                ("smem", c_uint), ("stream", vp), ("params", vp)]
dev, ctx = context()
mod, fn = vp(), vp()
must("cuModuleLoadData", ctypes.byref(mod), image)
must("cuModuleGetFunction", ctypes.byref(fn), mod, b"vec_add")
n = 1024
a, b, c = ctypes.c_uint64(), ctypes.c_uint64(), ctypes.c_uint64()
for p in (a, b, c):
    must("cuMemAlloc_v2", ctypes.byref(p), c_size(4 * n))
must("cuMemcpyHtoD_v2", a, struct.pack("%df" % n, *[float(i) for i in range(n)]), c_size(4 * n))
must("cuMemcpyHtoD_v2", b, struct.pack("%df" % n, *[1.0] * n), c_size(4 * n))
cnt = ctypes.c_int(n)
params = (vp * 4)(ctypes.addressof(a), ctypes.addressof(b), ctypes.addressof(c),
                  ctypes.addressof(cnt))
def result():
    out = (ctypes.c_float * n)()
    must("cuCtxSynchronize")
    must("cuMemcpyDtoH_v2", out, c, c_size(4 * n))
    r = out[n - 1]
    must("cuMemsetD32_v2", c, 0, c_size(n))
    return r
def launch_ex(*attrs):
    arr = (Attr * max(len(attrs), 1))()
    for i, (aid, words) in enumerate(attrs):
        arr[i].id = aid
        for j, w in enumerate(words):
            arr[i].value[j] = w
    cfg = Config((c_uint * 3)(4, 1, 1), (c_uint * 3)(256, 1, 1), 0, None, arr, len(attrs))
    return cu.cuLaunchKernelEx(ctypes.byref(cfg), fn, params, None)
print("ignore only", launch_ex((0, [])), result())
print("cluster 2 + priority", launch_ex((4, [2, 1, 1]), (8, [0])), result())
print("cluster 3", launch_ex((4, [3, 1, 1])))
print("completion event", launch_ex((12, [0, 0])))
print("access policy window", launch_ex((1, [0, 0, 0, 0])))
print("cooperative", cu.cuLaunchCooperativeKernel(fn, 4, 1, 1, 256, 1, 1, 0, None, params), result())
print("cooperative too large", cu.cuLaunchCooperativeKernel(fn, 1000000, 1, 1, 256, 1, 1, 0, None, params))
one = Params(fn, (c_uint * 3)(4, 1, 1), (c_uint * 3)(256, 1, 1), 0, None,
             ctypes.cast(params, vp))
print("multi-device x1", cu.cuLaunchCooperativeKernelMultiDevice(ctypes.byref(one), 1, 0), result())
two = (Params * 2)(one, one)
print("multi-device x2", cu.cuLaunchCooperativeKernelMultiDevice(two, 2, 0))
print("PASS")
'''


def test_launch_attributes(twins_daemon, libdir, tmp_path):
    """cuLaunchKernelEx carries its attributes to the backend (cluster
    dimensions and priority run, clusters that do not tile the grid are
    refused at the launch); an attribute pvgpu cannot carry is
    CUDA_ERROR_NOT_SUPPORTED with a debug line naming it, never dropped;
    cooperative launches, and the multi-device one for one device."""
    check_launch_attributes(twins_daemon, libdir, tmp_path)


def check_launch_attributes(daemon, libdir, tmp_path):
    image = BUILD / "tests" / "kernels" / "images" / "vecadd.fatbin"
    out, err = run_script(daemon, libdir, tmp_path, LAUNCH_EX_SCRIPT, image, debug=True)
    assert "ignore only 0 1024.0" in out
    assert "cluster 2 + priority 0 1024.0" in out
    assert "cluster 3 912" in out                   # CUDA_ERROR_INVALID_CLUSTER_SIZE
    assert "completion event 801" in out
    assert "access policy window 801" in out
    assert "launch attribute 12 is not supported" in err
    assert "launch attribute 1 is not supported" in err
    assert "cooperative 0 1024.0" in out
    assert "cooperative too large 720" in out       # COOPERATIVE_LAUNCH_TOO_LARGE
    assert "multi-device x1 0 1024.0" in out
    assert "multi-device x2 801" in out
    assert "cuLaunchCooperativeKernelMultiDevice (more than one device)" in err


def test_driver_calls_through_remote(start_pvgpud, libdir, tmp_path):
    """The same through a front `pvgpud --executor remote` to a back sim
    node: generic driver calls (graph handles tagged by the front, untagged
    for the node), launch attributes and CUDA arrays are carried across the
    second hop."""
    back = start_pvgpud("sim", env={"PVGPU_SIM_TWINS": str(TWINS)})
    front = start_pvgpud("remote", extra_args=["--remote", back.tcp])
    check_generic_driver_call(front, libdir, tmp_path)
    check_stream_capture_and_graphs(front, libdir, tmp_path)
    check_launch_attributes(front, libdir, tmp_path)
    # CUDA arrays, handles tagged by the front.
    res = run(binary("kernels/arrays", "shared"), guest_env(libdir, front.unix))
    assert res.returncode == 0 and res.stdout.splitlines()[-1:] == ["PASS"], \
        res.stdout + res.stderr + front.log()[-2000:]
    assert " start: " in back.log(), back.log()[-3000:]


COPY3D_SCRIPT = SCRIPT_PRELUDE + r'''
side = [("XInBytes", sz), ("Y", sz), ("Z", sz), ("LOD", sz), ("MemoryType", ctypes.c_int),
        ("Host", vp), ("Device", ctypes.c_uint64), ("Array", vp), ("reserved", vp),
        ("Pitch", sz), ("Height", sz)]
class Copy3D(ctypes.Structure):
    _fields_ = ([("src" + n, t) for n, t in side] + [("dst" + n, t) for n, t in side]
                + [("WidthInBytes", sz), ("Height", sz), ("Depth", sz)])
HOST, DEVICE, ARRAY = 1, 2, 3
dev, ctx = context()
d = ctypes.c_uint64()
must("cuMemAlloc_v2", ctypes.byref(d), sz(4096))
src = (ctypes.c_ubyte * 4096)(*[i % 251 for i in range(4096)])
back = (ctypes.c_ubyte * 4096)()
def copy(**kw):
    c = Copy3D(srcMemoryType=HOST, srcHost=ctypes.cast(src, vp), dstMemoryType=DEVICE,
               dstDevice=d.value, WidthInBytes=16, Height=4, Depth=4)
    for k, v in kw.items():
        setattr(c, k, v)
    return cu.cuMemcpy3D_v2(ctypes.byref(c))
# 16 x 4 x 4 bytes from a host volume of pitch 20, 5 rows a slice, starting
# at (1, 1, 0), into a device volume of pitch 32, 4 rows a slice.
print("pitched", copy(srcXInBytes=1, srcY=1, srcPitch=20, srcHeight=5, dstPitch=32, dstHeight=4))
must("cuMemcpyDtoH_v2", back, d, sz(4096))
want = [src[(z * 5 + 1 + y) * 20 + 1 + x] for z in range(4) for y in range(4) for x in range(16)]
got = [back[(z * 4 + y) * 32 + x] for z in range(4) for y in range(4) for x in range(16)]
print("volume matches", got == want)
print("no array", copy(srcMemoryType=ARRAY, srcArray=None))
print("lod", copy(srcLOD=1))
print("short slices", copy(srcHeight=3))
print("narrow pitch", copy(srcPitch=8))
must("cuMemsetD8_v2", d, 0xee, sz(4096))
print("past the end", copy(dstPitch=512, dstHeight=4))
must("cuMemcpyDtoH_v2", back, d, sz(4096))
print("untouched", all(b == 0xee for b in back))
print("empty", copy(Depth=0))
print("PASS")
'''


def test_memcpy3d(twins_daemon, libdir, tmp_path):
    """cuMemcpy3D between host and device memory, pitched and unaligned,
    slice by slice; what the driver refuses is refused (a level of detail,
    slices shorter than the copy, a pitch narrower than a row, a volume past
    the allocation, a NULL array)."""
    out, _ = run_script(twins_daemon, libdir, tmp_path, COPY3D_SCRIPT)
    assert out[:2] == ["pitched 0", "volume matches True"], out
    assert "no array 400" in out                    # CUDA_ERROR_INVALID_HANDLE
    assert "lod 1" in out
    assert "short slices 1" in out
    assert "narrow pitch 1" in out
    assert "past the end 1" in out
    assert "untouched True" in out                  # refused before any slice
    assert "empty 0" in out


ARRAY_SCRIPT = SCRIPT_PRELUDE + r'''
class Desc(ctypes.Structure):
    _fields_ = [("Width", sz), ("Height", sz), ("Format", ctypes.c_int), ("NumChannels", ctypes.c_uint)]
class Desc3(ctypes.Structure):
    _fields_ = [("Width", sz), ("Height", sz), ("Depth", sz), ("Format", ctypes.c_int),
                ("NumChannels", ctypes.c_uint), ("Flags", ctypes.c_uint)]
FLOAT = 0x20
dev, ctx = context()
a, b, c2 = vp(), vp(), vp()
must("cuArrayCreate_v2", ctypes.byref(a), ctypes.byref(Desc(64, 0, FLOAT, 1)))
must("cuArrayCreate_v2", ctypes.byref(b), ctypes.byref(Desc(64, 0, FLOAT, 1)))
must("cuArrayCreate_v2", ctypes.byref(c2), ctypes.byref(Desc(16, 4, FLOAT, 2)))
d = Desc()
must("cuArrayGetDescriptor_v2", ctypes.byref(d), c2)
print("descriptor", d.Width, d.Height, hex(d.Format), d.NumChannels)
d3 = Desc3()
must("cuArray3DGetDescriptor_v2", ctypes.byref(d3), a)
print("3d descriptor", d3.Width, d3.Height, d3.Depth)
src = struct.pack("8f", *[1.5 * i for i in range(8)])
must("cuMemcpyHtoA_v2", a, sz(16), src, sz(32))             # floats 4..11
must("cuMemcpyAtoA_v2", b, sz(0), a, sz(16), sz(32))         # to floats 0..7 of b
dptr = ctypes.c_uint64()
must("cuMemAlloc_v2", ctypes.byref(dptr), sz(256))
must("cuMemcpyAtoD_v2", dptr, b, sz(0), sz(32))
must("cuMemcpyDtoA_v2", a, sz(128), dptr, sz(32))            # floats 32..39 of a
out = ctypes.create_string_buffer(32)
must("cuMemcpyAtoH_v2", out, a, sz(128), sz(32))
print("round trip", list(struct.unpack("8f", out.raw)))
print("rows", cu.cuMemcpyHtoA_v2(c2, sz(0), src, sz(32)))
print("past the end", cu.cuMemcpyHtoA_v2(a, sz(240), src, sz(32)))
print("destroy", cu.cuArrayDestroy(a), cu.cuArrayDestroy(a))
print("PASS")
'''


TEX_SCRIPT = SCRIPT_PRELUDE + r'''
class Desc3(ctypes.Structure):
    _fields_ = [("Width", sz), ("Height", sz), ("Depth", sz), ("Format", ctypes.c_int),
                ("NumChannels", ctypes.c_uint), ("Flags", ctypes.c_uint)]
class Res(ctypes.Structure):          # CUDA_RESOURCE_DESC: 144 bytes
    _fields_ = [("resType", ctypes.c_int), ("res", u64 * 16), ("flags", ctypes.c_uint)]
class Tex(ctypes.Structure):          # CUDA_TEXTURE_DESC: 104 bytes
    _fields_ = [("addressMode", ctypes.c_int * 3), ("filterMode", ctypes.c_int),
                ("flags", ctypes.c_uint), ("maxAnisotropy", ctypes.c_uint),
                ("mipmapFilterMode", ctypes.c_int), ("mip", ctypes.c_float * 3),
                ("borderColor", ctypes.c_float * 4), ("reserved", ctypes.c_int * 12)]
assert ctypes.sizeof(Res) == 144 and ctypes.sizeof(Tex) == 104
FLOAT, LAYERED, SURFACE, CUBEMAP, SPARSE = 0x20, 1, 2, 4, 0x40
dev, ctx = context()
arrays = {}
for name, d in [("layered", Desc3(16, 8, 3, FLOAT, 1, LAYERED | SURFACE)),
                ("cubemap", Desc3(8, 8, 6, FLOAT, 4, CUBEMAP)),
                ("layered cubemap", Desc3(8, 8, 12, FLOAT, 1, CUBEMAP | LAYERED)),
                ("bad cubemap", Desc3(8, 4, 6, FLOAT, 1, CUBEMAP)),
                ("sparse", Desc3(8, 8, 0, FLOAT, 1, SPARSE))]:
    a = vp()
    arrays[name] = a
    print(name, cu.cuArray3DCreate_v2(ctypes.byref(a), ctypes.byref(d)))
lay = arrays["layered"]
back = Desc3()
must("cuArray3DGetDescriptor_v2", ctypes.byref(back), lay)
print("layered descriptor", back.Width, back.Height, back.Depth, back.Flags)
res = Res(resType=0)
res.res[0] = lay.value
tex = Tex(filterMode=1, flags=2)
tex.addressMode[:] = [1, 1, 1]
t = u64()
must("cuTexObjectCreate", ctypes.byref(t), ctypes.byref(res), ctypes.byref(tex), None)
rgot, tgot = Res(), Tex()
must("cuTexObjectGetResourceDesc", ctypes.byref(rgot), t)
must("cuTexObjectGetTextureDesc", ctypes.byref(tgot), t)
print("texture", t.value != 0, rgot.resType, rgot.res[0] == lay.value, tgot.filterMode,
      tgot.flags, list(tgot.addressMode))
print("no view", cu.cuTexObjectGetResourceViewDesc(ctypes.create_string_buffer(128), t))
dptr = u64()
must("cuMemAlloc_v2", ctypes.byref(dptr), sz(4096))
p2 = Res(resType=3)
struct.pack_into("<QiIQQQ", p2.res, 0, dptr.value, FLOAT, 1, 16, 8, 256)
t2 = u64()
print("pitch2D", cu.cuTexObjectCreate(ctypes.byref(t2), ctypes.byref(p2), ctypes.byref(tex), None))
struct.pack_into("<QiIQQQ", p2.res, 0, dptr.value, FLOAT, 1, 16, 17, 256)
print("pitch2D past the end", cu.cuTexObjectCreate(ctypes.byref(t2), ctypes.byref(p2),
                                                   ctypes.byref(tex), None))
bad = Tex(filterMode=1, flags=2)
bad.reserved[5] = 1
print("reserved", cu.cuTexObjectCreate(ctypes.byref(t2), ctypes.byref(res), ctypes.byref(bad), None))
bad = Tex(filterMode=5)
print("filter", cu.cuTexObjectCreate(ctypes.byref(t2), ctypes.byref(res), ctypes.byref(bad), None))
view = ctypes.create_string_buffer(128)
print("view", cu.cuTexObjectCreate(ctypes.byref(t2), ctypes.byref(res), ctypes.byref(tex), view))
print("mipmapped", cu.cuTexObjectCreate(ctypes.byref(t2), ctypes.byref(Res(resType=1)),
                                        ctypes.byref(tex), None))
s = u64()
must("cuSurfObjectCreate", ctypes.byref(s), ctypes.byref(res))
must("cuSurfObjectGetResourceDesc", ctypes.byref(rgot), s)
print("surface", s.value != 0, rgot.res[0] == lay.value)
cube = Res(resType=0)
cube.res[0] = arrays["cubemap"].value
print("surface without load/store", cu.cuSurfObjectCreate(ctypes.byref(s), ctypes.byref(cube)))
print("forged", cu.cuTexObjectDestroy(u64(t.value + 1000)), cu.cuSurfObjectDestroy(t))
print("destroy", cu.cuTexObjectDestroy(t), cu.cuTexObjectDestroy(t),
      cu.cuSurfObjectDestroy(s), cu.cuSurfObjectDestroy(s))
print("PASS")
'''


@pytest.mark.parametrize("hop", ["sim", "remote"])
def test_texture_objects(start_pvgpud, libdir, tmp_path, hop):
    """Texture and surface objects through libcuda.so.1 against the sim
    (which cannot sample: the objects are opaque values there), directly
    and through a front `pvgpud --executor remote` (the node's values,
    untagged): arrays with layered, cubemap and surface flags; descriptors
    read back as given; a bad descriptor refused; a resource view, a
    mipmapped array and sparse arrays NOT_SUPPORTED naming what; a value
    the guest did not get refused."""
    daemon = back = start_pvgpud("sim")
    if hop == "remote":
        daemon = start_pvgpud("remote", extra_args=["--remote", back.tcp])
    out, err = run_script(daemon, libdir, tmp_path, TEX_SCRIPT, debug=True)
    text = "\n".join(out)
    for want in ("layered 0", "cubemap 0", "layered cubemap 0", "bad cubemap 1",
                 "sparse 801", "layered descriptor 16 8 3 3",
                 "texture True 0 True 1 2 [1, 1, 1]", "no view 1", "pitch2D 0",
                 "pitch2D past the end 0", "reserved 1", "filter 1", "view 801",
                 "mipmapped 801", "surface True True", "surface without load/store 1",
                 "forged 400 400", "destroy 0 400 0 400"):
        assert want in out, want + "\n" + text + err
    assert "cuTexObjectCreate with a resource view" in err
    assert "cuTexObjectCreate on a mipmapped array" in err


def test_array_linear_copies(twins_daemon, libdir, tmp_path):
    """1D arrays through the driver's linear copies (host, device and array
    to array at byte offsets) give back what went in; descriptors are the
    ones given; an array with rows is NOT_SUPPORTED for them, naming it."""
    out, err = run_script(twins_daemon, libdir, tmp_path, ARRAY_SCRIPT, debug=True)
    assert "descriptor 16 4 0x20 2" in out
    assert "3d descriptor 64 0 0" in out
    assert "round trip [0.0, 1.5, 3.0, 4.5, 6.0, 7.5, 9.0, 10.5]" in out, out
    assert "rows 801" in out
    assert "cuMemcpyHtoA on an array with rows" in err
    assert "past the end 1" in out
    assert "destroy 0 400" in out


MODULE_LOAD_FILE = r"""
import ctypes, sys
cu = ctypes.CDLL(sys.argv[1])
vp = ctypes.c_void_p
assert cu.cuInit(0) == 0
ctx, mod, fn = vp(), vp(), vp()
assert cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), 0) == 0
assert cu.cuCtxSetCurrent(ctx) == 0
loaded = [cu.cuModuleLoad(ctypes.byref(mod), p.encode()) for p in sys.argv[2:4]]
found = cu.cuModuleGetFunction(ctypes.byref(fn), mod, b"vec_add")
print(loaded, found, cu.cuModuleLoad(ctypes.byref(mod), b"/nonexistent.cubin"))
print("PASS")
"""


def test_module_load_from_file(start_pvgpud, libdir, tmp_path):
    """cuModuleLoad (Triton loads its cubins so) reads the file in the
    guest: a cubin and PTX load, a missing file is FILE_NOT_FOUND."""
    images = BUILD / "tests" / "kernels" / "images"
    out, _ = run_script(start_pvgpud("sim"), libdir, tmp_path, MODULE_LOAD_FILE,
                        images / "vecadd.cubin", images / "vecadd.ptx")
    assert out[0] == "[0, 0] 0 301", out


# A kernel's attributes and occupancy answers cross the wire once:
# libraries (CUB, cuSPARSE) read all attributes before every launch and
# PyTorch asks the occupancy of many.  Setting an attribute forgets both.
FUNC_ATTR_SCRIPT = SCRIPT_PRELUDE + r'''
image = open(sys.argv[2], "rb").read()
stats = (ctypes.c_ulonglong * 5)()
def round_trips():
    assert cu.pvgpu_wire_stats(stats) >= 1
    return stats[1]
dev, ctx = context()
mod, fn = vp(), vp()
must("cuModuleLoadData", ctypes.byref(mod), image)
must("cuModuleGetFunction", ctypes.byref(fn), mod, b"vec_add")
def attrs():
    v = c_int()
    out = []
    for a in (0, 1, 8):  # max threads, static shared, max dynamic shared
        must("cuFuncGetAttribute", ctypes.byref(v), a, fn)
        out.append(v.value)
    return out
t = round_trips()
first = attrs()
print("first", *first, round_trips() - t)
t = round_trips()
again = [attrs() for _ in range(10)][-1]
print("again", *again, round_trips() - t)
def occupancy():
    v = c_int()
    out = []
    for block in (128, 256, 128):
        must("cuOccupancyMaxActiveBlocksPerMultiprocessor", ctypes.byref(v), fn, block,
             ctypes.c_size_t(0))
        out.append(v.value)
    return out
t = round_trips()
occ = occupancy()
print("occupancy", *occ, round_trips() - t)          # two questions, one asked twice
t = round_trips()
print("occupancy again", *occupancy(), round_trips() - t)
must("cuFuncSetAttribute", fn, 8, 4096)
t = round_trips()
print("after set", *attrs(), round_trips() - t)
t = round_trips()
print("occupancy after set", *occupancy(), round_trips() - t)
print("PASS")
'''


def test_function_attributes_read_once(sim_daemon, libdir, tmp_path):
    image = BUILD / "tests" / "kernels" / "images" / "vecadd.fatbin"
    out, _ = run_script(sim_daemon, libdir, tmp_path, FUNC_ATTR_SCRIPT, image)
    first = out[0].split()
    again = out[1].split()
    after = out[4].split()
    assert first[0] == "first" and first[4] == "3", out     # one each
    assert again[1:4] == first[1:4] and again[4] == "0", out
    assert after[4] == "4096" and after[5] == "3", out
    occ = out[2].split()
    assert occ[0] == "occupancy" and occ[1] == occ[3] and occ[4] == "2", out
    assert out[3].split()[2:] == occ[1:4] + ["0"], out
    assert out[5].split()[3:] == occ[1:4] + ["2"], out
