"""The per-VM policy file (pvgpud --config, DESIGN §5): who a caller is comes
from the channel (the Unix peer's uid, a TCP caller's token), and each VM's
memory quota and session limit hold across all its sessions.

Every identity check is tried with a caller that lies.  The sessions speak
the wire protocol directly (tests/lib/pvgpu_wire.py).
"""
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import pvgpu_wire as W  # noqa: E402
from pvgpu_sessions import closed_by_backend, tcp_session, unix_session, wait_live  # noqa: E402

from curesult import (  # noqa: E402
    CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_INVALID_DEVICE,
    CUDA_ERROR_NOT_PERMITTED)

MiB = 1 << 20
BUILD = Path(__file__).resolve().parent.parent.parent / os.environ.get("PVGPU_BUILD", "build")
BOB_TOKEN = "bob-secret-7f3a"


def policy_daemon(start_pvgpud, tmp_path, text):
    path = tmp_path / "pvgpud.conf"
    path.write_text(textwrap.dedent(text))
    daemon = start_pvgpud("sim", extra_args=["--config", str(path)])
    daemon.config = path
    wait_live(daemon)
    return daemon








def tcp_hello(daemon, token, client="pytest"):
    s = W.Session(daemon.tcp)
    st = s.call("hello", version_min=1, version_max=W.P.VERSION,
                pid=os.getpid(), token=token, client=client)[0]
    return s, st


def alloc(s, size):
    st, _, out, _ = s.call("mem_alloc", size=size)
    return st, out.get("dptr")


def mem_info(s):
    st, _, out, _ = s.call("mem_get_info")
    assert st == 0, st
    return out["free"], out["total"]


def two_vms(memory="4M", max_sessions=8, bob_sessions=8):
    return f"""
        [default]
        policy = refuse

        [vm alice]
        uid = {os.getuid()}
        memory = {memory}
        max_sessions = {max_sessions}

        [vm bob]
        token = {BOB_TOKEN}
        memory = 8M
        max_sessions = {bob_sessions}
        gpus = 0
        mode = shared
        weight = 2
        """


def test_quota_holds_across_sessions_of_one_vm(start_pvgpud, tmp_path):
    daemon = policy_daemon(start_pvgpud, tmp_path, two_vms(memory="4M"))
    a1, a2 = unix_session(daemon), unix_session(daemon)
    st, p1 = alloc(a1, 3 * MiB)
    assert st == 0
    # The second session of the same VM has only the rest of the quota.
    assert alloc(a2, 2 * MiB)[0] == CUDA_ERROR_OUT_OF_MEMORY
    st, p2 = alloc(a2, 1 * MiB)
    assert st == 0
    assert alloc(a1, 1)[0] == CUDA_ERROR_OUT_OF_MEMORY
    # Both see the VM's quota and its use, not the device's.
    assert mem_info(a1) == (0, 4 * MiB)
    assert mem_info(a2) == (0, 4 * MiB)
    # Freed in one session, usable in the other.
    assert a1.call("mem_free", dptr=p1)[0] == 0
    assert mem_info(a2) == (3 * MiB, 4 * MiB)
    assert alloc(a2, 3 * MiB)[0] == 0
    assert "over the quota of vm alice" in daemon.log()
    # A session that ends gives its VM back what it held.
    a2.close()
    deadline = time.monotonic() + 5
    while mem_info(a1)[0] != 4 * MiB and time.monotonic() < deadline:
        time.sleep(0.02)
    assert mem_info(a1) == (4 * MiB, 4 * MiB)
    a1.close()


