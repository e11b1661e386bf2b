"""The driver-API test programs (tests/programs/driver/*.c): plain C
over libcuda.so.1, run through pvgpu's libcuda.so.1 against
`pvgpud --executor sim`; the GPU twin of this file is
tests/gpu/test_gpu_driver_programs.py, which compares them with a native
run.  Only pvgpu's libcuda.so.1 is on the library path, and each test checks
that pvgpud served the session.
"""

import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "lib"))
import pvgpu_wire as W  # noqa: E402
from pvgpu_sessions import alice_and_bob  # noqa: E402
from pvgpu_guest import SCRIPT_PRELUDE, guest_env, run_guest_script  # noqa: E402

BUILD = REPO / os.environ.get("PVGPU_BUILD", "build")
LIBCUDA = BUILD / "lib" / "libcuda.so.1"
TWINS = BUILD / "tests" / "sim-twins" / "libtest-twins.so"
IMAGE = BUILD / "tests" / "kernels" / "images" / "vecadd.fatbin"
PTX = BUILD / "tests" / "kernels" / "images" / "vecadd.ptx"
DRIVER_PROGRAMS = sorted(p.stem for p in (REPO / "tests" / "programs" / "driver").glob("*.c"))


@pytest.fixture(scope="module")
def libdir():
    if not LIBCUDA.exists():
        pytest.fail(f"{LIBCUDA} is not built (run `make`)")
    d = Path(tempfile.mkdtemp(prefix="pvgpu-drv-"))
    os.symlink(LIBCUDA.resolve(), d / "libcuda.so.1")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def daemon(twins_daemon):
    """This file's daemon: the conftest's, with the programs' twins."""
    return twins_daemon


def run_driver(name, libdir, uri, **extra):
    """A driver program over the libcuda.so.1 in libdir at uri, with extra
    variables in its environment."""
    path = BUILD / "tests" / "driver" / name
    if not path.exists():
        pytest.fail(f"{path} is not built (run `make test-programs`)")
    return subprocess.run([str(path), str(IMAGE), str(PTX)], env=guest_env(libdir, uri, **extra),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          errors="replace", timeout=120, cwd=REPO)


def sessions(daemon):
    return len(re.findall(r"session \d+ start", daemon.log()))


def passed(res, daemon):
    out = res.stdout.splitlines()
    assert res.returncode == 0 and out[-1:] == ["PASS"], \
        f"rc {res.returncode}\n{res.stdout}\n{res.stderr[-3000:]}\n" \
        f"pvgpud:\n{daemon.log()[-3000:]}"
    return out


@pytest.mark.parametrize("transport", ["unix", "shm"])
@pytest.mark.parametrize("name", DRIVER_PROGRAMS)
def test_driver_program(daemon, libdir, name, transport):
    uri = daemon.unix if transport == "unix" else "shm://" + daemon.unix[len("unix://"):]
    before = sessions(daemon)
    passed(run_driver(name, libdir, uri), daemon)
    assert sessions(daemon) > before, daemon.log()


def test_profiler(daemon, libdir):
    out = passed(run_driver("profiler", libdir, daemon.unix), daemon)
    assert "start again: 0" in out and "stop again: 0" in out
    assert "value between: 0xabcd" in out


def test_stream_attributes(daemon, libdir):
    """The attribute value is a structure: it travels whole both ways
    (driver_call_data), per stream, checked by the backend."""
    out = passed(run_driver("streamattr", libdir, daemon.unix), daemon)
    assert "window: same base 1, bytes 1048576, hit ratio 0.50, hit 2, miss 1" in out, out
    assert "other stream's window: 0 bytes" in out
    assert "sync policy: 4" in out
    assert "priority is the greatest: 1" in out


