# The CUDA test programs (tests/programs/*.cu), built with NVIDIA's nvcc into
# $(BUILD)/tests/NAME. They link against libcudart.so.13 like any CUDA program,
# so the same binary runs natively (NVIDIA's runtime over NVIDIA's driver) or
# through pvgpu (NVIDIA's runtime over pvgpu's libcuda.so.1), chosen by
# LD_LIBRARY_PATH at run time (tests/conftest.py's pvgpu_env).
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

# -cudart shared: the programs load libcudart.so.13 from the library path,
# so one binary runs over either driver; the static builds (nvcc's
# default) are guest-lib/cuda/cuda.mk's. sm_90 is the H100; the programs have no
# kernels yet, so the architecture matters only to nvcc. A static pattern
# rule, so it cannot claim other files under $(BUILD)/tests (the unit tests).
$(TEST_PROGRAMS): $(BUILD)/tests/%: tests/programs/%.cu tests/programs/check.h
	@mkdir -p $(@D)
	$(NVCC) -cudart shared -arch=sm_90 -L$(CUDA_LIBDIR) \
		-Xcompiler -Wall,-Wextra,-Werror -o $@ $< -lpthread

# Programs with kernels (tests/programs/kernels/*.cu) ->
# $(BUILD)/tests/kernels/NAME, built exactly like the programs above; plus
# vecadd_ptx, the same source with PTX only (-arch=compute_90), so the
# kernel is JIT-compiled where it runs. The .fatbin/.cubin/.ptx images of
# vecadd and fault feed the raw-protocol tests
# (tests/integration/test_kernel_bad_input.py).
KERNEL_PROGRAM_SRCS := $(sort $(wildcard tests/programs/kernels/*.cu))
KERNEL_PROGRAMS := $(patsubst tests/programs/kernels/%.cu,$(BUILD)/tests/kernels/%,$(KERNEL_PROGRAM_SRCS))
KERNEL_PTX_PROGRAM := $(BUILD)/tests/kernels/vecadd_ptx
KERNEL_IMAGES := $(BUILD)/tests/kernels/images/vecadd.fatbin \
	$(BUILD)/tests/kernels/images/vecadd.cubin \
	$(BUILD)/tests/kernels/images/vecadd.ptx \
	$(BUILD)/tests/kernels/images/fault.fatbin

test-programs: $(KERNEL_PROGRAMS) $(KERNEL_PTX_PROGRAM) $(KERNEL_IMAGES) sim-twins

$(KERNEL_PROGRAMS): $(BUILD)/tests/kernels/%: tests/programs/kernels/%.cu tests/programs/check.h
	@mkdir -p $(@D)
	$(NVCC) -cudart shared -arch=sm_90 -L$(CUDA_LIBDIR) \
		-Xcompiler -Wall,-Wextra,-Werror -o $@ $< -lpthread

$(KERNEL_PTX_PROGRAM): tests/programs/kernels/vecadd.cu tests/programs/check.h
	@mkdir -p $(@D)
	$(NVCC) -cudart shared -arch=compute_90 -L$(CUDA_LIBDIR) \
		-Xcompiler -Wall,-Wextra,-Werror -o $@ $< -lpthread

$(BUILD)/tests/kernels/images/%.fatbin: tests/programs/kernels/%.cu tests/programs/check.h
	@mkdir -p $(@D)
	$(NVCC) -fatbin -arch=sm_90 -o $@ $<

$(BUILD)/tests/kernels/images/%.cubin: tests/programs/kernels/%.cu tests/programs/check.h
	@mkdir -p $(@D)
	$(NVCC) -cubin -arch=sm_90 -o $@ $<

$(BUILD)/tests/kernels/images/%.ptx: tests/programs/kernels/%.cu tests/programs/check.h
	@mkdir -p $(@D)
	$(NVCC) -ptx -arch=compute_90 -o $@ $<

# CPU twins of the kernels for `pvgpud --executor sim` (tests/sim/
# sim_twins.h), loaded through PVGPU_SIM_TWINS: every tests/sim-twins/*.c in
# one plugin for the test programs, except the benchmarks' twins, which get a
# plugin of their own (make demo, the bench test), example_twins.c, the
# sim executor's unit-test example with a table of its own (a plugin exports
# one table, and the sim refuses two twins for one kernel name), and
# failure_twins.c, kernels that hang or crash the worker, in a plugin only
# the failure tests load.
TWIN_CFLAGS = -O2 -g -shared -fPIC -std=c11 -Wall -Wextra -Werror -Itests/sim -Ihost-backend/exec $(SANFLAGS)
TEST_TWIN_SRCS := $(filter-out tests/sim-twins/bench_twins.c tests/sim-twins/example_twins.c tests/sim-twins/failure_twins.c,$(sort $(wildcard tests/sim-twins/*.c)))
TEST_TWINS := $(BUILD)/tests/sim-twins/libtest-twins.so
BENCH_TWINS := $(BUILD)/tests/sim-twins/libbench-twins.so
FAILURE_TWINS := $(BUILD)/tests/sim-twins/libfailure-twins.so

# The twins the sim loads when PVGPU_SIM_TWINS is unset: those in
# sim-twins/ beside exec-sim.so (as the pvgpu-sim package installs them),
# so `pvgpud --executor sim` runs the test programs and the benchmarks
# with nothing set.  Not the failure twins, nor the unit test's example.
DEFAULT_TWINS := $(patsubst $(BUILD)/tests/sim-twins/%,$(BUILD)/lib/pvgpud/sim-twins/%,$(TEST_TWINS) $(BENCH_TWINS))
$(BUILD)/lib/pvgpud/sim-twins/%.so: $(BUILD)/tests/sim-twins/%.so
	@mkdir -p $(@D)
	ln -sf ../../../tests/sim-twins/$*.so $@

.PHONY: sim-twins
sim-twins: $(TEST_TWINS) $(BENCH_TWINS) $(FAILURE_TWINS) $(DEFAULT_TWINS)

$(TEST_TWINS): $(TEST_TWIN_SRCS) $(wildcard tests/sim-twins/*.h) tests/sim/sim_twins.h
	@mkdir -p $(@D)
	$(CC) $(TWIN_CFLAGS) -o $@ $(TEST_TWIN_SRCS) -lm

$(BENCH_TWINS): tests/sim-twins/bench_twins.c $(wildcard tests/sim-twins/*.h) tests/sim/sim_twins.h
	@mkdir -p $(@D)
	$(CC) $(TWIN_CFLAGS) -o $@ tests/sim-twins/bench_twins.c -lm

$(FAILURE_TWINS): tests/sim-twins/failure_twins.c tests/sim/sim_twins.h
	@mkdir -p $(@D)
	$(CC) $(TWIN_CFLAGS) -o $@ tests/sim-twins/failure_twins.c

include tests/programs/driver/driver.mk