def test_another_vm_is_unaffected(start_pvgpud, tmp_path):
    daemon = policy_daemon(start_pvgpud, tmp_path, two_vms(memory="4M"))
    a = unix_session(daemon)
    assert alloc(a, 4 * MiB)[0] == 0
    assert alloc(a, 1)[0] == CUDA_ERROR_OUT_OF_MEMORY
    b = tcp_session(daemon, BOB_TOKEN)
    assert mem_info(b) == (8 * MiB, 8 * MiB)
    st, ptr = alloc(b, 6 * MiB)
    assert st == 0
    payload = bytes(range(256)) * 16
    assert b.call("memcpy_htod", data_in=payload, dst=ptr, size=len(payload), stream=0)[0] == 0
    assert b.call("memcpy_dtoh", src=ptr, size=len(payload), stream=0)[3] == payload
    assert mem_info(b) == (2 * MiB, 8 * MiB)
    assert mem_info(a) == (0, 4 * MiB)
    assert re.search(r"tcp:127\.0\.0\.1:\d+ is vm bob", daemon.log())
    # bob may use device 0 only.
    assert b.call("ctx_create", device=1)[0] == CUDA_ERROR_INVALID_DEVICE
    a.close()
    b.close()


def test_unknown_uid_is_refused_by_default(start_pvgpud, tmp_path):
    daemon = policy_daemon(start_pvgpud, tmp_path, f"""
        [vm someone-else]
        uid = {os.getuid() + 1}
        memory = 1G
        """)
    s = W.Session(daemon.unix)
    assert closed_by_backend(s)
    log = daemon.log()
    assert re.search(r"refused uid=%d,pid=%d via unix://\S+: its identity names no \[vm\] "
                     r"of the policy and \[default\] policy = refuse" % (os.getuid(), os.getpid()),
                     log), log


def test_unknown_callers_allowed_share_the_default_pool(start_pvgpud, tmp_path):
    daemon = policy_daemon(start_pvgpud, tmp_path, f"""
        [default]
        policy = allow
        memory = 2M

        [vm someone-else]
        uid = {os.getuid() + 1}
        """)
    s = unix_session(daemon)
    assert mem_info(s) == (2 * MiB, 2 * MiB)
    assert alloc(s, 2 * MiB)[0] == 0
    assert alloc(s, 1)[0] == CUDA_ERROR_OUT_OF_MEMORY
    t = tcp_session(daemon, "any token at all")
    assert alloc(t, 1)[0] == CUDA_ERROR_OUT_OF_MEMORY
    s.close()
    t.close()
    assert "vm default" in daemon.log()


def test_tcp_caller_claiming_another_vm_without_its_token(start_pvgpud, tmp_path):
    daemon = policy_daemon(start_pvgpud, tmp_path, two_vms())
    for token, client in (("", "bob"), ("bob", "vm bob"), (BOB_TOKEN[:-1], "bob"),
                          (BOB_TOKEN + "x", "cid=5")):
        s, st = tcp_hello(daemon, token, client)
        assert st == CUDA_ERROR_NOT_PERMITTED, (token, st)
        assert closed_by_backend(s)
    assert "refused at hello: its token names no [vm]" in daemon.log()
    # The real token still works, and the session is bob's.
    b = tcp_session(daemon, BOB_TOKEN)
    assert mem_info(b) == (8 * MiB, 8 * MiB)
    b.close()


def test_max_sessions(start_pvgpud, tmp_path):
    daemon = policy_daemon(start_pvgpud, tmp_path, two_vms(max_sessions=2, bob_sessions=1))
    a1, a2 = unix_session(daemon), unix_session(daemon)
    a3 = W.Session(daemon.unix)
    assert closed_by_backend(a3)
    assert "vm alice already has 2 session(s), its max_sessions" in daemon.log()
    b1 = tcp_session(daemon, BOB_TOKEN)
    b2, st = tcp_hello(daemon, BOB_TOKEN)
    assert st == CUDA_ERROR_NOT_PERMITTED
    assert "vm bob already has 1 session(s), its max_sessions" in daemon.log()
    # The sessions admitted are unharmed, and a slot freed is a slot usable.
    assert alloc(a1, 1000)[0] == 0 and alloc(b1, 1000)[0] == 0
    a2.close()
    wait_live(daemon, 2)  # a1 and b1; b2 was refused and ended
    a4 = unix_session(daemon)
    assert alloc(a4, 1000)[0] == 0
    for s in (a1, a4, b1, b2):
        s.close()




