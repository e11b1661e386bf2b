"""A host that sends hellos with a wrong token as fast as it can costs the
log a line a second, the next one saying how many were not written; a
refusal from another host meanwhile is written at once, with its own
address (host-backend/daemon/saylimit.h).  Every hello still gets its
answer.
"""
import os
import re
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import pvgpu_wire as W  # noqa: E402
from pvgpu_sessions import alice_and_bob, tcp_session, wait_live  # noqa: E402

from curesult import CUDA_ERROR_NOT_PERMITTED  # noqa: E402
FLOODER, OTHER = "127.0.0.7", "127.0.0.8"
BOB_TOKEN = "bob-flood-51c2"


def wrong_hello(daemon, source, n):
    s = W.Session(daemon.tcp, source=source)
    try:
        st, _, _, _ = s.call("hello", version_min=1, version_max=W.P.VERSION,
                             pid=os.getpid(), token=f"wrong-{n}", client="flood")
    finally:
        s.close()
    return st


def refusals_from(log, source):
    """pvgpud's refusal lines for source, and how many more they say went
    unwritten."""
    lines = [line for line in log.splitlines()
             if f"tcp:{source}:" in line and " refused at hello: " in line]
    unsaid = sum(int(m.group(1)) for line in lines
                 for m in [re.search(r"\(and (\d+) more like it", line)] if m)
    return lines, unsaid


def test_a_flood_of_refused_hellos_costs_a_line_a_second(start_pvgpud, tmp_path):
    daemon = alice_and_bob(start_pvgpud, tmp_path, BOB_TOKEN)
    wait_live(daemon)
    t0 = time.monotonic()
    sent = 0
    for n in range(400):
        assert wrong_hello(daemon, FLOODER, n) == CUDA_ERROR_NOT_PERMITTED
        sent += 1
        if n == 200:
            # Another host, mid-flood: its refusal is its own line, now.
            assert wrong_hello(daemon, OTHER, n) == CUDA_ERROR_NOT_PERMITTED
            lines, _ = refusals_from(daemon.log(), OTHER)
            assert len(lines) == 1, daemon.log()[-2000:]
    elapsed = time.monotonic() - t0
    # One more after a quiet second says how many the last ones left out.
    time.sleep(1.1)
    assert wrong_hello(daemon, FLOODER, sent) == CUDA_ERROR_NOT_PERMITTED
    sent += 1
    lines, unsaid = refusals_from(daemon.log(), FLOODER)
    assert len(lines) <= 2 + int(elapsed), lines
    assert len(lines) + unsaid == sent, (len(lines), unsaid, sent)
    assert "its token names no [vm]" in lines[-1]
    # A known VM is served all along.
    bob = tcp_session(daemon, BOB_TOKEN)
    assert bob.call("mem_alloc", size=4096)[0] == 0
    bob.close()
