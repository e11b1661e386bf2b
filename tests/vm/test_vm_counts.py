"""What a call costs inside a VM, counted, not timed: a QEMU guest (TCG)
with pvgpu.ko and the window runs pvgpu-latency and pvgpu-bandwidth over
vsock and the control ring against `pvgpud --executor sim`.  TCG makes
every time meaningless, but not these counts: round trips and messages
per call, wake-ups each way (each a vsock notification: a VM exit one
way, an interrupt the other), and the bytes of program data the guest's
CPU copied.  BENCHMARKS.md derives the in-VM figures from them.

Targets: one round trip per synchronous copy, a synchronize of an idle
stream answered in the guest, and not one byte copied by the guest's CPU
for pinned memory, which lives in the window.  The wake-ups are printed
and bounded (at most one each way per call), not held to zero: whether
the worker is still spinning when the next call comes depends on how
fast the guest runs, which TCG is not.
"""
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest
from vm_script import vm

REPO = Path(__file__).resolve().parent.parent.parent
BUILD = REPO / os.environ.get("PVGPU_BUILD", "build")
PORT = 7100
BW_SIZE = 8 << 20
BW_REPS = 4

pytestmark = pytest.mark.vm

EXIT_RE = re.compile(r"sent (\d+) messages: (\d+) calls.*; (\d+) wake-ups sent, "
                     r"(\d+) waits slept; (\d+) bytes of data copied by this CPU")

GUEST = f"""\
insmod /pvgpu.ko || echo 'FAIL: insmod pvgpu.ko'
export LD_LIBRARY_PATH=/pvgpu/lib PVGPU_DEBUG=1 PVGPU_DEVICES=vsock://2:{PORT}
/pvgpu/bin/pvgpu-latency --tests sync,copy --sizes 64 --memory pinned --iters 300 \\
    --json > /tmp/lat.json 2> /tmp/lat.err; echo "latency rc=$?"
echo "latency-json $(cat /tmp/lat.json)"
for m in pinned pageable; do
    /pvgpu/bin/pvgpu-bandwidth --sizes 8M --reps {BW_REPS} --dir both --memory $m \\
        --json > /tmp/bw-$m.json 2> /tmp/bw-$m.err; echo "bandwidth-$m rc=$?"
    echo "bandwidth-$m-json $(cat /tmp/bw-$m.json)"
    grep -h 'sent .* messages' /tmp/bw-$m.err | sed "s/^/bandwidth-$m-exit: /"
done
grep -h 'shared window' /tmp/*.err | sort -u | sed 's/^/window: /'
"""


def line(console, prefix):
    for text in console.splitlines():
        if text.startswith(prefix):
            return text[len(prefix):].strip()
    raise AssertionError(f"no {prefix!r} line\n{console[-4000:]}")


def test_counts_per_call_inside_a_vm(start_pvgpud):
    try:
        kdir, kver = vm.kernel_dir()
        vm.qemu_binary()
    except Exception as e:  # noqa: BLE001 - any reason is the skip's reason
        pytest.skip(f"no guest can be booted here: {e}")
    if not vm.vhost_device_vsock():
        pytest.skip("no vhost-device-vsock (cargo install vhost-device-vsock@0.3.0)")
    ko = vm.guest_driver(kver, BUILD / "guest-driver")
    run_dir = Path(tempfile.mkdtemp(prefix="pvcnt", dir="/tmp"))
    daemon = start_pvgpud("sim", extra_args=["--registry", str(run_dir / "vms")],
                          env={"PVGPU_SIM_TWINS": str(BUILD / "tests" / "sim-twins" /
                                                      "libbench-twins.so")})
    attached = vm.AttachedVm(run_dir, f"cnt{os.getpid()}", memory="1G",
                             window_size="256M", ram="1G", log=run_dir / "supervise.log")
    try:
        benches = [BUILD / "bench" / name for name in ("pvgpu-latency", "pvgpu-bandwidth")]
        initrd = run_dir / "initrd.cpio"
        vm.build_initramfs(initrd, GUEST, files=vm.program_files(BUILD, benches, ko,
                                                                 runtime=False),
                           modules=vm.VSOCK_MODULES, kdir=kdir, kver=kver)
        cmd = vm.qemu_command(initrd, kernel=kdir / "boot" / f"vmlinuz-{kver}",
                              memory=attached.ram, extra=attached.qemu_args())
        _status, console = vm.run(cmd, 900.0, log=run_dir / "console.log", echo=False)
        why = f"{console[-4000:]}\n{daemon.log()[-2000:]}"
        for name in ("latency", "bandwidth-pinned", "bandwidth-pageable"):
            assert f"{name} rc=0" in console, why
        # Through the window and its ring, not vsock alone.
        assert "window: " in console and "control ring" in console, why

        latency = {r["key"]: r for r in json.loads(line(console, "latency-json"))["results"]}
        print("\ninside a TCG guest, over vsock and the window's control ring:")
        for key, r in latency.items():
            print(f"  {key:24s} round trips/op {r['round_trips_per_op']:.3f}, "
                  f"messages/op {r['messages_per_op']:.3f}, "
                  f"worker woken/op {r['worker_wakeups_per_op']:.3f}, "
                  f"guest slept/op {r['guest_sleeps_per_op']:.3f}")
        for key in ("copy h2d pinned 64B", "copy d2h pinned 64B"):
            r = latency[key]
            assert 1.0 <= r["round_trips_per_op"] <= 1.05, (key, r)
            assert r["messages_per_op"] <= 1.05, (key, r)
            assert r["worker_wakeups_per_op"] <= 1.05, (key, r)
            assert r["guest_sleeps_per_op"] <= 1.05, (key, r)
        # An idle stream's synchronize never leaves the guest.
        assert latency["sync idle"]["round_trips_per_op"] < 0.05, latency["sync idle"]

        for memory in ("pinned", "pageable"):
            m = EXIT_RE.search(line(console, f"bandwidth-{memory}-exit:"))
            assert m, why
            _sends, calls, kicks, sleeps, copied = map(int, m.groups())
            cells = json.loads(line(console, f"bandwidth-{memory}-json"))["results"]
            # Each cell's timed copies, its warm-up and the copy that
            # checks the bytes: every copy the program made.
            moved = sum(c["bytes"] * (c["reps"] + 2) for c in cells)
            mib = moved / (1 << 20)
            print(f"  bandwidth {memory:8s} {mib:.0f} MiB in {calls} calls: "
                  f"{kicks / mib:.3f} wake-ups sent/MiB, {sleeps / mib:.3f} waits "
                  f"slept/MiB, guest CPU copied {copied / moved:.3f} B per B moved")
            if memory == "pinned":
                assert copied == 0, (memory, copied)
            else:
                # Staged through the window: each byte once by the guest.
                assert copied == moved, (memory, copied, moved)
    finally:
        attached.close()
        shutil.rmtree(run_dir, ignore_errors=True)
