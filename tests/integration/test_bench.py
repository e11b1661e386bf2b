"""Every benchmark runs for a few seconds through pvgpu against the simulated
device (with CPU twins of its kernels) and verifies the bytes it moved.  No
figure is judged here: the sim executor says nothing about performance
(those numbers come from a real GPU, see BENCHMARKS.md).

The benchmarks carry NVIDIA's runtime linked in (nvcc's default), so what
decides where they run is the libcuda.so.1 the loader finds: pvgpu's in
BUILD/lib, which pvgpu_env puts first."""
import json
import re
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent
BUILD = REPO / os.environ.get("PVGPU_BUILD", "build")
BENCH = BUILD / "bench"


def check_through_pvgpu(lib, libdir=BUILD / "lib"):
    """The run says it went through pvgpu's libcuda.so.1 from libdir, under
    NVIDIA's runtime linked into the benchmark."""
    assert lib["runtime"] == "static", lib
    assert lib["driver_pvgpu"], f"the benchmark did not load pvgpu's libcuda.so.1: {lib}"
    # The folder programs get it from may hold a link to it (pvgpu_env's).
    assert Path(lib["driver"]).resolve() == (Path(libdir) / "libcuda.so.1").resolve(), lib


def run_bench(programs, uri, daemon, name, *args, timeout=180):
    proc = subprocess.run([str(BENCH / name), "--json", *args],
                          env=programs.pvgpu_env(uri),
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, \
        f"{name} failed:\n{proc.stdout}\n{proc.stderr}\n{daemon.log()[-3000:]}"
    out = json.loads(proc.stdout)
    check_through_pvgpu(out["library"])
    return out


def test_runtime_is_linked_in():
    """The benchmarks need no libcudart.so.13 where they run: the runtime is
    in the executable, and only libcuda.so.1 is loaded (by the runtime)."""
    for name in ("pvgpu-bandwidth", "pvgpu-latency", "pvgpu-synth", "pvgpu-fair"):
        needed = subprocess.run(["readelf", "-d", str(BENCH / name)],
                                capture_output=True, text=True, check=True).stdout
        assert "libcudart" not in needed, (name, needed)


@pytest.mark.parametrize("scheme", ["unix", "shm"])
def test_bandwidth_through_pvgpu(programs, bench_daemon, scheme):
    uri = scheme + "://" + bench_daemon.unix[len("unix://"):]
    out = run_bench(programs, uri, bench_daemon, "pvgpu-bandwidth", "--quick",
                    "--socket-baseline")
    cells = out["results"]
    assert {(c["direction"], c["memory"]) for c in cells} == {
        ("h2d", "pinned"), ("d2h", "pinned"), ("h2d", "pageable"), ("d2h", "pageable")}
    assert all(c["verified"] for c in cells)


def check_round_trips(out):
    """pvgpu-latency counts the wire round trips of each test:
    one per synchronous copy (plus the few read-backs that verify H2D
    copies), one per launch + synchronize, none for a synchronize on an
    idle device (answered in the guest); none to record an event, one to
    ask after an event just recorded, none to ask after an idle stream
    already seen idle."""
    rt = {r["key"]: r["round_trips_per_op"] for r in out["results"]}
    assert rt["sync idle"] < 0.01, rt
    assert rt["event record"] < 0.05 and rt["stream query idle"] < 0.05, rt
    assert 0.99 < rt["event query"] < 1.05, rt
    assert 0.99 < rt["launch+sync"] < 1.05, rt
    copies = [v for k, v in rt.items() if k.startswith("copy ")]
    assert copies and all(0.99 < v < 1.05 for v in copies), rt


def check_wakeups(out, ring):
    """Over the control ring it also counts, per operation, the times the
    guest had to wake its worker and the times it slept itself (each costs
    microseconds: a test that has them shows them); over a socket there is
    no ring to count on."""
    for r in out["results"]:
        if not ring:
            assert "worker_wakeups_per_op" not in r, r
            continue
        woken, slept = r["worker_wakeups_per_op"], r["guest_sleeps_per_op"]
        # At most one wake-up or sleep per message sent and reply awaited
        # (a wait for room, for a reply, for the device's word).
        most = r["messages_per_op"] + r["round_trips_per_op"] + 1e-9
        assert 0 <= woken <= most and 0 <= slept <= most, r


@pytest.mark.parametrize("scheme", ["unix", "shm"])
def test_latency_through_pvgpu(programs, bench_daemon, scheme):
    uri = scheme + "://" + bench_daemon.unix[len("unix://"):]
    out = run_bench(programs, uri, bench_daemon, "pvgpu-latency", "--quick")
    check_round_trips(out)
    check_wakeups(out, ring=scheme == "shm")


@pytest.fixture
def native_stand_in(tmp_path, monkeypatch):
    """--compare's "native" folder without a GPU: a libcuda.so.1 link to
    pvgpu's, to the same sim daemon, which PVGPU_BENCH_NATIVE_IS_PVGPU=1
    lets the native run load (from that folder only)."""
    libcuda = BUILD / "lib" / "libcuda.so.1"
    assert libcuda.exists(), "libcuda.so.1 was not built (make all needs libclang)"
    (tmp_path / "libcuda.so.1").symlink_to(libcuda.resolve())
    monkeypatch.setenv("PVGPU_BENCH_NATIVE_IS_PVGPU", "1")
    return tmp_path


def test_synth_through_pvgpu(programs, bench_daemon):
    run_bench(programs, bench_daemon.unix, bench_daemon, "pvgpu-synth", "--quick",
              "--size", "1M-4M", "--dir", "both")


# ---- --compare, and --pairs N --------------------------------------------
#
# With no GPU here, --compare's "native" side is a second folder whose
# libcuda.so.1 links to pvgpu's, to the same sim daemon (native_stand_in);
# the runs are told apart by the folder each driver came from.

COMPARE_ARGS = {
    "pvgpu-latency": ["--quick", "--tests", "copy,sync", "--sizes", "1,64",
                      "--iters", "50"],
    "pvgpu-bandwidth": ["--quick", "--sizes", "4K,64K", "--reps", "2",
                        "--memory", "pinned"],
    # One configuration: the native child that calibrates takes ~10 s in
    # the sim (the FMA kernel's CPU twin); the replays are quick.
    "pvgpu-synth": ["--quick", "--size", "1M-2M", "--ratio", "10/90",
                    "--dir", "h2d", "--seconds", "0.05"],
}


def compare_proc(programs, daemon, native_dir, name, *args, timeout=300,
                 pvgpu_dir=BUILD / "lib"):
    env = programs.pvgpu_env("shm://" + daemon.unix[len("unix://"):])
    if "libasan" in env.get("LD_PRELOAD", ""):
        # The sanitizer build: NVIDIA's runtime, linked in, runs over it,
        # and a benchmark leaves CUDA objects to the end of the process as
        # programs do (tests/lib/pvgpu_asan.py does the same).
        env["ASAN_OPTIONS"] = "detect_leaks=0:allocator_may_return_null=1"
    return subprocess.run([str(BENCH / name), "--compare", "--native-libdir",
                           str(native_dir), "--pvgpu-libdir", str(pvgpu_dir),
                           *COMPARE_ARGS[name], *args],
                          env=env, capture_output=True, text=True, timeout=timeout)


def run_compare(programs, daemon, native_dir, name, *args, timeout=300):
    proc = compare_proc(programs, daemon, native_dir, name, *args, timeout=timeout)
    assert proc.returncode == 0, \
        f"{name} --compare failed:\n{proc.stdout}\n{proc.stderr}\n{daemon.log()[-3000:]}"
    return proc.stdout


def figure(run, key, field):
    """The child's figure, None where it has none (JSON null or absent)."""
    for r in run["results"]:
        if r["key"] == key:
            return r.get(field)
    return None


def median(values):
    v = sorted(values)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


@pytest.mark.parametrize("name", sorted(COMPARE_ARGS))
def test_compare_pairs_json(programs, bench_daemon, native_stand_in, name):
    """--compare --pairs 3: three native and three pvgpu children, run in the
    order native, pvgpu, pvgpu, native, native, pvgpu (each child reports its
    place and the times it started and reported); every figure compared is
    the median of its side's three children, with their min and max."""
    out = json.loads(run_compare(programs, bench_daemon, native_stand_in,
                                 name, "--pairs", "3", "--json"))
    nat, pv = out["native_runs"], out["pvgpu_runs"]
    assert out["pairs"] == 3 and len(nat) == 3 and len(pv) == 3
    assert out["native"] == nat[0] and out["pvgpu"] == pv[0]
    for r in nat:
        check_through_pvgpu(r["library"], native_stand_in)
    for r in pv:
        check_through_pvgpu(r["library"])
    assert [r["compare_run"] for r in nat] == [0, 3, 4]
    assert [r["compare_run"] for r in pv] == [1, 2, 5]
    ran = sorted([("native", r) for r in nat] + [("pvgpu", r) for r in pv],
                 key=lambda x: x[1]["started_monotonic_s"])
    assert [role for role, _ in ran] == \
        ["native", "pvgpu", "pvgpu", "native", "native", "pvgpu"]
    for (_, before), (_, after) in zip(ran, ran[1:]):
        assert before["reported_monotonic_s"] < after["started_monotonic_s"]

    if name == "pvgpu-synth":   # the first native run calibrates, the rest replay
        assert [r["calibrated_here"] for r in nat + pv] == [True] + [False] * 5

    assert out["comparison"]
    for c in out["comparison"]:
        for side, runs in (("native", nat), ("pvgpu", pv)):
            values = [figure(r, c["key"], c["field"]) for r in runs]
            values = [v for v in values if v is not None]
            if not values:
                assert c[side] is None, c
                continue
            assert c[side] == pytest.approx(median(values), rel=1e-8), (c, values)
            assert c[side + "_min"] == pytest.approx(min(values), rel=1e-8), c
            assert c[side + "_max"] == pytest.approx(max(values), rel=1e-8), c
        if c["native"] and c["pvgpu"] is not None:
            assert c["ratio"] == pytest.approx(c["pvgpu"] / c["native"], rel=1e-8)


def test_compare_pairs_table(programs, bench_daemon, native_stand_in):
    """The table says its figures are medians of alternating runs and shows
    each side's min..max; the round trips are the pvgpu runs' median."""
    text = run_compare(programs, bench_daemon, native_stand_in,
                       "pvgpu-latency", "--pairs", "3")
    lines = text.splitlines()
    assert lines[0] == ("pvgpu-latency --compare: medians of 3 alternating runs "
                        "each (native, pvgpu, pvgpu, native, native, pvgpu, ...)")
    head = next(l for l in lines if l.startswith("test "))
    assert "native min..max" in head and "pvgpu min..max" in head
    rows = [l for l in lines if l.startswith("copy ") and "median us" in l]
    assert rows and all(l.count("..") == 2 for l in rows), text
    assert "(pvgpu, per operation, median of the runs)" in text


def test_compare_one_pair_unchanged(programs, bench_daemon, native_stand_in):
    """Without --pairs, --compare is what it always was: one native child,
    then one pvgpu child, compared figure by figure, with nothing added."""
    out = json.loads(run_compare(programs, bench_daemon, native_stand_in,
                                 "pvgpu-latency", "--json"))
    assert not {"pairs", "native_runs", "pvgpu_runs"} & out.keys()
    for child in (out["native"], out["pvgpu"]):
        assert not {"compare_run", "started_monotonic_s"} & child.keys()
    for c in out["comparison"]:
        assert set(c) == {"key", "field", "native", "pvgpu", "ratio"}
        assert c["native"] == figure(out["native"], c["key"], c["field"])
        assert c["pvgpu"] == figure(out["pvgpu"], c["key"], c["field"])
    text = run_compare(programs, bench_daemon, native_stand_in, "pvgpu-latency")
    assert text.splitlines()[0] == "pvgpu-latency --compare"
    assert "min..max" not in text and "median of the runs" not in text


def test_compare_names_each_driver(programs, bench_daemon, native_stand_in):
    """The table says the runtime is the same and names the libcuda.so.1
    each side ran over; only that file differs between the two runs."""
    text = run_compare(programs, bench_daemon, native_stand_in, "pvgpu-latency")
    lines = text.splitlines()
    assert f"  native: libcuda.so.1 {native_stand_in}/libcuda.so.1 " \
        "(pvgpu's front-end)" in lines, text
    pv = next(l for l in lines if l.startswith("  pvgpu:  "))
    assert pv.startswith(f"  pvgpu:  libcuda.so.1 {BUILD / 'lib'}/libcuda.so.1 "
                         "(pvgpu's front-end) (PVGPU_DEVICES=shm://"), text


def test_compare_refuses_pvgpu_as_native(programs, bench_daemon, native_stand_in,
                                         monkeypatch):
    """A native run that loaded pvgpu's libcuda.so.1 compares pvgpu with
    itself: without PVGPU_BENCH_NATIVE_IS_PVGPU=1 it is refused, naming
    the file, and no table is printed."""
    monkeypatch.delenv("PVGPU_BENCH_NATIVE_IS_PVGPU")
    proc = compare_proc(programs, bench_daemon, native_stand_in, "pvgpu-latency")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"the native run loaded pvgpu's libcuda.so.1 {native_stand_in}/" \
        "libcuda.so.1, not NVIDIA's: check --native-libdir" in proc.stderr
    assert "pvgpu-latency --compare" not in proc.stdout


def test_compare_refuses_a_driver_from_elsewhere(programs, bench_daemon,
                                                 native_stand_in, tmp_path_factory):
    """The pvgpu run must load pvgpu's libcuda.so.1 from --pvgpu-libdir: one
    the loader passes over there (a 32-bit ELF file) and finds further
    down the path is refused, naming both."""
    odd = tmp_path_factory.mktemp("odd")
    (odd / "libcuda.so.1").write_bytes(b"\x7fELF\x01\x01\x01" + bytes(57))
    proc = compare_proc(programs, bench_daemon, native_stand_in, "pvgpu-latency",
                        pvgpu_dir=odd)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    m = re.search(r"the pvgpu run loaded libcuda\.so\.1 (\S+) \(pvgpu's front-end\), "
                  rf"not the one in --pvgpu-libdir {re.escape(str(odd))}", proc.stderr)
    assert m, proc.stderr
    # The one further down the path: pvgpu's, maybe by a link to it.
    assert Path(m[1]).resolve() == (BUILD / "lib" / "libcuda.so.1").resolve(), proc.stderr


@pytest.mark.parametrize("case", ["no-driver", "same-folder"])
def test_compare_libdir_usage(programs, native_stand_in, tmp_path_factory, case):
    """A --pvgpu-libdir without libcuda.so.1, or the same folder on both
    sides, is a usage error (exit 2) before any run."""
    empty = tmp_path_factory.mktemp("empty")
    pvgpu_dir, why = {
        "no-driver": (empty, f"--pvgpu-libdir {empty} has no libcuda.so.1"),
        "same-folder": (native_stand_in,
                        "--native-libdir and --pvgpu-libdir are the same folder"),
    }[case]
    env = programs.pvgpu_env("unix:///nonexistent")
    proc = subprocess.run([str(BENCH / "pvgpu-latency"), "--compare",
                           "--native-libdir", str(native_stand_in),
                           "--pvgpu-libdir", str(pvgpu_dir)],
                          env=env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert why in proc.stderr


# Turns each side holds: one at the start and one per turn point.  Latency:
# 9 tests of 50 iterations, a turn every 10 (4 each).  Bandwidth: 4 cells
# of 2 copies, a turn every copy (1 each).
INTERLEAVED = {
    "pvgpu-latency": (["--interleave", "10"], 1 + 9 * 4),
    "pvgpu-bandwidth": (["--interleave", "1"], 1 + 4 * 1),
}


@pytest.mark.parametrize("name", sorted(INTERLEAVED))
def test_compare_interleaved(programs, bench_daemon, native_stand_in, name):
    """--interleave N: each pair's native and pvgpu runs go at the same time
    and take turns, every N timed iterations: the turns each child reports
    never overlap, alternate between the two, number the same on both
    sides, and the native run holds the first turn in the first pair, the
    pvgpu run in the second.  The figures compared are the medians as with
    --pairs, and (latency) the untimed operations after each turn count in
    the round trips per operation."""
    args, turns_each = INTERLEAVED[name]
    out = json.loads(run_compare(programs, bench_daemon, native_stand_in,
                                 name, "--pairs", "2", *args, "--json"))
    assert out["interleave"] == int(args[1]) and out["pairs"] == 2
    nat, pv = out["native_runs"], out["pvgpu_runs"]
    assert len(nat) == len(pv) == 2
    for r in nat:
        check_through_pvgpu(r["library"], native_stand_in)
    for r in pv:
        check_through_pvgpu(r["library"])
    for p, first in ((0, "native"), (1, "pvgpu")):
        turns = sorted([(s, e, "native") for s, e in nat[p]["turns"]] +
                       [(s, e, "pvgpu") for s, e in pv[p]["turns"]])
        assert len(nat[p]["turns"]) == len(pv[p]["turns"]) == turns_each
        assert turns[0][2] == first
        for (s0, e0, who0), (s1, e1, who1) in zip(turns, turns[1:]):
            assert s0 <= e0 <= s1 <= e1, (p, turns)
            assert who0 != who1, (p, turns)
    assert out["comparison"]
    for c in out["comparison"]:
        values = [figure(r, c["key"], c["field"]) for r in pv]
        values = [v for v in values if v is not None]
        if values:
            assert c["pvgpu"] == pytest.approx(median(values), rel=1e-8)
    if name == "pvgpu-latency":
        for r in pv:
            assert figure(r, "copy h2d pinned 1B", "round_trips_per_op") == \
                pytest.approx(1.0, abs=0.05)
    text = run_compare(programs, bench_daemon, native_stand_in, name,
                       "--interleave", "25")
    assert text.splitlines()[0] == (f"{name} --compare: 1 pair of runs, "
                                    "each pair at once, taking turns on the GPU "
                                    "every 25 iterations")


@pytest.mark.parametrize("args,why", [
    (["--compare", "--pairs", "0"], "--pairs wants an integer from 1 to 50"),
    (["--compare", "--pairs", "51"], "--pairs wants an integer from 1 to 50"),
    (["--pairs", "3"], "--pairs only means something with --compare"),
])
@pytest.mark.parametrize("name", sorted(COMPARE_ARGS))
def test_pairs_usage(programs, name, args, why):
    """A bad --pairs is a usage error (exit 2), before any run; --help
    documents it."""
    env = programs.pvgpu_env("unix:///nonexistent")
    proc = subprocess.run([str(BENCH / name), *args], env=env,
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert why in proc.stderr
    if args == ["--pairs", "3"]:
        usage = subprocess.run([str(BENCH / name), "--help"], env=env,
                               capture_output=True, text=True, timeout=30)
        assert "--pairs N" in usage.stdout and "drift" in usage.stdout


@pytest.mark.parametrize("name", sorted(INTERLEAVED))
def test_interleave_usage(programs, name):
    """--interleave without --compare, or with no count, is a usage error."""
    env = programs.pvgpu_env("unix:///nonexistent")
    for args, why in ((["--interleave", "5"],
                       "--interleave only means something with --compare"),
                      (["--compare", "--interleave", "0"],
                       "--interleave wants an integer")):
        proc = subprocess.run([str(BENCH / name), *args], env=env,
                              capture_output=True, text=True, timeout=30)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert why in proc.stderr
