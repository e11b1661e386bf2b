"""Several GPUs of one backend, against `pvgpud --executor sim`
with PVGPU_SIM_DEVICES=2: peer queries, peer access, peer copies (sync and
async, the data checked), plain copies between the GPUs, and the policy per
GPU: `gpus=` holds for peers too, the quota spans the GPUs, exclusivity and
scheduler turns are per GPU.

Most sessions speak the wire protocol directly (tests/lib/pvgpu_wire.py);
tests/programs/peer.cu runs unmodified through NVIDIA's runtime over
pvgpu's libcuda.so.1, shared and linked in.
"""
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import pvgpu_wire as W  # noqa: E402
from pvgpu_sessions import hello_session as session, wait_live  # noqa: E402
import pvgpu_peer as peer_calls  # noqa: E402
from pvgpu_peer import (CUDA_ERROR_INVALID_CONTEXT, CUDA_ERROR_INVALID_DEVICE,  # noqa: E402
                        CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED,
                        CUDA_ERROR_PEER_ACCESS_NOT_ENABLED,
                        CUDA_ERROR_PEER_ACCESS_UNSUPPORTED)
from pvgpu_guest import SCRIPT_PRELUDE, guest_env, run_guest_script  # noqa: E402
sys.path.insert(0, os.path.dirname(__file__))
# NVIDIA's runtime and pvgpu's libcuda.so.1 in one folder (a fixture).
from test_driver_api import LIBCUDA  # noqa: E402

REPO = Path(__file__).resolve().parent.parent.parent
BUILD = REPO / os.environ.get("PVGPU_BUILD", "build")
TEST_TWINS = BUILD / "tests" / "sim-twins" / "libtest-twins.so"
BENCH_TWINS = BUILD / "tests" / "sim-twins" / "libbench-twins.so"
FAIR = BUILD / "bench" / "pvgpu-fair"

from curesult import (  # noqa: E402
    CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_DEVICE_UNAVAILABLE,
    CUDA_ERROR_INVALID_HANDLE)
P2P_ACCESS_SUPPORTED = 2

BOB_TOKEN = "bob-token-19"
CAROL_TOKEN = "carol-token-19"


def two_gpus(start_pvgpud, tmp_path=None, policy=None, **env):
    """pvgpud --executor sim with two simulated devices (and a policy)."""
    e = {"PVGPU_SIM_DEVICES": "2", "PVGPU_SIM_TWINS": str(TEST_TWINS)}
    e.update(env)
    args = []
    if policy is not None:
        path = tmp_path / "pvgpud.conf"
        path.write_text(textwrap.dedent(policy))
        args = ["--config", str(path)]
    daemon = start_pvgpud("sim", extra_args=args, env=e)
    wait_live(daemon)
    return daemon


def ctx(s, device):
    st, _d, out, _ = s.call("ctx_create", device=device)
    assert st == 0, (device, st)
    return out["ctx"]


def use(s, c):
    s.queue("ctx_set", ctx=c)


def alloc(s, size):
    st, _d, out, _ = s.call("mem_alloc", size=size)
    assert st == 0, st
    return out["dptr"]


def put(s, dptr, data):
    assert s.call("memcpy_htod", data_in=data, dst=dptr, size=len(data),
                  stream=0)[0] == 0


def get(s, dptr, size):
    st, _d, _o, data = s.call("memcpy_dtoh", src=dptr, size=size, stream=0)
    assert st == 0, st
    return data


def pattern(n, seed):
    return bytes((i * 31 + seed * 17 + (i >> 8)) & 0xff for i in range(n))


# --- queries ---------------------------------------------------------------

