#!/usr/bin/env python3
"""GPU time between VMs by weight: measure it.

Starts pvgpud with a policy of one VM per weight (TCP tokens tell them
apart), runs --sessions-per-vm sessions of build/bench/pvgpu-fair per VM at
once through pvgpu's libcuda.so.1 (pvgpu-fair carries NVIDIA's runtime
linked in), each a compute-bound kernel loop for
--seconds, and compares each VM's share of the kernels completed (every
kernel is the same work, so that is its share of GPU time) with its share
of the weights.  Then runs the same total number of kernels in one native
process and compares throughput.

    scripts/fairness.py                       # the H100 acceptance run
    scripts/fairness.py --baseline            # also with turns off (the GPU's own slicing)
    scripts/fairness.py --baseline --rounds 3 # off and on by turns, three of each
    scripts/fairness.py --executor sim ...    # the scheduler's logic, no GPU

On the sim (a CI fixture) the kernel's CPU twin sleeps for as long as the
kernel would take on an H100 and, by default, one launch at a time over all
sessions, as on a GPU without MPS; the throughput reference there is one
session alone through pvgpu, since there is no native run.

Passes when every VM's share is within --tolerance (relative, default 10 %)
of its weight's share and throughput is at least --min-throughput (default
0.90) of native; --report-only prints the same and exits 0.  Exit status:
0 pass, 1 a criterion missed or a run failed, 2 bad usage.  Needs python3
only (no packages): it runs on the GPU host as it is.
"""
import argparse
import json
import os
import re
import selectors
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
START_TIMEOUT = 20.0
READY_TIMEOUT = 180.0


class Failure(Exception):
    """A run failed: one line for the user."""


def die_usage(msg):
    print(f"fairness.py: {msg} (try --help)", file=sys.stderr)
    sys.exit(2)


def parse_args(argv):
    ap = argparse.ArgumentParser(
        description="Measure GPU-time shares between VMs of different "
                    "weights through pvgpud, and throughput against native.")
    ap.add_argument("--build", default=str(REPO / "build"),
                    help="build tree (default: build/ of this repository)")
    ap.add_argument("--pvgpud", help="pvgpud binary (default BUILD/bin/pvgpud)")
    ap.add_argument("--bench", help="pvgpu-fair (default BUILD/bench/pvgpu-fair)")
    ap.add_argument("--pvgpu-libdir",
                    help="a folder holding pvgpu's libcuda.so.1 (default BUILD/lib)")
    ap.add_argument("--native-libdir",
                    help="a folder holding NVIDIA's libcuda.so.1 (default: "
                         "where the loader finds the system's)")
    ap.add_argument("--executor", choices=("cuda", "sim"), default="cuda")
    ap.add_argument("--twins", help="sim only: CPU twins (default "
                    "BUILD/tests/sim-twins/libbench-twins.so)")
    ap.add_argument("--sim-parallel", action="store_true",
                    help="sim only: let the simulated device run every launch at "
                         "once (default: one at a time, as a GPU without MPS)")
    ap.add_argument("--weights", default="1,1,2,4",
                    help="one VM per weight (default 1,1,2,4)")
    ap.add_argument("--sessions-per-vm", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=20.0,
                    help="length of the timed loop (default 20)")
    ap.add_argument("--kernel-ms", type=float, default=1.5,
                    help="one launch, calibrated natively (default 1.5)")
    ap.add_argument("--iters", type=int, help="skip calibration: kernel loop count")
    ap.add_argument("--blocks", type=int, help="grid size (default: one full wave)")
    ap.add_argument("--queue", type=int, default=4,
                    help="launches each session keeps queued (default 4)")
    ap.add_argument("--quantum-us", type=int,
                    help="pvgpud --sched-quantum-us (default: pvgpud's)")
    ap.add_argument("--baseline", action="store_true",
                    help="also run with turns off (--sched-quantum-us 0): "
                         "what the GPU's own time slicing gives; not judged")
    ap.add_argument("--rounds", type=int, default=1,
                    help="with --baseline: runs of each, by turns (turns off, "
                         "on, off, ...), added up; a machine whose speed drifts "
                         "then slows both alike (default 1)")
    ap.add_argument("--no-native", action="store_true",
                    help="skip the same-work reference run (no throughput figure); "
                         "on the sim that run is one session through pvgpu")
    ap.add_argument("--tolerance", type=float, default=0.10,
                    help="largest relative share error (default 0.10)")
    ap.add_argument("--min-throughput", type=float, default=0.90,
                    help="smallest pvgpu/native throughput (default 0.90)")
    ap.add_argument("--report-only", action="store_true",
                    help="print the figures, exit 0 whatever they are")
    ap.add_argument("--json", help="also write every figure to this file")
    ap.add_argument("--workdir", help="keep the policy, logs and outputs here")
    ap.add_argument("--guest-env", action="append", default=[],
                    metavar="NAME=VALUE",
                    help="extra environment for the sessions (repeatable)")
    a = ap.parse_args(argv)
    try:
        a.weight_list = [int(w) for w in a.weights.split(",")]
    except ValueError:
        die_usage(f"--weights {a.weights}: want integers like 1,1,2,4")
    if not a.weight_list or min(a.weight_list) < 1 or len(a.weight_list) > 64:
        die_usage("--weights: 1..64 weights, each at least 1")
    if a.rounds < 1:
        die_usage("--rounds must be at least 1")
    if a.rounds > 1 and not a.baseline:
        die_usage("--rounds: runs by turns need --baseline (turns off) to take turns with")
    if a.sessions_per_vm < 1 or a.seconds <= 0 or a.queue < 1:
        die_usage("--sessions-per-vm, --seconds and --queue must be positive")
    for kv in a.guest_env:
        if "=" not in kv:
            die_usage(f"--guest-env {kv}: want NAME=VALUE")
    build = Path(a.build)
    a.pvgpud = Path(a.pvgpud or build / "bin" / "pvgpud")
    a.bench = Path(a.bench or build / "bench" / "pvgpu-fair")
    a.pvgpu_libdir = Path(a.pvgpu_libdir or build / "lib")
    a.twins = Path(a.twins or build / "tests" / "sim-twins" / "libbench-twins.so")
    for p in (a.pvgpud, a.bench, a.pvgpu_libdir / "libcuda.so.1"):
        if not p.exists():
            die_usage(f"{p} does not exist (run `make all`)")
    if a.executor == "sim":
        if not a.twins.exists():
            die_usage(f"{a.twins} does not exist (run `make all`)")
    return a


