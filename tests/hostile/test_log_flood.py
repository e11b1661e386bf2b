"""A guest that floods pvgpud with bad requests costs the log a bounded
number of lines per session, at the packaged --log-level info: the
first 10 of each kind, then one line saying how many more there were
(host-backend/session/loglimit.h).  Another session's lines are its own.
"""
import os
import re
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import pvgpu_wire as W  # noqa: E402
from pvgpu_sessions import unix_session, wait_live  # noqa: E402

from curesult import (  # noqa: E402
    CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_INVALID_HANDLE,
    CUDA_ERROR_NOT_SUPPORTED)
BURST = 10
ROUNDS, PER_ROUND = 20, 100     # 2000 requests of each kind
UNKNOWN = 0x7FF0


def answer(s, n):
    """Read n replies: the status of each."""
    return [struct.unpack_from("<i", s.read_message()[3])[0] for _ in range(n)]


def flood(s, make):
    """ROUNDS × PER_ROUND requests, each round read back before the next
    (a guest that never reads fills the socket, not the log)."""
    statuses = set()
    for r in range(ROUNDS):
        s.send(b"".join(make(1000 + r * PER_ROUND + i) for i in range(PER_ROUND)))
        statuses.update(answer(s, PER_ROUND))
    return statuses


def test_a_flood_of_bad_requests_costs_a_bounded_log(start_pvgpud):
    daemon = start_pvgpud("sim", extra_args=["--log-level", "info"])
    wait_live(daemon)
    before = daemon.log().count("\n")
    s = unix_session(daemon)
    mem_alloc = W.P.OPS["mem_alloc"][0]
    # Opcodes nobody declared; mem_alloc with 3 bytes where it takes 8; a
    # handle it does not own, on many opcodes; a second hello.
    assert flood(s, lambda i: W.header(UNKNOWN, 0, i)) == {CUDA_ERROR_NOT_SUPPORTED}
    assert flood(s, lambda i: W.header(mem_alloc, 3, i) + b"abc") == {CUDA_ERROR_INVALID_VALUE}
    assert flood(s, lambda i: W.message("stream_synchronize", i, stream=i)) == \
        {CUDA_ERROR_INVALID_HANDLE}
    assert flood(s, lambda i: W.message("hello", i, version_min=1, version_max=W.P.VERSION,
                                        pid=1, token="", client="again")) == \
        {CUDA_ERROR_INVALID_VALUE}
    # Another session, during the flood: its one line is written.
    other = unix_session(daemon)
    other.send(W.header(0x7FE1, 0, 7))
    assert answer(other, 1) == [CUDA_ERROR_NOT_SUPPORTED]
    other.close()
    # The session goes on, and its end says what was not written.
    assert s.call("mem_alloc", size=64)[0] == 0
    s.close()
    wait_live(daemon)
    log = daemon.log()
    added = log.count("\n") - before
    total = 4 * ROUNDS * PER_ROUND
    # 10 of each of 4 kinds, 4 summaries, two sessions' start, end and
    # hello lines, and room for a scheduler or channel line or two.
    assert added <= 4 * BURST + 4 + 12, f"{added} lines for {total} bad requests:\n{log}"
    assert log.count("unknown opcode 0x7ff0") == BURST
    assert log.count("malformed mem_alloc request") == BURST
    assert len(re.findall(r": hello sent twice: refused$", log, re.M)) == BURST
    assert "unknown opcode 0x7fe1" in log      # the other session's own
    kept = ROUNDS * PER_ROUND - BURST
    for kind in ("unknown opcode %#x", "malformed %s request", "hello sent twice"):
        assert re.search(rf'{kept} more lines like "{re.escape(kind)}[^"]*" not logged', log), \
            (kind, log)
    # Failures are logged once per (opcode, status) already: one line.
    assert log.count("stream_synchronize failed with CUresult 400") == 1
