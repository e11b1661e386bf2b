"""The control ring (feature `ring`, transport/ring.h) against
`pvgpud --executor sim` over shm://: programs pass with it, without it
(PVGPU_RING=0, or a guest that does not name the feature), and a raw guest
that scribbles on the ring, never reads its replies or vanishes mid-call
ends only its own session.  The raw guest speaks the ring from Python: the
layout is the one ring.h gives."""
import mmap
import os
import select
import socket
import struct
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "qemu-device"))
import pvgpu_wire as W  # noqa: E402
from idle import children  # noqa: E402
from pvgpu_sessions import alice_and_bob, wait_live  # noqa: E402
from pvgpuvm import window  # noqa: E402  (the header, common/window.h)
from pvgpuvm.spec import WindowLayout  # noqa: E402


RING = 1 << W.P.FEATURES["ring"]
RESUME = 1 << W.P.FEATURES["resume"]
KNOWN = sum(1 << bit for bit in W.P.FEATURES.values())
from curesult import CUDA_ERROR_INVALID_VALUE  # noqa: E402
WINDOW = 64 << 20
SLOT, NSLOTS = 1 << 20, 4
ARENA = window.HDR_SIZE + SLOT * NSLOTS
# The ring's own header page (PVGPU_RING_HDR_SIZE), before its two halves.
RING_HDR = 4096
# struct pvgpu_ring_ctrl: cons, cons_sleeping, prod_sleeping, a line each.
CTRL, CONS, CONS_SLEEPING, PROD_SLEEPING = 192, 0, 64, 128
# Records (ring.h): a u64 tag (position / ALIGN << 32 | length) on a line
# of its own start, the bytes, padding to the next line.
ALIGN, TAG = 64, 8


