"""A hostile or broken guest gets an error for its own session, and nothing
else is disturbed: the daemon stays up and other sessions keep working.

These tests speak the wire protocol directly (tests/lib/pvgpu_wire.py), so
they can send what the guest library never would.
"""
import os
import signal
import socket
import struct
import subprocess
import sys
import textwrap
import time


sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import pvgpu_wire as W  # noqa: E402
from pvgpu_sessions import closed_by_backend  # noqa: E402

from curesult import (  # noqa: E402
    CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY,
    CUDA_ERROR_INVALID_HANDLE, CUDA_ERROR_NOT_PERMITTED,
    CUDA_ERROR_NOT_SUPPORTED)


def session(daemon):
    s = W.Session(daemon.unix)
    s.hello()
    s.open_context()
    return s


def assert_healthy(daemon):
    """A fresh session can allocate, copy and read back."""
    s = session(daemon)
    st, _, out, _ = s.call("mem_alloc", size=1000)
    assert st == 0
    payload = bytes(range(256)) * 4
    assert s.call("memcpy_htod", data_in=payload[:1000], dst=out["dptr"], size=1000, stream=0)[0] == 0
    st, _, _, back = s.call("memcpy_dtoh", src=out["dptr"], size=1000, stream=0)
    assert st == 0 and back == payload[:1000]
    s.close()


def test_truncated_message_ends_only_that_session(sim_daemon):
    s = W.Session(sim_daemon.unix)
    s.hello()
    raw = W.message("mem_alloc", 2, size=64)
    s.send(raw[:-3])          # promise 8 payload bytes, send 5, then vanish
    s.close()
    assert_healthy(sim_daemon)


def test_oversized_length_ends_the_session(sim_daemon):
    s = W.Session(sim_daemon.unix)
    s.hello()
    s.send(W.header(W.P.OPS["mem_alloc"][0], 64 << 20, 2))
    assert closed_by_backend(s)
    assert "message too long" in sim_daemon.log()
    assert_healthy(sim_daemon)


def test_bad_magic_and_message_before_hello(sim_daemon):
    s = W.Session(sim_daemon.unix)
    s.send(W.header(0x10, 0, 1, magic=0x12345678))
    assert closed_by_backend(s)
    s = W.Session(sim_daemon.unix)
    s.send(W.message("mem_alloc", 1, size=64))
    assert closed_by_backend(s)
    log = sim_daemon.log()
    assert "bad magic" in log and "not hello" in log
    assert_healthy(sim_daemon)


def test_unknown_opcode_and_malformed_payload_get_errors(sim_daemon):
    s = session(sim_daemon)
    s.send(W.header(0x7FF0, 0, 77))
    op, flags, rid, payload = s.read_message()
    assert (op, rid) == (0x7FF0, 77) and flags & W.P.F_REPLY
    assert struct.unpack_from("<i", payload)[0] == CUDA_ERROR_NOT_SUPPORTED
    # mem_alloc wants 8 bytes; give it 3.
    s.send(W.header(W.P.OPS["mem_alloc"][0], 3, 78) + b"abc")
    op, _, rid, payload = s.read_message()
    assert rid == 78 and struct.unpack_from("<i", payload)[0] == CUDA_ERROR_INVALID_VALUE
    # The session goes on.
    assert s.call("mem_alloc", size=64)[0] == 0
    log = sim_daemon.log()
    assert "unknown opcode 0x7ff0" in log and "malformed mem_alloc" in log


def test_handles_the_session_does_not_own(sim_daemon):
    s = session(sim_daemon)
    assert s.call("stream_synchronize", stream=12345)[0] == CUDA_ERROR_INVALID_HANDLE
    assert s.driver("cuEventQuery", (1 << 24) | 1)[0] == CUDA_ERROR_INVALID_HANDLE  # the context
    assert s.call("stream_destroy", stream=0)[0] == CUDA_ERROR_INVALID_HANDLE
    assert s.call("ctx_destroy", ctx=999)[0] == CUDA_ERROR_INVALID_HANDLE
    assert s.call("mem_free", dptr=0xDEADBEEF)[0] == CUDA_ERROR_INVALID_VALUE
    assert s.call("memcpy_dtoh", src=0xDEADBEEF, size=16, stream=0)[0] == CUDA_ERROR_INVALID_VALUE
    st, _, out, _ = s.call("stream_create", flags=0, priority=0)
    assert st == 0
    assert s.call("stream_destroy", stream=out["stream"])[0] == 0
    # A destroyed handle is stale for good.
    assert s.call("stream_synchronize", stream=out["stream"])[0] == CUDA_ERROR_INVALID_HANDLE


