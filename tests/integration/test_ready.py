"""How pvgpud tells whoever started it that it listens: --ready-fd (every
test's daemon is started that way, tests/conftest.py) and systemd's
$NOTIFY_SOCKET (the package's unit is Type=notify).  The moment it says so,
each address it names takes a connection."""
import os
import re
import socket
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from pvgpud_cli import PVGPUD  # noqa: E402


def started(tmp, args, env=None, pass_fds=()):
    log = open(tmp / "pvgpud.log", "wb")
    proc = subprocess.Popen([str(PVGPUD), "--executor", "sim",
                             "--module-cache", str(tmp / "m"), *args],
                            stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                            env=dict(os.environ, **(env or {})), pass_fds=pass_fds)
    log.close()
    return proc


def stop(proc):
    proc.terminate()
    assert proc.wait(timeout=10) == 0


def connects(uri):
    if uri.startswith("tcp://"):
        host, port = uri[len("tcp://"):].rsplit(":", 1)
        family, addr = socket.AF_INET, (host, int(port))
    else:
        family, addr = socket.AF_UNIX, re.sub(r"^\w+://", "", uri)
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(addr)     # refused or absent: raises
    return True


def test_ready_fd_names_each_address_and_a_tcp_port_it_chose(short_tmp):
    r, w = os.pipe()
    proc = started(short_tmp, ["--listen", f"unix://{short_tmp}/s.sock",
                               "--listen", "tcp://127.0.0.1:0", "--ready-fd", str(w)],
                   pass_fds=(w,))
    os.close(w)
    try:
        with os.fdopen(r) as ready:
            lines = [ready.readline().rstrip("\n") for _ in range(3)]
            assert ready.read() == ""       # and closed after "ready"
        assert lines[0] == f"listening unix://{short_tmp}/s.sock"
        m = re.fullmatch(r"listening (tcp://127\.0\.0\.1:(\d+))", lines[1])
        assert m and int(m[2]) > 0, lines
        assert lines[2] == "ready"
        assert connects(lines[0].split()[1]) and connects(m[1])
        log = (short_tmp / "pvgpud.log").read_text()
        assert f"listening on {m[1]}\n" in log, log
    finally:
        stop(proc)


@pytest.mark.parametrize("abstract", [False, True], ids=["path", "abstract"])
def test_systemd_is_told_ready_once_it_listens(short_tmp, abstract):
    """sd_notify's protocol: one datagram READY=1 to $NOTIFY_SOCKET (a
    path, or an abstract name after '@'), sent when the socket takes
    connections."""
    name = f"@pvgpu-notify-{os.getpid()}" if abstract else str(short_tmp / "notify")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as ns:
        ns.bind("\0" + name[1:] if abstract else name)
        ns.settimeout(30)
        proc = started(short_tmp, ["--listen", f"unix://{short_tmp}/s.sock"],
                       env={"NOTIFY_SOCKET": name})
        try:
            msg = ns.recv(4096).decode()
            assert msg.splitlines()[0] == "READY=1", msg
            assert "STATUS=listening on 1 address(es)" in msg, msg
            assert connects(f"unix://{short_tmp}/s.sock")
        finally:
            stop(proc)
