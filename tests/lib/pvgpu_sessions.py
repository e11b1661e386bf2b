"""Helpers the integration tests share around a running pvgpud (the
conftest's start_pvgpud daemons): a daemon with two VMs, raw sessions with
a context, and waiting for the daemon's log to show how many sessions are
live."""
import os
import re
import time

import pvgpu_wire as W


# "2026-...Z pvgpud[PID] info: session N start: ..." (or end).
SESSION_LINE = re.compile(r"^\S+ pvgpud\[\d+\] info: session \d+ (start|end): ", re.M)


def alice_and_bob(start_pvgpud, tmp_path, bob_token, alice_extra="",
                  extra_args=(), **kw):
    """pvgpud (sim) with a policy that refuses unknown callers: vm alice
    is this uid (Unix callers; alice_extra adds policy lines to it), vm
    bob presents bob_token (TCP).  kw goes to start_pvgpud (env=...)."""
    path = tmp_path / "pvgpud.conf"
    path.write_text(f"[default]\npolicy = refuse\n\n"
                    f"[vm alice]\nuid = {os.getuid()}\n{alice_extra}\n\n"
                    f"[vm bob]\ntoken = {bob_token}\n")
    return start_pvgpud("sim", extra_args=("--config", str(path), *extra_args),
                        **kw)


def hello_session(daemon, token=None, timeout=30):
    """A session that has said hello and holds no context yet: over the
    Unix socket, or over TCP presenting token."""
    s = W.Session(daemon.unix if token is None else daemon.tcp, timeout=timeout)
    if token is None:
        s.hello()
    else:
        s.hello(token=token)
    return s


def unix_session(daemon):
    """A session over the daemon's Unix socket, with a context current."""
    s = W.Session(daemon.unix)
    s.hello()
    s.open_context()
    return s


def tcp_session(daemon, token):
    """A session over TCP presenting token, with a context current."""
    s = W.Session(daemon.tcp)
    s.hello(token=token)
    s.open_context()
    return s


def closed_by_backend(s, timeout=5.0):
    """Whether pvgpud closes session s (within timeout seconds)."""
    s.sock.settimeout(timeout)
    try:
        return s.sock.recv(1) == b""
    except ConnectionResetError:
        return True


def wait_live(daemon, live=0, timeout=10.0):
    """Wait until the log shows exactly `live` sessions started and not yet
    ended."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        log = daemon.log()
        # The supervisor's own lines, not text a guest got into another
        # line (a client string is logged escaped, but whole).
        said = SESSION_LINE.findall(log)
        if said.count("start") - said.count("end") == live:
            return
        time.sleep(0.02)
    raise AssertionError(f"expected {live} live sessions:\n{daemon.log()}")


def worker_pid(daemon, session_id):
    """The pid of the worker serving session session_id (hello's
    session_id), from its session-start line (which the supervisor may
    write after the worker has answered the hello)."""
    pattern = r"session %d start: .*\(worker pid (\d+)\)" % session_id
    return int(re.search(pattern, daemon.wait_log(pattern)).group(1))
