#!/usr/bin/env python3
"""Real tenants side by side on one GPU: measure them.

Each tenant is a process of this machine's Python with PyTorch, running a
real workload at the same time as the others for --seconds:

  train   training steps of a small GPT-2 built from a config (random
          weights, batch 8 x 128 tokens, AdamW), one synchronised step at a time
  decode  batch-1 greedy decode with a KV cache, 64 tokens a sequence, each
          token timed to the device (its latency: P50 and P99)
  resnet  training steps of timm's ResNet-18 (random weights, batch 32)

in any mix (--mix train:7,decode:1), in each --mode, one after another:

  native     NVIDIA's driver; the GPU's own time slicing between processes
  mps        native, as clients of an MPS control daemon started here
  pvgpu      through pvgpud --executor cuda, one VM per tenant (TCP
             tokens), pvgpud's turns; decode tenants are `priority =
             latency` VMs unless --no-latency-class
  pvgpu-mps  the same with `[gpu 0] sharing = mps` (pvgpud's MPS daemon)

--solo also runs each decode tenant alone first, in each mode, so that its
P99 beside the others can be read against its P99 alone from the same run.

    scripts/tenants.py --mix train:8 --mix decode:1,train:7 --solo
    scripts/tenants.py --mix decode:1,train:3 --solo --modes pvgpu --seconds 8 --json out.json

Every tenant warms up (model built, a few steps), says it is ready, and
all start at one word; each counts only what it completed in its window.
Per mix and mode: each tenant's rate, the aggregate per kind, slowest over
fastest rate within a kind, and the decode latencies.  Needs root for
pvgpud's MPS daemon and the mps mode (NVIDIA's MPS control runs as root
here); exit status 0 when every run finished, 1 otherwise, 2 bad usage.
"""
import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
KINDS = ("train", "decode", "resnet")
MODES = ("native", "mps", "pvgpu", "pvgpu-mps")
UNIT = {"train": "steps", "decode": "tokens", "resnet": "steps"}
READY_TIMEOUT = 300.0


class Failure(Exception):
    """A run failed: one line for the user."""


# ---- a tenant ------------------------------------------------------------


