"""verbs:// over Soft-RoCE between two nodes: two QEMU guests
(Debian's kernel, TCG, one vCPU each) joined by one Ethernet segment,
each with its own rdma_rxe device on its own card, run side by side:

    node A (10.77.0.1)                         node B (10.77.0.2)
    program --verbs://-----------------------> pvgpud --executor sim (direct)
    program --> pvgpud --executor remote --verbs://--> pvgpud (sim, nodeb)
                pvgpud (sim, node C: A's own GPU)

with the CUDA test programs and pvgpu-synth through both; one program
using the GPUs of B and C, peer copies between them; a wrong token, bad
rdma_cm private data and garbage written into pvgpud's ring (each ends
that caller alone); frozen peers, one halfway through a message; a guest
killed mid-copy and node B's pvgpud killed mid-copy (the front node lives
on); and perftest's ib_write_bw / ib_send_lat beside pvgpu-bandwidth /
pvgpu-latency / pinned-copies on the link between the nodes (figures
printed, not judged: Soft-RoCE under TCG is not speed).

It runs under `make test-rdma` (`make test` starts it in the background
beside the rest, as it does tests/deploy), or with PVGPU_RDMA_TESTS=1.
The machine's own kernel need not have rdma_rxe: the guest brings Debian's
modules.  Skips, saying why, without QEMU, the guest kernel, rdma-core's
tools or a built transport-verbs.so, and where the guest cannot load
rdma_rxe.
"""
import os
import re
import shutil
import threading
import time
from pathlib import Path

import pytest
from vm_script import vm

REPO = Path(__file__).resolve().parent.parent.parent
BUILD = REPO / os.environ.get("PVGPU_BUILD", "build")
# Bounds for a hang.  Alone the run takes some 150 s; in one CI run
# beside make test's other passes (at higher priority) node A came up at
# 156 s and ended near 1260 s.  Node B waits for node A's "done" 100 s
# less than this, so that its logs still come out.
BOOT_TIMEOUT = 2700.0
NODE_A_ADDR = "10.77.0.1"
NODE_B_ADDR = "10.77.0.2"
# Not memory: it moves 1.2 GB, a minute over Soft-RoCE under TCG.
PROGRAMS = ["devices", "memset", "copies", "streams"]
REMOTE_PROGRAMS = PROGRAMS
KERNEL_PROGRAMS = ["vecadd"]
RDMA_MODULES = ["crc32_generic", "virtio_pci", "virtio_net", "rdma_rxe", "rdma_ucm"]
RXE_PROVIDER = "/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so"
RXE_DRIVER = "/etc/libibverbs.d/rxe.driver"

pytestmark = pytest.mark.vm


# Both guests' start: the network card up with the node's address, an
# rxe device on it, and pvgpud's helpers.
SETUP = r"""
export PATH=/pvgpu/bin:$PATH LD_LIBRARY_PATH=/pvgpu/lib
A=__NODE_A__ B=__NODE_B__ ME=__ME__
TWINS=/pvgpu/lib/libtest-twins.so:/pvgpu/lib/libbench-twins.so
ip link set lo up
ip link set eth0 up || { echo "SKIP: no network card (virtio_net)"; exit 77; }
ip addr add $ME/24 dev eth0
grep -q rdma_rxe /proc/modules || { echo "SKIP: rdma_rxe did not load"; exit 77; }
rdma link add rxe0 type rxe netdev eth0 || { echo "SKIP: rdma link add failed"; exit 77; }
# The port follows the carrier; perftest refuses a port that is not ACTIVE.
i=0; while ! rdma link show rxe0/1 | grep -q "state ACTIVE" && [ $i -lt 60 ]; do
    sleep 1; i=$((i+1)); done
rdma link show

# Each pvgpud waits 60 s for a caller's hello, not the default 5: on CI's
# loaded 2-core runner these TCG guests had a tenth of a core for minutes
# (make test's other passes run at a higher priority).
pvgpud_start() {  # NAME ARGS...
    n=$1; shift
    PVGPU_SIM_TWINS=$TWINS pvgpud --executor-dir /pvgpu/lib/pvgpud --hello-timeout 60 "$@" \
        > /tmp/$n.log 2>&1 &
    eval "PID_$n=$!"; echo $! > /tmp/$n.pid
}
alive() { kill -0 "$1" 2>/dev/null && echo yes || echo no; }
# step NAME: where the time goes (the test prints each step's seconds)
step() { echo "step $1 at $(cut -d' ' -f1 /proc/uptime) s"; }
"""