def base_env():
    env = dict(os.environ)
    for var in ("PVGPU_DEVICES", "PVGPU_TOKEN", "LD_LIBRARY_PATH"):
        env.pop(var, None)
    return env


def with_libdir(env, libdir):
    """Where the benchmark's runtime finds libcuda.so.1: libdir, or (None)
    wherever the loader finds the system's."""
    if libdir:
        env["LD_LIBRARY_PATH"] = str(libdir)
    return env


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def vm_names(args):
    return [f"vm{i + 1}" for i in range(len(args.weight_list))]


def token(name):
    return f"fairness-{name}-token"


def write_policy(path, args):
    lines = ["[default]", "policy = refuse", ""]
    for name, w in zip(vm_names(args), args.weight_list):
        lines += [f"[vm {name}]", f"token = {token(name)}", f"weight = {w}",
                  f"max_sessions = {args.sessions_per_vm + 2}", ""]
    path.write_text("\n".join(lines))


class Daemon:
    def __init__(self, args, workdir, tag, quantum_us):
        self.port = free_port()
        self.log_path = workdir / f"pvgpud-{tag}.log"
        conf = workdir / "policy.conf"
        write_policy(conf, args)
        cmd = [str(args.pvgpud), "--listen", f"tcp://127.0.0.1:{self.port}",
               "--executor", args.executor, "--config", str(conf),
               "--log-level", "info", "--module-cache", str(workdir / "modules")]
        if quantum_us is not None:
            cmd += ["--sched-quantum-us", str(quantum_us)]
        env = base_env()
        if args.executor == "sim":
            env["PVGPU_SIM_TWINS"] = str(args.twins)
            if not args.sim_parallel:
                # One kernel at a time over all workers (bench_twins.c).
                env["PVGPU_SIM_SERIAL"] = str(workdir / "sim-device.lock")
        self.log_file = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL,
                                     stdout=self.log_file,
                                     stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                log = self.log()
                if "without inih" in log:
                    raise Failure("this pvgpud was built without inih (no libinih-dev "
                                  "when it was built), so it cannot read the policy "
                                  "that gives the VMs their weights")
                raise Failure(f"pvgpud exited with {self.proc.returncode}:\n{log[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), 1.0):
                    return
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise Failure(f"pvgpud did not listen within {START_TIMEOUT:.0f} s")

    @property
    def uri(self):
        return f"tcp://127.0.0.1:{self.port}"

    def log(self):
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self):
        """SIGTERM; its exit code, None if it had to be killed."""
        code = self.proc.poll()
        if code is None:
            self.proc.terminate()
            try:
                code = self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if not self.log_file.closed:
            self.log_file.close()
        return code