def test_peer_queries(start_pvgpud):
    daemon = two_gpus(start_pvgpud)
    s = session(daemon)
    assert s.call("device_get_count")[2]["count"] == 2

    def can(d, p):
        st, _d, out, _ = s.call("device_can_access_peer", device=d, peer=p)
        return st, out["can_access"]

    def attr(a, src, dst):
        st, _d, out, _ = s.call("device_p2p_attribute", attrib=a,
                                src_device=src, dst_device=dst)
        return st, out["value"]

    assert can(0, 1) == (0, 1)
    assert can(1, 0) == (0, 1)
    assert can(0, 0) == (0, 0)          # a device is not its own peer
    for bad in ((0, 2), (2, 0), (-1, 0), (0, 1 << 30)):
        assert can(*bad)[0] == CUDA_ERROR_INVALID_DEVICE, bad
    assert attr(P2P_ACCESS_SUPPORTED, 0, 1) == (0, 1)
    assert attr(P2P_ACCESS_SUPPORTED, 1, 1)[0] == CUDA_ERROR_INVALID_DEVICE
    assert attr(P2P_ACCESS_SUPPORTED, 0, 7)[0] == CUDA_ERROR_INVALID_DEVICE
    assert attr(99, 0, 1)[0] == CUDA_ERROR_INVALID_VALUE
    assert attr(0, 0, 1)[0] == CUDA_ERROR_INVALID_VALUE   # no such attribute
    s.close()


def test_no_peer_pair(start_pvgpud):
    """PVGPU_SIM_NO_PEER=0-1: the two devices cannot reach each other, as
    two GPUs on different PCIe roots without NVLink; copies still work."""
    daemon = two_gpus(start_pvgpud, PVGPU_SIM_NO_PEER="0-1")
    s = session(daemon)
    assert s.call("device_can_access_peer", device=0, peer=1)[2]["can_access"] == 0
    assert s.call("device_p2p_attribute", attrib=P2P_ACCESS_SUPPORTED,
                  src_device=1, dst_device=0)[2]["value"] == 0
    c0, c1 = ctx(s, 0), ctx(s, 1)
    use(s, c1)
    assert s.call("ctx_enable_peer_access", peer_ctx=c0, flags=0)[0] == \
        CUDA_ERROR_PEER_ACCESS_UNSUPPORTED
    d1 = alloc(s, 4096)
    use(s, c0)
    d0 = alloc(s, 4096)
    put(s, d0, pattern(4096, 1))
    assert s.call("memcpy_peer", dst=d1, dst_ctx=c1, src=d0, src_ctx=c0,
                  size=4096)[0] == 0
    use(s, c1)
    assert get(s, d1, 4096) == pattern(4096, 1)
    s.close()


def test_bad_no_peer_setting_is_refused(start_pvgpud):
    daemon = two_gpus(start_pvgpud, PVGPU_SIM_NO_PEER="0-x")
    s = W.Session(daemon.unix, timeout=30)
    st, _d, _o, _ = s.call("hello", version_min=1, version_max=W.P.VERSION,
                           pid=os.getpid(), token="", client="pytest")
    assert st != 0
    s.close()
    assert "PVGPU_SIM_NO_PEER=0-x" in daemon.log()


# --- peer access -----------------------------------------------------------

def test_enable_and_disable_peer_access(start_pvgpud):
    daemon = two_gpus(start_pvgpud)
    s = session(daemon)
    c0, c1 = ctx(s, 0), ctx(s, 1)
    c0b = ctx(s, 0)                      # a second context on device 0

    def enable(peer, flags=0):
        return s.call("ctx_enable_peer_access", peer_ctx=peer, flags=flags)[0]

    def disable(peer):
        return s.call("ctx_disable_peer_access", peer_ctx=peer)[0]

    # No current context yet.
    assert enable(c1) == CUDA_ERROR_INVALID_CONTEXT
    use(s, c0)
    assert enable(c0b) == CUDA_ERROR_PEER_ACCESS_UNSUPPORTED  # same device
    assert enable(c1, flags=1) == CUDA_ERROR_INVALID_VALUE
    assert enable(0) == CUDA_ERROR_INVALID_CONTEXT
    assert enable(c1 + 12345) == CUDA_ERROR_INVALID_CONTEXT
    assert disable(c1) == CUDA_ERROR_PEER_ACCESS_NOT_ENABLED
    assert enable(c1) == 0
    assert enable(c1) == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
    assert disable(c1) == 0
    assert disable(c1) == CUDA_ERROR_PEER_ACCESS_NOT_ENABLED
    assert enable(c1) == 0
    # The peer's context goes: so does the access to it.
    assert s.call("ctx_destroy", ctx=c1)[0] == 0
    assert disable(c1) == CUDA_ERROR_INVALID_CONTEXT
    c1 = ctx(s, 1)
    assert enable(c1) == 0
    assert "peer access enabled: context on device 0 to device 1" in daemon.log()
    s.close()


# --- copies ------------------------------------------------------------------

