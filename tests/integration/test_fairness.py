"""GPU time between VMs follows their weights (host-backend/daemon/gpusched.h).

Under the sim executor, sessions of several VMs run bench/pvgpu-fair, a loop
of launches whose CPU twin takes as long as the kernel would on a GPU,
sleeping, one launch at a time over all sessions (PVGPU_SIM_SERIAL, set by
scripts/fairness.py): a device that, like a GPU without MPS, runs one
kernel at a time and shares itself between whoever has work queued.
Without turns every VM gets the same share; any share that follows the
weights is the scheduler's doing.  These figures are about the scheduler's
logic only: the sim says nothing about a GPU's throughput (that is measured
on the H100 with scripts/fairness.py, BENCHMARKS.md).

Tolerances are wider than the H100 criterion (10 %): this runs on a busy
2-core machine where a worker can be descheduled for milliseconds.
"""
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent
BUILD = REPO / os.environ.get("PVGPU_BUILD", "build")
FAIR = BUILD / "bench" / "pvgpu-fair"
TWINS = BUILD / "tests" / "sim-twins" / "libbench-twins.so"
SCRIPT = REPO / "scripts" / "fairness.py"

# One launch: 132 blocks x 256 threads x ITERS x 4 FMAs at the twin's rate
# (25600 FMA/ns) is 1.0 ms.
BLOCKS = 132
ITERS = 190000
SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer",
                     "runtime error:")


