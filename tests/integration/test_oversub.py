"""GPU memory oversubscription (README "Many VMs: the policy file",
[gpu N] oversubscribe): VMs promised more than the device has take turns
on it, the supervisor suspending the least recently active session to
make room for an allocation and resuming a suspended one on its next
call, with every session's data intact.  The device is either a small
simulated one (PVGPU_SIM_MEMORY_MB) or a large one of which the policy
gives VMs only a part ([gpu N] memory): the same VMs see the same."""
import pytest
import os
import re
import sys
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import pvgpu_wire as W  # noqa: E402
from curesult import CUDA_ERROR_OUT_OF_MEMORY  # noqa: E402
from pvgpu_sessions import wait_live  # noqa: E402
from pvgpud_cli import run_pvgpud  # noqa: E402

MB = 1 << 20
DEVICE = 10 * MB           # PVGPU_SIM_MEMORY_MB, or [gpu 0] memory, below
# The device's size from the sim's own memory, or from the policy's cap
# on the sim's default 16 GiB device.
SIZES = ["sim memory", "gpu memory cap"]
QUOTA = 6 * MB             # three VMs: 18 MiB promised, 1.8 x the device
TOKENS = {"bob": "bob-oversub-token", "carol": "carol-oversub-token"}


def pattern(n, size):
    """Bytes that differ between sessions and along the buffer."""
    period = bytes((i * 7 + n) & 0xFF for i in range(251))
    return (period * (size // len(period) + 1))[:size]


def promised(d):
    text = urllib.request.urlopen(d.url, timeout=10).read().decode()
    m = re.search(r'^pvgpu_gpu_memory_promised_bytes\{gpu="0"\} (\d+)$', text, re.M)
    assert m, text
    return int(m.group(1))


def daemon(start_pvgpud, programs, tmp_path, oversubscribe=None, dave_quota=None,
           size="sim memory"):
    conf = tmp_path / "pvgpud.conf"
    text = "[default]\npolicy = refuse\n\n"
    capped = size == "gpu memory cap"
    if oversubscribe or capped:
        text += "[gpu 0]\n"
        if oversubscribe:
            text += f"oversubscribe = {oversubscribe}\n"
        if capped:
            text += f"memory = {DEVICE // MB}M\n"
        text += "\n"
    text += f"[vm alice]\nuid = {os.getuid()}\nmemory = {QUOTA // MB}M\n\n"
    for vm, token in TOKENS.items():
        text += f"[vm {vm}]\ntoken = {token}\nmemory = {QUOTA // MB}M\n\n"
    if dave_quota:
        text += f"[vm dave]\ntoken = dave-oversub-token\nmemory = {dave_quota // MB}M\n"
    conf.write_text(text)
    port = programs.free_tcp_port()
    d = start_pvgpud("sim", extra_args=("--config", str(conf),
                                        "--metrics", f"127.0.0.1:{port}"),
                     env={} if capped else {"PVGPU_SIM_MEMORY_MB": str(DEVICE // MB)})
    d.url = f"http://127.0.0.1:{port}/metrics"
    wait_live(d, 0)
    return d


def session(d, vm):
    s = W.Session(d.unix if vm == "alice" else d.tcp, timeout=60)
    if vm == "alice":
        s.hello()
    else:
        s.hello(token=TOKENS.get(vm, f"{vm}-oversub-token"))
    s.open_context()
    return s


def fill(s, n, size=QUOTA):
    """Allocate size bytes and fill them with pattern n: (status, dptr)."""
    st, _, outs, _ = s.call("mem_alloc", size=size)
    if st:
        return st, None
    data = pattern(n, size)
    assert s.call("memcpy_htod", data_in=data, dst=outs["dptr"], size=size,
                  stream=0)[0] == 0
    return 0, outs["dptr"]


def intact(s, n, dptr, size=QUOTA):
    st, _, _, back = s.call("memcpy_dtoh", src=dptr, size=size, stream=0)
    return st == 0 and back == pattern(n, size)


def session_ids(d):
    return dict((vm, int(sid)) for sid, vm in
                re.findall(r"session (\d+) start: .*?vm (\w+)", d.log()))


@pytest.mark.parametrize("size", SIZES)
def test_three_vms_over_the_device_take_turns_with_data_intact(start_pvgpud, programs, tmp_path,
                                                               size):
    d = daemon(start_pvgpud, programs, tmp_path, oversubscribe="2.0", size=size)
    assert promised(d) == 3 * QUOTA
    vms = ["alice", "bob", "carol"]
    ss, ptrs = {}, {}
    for n, vm in enumerate(vms):
        ss[vm] = session(d, vm)
        st, ptrs[vm] = fill(ss[vm], n)
        assert st == 0, (vm, st)
    # Each allocation past the first suspended the one before it.
    text = d.log()
    assert "suspending it to make room on device 0" in text
    assert len(re.findall(r"session \d+ suspended: vm \w+, 6\.0 MiB to host memory", text)) == 2
    # Each check resumes its session (suspending another to make room).
    for n, vm in enumerate(vms):
        assert intact(ss[vm], n, ptrs[vm]), vm
    for n, vm in enumerate(vms):       # and once more, in the same order
        assert intact(ss[vm], n, ptrs[vm]), vm
    for s in ss.values():
        s.close()


@pytest.mark.parametrize("size", SIZES)
def test_an_allocation_that_cannot_fit_fails_and_suspends_nobody(start_pvgpud, programs, tmp_path,
                                                                 size):
    d = daemon(start_pvgpud, programs, tmp_path, oversubscribe="2.0", dave_quota=16 * MB,
               size=size)
    alice = session(d, "alice")
    st, dptr = fill(alice, 1)
    assert st == 0
    dave = session(d, "dave")
    # More than the device holds even with alice moved out.
    assert dave.call("mem_alloc", size=DEVICE + MB)[0] == CUDA_ERROR_OUT_OF_MEMORY
    d.wait_log(r"mem_alloc of %d bytes on device 0: out of memory after making room"
               % (DEVICE + MB))
    assert " suspended: " not in d.log()
    assert intact(alice, 1, dptr)
    # One that fits once alice is suspended still works.
    st, dptr2 = fill(dave, 2, 8 * MB)
    assert st == 0
    assert intact(dave, 2, dptr2, 8 * MB)
    assert intact(alice, 1, dptr)
    alice.close()
    dave.close()


@pytest.mark.parametrize("size", SIZES)
def test_without_oversubscribe_the_second_vm_gets_out_of_memory(start_pvgpud, programs, tmp_path,
                                                                size):
    d = daemon(start_pvgpud, programs, tmp_path, size=size)
    alice = session(d, "alice")
    st, dptr = fill(alice, 1)
    assert st == 0
    bob = session(d, "bob")
    assert fill(bob, 2)[0] == CUDA_ERROR_OUT_OF_MEMORY
    assert " suspended: " not in d.log()
    assert intact(alice, 1, dptr)
    alice.close()
    bob.close()


def gpu0(tmp_path, lines, seconds=5):
    """pvgpud started with a policy whose [gpu 0] section is lines (its
    first on line 5): (exit code, stderr) as run_pvgpud gives them."""
    path = tmp_path / "gpu0.conf"
    path.write_text("[vm alice]\nuid = 0\n\n[gpu 0]\n" + "".join(f"{ln}\n" for ln in lines))
    return run_pvgpud(["--listen", f"unix://{tmp_path}/s.sock", "--config", str(path)],
                      seconds=seconds)


@pytest.mark.parametrize("key,values,said", [
    ("oversubscribe", ("0.5", "0.999", "8.5", "9", "1.2345", "x", "", "1.", ".5", "-1", "1e3"),
     "1.0 to 8.0"),
    ("memory", ("0", "1023K", "512K", "x", "", "-1", "1.5G", "8Q", "10 M"), "1M or more"),
])
def test_gpu_values_refused_with_their_line(tmp_path, key, values, said):
    for value in values:
        code, err = gpu0(tmp_path, [f"{key} = {value}"])
        assert code == 1, (value, err)
        assert ":5:" in err and key in err and said in err, (value, err)


@pytest.mark.parametrize("key,values,more", [
    ("oversubscribe", ("1", "1.0", "1.5", "2.25", "8", "8.000"), "sharing = time"),
    ("memory", ("1M", "10M", "80G", "1T", "1048576"), "oversubscribe = 1.8"),
])
def test_gpu_values_taken(tmp_path, key, values, more):
    for value in values:
        code, err = gpu0(tmp_path, [f"{key} = {value}", more], seconds=2)
        assert code is None, (value, err)


def test_the_cap_leaves_the_rest_of_the_device_alone(start_pvgpud, programs, tmp_path):
    """Under [gpu 0] memory, a VM whose quota is larger still gets only
    the cap: allocations past it fail although the device has room."""
    d = daemon(start_pvgpud, programs, tmp_path, dave_quota=64 * MB, size="gpu memory cap")
    dave = session(d, "dave")
    st, dptr = fill(dave, 3, DEVICE)
    assert st == 0
    assert dave.call("mem_alloc", size=MB)[0] == CUDA_ERROR_OUT_OF_MEMORY
    assert dave.call("mem_free", dptr=dptr)[0] == 0
    st, dptr = fill(dave, 4, DEVICE - MB)
    assert st == 0 and intact(dave, 4, dptr, DEVICE - MB)
    dave.close()


def stamped(text, pattern):
    """(seconds, session id) of each log line matching pattern (one group: the id)."""
    out = []
    for line in text.splitlines():
        m = re.search(pattern, line)
        if m:
            t = re.match(r"\d{4}-\d\d-\d\dT(\d\d):(\d\d):(\d\d\.\d+)Z", line)
            out.append((int(t.group(1)) * 3600 + int(t.group(2)) * 60 + float(t.group(3)),
                        int(m.group(1))))
    return out


def test_two_sessions_taking_turns_each_keep_the_gpu_two_seconds(start_pvgpud, programs,
                                                                 tmp_path):
    """Two sessions that each need the whole device in turn: each call
    resumes its session by suspending the other, but never one resumed
    less than 2 s before (README), so they cannot evict each other at
    the rate of their calls."""
    d = daemon(start_pvgpud, programs, tmp_path, oversubscribe="2.0")
    alice, bob = session(d, "alice"), session(d, "bob")
    a = fill(alice, 1)[1]
    b = fill(bob, 2)[1]
    for _ in range(3):
        assert intact(alice, 1, a)
        assert intact(bob, 2, b)
    text = d.log()
    resumed = stamped(text, r"session (\d+) resumed: ")
    evicted = stamped(text, r"session (\d+): suspending it to make room")
    assert len(resumed) >= 5 and len(evicted) >= 6, text
    for t, sid in evicted:
        last = [r for r, s in resumed if s == sid and r <= t]
        assert not last or t - last[-1] >= 2.0, (sid, t, last[-1])
    alice.close()
    bob.close()