def test_peer_copies(start_pvgpud):
    daemon = two_gpus(start_pvgpud)
    s = session(daemon)
    n = (1 << 20) + 5
    c0, c1 = ctx(s, 0), ctx(s, 1)
    use(s, c1)
    a1 = alloc(s, n)
    b1 = alloc(s, n)
    use(s, c0)
    a0 = alloc(s, n)
    b0 = alloc(s, n)
    data = pattern(n, 3)
    put(s, a0, data)

    # Synchronous: device 0 -> device 1, issued in device 0's context.
    assert s.call("memcpy_peer", dst=a1, dst_ctx=c1, src=a0, src_ctx=c0,
                  size=n)[0] == 0
    use(s, c1)
    assert get(s, a1, n) == data

    # Asynchronous on a stream of the current context (device 1), 1 -> 0.
    st, _d, out, _ = s.call("stream_create", flags=0, priority=0)
    assert st == 0
    stream = out["stream"]
    s.queue("memcpy_peer_async", dst=b0, dst_ctx=c0, src=a1, src_ctx=c1,
            size=n, stream=stream)
    st, deferred, _o, _ = s.call("stream_synchronize", stream=stream)
    assert (st, deferred) == (0, 0)
    use(s, c0)
    assert get(s, b0, n) == data

    # A plain device-to-device copy between the GPUs (unified addressing).
    put(s, a0, pattern(n, 4))
    assert s.call("memcpy_dtod", dst=b1, src=a0, size=n, stream=0)[0] == 0
    s.queue("memcpy_dtod_async", dst=b0 + 1, src=b1, size=n - 1, stream=0)
    assert s.call("ctx_synchronize")[:2] == (0, 0)
    assert get(s, b0, n) == pattern(n, 3)[:1] + pattern(n, 4)[:n - 1]
    use(s, c1)
    assert get(s, b1, n) == pattern(n, 4)
    s.close()


def test_peer_copy_checks(start_pvgpud):
    """Every name a guest sends is checked: contexts are the session's,
    each pointer lies in an allocation on its context's device, ranges do
    not run past an allocation, a stream belongs to the current context."""
    daemon = two_gpus(start_pvgpud)
    s = session(daemon)
    c0, c1 = ctx(s, 0), ctx(s, 1)
    use(s, c1)
    d1 = alloc(s, 4096)
    use(s, c0)
    d0 = alloc(s, 4096)
    st, _d, out, _ = s.call("stream_create", flags=0, priority=0)
    s0 = out["stream"]

    def peer(**kw):
        args = dict(dst=d1, dst_ctx=c1, src=d0, src_ctx=c0, size=4096)
        args.update(kw)
        return s.call("memcpy_peer", **args)[0]

    assert peer() == 0
    assert peer(size=4097) == CUDA_ERROR_INVALID_VALUE
    assert peer(dst=d1 + 1) == CUDA_ERROR_INVALID_VALUE
    assert peer(src=d0 - 1) == CUDA_ERROR_INVALID_VALUE
    assert peer(size=(1 << 64) - 1) == CUDA_ERROR_INVALID_VALUE
    assert peer(dst=0x1000) == CUDA_ERROR_INVALID_VALUE
    # A pointer named with the other device's context: the memory is the
    # session's, and NVIDIA's driver copies it (unified addressing).
    assert peer(dst_ctx=c0) == 0
    assert peer(src_ctx=c1) == 0
    # Contexts the session does not have.
    assert peer(dst_ctx=0) == CUDA_ERROR_INVALID_CONTEXT
    assert peer(src_ctx=c1 ^ (1 << 40)) == CUDA_ERROR_INVALID_CONTEXT
    assert peer(size=0, src_ctx=777) == CUDA_ERROR_INVALID_CONTEXT
    assert peer(size=0) == 0
    # Async: errors come back deferred, on the next reply.
    s.queue("memcpy_peer_async", dst=d1, dst_ctx=c1, src=d0, src_ctx=c0,
            size=8192, stream=s0)
    assert s.call("ctx_synchronize")[1] == CUDA_ERROR_INVALID_VALUE
    use(s, c1)                       # s0 is device 0's stream
    s.queue("memcpy_peer_async", dst=d1, dst_ctx=c1, src=d0, src_ctx=c0,
            size=16, stream=s0)
    assert s.call("ctx_synchronize")[1] == CUDA_ERROR_INVALID_HANDLE
    s.queue("memcpy_peer_async", dst=d1, dst_ctx=c1, src=d0, src_ctx=c0,
            size=16, stream=0)
    assert s.call("ctx_synchronize")[:2] == (0, 0)
    # A freed allocation is no longer anybody's.
    use(s, c0)
    assert s.call("mem_free", dptr=d0)[0] == 0
    assert peer() == CUDA_ERROR_INVALID_VALUE
    # Another session's memory and contexts are not this one's.
    t = session(daemon)
    tc1 = ctx(t, 1)
    use(t, tc1)
    td1 = alloc(t, 4096)
    assert t.call("memcpy_peer", dst=td1, dst_ctx=tc1, src=d1, src_ctx=c1,
                  size=16)[0] in (CUDA_ERROR_INVALID_VALUE,
                                  CUDA_ERROR_INVALID_CONTEXT)
    t.close()
    s.close()