def fairness(programs, workdir, *args, timeout=180):
    """scripts/fairness.py on the sim; its JSON report and pvgpud logs."""
    out = workdir / "report.json"
    cmd = [sys.executable, str(SCRIPT), "--executor", "sim", "--build", str(BUILD),
           "--blocks", str(BLOCKS), "--iters", str(ITERS), "--report-only",
           "--json", str(out), "--workdir", str(workdir), *args]
    # The sanitizer build's libcuda.so.1 needs its runtime preloaded in the
    # sessions.
    preload = programs.pvgpu_env("unix:///unused").get("LD_PRELOAD")
    if preload:
        cmd += ["--guest-env", f"LD_PRELOAD={preload}"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    logs = {p.name: p.read_text(errors="replace") for p in workdir.glob("pvgpud-*.log")}
    assert res.returncode == 0, f"{res.stdout}\n{res.stderr}\n" + \
        "\n".join(f"--- {n}\n{t[-3000:]}" for n, t in logs.items())
    for name, text in logs.items():
        for marker in SANITIZER_MARKERS:
            assert marker not in text, f"sanitizer report in {name}:\n{text[-5000:]}"
    return json.loads(out.read_text()), logs, res.stdout


def test_shares_follow_weights(programs, short_tmp):
    # Turns off and on by turns, three 2-second runs of each: a busy
    # machine (the VM suites beside this one) slows both alike.
    report, logs, out = fairness(programs, short_tmp, "--weights", "1,1,2,4",
                                 "--sessions-per-vm", "2", "--seconds", "2",
                                 "--baseline", "--rounds", "3", "--no-native")
    # Without turns, the device's own sharing: the same for every VM.
    for v in report["baseline"]["vms"]:
        assert abs(v["share"] - 0.25) <= 0.25 * 0.25, out
    # Turns keep the device busy: only gross throttling is caught here (a
    # fresh-clone make test, sanitizer build beside the VM suites at load
    # 10-40, read 0.896); how close to the device's own sharing the turns
    # come is measured on the GPU (BENCHMARKS.md, scripts/fairness.py).
    assert report["weighted"]["total_kernels"] >= \
        0.6 * report["baseline"]["total_kernels"], out
    vms = report["weighted"]["vms"]
    for v in vms:
        assert v["error"] <= 0.25, out
        # pvgpud's own account (struct pvgpu_slot.gpu_ns) agrees.
        assert abs(v["gpu_time_share"] - v["target"]) / v["target"] <= 0.25, out
    shares = [v["share"] for v in vms]
    assert shares[3] > 1.5 * shares[2] > 1.5 * 1.5 * max(shares[0], shares[1]), out
    for k in (1, 2, 3):
        assert "GPU turns between VMs: 10000 us per unit of weight" in \
            logs[f"pvgpud-weighted{k}.log"]
        assert "GPU turns between VMs: off" in logs[f"pvgpud-baseline{k}.log"]


def test_single_vm_is_not_throttled(programs, short_tmp):
    """Alone on the device a VM never waits for a turn and none of its
    launches is followed by a blocking event, so nothing holds it back; and
    it runs about as fast as with the turns switched off.

    The scheduler's own counts are the sharp check: they hold however busy
    the machine is.  The throughput check compares three alternating runs
    of each and only catches gross throttling (a VM made to wait for
    turns it does not need would lose about half): on a 2-core machine
    at load 15 the two sides of one run have differed by a quarter."""
    report, logs, out = fairness(programs, short_tmp, "--weights", "3",
                                 "--sessions-per-vm", "2", "--seconds", "1.5",
                                 "--baseline", "--rounds", "3")
    for k in (1, 2, 3):
        log = logs[f"pvgpud-weighted{k}.log"]
        lines = re.findall(r"scheduler: (\d+) launches, waited (\d+) times"
                           r".*\((\d+) blocking\)", log)
        assert len(lines) == 2, log
        assert all(int(n) > 0 and int(waits) == 0 and int(blocking) == 0
                   for n, waits, blocking in lines), lines
    alone = report["weighted"]["total_kernels"]
    off = report["baseline"]["total_kernels"]
    assert alone >= 0.6 * off, out


def test_a_worker_killed_in_its_turn_does_not_wedge_the_gpu(programs, start_pvgpud, tmp_path):
    """vm a's worker dies (SIGKILL) while its VM holds turns; vm b goes on
    and gets the GPU to itself."""
    conf = tmp_path / "policy.conf"
    conf.write_text(textwrap.dedent("""
        [default]
        policy = refuse
        [vm a]
        token = token-a
        weight = 4
        [vm b]
        token = token-b
        weight = 1
        """))
    daemon = start_pvgpud("sim", extra_args=["--config", str(conf)],
                          env={"PVGPU_SIM_TWINS": str(TWINS)})

    def session(token, seconds):
        env = programs.pvgpu_env(daemon.tcp)
        env["PVGPU_TOKEN"] = token
        return subprocess.Popen(
            [str(FAIR), "--json", "--seconds", str(seconds), "--blocks", str(BLOCKS),
             "--iters", str(ITERS)], env=env, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True)

    a = session("token-a", 30)
    b = session("token-b", 4)
    worker = None
    deadline = time.monotonic() + 20
    while worker is None and time.monotonic() < deadline:
        log = daemon.log()
        m = re.search(r"session (\d+): \S+ is vm a\b", log)
        if m:
            pid = re.search(rf"session {m.group(1)} start: .*\(worker pid (\d+)\)", log)
            worker = int(pid.group(1)) if pid else None
        time.sleep(0.05)
    assert worker, daemon.log()
    time.sleep(1.0)                 # both run, a mostly
    os.kill(worker, signal.SIGKILL)
    out, err = b.communicate(timeout=60)
    a.communicate(timeout=60)       # it lost its backend: fails, as it should
    assert b.returncode == 0, f"{out}\n{err}\n{daemon.log()[-3000:]}"
    r = json.loads(out.strip().splitlines()[-1])
    # b had about a fifth of the first second, then all of ~3 s at ~1 ms a launch.
    assert r["kernels"] >= 1000, (r, daemon.log()[-3000:])
    assert "killed by signal 9" in daemon.log()


def test_quantum_option_is_checked(programs):
    pvgpud = BUILD / "bin" / "pvgpud"
    res = subprocess.run([str(pvgpud), "--listen", "tcp://127.0.0.1:1",
                          "--executor", "sim", "--sched-quantum-us", "x"],
                         capture_output=True, text=True, timeout=10)
    assert res.returncode == 2
    assert "--sched-quantum-us must be 0..1000000" in res.stderr


SCHED_LINE = re.compile(r"session (\d+): scheduler: (\d+) launches, waited (\d+) times for a turn "
                        r"\(([\d.]+) ms in all\).*cut (\d+) turns of others short, "
                        r"had (\d+) turns cut short")


def latency_run(programs, start_pvgpud, tmp, priority, seconds=4.0):
    """Three VMs that keep the device busy and one, `lat` (of priority),
    that launches a short kernel, waits for it, and pauses 15 ms, like
    batch-1 decode.  Per VM: kernels run and the scheduler's figures of its
    session (launches, waits, wait ms, turns it cut short, turns it lost)."""
    busy = ("b1", "b2", "b3")
    conf = tmp / f"policy-{priority}.conf"
    text = "[default]\npolicy = refuse\n"
    for vm in busy:
        text += f"[vm {vm}]\ntoken = token-{vm}\n"
    text += f"[vm lat]\ntoken = token-lat\npriority = {priority}\n"
    conf.write_text(text)
    # 30 ms turns: a normal VM waiting for one waits a good part of one.
    daemon = start_pvgpud("sim", extra_args=["--config", str(conf),
                                             "--sched-quantum-us", "30000"],
                          env={"PVGPU_SIM_TWINS": str(TWINS),
                               "PVGPU_SIM_SERIAL": str(tmp / f"device-{priority}.lock")})

    def session(vm, *args):
        env = programs.pvgpu_env(daemon.tcp)
        env["PVGPU_TOKEN"] = f"token-{vm}"
        return subprocess.Popen(
            [str(FAIR), "--json", "--blocks", str(BLOCKS), *args], env=env,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    procs = {vm: session(vm, "--seconds", str(seconds + 1), "--iters", str(ITERS))
             for vm in busy}
    time.sleep(0.5)
    procs["lat"] = session("lat", "--seconds", str(seconds), "--queue", "1",
                           "--gap-ms", "15", "--iters", str(ITERS // 10))
    kernels = {}
    for vm, p in procs.items():
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, f"{vm}: {out}\n{err}\n{daemon.log()[-3000:]}"
        kernels[vm] = json.loads(out.strip().splitlines()[-1])["kernels"]
    # Each session's line comes when its worker ends, after its client.
    deadline = time.monotonic() + 60
    while len(SCHED_LINE.findall(daemon.log())) < 4 and time.monotonic() < deadline:
        time.sleep(0.1)
    log = daemon.log()
    vm_of = dict(re.findall(r"session (\d+): \S+ is vm (\w+)", log))
    figures = {vm_of[m[0]]: tuple(float(x) for x in m[1:]) for m in SCHED_LINE.findall(log)}
    assert set(figures) == {*busy, "lat"}, log[-3000:]
    return kernels, figures


def test_latency_vm_waits_less_and_starves_nobody(programs, start_pvgpud, short_tmp):
    """The sparse VM's mean wait for a turn, marked latency, is under half
    that of the same run with it marked normal (two runs on the same
    machine, compared with each other), and the busy VMs still share the
    device: each has at least half of its third.  Half, not a third: beside
    make test's sanitizer pass the two runs saw different loads, and the
    ratio came out at 2.7 (6.67 ms against 2.46)."""
    runs = {}
    for priority in ("normal", "latency"):
        runs[priority] = latency_run(programs, start_pvgpud, short_tmp, priority)
    mean = {}
    for priority, (kernels, figures) in runs.items():
        launches, waits, wait_ms, cut, lost = figures["lat"]
        assert launches >= 20 and waits >= 10, (priority, figures)
        mean[priority] = wait_ms / waits
        busy = [kernels[vm] for vm in ("b1", "b2", "b3")]
        for k in busy:
            assert k >= 0.5 * sum(busy) / 3, (priority, kernels)
    print(f"lat mean wait (ms): {mean}; figures: {runs}")
    assert mean["latency"] < mean["normal"] / 2, (mean, runs)
    # Who cut whose turns, as the session-end lines say.
    assert runs["normal"][1]["lat"][3] == 0, runs["normal"]
    assert runs["latency"][1]["lat"][3] > 0, runs["latency"]
    assert sum(runs["latency"][1][vm][4] for vm in ("b1", "b2", "b3")) > 0, runs["latency"]
    assert all(runs["normal"][1][vm][4] == 0 for vm in ("b1", "b2", "b3")), runs["normal"]