def test_sighup_shrinks_a_quota_under_load(start_pvgpud, tmp_path):
    daemon = policy_daemon(start_pvgpud, tmp_path, two_vms(memory="8M"))
    a1, a2 = unix_session(daemon), unix_session(daemon)
    b = tcp_session(daemon, BOB_TOKEN)
    st, p1 = alloc(a1, 3 * MiB)
    assert st == 0
    st, p2 = alloc(a2, 3 * MiB)
    assert st == 0
    payload = b"\xa5" * 4096
    assert a1.call("memcpy_htod", data_in=payload, dst=p1, size=len(payload), stream=0)[0] == 0

    daemon.config.write_text(textwrap.dedent(two_vms(memory="4M")))
    before = daemon.log().count("policy ")
    daemon.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 5
    while daemon.log().count("policy ") == before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert daemon.log().count("policy ") > before

    # Nobody was dropped; what they hold stays theirs and keeps working.
    assert a1.call("memcpy_dtoh", src=p1, size=len(payload), stream=0)[3] == payload
    assert mem_info(a1) == (0, 4 * MiB)
    assert alloc(a1, 1)[0] == CUDA_ERROR_OUT_OF_MEMORY
    assert alloc(a2, 1)[0] == CUDA_ERROR_OUT_OF_MEMORY
    assert alloc(b, 4 * MiB)[0] == 0         # bob's quota did not change
    # Under the new quota again: allocations succeed up to it.
    assert a2.call("mem_free", dptr=p2)[0] == 0
    assert mem_info(a2) == (1 * MiB, 4 * MiB)
    assert alloc(a2, 1 * MiB)[0] == 0
    assert alloc(a1, 1)[0] == CUDA_ERROR_OUT_OF_MEMORY
    for s in (a1, a2, b):
        s.close()


def test_sighup_with_a_broken_file_keeps_the_policy(start_pvgpud, tmp_path):
    daemon = policy_daemon(start_pvgpud, tmp_path, two_vms(memory="4M"))
    daemon.config.write_text("[vm alice]\nuid = 0\nmemory = lots\n")
    daemon.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 5
    while "not reloaded" not in daemon.log() and time.monotonic() < deadline:
        time.sleep(0.02)
    log = daemon.log()
    assert "memory = lots is not a size" in log and "not reloaded" in log
    a = unix_session(daemon)
    assert mem_info(a) == (4 * MiB, 4 * MiB)
    a.close()


def test_token_bound_to_the_vms_addresses(start_pvgpud, tmp_path):
    """[vm] addresses = : a token holds only from the source addresses its
    VM lists (tcp here; verbs:// in tests/rdma); a refusal is that
    caller's alone."""
    daemon = policy_daemon(start_pvgpud, tmp_path, f"""
        [default]
        policy = refuse

        [vm bob]
        token = {BOB_TOKEN}
        addresses = 10.9.9.9, 127.0.0.1

        [vm carol]
        token = carol-secret
        addresses = 10.9.9.9, fd00::9
        """)
    s, st = tcp_hello(daemon, "carol-secret", "carol")
    assert st == CUDA_ERROR_NOT_PERMITTED, st
    assert closed_by_backend(s)
    assert "source address 127.0.0.1 is not one of vm carol's addresses" in daemon.log()
    b = tcp_session(daemon, BOB_TOKEN)
    assert mem_info(b)[1] > 0
    b.close()


@pytest.mark.parametrize("value", ["10.0.0.300", "fd00::zz", ",", "", "10.0.0.1 10.0.0.2",
                                   ", ".join(f"10.0.0.{i}" for i in range(17)),
                                   "10.0.0.1\naddresses = 10.0.0.2"])
def test_bad_addresses_are_refused(tmp_path, value):
    path = tmp_path / "pvgpud.conf"
    path.write_text(f"[vm alice]\ntoken = t\naddresses = {value}\n")
    res = subprocess.run(
        [str(BUILD / "bin" / "pvgpud"), "--listen", f"unix://{tmp_path}/s.sock",
         "--executor", "sim", "--config", str(path)],
        capture_output=True, text=True, timeout=30)
    assert res.returncode == 1, res.stderr
    assert "want up to 16 IPv4 or IPv6 addresses" in res.stderr, res.stderr