def test_occupancy_potential_block_size(daemon, libdir):
    """The search runs in the guest over the forwarded occupancy query,
    calling the program's own callback; the sim's occupancy model (2048
    threads, 64K registers, 228 KiB shared per SM) gives these."""
    out = passed(run_driver("occupancy", libdir, daemon.unix), daemon)
    lines = {line.split(":")[0]: line for line in out if ": block" in line}
    assert set(lines) == {"no callback", "4 KiB shared", "callback", "limit 200",
                          "with flags"}, out
    assert "no result: 1" in out
    # A whole SM's 2048 threads in blocks of 1024; at most 200 threads a
    # block, 200 (10 blocks) and 192 fill it less than 128 (16 blocks).
    assert lines["no callback"] == "no callback: block 1024, grid 264, 2 blocks per SM", out
    assert lines["limit 200"] == "limit 200: block 128, grid 2112, 16 blocks per SM", out


def test_memory_pools(daemon, libdir):
    """Pools are bookkeeping over real allocations on the backend: the
    memory works, and what a pool says it holds follows the program."""
    out = passed(run_driver("mempool", libdir, daemon.unix), daemon)
    for line in ("default pool stable: 1, current: 1",
                 "opportunistic reuse: 1",
                 "release threshold is max: 1",
                 "set used current: 1",
                 "copied through pool memory: 0x22 0x22",
                 "used at least 6 MiB: 1",
                 "used after free: 0, high at least 6 MiB: 1",
                 "high after reset: 0",
                 "own device access: 3",
                 "current is mine: 1",
                 "mine used at least 8 MiB: 1, default used: 0",
                 "past max size: 2",             # CUDA_ERROR_OUT_OF_MEMORY
                 "destroy default: 1"):
        assert line in out, out


