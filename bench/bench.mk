# bench/bench.mk - the pvgpu benchmarks; included by the top-level Makefile.
#
# Each benchmark is one CUDA program linked against the *shared* CUDA
# runtime, so the same binary runs natively or through the pvgpu shim,
# whichever libcudart.so.13 the dynamic loader finds (LD_LIBRARY_PATH).
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

$(BENCH_PROGS): $(BUILD)/bench/%: bench/%.cu bench/bench_common.h common/size.c common/size.h
	@mkdir -p $(@D)
	$(NVCC) -cudart shared -arch=sm_90 -L$(CUDA_LIBDIR) -Icommon -Xcompiler -Wall,-Wextra,-Werror -O2 -o $@ $< common/size.c -ldl -lpthread