# Node B: a pvgpud a guest reaches directly (direct) and one behind node
# A's front (nodeb), both --executor sim; node A drives it through a
# one-line control port (busybox nc): ping, alive NAME, kill NAME (kill
# -9), sessions NAME (how many it admitted), perf TOOL ARGS (a perftest
# server), done.
NODE_B = SETUP + r"""
# direct waits 30 s for a silent guest (not the default 10): the
# stopped-reader case stops its guest 8 s, and node A's TCG guest beside
# a CPU hog may take seconds more to read on.
pvgpud_start direct --listen "verbs://$B:7471?timeout=30" --executor sim --tcp-token tok-direct
pvgpud_start nodeb --listen verbs://$B:7472 --executor sim --tcp-token tok-b
cat > /tmp/ctl <<'CTL'
#!/bin/sh
read cmd arg rest
case "$cmd" in
ping) echo pong ;;
alive) kill -0 "$(cat /tmp/$arg.pid)" 2>/dev/null && echo yes || echo no ;;
kill) kill -9 "$(cat /tmp/$arg.pid)"; echo killed ;;
perf) timeout -s KILL 90 "$arg" -R -F $rest < /dev/null > /tmp/$arg-srv.log 2>&1 &
      echo started ;;
show) tail -n 12 /tmp/$arg-srv.log ;;
sessions) grep -c ' start: ' /tmp/$arg.log ;;
listening) rdma resource show cm_id | grep -qE "LISTEN.*:$arg( |$)" && echo yes || echo no ;;
stats) rdma statistic show link rxe0/1 ;;
done) touch /tmp/done; echo bye ;;
esac
CTL
chmod +x /tmp/ctl
nc -ll -p 7400 -e /tmp/ctl &
echo "node B ready"
i=0; while [ ! -f /tmp/done ] && [ $i -lt __NODE_B_WAIT__ ]; do sleep 1; i=$((i+1)); done
for n in direct nodeb; do sed "s/^/log-$n: /" /tmp/$n.log; done
exit 0
"""

