#!/usr/bin/env bash
# make demo: the main job, end to end, in one command.
#
# Starts pvgpud (the cuda executor where a GPU answers, the simulated device
# otherwise, and says which), runs the synthetic transfer/compute benchmark
# through it, prints the table, and shuts everything down.  Nothing is left
# running, whatever happens.
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
native_dir=$(scripts/find-cuda.sh --libdir 2>/dev/null || true)
if [ "$executor" = cuda ]; then
	# Native and pvgpu side by side, from one plan.
	PVGPU_NATIVE_LIBDIR=$native_dir "$BUILD/bench/pvgpu-synth" --compare \
		--memory pinned --size 32M-64M --ratio 10/90,35/65,65/35,90/10
else
	LD_LIBRARY_PATH="$BUILD/lib" "$BUILD/bench/pvgpu-synth" --quick
fi
status=$?
echo
echo "demo: pvgpud log:"
kill -TERM "$daemon_pid"
wait "$daemon_pid" || true
daemon_pid=
cat "$workdir/pvgpud.log"
exit $status