# --- NVIDIA's runtime over libcuda.so.1, shared ------------------------------

@pytest.mark.parametrize("transport", ["unix", "shm"])
def test_peer_program(programs, start_pvgpud, transport):
    daemon = two_gpus(start_pvgpud)
    uri = daemon.unix if transport == "unix" else \
        "shm://" + daemon.unix[len("unix://"):]
    res = programs.run("peer", programs.pvgpu_env(uri))
    programs.assert_passed(res, daemon)
    out = res.stdout
    assert "can access peer 0->1: 1, 1->0: 1, 0->0: 0" in out
    assert "enable peer access 1->0: cudaSuccess" in out
    assert "peer_add on GPU 1 over GPU 0's memory" in out
    assert "peer access enabled: context on device 1 to device 0" in daemon.log()


def test_peer_program_without_peer_access(programs, start_pvgpud):
    daemon = two_gpus(start_pvgpud, PVGPU_SIM_NO_PEER="0-1")
    res = programs.run("peer", programs.pvgpu_env(daemon.unix))
    programs.assert_passed(res, daemon)
    assert "can access peer 0->1: 0, 1->0: 0, 0->0: 0" in res.stdout
    assert "enable peer access 1->0: cudaErrorPeerAccessUnsupported" in res.stdout
    assert "cudaMemcpyPeerAsync 1->0" in res.stdout


def test_peer_program_one_device(programs, sim_daemon):
    res = programs.run("peer", programs.pvgpu_env(sim_daemon.unix))
    programs.assert_passed(res, sim_daemon)
    assert "fewer than 2 devices" in res.stdout


# --- NVIDIA's runtime over libcuda.so.1, linked in ---------------------------

@pytest.mark.parametrize("transport", ["unix", "shm"])
def test_peer_program_over_libcuda(programs, start_pvgpud, libdir, transport):
    """The peer program as above, built nvcc's default way (the runtime
    linked in): libcuda.so.1 asks the backend about peers, enables access
    there, and its peer copies run on the host, none through the guest."""
    daemon = two_gpus(start_pvgpud)
    uri = daemon.unix if transport == "unix" else \
        "shm://" + daemon.unix[len("unix://"):]
    res = programs.run("static/peer", guest_env(libdir, uri, PVGPU_DEBUG="1"))
    programs.assert_passed(res, daemon)
    out = res.stdout
    assert "can access peer 0->1: 1, 1->0: 1, 0->0: 0" in out
    assert "p2p attribute access supported 0->1: 1" in out
    assert "enable peer access 1->0: cudaSuccess" in out
    assert "peer_add on GPU 1 over GPU 0's memory" in out
    assert "disable peer access 1->0: cudaSuccess" in out
    assert "peer access enabled: context on device 1 to device 0" in daemon.log()
    assert "staged through the guest" not in res.stderr, res.stderr[-3000:]


def test_peer_program_over_libcuda_without_peer_access(programs, start_pvgpud, libdir):
    """GPUs the host's driver says are no peers: libcuda.so.1 says so, and
    enabling access fails as NVIDIA's driver fails it; copies still run
    GPU to GPU on the host."""
    daemon = two_gpus(start_pvgpud, PVGPU_SIM_NO_PEER="0-1")
    res = programs.run("static/peer", guest_env(libdir, daemon.unix, PVGPU_DEBUG="1"))
    programs.assert_passed(res, daemon)
    assert "can access peer 0->1: 0, 1->0: 0, 0->0: 0" in res.stdout
    assert "enable peer access 1->0: cudaErrorPeerAccessUnsupported" in res.stdout
    assert "cudaMemcpyPeerAsync 1->0" in res.stdout
    assert "staged through the guest" not in res.stderr, res.stderr[-3000:]