# Node A: the programs (the guest library), a front pvgpud with the
# remote executor, node C (the front node's own GPU), and pvgpuds for the
# cases that freeze a peer.  Each case prints `case NAME rc=N` (and what
# it saw).
NODE_A = SETUP + r"""
ctl() { echo "$*" | timeout -s KILL 20 nc -w 5 $B 7400; }
i=0; until [ "$(ctl ping)" = pong ]; do
    sleep 2; i=$((i+1)); [ $i -lt 300 ] || { echo "node B never answered"; exit 1; }; done
echo "node B answers after $((i*2)) s"
# and its pvgpuds listen (they start in the background there)
for port in 7471 7472; do
    i=0; until [ "$(ctl listening $port)" = yes ] || [ $i -ge 120 ]; do sleep 1; i=$((i+1)); done
    echo "node B's port $port: listening after ${i}s"
done

pvgpud_start front --listen verbs://$A:7473 --executor remote --remote verbs://$B:7472 --remote-token tok-b
pvgpud_start nodec --listen verbs://$A:7474 --executor sim --tcp-token tok-b
pvgpud_start front2 --listen verbs://$A:7475 --executor remote --remote verbs://$B:7472 --remote verbs://$A:7474 --remote-token tok-b
# Tokens bound to addresses: vm here's from this guest's, vm elsewhere's not.
cat > /tmp/bound.conf <<CONF
[default]
policy = refuse
[vm here]
token = tok-here
addresses = $A
[vm elsewhere]
token = tok-elsewhere
addresses = 10.77.0.9, fd00::9
CONF
pvgpud_start bound --listen verbs://$A:7476 --executor sim --config /tmp/bound.conf
# A short bound on a peer that stops answering (verbs://...?timeout=).
pvgpud_start frozen --listen "verbs://$A:7477?timeout=3" --executor sim --tcp-token tok-f
sleep 2
# A case's program waits 60 s for a silent peer (?timeout=), not the
# default 10, unless its URI says otherwise: a starved TCG guest (see
# pvgpud_start) missed 10 s at its first connection in one CI run.
run_case() {  # CASE-NAME URI TOKEN PROGRAM ARGS...
    c=$1; uri=$2; case $uri in *\?*) ;; *) uri="$uri?timeout=60" ;; esac
    export PVGPU_DEVICES=$uri PVGPU_TOKEN=$3; shift 3
    t0=$(date +%s)
    timeout -s KILL 300 "$@" > /tmp/$c.out 2>/tmp/$c.err; rc=$?
    echo "case $c rc=$rc s=$(( $(date +%s) - t0 )) last=$(tail -n 1 /tmp/$c.out | tr -d '\r')"
    [ $rc = 0 ] || tail -n 5 /tmp/$c.err
}
step programs-direct
for p in __PROGRAMS__; do run_case direct-$p verbs://$B:7471 tok-direct /pvgpu/bin/$p; done
run_case direct-synth verbs://$B:7471 tok-direct pvgpu-synth --plan /pvgpu/synth.plan
step programs-remote
for p in __REMOTE_PROGRAMS__; do run_case remote-$p verbs://$A:7473 "" /pvgpu/bin/$p; done
run_case remote-synth verbs://$A:7473 "" pvgpu-synth --plan /pvgpu/synth.plan

step two-nodes
# One program, the GPUs of two nodes (B, and this node's C) through one front.
run_case two-nodes verbs://$A:7475 "" /pvgpu/bin/devices
echo "case two-nodes-count rc=0 $(grep '^device count:' /tmp/two-nodes.out | tr -d ' ')"
# Peer copies between them (alike nodes: the same device addresses).
run_case two-nodes-peer verbs://$A:7475 "" /pvgpu/bin/peer

step pinned
# Pinned memory moved in place (REF slots, RDMA READ), registered once.
run_case pinned verbs://$B:7471 tok-direct pinned-copies 3
sed -n 's/^mr: /pinned-mr: /p; s/^mrs /pinned-mrs /p; s/^rate: /pinned-rate: /p' /tmp/pinned.out
echo "rxe counters, node A: $(rdma statistic show link rxe0/1)"
echo "rxe counters, node B: $(ctl stats)"

step refusals
run_case wrong-token verbs://$B:7471 not-the-token /pvgpu/bin/devices
timeout -s KILL 60 verbs-peer baddata $B 7471; echo "case bad-private-data rc=$?"
timeout -s KILL 60 verbs-peer garbage $B 7471 tok-direct; echo "case garbage rc=$?"
timeout -s KILL 60 verbs-peer badref $B 7471 tok-direct; echo "case badref rc=$?"

run_case bound-own-address verbs://$A:7476 tok-here /pvgpu/bin/devices
run_case bound-other-address verbs://$A:7476 tok-elsewhere /pvgpu/bin/devices
run_case bound-after verbs://$A:7476 tok-here /pvgpu/bin/devices

step frozen
# A peer frozen (SIGSTOP) without a disconnect.  The guest stops reading
# its D2H copies: the worker, out of credit, ends the session after 3 s.
# Pageable copies, whose bytes the guest itself takes out of the ring (a
# pinned copy's may not need the guest: a freeze there left the worker
# idle, and an idle guest keeps its session, by design); a freeze that
# still finds the worker idle is let go and made again a second later.
# The guest's own timeout is long (60 s): the worker's 3 s are the test
# here (a guest stopped past its own timeout is the stopped-reader case).
worker_of() { cat /proc/$1/task/$1/children 2>/dev/null | awk '{print $1}'; }
# Where that worker sleeps (kernel function, state), for a failure's message.
worker_wait() { w=$(worker_of $PID_frozen); [ -z "$w" ] || echo "$(cat /proc/$w/wchan 2>/dev/null) $(cut -d' ' -f3 /proc/$w/stat 2>/dev/null)"; }
# freeze PID CHECK: SIGSTOP PID until CHECK holds, at most 10 s, up to four
# times with a second's let-go between; sets try and after (s since the
# last freeze).
freeze() {
    for try in 1 2 3 4; do
        kill -STOP $1; t0=$(date +%s)
        i=0; until $2 || [ $i -ge 10 ]; do
            sleep 1; i=$((i+1))
            [ $i != 1 ] || echo "freeze-diag try=$try: the frozen pvgpud's worker waits in $(worker_wait)"
        done
        after=$(( $(date +%s) - t0 ))
        $2 && break
        [ $try = 4 ] || { kill -CONT $1; sleep 1; }
    done
}
PVGPU_DEVICES="verbs://$A:7477?timeout=60" PVGPU_TOKEN=tok-f pvgpu-bandwidth --sizes 16M --reps 400 --dir d2h --memory pageable > /tmp/frozen-guest.err 2>&1 &
bw=$!; sleep 5
worker_gone() { [ -z "$(worker_of $PID_frozen)" ]; }
freeze $bw worker_gone
echo "case frozen-guest rc=0 worker_gone_after=${after}s freezes=$try"
tail -n 2 /tmp/frozen-guest.err | sed 's/^/frozen-guest-err: /'
kill -9 $bw; wait $bw 2>/dev/null
# pvgpud's worker frozen mid-H2D: the guest, waiting for the worker to
# read its pinned bytes, gives up after 3 s.  A freeze that lands after
# the reads, while the worker copies and the guest waits for the reply
# (a long call may take as long as it takes: nothing times out there), is
# let go and made again a second later, in the next copy's reads.  Giving
# up is the program's error line; its exit is awaited once the freeze
# ends, so that a guest killed by the test never passes for one that
# gave up.
PVGPU_DEVICES="verbs://$A:7477?timeout=3" PVGPU_TOKEN=tok-f pvgpu-bandwidth --sizes 64M --reps 200 --dir h2d --memory pinned > /dev/null 2>/tmp/frozen-host.err &
bw=$!; sleep 5; w=$(worker_of $PID_frozen)
gave_up() { ! kill -0 $bw 2>/dev/null || grep -q '^pvgpu-bandwidth' /tmp/frozen-host.err; }
freeze $w gave_up
kill -CONT $w 2>/dev/null
i=0; while kill -0 $bw 2>/dev/null && [ $i -lt 20 ]; do sleep 1; i=$((i+1)); done
kill -0 $bw 2>/dev/null && kill -9 $bw; wait $bw; rc=$?
echo "case frozen-host rc=$rc gave_up_after=${after}s freezes=$try exited_after=${i}s"
tail -n 2 /tmp/frozen-host.err
kill -9 $w 2>/dev/null; sleep 1
__HALFWAY__
run_case after-frozen verbs://$A:7477 tok-f /pvgpu/bin/devices
echo "case frozen-alive rc=0 alive=$(alive $PID_frozen)"

step stopped-reader
# A guest stopped past its own timeout (5 s) while the rest of a reply
# arrives, four times: resumed, it reads what came and goes on (node B's
# worker, 30 s, waits for it).  Pageable D2H: the guest waits in the
# middle of each 1 MiB frame for its next slots.  24 x 16 MiB (and one
# untimed), where the four stops need the copy to last past the 4 s it
# runs between them: 4 x 16 MiB ended before the fourth on a quiet
# machine, and so did 8 x 16 MiB on a faster one (4 s of copying beside
# the 32 s stopped); a slower (busier) machine only stretches the copy.
# The guest's timeout counts node B's silence while the guest runs: 2 s
# was overrun by node B's TCG guest beside a CPU hog.
# The stops start once node B has admitted the guest: one landing before
# its hello (due within --hello-timeout) tests the hello's deadline instead, and on a
# busy machine the program may take seconds to get that far.
before=$(ctl sessions direct)
PVGPU_DEVICES="verbs://$B:7471?timeout=5" PVGPU_TOKEN=tok-direct pvgpu-bandwidth --sizes 16M --reps 24 --dir d2h --memory pageable > /tmp/stopped-reader.out 2>&1 &
bw=$!
i=0; while [ "$(ctl sessions direct)" = "$before" ] && kill -0 $bw 2>/dev/null && [ $i -lt 30 ]; do
    sleep 1; i=$((i+1)); done
echo "stopped-reader: admitted after ~${i} s"
stops=0   # those that found the copy still running (not a zombie)
for k in 1 2 3 4; do
    sleep 1
    grep -q "^State:.[RSD]" /proc/$bw/status 2>/dev/null && stops=$((stops+1))
    kill -STOP $bw 2>/dev/null; sleep 8; kill -CONT $bw 2>/dev/null
done
wait $bw; echo "case stopped-reader rc=$? stops=$stops"
tail -n 3 /tmp/stopped-reader.out | sed 's/^/stopped-reader: /'

step guest-killed
# A guest killed mid-copy: its session ends, node B's pvgpud serves the next.
PVGPU_DEVICES=verbs://$B:7471 PVGPU_TOKEN=tok-direct pvgpu-bandwidth --sizes 64M --reps 50 --memory pinned > /dev/null 2>&1 &
bw=$!; sleep 4; kill -9 $bw; wait $bw 2>/dev/null
sleep 1
run_case after-guest-killed verbs://$B:7471 tok-direct /pvgpu/bin/devices
echo "case direct-alive rc=0 alive=$(ctl alive direct)"

step figures
# Measurements on the link between the two nodes (functional figures:
# under TCG they measure nothing a user relies on, so each run is small,
# a few seconds, enough to show the path works end to end; 4 MiB x 50 of
# ib_write_bw at TCG's 3 MB/s ran past its 90 s and was tried 3 times).
# perftest gets three tries, each bounded: a client that dies leaves its
# server waiting.  Each server has a port of its own, and its client
# starts once it listens (its cm_id in node B's restrack), or after 30 s.
# ib_send_lat's first connection is refused in some runs all the same
# (CM reject 8, then the client crashes), with its server listening.
perf_port=18514
perf() {  # NAME SIZE-ARGS...
    n=$1; shift
    for try in 1 2 3; do
        perf_port=$((perf_port + 1)); port=$perf_port
        ctl perf $n -p $port "$@" > /dev/null
        i=0; until [ "$(ctl listening $port)" = yes ] || [ $i -ge 30 ]; do sleep 1; i=$((i+1)); done
        echo "$n server on port $port: listening after ${i}s"
        timeout -s KILL 90 $n -R -F -p $port "$@" $B > /tmp/$n.log 2>&1; rc=$?
        [ $rc = 0 ] && break
        tail -n 8 /tmp/$n.log; echo "$n server:"; ctl show $n
    done
    echo "case $n rc=$rc"
}
perf ib_write_bw -s 1048576 -n 10
grep -E '^ *1048576' /tmp/ib_write_bw.log | sed 's/^/ib_write_bw: /'
perf ib_send_lat -s 8 -n 100
grep -E '^ *8 ' /tmp/ib_send_lat.log | sed 's/^/ib_send_lat: /'
run_case bw-direct verbs://$B:7471 tok-direct pvgpu-bandwidth --json --sizes 1M --reps 2
sed 's/^/bw-direct-json: /' /tmp/bw-direct.out | tr -d '\n'; echo
run_case lat-direct verbs://$B:7471 tok-direct pvgpu-latency --json --quick --sizes 1 --iters 20
sed 's/^/lat-direct-json: /' /tmp/lat-direct.out | tr -d '\n'; echo

step nodeb-killed
# Node B's pvgpud killed mid-copy: only the sessions using it end.
PVGPU_DEVICES=verbs://$A:7473 PVGPU_TOKEN= pvgpu-bandwidth --sizes 64M --reps 50 --memory pinned > /tmp/bkill.out 2>/tmp/bkill.err &
bw=$!; sleep 5; ctl kill nodeb > /dev/null; wait $bw; echo "case nodeb-killed rc=$?"
tail -n 3 /tmp/bkill.err
echo "case front-alive rc=0 alive=$(alive $PID_front)"
run_case direct-after-nodeb verbs://$B:7471 tok-direct /pvgpu/bin/devices
run_case nodec-after-nodeb verbs://$A:7474 tok-b /pvgpu/bin/devices

step end
ctl done > /dev/null
for n in front nodec front2 bound frozen; do sed "s/^/log-$n: /" /tmp/$n.log; done
kill $PID_front $PID_nodec $PID_front2 $PID_bound $PID_frozen 2>/dev/null
exit 0
"""

