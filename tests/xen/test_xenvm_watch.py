"""The watch on a Xen boot's console (xenvm.silent_too_long): silence is
a hang once QEMU had the CPU to say something, or once it lasted far
longer than a starved guest needs; a guest the host starved is waited
for.  No Xen needed."""
import importlib.util
import os
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "xenvm", Path(__file__).resolve().parent / "xenvm.py")
xenvm = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(xenvm)


def test_silence_within_quiet_is_no_hang():
    assert not xenvm.silent_too_long(299, 299, 300)


def test_silence_with_the_cpu_to_speak_is_a_hang():
    assert xenvm.silent_too_long(301, 300 * xenvm.QUIET_CPU_SHARE, 300)


def test_a_starved_guest_is_waited_for():
    assert not xenvm.silent_too_long(900, 30, 300)


def test_a_silence_far_past_quiet_is_a_hang_whatever_the_cpu():
    assert xenvm.silent_too_long(300 * xenvm.QUIET_MAX_FACTOR + 1, 0, 300)


def test_unknown_cpu_falls_back_to_the_wall_clock():
    assert xenvm.silent_too_long(301, None, 300)


def test_no_watch_without_quiet():
    assert not xenvm.silent_too_long(10_000, 10_000, 0)


def test_cpu_seconds_of_this_process():
    spent = xenvm.cpu_seconds(os.getpid())
    assert spent is not None and spent >= 0
    assert xenvm.cpu_seconds(2 ** 22 + 12345) is None
