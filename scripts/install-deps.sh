#!/usr/bin/env bash
# Install what `make test` needs on a fresh Debian 12 machine, and do nothing
# (quickly) where it is already there: CI and developers run this on every
# `make test`.
#
#   scripts/install-deps.sh          Debian packages + CUDA 13.0 compiler
#   scripts/install-deps.sh --check  install nothing; report what is
#                                    missing and exit 1 if `make test-gpu`
#                                    cannot run (compiler, make, python3,
#                                    pytest, a CUDA toolkit). For the GPU
#                                    machine, which reaches no package
#                                    registry (DESIGN §8); clang, needed
#                                    only by `make fuzz`, is reported there
#                                    but not required.
#
# The CUDA compiler comes from PyPI into .deps/cuda-py (DESIGN §7) unless
# scripts/find-cuda.sh already finds a toolkit with nvcc.
set -euo pipefail

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo_root"

check_only=0
case "${1:-}" in
    "") ;;
    --check) check_only=1 ;;
    *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

deps_dir="$repo_root/.deps"
stamp="$deps_dir/install-deps.stamp"
cuda_py="$deps_dir/cuda-py"

# The PyPI packages of the CUDA 13.0 compiler. nvcc is pinned, and nvvm must
# stay on 13.0: the newest nvvm does not work with this nvcc.
cuda_pip_pkgs=(
    'nvidia-cuda-nvcc==13.0.88'
    'nvidia-nvvm==13.0.*'
    'nvidia-cuda-runtime==13.0.*'
    'nvidia-cuda-crt==13.0.*'
)
# NVIDIA's nvml.h, which libnvidia-ml.so.1's surface is generated from
# (protocol/api/gen_nvml.py), for CUDA 13.0 / driver 580: into
# .deps/nvml-py where the CUDA toolkit found has no nvml.h of its own (the
# PyPI compiler above has none; /usr/local/cuda has one).
nvml_pip_pkgs=('nvidia-nvml-dev==13.0.*')
# pynvml (NVIDIA's nvidia-ml-py) for the NVML tests (tests/integration/test_nvml.py).
test_pip_pkgs=('nvidia-ml-py')
# NVIDIA's libraries, for their initialisation over pvgpu's libcuda.so.1
# (tests/integration/test_libraries.py): into .deps/cuda-libs, without
# their dependencies (the runtime is the compiler's above).  About 1.1 GB
# to download; the test skips, saying so, where they are missing.
lib_pip_pkgs=(
    'nvidia-cublas==13.10.0.20'
    'nvidia-cufft==12.5.0.14'
    'nvidia-cudnn-cu13==9.28.1.4'
)

log() { echo "install-deps: $*" >&2; }

# Fast path: the stamp records a hash of this script, so editing the list of
# dependencies invalidates it; find-cuda.sh catches a deleted .deps/cuda-py,
# the nvml.h test a deleted .deps/nvml-py.
script_hash=$(sha256sum "${BASH_SOURCE[0]}" | cut -d' ' -f1)
if [ "$check_only" = 0 ] && [ -f "$stamp" ] \
   && [ "$(cat "$stamp")" = "$script_hash" ] \
   && scripts/find-cuda.sh >/dev/null 2>&1 \
   && { [ -f "$(scripts/find-cuda.sh)/include/nvml.h" ] \
        || [ -f "$deps_dir/nvml-py/nvidia/cu13/include/nvml.h" ]; }; then
    exit 0
fi