# A guest stopped halfway through sending a message (its last slot says
# more follows): the worker gives up after ?timeout=3.  An idle guest
# (whole slots only) keeps its session.
HALFWAY = r"""
timeout -s KILL 60 verbs-peer halfway $A 7477 tok-f > /tmp/halfway.out 2>&1
echo "case halfway rc=$? $(tail -n 1 /tmp/halfway.out)"
timeout -s KILL 60 verbs-peer idle $A 7477 tok-f > /tmp/idle.out 2>&1
echo "case idle rc=$? $(tail -n 1 /tmp/idle.out)"
"""


def guest_script(node):
    progs = " ".join(PROGRAMS + KERNEL_PROGRAMS)
    remote = " ".join(REMOTE_PROGRAMS + KERNEL_PROGRAMS)
    text = NODE_A if node == "A" else NODE_B
    return (text.replace("__NODE_A__", NODE_A_ADDR).replace("__NODE_B__", NODE_B_ADDR)
            .replace("__ME__", NODE_A_ADDR if node == "A" else NODE_B_ADDR)
            .replace("__HALFWAY__", HALFWAY)
            .replace("__NODE_B_WAIT__", str(int(BOOT_TIMEOUT) - 100))
            .replace("__PROGRAMS__", progs).replace("__REMOTE_PROGRAMS__", remote))


