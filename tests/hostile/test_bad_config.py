"""A policy file (--config) that cannot mean one thing is refused, naming
file:line and what is wrong: at start-up pvgpud exits 1 (as for any bad
policy line) with one line; on SIGHUP the line is logged and the policy
in force stays.  The files are an operator's likely mistakes.
"""
import os
import signal
import sys
import textwrap
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from pvgpu_sessions import unix_session, wait_live  # noqa: E402
from pvgpud_cli import PVGPUD, assert_refused as refused, run_pvgpud  # noqa: E402

UID = os.getuid()
# Two names alike in their first 46 characters, which inih kept of them.
LONG = "tenant-" + "0123456789" * 4


def start(config, tmp):
    """pvgpud with config as its policy: (exit code, stderr), or None for
    the code if it started."""
    return run_pvgpud(["--listen", f"unix://{tmp}/s.sock", "--config", str(config)])


def assert_refused(code, err, *said):
    """A bad policy file at start-up: exit 1, as for any bad policy line,
    and one line naming it."""
    refused(code, err, 1, *said)


FILES = {
    "duplicate": (f"""
        [vm alice]
        uid = {UID}
        memory = 1G

        [vm alice]
        memory = 64G
        """, ":6:", "[vm alice] again (first at line 2)"),
    "duplicate-spaced": (f"""
        [vm alice]
        uid = {UID}
        [vm  alice]
        memory = 64G
        """, ":4:", "again"),
    "long-names": (f"""
        [vm {LONG}a]
        uid = {UID}
        memory = 1G

        [vm {LONG}b]
        token = b-secret
        memory = 64G
        """, ":2:", "at most 46 characters"),
    # The tail of a long comment was read as a line of its own: uid = 0.
    "long-line": (f"""
        [vm alice]
        uid = {UID}
        ; {"x" * 197}uid = 0
        """, ":4:", "longer than the 197 bytes"),
    "no-sections": ("""
        ; pvgpud.conf: to be written
        """, "has no sections", ""),
    "empty": ("", "has no sections", ""),
    "zeros": (b"\0" * 4096, ":1:", "byte 0x00"),
    "call-timeout-hex": (f"""
        [vm alice]
        uid = {UID}
        call_timeout = 0x10
        """, ":4:", "call_timeout = 0x10 is not a duration"),
    "call-timeout-exponent": (f"""
        [default]
        call_timeout = 1e-9
        """, ":3:", "call_timeout = 1e-9 is not a duration"),
    "call-timeout-fine": (f"""
        [vm alice]
        uid = {UID}
        call_timeout = 100ms
        """, ":4:", "under the watchdog's resolution of 250ms"),
    "exclusive-wait-fine": (f"""
        [vm alice]
        uid = {UID}
        exclusive_wait = 0.1ms
        """, ":4:", "under the wait's resolution of 1ms"),
}


def write(path, text):
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(textwrap.dedent(text))


@pytest.mark.parametrize("name", sorted(FILES))
def test_a_policy_file_that_cannot_mean_one_thing(short_tmp, name):
    text, where, what = FILES[name]
    config = short_tmp / "pvgpud.conf"
    write(config, text)
    code, err = start(config, short_tmp)
    assert_refused(code, err, str(config), where, what)


def test_a_directory_or_a_binary_is_no_policy(short_tmp):
    code, err = start(short_tmp, short_tmp)
    assert_refused(code, err, f"{short_tmp} is a directory")
    code, err = start(PVGPUD, short_tmp)
    assert_refused(code, err, f"{PVGPUD}:1:", "a policy file is text")


def test_sighup_with_a_bad_file_keeps_the_policy_in_force(start_pvgpud, short_tmp):
    config = short_tmp / "pvgpud.conf"
    write(config, f"""
        [vm alice]
        uid = {UID}
        memory = 4M
        """)
    daemon = start_pvgpud("sim", extra_args=["--config", str(config)])
    wait_live(daemon)
    for name in ("duplicate", "long-names", "zeros"):
        text, where, what = FILES[name]
        write(config, text)
        before = daemon.log().count("not reloaded")
        daemon.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 5
        while daemon.log().count("not reloaded") == before and time.monotonic() < deadline:
            time.sleep(0.02)
        lines = [ln for ln in daemon.log().splitlines() if f"{config}{where}" in ln]
        assert lines and what in lines[-1], daemon.log()
        assert daemon.log().count("not reloaded") == before + 1, daemon.log()
        # alice is who she was, with her 4M.
        s = unix_session(daemon)
        st, _, out, _ = s.call("mem_get_info")
        assert st == 0 and out["total"] == 4 << 20, out
        s.close()