def test_copies_past_the_end_are_refused_and_the_stream_stays_in_step(sim_daemon):
    s = session(sim_daemon)
    st, _, out, _ = s.call("mem_alloc", size=4096)
    base = out["dptr"]
    st, *_ = s.call("memcpy_htod", data_in=b"z" * 200, dst=base + 4000, size=200, stream=0)
    assert st == CUDA_ERROR_INVALID_VALUE
    assert s.call("memcpy_dtoh", src=base + 1, size=4096, stream=0)[0] == CUDA_ERROR_INVALID_VALUE
    assert s.call("memcpy_dtod", dst=base, src=base + 2048, size=2049, stream=0)[0] == CUDA_ERROR_INVALID_VALUE
    # The refused upload's frames were consumed: the next call is answered.
    assert s.call("memcpy_htod", data_in=b"k" * 96, dst=base + 4000, size=96, stream=0)[0] == 0
    st, _, _, back = s.call("memcpy_dtoh", src=base + 4000, size=96, stream=0)
    assert st == 0 and back == b"k" * 96


def test_synchronous_copies_of_every_size_and_framing(sim_daemon):
    # Small ones (at most 64 KiB) go to the executor's synchronous copy,
    # larger ones through the pinned staging pipeline (copy.c); DATA frames
    # may come in any lengths that add up.
    s = session(sim_daemon)
    st, _, out, _ = s.call("mem_alloc", size=1 << 20)
    base = out["dptr"]
    for size in (1, 100, 65535, 65536, 65537, 300000):
        for frame in (1000, 1 << 20):
            data = bytes((i * 31 + size + frame) & 0xFF for i in range(size))
            msg_id = s.next_id
            s.next_id += 1
            s.send(W.message("memcpy_htod", msg_id, dst=base + 3, size=size, stream=0)
                   + W.data_frames(data, msg_id, block=frame))
            _op, _fl, rid, payload = s.read_message()
            assert rid == msg_id and struct.unpack_from("<i", payload)[0] == 0, size
            st, _, _, back = s.call("memcpy_dtoh", src=base + 3, size=size, stream=0)
            assert st == 0 and back == data, (size, frame)
    # A small upload to a freed allocation: refused, its frames consumed.
    assert s.call("mem_free", dptr=base)[0] == 0
    assert s.call("memcpy_htod", data_in=b"q" * 10, dst=base, size=10, stream=0)[0] != 0
    assert s.call("memcpy_dtoh", src=base, size=10, stream=0)[0] != 0
    st, _, out, _ = s.call("mem_alloc", size=64)
    assert st == 0


def test_async_errors_surface_at_the_next_synchronising_call(sim_daemon):
    s = session(sim_daemon)
    st, _, out, _ = s.call("mem_alloc", size=64)
    s.send(W.batch(W.message("memset_async", 0, dst=out["dptr"], value=1, elem_size=4,
                             count=17, stream=0)))
    st, deferred, _, _ = s.call("ctx_synchronize")
    assert st == 0 and deferred == CUDA_ERROR_INVALID_VALUE
    # Reported once, then cleared.
    st, deferred, _, _ = s.call("ctx_synchronize")
    assert (st, deferred) == (0, 0)


def test_sync_op_inside_a_batch_ends_the_session(sim_daemon):
    s = session(sim_daemon)
    s.send(W.batch(W.message("mem_alloc", 0, size=64)))
    assert closed_by_backend(s)
    assert "may not be batched" in sim_daemon.log()
    assert_healthy(sim_daemon)


def test_bad_data_frames_end_the_session(sim_daemon):
    s = session(sim_daemon)
    st, _, out, _ = s.call("mem_alloc", size=4096)
    # A frame with the wrong request id.
    s.send(W.message("memcpy_htod", 9, dst=out["dptr"], size=16, stream=0)
           + W.data_frames(b"x" * 16, 10))
    assert closed_by_backend(s)
    # More data than announced.
    s = session(sim_daemon)
    st, _, out, _ = s.call("mem_alloc", size=4096)
    s.send(W.message("memcpy_htod", 9, dst=out["dptr"], size=16, stream=0)
           + W.data_frames(b"x" * 32, 9))
    assert closed_by_backend(s)
    assert_healthy(sim_daemon)


