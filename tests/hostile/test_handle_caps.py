"""What a session creates is bounded (DESIGN §5).

Each context, stream, event, module, graph (and the rest a session names
by handle) costs its worker and the driver memory that no quota counts, so
a session may hold at most its VM's `handles` of them at once (policy,
default 65536), and at most 4 contexts on one GPU (what each takes of the
device is charged to the VM's memory: test_context_charge.py).  Creation past either fails with
CUDA_ERROR_OUT_OF_MEMORY in that session alone, the log says so in a few
lines however often it is tried, and the worker does not grow.  Raw
protocol calls, as a guest's cuEventCreate and cuStreamCreate make them.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from idle import children  # noqa: E402
from pvgpu_sessions import alice_and_bob, tcp_session, unix_session, wait_live  # noqa: E402
from pvgpud_cli import assert_vm_key_refused  # noqa: E402

from curesult import CUDA_ERROR_OUT_OF_MEMORY  # noqa: E402
BOB_TOKEN = "bob-handles-77a2"
REFUSED = "handle refused: the session holds its {} (handles of vm alice)"


def event(s):
    """(status, event id) of a cuEventCreate."""
    return s.event_create()


def events_until_refused(s, most):
    """Create events until one is refused (at most `most`): the ids made
    and the refusal's status (0: none was refused)."""
    made = []
    for _ in range(most):
        st, ev = event(s)
        if st:
            return made, st
        made.append(ev)
    return made, 0


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


def test_creation_past_the_cap_fails_in_that_session_alone(start_pvgpud, tmp_path):
    daemon = alice_and_bob(start_pvgpud, tmp_path, BOB_TOKEN, "handles = 200")
    wait_live(daemon)
    alice = unix_session(daemon)
    # Its context is one of the 200.
    made, st = events_until_refused(alice, 1000)
    assert (len(made), st) == (199, CUDA_ERROR_OUT_OF_MEMORY)
    assert alice.call("stream_create", flags=0, priority=0)[0] == CUDA_ERROR_OUT_OF_MEMORY
    # A bound on what is held at once: one destroyed, one more made.
    assert alice.driver("cuEventDestroy_v2", made.pop())[0] == 0
    st, ev = event(alice)
    assert st == 0 and ev
    made.append(ev)
    # Tried over and over, the refusal costs the log a few lines.
    for _ in range(300):
        assert event(alice)[0] == CUDA_ERROR_OUT_OF_MEMORY
    log = daemon.log()
    assert 1 <= log.count(REFUSED.format(200)) <= 10, log[-3000:]
    # The session still works, and another VM creates as it likes.
    assert alice.call("ctx_synchronize")[0] == 0
    bob = tcp_session(daemon, BOB_TOKEN)
    bob_made, st = events_until_refused(bob, 1000)
    assert (len(bob_made), st) == (1000, 0)
    assert bob.call("stream_create", flags=0, priority=0)[0] == 0
    # The bound is each session's: another of alice's has its own 200.
    alice2 = unix_session(daemon)
    assert event(alice2)[0] == 0
    for s in (alice, alice2, bob):
        s.close()


def test_a_session_at_its_cap_does_not_grow(start_pvgpud, tmp_path):
    daemon = alice_and_bob(start_pvgpud, tmp_path, BOB_TOKEN, "handles = 2000")
    wait_live(daemon)
    alice = unix_session(daemon)
    wait_live(daemon, 1)
    (worker,) = children(daemon.proc.pid)
    made, st = events_until_refused(alice, 4000)
    assert (len(made), st) == (1999, CUDA_ERROR_OUT_OF_MEMORY)
    at_cap = rss_kib(worker)
    # As many again, and streams: all refused, and nothing kept of them.
    for _ in range(5000):
        assert event(alice)[0] == CUDA_ERROR_OUT_OF_MEMORY
        assert alice.call("stream_create", flags=0, priority=0)[0] == CUDA_ERROR_OUT_OF_MEMORY
    grown = rss_kib(worker) - at_cap
    assert grown < 1024, f"worker grew by {grown} KiB past its cap"
    alice.close()


def test_contexts_per_gpu_are_capped(start_pvgpud, tmp_path):
    daemon = alice_and_bob(start_pvgpud, tmp_path, BOB_TOKEN)
    wait_live(daemon)
    alice = unix_session(daemon)            # one context already
    made = []
    for _ in range(3):
        st, _d, out, _ = alice.call("ctx_create", device=0)
        assert st == 0, st
        made.append(out["ctx"])
    assert alice.call("ctx_create", device=0)[0] == CUDA_ERROR_OUT_OF_MEMORY
    assert "context refused: the session holds 4 on device 0 already" in daemon.log()
    assert alice.call("ctx_destroy", ctx=made.pop())[0] == 0
    assert alice.call("ctx_create", device=0)[0] == 0
    # Another VM's contexts are its own.
    bob = tcp_session(daemon, BOB_TOKEN)
    assert bob.call("ctx_create", device=0)[0] == 0
    alice.close()
    bob.close()


def test_handles_values_are_checked(tmp_path):
    assert_vm_key_refused(tmp_path, "handles", ("0", "16777216", "lots"),
                          "handles = {} is not 1..16777215")
