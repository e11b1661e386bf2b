# bench/bench.mk - the pvgpu benchmarks; included by the top-level Makefile.
#
# Each benchmark is one CUDA program with nvcc's default static runtime:
# NVIDIA's runtime is linked in and dlopens libcuda.so.1, so the same binary
# runs natively or through pvgpu, whichever libcuda.so.1 the dynamic loader
# finds (LD_LIBRARY_PATH), and needs no libcudart.so.13 where it runs.
# The one symbol exported is LeakSanitizer's hook (bench_common.h), by a
# dynamic list: older linkers lack --export-dynamic-symbol.
# Set NVCC, CUDA_LIBDIR and BUILD before including this file if they differ
# from the defaults: BUILD is used in target names when this file is read.

NVCC ?= nvcc
CUDA_LIBDIR ?= /usr/local/cuda/lib64
BUILD ?= build

BENCH_PROGS := $(BUILD)/bench/pvgpu-bandwidth \
	       $(BUILD)/bench/pvgpu-latency \
	       $(BUILD)/bench/pvgpu-synth \
	       $(BUILD)/bench/pvgpu-fair

.PHONY: bench
bench: $(BENCH_PROGS)

$(BENCH_PROGS): $(BUILD)/bench/%: bench/%.cu bench/bench_common.h common/size.c common/size.h \
		bench/exports.dynlist
	@mkdir -p $(@D)
	$(NVCC) -arch=sm_90 -L$(CUDA_LIBDIR) -Icommon -Xcompiler -Wall,-Wextra,-Werror -O2 \
		-Xlinker --dynamic-list=bench/exports.dynlist \
		-o $@ $< common/size.c -ldl -lpthread