def test_peer_driver_calls_answer_as_the_driver(start_pvgpud, libdir, tmp_path):
    """libcuda.so.1's peer calls, one by one, against two GPUs of one
    backend: what they are given (device indexes, contexts, pointers) is
    checked, and the errors are NVIDIA's driver's."""
    daemon = two_gpus(start_pvgpud)
    out, _ = run_guest_script(tmp_path, peer_calls.SCRIPT, LIBCUDA,
                              guest_env(libdir, daemon.unix))
    assert out == peer_calls.answers(), out
    assert "peer access enabled: context on device 1 to device 0" in daemon.log()


def test_peers_of_two_backends_share_no_memory(start_pvgpud, libdir, tmp_path):
    """One GPU on each of two pvgpuds: libcuda.so.1 says they are no peers
    without asking, refuses peer access as the driver does, and stages a
    copy between them through the guest."""
    a, b = start_pvgpud("sim"), start_pvgpud("sim")
    out, err = run_guest_script(tmp_path, peer_calls.SCRIPT.replace(
        'must("cuDeviceCanAccessPeer", ctypes.byref(val), 1, 0)\nprint("can", val.value)\n'
        'ask("cuDeviceCanAccessPeer", ctypes.byref(val), 1, 2)',
        'must("cuDeviceCanAccessPeer", ctypes.byref(val), 1, 0)\nprint("can", val.value)\n'
        'ask("cuCtxEnablePeerAccess", ctx[0], 0)\n'
        'must("cuMemcpyPeer", buf[1], ctx[1], buf[0], ctx[0], sz(4096))\nprint("PASS")\n'
        'sys.exit(0)'), LIBCUDA,
        guest_env(libdir, f"{a.unix},{b.unix}", PVGPU_DEBUG="1"))
    assert out == ["can 0", f"cuCtxEnablePeerAccess {CUDA_ERROR_PEER_ACCESS_UNSUPPORTED}",
                   "PASS"], out
    assert "device 0 to device 1 staged through the guest" in err, err[-3000:]
    # The bytes went up from one node and down to the other.
    a.wait_log(r"session \d+ end: .*, 4096 B from device")
    b.wait_log(r"session \d+ end: .*, 4096 B to device")


# --- policy per GPU ----------------------------------------------------------

def test_gpus_restricts_peers(start_pvgpud, tmp_path):
    """A VM with gpus = 0 can neither hold a context on device 1 nor reach
    it as a peer: queries say "no access", and memory on device 1 (another
    VM's) cannot be the far end of its copies."""
    daemon = two_gpus(start_pvgpud, tmp_path, f"""
        [vm alice]
        uid = {os.getuid()}
        gpus = 0

        [vm bob]
        token = {BOB_TOKEN}
        gpus = 1
        """)
    a = session(daemon)
    assert a.call("ctx_create", device=1)[0] == CUDA_ERROR_INVALID_DEVICE
    assert a.call("device_can_access_peer", device=0, peer=1)[2]["can_access"] == 0
    assert a.call("device_can_access_peer", device=1, peer=0)[2]["can_access"] == 0
    st, _d, out, _ = a.call("device_p2p_attribute", attrib=P2P_ACCESS_SUPPORTED,
                            src_device=0, dst_device=1)
    assert (st, out["value"]) == (0, 0)
    c0 = ctx(a, 0)
    use(a, c0)
    a0 = alloc(a, 4096)
    b = session(daemon, BOB_TOKEN)
    assert b.call("ctx_create", device=0)[0] == CUDA_ERROR_INVALID_DEVICE
    assert b.call("device_can_access_peer", device=1, peer=0)[2]["can_access"] == 0
    b1 = ctx(b, 1)
    use(b, b1)
    bd = alloc(b, 4096)
    put(b, bd, pattern(4096, 9))
    # alice names bob's memory on device 1, with her context or with the
    # number of bob's (handles are per session: it may well be one of hers).
    for kw in (dict(dst=bd, dst_ctx=c0), dict(dst=bd, dst_ctx=b1)):
        st = a.call("memcpy_peer", src=a0, src_ctx=c0, size=4096, **kw)[0]
        assert st in (CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_INVALID_CONTEXT), kw
    assert a.call("memcpy_dtod", dst=bd, src=a0, size=4096, stream=0)[0] == \
        CUDA_ERROR_INVALID_VALUE
    assert get(b, bd, 4096) == pattern(4096, 9)
    a.close()
    b.close()