def test_a_session_cannot_touch_another_sessions_memory(sim_daemon):
    a, b = session(sim_daemon), session(sim_daemon)
    st, _, out, _ = a.call("mem_alloc", size=4096)
    ptr = out["dptr"]
    assert a.call("memcpy_htod", data_in=b"A" * 4096, dst=ptr, size=4096, stream=0)[0] == 0
    assert b.call("memcpy_dtoh", src=ptr, size=4096, stream=0)[0] == CUDA_ERROR_INVALID_VALUE
    assert b.call("memcpy_htod", data_in=b"B" * 16, dst=ptr, size=16, stream=0)[0] == CUDA_ERROR_INVALID_VALUE
    b.send(W.batch(W.message("memset_async", 0, dst=ptr, value=0, elem_size=1, count=16, stream=0)))
    assert b.call("ctx_synchronize")[1] == CUDA_ERROR_INVALID_VALUE
    assert b.call("mem_free", dptr=ptr)[0] == CUDA_ERROR_INVALID_VALUE
    st, _, _, back = a.call("memcpy_dtoh", src=ptr, size=4096, stream=0)
    assert st == 0 and back == b"A" * 4096


def test_tcp_caller_without_the_token_is_refused(start_pvgpud):
    daemon = start_pvgpud("sim", extra_args=["--tcp-token", "s3cret"])
    port = int(daemon.tcp.rsplit(":", 1)[1])

    def hello_over_tcp(token):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
            c.sendall(W.message("hello", 1, version_min=1, version_max=W.P.VERSION,
                                pid=1, token=token, client="liar"))
            hdr = b""
            while len(hdr) < W.HDR.size:
                hdr += c.recv(W.HDR.size - len(hdr))
            length = W.HDR.unpack(hdr)[4]
            payload = b""
            while len(payload) < length:
                payload += c.recv(length - len(payload))
            return struct.unpack_from("<i", payload)[0]

    assert hello_over_tcp("") == CUDA_ERROR_NOT_PERMITTED
    assert hello_over_tcp("guess") == CUDA_ERROR_NOT_PERMITTED
    assert hello_over_tcp("s3cret") == 0
    assert "wrong or missing token" in daemon.log()


KILLED_CLIENT = textwrap.dedent("""
    import os, sys
    sys.path.insert(0, {lib!r})
    import pvgpu_wire as W
    s = W.Session({uri!r})
    s.hello()
    s.open_context()
    st, _, out, _ = s.call("mem_alloc", size=512 << 20)
    assert st == 0, st
    # Start a 512 MiB upload, send a quarter of it, and tell the parent.
    s.send(W.message("memcpy_htod", 99, dst=out["dptr"], size=512 << 20, stream=0))
    s.send(W.data_frames(b"q" * (128 << 20), 99))
    print("mid-copy", flush=True)
    sys.stdin.read()
""")


def test_killing_a_client_mid_copy_frees_its_memory(sim_daemon):
    observer = session(sim_daemon)
    st, _, base, _ = observer.call("mem_get_info")
    assert st == 0
    lib = os.path.join(os.path.dirname(__file__), "..", "lib")
    env = dict(os.environ)
    proc = subprocess.Popen([sys.executable, "-c", KILLED_CLIENT.format(lib=lib, uri=sim_daemon.unix)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout.readline().strip() == "mid-copy"
        st, _, during, _ = observer.call("mem_get_info")
        assert base["free"] - during["free"] == 512 << 20  # the other session's memory is counted
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        st, _, after, _ = observer.call("mem_get_info")
        if after["free"] == base["free"]:
            break
        time.sleep(0.05)
    assert after["free"] == base["free"], "memory of the killed session was not freed"
    # The worker gives the memory back as it ends; the supervisor writes
    # the session-end line (with its totals) once it has reaped it, a
    # moment later on a busy machine.
    while "to device" not in sim_daemon.log() and time.monotonic() < deadline + 10:
        time.sleep(0.05)
    log = sim_daemon.log()
    assert "connection closed by the guest" in log
    assert "to device" in log  # the session-end line with its totals
    assert_healthy(sim_daemon)
