#!/usr/bin/env bash
# Print the CUDA toolkit to build with, so that every part of the build agrees
# on one toolkit whatever the machine: a GPU machine has /usr/local/cuda, a
# developer may have nvcc on PATH, CI has the PyPI wheels in .deps/cuda-py.
#
#   scripts/find-cuda.sh            toolkit root (has bin/nvcc)
#   scripts/find-cuda.sh --include  directory holding cuda_runtime.h
#   scripts/find-cuda.sh --libdir   directory holding the real libcudart.so.13
#                                   (to link against, and to run programs
#                                   natively with LD_LIBRARY_PATH)
#
# Prints nothing and exits 1 when there is no toolkit.
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

usage() {
    echo "usage: $0 [--include | --libdir]" >&2
    exit 2
}

mode=root
case "${1:-}" in
    "") ;;
    --include) mode=include ;;
    --libdir) mode=libdir ;;
    -h|--help) usage ;;
    *) usage ;;
esac
[ $# -le 1 ] || usage

has_nvcc() { [ -n "$1" ] && [ -x "$1/bin/nvcc" ]; }

find_root() {
    if [ -n "${CUDA_HOME:-}" ] && has_nvcc "$CUDA_HOME"; then
        echo "$CUDA_HOME"; return 0
    fi
    if has_nvcc /usr/local/cuda; then
        echo /usr/local/cuda; return 0
    fi
    local nvcc
    if nvcc=$(command -v nvcc 2>/dev/null); then
        # Resolve links: /usr/bin/nvcc is often a link into the real toolkit.
        local root
        root=$(dirname "$(dirname "$(readlink -f "$nvcc")")")
        if has_nvcc "$root"; then
            echo "$root"; return 0
        fi
    fi
    local pypi="$repo_root/.deps/cuda-py/nvidia/cu13"
    if has_nvcc "$pypi"; then
        echo "$pypi"; return 0
    fi
    return 1
}

root=$(find_root) || exit 1

# /usr/local/cuda keeps files in lib64/ and targets/x86_64-linux/{lib,include};
# the PyPI wheels put them in lib/ and include/.
case "$mode" in
    root)
        echo "$root" ;;
    include)
        for d in "$root/include" "$root/targets/x86_64-linux/include"; do
            if [ -f "$d/cuda_runtime.h" ]; then echo "$d"; exit 0; fi
        done
        exit 1 ;;
    libdir)
        for d in "$root/lib64" "$root/targets/x86_64-linux/lib" "$root/lib"; do
            if [ -e "$d/libcudart.so.13" ]; then
                # Canonical path so the native run really picks NVIDIA's
                # library and not a same-named shim through a link.
                readlink -f "$d"; exit 0
            fi
        done
        exit 1 ;;
esac