def test_quota_spans_gpus(start_pvgpud, tmp_path):
    """memory = is the VM's quota over all its GPUs: what it holds on
    device 0 counts on device 1, and cuMemGetInfo says so on both."""
    MiB = 1 << 20
    daemon = two_gpus(start_pvgpud, tmp_path, f"""
        [vm alice]
        uid = {os.getuid()}
        memory = 4M
        """)
    s = session(daemon)
    c0, c1 = ctx(s, 0), ctx(s, 1)
    use(s, c0)
    alloc(s, 3 * MiB)
    use(s, c1)
    assert s.call("mem_alloc", size=2 * MiB)[0] == CUDA_ERROR_OUT_OF_MEMORY
    st, _d, info, _ = s.call("mem_get_info")
    assert (st, info["total"], info["free"]) == (0, 4 * MiB, 1 * MiB)
    d1 = alloc(s, MiB)
    # A second session of the VM, on device 1 only, shares the quota.
    t = session(daemon)
    use(t, ctx(t, 1))
    assert t.call("mem_alloc", size=4096)[0] == CUDA_ERROR_OUT_OF_MEMORY
    assert s.call("mem_free", dptr=d1)[0] == 0
    assert t.call("mem_alloc", size=4096)[0] == 0
    t.close()
    s.close()


def test_exclusive_per_gpu(start_pvgpud, tmp_path):
    """An exclusive VM has the GPUs it holds contexts on alone, and only
    those: another VM goes on working on the other GPU."""
    daemon = two_gpus(start_pvgpud, tmp_path, f"""
        [vm alice]
        uid = {os.getuid()}
        mode = exclusive

        [vm bob]
        token = {BOB_TOKEN}
        """)
    a = session(daemon)
    a0 = ctx(a, 0)
    b = session(daemon, BOB_TOKEN)
    assert b.call("ctx_create", device=0)[0] == CUDA_ERROR_DEVICE_UNAVAILABLE
    b1 = ctx(b, 1)                   # device 1 is free
    use(b, b1)
    put(b, alloc(b, 4096), pattern(4096, 2))
    # alice, exclusive, cannot take device 1 while bob holds it.
    assert a.call("ctx_create", device=1)[0] == CUDA_ERROR_DEVICE_UNAVAILABLE
    assert "ctx_create on device 0 refused: vm alice has device 0 in " \
           "exclusive mode" in daemon.log()
    assert "ctx_create on device 1 refused: vm alice is in exclusive mode " \
           "and vm bob is using device 1" in daemon.log()
    # bob leaves device 1: alice may take it and peer-copy between hers.
    assert b.call("ctx_destroy", ctx=b1)[0] == 0
    a1 = ctx(a, 1)
    use(a, a1)
    d1 = alloc(a, 4096)
    use(a, a0)
    d0 = alloc(a, 4096)
    put(a, d0, pattern(4096, 5))
    assert a.call("memcpy_peer", dst=d1, dst_ctx=a1, src=d0, src_ctx=a0,
                  size=4096)[0] == 0
    assert b.call("ctx_create", device=1)[0] == CUDA_ERROR_DEVICE_UNAVAILABLE
    a.close()
    b.close()


