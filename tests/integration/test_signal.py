"""A synchronous call's completion written by the device itself (feature
`signal`: PVGPU_F_SIGNAL in protocol/wire.h, host-backend/session/signal.c,
the word in transport/ring.h), against `pvgpud --executor sim` over
shm:// (the control ring; the sim writes the word when the work it ran at
once is queued after).

Over the ring, pinned copies and synchronizes end when the word says so,
not on a second reply: both sides count those calls (the client's debug
line, the worker's at the session's end) and the counts agree.  What the
program sees must not change: results, device printf before the call
that synchronizes returns, a kernel's fault at the next synchronize.  Over
unix:// (no ring), or from a guest that withholds the feature or is told
not to ask for it (PVGPU_SIGNAL=0; a guest asks by default), no call ends
that way.
"""

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import pvgpu_wire as W  # noqa: E402

BENCH = (Path(__file__).resolve().parents[2] / os.environ.get("PVGPU_BUILD", "build")
         / "bench" / "pvgpu-bandwidth")

SIGNAL = 1 << W.P.FEATURES["signal"]
CLIENT_RE = re.compile(r"(\d+) calls ended on the device's signal")
WORKER_RE = re.compile(r"session (\d+): (\d+) of them ended on the device's signal")
END_RE = re.compile(r"session (\d+) end:")


def shm_uri(daemon):
    return "shm://" + daemon.unix[len("unix://"):]


def client_signals(res):
    """What the front-end's debug line at exit counted (one backend)."""
    found = CLIENT_RE.findall(res.stderr)
    assert len(found) == 1, res.stderr[-2000:]
    return int(found[0])


def worker_signals(daemon, sessions_before):
    """The worker's count for the one session that started after
    sessions_before ended sessions; 0 when it logged none.  Waits for
    that session's end line (the supervisor's, after the worker's own)."""
    deadline = time.monotonic() + 10
    while len(END_RE.findall(daemon.log())) <= sessions_before:
        assert time.monotonic() < deadline, daemon.log()[-4000:]
        time.sleep(0.05)
    session = END_RE.findall(daemon.log())[sessions_before]
    counts = [int(n) for s, n in WORKER_RE.findall(daemon.log()) if s == session]
    return counts[0] if counts else 0


def guest_env(programs, uri, **extra):
    """The guest as by default (it asks for the word), with libcuda.so.1's
    debug line that counts the calls ended on it."""
    env = programs.pvgpu_env(uri)
    env.pop("PVGPU_SIGNAL", None)
    env.update(PVGPU_DEBUG="1", **extra)
    return env


def run(programs, daemon, name, uri, **extra):
    """name (NVIDIA's runtime over pvgpu's libcuda.so.1; static/NAME with
    the runtime linked in): its transcript and the calls that ended on the
    word, counted by the guest and the worker."""
    env = guest_env(programs, uri, **extra)
    before = len(END_RE.findall(daemon.log()))
    res = programs.run(name, env)
    programs.assert_passed(res, daemon)
    return res, client_signals(res), worker_signals(daemon, before)


@pytest.mark.parametrize("name", ["memory", "streams", "copies"])
def test_copies_and_synchronizes_end_on_the_word(programs, sim_daemon, name):
    _res, guest, worker = run(programs, sim_daemon, name, shm_uri(sim_daemon))
    assert guest > 0
    assert worker == guest


@pytest.mark.parametrize("name", ["memory", "kernels/vecadd"])
def test_libcuda_counts_the_calls_ended_on_the_word(programs, twins_daemon, name):
    # With NVIDIA's runtime linked in (nvcc's default) the calls reach
    # libcuda.so.1 alike: its count agrees with the worker's.
    name = "static/" + name
    _res, guest, worker = run(programs, twins_daemon, name, shm_uri(twins_daemon))
    assert guest > 0
    assert worker == guest
    _res, none, worker = run(programs, twins_daemon, name, twins_daemon.unix)
    assert none == 0 and worker == 0


