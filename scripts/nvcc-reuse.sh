#!/bin/sh
# scripts/nvcc-reuse.sh BUILD FROM NVCC ARGS...
#
# nvcc for a variant build (make BUILD=build-asan SANITIZE=1 NVCC_REUSE=build):
# the nvcc-built programs (the CUDA test programs, the benchmarks, kernel
# images) are clients compiled by NVIDIA's compiler, never sanitized, the
# same in every variant.  Where the same output already stands in FROM,
# newer than every input file on the command line, it is copied
# (`cp -p`) instead of compiled again; otherwise nvcc runs as asked.
# FROM must be up to date (make test builds it just before): a header
# that is not on the command line is not looked at here.
set -eu
build=$1 from=$2
shift 2
out= prev=
for a in "$@"; do
	[ "$prev" = -o ] && out=$a
	prev=$a
done
case $out in
"$build"/*) src=$from/${out#"$build"/} ;;
*) src= ;;
esac
if [ -n "$src" ] && [ -f "$src" ]; then
	for a in "$@"; do
		case $a in -*) continue ;; esac
		if [ -f "$a" ] && [ "$a" != "$out" ] && [ "$a" -nt "$src" ]; then
			src=
			break
		fi
	done
fi
if [ -n "$src" ]; then
	cp -p "$src" "$out"
	exit 0
fi
exec "$@"
