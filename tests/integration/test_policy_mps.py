"""The policy's latency class and MPS sharing (host-backend/daemon/mps.h,
policy.h): each new key refused with file:line where it cannot mean one
thing, and the supervisor's MPS control daemon started, watched and
stopped, against a fake nvidia-cuda-mps-control that pvgpud finds first
on PATH and that writes down how it was run.
"""
import os
import re
import signal
import stat
import subprocess
import sys
import textwrap
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from pvgpu_sessions import hello_session, wait_live  # noqa: E402
from pvgpud_cli import assert_refused, run_pvgpud  # noqa: E402

UID = os.getuid()

FAKE_MPS = r"""#!/bin/sh
# A fake nvidia-cuda-mps-control: -f stays up as the daemon; without
# arguments it reads one command from stdin (quit stops the daemon).
case "$1" in
-f)
	echo "start pid=$$ visible=$CUDA_VISIBLE_DEVICES pipe=$CUDA_MPS_PIPE_DIRECTORY log=$CUDA_MPS_LOG_DIRECTORY" >>"$FAKE_MPS_RECORD"
	echo $$ >"$CUDA_MPS_PIPE_DIRECTORY/fake.pid"
	exec sleep 1000
	;;
"")
	read -r cmd
	echo "command $cmd pipe=$CUDA_MPS_PIPE_DIRECTORY" >>"$FAKE_MPS_RECORD"
	[ "$cmd" = quit ] && kill "$(cat "$CUDA_MPS_PIPE_DIRECTORY/fake.pid")"
	;;
esac
exit 0
"""


def start(config, tmp):
    return run_pvgpud(["--listen", f"unix://{tmp}/s.sock", "--config", str(config)])


def policy(tmp, text):
    path = tmp / "pvgpud.conf"
    path.write_text(textwrap.dedent(text))
    return path


GOOD = f"""
    [default]
    policy = refuse
    priority = latency
    mps_threads = 10

    [gpu 0]
    sharing = mps
    [gpu 1]
    sharing = time

    [vm alice]
    uid = {UID}
    gpus = 0
    priority = normal
    mps_threads = 100
    mps_pinned_memory = 1536M
    """


def test_good_keys_are_taken(short_tmp):
    code, err = start(policy(short_tmp, GOOD), short_tmp)
    assert code is None, err


