"""A tenant that opens TCP connections and never says hello (DESIGN §5).

A TCP caller is known only by the token in its hello, so until the hello
is here it must cost no worker and no session slot: pvgpud reads it in the
supervisor, closes a connection that has not sent it within --hello-timeout
(default 5 s), and keeps such connections to a budget of their own
(--max-unidentified, default 32, a quarter of it per source address,
shared out between the addresses that want it once it is full), closing
those past it at once.  Known VMs meanwhile get their sessions.

The silent sockets come from other loopback addresses (127.0.0.2 and up)
than the known callers, as another host's would.  Every wait is bounded,
with margins a busy 2-core machine keeps.
"""
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import pvgpu_wire as W  # noqa: E402
from pvgpu_sessions import alice_and_bob, tcp_session, unix_session, wait_live  # noqa: E402
from idle import children  # noqa: E402

PVGPUD = Path(__file__).resolve().parents[2] / os.environ.get("PVGPU_BUILD", "build") / "bin" / "pvgpud"
BOB_TOKEN = "bob-hostile-7a1c"
DEFAULT_HELLO_TIMEOUT = 5.0     # pvgpud's default --hello-timeout
DEFAULT_BUDGET = 32             # and --max-unidentified
PER_ADDRESS = DEFAULT_BUDGET // 4


def policy_daemon(start_pvgpud, tmp_path, extra_args=()):
    daemon = alice_and_bob(start_pvgpud, tmp_path, BOB_TOKEN, extra_args=extra_args)
    wait_live(daemon)
    return daemon


def port(daemon):
    return int(daemon.tcp.rsplit(":", 1)[1])


def connect(daemon, source, timeout=10.0):
    """A TCP connection to the daemon from loopback address source."""
    return socket.create_connection(("127.0.0.1", port(daemon)), timeout=timeout,
                                    source_address=(source, 0))