def guest_files():
    """(host, guest) pairs: pvgpu's pieces in build/'s layout under /pvgpu,
    rdma-core's tools and rxe provider, and every library they load."""
    bins = [BUILD / "bin" / "pvgpud", BUILD / "tests" / "rdma" / "verbs-peer",
            BUILD / "tests" / "rdma" / "pinned-copies"]
    bins += [BUILD / "tests" / p for p in PROGRAMS + ["peer"]]
    bins += [BUILD / "tests" / "kernels" / p for p in KERNEL_PROGRAMS]
    bins += [BUILD / "bench" / b for b in ("pvgpu-synth", "pvgpu-bandwidth", "pvgpu-latency")]
    tools = [shutil.which(t) for t in ("ib_write_bw", "ib_send_lat", "rdma", "ip")]
    libs = {BUILD / "lib" / "pvgpud" / "exec-sim.so": "/pvgpu/lib/pvgpud/exec-sim.so",
            BUILD / "lib" / "pvgpud" / "exec-remote.so": "/pvgpu/lib/pvgpud/exec-remote.so",
            BUILD / "lib" / "pvgpu" / "transport-verbs.so": "/pvgpu/lib/pvgpu/transport-verbs.so",
            BUILD / "lib" / "libcuda.so.1": "/pvgpu/lib/libcuda.so.1",
            vm.nvidia_runtime(): "/pvgpu/lib/libcudart.so.13",
            BUILD / "tests" / "sim-twins" / "libtest-twins.so": "/pvgpu/lib/libtest-twins.so",
            BUILD / "tests" / "sim-twins" / "libbench-twins.so": "/pvgpu/lib/libbench-twins.so",
            Path(RXE_PROVIDER): RXE_PROVIDER, Path(RXE_DRIVER): RXE_DRIVER}
    for p in bins + list(libs):
        if not Path(p).exists():
            pytest.skip(f"{p} is missing (make; rdma-core: libibverbs-dev librdmacm-dev ibverbs-providers)")
    if not all(tools):
        pytest.skip("no ib_write_bw/ib_send_lat/rdma/ip here (apt-get install perftest rdma-core iproute2)")
    files = [(str(b), f"/pvgpu/bin/{b.name}") for b in bins]
    files += [(t, f"/pvgpu/bin/{Path(t).name}") for t in tools]
    files += [(str(h), g) for h, g in libs.items()]
    # A plan calibrated elsewhere: no calibration of the kernel under TCG.
    files.append((str(Path(__file__).parent / "synth-rdma.plan"), "/pvgpu/synth.plan"))
    deps = {}
    for b in bins + [Path(t) for t in tools] + list(libs)[:-1]:
        deps.update({g: h for h, g in vm.guest_libraries(b)})
    return files + [(h, g) for g, h in sorted(deps.items())]