def script_with_quota(start_pvgpud, libdir, tmp, script, quota):
    """Run a ctypes script over pvgpu's libcuda.so.1 as the only session of
    a VM (this uid) whose memory quota is `quota`."""
    policy = tmp / "policy.ini"
    policy.write_text(f"[default]\npolicy = refuse\n\n[vm me]\nuid = {os.getuid()}\n"
                      f"memory = {quota}\n")
    d = start_pvgpud("sim", extra_args=("--config", str(policy)),
                     env={"PVGPU_SIM_TWINS": str(TWINS)})
    path = tmp / "script.py"
    path.write_text(script)
    res = subprocess.run([sys.executable, str(path), str(LIBCUDA)], env=guest_env(libdir, d.unix),
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr + d.log()[-2000:]
    return res


def test_pool_memory_counts_against_quota(start_pvgpud, libdir, short_tmp):
    """Pool allocations are the VM's like any other: past its quota the
    allocation fails with out of memory for that VM."""
    res = script_with_quota(start_pvgpud, libdir, short_tmp, QUOTA_SCRIPT, "16M")
    assert res.stdout.split() == ["0", "2", "0"], res.stdout


QUOTA_SCRIPT = SCRIPT_PRELUDE + r'''
dev, ctx = context()
pool, p, q = vp(), c_u64(), c_u64()
assert cu.cuDeviceGetDefaultMemPool(ctypes.byref(pool), dev) == 0
r1 = cu.cuMemAllocFromPoolAsync(ctypes.byref(p), ctypes.c_size_t(12 << 20), pool, None)
r2 = cu.cuMemAllocFromPoolAsync(ctypes.byref(q), ctypes.c_size_t(12 << 20), pool, None)
r3 = cu.cuMemFreeAsync(p, None)
print(r1, r2, r3)
'''


def test_jit_link(daemon, libdir):
    """PTX linked on the backend (the sim hands the PTX back as the
    image), options and logs carried both ways, the image usable as a
    module; a bad input fails with the linker's error in the program's
    own log buffer."""
    out = passed(run_driver("ptxjit", libdir, daemon.unix), daemon)
    for line in ("linked: image 1, wall time positive 1, info log 1, error log empty 1",
                 "linked: c[10] = 10.25, c[999] = 999.25",
                 "from a file: c[10] = 10.25, c[999] = 999.25",
                 "missing file: 301",            # CUDA_ERROR_FILE_NOT_FOUND
                 "load with options: wall time not negative 1",
                 "loaded with options: c[10] = 10.25, c[999] = 999.25",
                 "bad ptx: 218"):                          # CUDA_ERROR_INVALID_PTX
        assert line in out, out


# ---- what a hostile guest may send (the new decoders and handlers) ---------

SET_ATTR, GET_ATTR = 202, 203
ATTR_BYTES = 64          # sizeof(CUstreamAttrValue)


def raw_session(daemon):
    s = W.Session(daemon.unix)
    s.hello()
    s.open_context()
    return s


def test_structures_checked_by_the_worker(daemon):
    s = raw_session(daemon)
    st, _, out, _ = s.call("stream_create", flags=1, priority=0)
    assert st == 0
    stream = out["stream"]
    value = struct.pack("<i", 3) + bytes(ATTR_BYTES - 4)      # sync policy 3
    # Well formed: set, then read back 64 bytes.
    st, _, _, _ = s.call("driver_call_data", fn=SET_ATTR, args=[stream, 3, 1], input=value)
    assert st == 0
    st, _, out, _ = s.call("driver_call_data", fn=GET_ATTR, args=[stream, 3, 1], input=b"")
    assert st == 0 and len(out["output"]) == ATTR_BYTES and out["output"][:4] == value[:4]
    # Too few bytes, too many, bytes nobody reads, a result not asked for.
    for args, data in (([stream, 3, 1], value[:10]), ([stream, 3, 1], value + b"x"),
                       ([stream, 3, 0], value), ([stream, 3, 1, 0], value)):
        assert s.call("driver_call_data", fn=SET_ATTR, args=args, input=data)[0] == 1, args
    st, _, out, _ = s.call("driver_call_data", fn=GET_ATTR, args=[stream, 3, 0], input=b"")
    assert out["output"] == b""
    # A structure call through the plain generic op, and the reverse.
    assert s.call("driver_call", fn=SET_ATTR, args=[stream, 3, 1])[0] == 1
    assert s.call("driver_call_data", fn=1, args=[2, 1 << 20], input=b"")[0] == 1
    # A foreign stream handle.
    assert s.call("driver_call_data", fn=SET_ATTR, args=[(1 << 24) | 77, 3, 1],
                  input=value)[0] == 400
    s.close()


def test_link_inputs_checked_by_the_worker(daemon):
    s = raw_session(daemon)
    ptx = PTX.read_bytes() + b"\0"
    good = dict(opt_key=[], opt_value=[], input_type=[1], input_size=[len(ptx)], size=len(ptx))
    st, _, out, _ = s.call("link_complete", data_in=ptx, **good)
    assert st == 0 and out["image_size"] == len(ptx)
    link = out["link"]
    # The wrong size, then the right one (which forgets the image).
    assert s.call("link_fetch", link=link, size=3)[0] == 1
    st, _, _, image = s.call("link_fetch", link=link, size=len(ptx))
    assert st == 0 and image == ptx
    assert s.call("link_fetch", link=link, size=len(ptx))[0] == 1
    # An option whose value would be a pointer (CU_JIT_GLOBAL_SYMBOL_NAMES),
    # an unknown input type, sizes that do not add up: refused, and the
    # inputs that follow are read and dropped, so the session goes on.
    for bad in (dict(good, opt_key=[17], opt_value=[0x41414141]),
                dict(good, input_type=[9]),
                dict(good, input_size=[len(ptx) - 1])):
        assert s.call("link_complete", data_in=ptx, **bad)[0] == 1, bad
    # Log sizes past the limit are cut to it: the reply still decodes.
    st, _, out, _ = s.call("link_complete", data_in=ptx,
                           **dict(good, opt_key=[3, 4], opt_value=[1, 1 << 40]))
    assert st == 0 and out["info_log"].startswith(b"sim link")
    assert s.call("link_fetch", link=out["link"], size=out["image_size"])[0] == 0
    s.close()


def run_debug(name, libdir, uri):
    """A driver program with PVGPU_DEBUG=1 (its debug lines on stderr); it
    must pass."""
    res = run_driver(name, libdir, uri, PVGPU_DEBUG="1")
    assert res.returncode == 0, res.stdout + res.stderr
    return res


def test_ipc_between_two_processes(daemon, libdir):
    """The driver-API program of the GPU tests for CUDA IPC, over the sim:
    a forked child opens the parent's interprocess event, device memory,
    VMM memory (descriptor over SCM_RIGHTS, made with no context current)
    and pool allocation, reads them and writes back what the parent sees."""
    out = passed(run_driver("ipcshare", libdir, daemon.unix), daemon)
    assert out[1:] == ["child: event opened, memory 0x1234", "child: vmm memory 0x5678",
                       "child: pool memory 0x9abc", "child: done",
                       "parent: memory 0xabcd, vmm memory 0xbcde, pool memory 0xcdef",
                       "PASS"], out


def test_module_load_jit_checked_by_the_worker(daemon):
    """cuModuleLoadDataEx's op: PTX with options loads as a module (the
    driver's own load, logs and results back); an option whose value would
    be a pointer, PTX whose NUL is not where the guest said, or a size
    past the limit, are refused and the session goes on."""
    s = raw_session(daemon)
    ptx = PTX.read_bytes() + b"\0"
    # CU_JIT_WALL_TIME, INFO_LOG_BUFFER(_SIZE_BYTES) and MAX_REGISTERS.
    good = dict(opt_key=[2, 3, 4, 0], opt_value=[0, 1, 64, 32], size=len(ptx))
    st, _, out, _ = s.call("module_load_jit", data_in=ptx, **good)
    assert st == 0 and out["module"], out
    assert out["info_log"].startswith(b"sim link") and len(out["info_log"]) < 64
    assert out["opt_result"][2] == len(out["info_log"]) + 1 and out["opt_result"][3] == 32
    assert s.call("module_get_function", module=out["module"], name="vec_add")[0] == 0
    assert s.call("module_unload", module=out["module"])[0] == 0
    for bad, data in ((dict(good, opt_key=[17], opt_value=[0x41414141]), ptx),
                      (dict(good, opt_key=[2, 3]), ptx),
                      (dict(good), ptx[:-1] + b"x"),
                      (dict(good, size=len(ptx) + 1), ptx + b"\0")):
        assert s.call("module_load_jit", data_in=data, **bad)[0] in (1, 200), bad
    st, _, out, _ = s.call("module_load_jit", data_in=ptx, **good)
    assert st == 0 and out["module"]
    s.close()


def test_zero_copy_over_a_window(daemon, libdir):
    """Over shm:// the window's pinned memory is the GPU's too: the kernel
    writes into the program's host memory, which it reads directly."""
    out = passed(run_driver("zerocopy", libdir, "shm://" + daemon.unix[len("unix://"):]), daemon)
    assert "written by the kernel into host memory: 12.0 4097.0" in out, out
    assert "after a memset through the device address: 0.0" in out
    assert "flags refused: 1" in out


def test_registered_memory_over_a_window(daemon, libdir):
    """Over shm:// memory the program registers (the heap, not page-aligned)
    is moved into the window: same addresses and bytes for the program,
    a device address for kernels, and the program's again after
    cuMemHostUnregister."""
    out = passed(run_driver("hostreg", libdir, "shm://" + daemon.unix[len("unix://"):]), daemon)
    assert "kept by registration: 10.0 2.0 -1.0" in out, out
    assert "registered twice: 712" in out       # HOST_MEMORY_ALREADY_REGISTERED
    assert "the program's write, read by the device: 100.0" in out
    assert "written by the kernel into registered memory: 102.0 12.0 4097.0" in out
    assert "copied through the device: 2.0 3.0 1002.0" in out
    assert "unregistered twice: 713" in out     # HOST_MEMORY_NOT_REGISTERED
    assert "the program's again: 100.0 7.0 12.0" in out
    assert "stack buffer kept: 50.0 63.0" in out


def test_registered_memory_without_a_window(daemon, libdir):
    """Over a plain socket registration is remembered, but no kernel can
    reach the memory: a clear NOT_SUPPORTED for its device pointer."""
    out = passed(run_driver("hostreg", libdir, daemon.unix), daemon)
    assert "kept by registration: 10.0 2.0 -1.0" in out, out
    assert "mapped host memory: not supported over this transport" in out


FILE_REGISTER = SCRIPT_PRELUDE + r"""
import mmap, os, tempfile
dev, ctx = context()
fd, path = tempfile.mkstemp()
os.write(fd, b"x" * 8192)
m = mmap.mmap(fd, 8192)
buf = (ctypes.c_char * 8192).from_buffer(m)
must("cuMemHostRegister_v2", buf, ctypes.c_size_t(8192), 2)
m[0:5] = b"hello"
d = ctypes.c_uint64()
print("device pointer", cu.cuMemHostGetDevicePointer_v2(ctypes.byref(d), buf, 0))
must("cuMemHostUnregister", buf)
del buf
m.close()
print("file", open(path, "rb").read(5))
os.unlink(path)
print("PASS")
"""


def test_registered_file_pages_stay_the_files(daemon, libdir, tmp_path):
    """A file's mapped pages are never moved into the window (writes must
    reach the file): registration is remembered only."""
    out, _ = run_guest_script(tmp_path, FILE_REGISTER, libdir / "libcuda.so.1",
                              guest_env(libdir, "shm://" + daemon.unix[len("unix://"):]))
    assert "device pointer 801" in out, out
    assert "file b'hello'" in out, out


def test_zero_copy_without_a_window(daemon, libdir):
    """Over a plain socket there is no memory both sides see: a clear
    CUDA_ERROR_NOT_SUPPORTED, with a debug line naming the call."""
    res = run_debug("zerocopy", libdir, daemon.unix)
    assert "mapped host memory: not supported over this transport" in res.stdout
    assert "cuMemHostGetDevicePointer_v2" in res.stderr, res.stderr


def test_managed_memory_over_a_window(daemon, libdir):
    """Over shm:// managed memory is the window's, at one address for the
    program and the device: the kernel increments what the program wrote,
    hints are remembered, and a kernel spinning on cuMemHostAlloc'd memory
    by its host pointer sees another thread's store."""
    out = passed(run_driver("managed", libdir, "shm://" + daemon.unix[len("unix://"):]), daemon)
    for line in ("managed memory: 1, concurrent access: 1",
                 "flags 0: 1, size 0: 1",
                 "is managed: 1, memory type: 2, host pointer is the pointer: 1",
                 "incremented by the kernel: 11 65536",
                 "read mostly: 1", "read mostly after unset: 0",
                 "preferred location is the device: 1",
                 "last prefetch is the device: 1",
                 "after a launch on its stream: 9",
                 "after a memset: 7 7",
                 "copied back from device memory: 102",
                 "freed, its attributes refused: 1",
                 "memset by its host pointer: 5 5",
                 "the program saw the kernel's answer before synchronizing: 1",
                 "the kernel saw the host's flag: 1"):
        assert line in out, out


def test_managed_memory_without_a_window(daemon, libdir):
    """Over a plain socket the device has no managed memory, and
    cuMemAllocManaged says CUDA_ERROR_NOT_SUPPORTED naming itself."""
    res = run_debug("managed", libdir, daemon.unix)
    assert "managed memory: not supported over this transport (801)" in res.stdout
    assert "cuMemAllocManaged" in res.stderr, res.stderr


def test_virtual_memory_management(daemon, libdir):
    """Physical memory, reserved ranges and mappings live in the worker's
    tables; mapped addresses are valid for copies and kernels until
    unmapped."""
    out = passed(run_driver("vmm", libdir, daemon.unix), daemon)
    assert "the same without a context: 1" in out, out
    assert "across the seam: 0.0 1.0 2.0 3.0" in out, out
    assert "past the mapped range: 1" in out, out
    for line in ("granularity a power of two of at least 64 KiB: 1",
                 "access: 3",
                 "map twice: 1",
                 "computed in mapped memory: 3.0 4097.0",
                 "properties: type 1, device ours 1"):
        assert line in out, out


VMM_SCRIPT = SCRIPT_PRELUDE + r'''
dev, ctx = context()
class Loc(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]
class Prop(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("handle", ctypes.c_int), ("loc", Loc),
                ("meta", vp), ("comp", ctypes.c_ubyte), ("gpud", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("res", ctypes.c_ubyte * 4)]
class Desc(ctypes.Structure):
    _fields_ = [("loc", Loc), ("flags", ctypes.c_int)]
G = 2 << 20
prop = Prop(1, 0, Loc(1, 0), vp(0x4141414141))      # a guest pointer in the metadata
h, va = u64(), u64()
out = []
out.append(cu.cuMemCreate(ctypes.byref(h), sz(G), ctypes.byref(prop), u64(0)))
out.append(cu.cuMemCreate(ctypes.byref(u64()), sz(64 * G), ctypes.byref(prop), u64(0)))
out.append(cu.cuMemAddressReserve(ctypes.byref(va), sz(4 * G), sz(0), u64(0), u64(0)))
out.append(cu.cuMemMap(u64(va.value + 8 * G), sz(G), sz(0), h, u64(0)))   # outside the range
out.append(cu.cuMemMap(va, sz(2 * G), sz(0), h, u64(0)))                 # past the handle
out.append(cu.cuMemMap(va, sz(G), sz(0), u64(0x1234), u64(0)))           # a forged handle
out.append(cu.cuMemMap(va, sz(G), sz(0), h, u64(0)))
descs = (Desc * 2)(Desc(Loc(1, 0), 3), Desc(Loc(1, 0), 3))
out.append(cu.cuMemSetAccess(va, sz(G), descs, sz(2)))
out.append(cu.cuMemAddressFree(va, sz(4 * G)))                          # still mapped
out.append(cu.cuMemUnmap(va, sz(G)))
buf = ctypes.create_string_buffer(16)
out.append(cu.cuMemcpyDtoH_v2(buf, va, sz(16)))                          # unmapped now
out.append(cu.cuMemRelease(h))
out.append(cu.cuMemRelease(h))
out.append(cu.cuMemAddressFree(va, sz(4 * G)))
print(*out)
'''


def test_vmm_checked_by_the_worker(start_pvgpud, libdir, short_tmp):
    """Physical memory counts against the VM's quota; mappings must lie
    in a reservation of the session's and within the physical memory of a
    handle of its own; several access descriptors go one by one."""
    res = script_with_quota(start_pvgpud, libdir, short_tmp, VMM_SCRIPT, "64M")
    # create, over quota (2), reserve, outside (1), past (1), forged (400),
    # map, two descriptors, free while mapped (1), unmap, copy (1),
    # release, release again (400), free.
    assert res.stdout.split() == ["0", "2", "0", "1", "1", "400", "0", "0", "1", "0", "1",
                                  "0", "400", "0"], res.stdout


# What both sides of an IPC test start with: a context of their own.
IPC_PRELUDE = SCRIPT_PRELUDE + r'''
dev, ctx = context()
'''

# An exporter ends by printing its handle h and waiting to be told to go.
IPC_SERVE = r'''
print(bytes(h).hex(), flush=True)
sys.stdin.readline()
'''

# An importer has the handle (argv[2]) as the driver's struct, and forged
# copies of it (one bit of byte i turned).
IPC_HANDLE = IPC_PRELUDE + r'''
class H(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_ubyte * 64)]
raw = bytes.fromhex(sys.argv[2])
def handle(raw):
    h = H()
    ctypes.memmove(h.reserved, raw, 64)
    return h
def forged(i):
    f = bytearray(raw)
    f[i] ^= 1
    return bytes(f)
'''

IPC_EXPORT = IPC_PRELUDE + r'''
d = u64()
assert cu.cuMemAlloc_v2(ctypes.byref(d), sz(4096)) == 0
assert cu.cuMemsetD32_v2(d, ctypes.c_uint(0x1234), sz(1024)) == 0
h = (ctypes.c_ubyte * 64)()
assert cu.cuIpcGetMemHandle(h, d) == 0
''' + IPC_SERVE

IPC_IMPORT = IPC_HANDLE + r'''
d = u64()
def open_(raw):
    return cu.cuIpcOpenMemHandle_v2(ctypes.byref(d), handle(raw), 1)
r = open_(raw)
out = [r]
if r == 0:
    buf = (ctypes.c_uint * 4)()
    out.append(cu.cuMemcpyDtoH_v2(buf, u64(d.value + 64), sz(16)))
    out.append(hex(buf[0]))
    out.append(cu.cuIpcCloseMemHandle(d))
    out.append(cu.cuIpcCloseMemHandle(d))
out.append(open_(forged(0)))
print(*out)
'''

BOB_TOKEN = "bob-secret-token-0123456789"


def ipc_exported(start_pvgpud, short_tmp, export_src, import_src):
    """pvgpud (sim) with Alice's VM (uid) and Bob's (token); a process of
    Alice's running export_src, which prints a handle and waits; returns
    (daemon, importer, exporter) where importer(uri, token) runs
    import_src with the handle as a process of that VM: its output words."""
    d = alice_and_bob(start_pvgpud, short_tmp, BOB_TOKEN, env={"PVGPU_SIM_TWINS": str(TWINS)})
    (short_tmp / "export.py").write_text(export_src)
    (short_tmp / "import.py").write_text(import_src)
    exporter = subprocess.Popen([sys.executable, str(short_tmp / "export.py"), str(LIBCUDA)],
                                env=guest_env(LIBCUDA.parent, d.unix), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
    handle = exporter.stdout.readline().strip()
    if len(handle) != 128:
        exporter.kill()
        pytest.fail("no handle: " + handle + d.log()[-2000:])

    def importer(uri, token=None):
        res = subprocess.run([sys.executable, str(short_tmp / "import.py"), str(LIBCUDA), handle],
                             env=guest_env(LIBCUDA.parent, uri, token), capture_output=True,
                             text=True, timeout=60)
        assert res.returncode == 0, res.stdout + res.stderr + d.log()[-2000:]
        return res.stdout.split()
    return d, importer, exporter


def done(exporter):
    exporter.stdin.write("\n")
    exporter.stdin.close()
    exporter.wait(timeout=30)


def test_ipc_within_a_vm_and_not_across(start_pvgpud, short_tmp):
    """An allocation exported by one process of a VM opens in another
    process of the same VM, sharing its bytes; the same token sent by a
    session of another VM, or a forged one, opens nothing."""
    d, importer, exporter = ipc_exported(start_pvgpud, short_tmp, IPC_EXPORT, IPC_IMPORT)
    try:
        # Alice's second process: opened, the exporter's bytes, closed once.
        assert importer(d.unix) == ["0", "0", "0x1234", "0", "1", "1"]
        # Bob's session with Alice's token, and a forged token: nothing.
        assert importer(d.tcp, BOB_TOKEN) == ["1", "1"]
        assert "vm bob" in d.log()
    finally:
        done(exporter)


IPC_EVENT_EXPORT = IPC_PRELUDE + r'''
e, plain = vp(), vp()
h = (ctypes.c_ubyte * 64)()
# CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING; a plain event has no handle.
assert cu.cuEventCreate(ctypes.byref(plain), 0) == 0
assert cu.cuIpcGetEventHandle(h, plain) == 1
assert cu.cuEventCreate(ctypes.byref(e), 6) == 0
assert cu.cuEventRecord(e, None) == 0
assert cu.cuIpcGetEventHandle(h, e) == 0
''' + IPC_SERVE

IPC_EVENT_IMPORT = IPC_HANDLE + r'''
e = vp()
def open_(raw):
    return cu.cuIpcOpenEventHandle(ctypes.byref(e), handle(raw))
r = open_(raw)
out = [r]
if r == 0:
    ms = ctypes.c_float()
    out.append(cu.cuStreamWaitEvent(None, e, 0))
    out.append(cu.cuEventSynchronize(e))
    out.append(cu.cuEventQuery(e))
    out.append(cu.cuEventElapsedTime(ctypes.byref(ms), e, e))   # no timing
    out.append(cu.cuEventDestroy_v2(e))
out.append(open_(forged(3)))
# An event's token is no memory's.
d = u64()
out.append(cu.cuIpcOpenMemHandle_v2(ctypes.byref(d), handle(raw), 1))
print(*out)
'''


def test_ipc_event_within_a_vm_and_not_across(start_pvgpud, short_tmp):
    """An interprocess event exported by one process of a VM opens in
    another process of the same VM (waited on, synchronised, destroyed;
    no timing, as its flags say); another VM's session or a forged token
    opens nothing, and an event made without CU_EVENT_INTERPROCESS has no
    handle."""
    d, importer, exporter = ipc_exported(start_pvgpud, short_tmp, IPC_EVENT_EXPORT,
                                         IPC_EVENT_IMPORT)
    try:
        # Alice's second process: opened, usable, no timing, destroyed.
        assert importer(d.unix) == ["0", "0", "0", "0", "400", "0", "1", "1"]
        # Bob's session with Alice's token, and a forged token: nothing.
        assert importer(d.tcp, BOB_TOKEN) == ["1", "1", "1"]
        assert "vm bob" in d.log()
    finally:
        done(exporter)


def share(start_pvgpud, libdir, short_tmp, script):
    """Run a share_*.py script as Alice (unix socket) whose children are
    one process of Alice's VM and one of Bob's (tcp, token); its output
    split at "|"."""
    d = alice_and_bob(start_pvgpud, short_tmp, BOB_TOKEN)
    res = subprocess.run([sys.executable, str(REPO / "tests" / "integration" / script),
                          str(LIBCUDA), "parent", d.unix, d.tcp, BOB_TOKEN],
                         env=guest_env(libdir, d.unix), capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr + d.log()[-2000:]
    assert "vm bob" in d.log()
    return res.stdout.strip().split("|")


def test_vmm_shareable_fd_within_a_vm_and_not_across(start_pvgpud, libdir, short_tmp):
    """As NVIDIA's memMapIPCDrv: physical memory made and exported with no
    context current, its POSIX descriptor passed with SCM_RIGHTS; a process
    of the same VM imports, maps and sees the exporter's bytes, and the
    exporter sees what it wrote; a process of another VM imports nothing,
    nor does a descriptor that is not a shareable handle."""
    assert share(start_pvgpud, libdir, short_tmp, "share_vmm.py") == \
        ["0 0x5678 0", "1", "0xabcd", "1", "0"]


def test_pool_shareable_fd_within_a_vm_and_not_across(start_pvgpud, libdir, short_tmp):
    """As NVIDIA's streamOrderedAllocationIPC: a pool made with POSIX
    descriptor handles is exported (one without handle types is not), its
    descriptor passed with SCM_RIGHTS and a pointer's export data with it;
    a process of the same VM imports both, sees and changes the bytes and
    frees the pointer once; another VM's process imports the pool but not
    the pointer."""
    assert share(start_pvgpud, libdir, short_tmp, "share_pool.py") == \
        ["1", "0 0 0x9abc 0 1", "0 1", "0x1111", "0", "0"]