def tenant(kind, seconds, seed):
    """Run one tenant: warm up, print READY, wait for a line on stdin,
    work for `seconds`, print one JSON line of what it completed."""
    import torch
    torch.manual_seed(seed)
    dev = "cuda"
    lat = []
    if kind in ("train", "decode"):
        from transformers import GPT2Config, GPT2LMHeadModel
        cfg = GPT2Config(n_layer=6, n_head=8, n_embd=512, vocab_size=8192,
                         n_positions=256)
        model = GPT2LMHeadModel(cfg).to(dev)
    if kind == "train":
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        x = torch.randint(0, cfg.vocab_size, (8, 128), device=dev)

        def step():
            loss = model(x, labels=x).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            loss.item()
            return 1
    elif kind == "decode":
        model.eval()
        prompt = torch.randint(0, cfg.vocab_size, (1, 16), device=dev)

        @torch.no_grad()
        def step():
            out = model(prompt, use_cache=True)
            past, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
            torch.cuda.synchronize()
            for _ in range(64):
                t = time.perf_counter()
                out = model(tok, past_key_values=past, use_cache=True)
                past, tok = out.past_key_values, out.logits[:, -1:].argmax(-1)
                torch.cuda.synchronize()
                lat.append(time.perf_counter() - t)
            return 64
    else:
        import timm
        model = timm.create_model("resnet18", num_classes=100).to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        x = torch.randn(32, 3, 128, 128, device=dev)
        y = torch.randint(0, 100, (32,), device=dev)

        def step():
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            loss.item()
            return 1
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    lat.clear()
    print("READY", flush=True)
    sys.stdin.readline()
    done, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        done += step()
    elapsed = time.perf_counter() - t0
    res = {"kind": kind, "done": done, "seconds": elapsed, "rate": done / elapsed}
    if lat:
        ms = sorted(x * 1000 for x in lat)
        res.update(p50_ms=ms[len(ms) // 2], p99_ms=ms[min(len(ms) - 1, int(len(ms) * 0.99))])
    print(json.dumps(res), flush=True)


# ---- the modes -----------------------------------------------------------


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Native:
    """NVIDIA's driver; mps: as clients of a control daemon started here."""

    def __init__(self, mps, tmp, threads):
        self.mps, self.env, self.threads = mps, {}, threads
        if mps:
            control = shutil.which("nvidia-cuda-mps-control")
            if not control:
                raise Failure("no nvidia-cuda-mps-control on PATH for the mps mode")
            pipe, logd = tmp / "mps-pipe", tmp / "mps-log"
            pipe.mkdir()
            logd.mkdir()
            self.env = {"CUDA_MPS_PIPE_DIRECTORY": str(pipe),
                        "CUDA_MPS_LOG_DIRECTORY": str(logd)}
            self.control = control
            res = subprocess.run([control, "-d"], env=dict(os.environ, **self.env),
                                 capture_output=True, text=True, timeout=60)
            if res.returncode != 0:
                raise Failure(f"nvidia-cuda-mps-control -d: {res.stderr.strip()}")

    def tenant_env(self, i, kind):
        env = dict(self.env)
        if self.mps and kind in self.threads:
            env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = str(self.threads[kind])
        return env

    def close(self):
        if self.mps:
            subprocess.run([self.control], input="quit\n", text=True, capture_output=True,
                           env=dict(os.environ, **self.env), timeout=60)
            time.sleep(1)


class Pvgpu:
    """pvgpud --executor cuda: one VM per tenant, told apart by TCP token."""

    def __init__(self, args, tmp, kinds, mps):
        pvgpud = Path(args.build) / "bin" / "pvgpud"
        libcuda = Path(args.build) / "lib" / "libcuda.so.1"
        for p in (pvgpud, libcuda):
            if not p.exists():
                raise Failure(f"{p} is not built (make)")
        # pvgpu's libcuda.so.1 alone first on the path: PyTorch's own
        # runtime stays the one it ships.
        self.libdir = tmp / "lib"
        self.libdir.mkdir()
        os.symlink(libcuda.resolve(), self.libdir / "libcuda.so.1")
        conf = ["[default]", "policy = refuse"]
        for i, kind in enumerate(kinds):
            conf += [f"[vm t{i}]", f"token = tenant-token-{i}"]
            if kind == "decode" and not args.no_latency_class:
                conf.append("priority = latency")
            if mps:
                conf.append("gpus = 0")
                if kind in args.mps_threads:
                    conf.append(f"mps_threads = {args.mps_threads[kind]}")
        if mps:
            conf += ["[gpu 0]", "sharing = mps"]
        (tmp / "pvgpud.conf").write_text("\n".join(conf) + "\n")
        self.port = free_port()
        self.log = tmp / "pvgpud.log"
        self.proc = subprocess.Popen(
            [str(pvgpud), "--executor", "cuda", "--listen", f"tcp://127.0.0.1:{self.port}",
             "--config", str(tmp / "pvgpud.conf"), "--module-cache", str(tmp / "modules")],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=open(self.log, "wb"))
        deadline = time.monotonic() + 30
        while True:
            if self.proc.poll() is not None:
                raise Failure("pvgpud exited at start:\n" + self.log.read_text()[-2000:])
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise Failure("pvgpud did not listen within 30 s")
                time.sleep(0.1)

    def tenant_env(self, i, kind):
        return {"LD_LIBRARY_PATH": str(self.libdir),
                "PVGPU_DEVICES": f"tcp://127.0.0.1:{self.port}",
                "PVGPU_TOKEN": f"tenant-token-{i}"}

    def sessions(self):
        return len(re.findall(r"session \d+ start:", self.log.read_text(errors="replace")))

    def close(self):
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def run_tenants(args, kinds, mode, tmp):
    """The tenants of one mix in one mode, at once: their results."""
    tmp.mkdir(parents=True)
    if mode in ("native", "mps"):
        host = Native(mode == "mps", tmp, args.mps_threads)
    else:
        host = Pvgpu(args, tmp, kinds, mode == "pvgpu-mps")
    procs = []
    try:
        base = {k: v for k, v in os.environ.items()
                if k not in ("PVGPU_DEVICES", "PVGPU_TOKEN", "LD_LIBRARY_PATH", "LD_PRELOAD")}
        for i, kind in enumerate(kinds):
            env = dict(base, PYTHONUNBUFFERED="1", **host.tenant_env(i, kind))
            procs.append(subprocess.Popen(
                [sys.executable, __file__, "--tenant", kind, "--seconds", str(args.seconds),
                 "--seed", str(i)], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=open(tmp / f"tenant{i}.err", "wb"), text=True))
        deadline = time.monotonic() + READY_TIMEOUT
        for i, p in enumerate(procs):
            line = p.stdout.readline()
            if line.strip() != "READY" or time.monotonic() > deadline:
                err = (tmp / f"tenant{i}.err").read_text(errors="replace")[-2000:]
                raise Failure(f"{mode}: tenant {i} ({kinds[i]}) not ready: {line!r}\n{err}")
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        results = []
        for i, p in enumerate(procs):
            out, _ = p.communicate(timeout=args.seconds + 300)
            if p.returncode != 0 or not out.strip():
                err = (tmp / f"tenant{i}.err").read_text(errors="replace")[-2000:]
                raise Failure(f"{mode}: tenant {i} ({kinds[i]}) exited {p.returncode}\n{err}")
            results.append(json.loads(out.strip().splitlines()[-1]))
        if isinstance(host, Pvgpu) and host.sessions() < len(kinds):
            raise Failure(f"{mode}: pvgpud served {host.sessions()} sessions for "
                          f"{len(kinds)} tenants: a tenant reached the GPU directly")
        return results
    except Failure as e:
        if isinstance(host, Pvgpu):
            raise Failure(f"{e}\npvgpud's log ends:\n"
                          f"{host.log.read_text(errors='replace')[-2000:]}") from None
        raise
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        host.close()


# ---- the report ----------------------------------------------------------


def summary(results):
    """Per kind: aggregate rate, slowest/fastest; decode latencies."""
    out = {}
    for kind in KINDS:
        rs = [r for r in results if r["kind"] == kind]
        if not rs:
            continue
        rates = [r["rate"] for r in rs]
        k = {"tenants": len(rs), "aggregate": sum(rates), "min": min(rates),
             "max": max(rates), "spread": max(rates) / min(rates) if min(rates) else None}
        if kind == "decode":
            k["p50_ms"] = statistics.median(r["p50_ms"] for r in rs)
            k["p99_ms"] = max(r["p99_ms"] for r in rs)
        out[kind] = k
    return out


def parse_mix(text):
    kinds = []
    for part in text.split(","):
        kind, _, n = part.partition(":")
        if kind not in KINDS or not n.isdigit() or int(n) < 1:
            raise argparse.ArgumentTypeError(
                f"{part!r}: want KIND:N with KIND one of {', '.join(KINDS)}")
        kinds += [kind] * int(n)
    return kinds


def parse_threads(text):
    out = {}
    for part in text.split(","):
        kind, _, pct = part.partition("=")
        if kind not in KINDS or not pct.isdigit() or not 1 <= int(pct) <= 100:
            raise argparse.ArgumentTypeError(f"{part!r}: want KIND=PERCENT (1..100)")
        out[kind] = int(pct)
    return out


def main(argv):
    ap = argparse.ArgumentParser(description="Real tenants side by side on one GPU: "
                                 "natively, under MPS and through pvgpud.")
    ap.add_argument("--mix", action="append", type=parse_mix,
                    help="tenants, e.g. train:8 or decode:1,train:7 (repeatable)")
    ap.add_argument("--modes", default=",".join(MODES),
                    help=f"comma-separated, of {', '.join(MODES)} (default: all)")
    ap.add_argument("--seconds", type=float, default=20.0, help="each run's window")
    ap.add_argument("--solo", action="store_true",
                    help="each mix's decode tenant also alone first, in each mode")
    ap.add_argument("--no-latency-class", action="store_true",
                    help="pvgpu modes: decode tenants as normal VMs")
    ap.add_argument("--mps-threads", type=parse_threads, default={},
                    help="KIND=PERCENT,...: the SMs a tenant of KIND may use under MPS "
                    "(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE natively, mps_threads through pvgpud)")
    ap.add_argument("--build", default=str(REPO / "build"))
    ap.add_argument("--json", help="write every result here")
    ap.add_argument("--tenant", choices=KINDS, help=argparse.SUPPRESS)
    ap.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.tenant:
        tenant(args.tenant, args.seconds, args.seed)
        return 0
    modes = args.modes.split(",")
    bad = [m for m in modes if m not in MODES]
    if bad or not args.mix:
        ap.error(f"unknown mode {bad[0]}" if bad else "no --mix")
    report = []
    tmp = Path(tempfile.mkdtemp(prefix="pvgpu-tenants-"))
    status = 0
    try:
        for n, kinds in enumerate(args.mix):
            name = ",".join(f"{k}:{kinds.count(k)}" for k in KINDS if k in kinds)
            threads = ", ".join(f"{k} {v}%" for k, v in args.mps_threads.items())
            print(f"== mix {name}, {args.seconds:g} s a run"
                  + (f"; under MPS: {threads} of the SMs" if threads else ""))
            print(f"{'mode':<10} {'kind':<7} {'n':>2} {'aggregate':>16} {'min..max per tenant':>20}"
                  f" {'slow/fast':>9} {'p50 ms':>7} {'p99 ms':>7} {'solo p99':>8} {'p99/solo':>8}")
            for mode in modes:
                entry = {"mix": name, "mode": mode}
                try:
                    if args.solo and "decode" in kinds:
                        solo = run_tenants(args, ["decode"], mode, tmp / f"{n}-{mode}-solo")
                        entry["solo"] = summary(solo)["decode"]
                    res = run_tenants(args, kinds, mode, tmp / f"{n}-{mode}")
                except Failure as e:
                    print(f"{mode:<10} FAILED: {e}")
                    entry["error"] = str(e)
                    report.append(entry)
                    status = 1
                    continue
                entry["tenants"] = res
                entry["summary"] = summary(res)
                report.append(entry)
                for kind, k in entry["summary"].items():
                    row = (f"{mode:<10} {kind:<7} {k['tenants']:>2} "
                           f"{k['aggregate']:>10.1f} {UNIT[kind] + '/s':<5} "
                           f"{k['min']:>9.1f}..{k['max']:<9.1f} {k['spread']:>9.3f}")
                    if kind == "decode":
                        row += f" {k['p50_ms']:>7.2f} {k['p99_ms']:>7.2f}"
                        if "solo" in entry:
                            s = entry["solo"]["p99_ms"]
                            row += f" {s:>8.2f} {k['p99_ms'] / s:>8.2f}"
                    print(row, flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