BAD = {
    "priority": ("[vm alice]\nuid = 0\npriority = urgent\n", ":3:",
                 "priority = urgent: want latency or normal"),
    "priority-default": ("[default]\npriority = high\n", ":2:",
                         "priority = high: want latency or normal"),
    "threads-zero": ("[vm alice]\nuid = 0\nmps_threads = 0\n", ":3:",
                     "mps_threads = 0 is not 1..100"),
    "threads-over": ("[vm alice]\nuid = 0\n\nmps_threads = 101\n", ":4:",
                     "mps_threads = 101 is not 1..100"),
    "threads-percent": ("[default]\nmps_threads = 50%\n", ":2:",
                        "mps_threads = 50% is not 1..100"),
    "pinned-word": ("[vm alice]\nuid = 0\nmps_pinned_memory = lots\n", ":3:",
                    "mps_pinned_memory = lots is not a size of 1M or more"),
    "pinned-tiny": ("[vm alice]\nuid = 0\nmps_pinned_memory = 4K\n", ":3:",
                    "mps_pinned_memory = 4K is not a size of 1M or more"),
    "gpu-range": ("[gpu 16]\nsharing = mps\n", ":2:", "[gpu 16]: want a device index 0..15"),
    "gpu-word": ("[gpu first]\nsharing = mps\n", ":2:", "[gpu first]: want a device index"),
    "gpu-zeros": ("[gpu 00]\nsharing = mps\n", ":2:", "[gpu 00]: want a device index"),
    "gpu-sharing": ("[gpu 0]\nsharing = spatial\n", ":2:", "sharing = spatial: want time or mps"),
    "gpu-key": ("[gpu 0]\nsharing = mps\nmps_threads = 50\n", ":3:",
                "unknown key 'mps_threads' in [gpu 0]"),
    "gpu-twice": ("[gpu 1]\nsharing = mps\n[gpu 1]\nsharing = time\n", ":3:",
                  "[gpu 1] again (first at line 1)"),
    "vm-key": ("[vm alice]\nuid = 0\nsharing = mps\n", ":3:",
               "unknown key 'sharing' in [vm alice]"),
    # An MPS client reaches one server: a VM of an MPS GPU names it alone.
    "mps-vm-all-gpus": ("[gpu 0]\nsharing = mps\n\n[vm alice]\nuid = 0\n", ":4:",
                        "[vm alice] may use GPU 0, which shares by mps (line 2)"),
    "mps-vm-two-gpus": ("[vm alice]\nuid = 0\ngpus = 0,1\n[gpu 1]\nsharing = mps\n", ":1:",
                        "[vm alice] may use GPU 1"),
    "mps-default-allowed": ("[default]\npolicy = allow\n[gpu 0]\nsharing = mps\n", ":1:",
                            "[default] may use GPU 0"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_values_are_refused_with_their_line(short_tmp, name):
    text, where, what = BAD[name]
    path = short_tmp / "pvgpud.conf"
    path.write_text(text)
    code, err = start(path, short_tmp)
    assert_refused(code, err, 1, f"{path}{where}", what)


def fake_mps(short_tmp):
    """A directory holding the fake control program, and its record."""
    bindir = short_tmp / "bin"
    bindir.mkdir()
    prog = bindir / "nvidia-cuda-mps-control"
    prog.write_text(FAKE_MPS)
    prog.chmod(0o755)
    record = short_tmp / "mps-record"
    env = {"PATH": f"{bindir}:{os.environ['PATH']}", "TMPDIR": str(short_tmp),
           "FAKE_MPS_RECORD": str(record), "PVGPU_SIM_DEVICES": "2"}
    return env, record


def read(path):
    return path.read_text() if path.exists() else ""


def recorded(path, pattern, count, timeout=10.0):
    """The record's matches of pattern once there are count of them: the
    fake writes its line when it runs, which on a busy machine can be
    after pvgpud said it started it."""
    deadline = time.monotonic() + timeout
    while True:
        found = re.findall(pattern, read(path), re.M)
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.02)


MPS_POLICY = f"""
    [default]
    policy = refuse
    [gpu 0]
    sharing = mps
    [vm alice]
    uid = {UID}
    gpus = 0
    memory = 96M
    mps_threads = 30
    """


def test_mps_daemon_started_watched_and_quit(start_pvgpud, short_tmp):
    env, record = fake_mps(short_tmp)
    daemon = start_pvgpud("sim", extra_args=["--config", str(policy(short_tmp, MPS_POLICY))],
                          env=env)
    log = daemon.log()
    # Started once, for GPU 0 alone, before the first worker was forked.
    starts = recorded(record, r"^start pid=(\d+) visible=(\S*) pipe=(\S+) log=(\S+)$", 1)
    assert len(starts) == 1, read(record)
    pid, visible, pipe, logdir = starts[0]
    assert visible == "0"
    assert "mps: GPU 0: control daemon started" in log and " start: " not in log, log
    assert re.fullmatch(rf"{re.escape(str(short_tmp))}/pvgpud-mps\.\w{{6}}/gpu0/pipe", pipe)
    top = os.path.dirname(os.path.dirname(pipe))
    assert stat.S_IMODE(os.stat(top).st_mode) == 0o700
    assert os.path.isdir(logdir)

    # A worker of alice is a client of it, with her figures.
    s = hello_session(daemon)
    daemon.wait_log(r"MPS client: ")
    # The worker's line can come before the supervisor's session line.
    text = daemon.wait_log(r" start: ")
    assert text.index("mps: GPU 0: control daemon started") < text.index(" start: "), text
    line = [ln for ln in text.splitlines() if "MPS client: " in ln][-1]
    assert f"CUDA_MPS_PIPE_DIRECTORY={pipe} " in line, line
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30 " in line, line
    assert line.endswith("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=96M"), line
    s.close()

    # Killed, it is started again (after its backoff), and said so.
    os.kill(int(pid), signal.SIGKILL)
    daemon.wait_log(r"mps: GPU 0: control daemon \(pid %s\) died: killed by signal 9; "
                    r"restarting in" % pid)
    daemon.wait_log(r"mps: GPU 0: control daemon restarted")
    assert len(recorded(record, r"^start ", 2)) == 2, read(record)

    # Shutdown asks it to quit, with the same pipe directory.
    wait_live(daemon)
    assert daemon.stop() == 0
    assert recorded(record, rf"^command quit pipe={re.escape(pipe)}$", 1), read(record)
    assert len(re.findall(r"^start ", read(record), re.M)) == 2, read(record)
    assert "mps: GPU 0: control daemon" in daemon.log()
    assert "stopped (quit)" in daemon.log(), daemon.log()[-2000:]


def test_time_sharing_starts_nothing(start_pvgpud, short_tmp):
    env, record = fake_mps(short_tmp)
    daemon = start_pvgpud("sim", extra_args=[
        "--config", str(policy(short_tmp, MPS_POLICY.replace("sharing = mps",
                                                               "sharing = time")))],
        env=env)
    s = hello_session(daemon)
    s.close()
    wait_live(daemon)
    assert daemon.stop() == 0
    assert not record.exists(), read(record)
    assert "mps:" not in daemon.log() and "MPS client" not in daemon.log(), daemon.log()


def test_reload_makes_a_gpu_mps(start_pvgpud, short_tmp):
    """SIGHUP that turns GPU 0 to mps starts its daemon; sessions after it
    are its clients."""
    env, record = fake_mps(short_tmp)
    conf = policy(short_tmp, MPS_POLICY.replace("sharing = mps", "sharing = time"))
    daemon = start_pvgpud("sim", extra_args=["--config", str(conf)], env=env)
    assert not record.exists()
    policy(short_tmp, MPS_POLICY)
    daemon.proc.send_signal(signal.SIGHUP)
    daemon.wait_log(r"mps: GPU 0: control daemon started")
    s = hello_session(daemon)
    daemon.wait_log(r"MPS client: .*CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30 ")
    s.close()


SCHED_WAITS = re.compile(r"session \d+: scheduler: \d+ launches, waited (\d+) times for a turn")


@pytest.mark.parametrize("sharing", ["time", "mps"])
def test_vms_of_an_mps_gpu_take_no_turns(start_pvgpud, programs, short_tmp, sharing):
    """Two VMs keeping GPU 0 busy at once: with `sharing = time` each
    waits for its turns; on an MPS GPU nobody waits, since turns would
    let one VM's kernels through at a time, which MPS exists to undo."""
    env, _record = fake_mps(short_tmp)
    fair = programs.repo / os.environ.get("PVGPU_BUILD", "build") / "bench" / "pvgpu-fair"
    twins = fair.parent.parent / "tests" / "sim-twins" / "libbench-twins.so"
    env.update(PVGPU_SIM_TWINS=str(twins), PVGPU_SIM_SERIAL=str(short_tmp / "device.lock"))
    text = "[default]\npolicy = refuse\n[gpu 0]\nsharing = %s\n" % sharing
    for vm in ("v1", "v2"):
        text += f"[vm {vm}]\ntoken = token-{vm}\ngpus = 0\n"
    conf = short_tmp / "pvgpud.conf"
    conf.write_text(text)
    daemon = start_pvgpud("sim", extra_args=["--config", str(conf),
                                             "--sched-quantum-us", "5000"], env=env)
    procs = []
    for vm in ("v1", "v2"):
        penv = programs.pvgpu_env(daemon.tcp)
        penv["PVGPU_TOKEN"] = f"token-{vm}"
        procs.append(subprocess.Popen([str(fair), "--json", "--blocks", "132", "--seconds", "1.5",
                                       "--iters", "19000"], env=penv, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, f"{out}\n{err}\n{daemon.log()[-3000:]}"
    text = daemon.wait_log(r"(?s)(scheduler: .*){2}")
    waits = [int(w) for w in SCHED_WAITS.findall(text)]
    assert len(waits) == 2, text[-3000:]
    if sharing == "time":
        assert all(w > 0 for w in waits), text[-3000:]
    else:
        assert waits == [0, 0], text[-3000:]
