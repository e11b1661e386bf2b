#!/usr/bin/env bash
# make demo where no guest can be booted: the main job as a local process.
#
# Starts pvgpud (the cuda executor where a GPU answers, the simulated device
# otherwise, and says which), runs the synthetic transfer/compute benchmark
# through it as a user's CUDA program runs (NVIDIA's runtime, linked in as
# nvcc links it by default, over pvgpu's driver front-end libcuda.so.1),
# prints the table with what its
# columns mean and a summary of what ran where, and shuts everything down.
# Nothing is left running, whatever happens.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}

workdir=$(mktemp -d /tmp/pvgpu-demo.XXXXXX)
daemon_pid=
cleanup() {
	if [ -n "$daemon_pid" ] && kill -0 "$daemon_pid" 2>/dev/null; then
		kill -TERM "$daemon_pid"
		wait "$daemon_pid" || true
	fi
	rm -rf "$workdir"
}
trap cleanup EXIT INT TERM

# The cuda executor needs a driver and a device; ask a throwaway pvgpud.
executor=sim
if [ -e /dev/nvidiactl ] && ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 '; then
	executor=cuda
fi
if [ "$executor" = cuda ]; then
	echo "demo: an NVIDIA driver is present: using the real GPU (executor cuda)"
else
	echo "demo: no NVIDIA GPU on this machine: using the simulated device (executor sim)."
	echo "demo: the sim executor is a test fixture; its timings say nothing about a GPU."
	export PVGPU_SIM_TWINS=${PVGPU_SIM_TWINS:-$BUILD/tests/sim-twins/libbench-twins.so}
fi

# What the program loads, as a user's program does (DESIGN §2b): its own
# runtime (NVIDIA's, linked in) loads libcuda.so.1, pvgpu's, alone in one
# folder.  Without it (make had no libclang) there is nothing to run.
if [ ! -e "$BUILD/lib/libcuda.so.1" ]; then
	echo "demo: no $BUILD/lib/libcuda.so.1, pvgpu's driver front-end" \
		"(make builds it with libclang: make deps, then make)" >&2
	exit 1
fi
libdir=$workdir/lib
mkdir "$libdir"
ln -s "$(readlink -f "$BUILD/lib/libcuda.so.1")" "$libdir/libcuda.so.1"
frontend="NVIDIA's runtime (linked in) over pvgpu's driver front-end libcuda.so.1"

sock=$workdir/pvgpu.sock
"$BUILD/bin/pvgpud" --listen "unix://$sock" --executor "$executor" \
	--module-cache "$workdir/modules" --log-level info 2>"$workdir/pvgpud.log" &
daemon_pid=$!
for _ in $(seq 100); do
	[ -S "$sock" ] && break
	sleep 0.05
done
[ -S "$sock" ] || { cat "$workdir/pvgpud.log"; echo "demo: pvgpud did not start" >&2; exit 1; }
"$BUILD/bin/pvgpuctl" devices "unix://$sock"

# The same socket plus a shared window: the fast path for a local process.
export PVGPU_DEVICES="shm://$sock"
status=0
if [ "$executor" = cuda ]; then
	# Native and pvgpu side by side, from one plan and one binary: the
	# native child loads the system's libcuda.so.1 (pvgpu-synth finds its
	# folder), the pvgpu child the one in $libdir.
	"$BUILD/bench/pvgpu-synth" --compare --pvgpu-libdir "$libdir" \
		--memory pinned --size 32M-64M --ratio 10/90,35/65,65/35,90/10 || status=$?
else
	LD_LIBRARY_PATH=$libdir "$BUILD/bench/pvgpu-synth" --quick || status=$?
fi
# A session ends once its worker has seen the program go and let go of what
# it held; stopping pvgpud before that kills the worker instead.
count() { grep -c " session [0-9]* $1: " "$workdir/pvgpud.log" || true; }
for _ in $(seq 200); do
	[ "$(count start)" = "$(count end)" ] && break
	sleep 0.05
done
kill -TERM "$daemon_pid"
wait "$daemon_pid" || true
daemon_pid=
if [ "$status" != 0 ]; then
	echo
	echo "demo: pvgpud's log:"
	cat "$workdir/pvgpud.log"
	echo "demo: pvgpu-synth failed ($status)" >&2
	exit 1
fi
echo
if [ "$executor" = cuda ]; then
	scripts/demo_vm.py --legend cuda --compare
else
	scripts/demo_vm.py --legend sim
fi
echo
echo "demo: summary"
echo "  program  pvgpu-synth, a local process (no guest could be booted here),"
echo "           $frontend"
echo "  channel  $PVGPU_DEVICES (a Unix socket and a shared memory window)"
echo "  host     pvgpud --executor $executor"
# pvgpud's own lines about the session, without time stamp and pid.
sed -n 's/^[^ ]* pvgpud\[[0-9]*\] [a-z]*: \(session [0-9]* \(start\|end\): \)/\1/p' \
	"$workdir/pvgpud.log" | sed '1s/^/  pvgpud   /; 2,$s/^/           /'
