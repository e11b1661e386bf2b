"""Soak: 32 concurrent sessions from 8 configured VMs
for a bounded run, each allocating and freeing near its VM's quota, copying
both ways and launching a kernel (vec_add, run by its CPU twin), with a
SIGHUP reload in the middle. No call may fail except allocations the quota
refuses; no VM ever holds more than its quota; when everything has ended
every VM's memory is back to its baseline. Per-VM throughput is printed
(pytest -s shows it).

The VMs are told apart by TCP tokens. PVGPU_SOAK_SESSIONS, PVGPU_SOAK_VMS and
PVGPU_SOAK_SECONDS scale it; the defaults are 32 x 8, for 20 s of
load, which keeps the whole test well under a minute on a 2-core machine,
sanitizer build included.
"""
import os
import signal
import sys
import textwrap
import threading
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from soak import (MiB, TWINS, VECADD, VM, Worker, assert_quota_back,  # noqa: E402
                  print_table, wait_idle)

SESSIONS = int(os.environ.get("PVGPU_SOAK_SESSIONS", "32"))
VMS = int(os.environ.get("PVGPU_SOAK_VMS", "8"))
SECONDS = float(os.environ.get("PVGPU_SOAK_SECONDS", "20"))

N = 32 * 1024                   # floats per vector: 128 KiB buffers
QUOTA = 4 * MiB                 # per VM
PER_VM = -(-SESSIONS // VMS)
PINNED = PER_VM * 4 * MiB       # each worker stages through 4 x 1 MiB


def token(v):
    return f"soak-vm{v}-token"


def policy(reloads=0):
    text = "[default]\npolicy = refuse\n"
    for v in range(VMS):
        text += textwrap.dedent(f"""
            [vm vm{v}]
            token = {token(v)}
            memory = {QUOTA}
            pinned = {PINNED}
            max_sessions = {PER_VM}
            weight = {1 + (v + reloads) % 3}
            """)
    if reloads:
        text += "\n[vm late]\ntoken = soak-late-token\nmemory = 1M\n"
    return text


class Session(threading.Thread):
    def __init__(self, daemon, vm, index, image, stop):
        super().__init__(daemon=True)
        self.w = Worker(daemon.tcp, vm, index, image, N)
        self.w.open()
        self.vm, self.index, self.stop = vm, index, stop

    def run(self):
        try:
            assert self.w.setup(), "module_load refused"
            i = 0
            while not self.stop.is_set():
                self.w.round(i)
                i += 1
        except Exception as e:  # noqa: BLE001 - every failure is a finding
            self.vm.errors.append(f"session {self.index}: {e!r}")
        finally:
            self.w.close()


def test_soak(start_pvgpud, tmp_path):
    for path in (TWINS, VECADD):
        if not path.exists():
            pytest.fail(f"{path} is not built (run `make test-programs`)")
    t_start = time.monotonic()
    config = tmp_path / "pvgpud.conf"
    config.write_text(policy())
    daemon = start_pvgpud("sim", extra_args=["--config", str(config), "--log-level", "info"],
                          env={"PVGPU_SIM_TWINS": str(TWINS)})
    wait_idle(daemon)
    image = VECADD.read_bytes()
    vms = [VM(f"vm{v}", QUOTA, token(v)) for v in range(VMS)]
    stop = threading.Event()
    sessions = [Session(daemon, vms[i % VMS], i, image, stop) for i in range(SESSIONS)]
    t0 = time.monotonic()
    for s in sessions:
        s.start()

    # Halfway: reload the policy under load (new weights, one VM more).
    time.sleep(SECONDS / 2)
    config.write_text(policy(reloads=1))
    before = daemon.log().count(" policy ")
    daemon.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while daemon.log().count(" policy ") == before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert daemon.log().count(" policy ") > before, daemon.log()[-3000:]
    time.sleep(max(0.0, SECONDS - (time.monotonic() - t0)))
    stop.set()
    for s in sessions:
        s.join(timeout=120)
    elapsed = time.monotonic() - t0
    assert not any(s.is_alive() for s in sessions), "sessions did not stop"

    print(f"\nsoak: {SESSIONS} sessions, {VMS} VMs, {elapsed:.1f} s of load, "
          f"quota {QUOTA // MiB} MiB per VM")
    print_table(vms, elapsed)
    errors = [e for vm in vms for e in vm.errors]
    assert not errors, "\n".join(errors[:20]) + "\n" + daemon.log()[-5000:]
    assert all(vm.rounds > 0 for vm in vms), [vm.rounds for vm in vms]

    # Everything ended: every VM has its whole quota again.
    wait_idle(daemon)
    assert_quota_back(daemon, vms)
    log = daemon.log()
    bad = [line for line in log.splitlines()
           if " warn: " in line or " error: " in line]
    assert not bad, "\n".join(bad[:20])
    print(f"soak: whole test {time.monotonic() - t_start:.1f} s")