# vecadd/matmul: launches, then a synchronize or a copy back; callback: host
# functions between launches.
@pytest.mark.parametrize("name", ["vecadd", "matmul", "callback"])
def test_kernel_programs_end_on_the_word(programs, twins_daemon, name):
    prog = f"kernels/{name}"
    res, guest, worker = run(programs, twins_daemon, prog, shm_uri(twins_daemon))
    assert guest > 0 and worker == guest
    over_unix, none, _ = run(programs, twins_daemon, prog, twins_daemon.unix)
    assert none == 0
    assert res.stdout == over_unix.stdout


def test_non_blocking_streams_keep_the_context_synchronize_a_wait(programs, twins_daemon):
    # streams4 makes four cudaStreamNonBlocking streams, whose work the
    # legacy stream (where the word's write would queue) does not wait
    # for: its cudaDeviceSynchronize must wait as before.  Its other
    # waits are on events: no call of it ends on the word.
    res, guest, worker = run(programs, twins_daemon, "kernels/streams4",
                             shm_uri(twins_daemon))
    assert guest == 0 and worker == 0
    over_unix, _none, _ = run(programs, twins_daemon, "kernels/streams4", twins_daemon.unix)
    assert res.stdout == over_unix.stdout


def test_device_printf_still_comes_before_the_synchronize_returns(programs, twins_daemon):
    # Its module prints: a synchronize after its kernels waits for the
    # device output, as before, and the transcript interleaves as natively.
    res, _guest, _worker = run(programs, twins_daemon, "kernels/printf",
                               shm_uri(twins_daemon))
    over_unix, _none, _ = run(programs, twins_daemon, "kernels/printf", twins_daemon.unix)
    assert res.stdout == over_unix.stdout


def test_a_fault_still_surfaces_at_the_next_synchronize(programs, twins_daemon):
    res, _guest, _worker = run(programs, twins_daemon, "kernels/fault",
                               shm_uri(twins_daemon))
    assert "cudaErrorIllegalAddress" in res.stdout
    over_unix, _none, _ = run(programs, twins_daemon, "kernels/fault", twins_daemon.unix)
    assert res.stdout == over_unix.stdout


def agreed_features(daemon):
    agreed = re.findall(r"features (0x[0-9a-f]+) agreed", daemon.log())
    assert agreed, daemon.log()[-4000:]
    return int(agreed[-1], 16)


def test_on_by_default(programs, sim_daemon):
    _res, guest, worker = run(programs, sim_daemon, "memory", shm_uri(sim_daemon))
    assert guest > 0 and worker == guest
    assert agreed_features(sim_daemon) & SIGNAL


def test_off_when_the_guest_is_told_so(programs, sim_daemon):
    # PVGPU_SIGNAL=0: the guest does not offer the feature.
    _res, guest, worker = run(programs, sim_daemon, "memory", shm_uri(sim_daemon),
                              PVGPU_SIGNAL="0")
    assert guest == 0 and worker == 0
    assert not agreed_features(sim_daemon) & SIGNAL


def test_no_word_over_a_socket(programs, sim_daemon):
    _res, guest, worker = run(programs, sim_daemon, "memory", sim_daemon.unix)
    assert guest == 0 and worker == 0


def test_no_word_for_a_guest_that_withholds_the_feature(programs, sim_daemon):
    _res, guest, worker = run(programs, sim_daemon, "memory", shm_uri(sim_daemon),
                              PVGPU_WITHHOLD_FEATURES=str(SIGNAL))
    assert guest == 0 and worker == 0


