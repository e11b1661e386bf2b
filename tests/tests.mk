# The CUDA test programs (tests/programs/*.cu), built with NVIDIA's nvcc into
# $(BUILD)/tests/NAME. They link against libcudart.so.13 like any CUDA program,
# so the same binary runs natively (NVIDIA's library) or through pvgpu (the
# shim in $(BUILD)/lib), chosen by LD_LIBRARY_PATH at run time.
#
# Included by the top-level Makefile, which defines BUILD, NVCC, CUDA_HOME,
# CUDA_INCLUDE and CUDA_LIBDIR. The defaults below only make
# `make -f tests/tests.mk test-programs` work on its own.

BUILD ?= build
CUDA_HOME ?= $(shell scripts/find-cuda.sh)
CUDA_LIBDIR ?= $(shell scripts/find-cuda.sh --libdir)
NVCC ?= $(CUDA_HOME)/bin/nvcc

TEST_PROGRAM_SRCS := $(sort $(wildcard tests/programs/*.cu))
TEST_PROGRAMS := $(patsubst tests/programs/%.cu,$(BUILD)/tests/%,$(TEST_PROGRAM_SRCS))

.PHONY: test-programs
test-programs: $(TEST_PROGRAMS)

# -cudart shared: the programs must load libcudart.so.13 dynamically, or the
# shim could not stand in for it. sm_90 is the H100; the programs have no
# kernels yet, so the architecture matters only to nvcc. A static pattern
# rule, so it cannot claim other files under $(BUILD)/tests (the unit tests).
$(TEST_PROGRAMS): $(BUILD)/tests/%: tests/programs/%.cu tests/programs/check.h
	@mkdir -p $(@D)
	$(NVCC) -cudart shared -arch=sm_90 -L$(CUDA_LIBDIR) \
		-Xcompiler -Wall,-Wextra,-Werror -o $@ $< -lpthread