# ---- Debian packages ---------------------------------------------------------
# Checked by command, not by package name: a machine that is not Debian (the
# Ubuntu GPU machine, a developer's laptop) may have the tools some other way.
#   build-essential  gcc, g++, make, libc headers, libasan/libubsan for the
#                    sanitizer build
#   pkg-config       used by the Makefile
#   libinih-dev      INI parser for pvgpud --config (pkg-config inih)
#   libmicrohttpd-dev  HTTP server for pvgpud --metrics (pkg-config
#                    libmicrohttpd)
#   libcurl4-openssl-dev  HTTP client for pvgpuctl status (pkg-config libcurl)
#   clang            libFuzzer target (`make fuzz`)
#   libclang-rt-14-dev  clang's sanitizer and libFuzzer runtimes, a separate
#                    package in Debian 12
#   python3, pytest  the test suite (pytest-xdist from pip: the sanitizer pass on two workers)
apt_missing=()
need_cmd() {   # need_cmd COMMAND PACKAGE
    command -v "$1" >/dev/null 2>&1 || apt_missing+=("$2")
}
need_cmd gcc build-essential
need_cmd g++ build-essential
need_cmd make build-essential
need_cmd pkg-config pkg-config
need_cmd python3 python3
# inih parses pvgpud's policy file (--config); checked through pkg-config,
# which is how the Makefile finds it.
if ! pkg-config --exists inih 2>/dev/null; then
    apt_missing+=(libinih-dev)
fi
# The metrics endpoint and `pvgpuctl status`; optional like inih in the
# Makefile (pvgpud builds without them and refuses --metrics).
if ! pkg-config --exists libmicrohttpd 2>/dev/null; then
    apt_missing+=(libmicrohttpd-dev)
fi
if ! pkg-config --exists libcurl 2>/dev/null; then
    apt_missing+=(libcurl4-openssl-dev)
fi
# verbs:// (transport-verbs.so) and the Soft-RoCE tests: libibverbs and
# librdmacm to build against, rdma-core (the `rdma` tool, providers such as
# rxe), ibverbs-utils and perftest (ib_write_bw, ib_send_lat) for the
# link's own figures.  Optional: without them make leaves verbs out.
if ! pkg-config --exists libibverbs librdmacm 2>/dev/null; then
    apt_missing+=(libibverbs-dev librdmacm-dev)
fi
need_cmd rdma rdma-core
need_cmd ibv_devices ibverbs-utils
need_cmd ib_write_bw perftest
if command -v clang >/dev/null 2>&1; then
    # clang's resource dir must hold libFuzzer; Debian ships it separately.
    rt_dir="$(clang -print-resource-dir 2>/dev/null)/lib/linux"
    if ! ls "$rt_dir"/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1; then
        apt_missing+=("libclang-rt-$(clang -dumpversion | cut -d. -f1)-dev")
    fi
else
    apt_missing+=(clang libclang-rt-14-dev)
fi
# pytest may come from pip (as on the developer machines) or from Debian.
if ! python3 -m pytest --version >/dev/null 2>&1; then
    apt_missing+=(python3-pytest)
fi
# pytest-xdist: make test's sanitizer pass runs on two workers.
if [ "$check_only" = 0 ] && ! python3 -c 'import xdist' >/dev/null 2>&1; then
    PIP_BREAK_SYSTEM_PACKAGES=1 PIP_ROOT_USER_ACTION=ignore \
        python3 -m pip install --quiet --disable-pip-version-check pytest-xdist \
        || log "pip could not install pytest-xdist: the sanitizer pass runs on one worker"
fi
# libclang (PyPI) reads cuda.h for libcuda.so.1's surface (protocol/api/).
if [ "$check_only" = 0 ] && ! python3 -c 'import clang.cindex' >/dev/null 2>&1; then
    PIP_BREAK_SYSTEM_PACKAGES=1 PIP_ROOT_USER_ACTION=ignore \
        python3 -m pip install --quiet --disable-pip-version-check libclang \
        || log "pip could not install libclang: libcuda.so.1 will not build"
fi
if [ "$check_only" = 0 ] && ! python3 -c 'import pynvml' >/dev/null 2>&1; then
    PIP_BREAK_SYSTEM_PACKAGES=1 PIP_ROOT_USER_ACTION=ignore \
        python3 -m pip install --quiet --disable-pip-version-check "${test_pip_pkgs[@]}" \
        || log "pip could not install ${test_pip_pkgs[*]}: the NVML tests will be skipped"
fi