def bandwidth_signals(programs, daemon, size, reps, memory="pinned"):
    """Synchronous copies of one size each way, through pvgpu-bandwidth:
    the calls that ended on the word, both sides."""
    env = guest_env(programs, shm_uri(daemon))
    before = len(END_RE.findall(daemon.log()))
    res = subprocess.run([str(BENCH), "--memory", memory, "--sizes", size,
                          "--reps", str(reps), "--json"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr[-3000:] + daemon.log()[-3000:]
    cells = json.loads(res.stdout)["results"]
    assert len(cells) == 2 and all(c["verified"] for c in cells), cells
    return client_signals(res), worker_signals(daemon, before)


def test_copies_of_every_size_end_on_the_word(programs, sim_daemon):
    # A pinned synchronous copy ends on the word at any size (the worker
    # watches the word as long as the guest does: signal.c), under and
    # over the staging slots' 4 MiB alike.
    reps = 6
    small, small_w = bandwidth_signals(programs, sim_daemon, "64K", reps)
    large, large_w = bandwidth_signals(programs, sim_daemon, "8M", reps)
    assert small == small_w and large == large_w
    assert small >= 2 * reps and large >= 2 * reps, (small, large)
    assert abs(small - large) < reps, (small, large)


def test_small_copies_into_pageable_memory_land_on_the_word(programs, sim_daemon):
    # Up to the landing's 1 KiB (transport/ring.h) a synchronous copy
    # from the device into pageable memory lands in the ring's first page
    # and ends on the word; above it (and below the staged copies' 64 KiB)
    # the bytes come in the reply.  The benchmark checks the bytes of both.
    # Copies the other way never end on the word.
    reps = 6
    small, small_w = bandwidth_signals(programs, sim_daemon, "1K", reps, "pageable")
    large, large_w = bandwidth_signals(programs, sim_daemon, "2K", reps, "pageable")
    assert small == small_w and large == large_w
    assert small - large >= reps, (small, large)


def test_a_worker_that_may_not_spin_still_ends_calls_on_the_word(programs, start_pvgpud):
    # --wait-spin-us 0: the worker watches the word no longer than its poll,
    # then sleeps, waking to look every 200 us; the guest, still spinning,
    # sees the word, and the copies end on it as before, every byte right.
    daemon = start_pvgpud("sim", ["--wait-spin-us", "0"])
    reps = 6
    guest, worker = bandwidth_signals(programs, daemon, "8M", reps)
    assert guest == worker and guest >= 2 * reps, (guest, worker)


def test_wait_spin_option_is_checked():
    pvgpud = BENCH.parents[1] / "bin" / "pvgpud"
    for bad in ("x", "-1", "10000001"):
        res = subprocess.run([str(pvgpud), "--listen", "tcp://127.0.0.1:1",
                              "--executor", "sim", "--wait-spin-us", bad],
                             capture_output=True, text=True, timeout=10)
        assert res.returncode == 2, (bad, res.stderr)
        assert "--wait-spin-us must be 0..10000000" in res.stderr, res.stderr


LATENCY = BENCH.parent / "pvgpu-latency"
SCHED_RE = re.compile(r"session (\d+): scheduler: (\d+) launches, .*, "
                      r"(\d+) events recorded to follow them \((\d+) blocking\)")
SLEPT_RE = re.compile(r"session (\d+): control ring: slept (\d+) times")


def test_a_synchronize_on_the_word_needs_no_event_to_follow_launches(programs, bench_daemon):
    # Launch + synchronize: the synchronize ends on the word, and that
    # tells the scheduler the launches before it are done; it records no
    # event per call to learn it -- only when the worker goes to sleep
    # before the word (here, on a busy machine) does it mark what is on the
    # device -- and none that is blocking while the session is alone on
    # its GPU (nothing waits on them).  On the GPU a blocking event is an
    # interrupt when it completes: one per call made any thread on the CPU
    # that takes the interrupts 15-20 us slower per call
    # (docs/benchmarks-history.md, 2026-11-28, night).
    iters = 2000
    env = guest_env(programs, shm_uri(bench_daemon))
    before = len(END_RE.findall(bench_daemon.log()))
    res = subprocess.run([str(LATENCY), "--tests", "launch", "--iters", str(iters), "--json"],
                         env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr[-3000:]
    assert client_signals(res) >= iters
    worker_signals(bench_daemon, before)          # waits for the session's end
    session = END_RE.findall(bench_daemon.log())[before]
    lines = [m for m in SCHED_RE.findall(bench_daemon.log()) if m[0] == session]
    assert len(lines) == 1, bench_daemon.log()[-3000:]
    launches, events, blocking = (int(x) for x in lines[0][1:])
    slept = [int(n) for sid, n in SLEPT_RE.findall(bench_daemon.log()) if sid == session]
    assert len(slept) == 1, bench_daemon.log()[-3000:]
    assert launches >= iters
    assert blocking == 0, lines
    assert events <= slept[0] + launches / 50, (lines, slept)
