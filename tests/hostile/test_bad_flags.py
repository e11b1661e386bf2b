"""pvgpud refuses flags it cannot mean, as an operator would mistype them:
exit 2 (bad usage, DESIGN §8) and one line on stderr naming the flag,
before it touches anything.  Each case would, before, have started a
pvgpud that did something else than asked (or destroyed a file).
"""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from pvgpud_cli import assert_refused as refused, run_pvgpud  # noqa: E402


def run(args, cwd):
    return run_pvgpud(args, cwd=cwd)


def assert_refused(code, err, *said):
    """Bad usage: exit 2 (DESIGN §8) and one line naming the flag."""
    refused(code, err, 2, *said)


def test_listen_on_a_file_that_is_not_a_socket(short_tmp):
    conf = short_tmp / "pvgpud.conf"
    conf.write_text("[vm alice]\nuid = 1000\n")
    code, err = run(["--listen", f"unix://{conf}"], short_tmp)
    assert_refused(code, err, "--listen", str(conf), "not a socket")
    assert conf.read_text() == "[vm alice]\nuid = 1000\n"   # still there
    # shm:// is the same socket.
    code, err = run(["--listen", f"shm://{conf}"], short_tmp)
    assert_refused(code, err, "--listen", "not a socket")
    assert conf.exists()


def test_listen_on_a_relative_path(short_tmp):
    code, err = run(["--listen", "unix://pvgpu.sock"], short_tmp)
    assert_refused(code, err, "--listen unix://pvgpu.sock", "absolute")
    assert not (short_tmp / "pvgpu.sock").exists()


@pytest.mark.parametrize("port", ["99999", "65536", "-1", "http", "0x1c9c"])
def test_listen_on_a_port_that_is_none(short_tmp, port):
    code, err = run(["--listen", f"tcp://127.0.0.1:{port}"], short_tmp)
    assert_refused(code, err, f"--listen tcp://127.0.0.1:{port}", "0..65535")


@pytest.mark.parametrize("fd", ["9", "x", "70000"])
def test_a_ready_fd_that_is_none(short_tmp, fd):
    """A descriptor that is not open (9, here), or no number at all."""
    code, err = run(["--listen", f"unix://{short_tmp}/s.sock", "--ready-fd", fd], short_tmp)
    assert_refused(code, err, "--ready-fd", "open for writing")


def test_an_empty_tcp_token(short_tmp):
    code, err = run(["--listen", f"unix://{short_tmp}/s.sock", "--tcp-token", ""], short_tmp)
    assert_refused(code, err, "--tcp-token", "1..256")


@pytest.mark.parametrize("value,said", [
    ("1e-9", "decimal"),            # strtod: a limit that rounded to 0, no watchdog
    ("0x10", "decimal"),            # strtod: 16 s
    ("0.1", "resolution of 0.25 s"),  # under the watchdog's tick
])
def test_a_call_timeout_that_is_none(short_tmp, value, said):
    code, err = run(["--listen", f"unix://{short_tmp}/s.sock", "--call-timeout", value],
                    short_tmp)
    assert_refused(code, err, f"--call-timeout {value}", said)