def run_json(cmd, env, what, timeout):
    res = subprocess.run(cmd, env=env, capture_output=True, text=True,
                         timeout=timeout)
    if res.returncode != 0:
        raise Failure(f"{what} failed (exit {res.returncode}): "
                      f"{(res.stderr or res.stdout).strip()[-1500:]}")
    try:
        return json.loads(res.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise Failure(f"{what} printed no JSON: {res.stdout[-500:]}")


def calibrate(args, workdir):
    """Kernel loop count and grid for one launch of --kernel-ms: natively
    for cuda, through a single pvgpu session for the sim."""
    cmd = [str(args.bench), "--calibrate", "--json", "--kernel-ms",
           str(args.kernel_ms)]
    if args.blocks:
        cmd += ["--blocks", str(args.blocks)]
    if args.executor == "cuda":
        if args.no_native:
            raise Failure("--no-native needs --iters (calibration is native)")
        return run_json(cmd, with_libdir(base_env(), args.native_libdir),
                        "native calibration", 300)
    daemon = Daemon(args, workdir, "calibrate", args.quantum_us)
    try:
        env = guest_env(args, daemon, vm_names(args)[0])
        return run_json(cmd, env, "calibration through pvgpu", 300)
    finally:
        daemon.stop()


def guest_env(args, daemon, vm):
    env = with_libdir(base_env(), args.pvgpu_libdir)
    env["PVGPU_DEVICES"] = daemon.uri
    env["PVGPU_TOKEN"] = token(vm)
    for kv in args.guest_env:
        k, v = kv.split("=", 1)
        env[k] = v
    return env


def run_sessions(args, workdir, tag, quantum_us):
    """All sessions at once; returns (per-session results, daemon log)."""
    daemon = Daemon(args, workdir, tag, quantum_us)
    procs = []
    try:
        for vm in vm_names(args):
            for k in range(args.sessions_per_vm):
                errf = open(workdir / f"{tag}-{vm}-{k}.stderr", "wb")
                cmd = [str(args.bench), "--wait-go", "--json", "--label", vm,
                       "--seconds", str(args.seconds), "--iters", str(args.iters),
                       "--blocks", str(args.blocks), "--queue", str(args.queue)]
                p = subprocess.Popen(cmd, env=guest_env(args, daemon, vm),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=errf)
                procs.append((vm, k, p, errf))
        # Everybody warms up (context, module) before anybody starts its clock.
        sel = selectors.DefaultSelector()
        for entry in procs:
            sel.register(entry[2].stdout, selectors.EVENT_READ, entry)
        waiting = len(procs)
        deadline = time.monotonic() + READY_TIMEOUT
        while waiting:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Failure(f"{waiting} session(s) not ready within {READY_TIMEOUT:.0f} s")
            for key, _ in sel.select(timeout=left):
                vm, k, p, _ = key.data
                line = p.stdout.readline()
                sel.unregister(p.stdout)
                waiting -= 1
                if line.strip() != b"ready":
                    p.wait()
                    raise Failure(f"session {vm}/{k} did not start: "
                                  f"{session_error(workdir, tag, vm, k)}")
        for _, _, p, _ in procs:
            p.stdin.write(b"go\n")
            p.stdin.flush()
        results = []
        for vm, k, p, errf in procs:
            out, _ = p.communicate(timeout=args.seconds + 300)
            errf.close()
            if p.returncode != 0:
                raise Failure(f"session {vm}/{k} failed (exit {p.returncode}): "
                              f"{session_error(workdir, tag, vm, k)}")
            r = json.loads(out.decode().strip().splitlines()[-1])
            if not r["library"]["driver_pvgpu"]:
                raise Failure(f"session {vm}/{k} did not load pvgpu's libcuda.so.1 "
                              f"(it loaded {r['library']['driver']}): check --pvgpu-libdir")
            r["vm"] = vm
            results.append(r)
        # The sessions' workers log their GPU time as they end, which on a
        # GPU takes a moment after the program exits (the context goes):
        # stopping pvgpud before then would kill them unheard.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            log = daemon.log()
            if log.count(" start: ") == log.count(" end: "):
                break
            time.sleep(0.1)
        code = daemon.stop()
        if code != 0:
            raise Failure(f"pvgpud exited with {code} after SIGTERM, not 0 "
                          f"(log: {daemon.log_path})")
        return results, daemon
    finally:
        for _, _, p, errf in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
            errf.close()
        daemon.stop()


def session_error(workdir, tag, vm, k):
    try:
        text = (workdir / f"{tag}-{vm}-{k}.stderr").read_text(errors="replace")
    except FileNotFoundError:
        text = ""
    return text.strip()[-800:] or "(no message)"


def gpu_time_from_log(log):
    """Per VM, the GPU time pvgpud accounted (struct pvgpu_slot.gpu_ns, as
    each session logged it at its end), seconds."""
    vm_of = {}
    for m in re.finditer(r"session (\d+) start: .* vm (\S+) ", log):
        vm_of[m.group(1)] = m.group(2)
    for m in re.finditer(r"session (\d+): \S+ is vm (\S+)", log):
        vm_of[m.group(1)] = m.group(2)
    out = {}
    for m in re.finditer(r"session (\d+): scheduler: .*GPU time ([0-9.]+) ms", log):
        vm = vm_of.get(m.group(1))
        if vm:
            out[vm] = out.get(vm, 0.0) + float(m.group(2)) / 1e3
    return out


def summarize(args, results, daemon_logs, seconds):
    """Figures of one setting over its runs (results and daemon logs of
    each, seconds in all)."""
    names = vm_names(args)
    total_w = sum(args.weight_list)
    kernels = {vm: 0 for vm in names}
    for r in results:
        kernels[r["vm"]] += r["kernels"]
    total = sum(kernels.values())
    gpu = {}
    for log in daemon_logs:         # session numbers start again in each
        for vm, t in gpu_time_from_log(log).items():
            gpu[vm] = gpu.get(vm, 0.0) + t
    gpu_total = sum(gpu.get(vm, 0.0) for vm in names)
    vms = []
    for vm, w in zip(names, args.weight_list):
        want = w / total_w
        share = kernels[vm] / total if total else 0.0
        vms.append({
            "vm": vm, "weight": w, "sessions": args.sessions_per_vm,
            "kernels": kernels[vm], "share": share, "target": want,
            "error": abs(share - want) / want,
            "gpu_time_s": gpu.get(vm),
            "gpu_time_share": gpu.get(vm, 0.0) / gpu_total if gpu_total else None,
        })
    return {"total_kernels": total, "vms": vms,
            "max_error": max(v["error"] for v in vms),
            "throughput_kernels_per_s": total / seconds, "seconds": seconds,
            "sessions": results}


def print_run(title, args, s):
    print(f"\n{title}")
    print(f"  {'vm':<6} {'weight':>6} {'kernels':>9} {'share':>8} {'target':>8} "
          f"{'error':>7} {'gpu_ns share':>12}")
    for v in s["vms"]:
        g = v["gpu_time_share"]
        print(f"  {v['vm']:<6} {v['weight']:>6} {v['kernels']:>9} "
              f"{v['share'] * 100:>7.2f}% {v['target'] * 100:>7.2f}% "
              f"{v['error'] * 100:>6.1f}% {'' if g is None else f'{g * 100:.2f}%':>12}")
    print(f"  {s['total_kernels']} kernels in {s['seconds']:g} s: "
          f"{s['throughput_kernels_per_s']:.1f} kernels/s; largest share error "
          f"{s['max_error'] * 100:.1f}%")


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    keep = bool(args.workdir)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="pvgpu-fair-"))
    workdir.mkdir(parents=True, exist_ok=True)
    report = {"executor": args.executor, "weights": args.weight_list,
              "sessions_per_vm": args.sessions_per_vm, "seconds": args.seconds,
              "quantum_us": args.quantum_us, "queue": args.queue}
    ok = True
    try:
        if args.iters is None or args.blocks is None:
            cal = calibrate(args, workdir)
            args.iters = args.iters or cal["iters"]
            args.blocks = args.blocks or cal["blocks"]
            report["calibration"] = cal
            print(f"calibrated: --iters {args.iters} --blocks {args.blocks}: "
                  f"{cal['kernel_ms']:.3f} ms per launch ({cal['device']['name']})")
        report.update(iters=args.iters, blocks=args.blocks)
        print(f"{len(args.weight_list)} VMs x {args.sessions_per_vm} sessions, "
              f"weights {args.weights}, {args.seconds:g} s, executor {args.executor}")

        settings = ([("baseline", 0)] if args.baseline else []) + \
            [("weighted", args.quantum_us)]
        runs = {tag: ([], []) for tag, _ in settings}
        for r in range(args.rounds):
            for tag, quantum in settings:
                name = tag if args.rounds == 1 else f"{tag}{r + 1}"
                res, d = run_sessions(args, workdir, name, quantum)
                runs[tag][0].extend(res)
                runs[tag][1].append(d.log())
        seconds = args.seconds * args.rounds
        if args.baseline:
            base = summarize(args, *runs["baseline"], seconds)
            report["baseline"] = base
            print_run("turns off (--sched-quantum-us 0): the GPU's own time slicing", args, base)

        fair = summarize(args, *runs["weighted"], seconds)
        report["weighted"] = fair
        print_run("turns by weight" + (f" (--sched-quantum-us {args.quantum_us})"
                                       if args.quantum_us is not None else ""), args, fair)
        shares_ok = fair["max_error"] <= args.tolerance
        print(f"  shares within {args.tolerance * 100:g}% of the weights: "
              f"{'yes' if shares_ok else 'NO'}")
        ok = ok and shares_ok

        if not args.no_native:
            total = fair["total_kernels"]
            cmd = [str(args.bench), "--json", "--count", str(total),
                   "--iters", str(args.iters), "--blocks", str(args.blocks),
                   "--queue", str(args.queue)]
            if args.executor == "cuda":
                what = "native, one process"
                ref = run_json(cmd, with_libdir(base_env(), args.native_libdir),
                               "the native run", args.seconds * 10 + 300)
                if ref["library"]["driver_pvgpu"]:
                    raise Failure(f"the native run loaded pvgpu's libcuda.so.1 "
                                  f"{ref['library']['driver']}: check --native-libdir")
            else:
                # No native on the sim: the reference is one session alone.
                what = "one session alone through pvgpu (the sim has no native)"
                daemon = Daemon(args, workdir, "reference", args.quantum_us)
                try:
                    ref = run_json(cmd, guest_env(args, daemon, vm_names(args)[0]),
                                   "the reference run", args.seconds * 10 + 300)
                finally:
                    daemon.stop()
            ref_rate = ref["kernels"] / ref["seconds"]
            ratio = fair["throughput_kernels_per_s"] / ref_rate
            # Device busy: kernels x one kernel's time alone, over the window.
            kernel_s = ref["event_kernel_s"] / ref["kernels_total"]
            report["native" if args.executor == "cuda" else "reference"] = ref
            report["throughput_ratio"] = ratio
            report["kernel_s"] = kernel_s
            for key in ("weighted", "baseline"):
                if key in report:
                    report[key]["device_busy"] = \
                        report[key]["total_kernels"] * kernel_s / report[key]["seconds"]
            tp_ok = ratio >= args.min_throughput
            print(f"\n{what}, the same {total} kernels: {ref['seconds']:.3f} s, "
                  f"{ref_rate:.1f} kernels/s, {kernel_s * 1e3:.3f} ms per kernel")
            print(f"  aggregate throughput of the sessions: {ratio * 100:.1f}% of that "
                  f"(at least {args.min_throughput * 100:g}%: {'yes' if tp_ok else 'NO'})")
            print("  device busy with kernels: " + ", ".join(
                f"{report[k]['device_busy'] * 100:.1f}% ({name})"
                for k, name in (("baseline", "turns off"), ("weighted", "turns on"))
                if k in report))
            ok = ok and tp_ok
        else:
            print("\n(no reference run: no throughput figure)")
    except Failure as e:
        print(f"fairness.py: {e}", file=sys.stderr)
        print(f"fairness.py: logs in {workdir}", file=sys.stderr)
        return 1
    except subprocess.TimeoutExpired as e:
        print(f"fairness.py: timed out: {e}", file=sys.stderr)
        print(f"fairness.py: logs in {workdir}", file=sys.stderr)
        return 1
    report["passed"] = ok
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    if keep or not ok:
        print(f"logs in {workdir}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    if args.report_only:
        return 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