def tag(pos, n):
    return (pos // ALIGN) % (1 << 32) << 32 | n


def record_size(n):
    return (TAG + n + ALIGN - 1) // ALIGN * ALIGN


def shm_uri(daemon):
    return "shm://" + daemon.unix[len("unix://"):]


def make_window(size=WINDOW):
    fd = W.window_memfd("test-ring-window", size)
    m = mmap.mmap(fd, size)
    hdr = window.pack_header(WindowLayout(size=size, window_id=0,
                                          staging_offset=window.HDR_SIZE,
                                          slot_size=SLOT, nslots=NSLOTS))
    m[:len(hdr)] = hdr
    return fd, m


class RingSession(W.Session):
    """A raw guest whose messages, once the ring is on, go through it."""

    def __init__(self, uri, features=KNOWN):
        super().__init__(uri)
        self.ring = None
        st, _d, outs, _ = self.call("hello", version_min=1, version_max=W.P.VERSION,
                                    pid=os.getpid(), token="", client="pytest-ring",
                                    features=features)
        assert st == 0, st
        self.features = outs["features"]

    def attach(self, ring_offset=ARENA, cap=4096, ring_size=None, fd_m=None):
        """window_attach naming a ring; returns the status (ring on if 0)."""
        fd, m = fd_m or make_window()
        self.m = m
        self.views = {}
        size = RING_HDR + 2 * cap if ring_size is None else ring_size
        status, outs = self.window_attach(fd, size=WINDOW, ring_offset=ring_offset,
                                          ring_size=size)
        os.close(fd)
        if status == 0:
            assert outs["ring"] == 1
            self.base, self.cap = ring_offset, cap
            self.tx_pos = self.rx_pos = self.rx_end = self.rx_next = 0
            self.ring = True
        return status

    # Shared words of the region, each read and written whole as the C
    # side's atomics do: struct's "<Q" goes a byte at a time, and a worker
    # reading an index halfway through such a store saw it go backwards
    # (a flaky end of session, not the worker's fault).
    def shared(self, fmt):
        if fmt not in self.views:
            self.views[fmt] = memoryview(self.m).cast({"<Q": "Q", "<I": "I"}[fmt])
        return self.views[fmt]

    def word(self, d, field, fmt="<Q"):
        view = self.shared(fmt)
        return view[(self.base + d * CTRL + field) // view.itemsize]

    def set_word(self, d, field, v, fmt="<Q"):
        view = self.shared(fmt)
        view[(self.base + d * CTRL + field) // view.itemsize] = v

    def put(self, data, pos, b):
        at = pos & (self.cap - 1)
        first = min(len(b), self.cap - at)
        self.m[data + at:data + at + first] = b[:first]
        self.m[data:data + len(b) - first] = b[first:]

    def get(self, data, pos, n):
        at = pos & (self.cap - 1)
        first = min(n, self.cap - at)
        return self.m[data + at:data + at + first] + self.m[data:data + n - first]

    def kick(self):
        try:
            self.sock.send(b"k", socket.MSG_DONTWAIT)
        except (BlockingIOError, BrokenPipeError, ConnectionResetError):
            pass        # a full socket is awake enough; a gone worker is seen later

    def set_tag(self, d, pos, v):
        view = self.shared("<Q")
        data = self.base + RING_HDR + d * self.cap
        view[(data + (pos & (self.cap - 1))) // 8] = v

    def get_tag(self, d, pos):
        view = self.shared("<Q")
        data = self.base + RING_HDR + d * self.cap
        return view[(data + (pos & (self.cap - 1))) // 8]

    def published_replies(self):
        """Where the replies the worker published and we did not read end."""
        pos = self.rx_next
        while (t := self.get_tag(1, pos)) != 0 and pos - self.rx_next < self.cap:
            pos += record_size(t & 0xFFFFFFFF)
        return pos

    def send(self, raw):
        if not self.ring:
            return super().send(raw)
        data0 = self.base + RING_HDR
        off = 0
        while off < len(raw):
            deadline = time.time() + 10
            while self.cap - (self.tx_pos - self.word(0, CONS)) < 2 * ALIGN:
                if time.time() > deadline:
                    raise TimeoutError("the worker takes nothing from the ring")
                self.wait_kick()
            room = self.cap - (self.tx_pos - self.word(0, CONS))
            n = min(len(raw) - off, (room - ALIGN) // ALIGN * ALIGN - TAG)
            nxt = self.tx_pos + record_size(n)
            self.set_tag(0, nxt, 0)
            self.put(data0, self.tx_pos + TAG, raw[off:off + n])
            self.set_tag(0, self.tx_pos, tag(self.tx_pos, n))
            off += n
            self.tx_pos = nxt
            self.kick()         # always: a spurious kick is harmless

    def wait_kick(self):
        r, _, _ = select.select([self.sock], [], [], 0.01)
        if r:
            if not self.sock.recv(64):
                raise EOFError("backend closed the connection")

    def recv_exact(self, n):
        if not self.ring:
            return super().recv_exact(n)
        data1 = self.base + RING_HDR + self.cap
        out = bytearray()
        deadline = time.time() + 10
        while len(out) < n:
            if self.rx_pos == self.rx_end:
                t = self.get_tag(1, self.rx_next)
                if t == 0:
                    if time.time() > deadline:
                        raise TimeoutError("no reply in the ring")
                    self.set_word(1, CONS_SLEEPING, 1, "<I")
                    self.wait_kick()
                    continue
                assert t >> 32 == (self.rx_next // ALIGN) % (1 << 32), hex(t)
                self.rx_pos = self.rx_next + TAG
                self.rx_end = self.rx_pos + (t & 0xFFFFFFFF)
                self.rx_next += record_size(t & 0xFFFFFFFF)
            take = min(self.rx_end - self.rx_pos, n - len(out))
            out += self.get(data1, self.rx_pos, take)
            self.rx_pos += take
            if self.rx_pos == self.rx_end:
                self.set_word(1, CONS, self.rx_next)
                self.kick()     # the worker may wait for room
        return bytes(out)


def ring_session(daemon, features=KNOWN, **kw):
    s = RingSession(daemon.unix, features=features)
    assert s.features & RING
    assert s.attach(**kw) == 0
    return s


# --- programs ------------------------------------------------------------------

@pytest.mark.parametrize("name", ["memory", "streams", "threads"])
def test_programs_pass_over_the_ring(programs, sim_daemon, name):
    env = sim_daemon.env(shm_uri(sim_daemon))
    env["PVGPU_DEBUG"] = "1"
    res = programs.run(name, env)
    programs.assert_passed(res, sim_daemon)
    assert "control ring" in res.stderr, res.stderr[-2000:]
    assert "control ring: 512 KiB each way" in sim_daemon.log()


def test_programs_pass_with_the_ring_turned_off(programs, sim_daemon):
    env = sim_daemon.env(shm_uri(sim_daemon))
    env["PVGPU_DEBUG"] = "1"
    env["PVGPU_RING"] = "0"
    res = programs.run("memory", env)
    programs.assert_passed(res, sim_daemon)
    assert "control ring" not in res.stderr
    assert "control ring" not in sim_daemon.log()


def test_staged_copies_over_the_ring_with_tiny_staging(programs, sim_daemon):
    # Pageable copies: the staging ring's waits must not mistake a wake-up
    # byte on the socket for the reply.
    env = sim_daemon.env(shm_uri(sim_daemon))
    env.update(PVGPU_STAGING_SLOT="64K", PVGPU_STAGING_SLOTS="2", PVGPU_DEBUG="1")
    res = programs.run("memory", env)
    programs.assert_passed(res, sim_daemon)
    assert "control ring" in res.stderr


# --- negotiation -----------------------------------------------------------------

def test_raw_session_over_the_ring(sim_daemon):
    s = ring_session(sim_daemon)
    s.open_context()
    st, _d, out, _ = s.call("mem_alloc", size=1 << 16)
    assert st == 0
    dptr = out["dptr"]
    data = bytes((i * 13) & 0xFF for i in range(20000))   # DATA frames past the ring
    assert s.call("memcpy_htod", data_in=data, dst=dptr, size=len(data), stream=0)[0] == 0
    st, _d, _o, back = s.call("memcpy_dtoh", src=dptr, size=len(data), stream=0)
    assert st == 0 and back == data
    # Nothing of it went over the socket but wake-ups.
    assert s.word(0, CONS) > 20000 and s.rx_next > 20000
    assert s.call("bye")[0] == 0
    s.close()


def test_ring_not_agreed_is_refused_and_the_socket_still_works(sim_daemon):
    s = RingSession(sim_daemon.unix, features=KNOWN & ~RING)
    assert not s.features & RING
    assert s.attach() == CUDA_ERROR_INVALID_VALUE
    assert s.ring is None
    s.open_context()
    assert s.call("mem_alloc", size=4096)[0] == 0
    assert "the ring feature was not agreed" in sim_daemon.log()


def test_old_guest_attaches_a_window_without_a_ring(sim_daemon):
    s = W.Session(sim_daemon.unix)
    s.hello()               # no feature words: protocol 1's
    fd, m = make_window()
    msg_id = s.next_id
    s.next_id += 1
    s.sock.sendmsg([W.message("window_attach", msg_id, size=WINDOW)],
                   [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack("i", fd))])
    _op, _fl, _rid, payload = s.read_message()
    assert struct.unpack_from("<i", payload)[0] == 0
    assert len(payload) == 8 + 8        # no ring word for an old guest
    s.open_context()
    assert s.call("mem_alloc", size=4096)[0] == 0


@pytest.mark.parametrize("ring_offset,cap,ring_size,why", [
    (ARENA + 8, 4096, None, "not page-aligned"),
    (window.HDR_SIZE, 4096, None, "outside the window's free part"),      # on the staging slots
    (WINDOW - 4096, 4096, None, "outside the window's free part"),
    (ARENA, 4096, RING_HDR + 2 * 4096 + 1, "two equal halves"),
    (ARENA, 4096, RING_HDR + 2 * 12288, "power of two"),
    (ARENA, 4096, RING_HDR + 2 * 2048, "power of two"),
    (ARENA, 4096, (1 << 64) - 1, "outside the window's free part"),
])
def test_bad_ring_regions_are_refused(sim_daemon, ring_offset, cap, ring_size, why):
    s = RingSession(sim_daemon.unix)
    assert s.attach(ring_offset=ring_offset, cap=cap, ring_size=ring_size) == \
        CUDA_ERROR_INVALID_VALUE
    assert why in sim_daemon.log()
    s.open_context()        # the session goes on over the socket
    assert s.call("mem_alloc", size=4096)[0] == 0


# --- a hostile or vanishing guest --------------------------------------------------

def wait_for_log(daemon, text, timeout=10):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if text in daemon.log():
            return True
        time.sleep(0.05)
    return False


def assert_session_ended(s):
    with pytest.raises((EOFError, ConnectionResetError, TimeoutError)):
        for _ in range(100):
            s.wait_kick()
        s.call("mem_get_info")


def assert_daemon_serves(daemon):
    s = ring_session(daemon)
    s.open_context()
    assert s.call("mem_alloc", size=4096)[0] == 0
    s.close()


def test_a_record_longer_than_the_ring_ends_the_session(sim_daemon):
    s = ring_session(sim_daemon)
    s.set_tag(0, 0, tag(0, s.cap))
    s.kick()
    assert wait_for_log(sim_daemon, "length is past the ring's capacity")
    assert_session_ended(s)
    assert_daemon_serves(sim_daemon)


def test_a_tag_naming_another_position_ends_the_session(sim_daemon):
    # A record left from an earlier lap, or a scribble: its tag names a
    # position the worker is not at.
    s = ring_session(sim_daemon)
    s.open_context()
    s.set_tag(0, s.tx_pos, tag(s.tx_pos + s.cap, 24))
    s.kick()
    assert wait_for_log(sim_daemon, "tag names another position")
    assert_session_ended(s)
    assert_daemon_serves(sim_daemon)


def test_consumer_index_past_the_replies_ends_the_session(sim_daemon):
    s = ring_session(sim_daemon)
    s.set_word(1, CONS, 1 << 40)
    # The worker reads the guest's consumer index once what it last saw
    # leaves less than half the ring (transport/ring.c): requests
    # enough for replies past that.
    raw = b"".join(W.message("mem_get_info", 1000 + i) for i in range(100))
    s.send(raw)
    assert wait_for_log(sim_daemon, "consumer index is past what was sent")
    assert_session_ended(s)
    assert_daemon_serves(sim_daemon)


def test_a_length_past_the_limit_in_the_ring_ends_the_session(sim_daemon):
    s = ring_session(sim_daemon)
    s.send(W.header(W.P.OPS["mem_get_info"][0], 1 << 30, s.next_id))
    assert wait_for_log(sim_daemon, "message too long")
    assert_session_ended(s)


def test_a_guest_that_never_reads_its_replies(sim_daemon):
    # Without resume: a session that offers one is kept for the guest's
    # return first (test_resume.py's ring cuts), then ends as here.
    s = ring_session(sim_daemon, features=KNOWN & ~RESUME)
    s.open_context()
    # Requests until the worker blocks on a full reply ring, never reading.
    raw = b"".join(W.message("mem_get_info", 1000 + i) for i in range(150))
    s.send(raw)
    time.sleep(0.3)
    end = s.published_replies()
    assert s.cap - (end - s.rx_next) < 2 * ALIGN      # full, and waiting
    s.close()
    assert wait_for_log(sim_daemon, "connection closed by the guest")
    assert_daemon_serves(sim_daemon)


def test_a_guest_killed_mid_call(sim_daemon):
    s = ring_session(sim_daemon, features=KNOWN & ~RESUME)
    s.open_context()
    st, _d, out, _ = s.call("mem_alloc", size=1 << 16)
    # Half a request in the ring, then gone.
    raw = W.message("memcpy_htod", s.next_id, dst=out["dptr"], size=1 << 16, stream=0)
    s.send(raw + W.data_frames(b"x" * 1000, s.next_id)[:500])
    s.sock.close()
    assert wait_for_log(sim_daemon, "connection closed by the guest during memcpy_htod")
    assert_daemon_serves(sim_daemon)


def test_a_ring_guest_gone_is_kept_for_its_grace(start_pvgpud, tmp_path):
    """With resume: a ring session whose guest is gone is kept for the
    VM's resume_grace (its messages are in the ring, only the wake-ups
    went with the connection), then ends as any other, its memory back."""
    d = alice_and_bob(start_pvgpud, tmp_path, "bobtoken",
                      alice_extra="memory = 64M\nresume_grace = 0.5")
    s = RingSession(d.unix)
    assert s.features & RING and s.features & RESUME
    assert s.attach() == 0
    s.open_context()
    assert s.call("mem_alloc", size=32 << 20)[0] == 0
    s.close()
    assert wait_for_log(d, "connection lost; kept 0.5 s for its guest to resume it")
    assert wait_for_log(d, "not resumed within 0.5 s; ending the session")
    wait_live(d, 0)
    assert_daemon_serves(d)


# --- idle costs nothing -------------------------------------------------------------

def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])        # utime + stime


def test_idle_ring_sessions_cost_no_cpu(sim_daemon):
    sessions = []
    for _ in range(32):
        s = ring_session(sim_daemon)
        s.open_context()
        sessions.append(s)
    time.sleep(0.2)         # past every spin
    # The workers by their parent, as tests/lib/idle.py finds them.
    pids = [sim_daemon.proc.pid] + children(sim_daemon.proc.pid)
    assert len(pids) >= 33
    before = sum(cpu_ticks(p) for p in pids)
    t0 = time.time()
    time.sleep(3)
    used = sum(cpu_ticks(p) for p in pids) - before
    seconds = time.time() - t0
    hz = os.sysconf("SC_CLK_TCK")
    # Under 1% of one core for all of them together.
    assert used / hz < 0.01 * seconds, f"{used} ticks in {seconds:.1f} s"
    for s in sessions:
        assert s.call("mem_alloc", size=4096)[0] == 0   # and all still answer
        s.close()
