"""The front-ends' PVGPU_* variables (guest-lib/frontend/config_env.c): a
malformed or out-of-range value is ignored with a debug line naming it and
its range, a good one silently taken, and PVGPU_DEBUG is a 0/1 flag ("0"
or empty: off).  pvgpuctl reads them as every front-end does, so it shows
the lines without a daemon: the connection to an absent socket fails after.
"""
import os
import subprocess

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.join(REPO, os.environ.get("PVGPU_BUILD", "build"))
NOWHERE = "unix:///nonexistent/pvgpu.sock"


def config_lines(**env):
    """The lines pvgpuctl writes on stderr before it tries to connect."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("PVGPU_")}
    res = subprocess.run([os.path.join(BUILD, "bin", "pvgpuctl"), "devices", NOWHERE],
                         capture_output=True, text=True, timeout=30,
                         env=dict(clean, **env))
    assert res.returncode == 1, res.stdout + res.stderr
    lines = res.stderr.splitlines()
    assert lines and "/nonexistent/pvgpu.sock" in lines[-1], res.stderr
    return lines[:-1]


BAD = {"PVGPU_POLL_US": "-1", "PVGPU_WAIT_SPIN_US": "abc", "PVGPU_COPY_THREADS": "9",
       "PVGPU_STAGING_SLOTS": "65"}


def test_bad_values_are_ignored_with_a_line_naming_them():
    lines = config_lines(PVGPU_DEBUG="1", **BAD)
    assert lines == [
        "pvgpu: ignoring PVGPU_POLL_US=-1 (0 to 100000)",
        "pvgpu: ignoring PVGPU_WAIT_SPIN_US=abc (0 to 1000000)",
        "pvgpu: ignoring PVGPU_COPY_THREADS=9 (1 to 8)",
        "pvgpu: ignoring PVGPU_STAGING_SLOTS=65",
    ]


def test_good_values_are_taken_silently():
    assert config_lines(PVGPU_DEBUG="yes", PVGPU_POLL_US="100000", PVGPU_WAIT_SPIN_US="0",
                        PVGPU_COPY_THREADS="8", PVGPU_STAGING_SLOTS="64") == []


def test_debug_is_off_for_0_empty_or_unset():
    for debug in ({"PVGPU_DEBUG": "0"}, {"PVGPU_DEBUG": ""}, {}):
        assert config_lines(**debug, **BAD) == [], debug
