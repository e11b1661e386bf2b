"""What a guest (or a backend, to pvgpuctl) says reaches the operator
escaped: a newline in a hello's client string cannot write a line of
pvgpud's own, terminal escapes never reach the terminal, and bytes that
are not UTF-8 show as \\xNN (README, "Using it").

Each case is what a hostile guest would send: a raw hello, spoken with
tests/lib/pvgpu_wire.py.
"""
import os
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import pvgpu_wire as W  # noqa: E402
from pvgpu_sessions import SESSION_LINE, closed_by_backend, wait_live  # noqa: E402
from fake_metrics import FakeMetrics  # noqa: E402

BUILD = Path(__file__).resolve().parent.parent.parent / os.environ.get("PVGPU_BUILD", "build")
from curesult import CUDA_ERROR_NOT_SUPPORTED  # noqa: E402

# A complete session-end line, as pvgpud writes them, after a newline.
FORGED_END = ("2026-01-01T00:00:00.000Z pvgpud[1] info: session 1 end: uid=0,pid=1, "
              "vm -, 0.01 s, 0 calls, 0 B to device, 0 B from device, ok")
# Clear the screen, set the terminal's title, ring; then bytes that are not UTF-8.
TERMINAL = b"\x1b[2J\x1b]0;owned\x07\r"
NOT_UTF8 = b"\xff\xfe\xc0\xaf"
CLIENT = b"vecadd\n" + FORGED_END.encode() + b"\n" + TERMINAL + NOT_UTF8


def hello(daemon, **extra):
    s = W.Session(daemon.unix)
    fields = dict(version_min=1, version_max=W.P.VERSION, pid=os.getpid(),
                  token="", client=CLIENT)
    fields.update(extra)
    st = s.call("hello", **fields)[0]
    return s, st


def raw_log(daemon):
    return daemon.log_path.read_bytes()


def assert_escaped(daemon):
    raw = raw_log(daemon)
    # Nothing of the client string became a line, or a control, of its own.
    for line in raw.split(b"\n"):
        assert not line.startswith(FORGED_END[:24].encode()), raw
    for byte in (b"\x1b", b"\x07", b"\r", b"\xff", b"\xc0"):
        assert byte not in raw, (byte, raw)
    log = raw.decode()
    assert "vecadd\\x0a" + FORGED_END + "\\x0a\\x1b[2J\\x1b]0;owned\\x07\\x0d" \
        "\\xff\\xfe\\xc0\\xaf" in log, log
    # The forged end is inside pvgpud's own line, not a session's end.
    assert not re.search(r"(^|\n)\S+ pvgpud\[1\] info: session 1 end", log), log


def test_a_refused_hello_cannot_forge_a_line_at_the_packaged_level(start_pvgpud):
    # At info, as packaged: a hello that needs a feature the backend lacks
    # is refused with a warning that quotes the client string.
    daemon = start_pvgpud("sim", extra_args=["--log-level", "info"])
    s, st = hello(daemon, features=1, required=1 << 62)
    assert st == CUDA_ERROR_NOT_SUPPORTED
    assert closed_by_backend(s)
    wait_live(daemon)
    assert "needs feature bits" in daemon.log()
    # The supervisor's own lines: as many sessions ended as started, and
    # the forged "session 1 end" only inside the escaped warning.
    said = SESSION_LINE.findall(daemon.log())
    assert said.count("end") == said.count("start") > 0, daemon.log()
    assert_escaped(daemon)


def test_an_accepted_hello_is_logged_escaped_at_debug(start_pvgpud):
    daemon = start_pvgpud("sim")    # --log-level debug
    s, st = hello(daemon)
    assert st == 0
    s.close()
    wait_live(daemon)
    assert "hello from '" in daemon.log()
    assert_escaped(daemon)


def test_pvgpuctl_status_shows_names_escaped():
    # Label values may hold any byte but \, " and newline, which are escaped.
    vm = b"evil\\n\x1b[31mred\x1b[0m\xff"
    gpu = b"gpu\x1b]0;owned\x07"
    body = (b'pvgpu_gpu_info{gpu="0",name="' + gpu + b'"} 1\n'
            b'pvgpu_gpu_sessions{gpu="0"} 0\n'
            b'pvgpu_vm_sessions{vm="' + vm + b'"} 1\n'
            b"pvgpu_sampling_interval_seconds 1\n")
    with FakeMetrics(body) as srv:
        res = subprocess.run([str(BUILD / "bin" / "pvgpuctl"), "status", srv.addr],
                             capture_output=True, timeout=30)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    for byte in (b"\x1b", b"\x07", b"\xff"):
        assert byte not in out, out
    assert b"evil\\x0a\\x1b[31mred\\x1b[0m\\xff" in out, out
    assert b"gpu\\x1b]0;owned\\x07" in out, out
    # One line per VM: the newline in its name did not make two rows.
    assert out.count(b"evil") == 1 and b"\nred" not in out, out