@pytest.fixture(scope="module")
def console(tmp_path_factory):
    if os.environ.get("PVGPU_RDMA_TESTS") != "1":
        pytest.skip("a 5-minute VM boot: runs under make test-rdma (make test starts it "
                    "beside the rest), or with PVGPU_RDMA_TESTS=1")
    if not shutil.which("qemu-system-x86_64"):
        pytest.skip("no qemu-system-x86_64 (apt-get install qemu-system-x86)")
    try:
        kdir, kver = vm.kernel_dir()
    except Exception as e:  # noqa: BLE001 - any reason is the skip's reason
        pytest.skip(f"no Debian guest kernel: {e}")
    tmp = tmp_path_factory.mktemp("rdma")
    logs = BUILD / "tests" / "rdma"
    status, out, status_b, out_b = boot_two_nodes(
        tmp, {n: guest_script(n) for n in "AB"}, kdir, kver, logs)
    for st, text in ((status, out), (status_b, out_b)):
        if st == 77:
            reason = re.search(r"SKIP: (.*)", text)
            pytest.skip(f"Soft-RoCE unavailable in the guest: "
                        f"{reason.group(1) if reason else text[-500:]}")
    print(steps(out))
    assert status == 0, f"node A:\n{out[-6000:]}\nnode B:\n{out_b[-3000:]}"
    assert status_b == 0, f"node B:\n{out_b[-6000:]}"
    return out + "\n" + out_b


def steps(out):
    """Node A's steps and the seconds each took, in one line."""
    marks = [(m.group(1), float(m.group(2)))
             for m in re.finditer(r"^step (\S+) at ([\d.]+) s", out, re.M)]
    took = [f"{name} {nxt - t:.0f} s" for (name, t), (_, nxt) in zip(marks, marks[1:])]
    start = f"up at {marks[0][1]:.0f} s, " if marks else ""
    return f"rdma steps on node A: {start}{', '.join(took)}"


def boot_two_nodes(tmp, scripts, kdir, kver, logs):
    """Nodes A and B: two guests, one vCPU each, joined by one Ethernet
    segment (a virtio-net card each on QEMU's stream netdev: a unix
    socket, B listening, A connecting), each its own kernel, rxe device
    and address.  Debian 6.1's rdma_rxe serves RoCE in the initial
    network namespace only, so two namespaces of one guest cannot stand
    for two nodes (transport/verbs/README.md).  A stream, not UDP
    datagrams: QEMU then holds a card's packets back when the other guest
    is behind, as a lossless (PFC) RoCE fabric does, where a UDP netdev
    drops them and rxe's retries of large RDMA READs never catch up; a
    unix one, not TCP: no Nagle delay (over TCP ib_send_lat took 15 ms).  Node B ends
    when node A tells it to.  (status A, console A, status B, console B);
    the consoles are kept in logs/console-{A,B}.log."""
    files = guest_files()
    link = tmp / "link.sock"
    cmds = {}
    for i, node in enumerate("AB"):
        initrd = tmp / f"initrd-{node}.cpio"
        vm.build_initramfs(initrd, scripts[node], files=files,
                           modules=RDMA_MODULES, kdir=kdir, kver=kver)
        server = "off" if node == "A" else "on"
        net = [f"stream,id=n0,server={server},addr.type=unix,addr.path={link}",
               f"virtio-net-pci,netdev=n0,mac=52:54:00:77:00:0{i + 1},romfile=,rx_queue_size=1024"]
        cmds[node] = vm.qemu_command(initrd, kernel=kdir / "boot" / f"vmlinuz-{kver}",
                                     memory="2G" if node == "A" else "1G", smp=1,
                                     extra=["-netdev", net[0], "-device", net[1]])
    logs.mkdir(parents=True, exist_ok=True)
    stop_b = threading.Event()
    node_b = {}

    def run_b():
        node_b["result"] = vm.run(cmds["B"], BOOT_TIMEOUT, log=logs / "console-B.log",
                                  echo=False, stop=stop_b)

    thread = threading.Thread(target=run_b)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not unix_listening(link) and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.2)
        status, out = vm.run(cmds["A"], BOOT_TIMEOUT, log=logs / "console-A.log", echo=False)
        thread.join(120 if status == 0 else 1)
    finally:
        stop_b.set()
        thread.join()
    status_b, out_b = node_b.get("result", (125, ""))
    return status, out, status_b, out_b


def unix_listening(path):
    """Something listens on the unix socket path (without connecting to
    it: QEMU would take a probe for its peer)."""
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        f = line.split()
        if len(f) >= 8 and f[-1] == str(path) and int(f[3], 16) & 0x10000:
            return True
    return False


def cases(out):
    return {m.group(1): m.group(0) for m in re.finditer(r"^case (\S+) rc=.*$", out, re.M)}


def rc(out, name):
    line = cases(out).get(name)
    assert line, f"case {name} did not run:\n{out[-6000:]}"
    return int(re.search(r"rc=(\d+)", line).group(1)), line


