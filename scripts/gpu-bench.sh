#!/usr/bin/env bash
# Run on the GPU machine: the benchmark matrix behind BENCHMARKS.md, native
# and through pvgpu over each local transport, all in one run.  Results go
# to ${OUT:-bench-results}/ as JSON, plus the pvgpud log.
#   scripts/gpu-bench.sh [quick]
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
out=${OUT:-bench-results}
mkdir -p "$out"
mode=${1:-full}

workdir=$(mktemp -d /tmp/pvgpu-bench.XXXXXX)
"$BUILD/bin/pvgpud" --listen "unix://$workdir/s" --listen tcp://127.0.0.1:7199 \
	--executor cuda --module-cache "$workdir/modules" --log-level info \
	2>"$out/pvgpud.log" &
daemon=$!
trap 'kill -TERM $daemon 2>/dev/null; wait $daemon; rm -rf "$workdir"' EXIT
for _ in $(seq 100); do [ -S "$workdir/s" ] && break; sleep 0.05; done

# One binary per benchmark (NVIDIA's runtime linked in): --compare runs it
# over the system's libcuda.so.1 and over pvgpu's in build/lib.
sizes=4K,64K,1M,16M,64M,256M
# Three native and three pvgpu runs, each figure the median of its side's:
# the machine's own figures drift between runs (bench/README.md, --pairs).
# Latency and bandwidth pairs run at once, taking turns on the GPU
# (--interleave), so that both sides' samples come from the same seconds.
pairs=${PAIRS:-3}
[ "$mode" = quick ] && sizes=1M,64M && pairs=1
for t in unix shm tcp; do
	case $t in
	unix) uri=unix://$workdir/s ;;
	shm) uri=shm://$workdir/s ;;
	tcp) uri=tcp://127.0.0.1:7199 ;;
	esac
	echo "== $t"
	PVGPU_DEVICES=$uri timeout 900 "$BUILD/bench/pvgpu-bandwidth" --compare --pairs $pairs \
		--interleave 50 --socket-baseline --sizes $sizes --json >"$out/bandwidth-$t.json" \
		|| echo "bandwidth over $t failed"
	[ $t = tcp ] && continue
	PVGPU_DEVICES=$uri timeout 600 "$BUILD/bench/pvgpu-latency" --compare --pairs $pairs \
		--interleave 500 --json >"$out/latency-$t.json" || echo "latency over $t failed"
	PVGPU_DEVICES=$uri timeout 900 "$BUILD/bench/pvgpu-synth" --compare --pairs $pairs \
		--memory both --size 32M-64M --ratio 10/90,90/10 \
		--json >"$out/synth-$t.json" || echo "synth over $t failed"
done
