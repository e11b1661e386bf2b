"""A VM cannot pass its memory quota by making contexts and streams
(DESIGN §5).

Each context takes device memory of its own (about 524 MiB on an H200) and
each stream some (about 560 KiB); pvgpud measures both at start-up and
charges every context and stream a session makes to its VM's `memory`, as
it does allocations.  Here the simulated device says a context takes
400 MiB and a stream 100 MiB (PVGPU_SIM_CONTEXT_BYTES and
PVGPU_SIM_STREAM_BYTES): a VM with memory = 1G is refused what would pass
it with CUDA_ERROR_OUT_OF_MEMORY, its cuMemGetInfo shows the charge,
destroying gives it back, and another VM makes what it likes.  Raw
protocol calls, as a guest's cuCtxCreate and cuStreamCreate make them.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from pvgpu_sessions import alice_and_bob, hello_session, tcp_session, unix_session, wait_live  # noqa: E402

from curesult import CUDA_ERROR_OUT_OF_MEMORY  # noqa: E402
MiB = 1 << 20
QUOTA = 1024 * MiB
CONTEXT = 400 * MiB
STREAM = 100 * MiB
BOB_TOKEN = "bob-contexts-5c1e"


def daemon_with_costs(start_pvgpud, tmp_path):
    daemon = alice_and_bob(start_pvgpud, tmp_path, BOB_TOKEN, "memory = 1G",
                           env={"PVGPU_SIM_CONTEXT_BYTES": str(CONTEXT),
                                "PVGPU_SIM_STREAM_BYTES": str(STREAM)})
    wait_live(daemon)
    return daemon


def streams_until_refused(s, most):
    """Create streams until one is refused (at most `most`): the ids made
    and the refusal's status (0: none was refused)."""
    made = []
    for _ in range(most):
        st, _d, out, _ = s.call("stream_create", flags=0, priority=0)
        if st:
            return made, st
        made.append(out["stream"])
    return made, 0


def test_the_start_up_log_says_what_they_take(start_pvgpud, tmp_path):
    daemon = daemon_with_costs(start_pvgpud, tmp_path)
    assert "a context takes 400.0 MiB, a stream 100.0 MiB" in daemon.log()


def test_contexts_are_charged_to_the_quota(start_pvgpud, tmp_path):
    daemon = daemon_with_costs(start_pvgpud, tmp_path)
    alice = unix_session(daemon)                    # its primary context
    assert alice.mem_info() == (QUOTA - CONTEXT, QUOTA)
    # Contexts and allocations share the quota.
    st, _d, out, _ = alice.call("mem_alloc", size=300 * MiB)
    assert st == 0, st
    assert alice.mem_info()[0] == QUOTA - CONTEXT - 300 * MiB
    assert alice.call("ctx_create", device=0)[0] == CUDA_ERROR_OUT_OF_MEMORY
    assert "context on device 0 refused" in daemon.log()
    assert alice.call("mem_free", dptr=out["dptr"])[0] == 0
    st, _d, out, _ = alice.call("ctx_create", device=0)
    assert st == 0, st
    second = out["ctx"]
    assert alice.mem_info()[0] == QUOTA - 2 * CONTEXT
    # Another session of the VM is charged to the same quota.
    alice2 = hello_session(daemon)
    assert alice2.call("ctx_create", device=0)[0] == CUDA_ERROR_OUT_OF_MEMORY
    # Destroying gives it back.
    assert alice.call("ctx_destroy", ctx=second)[0] == 0
    assert alice.mem_info()[0] == QUOTA - CONTEXT
    assert alice2.call("ctx_create", device=0)[0] == 0
    # Another VM is not held to alice's quota.
    bob = tcp_session(daemon, BOB_TOKEN)
    for _ in range(3):
        assert bob.call("ctx_create", device=0)[0] == 0
    for s in (alice, alice2, bob):
        s.close()


def test_streams_are_charged_to_the_quota(start_pvgpud, tmp_path):
    daemon = daemon_with_costs(start_pvgpud, tmp_path)
    alice = unix_session(daemon)
    made, st = streams_until_refused(alice, 50)
    # 400 MiB for the context, then 100 MiB a stream: 6 fit in 1 GiB.
    assert (len(made), st) == (6, CUDA_ERROR_OUT_OF_MEMORY)
    assert alice.mem_info()[0] == QUOTA - CONTEXT - 6 * STREAM
    assert "stream on device 0 refused" in daemon.log()
    assert alice.call("stream_destroy", stream=made.pop())[0] == 0
    assert alice.mem_info()[0] == QUOTA - CONTEXT - 5 * STREAM
    for stream in made:
        assert alice.call("stream_destroy", stream=stream)[0] == 0
    assert alice.mem_info()[0] == QUOTA - CONTEXT
    # Held when the session ends, they are given back with it.
    assert len(streams_until_refused(alice, 50)[0]) == 6
    alice.close()
    wait_live(daemon)
    alice = hello_session(daemon)
    first = alice.open_context()
    assert alice.mem_info()[0] == QUOTA - CONTEXT
    # A context's streams go with it, and their charge.
    st, _d, out, _ = alice.call("ctx_create", device=0)
    assert st == 0, st
    alice.queue("ctx_set", ctx=out["ctx"])
    made, st = streams_until_refused(alice, 50)
    assert (len(made), st) == (2, CUDA_ERROR_OUT_OF_MEMORY)
    assert alice.call("ctx_destroy", ctx=out["ctx"])[0] == 0
    alice.queue("ctx_set", ctx=first)
    assert alice.mem_info()[0] == QUOTA - CONTEXT
    # Bob's streams are his own.
    bob = tcp_session(daemon, BOB_TOKEN)
    made, st = streams_until_refused(bob, 20)
    assert (len(made), st) == (20, 0)
    alice.close()
    bob.close()