def said(out, name):
    """Case NAME's line and what follows it up to the next case or step
    (run_case prints the tail of a failed program's stderr there)."""
    line = cases(out).get(name)
    if not line:
        return f"case {name} did not run"
    rest = out[out.index(line) + len(line):].splitlines()[1:9]
    keep = []
    for after in rest:
        if after.startswith(("case ", "step ")):
            break
        keep.append(after)
    return "\n".join([line] + keep)


def log(out, name):
    return "\n".join(line[len(f"log-{name}: "):] for line in out.splitlines()
                     if line.startswith(f"log-{name}: "))


def link_stalled(out):
    """A node's network card that stopped sending for good ("NETDEV
    WATCHDOG: eth0 (virtio_net): transmit queue 0 timed out", seen once
    on node B): every case over the link fails after it, each for its own
    seeming reason, so a failure says so first."""
    stalls = [line for line in out.splitlines() if "NETDEV WATCHDOG" in line]
    return f"the link between the nodes stalled: {stalls[0]}\n" if stalls else ""


def served(out, how):
    """The logs of the pvgpuds a direct or remote case went through."""
    names = ["direct"] if how == "direct" else ["front", "nodeb"]
    return link_stalled(out) + "\n".join(f"pvgpud ({n}):\n{log(out, n)[-3000:]}"
                                          for n in names)


@pytest.mark.parametrize("how", ["direct", "remote"])
def test_programs_and_synth_over_verbs(console, how):
    for p in (PROGRAMS if how == "direct" else REMOTE_PROGRAMS) + KERNEL_PROGRAMS:
        code, line = rc(console, f"{how}-{p}")
        assert code == 0 and line.endswith("last=PASS"), \
            f"{said(console, f'{how}-{p}')}\n{served(console, how)}"
    code, line = rc(console, f"{how}-synth")
    assert code == 0, f"{said(console, f'{how}-synth')}\n{served(console, how)}"
    # Nothing passed by reaching anything but pvgpud over verbs.
    assert "via verbs://" in log(console, "direct" if how == "direct" else "nodeb")


def test_one_program_sees_the_gpus_of_two_nodes(console):
    code, line = rc(console, "two-nodes")
    assert code == 0 and line.endswith("last=PASS"), f"{line}\n{log(console, 'front2')}"
    assert "devicecount:2" in cases(console)["two-nodes-count"], cases(console)["two-nodes-count"]
    assert "via verbs://" in log(console, "nodec"), log(console, "nodec")


def test_peer_copy_between_gpus_of_two_nodes(console):
    """cudaMemcpyPeer between node B's and node C's GPU, bytes checked by
    the program: staged by the front, node to node, never through the
    guest."""
    code, line = rc(console, "two-nodes-peer")
    assert code == 0 and line.endswith("last=PASS"), f"{line}\n{log(console, 'front2')}"
    assert "staged through this node" in log(console, "front2"), log(console, "front2")


def test_pinned_memory_moves_in_place_registered_once(console):
    """cuMemHostAlloc memory over verbs://: 3 rounds of 8 MiB there and
    back, every byte checked by the program; its two buffers are each one
    memory registration of their own size, the same ones before the first
    copy and after the last (`rdma resource show mr`: never per copy)."""
    code, line = rc(console, "pinned")
    # The case talks to the direct pvgpud: its log says why a session broke.
    assert code == 0 and line.endswith("last=PASS"), \
        f"{line}\npvgpud (direct):\n{log(console, 'direct')[-4000:]}"
    mrs = {"before": [], "after": []}
    when = None
    for ln in console.splitlines():
        if ln.startswith("pinned-mrs "):
            when = ln.split()[1].rstrip(":")
        elif ln.startswith("pinned-mr: ") and when in mrs:
            m = re.search(r"mrn (\d+) .*mrlen (\d+)", ln)
            if m:
                mrs[when].append((int(m.group(1)), int(m.group(2))))
    pinned = {w: sorted(mrn for mrn, size in v if size == 8 << 20) for w, v in mrs.items()}
    assert len(pinned["before"]) == 2, mrs
    assert pinned["before"] == pinned["after"] and len(mrs["before"]) == len(mrs["after"]), mrs


def test_wrong_token_is_refused(console):
    code, line = rc(console, "wrong-token")
    assert code != 0, line
    assert "wrong or missing token" in log(console, "direct"), log(console, "direct")


def test_bad_private_data_and_garbage_end_only_that_caller(console):
    assert rc(console, "bad-private-data")[0] == 0, console[-6000:]
    assert rc(console, "garbage")[0] == 0, console[-6000:]
    assert rc(console, "badref")[0] == 0, console[-6000:]
    direct = log(console, "direct")
    assert "private data without the pvgpu magic" in direct, direct
    # garbage, then a REF slot whose key is not the caller's (the RDMA READ fails)
    assert direct.count("connection closed by the guest (read error: Protocol error)") >= 2, direct
    assert "alive=yes" in cases(console)["direct-alive"]