# The VM tests (tests/vm): a QEMU guest under TCG with Debian's kernel, the
# guest driver built against Debian's headers, and libvirt for the attach
# tests (DESIGN §7).  Not needed on the GPU machine (--check skips them).
need_pkg() {   # need_pkg PACKAGE: installed per dpkg, else wanted
    dpkg -s "$1" >/dev/null 2>&1 || apt_missing+=("$1")
}
if [ "$check_only" = 0 ] && command -v dpkg >/dev/null 2>&1; then
    need_cmd qemu-system-x86_64 qemu-system-x86
    need_cmd depmod kmod
    need_cmd xmllint libxml2-utils
    need_cmd virsh libvirt-clients
    need_pkg busybox-static
    need_pkg linux-headers-amd64
    need_pkg libvirt-daemon-system
    need_pkg python3-libvirt
    # `make cross-arm64`: the guest library and pvgpud for arm64.
    # Its C library headers are only a Recommends of the compiler, which
    # --no-install-recommends (below) leaves out.
    need_cmd aarch64-linux-gnu-gcc gcc-aarch64-linux-gnu
    need_pkg libc6-dev-arm64-cross
    # The Xen tests (tests/xen) and the vchan transport (xen-vchan/):
    # libxenvchan and the libraries xl needs in the booted dom0.  The
    # hypervisor and xen-utils are not installed: tests/xen/xenvm.py
    # unpacks them into .deps/xen with apt-get download.
    need_pkg libxen-dev
    # make deb and the deployment suite (tests/deploy, make test-deploy):
    # debhelper with dh-dkms, lintian, debootstrap for the Debian 12 image
    # booted under QEMU, ansible-core and ansible-lint for ansible/.
    need_cmd dh debhelper
    need_pkg dh-dkms
    need_cmd lintian lintian
    need_cmd debootstrap debootstrap
    need_cmd mke2fs e2fsprogs
    need_cmd ssh openssh-client
    need_cmd ansible-playbook ansible-core
    need_cmd ansible-lint ansible-lint
fi

# The CUDA compiler from PyPI needs pip, but only if there is no toolkit.
need_cuda_pip=0
if ! scripts/find-cuda.sh >/dev/null 2>&1; then
    need_cuda_pip=1
    if ! python3 -m pip --version >/dev/null 2>&1; then
        apt_missing+=(python3-pip)
    fi
fi

