"""The one Xen boot of `make test-xen` (tests/xen/conftest.py boots it,
test_xen_boot.py and test_xen_pvgpud.py read its console): Debian's Xen
4.17 under QEMU TCG (xenvm.py), pvgpud --executor sim in dom0 listening
on vchan://pvgpu, and two PV domUs at once.  A dom0 boot and two `xl
create`s are most of a scenario's CPU under TCG, so every check that
needs Xen shares them.

The bare vchan checks come first in each domU (xenvm.vchan_pair(), at
vchan://0/pvgpu-echo, beside pvgpud's channel): domu1 moves 1 MiB each
way with dom0's vchan-probe server and checks transport-vchan.so's
echoes and window against dom0's vchan-echo host; domu2 corrupts its
ring to that host.  Then the pvgpud scenario:

The operator flow is what an operator runs: `pvgpu-vm xen attach` (run
here, on the test host) writes dom0's policy (a [vm NAME] section per
domU, by its xl name) and each domU's /etc/pvgpu/guest.conf; the domUs
carry the guest package's layout (libraries in the multiarch directory,
transport-vchan.so in its pvgpu/ beside them) and no PVGPU_* or
LD_LIBRARY_PATH variable, so they find pvgpud through guest.conf alone.

  both    xen-cuda quota hold: each allocates until its own quota (64M /
          16M) is reached and holds it while dom0 reads pvgpud's metrics
          (both VMs at their quota at once); meanwhile domu1 tries to open
          domu2's live channel (xenstore refuses it)
  domu2   garbage ring indexes into its own channel (loses only that
          session), then 4 MiB copies in a loop until dom0 destroys it
          mid-copy: only its session ends, and its memory in pvgpud
          returns to 0.  domu1's session holds its quota throughout and
          must end well after.
  domu1   the CUDA test programs (NVIDIA's runtime over libcuda.so.1),
          pvgpu-synth, over vchan://
  domu1   then SEQUENTIAL sessions one after another

domu1's programs start once domu2 is gone: beside its copy loop, on one
TCG CPU of a busy machine, a program's staged copy could wait out the
30 s no-progress bound of either end (one CI run did).
"""
import importlib.util
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent
# The sanitizer build would need libasan in dom0 and every domU.
BUILD = REPO / "build"
PVGPU_VM = REPO / "qemu-device" / "pvgpu-vm"