def fair(daemon, token, device, seconds):
    env = dict(os.environ)
    env.update({"LD_LIBRARY_PATH": str(BUILD / "lib"),
                "PVGPU_DEVICES": daemon.tcp, "PVGPU_TOKEN": token})
    return subprocess.Popen(
        [str(FAIR), "--json", "--seconds", str(seconds), "--blocks", "132",
         "--iters", "190000", "--device", str(device)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def kernels(proc):
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, f"{out}\n{err}"
    return json.loads(out.strip().splitlines()[-1])["kernels"]


def sched_lines(log, vm):
    """(launches, waits) of each ended session of vm."""
    sessions = set(re.findall(rf"session (\d+): \S+ is vm {vm}\b", log))
    found = []
    for sid in sessions:
        m = re.search(rf"session {sid}: scheduler: (\d+) launches, waited (\d+) times", log)
        if m:
            found.append((int(m.group(1)), int(m.group(2))))
    return found


@pytest.mark.skipif(not FAIR.exists() or not BENCH_TWINS.exists(),
                    reason="bench/pvgpu-fair or its twins are not built")
@pytest.mark.plain_build("timings under the sanitizers say nothing")
def test_turns_are_per_gpu(programs, start_pvgpud, tmp_path):
    """A VM busy on GPU 0 does not slow another VM on GPU 1: turns are
    taken per device, so vm bob on device 1 never waits for vm carol's
    turn on device 0.  On one device the same two VMs do take turns (the
    control).  Waits, not kernel counts, are what is judged: on this
    2-core machine shared with other jobs the sim's sessions contend for
    the CPU, which says nothing about the scheduler (the throughput
    criterion is measured on two GPUs, tests/gpu/test_gpu_multigpu.py)."""
    daemon = two_gpus(start_pvgpud, tmp_path, f"""
        [vm bob]
        token = {BOB_TOKEN}
        weight = 1

        [vm carol]
        token = {CAROL_TOKEN}
        weight = 1
        """, PVGPU_SIM_TWINS=str(BENCH_TWINS))
    alone = kernels(fair(daemon, BOB_TOKEN, 1, 2))
    carol = [fair(daemon, CAROL_TOKEN, 0, 4) for _ in range(2)]
    time.sleep(1.0)
    beside = kernels(fair(daemon, BOB_TOKEN, 1, 2))
    for p in carol:
        kernels(p)
    wait_live(daemon)
    log = daemon.log()
    bob = sched_lines(log, "bob")
    assert len(bob) == 2, log[-4000:]
    assert all(n > 0 and waits == 0 for n, waits in bob), bob
    assert alone > 0 and beside > 0, (alone, beside)

    # Control: the same VMs on one device take turns.
    carol = [fair(daemon, CAROL_TOKEN, 0, 3) for _ in range(2)]
    time.sleep(0.5)
    kernels(fair(daemon, BOB_TOKEN, 0, 1.5))
    for p in carol:
        kernels(p)
    wait_live(daemon)
    bob = sched_lines(daemon.log(), "bob")
    assert len(bob) == 3
    assert max(w for _n, w in bob) > 0, bob


# --- metrics per GPU ---------------------------------------------------------

def scrape(url):
    import urllib.request
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    text = opener.open(url, timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$', line)
        if m:
            labels = frozenset(re.findall(r'([a-zA-Z_]\w*)="([^"]*)"', m.group(2) or ""))
            out[(m.group(1), labels)] = float(m.group(3))
    return out


def test_metrics_per_gpu(start_pvgpud, tmp_path):
    import socket
    with socket.socket() as so:
        so.bind(("127.0.0.1", 0))
        port = so.getsockname()[1]
    daemon = start_pvgpud("sim", extra_args=["--metrics", f"127.0.0.1:{port}"],
                          env={"PVGPU_SIM_DEVICES": "2"})
    url = f"http://127.0.0.1:{port}/metrics"
    wait_live(daemon)
    s = session(daemon)
    c0, c1 = ctx(s, 0), ctx(s, 1)
    use(s, c0)
    alloc(s, 1 << 20)
    use(s, c1)
    alloc(s, 3 << 20)
    t = session(daemon)
    use(t, ctx(t, 1))
    alloc(t, 1 << 20)

    def val(m, name, gpu):
        return m.get((name, frozenset({("gpu", gpu)})))

    deadline = time.monotonic() + 10
    while True:
        m = scrape(url)
        if val(m, "pvgpu_gpu_sessions", "1") == 2 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert val(m, "pvgpu_gpu_sessions", "0") == 1
    assert val(m, "pvgpu_gpu_sessions", "1") == 2
    assert val(m, "pvgpu_gpu_memory_used_bytes", "0") == 1 << 20
    assert val(m, "pvgpu_gpu_memory_used_bytes", "1") == 4 << 20
    for gpu in ("0", "1"):
        assert val(m, "pvgpu_gpu_busy_seconds_total", gpu) is not None, gpu
        assert val(m, "pvgpu_gpu_info", gpu) is None    # has a name label
    s.close()
    t.close()
