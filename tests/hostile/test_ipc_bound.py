"""One VM cannot fill the daemon's CUDA IPC table (DESIGN §5).

The table of exported allocations and events is the daemon's (256
entries); each VM may hold only its own share of it (policy key
ipc_handles, default 32).  A guest that exports one allocation over and
over is refused with CUDA_ERROR_OUT_OF_MEMORY at its own bound, and
another VM's exports go on succeeding.  Raw protocol calls, as a guest's
cuIpcGetMemHandle makes them.
"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from pvgpu_sessions import tcp_session, unix_session, wait_live  # noqa: E402
from pvgpu_sessions import alice_and_bob  # noqa: E402
from pvgpud_cli import assert_vm_key_refused  # noqa: E402

from curesult import CUDA_ERROR_OUT_OF_MEMORY  # noqa: E402
TABLE = 256                     # the daemon's IPC entries
BOB_TOKEN = "bob-ipc-5e0d"



def policy_daemon(start_pvgpud, tmp_path, token, alice_extra=""):
    daemon = alice_and_bob(start_pvgpud, tmp_path, token, alice_extra)
    wait_live(daemon)
    return daemon


def export(s, dptr):
    return s.call("ipc_get_mem_handle", dptr=dptr)[0]


def export_until_refused(s, dptr):
    """How many exports of dptr succeed before one is refused (at most one
    more than the whole table), and the refusal's status."""
    for n in range(TABLE + 1):
        st = export(s, dptr)
        if st:
            return n, st
    return TABLE + 1, 0


def test_a_vm_exporting_without_end_does_not_starve_another(start_pvgpud, tmp_path):
    daemon = policy_daemon(start_pvgpud, tmp_path, BOB_TOKEN)
    alice = unix_session(daemon)
    n, st = export_until_refused(alice, alice.alloc(4096))
    assert st == CUDA_ERROR_OUT_OF_MEMORY, (n, st)
    # Refused at its own share, which leaves most of the table to others.
    assert 0 < n <= TABLE // 4, n
    assert f"IPC export refused: vm alice holds its {n} (ipc_handles)" in daemon.log()
    # Another VM exports as before, again and again.
    bob = tcp_session(daemon, BOB_TOKEN)
    ptr = bob.alloc(4096)
    for _ in range(n):
        assert export(bob, ptr) == 0
    # The bound is the VM's, not the session's.
    alice2 = unix_session(daemon)
    assert export(alice2, alice2.alloc(4096)) == CUDA_ERROR_OUT_OF_MEMORY
    # What a session exported is freed with it.
    alice.close()
    wait_live(daemon, 2)
    deadline = time.monotonic() + 10
    while export(alice2, alice2.alloc(4096)) != 0:
        assert time.monotonic() < deadline, daemon.log()[-3000:]
        time.sleep(0.05)
    alice2.close()
    bob.close()


def test_ipc_handles_sets_the_share(start_pvgpud, tmp_path):
    daemon = policy_daemon(start_pvgpud, tmp_path, BOB_TOKEN, "ipc_handles = 3")
    alice = unix_session(daemon)
    st, ev = alice.event_create(0x6)      # interprocess, no timing
    assert st == 0, st
    # Allocations and events draw on the same share.
    assert alice.call("ipc_get_event_handle", event=ev)[0] == 0
    n, st = export_until_refused(alice, alice.alloc(4096))
    assert (n, st) == (2, CUDA_ERROR_OUT_OF_MEMORY)
    bob = tcp_session(daemon, BOB_TOKEN)
    assert export(bob, bob.alloc(4096)) == 0
    alice.close()
    bob.close()


def test_ipc_handles_is_checked(tmp_path):
    assert_vm_key_refused(tmp_path, "ipc_handles", ("0", "257", "lots"),
                          "ipc_handles = {} is not 1..256")