def test_token_bound_to_the_vms_addresses(console):
    """[vm] addresses = : the token holds from those source addresses only,
    and a refusal ends that caller alone."""
    code, line = rc(console, "bound-own-address")
    assert code == 0 and line.endswith("last=PASS"), f"{line}\n{log(console, 'bound')}"
    code, line = rc(console, "bound-other-address")
    assert code != 0, f"a token used from an address its VM does not list was admitted: {line}"
    assert f"source address {NODE_A_ADDR} is not one of vm elsewhere's addresses" in log(console, "bound"), \
        log(console, "bound")
    code, line = rc(console, "bound-after")
    assert code == 0 and line.endswith("last=PASS"), line


def test_frozen_peer_ends_its_session_after_the_timeout(console):
    """SIGSTOP, no disconnect: whoever waits for credit gives up after
    ?timeout=3 with a clear error; pvgpud serves the next program."""
    frozen = log(console, "frozen")
    line = cases(console)["frozen-guest"]
    after = int(re.search(r"worker_gone_after=(\d+)s", line).group(1))
    diag = "\n".join(l for l in console.splitlines() if l.startswith(("freeze-diag", "frozen-guest-err")))
    assert 2 <= after <= 20, f"{line}\n{diag}\n{frozen}"
    # Frozen in its D2H copies, the worker waits for credit ("lost while
    # sending"); on a loaded machine the freeze can land while the program
    # still fills the device (H2D), and the worker waits for its bytes
    # ("read error").  Either way the session ends on the 3 s timeout.
    assert re.search(r"connection lost while sending|read error", frozen) and \
        "Connection timed out" in frozen, frozen
    code, line = rc(console, "frozen-host")
    after = int(re.search(r"gave_up_after=(\d+)s", line).group(1))
    # No lower bound: the guest's 3 s count from the last bytes the worker
    # took, which on a loaded machine can be a second or two before the
    # freeze, so the program may give up within a second of it.
    assert code not in (0, 137) and after <= 20, f"{line}\n{console[-3000:]}"
    code, line = rc(console, "after-frozen")
    assert code == 0 and line.endswith("last=PASS"), line
    assert "alive=yes" in cases(console)["frozen-alive"], frozen


def test_guest_stopped_past_its_timeout_reads_on(console):
    """A guest stopped (SIGSTOP, 8 s) past its own ?timeout=5 while its
    copy's slots arrive: resumed, it looks at what came before it judges
    the peer, and the program finishes with its bytes verified."""
    code, line = rc(console, "stopped-reader")
    out = "\n".join(l for l in console.splitlines() if l.startswith("stopped-reader"))
    assert code == 0, f"{line}\n{out}"
    # every stop landed while the copy ran (else the copy was too short)
    assert "stops=4" in line, f"{line}\n{out}"


def test_guest_frozen_halfway_through_a_message(console):
    """8 bytes of a message in a slot that says more follows, then nothing
    and no disconnect: the worker ends that session after ?timeout=3 (an
    idle peer, whole messages only, keeps its session for 8 s and more)."""
    code, line = rc(console, "halfway")
    assert code == 0, f"{line}\n{log(console, 'frozen')}"
    after = int(re.search(r"disconnected after (\d+) ms", line).group(1))
    assert 2500 <= after <= 12000, line
    assert "read error: Connection timed out" in log(console, "frozen"), log(console, "frozen")
    code, line = rc(console, "idle")
    assert code == 0 and "kept the connection" in line, line


def test_guest_killed_mid_copy(console):
    code, line = rc(console, "after-guest-killed")
    assert code == 0 and line.endswith("last=PASS"), line
    assert "alive=yes" in cases(console)["direct-alive"]


def test_node_b_killed_mid_copy_ends_only_its_sessions(console):
    code, line = rc(console, "nodeb-killed")
    assert code != 0, f"the copy through a dead node B succeeded: {line}"
    assert "alive=yes" in cases(console)["front-alive"], log(console, "front")
    code, line = rc(console, "direct-after-nodeb")
    assert code == 0 and line.endswith("last=PASS"), line
    # node C, the front node's own, still serves
    code, line = rc(console, "nodec-after-nodeb")
    assert code == 0 and line.endswith("last=PASS"), line


def test_link_figures(console):
    """perftest on the same Soft-RoCE link, beside pvgpu's own benchmarks:
    printed for the record (pytest -s), not judged.  perftest is not
    pvgpu: under TCG on a busy machine it may run past its 90 s (killed,
    137), which leaves its figure out and is no failure; any other exit
    of it is.  pvgpu's own runs must succeed."""
    for tool in ("ib_write_bw", "ib_send_lat"):
        code, line = rc(console, tool)
        if code == 137:
            print(f"{tool}: not measured: ran past its 90 s (a busy machine)")
        else:
            assert code == 0, f"{line}\n{console[-4000:]}"
    assert rc(console, "bw-direct")[0] == 0, console[-4000:]
    assert rc(console, "lat-direct")[0] == 0, console[-4000:]
    for line in console.splitlines():
        if line.startswith(("ib_write_bw:", "ib_send_lat:", "bw-direct-json:", "lat-direct-json:",
                            "pinned-rate:", "rxe counters")):
            print(line)
