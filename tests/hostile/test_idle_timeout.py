"""A session that does nothing does not hold its slot for ever (DESIGN §5).

A guest that connects, takes a context and then says nothing more, or
whose worker is stopped between calls, keeps a session slot and its VM's
quota.  With the policy key idle_timeout (default 0: never), pvgpud's
watchdog ends a session whose guest has sent nothing for that long while
none of its calls runs, with one log line, and the slot is free again.
Sessions that keep calling, and VMs without the key, are left alone.
Raw protocol calls, as a guest makes them.
"""
import os
import re
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import pvgpu_wire as W  # noqa: E402
from pvgpu_sessions import alice_and_bob, closed_by_backend, tcp_session, wait_live  # noqa: E402
from pvgpu_sessions import unix_session, worker_pid  # noqa: E402
from pvgpud_cli import assert_refused, run_pvgpud  # noqa: E402

BOB_TOKEN = "bob-idle-71c2"
IDLE = re.compile(r"session (\d+) \([^)]*, vm alice\): watchdog: nothing from the guest "
                  r"for (\d+\.\d) s, past the idle timeout of 1\.0 s; killing worker pid (\d+)")


def daemon_with_idle_alice(start_pvgpud, tmp_path, extra=""):
    daemon = alice_and_bob(start_pvgpud, tmp_path, BOB_TOKEN,
                           "idle_timeout = 1s\nmax_sessions = 1\n" + extra)
    wait_live(daemon)
    return daemon


def ended_idle(daemon, s, timeout=15.0):
    """Session s was closed by pvgpud for idleness: its session id."""
    assert closed_by_backend(s, timeout=timeout), daemon.log()
    wait_live(daemon, 1)                    # bob's is still there
    m = IDLE.search(daemon.log())
    assert m, daemon.log()
    assert float(m.group(2)) >= 1.0
    sid = int(m.group(1))
    assert re.search(rf"session {sid} end: .*worker killed by the watchdog \(idle timeout\)",
                     daemon.log()), daemon.log()
    return sid


def test_an_idle_session_gives_its_slot_back(start_pvgpud, tmp_path):
    daemon = daemon_with_idle_alice(start_pvgpud, tmp_path)
    bob = tcp_session(daemon, BOB_TOKEN)
    alice = unix_session(daemon)
    alice.alloc(1 << 20)
    # Her one slot is taken: another session of hers is refused.
    other = W.Session(daemon.unix)
    assert closed_by_backend(other), daemon.log()
    assert "max_sessions" in daemon.log()
    ended_idle(daemon, alice)
    # The slot is hers again; bob, whose VM sets no idle_timeout, stayed.
    again = unix_session(daemon)
    assert again.call("mem_get_info")[0] == 0
    assert bob.call("mem_get_info")[0] == 0
    again.close()
    bob.close()


def test_a_session_that_keeps_calling_is_not_idle(start_pvgpud, tmp_path):
    daemon = daemon_with_idle_alice(start_pvgpud, tmp_path)
    bob = tcp_session(daemon, BOB_TOKEN)
    alice = unix_session(daemon)
    end = time.monotonic() + 3.0
    while time.monotonic() < end:
        assert alice.call("mem_get_info")[0] == 0
        time.sleep(0.2)
    assert "idle timeout" not in daemon.log()
    alice.close()
    bob.close()


def test_a_stopped_worker_is_ended(start_pvgpud, tmp_path):
    daemon = daemon_with_idle_alice(start_pvgpud, tmp_path)
    bob = tcp_session(daemon, BOB_TOKEN)
    alice = W.Session(daemon.unix)
    sid = alice.hello()["session_id"]
    os.kill(worker_pid(daemon, sid), signal.SIGSTOP)
    assert ended_idle(daemon, alice) == sid
    bob.close()


def test_default_idle_timeout_holds_for_every_vm(start_pvgpud, tmp_path):
    path = tmp_path / "pvgpud.conf"
    path.write_text(f"[default]\npolicy = refuse\nidle_timeout = 1s\n\n"
                    f"[vm alice]\nuid = {os.getuid()}\n\n"
                    f"[vm bob]\ntoken = {BOB_TOKEN}\nidle_timeout = 0\n")
    daemon = start_pvgpud("sim", extra_args=("--config", str(path)))
    wait_live(daemon)
    bob = tcp_session(daemon, BOB_TOKEN)
    alice = unix_session(daemon)
    ended_idle(daemon, alice)
    assert bob.call("mem_get_info")[0] == 0
    bob.close()


def test_idle_timeout_is_checked(tmp_path):
    path = tmp_path / "bad.conf"
    sock = f"unix://{tmp_path}/s.sock"
    for value, said in (("100ms", "idle_timeout = 100ms is under the watchdog's resolution of 250ms"),
                        ("soon", "idle_timeout = soon is not a duration")):
        path.write_text(f"[vm alice]\nuid = 0\nidle_timeout = {value}\n")
        code, err = run_pvgpud(["--listen", sock, "--config", str(path)])
        assert_refused(code, err, 1, said)