# Remove duplicates (build-essential may be listed three times).
if [ ${#apt_missing[@]} -gt 0 ]; then
    mapfile -t apt_missing < <(printf '%s\n' "${apt_missing[@]}" | sort -u)
fi

if [ "$check_only" = 1 ]; then
    status=0
    required=()
    for pkg in ${apt_missing[@]+"${apt_missing[@]}"}; do
        case "$pkg" in
            clang|libclang-rt-*) log "optional, for make fuzz only: $pkg" ;;
            libmicrohttpd-dev) log "optional, for pvgpud --metrics only: $pkg" ;;
            libcurl4-openssl-dev) log "optional, for pvgpuctl status only: $pkg" ;;
            libibverbs-dev|librdmacm-dev|rdma-core|ibverbs-utils|perftest)
                log "optional, for verbs:// and tests/rdma only: $pkg" ;;
            *) required+=("$pkg") ;;
        esac
    done
    if [ ${#required[@]} -gt 0 ]; then
        log "missing packages: ${required[*]}"; status=1
    fi
    if [ "$need_cuda_pip" = 1 ]; then
        log "no CUDA toolkit: set CUDA_HOME, install /usr/local/cuda or put nvcc on PATH"
        status=1
    fi
    [ "$status" = 0 ] && log "everything needed is present (CUDA: $(scripts/find-cuda.sh))"
    exit "$status"
fi

if [ ${#apt_missing[@]} -gt 0 ]; then
    sudo=()
    if [ "$(id -u)" != 0 ]; then
        command -v sudo >/dev/null 2>&1 || {
            log "need root (or sudo) to install: ${apt_missing[*]}"; exit 1; }
        sudo=(sudo)
    fi
    log "installing: ${apt_missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    "${sudo[@]}" apt-get update -qq
    "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${apt_missing[@]}"
fi

# ---- CUDA 13.0 compiler from PyPI -------------------------------------------
if [ "$need_cuda_pip" = 1 ]; then
    log "installing the CUDA 13.0 compiler from PyPI into .deps/cuda-py"
    mkdir -p "$deps_dir"
    # Install into a fresh directory and move it into place at the end, so an
    # interrupted run leaves no half-populated toolkit (pip --target also
    # refuses to merge into an existing nvidia/ directory).
    tmp="$deps_dir/cuda-py.tmp"
    rm -rf "$tmp"
    # --target installs outside the system site-packages, which Debian's
    # externally-managed marker does not forbid; the variable covers pip
    # versions that check anyway, and older ones ignore it (as they ignore
    # the one that silences the warning about running pip as root).
    PIP_BREAK_SYSTEM_PACKAGES=1 PIP_ROOT_USER_ACTION=ignore \
        python3 -m pip install --quiet \
        --disable-pip-version-check --no-warn-script-location \
        --target "$tmp" "${cuda_pip_pkgs[@]}"
    cu13="$tmp/nvidia/cu13"
    if [ ! -x "$cu13/bin/nvcc" ]; then
        log "pip finished but $cu13/bin/nvcc is missing"; exit 1
    fi
    # The wheel ships only libcudart.so.13; `nvcc -cudart shared` links
    # with -lcudart, which needs the unversioned name.
    ln -sfn libcudart.so.13 "$cu13/lib/libcudart.so"
    rm -rf "$cuda_py"
    mv "$tmp" "$cuda_py"
    if ! scripts/find-cuda.sh >/dev/null; then
        log "CUDA toolkit installed but scripts/find-cuda.sh does not find it"; exit 1
    fi
fi

# ---- NVIDIA's libraries, for the library-initialisation test ----------------
if [ ! -f "$deps_dir/cuda-libs/.complete" ]; then
    log "installing NVIDIA's libraries (${lib_pip_pkgs[*]}) into .deps/cuda-libs"
    rm -rf "$deps_dir/cuda-libs.tmp"
    if PIP_BREAK_SYSTEM_PACKAGES=1 PIP_ROOT_USER_ACTION=ignore \
        python3 -m pip install --quiet --disable-pip-version-check --no-deps \
        --no-compile --target "$deps_dir/cuda-libs.tmp" "${lib_pip_pkgs[@]}"; then
        touch "$deps_dir/cuda-libs.tmp/.complete"
        rm -rf "$deps_dir/cuda-libs"
        mv "$deps_dir/cuda-libs.tmp" "$deps_dir/cuda-libs"
    else
        log "NVIDIA's libraries could not be installed: tests/integration/test_libraries.py will skip"
    fi
fi

# ---- nvml.h from PyPI, where the CUDA toolkit has none -----------------------
if [ ! -f "$(scripts/find-cuda.sh)/include/nvml.h" ] &&
   [ ! -f "$deps_dir/nvml-py/nvidia/cu13/include/nvml.h" ]; then
    log "installing NVIDIA's nvml.h (${nvml_pip_pkgs[*]}) into .deps/nvml-py"
    rm -rf "$deps_dir/nvml-py.tmp"
    if PIP_BREAK_SYSTEM_PACKAGES=1 PIP_ROOT_USER_ACTION=ignore \
        python3 -m pip install --quiet --disable-pip-version-check \
        --target "$deps_dir/nvml-py.tmp" "${nvml_pip_pkgs[@]}"; then
        rm -rf "$deps_dir/nvml-py"
        mv "$deps_dir/nvml-py.tmp" "$deps_dir/nvml-py"
    else
        log "pip could not install ${nvml_pip_pkgs[*]}: libnvidia-ml.so.1 will not build"
    fi
fi

# virtio-vsock without /dev/vhost-vsock goes through vhost-device-vsock
# (DESIGN §7), from crates.io.
if ! command -v vhost-device-vsock >/dev/null 2>&1 &&
   [ ! -x "$HOME/.cargo/bin/vhost-device-vsock" ]; then
    if command -v cargo >/dev/null 2>&1; then
        log "installing vhost-device-vsock 0.3.0 (cargo)"
        cargo install --quiet --locked vhost-device-vsock@0.3.0 ||
            { log "cargo install vhost-device-vsock failed"; exit 1; }
    else
        log "no cargo: the vhost-user-vsock VM tests will be skipped"
    fi
fi

mkdir -p "$deps_dir"
echo "$script_hash" > "$stamp"
log "ready (CUDA: $(scripts/find-cuda.sh))"
