"""The remote executor (host-backend/exec/remote/) without RDMA:
a front `pvgpud --executor remote` forwards every session to back
`pvgpud --executor sim` nodes over tcp:// or unix://, and programs run
through the front exactly as they do against a local daemon.

    program --(NVIDIA's runtime over libcuda.so.1, unix)--> front pvgpud
            --(client, tcp|unix)--> back pvgpud (sim)

The Verbs hop is the same executor with a verbs:// URI (tests/rdma/).
"""

import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent
BUILD = REPO / os.environ.get("PVGPU_BUILD", "build")
PVGPUD = BUILD / "bin" / "pvgpud"
TWINS = BUILD / "tests" / "sim-twins" / "libtest-twins.so"
BENCH_TWINS = BUILD / "tests" / "sim-twins" / "libbench-twins.so"
BENCH = BUILD / "bench"

sys.path.insert(0, str(REPO / "tests" / "lib"))
import pvgpu_wire  # noqa: E402

KERNEL_PROGRAMS = ["vecadd", "matmul", "reduce", "constant", "devglobal",
                   "callback", "launchloop", "attrs", "streams4"]

from curesult import CUDA_ERROR_DEVICE_UNAVAILABLE  # noqa: E402


def wait_for(cond, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not cond() and time.monotonic() < deadline:
        time.sleep(0.05)


def front_for(start_pvgpud, *backs, hop="unix"):
    """A front pvgpud whose nodes are backs, reached over hop."""
    args = []
    for b in backs:
        args += ["--remote", b.unix if hop == "unix" else b.tcp]
    return start_pvgpud("remote", extra_args=args)


def check_backs_served(backs):
    for b in backs:
        assert " start: " in b.log() and "via " in b.log(), \
            f"the back node saw no session:\n{b.log()[-3000:]}"


@pytest.mark.parametrize("hop", ["unix", "tcp"])
def test_program_through_remote(programs, start_pvgpud, program, hop):
    # Two devices and the kernels' twins: peer.cu launches a kernel that
    # reads the other device's memory.
    back = start_pvgpud("sim", env={"PVGPU_SIM_DEVICES": "2",
                                    "PVGPU_SIM_TWINS": str(TWINS)})
    front = front_for(start_pvgpud, back, hop=hop)
    res = programs.run(program, programs.pvgpu_env(front.unix))
    programs.assert_passed(res, front)
    check_backs_served([back])


@pytest.mark.parametrize("name", KERNEL_PROGRAMS)
def test_kernel_program_through_remote(programs, start_pvgpud, name):
    back = start_pvgpud("sim", env={"PVGPU_SIM_TWINS": str(TWINS)})
    front = front_for(start_pvgpud, back, hop="tcp")
    res = programs.run(f"kernels/{name}", programs.pvgpu_env(front.unix))
    programs.assert_passed(res, front)


def test_synth_through_remote(programs, start_pvgpud):
    back = start_pvgpud("sim", env={"PVGPU_SIM_TWINS": str(BENCH_TWINS)})
    front = front_for(start_pvgpud, back, hop="tcp")
    proc = subprocess.run(
        [str(BENCH / "pvgpu-synth"), "--json", "--quick", "--size", "1M-4M",
         "--dir", "both"], env=programs.pvgpu_env(front.unix),
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, \
        f"pvgpu-synth failed:\n{proc.stdout}\n{proc.stderr}\n{front.log()[-3000:]}"
    check_backs_served([back])


def test_two_nodes_one_device_list(programs, start_pvgpud):
    """Two back nodes, one device each: a program through the front counts
    both, and work on each lands on its own node."""
    backs = [start_pvgpud("sim", env={"PVGPU_SIM_NODE": str(i)})
             for i in range(2)]
    front = front_for(start_pvgpud, *backs)
    res = programs.run("devices", programs.pvgpu_env(front.unix))
    programs.assert_passed(res, front)
    assert "device count: 2" in res.stdout, programs.describe(res)

    s = pvgpu_wire.Session(front.unix)
    try:
        assert s.hello()["device_count"] == 2
        uuids = []
        for dev in range(2):
            st, _d, outs, _ = s.call("device_get_uuid", device=dev)
            assert st == 0, st
            uuids.append(outs["uuid"])
        assert uuids[0] != uuids[1]
        payload, ctxs = {}, {}
        for dev in range(2):
            ctxs[dev] = s.open_context(dev)
            st, _d, outs, _ = s.call("mem_alloc", size=1 << 20)
            assert st == 0, st
            data = bytes([dev + 1]) * (1 << 20)
            st, _d, _o, _ = s.call("memcpy_htod", data_in=data,
                                   dst=outs["dptr"], size=len(data), stream=0)
            assert st == 0, st
            payload[dev] = (outs["dptr"], data)
        st, _d, _o, _ = s.call("ctx_synchronize")
        assert st == 0
        # Read both back, switching contexts in between.
        for dev, (dptr, data) in payload.items():
            s.queue("ctx_set", ctx=ctxs[dev])
            st, _d, _o, out = s.call("memcpy_dtoh", src=dptr, size=len(data),
                                     stream=0)
            assert st == 0, st
            assert out == data, f"device {dev} gave back other bytes"
    finally:
        s.close()
    for b in backs:
        wait_for(lambda: "1.0 MiB to device" in b.log())
        assert "1.0 MiB to device" in b.log(), b.log()[-2000:]


class Back:
    """A back pvgpud this test kills: not under start_pvgpud, whose
    teardown insists on a clean exit."""

    def __init__(self, workdir):
        self.sock = workdir / "back.sock"
        self.unix = f"unix://{self.sock}"
        self.log_path = workdir / "back.log"
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [str(PVGPUD), "--listen", self.unix, "--executor", "sim",
             "--module-cache", str(workdir / "modules")],
            stdin=subprocess.DEVNULL, stdout=self._log,
            stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.socket(socket.AF_UNIX) as c:
                    c.connect(str(self.sock))
                    return
            except OSError:
                time.sleep(0.05)
        self.kill()
        pytest.fail("back pvgpud did not start")

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)  # its workers die with it
            self.proc.wait()
        self._log.close()


def test_back_node_killed_mid_copy(programs, start_pvgpud, short_tmp):
    """The back node dies while the front forwards a copy: that session
    gets a CUDA error (cudaErrorDevicesUnavailable) on the copy and every
    call after it, a session on another node goes on, and the front keeps
    serving new sessions."""
    doomed = Back(short_tmp)
    try:
        healthy = start_pvgpud("sim", env={"PVGPU_SIM_NODE": "1"})
        front_a = start_pvgpud("remote", extra_args=["--remote", doomed.unix])
        front_b = front_for(start_pvgpud, healthy)

        s = pvgpu_wire.Session(front_a.unix, timeout=60)
        s.hello()
        s.open_context(0)
        size = 64 << 20
        st, _d, outs, _ = s.call("mem_alloc", size=size)
        assert st == 0, st
        # Half the copy, then the node dies, then the rest.
        msg_id = 1000
        s.send(pvgpu_wire.message("memcpy_htod", msg_id, dst=outs["dptr"],
                                  size=size, stream=0))
        frames = pvgpu_wire.data_frames(b"\x5a" * size, msg_id)
        half = len(frames) // 2
        s.send(frames[:half])
        time.sleep(0.5)
        doomed.kill()
        s.send(frames[half:])
        opcode, _flags, rid, payload = s.read_message()
        assert rid == msg_id
        status, deferred = struct.unpack_from("<ii", payload)
        assert CUDA_ERROR_DEVICE_UNAVAILABLE in (status, deferred), (status, deferred)
        s.next_id = msg_id + 1
        st, _d, _o, _ = s.call("mem_alloc", size=4096)
        assert st == CUDA_ERROR_DEVICE_UNAVAILABLE, st
        s.close()

        # The other node's sessions, and new sessions: unaffected.
        res = programs.run("memory", programs.pvgpu_env(front_b.unix))
        programs.assert_passed(res, front_b)
        assert front_a.proc.poll() is None, "the front pvgpud died"
        assert "connection lost" in front_a.log(), front_a.log()[-3000:]
        res = programs.run("devices", programs.pvgpu_env(front_a.unix))
        assert res.returncode == 1, programs.describe(res, front_a)
        assert res.stdout.splitlines()[-1].startswith("FAIL:"), \
            programs.describe(res, front_a)
    finally:
        doomed.kill()


def test_executor_help_lists_remote():
    out = subprocess.run([str(PVGPUD), "--executor", "help"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0
    assert any(line.split("\t")[0] == "remote" for line in out.stdout.splitlines()), \
        out.stdout


def test_remote_without_nodes_is_bad_usage(short_tmp):
    out = subprocess.run([str(PVGPUD), "--listen", f"unix://{short_tmp}/x.sock",
                          "--executor", "remote"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 2
    assert "--remote" in out.stderr


@pytest.mark.parametrize("alike", [False, True])
def test_peer_copy_between_nodes(programs, start_pvgpud, alike):
    """GPUs of two nodes are not peers, and a copy between them is staged
    node to node through the front pvgpud, never through the guest.
    alike: two nodes whose drivers hand out the same addresses (no
    PVGPU_SIM_NODE; two alike machines with real GPUs do): the front still
    shows the program one address space."""
    backs = [start_pvgpud("sim", env={"PVGPU_SIM_TWINS": str(TWINS),
                                      **({} if alike else {"PVGPU_SIM_NODE": str(i)})})
             for i in (1, 2)]
    front = front_for(start_pvgpud, *backs)
    res = programs.run("peer", programs.pvgpu_env(front.unix))
    programs.assert_passed(res, front)
    assert "can access peer 0->1: 0, 1->0: 0" in res.stdout, res.stdout
    wait_for(lambda: "staged through this node" in front.log())
    assert "staged through this node" in front.log(), front.log()[-3000:]
    check_backs_served(backs)


@pytest.mark.parametrize("alike", [False, True])
def test_peer_copy_between_nodes_over_libcuda(programs, start_pvgpud, alike):
    """The same with NVIDIA's runtime linked in (nvcc's default), over
    pvgpu's libcuda.so.1: the front is one backend to it, so it forwards
    the peer copies, and the front stages them node to node, not the
    guest."""
    backs = [start_pvgpud("sim", env={"PVGPU_SIM_TWINS": str(TWINS),
                                      **({} if alike else {"PVGPU_SIM_NODE": str(i)})})
             for i in (1, 2)]
    front = front_for(start_pvgpud, *backs)
    env = programs.pvgpu_env(front.unix)
    env["PVGPU_DEBUG"] = "1"
    res = programs.run("static/peer", env)
    programs.assert_passed(res, front)
    assert "can access peer 0->1: 0, 1->0: 0" in res.stdout, res.stdout
    assert "enable peer access 1->0: cudaErrorPeerAccessUnsupported" in res.stdout
    assert "staged through the guest" not in res.stderr, res.stderr[-3000:]
    wait_for(lambda: "staged through this node" in front.log())
    assert "staged through this node" in front.log(), front.log()[-3000:]
    check_backs_served(backs)