def _load():
    spec = importlib.util.spec_from_file_location(
        "xenvm", REPO / "tests" / "xen" / "xenvm.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


xenvm = _load()

# Programs whose host and device memory fit a small domU and its quota
# (memory.cu wants 2 x 64 MiB on the device, 256 MiB in the guest), and
# whose kernels' CPU twins take seconds, not minutes, in dom0 under TCG
# (reduce's 3M-element sums take 1-2 minutes there: left to tests/integration).
PROGRAMS = ["devices", "memset", "streams", "kernels/vecadd"]
# Sessions one after another from one domU (each a process of its own,
# after those of the programs and benchmarks): a window is 1024 granted
# pages (PVGPU_VCHAN_WINDOW_PAGES), the domU's whole gntalloc limit, so
# one leaked window fails the next session's; more than the 3-8 sessions
# after which an earlier suite saw a domU stall (a CPU twin's fmaf under
# TCG, xen-vchan/README.md).  More in a row check nothing more.
SEQUENTIAL = 9
QUOTA = {"domu1": 64, "domu2": 16}     # MiB
LIBDIR = "/usr/lib/x86_64-linux-gnu"   # where the guest package puts them
# The bare vchan checks, on a channel of their own beside pvgpud's.
PAIR = xenvm.vchan_pair(f"{LIBDIR}/pvgpu/transport-vchan.so", nbytes=1 << 20,
                        name="pvgpu-echo")

DOM0 = r"""
ip link set lo up
mkdir -p -m 0700 /tmp/modules   # pvgpud wants it private
metrics() {   # metrics WHEN: pvgpud's per-VM memory and sessions, prefixed
    wget -q -O - http://127.0.0.1:9400/metrics 2>/dev/null |
        grep -E '^pvgpu_(vm_memory_used_bytes|vm_sessions|gpu_memory_used_bytes)' |
        sed "s/^/xen-metrics $1: /"
}
# The waits here and in the domUs poll once a second: each poll is a fork
# and exec in a PV guest under TCG, CPU that pvgpud and the programs want.
xs_wait() {   # xs_wait PATH SECONDS: until the xenstore node reads 1
    n=0
    while [ "$(xenstore-read $1 2>/dev/null)" != 1 ]; do
        [ $n -ge $2 ] && return 1
        sleep 1; n=$((n+1))
    done
}
# --hello-timeout 60, not 5: the domUs share one TCG CPU, which a loaded
# CI runner gave a tenth of a core for minutes.
PVGPU_SIM_TWINS=/usr/lib/pvgpu/libtest-twins.so:/usr/lib/pvgpu/libbench-twins.so \
    PVGPU_VCHAN_DEBUG=1 pvgpud --listen vchan://pvgpu --executor sim --config /etc/pvgpu/pvgpud.conf \
    --hello-timeout 60 --module-cache /tmp/modules --metrics 127.0.0.1:9400 --log-level info \
    > /tmp/pvgpud.log 2>&1 &
pv=$!
tail -n +1 -f /tmp/pvgpud.log | sed 's/^/[pvgpud] /' &
n=0
while ! grep -q "pvgpud started" /tmp/pvgpud.log; do
    kill -0 $pv 2>/dev/null && [ $n -lt 300 ] || { echo "xen-dom0: pvgpud did not start"; sleep 1; exit 94; }
    sleep 0.1; n=$((n+1))
done
metrics baseline
(   # once domu1's console has been still for 40 s while it lives and a
    # pvgpud process runs: everything a stall would be read from
    last=0; still=0; said=0
    while sleep 10; do
        # (before its programs domu1 waits, quiet, for dom0's go)
        grep -q "xen-test: step programs" /var/log/xen/console/guest-domu1.log 2>/dev/null || continue
        sz=$(wc -c < /var/log/xen/console/guest-domu1.log 2>/dev/null || echo 0)
        if [ "$sz" = "$last" ]; then still=$((still+10)); else still=0; said=0; last=$sz; fi
        [ $still -ge 40 ] && [ $said = 0 ] && xl domid domu1 >/dev/null 2>&1 &&
            grep -q "State:.R" $(for p in $(pidof pvgpud); do echo /proc/$p/status; done) || continue
        said=1
        echo "xen-dom0: STALL: domu1's console still for 40 s at $(cut -d' ' -f1 /proc/uptime) s"
        xenstore-ls -f /local/domain/0/data 2>&1 | sed 's/^/xen-dom0: xs /'
        xl list | sed 's/^/xen-dom0: xl list: /'
        for p in $(pidof pvgpud); do
            echo "xen-dom0: pvgpud $p (parent $(cut -d' ' -f4 /proc/$p/stat)) $(grep State /proc/$p/status) syscall $(cat /proc/$p/syscall)"
            for t in /proc/$p/task/*; do
                echo "xen-dom0:  task ${t##*/} $(cut -d' ' -f3 $t/stat) wchan $(cat $t/wchan)"
                sed 's/^/xen-dom0:    /' $t/stack
            done
            ls -l /proc/$p/fd | sed 's/^/xen-dom0:  fd /'
            # FILE+0xOFFSET: addr2line -f -e build/... OFFSET on the build machine
            grep -q "State:.R" /proc/$p/status && stack-sample $p 2 2>&1 |
                grep -v ' map ' | sed 's/^/xen-dom0: /'
        done
        tail -40 /tmp/pvgpud.log | sed 's/^/xen-dom0: log /'
    done
) &
""" + PAIR["dom0_start"] + r"""
domu_create domu1 domu2
for d in domu1 domu2; do follow_domu_console $d; done
id1=$(xl domid domu1); id2=$(xl domid domu2)
""" + PAIR["dom0_created"] + r"""
# Both at their quota at once (after the bare vchan checks), then domu2
# goes on while domu1 holds.
xs_wait /local/domain/$id1/data/pvgpu-held 480 && xs_wait /local/domain/$id2/data/pvgpu-held 480 ||
    echo "xen-dom0: the domUs did not both hold their quota"
sleep 2   # pvgpud's metrics are a snapshot taken each second (PVGPU_STATS_TICK_MS)
metrics held
# domu1 tries domu2's channel while domu2's session holds it
xenstore-ls -p /local/domain/0/data/pvgpu/$id2 | sed 's/^/xen-dom0: channel of domu2: /' | head -3
xenstore-write /local/domain/$id1/data/pvgpu-other $id2
# The bounds of these waits are for a failure, minutes each: under TCG a
# loaded runner gave the guests a tenth of a core for minutes.
n=0
while ! grep -q "xen-test: steal exit" /var/log/xen/console/guest-domu1.log 2>/dev/null && [ $n -lt 600 ]; do
    sleep 1; n=$((n+1))
done
xenstore-write /local/domain/$id2/data/pvgpu-go 1
# domu2: destroyed while its copies run
n=0
while ! grep -q "xen-cuda: copying" /var/log/xen/console/guest-domu2.log 2>/dev/null && [ $n -lt 900 ]; do
    sleep 1; n=$((n+1))
done
sleep 2
metrics copying
xl destroy domu2 && echo "xen-dom0: destroyed domu2 mid-copy at $(cut -d' ' -f1 /proc/uptime) s"
# Until pvgpud has let the domain go: its session's end alone is not
# enough, the channel may be offered to the dying domain once more (a
# session that ends when the domain does not connect).
n=0
while ! grep -q "vchan: done $id2 (gone)" /tmp/pvgpud.log && [ $n -lt 120 ]; do sleep 1; n=$((n+1)); done
sleep 1
metrics destroyed
xenstore-write /local/domain/$id1/data/pvgpu-go 1
n=0
# Long: under TCG on a busy machine domu1's programs take many minutes; a
# real stall is caught by the test's watch on a silent console instead.
while ! grep -q "xen-test: domu1 checks done" /var/log/xen/console/guest-domu1.log 2>/dev/null && [ $n -lt 1800 ]; do
    sleep 1; n=$((n+1))
done
domu_wait domu1 60 || { echo "xen-dom0: domu1 still running after its last program: destroyed"; xl destroy domu1; }
echo "xen-dom0: domUs done at $(cut -d' ' -f1 /proc/uptime) s"
""" + PAIR["dom0_end"] + r"""sleep 1
metrics end
kill -0 $pv 2>/dev/null && echo "xen-dom0: pvgpud still running"
kill $pv; wait $pv
echo "xen-dom0: pvgpud exit $?"
# The whole consoles again: what the live copies had not shown when a
# domain was destroyed.
for d in domu1 domu2; do show_domu_console $d; done
""" + PAIR["dom0_show"] + r"""sed 's/^/[pvgpud-log] /' /tmp/pvgpud.log
sleep 1
exit 0
"""

# Both domUs: the bare vchan checks, then quota held until dom0 says go
# (xenstore data/, theirs to read and write).  Relative xenstore paths
# are under /local/domain/SELF.
DOMU_START = """
unset LD_LIBRARY_PATH PVGPU_DEVICES
# step NAME: the domU's uptime, where its time goes (the test prints it)
step() { echo "xen-test: step $1 at $(cut -d' ' -f1 /proc/uptime) s"; }
step up
echo "xen-test: guest.conf $(grep -v '^#' /etc/pvgpu/guest.conf)"
step vchan
"""

DOMU_QUOTA = """
step quota
mkfifo /tmp/hold
xen-cuda quota hold < /tmp/hold > /tmp/quota 2>&1 &
q=$!
exec 3> /tmp/hold
n=0; while ! grep -q "then" /tmp/quota && [ $n -lt 900 ]; do sleep 1; n=$((n+1)); done
cat /tmp/quota
"""

DOMU_HELD = """
xenstore-write data/pvgpu-held 1
"""

# (domu1's go comes after domu2's corrupter, copies and destruction)
DOMU_GO = """
n=0; while [ "$(xenstore-read data/pvgpu-go 2>/dev/null)" != 1 ] && [ $n -lt 900 ]; do sleep 1; n=$((n+1)); done
exec 3>&-
wait $q; rc=$?; cat /tmp/quota | grep held; echo "xen-test: quota exit $rc"
"""

# Each program's `timeout` only ends the scenario in bounded time: a
# program takes minutes under TCG on a busy machine (streams 134 s in one
# make test), and a real hang is caught sooner by the test's watch on a
# silent console (xenvm.QUIET).
DOMU1 = DOMU_START + PAIR["domu1"] + DOMU_QUOTA + DOMU_HELD + """
n=0; while ! other=$(xenstore-read data/pvgpu-other 2>/dev/null) && [ $n -lt 300 ]; do sleep 1; n=$((n+1)); done
echo "xen-test: read domain $other's ring-ref: $(xenstore-read /local/domain/0/data/pvgpu/$other/ring-ref 2>&1)"
vchan-echo steal /local/domain/0/data/pvgpu/$other; echo "xen-test: steal exit $?"
""" + DOMU_GO + """
step programs
cd /usr/lib/pvgpu/tests
""" + "".join(
    f"timeout 600 ./{p} > /tmp/out 2>&1; rc=$?; echo \"xen-test: {p} exit $rc\"; "
    f"[ $rc = 0 ] || tail -5 /tmp/out\n" for p in PROGRAMS) + """
# pvgpu-synth replays a plan made natively (tests/xen/synth-plan.json:
# `pvgpu-synth --quick --ratio 90/10 --dir both --memory pageable --size
# 1M-2M --seconds 0.01 --plan-out` against pvgpud --executor sim): its own
# calibration starts at 1024 x 1M fmaf per launch, which the kernel's CPU
# twin in dom0 (software fmaf on TCG's qemu64, no FMA) takes hours to run.
step synth
timeout 600 pvgpu-synth --plan /usr/lib/pvgpu/tests/synth-plan.json > /tmp/out 2>&1
rc=$?; echo "xen-test: pvgpu-synth exit $rc"; [ $rc = 0 ] || tail -5 /tmp/out
# The benchmarks run, for function, not speed: few iterations, since
# under TCG each is a slow round trip and the figures mean nothing
step figures
timeout 600 pvgpu-latency --tests copy,sync --sizes 1 --iters 20 --memory pageable > /tmp/out 2>&1
rc=$?; sed 's/^/xen-figures: /' /tmp/out; echo "xen-test: pvgpu-latency exit $rc"
timeout 600 pvgpu-bandwidth --sizes 64K,1M --reps 1 > /tmp/out 2>&1
rc=$?; sed 's/^/xen-figures: /' /tmp/out; echo "xen-test: pvgpu-bandwidth exit $rc"
step sequential
i=1
while [ $i -le """ + str(SEQUENTIAL) + """ ]; do
    timeout 600 xen-cuda once $i; echo "xen-test: once $i exit $?"
    i=$((i+1))
done
step done
echo "xen-test: domu1 checks done"
"""

DOMU2 = DOMU_START + PAIR["domu2"] + DOMU_QUOTA + DOMU_HELD + DOMU_GO + """
vchan-echo corrupt /local/domain/0/data/pvgpu/$(xenstore-read domid); echo "xen-test: corrupt exit $?"
xen-cuda copyloop
"""


def attach(work):
    """The operator flow: pvgpu-vm xen attach per domU, into a policy that
    refuses unknown callers.  Returns (policy, {domU: guest.conf})."""
    policy = work / "pvgpud.conf"
    policy.write_text("[default]\npolicy = refuse\n")
    confs = {}
    for name, mib in QUOTA.items():
        confs[name] = work / f"{name}-guest.conf"
        proc = subprocess.run([str(PVGPU_VM), "xen", "attach", name, "--memory", f"{mib}M",
                               "--config", str(policy), "--guest-conf", str(confs[name])],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
    return policy, confs


def build(work):
    lib = BUILD / "lib"
    so = lib / "pvgpu" / "transport-vchan.so"
    echo = BUILD / "xen" / "vchan-echo"
    probe = BUILD / "xen" / "vchan-probe"
    cuda = BUILD / "xen" / "xen-cuda"
    need = [so, echo, probe, cuda, BUILD / "xen" / "stack-sample",
            BUILD / "bin" / "pvgpud", lib / "pvgpud" / "exec-sim.so",
            lib / "libcuda.so.1",
            BUILD / "bench" / "pvgpu-synth", BUILD / "bench" / "pvgpu-latency",
            BUILD / "bench" / "pvgpu-bandwidth",
            BUILD / "tests" / "sim-twins" / "libtest-twins.so",
            BUILD / "tests" / "sim-twins" / "libbench-twins.so"]
    need += [BUILD / "tests" / p for p in PROGRAMS]
    missing = [str(p) for p in need if not p.exists()]
    if missing:
        pytest.skip(f"not built: {', '.join(missing)} (no libxen-dev: vchan left out?)")
    try:
        runtime = xenvm.vm.nvidia_runtime()
    except xenvm.vm.VmError as e:     # make deps brings it: never skip
        pytest.fail(str(e))
    policy, confs = attach(work)
    # The guest package's layout (debian/rules): no variable needed.
    # domu1's programs run over NVIDIA's runtime where its package puts
    # it; domu2 calls the driver API alone.
    guest = [(lib / "libcuda.so.1", f"{LIBDIR}/libcuda.so.1"),
             (so, f"{LIBDIR}/pvgpu/transport-vchan.so"),
             (cuda, "/usr/bin/xen-cuda"), (echo, "/usr/bin/vchan-echo")]
    domu1 = guest + [(runtime, f"{LIBDIR}/libcudart.so.13"),
                     (confs["domu1"], "/etc/pvgpu/guest.conf"),
                     (probe, "/usr/bin/vchan-probe"),
                     (BUILD / "bench" / "pvgpu-synth", "/usr/bin/pvgpu-synth"),
                     (BUILD / "bench" / "pvgpu-latency", "/usr/bin/pvgpu-latency"),
                     (BUILD / "bench" / "pvgpu-bandwidth", "/usr/bin/pvgpu-bandwidth")] + \
        [(BUILD / "tests" / p, f"/usr/lib/pvgpu/tests/{p}") for p in PROGRAMS] + \
        [(REPO / "tests" / "xen" / "synth-plan.json", "/usr/lib/pvgpu/tests/synth-plan.json")]
    domu2 = guest + [(confs["domu2"], "/etc/pvgpu/guest.conf")]
    dom0 = [(BUILD / "bin" / "pvgpud", "/usr/bin/pvgpud"),
            (lib / "pvgpud" / "exec-sim.so", "/usr/lib/pvgpud/exec-sim.so"),
            (so, "/usr/lib/pvgpu/transport-vchan.so"),
            (BUILD / "tests" / "sim-twins" / "libtest-twins.so",
             "/usr/lib/pvgpu/libtest-twins.so"),
            (BUILD / "tests" / "sim-twins" / "libbench-twins.so",
             "/usr/lib/pvgpu/libbench-twins.so"),
            (policy, "/etc/pvgpu/pvgpud.conf"),
            (BUILD / "xen" / "stack-sample", "/usr/bin/stack-sample"),
            (echo, "/usr/bin/vchan-echo"), (probe, "/usr/bin/vchan-probe")]
    # MiB of RAM: the kernel takes about 60, the programs' buffers the rest.
    return xenvm.build_scenario(work, DOM0, {"domu1": (DOMU1, domu1, 256),
                                             "domu2": (DOMU2, domu2, 128)},
                                dom0_files=dom0)


def boot(work):
    """Build the scenario in work and boot it: (status, console,
    seconds), the console also in work/console.log.  Skips, saying why,
    where Xen cannot boot here or something is not built."""
    reason = xenvm.why_not()
    if reason:
        pytest.skip(f"cannot boot Xen here: {reason}")
    rd, kdir, kver = build(work)
    status, console, secs = xenvm.run(xenvm.qemu_command(rd, kdir, kver),
                                      log=work / "console.log")
    figures = [l for l in console.splitlines() if l.startswith("[domu1] xen-figures:")]
    print("\n".join(dict.fromkeys(figures)))   # shown live and replayed
    print(steps(console))
    print(f"xen scenario: status {status} after {secs:.1f} s "
          f"(console in {work / 'console.log'})")
    return status, console, secs


def steps(console):
    """domu1's steps and the seconds each took (its uptime), in one line."""
    marks = {}
    for m in re.finditer(r"^\[domu1\] xen-test: step (\S+) at ([\d.]+) s", console, re.M):
        marks.setdefault(m.group(1), float(m.group(2)))   # the consoles come twice
    marks = list(marks.items())
    took = [f"{name} {nxt - t:.0f} s" for (name, t), (_, nxt) in zip(marks, marks[1:])]
    start = f"up at {marks[0][1]:.0f} s, " if marks else ""
    return f"xen steps in domu1: {start}{', '.join(took)}"