def held_from(pid, sources):
    """How many TCP connections from the loopback addresses sources pid
    holds open (its socket descriptors, matched in /proc/net/tcp)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[len("socket:["):-1])
    # /proc/net/tcp writes an IPv4 address as the hex of its 32-bit value
    # in host order: 127.0.0.2 is 0200007F here.
    want = {socket.inet_aton(a)[::-1].hex().upper() for a in sources}
    n = 0
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            cols = line.split()
            n += cols[2].split(":")[0] in want and cols[9] in inodes
    return n


def wait_for(what, cond, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def closed(s, timeout):
    """Whether pvgpud closes raw socket s within timeout seconds."""
    s.settimeout(timeout)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def still_open(s, wait=0.5):
    """Nothing from the backend within wait seconds, and no hang-up."""
    s.settimeout(wait)
    try:
        return s.recv(1) != b""
    except socket.timeout:
        return True
    except ConnectionResetError:
        return False


def close_all(socks):
    for s in socks:
        s.close()


def test_silent_sockets_take_no_slot_and_no_worker(start_pvgpud, tmp_path):
    """As many silent sockets as there are session slots, and the known
    VMs still get sessions at once; pvgpud forked nothing for them."""
    slots = 2 * PER_ADDRESS
    daemon = policy_daemon(start_pvgpud, tmp_path, ["--max-sessions", str(slots)])
    pid = daemon.proc.pid
    wait_for("the start-up probe's child to go", lambda: not children(pid))
    sources = [f"127.0.0.{2 + i // PER_ADDRESS}" for i in range(slots)]
    silent = [connect(daemon, a) for a in sources]
    try:
        # Accepted: each is either a socket pvgpud holds or a worker of its own.
        wait_for("pvgpud to accept the silent sockets",
                 lambda: len(children(pid)) + held_from(pid, set(sources)) >= slots)
        assert children(pid) == [], "pvgpud forked workers for callers that never said hello"
        # Every slot is still free for the VMs the policy knows.
        alice = [unix_session(daemon) for _ in range(slots)]
        for a in alice:
            assert a.call("mem_alloc", size=4096)[0] == 0
        close_all(alice)
        wait_live(daemon, 0)
        bob = tcp_session(daemon, BOB_TOKEN)
        assert bob.call("mem_alloc", size=4096)[0] == 0
        bob.close()
        assert "session slots are in use" not in daemon.log()
        assert all(still_open(s, 0.1) for s in silent)
    finally:
        close_all(silent)


def test_silent_sockets_are_closed_at_the_default_deadline(start_pvgpud, tmp_path):
    """Silent, half a header, a header and half a hello: each is closed
    once the default 5 s have passed, and not long before."""
    daemon = policy_daemon(start_pvgpud, tmp_path)
    hello = W.message("hello", 1, version_min=1, version_max=W.P.VERSION,
                      pid=os.getpid(), token=BOB_TOKEN, client="slow")
    t0 = time.monotonic()       # the deadlines start later, at accept
    socks = [connect(daemon, "127.0.0.2") for _ in range(3)]
    socks[1].sendall(hello[:10])
    socks[2].sendall(hello[:W.HDR.size + 7])
    try:
        assert all(still_open(s, 0.2) for s in socks)
        for s in socks:
            assert closed(s, timeout=DEFAULT_HELLO_TIMEOUT + 30), \
                f"still open {time.monotonic() - t0:.1f} s after connecting\n{daemon.log()[-3000:]}"
        # Not before the deadline (the same clock; a little for rounding).
        assert time.monotonic() - t0 >= DEFAULT_HELLO_TIMEOUT - 0.05
        assert "no whole hello within 5 s (--hello-timeout)" in daemon.log()
        # None of them was ever a session.
        assert "start: tcp:127.0.0.2:" not in daemon.log()
        bob = tcp_session(daemon, BOB_TOKEN)
        bob.close()
    finally:
        close_all(socks)


def test_hello_timeout_takes_fractions(start_pvgpud, tmp_path):
    daemon = policy_daemon(start_pvgpud, tmp_path, ["--hello-timeout", "0.5"])
    s = connect(daemon, "127.0.0.2")
    try:
        assert closed(s, timeout=20)
        assert "no whole hello within 0.5 s" in daemon.log()
    finally:
        s.close()


def test_the_budget_is_shared_between_the_addresses_that_want_it(start_pvgpud, tmp_path):
    """A quarter of --max-unidentified per address: past it a new
    connection is closed at once.  The whole of it taken by four
    addresses, a fifth's callers still get in, each closing the oldest
    connection of the address that holds the most, until the five hold
    about as many each (none two more than another); past that a new one
    is closed at once.  A line or so a second in the log; a known VM is
    served throughout."""
    # The deadline far off: what is closed here is closed for the budget.
    daemon = policy_daemon(start_pvgpud, tmp_path, ["--hello-timeout", "120"])
    pid = daemon.proc.pid
    first = [f"127.0.0.{a}" for a in range(2, 2 + DEFAULT_BUDGET // PER_ADDRESS)]
    newcomer = "127.0.0.100"
    held, refused, came = [], [], []
    try:
        held += [connect(daemon, first[0]) for _ in range(PER_ADDRESS)]
        extra = connect(daemon, first[0])
        assert closed(extra, timeout=10), "over the per-address budget, yet open"
        refused.append(extra)
        for a in first[1:]:
            held += [connect(daemon, a) for _ in range(PER_ADDRESS)]
        wait_for("pvgpud to hold the silent sockets",
                 lambda: held_from(pid, first) == DEFAULT_BUDGET)
        t0 = time.monotonic()
        came = [connect(daemon, newcomer) for _ in range(20)]
        # Each of the first ones got in at someone else's expense; then
        # the shares are even and the rest are closed at once.
        share = DEFAULT_BUDGET // (len(first) + 1)
        for s in came[share:]:
            assert closed(s, timeout=10), "the budget is shared out, yet open"
        wait_for("the newcomer's share", lambda: held_from(pid, [newcomer]) == share)
        assert all(still_open(s, 0.1) for s in came[:share])
        counts = [held_from(pid, [a]) for a in first]
        assert sum(counts) + share == DEFAULT_BUDGET, counts
        assert min(counts) >= share and max(counts) <= share + 1, counts
        # Those closed for the newcomer were each address's oldest.
        gone = [s for s in held if not still_open(s, 0.1)]
        assert len(gone) == share
        elapsed = time.monotonic() - t0
        assert children(pid) == []
        log = daemon.log()
        lines = [line for line in log.splitlines()
                 if " at once: " in line or "still without a hello" in line]
        assert any("connection(s) from 127.0.0.2 wait for their hello already" in line
                   for line in lines), log[-3000:]
        assert any(f"for tcp:{newcomer}:" in line and "holds the most of it" in line
                   for line in lines), log[-3000:]
        assert any("32 connection(s) wait for their hello already (--max-unidentified)" in line
                   for line in lines), log[-3000:]
        # At most one line a second of each kind.
        assert len(lines) <= 3 * (1 + int(elapsed)), lines
        # Callers the channel names are not in that budget.
        alice = unix_session(daemon)
        assert alice.call("mem_alloc", size=4096)[0] == 0
        alice.close()
        # Room again once the silent ones go.
        close_all(held + came)
        wait_for("pvgpud to close what it held",
                 lambda: held_from(pid, first + [newcomer]) == 0)
        deadline = time.monotonic() + 20
        while True:
            try:
                bob = tcp_session(daemon, BOB_TOKEN)
                break
            except (EOFError, ConnectionError):
                assert time.monotonic() < deadline, daemon.log()[-3000:]
                time.sleep(0.1)
        assert bob.call("mem_alloc", size=4096)[0] == 0
        bob.close()
    finally:
        close_all(held)
        close_all(refused)
        close_all(came)


@pytest.mark.parametrize("args", [["--hello-timeout", "0"], ["--hello-timeout", "5x"],
                                  ["--hello-timeout", "3601"], ["--max-unidentified", "0"],
                                  ["--max-unidentified", "many"]])
def test_bad_budget_options_are_refused(args):
    def run(*more):
        return subprocess.run([str(PVGPUD), "--listen", "tcp://127.0.0.1:1", *more],
                              capture_output=True, text=True, timeout=30)

    # Good values pass (--executor help parses every option, then lists).
    res = run("--hello-timeout", "2.5", "--max-unidentified", "4", "--executor", "help")
    assert res.returncode == 0, res.stderr
    res = run("--executor", "sim", *args)
    assert res.returncode == 2, res.stderr
    # One line, naming the option.
    assert res.stderr.count("\n") == 1 and res.stderr.startswith(f"pvgpud: {args[0]}"), \
        res.stderr
