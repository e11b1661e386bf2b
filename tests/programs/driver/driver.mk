# The driver-API test programs (tests/programs/driver/*.c): plain C over
# libcuda.so.1, as NVIDIA's driver-API samples are.  Built against the
# toolkit's stub libcuda.so where there is one (the GPU machine), else
# against pvgpu's own build/lib/libcuda.so.1; either way the binary needs
# only "libcuda.so.1" at run time, NVIDIA's or pvgpu's by the library path.
# -> $(BUILD)/tests/driver/NAME.  Included by tests/tests.mk.

DRIVER_PROGRAM_SRCS := $(sort $(wildcard tests/programs/driver/*.c))
DRIVER_PROGRAMS := $(patsubst tests/programs/driver/%.c,$(BUILD)/tests/driver/%,$(DRIVER_PROGRAM_SRCS))
DRIVER_STUB := $(firstword $(wildcard $(CUDA_HOME)/lib64/stubs/libcuda.so \
	$(CUDA_LIBDIR)/stubs/libcuda.so $(CUDA_HOME)/targets/x86_64-linux/lib/stubs/libcuda.so))
DRIVER_LINK := $(if $(DRIVER_STUB),$(DRIVER_STUB),$(BUILD)/lib/libcuda.so.1)

# Without a stub, only where pvgpu's libcuda.so.1 gets built (libclang).
DRIVER_CAN_LINK := $(if $(DRIVER_STUB),1,$(shell python3 -c 'import clang.cindex' 2>/dev/null && echo 1))
test-programs: $(if $(DRIVER_CAN_LINK),$(DRIVER_PROGRAMS))

$(DRIVER_PROGRAMS): $(BUILD)/tests/driver/%: tests/programs/driver/%.c tests/programs/driver/drv.h $(if $(DRIVER_STUB),,$(BUILD)/lib/libcuda.so.1)
	@mkdir -p $(@D)
	$(CC) -O2 -g -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -I$(CUDA_INCLUDE) \
		-o $@ $< $(DRIVER_LINK) -lpthread

# The managed-memory program's kernels (managed.c loads them from beside
# vecadd.fatbin).
DRIVER_IMAGES := $(BUILD)/tests/kernels/images/managed_kernels.fatbin
test-programs: $(DRIVER_IMAGES)
$(BUILD)/tests/kernels/images/managed_kernels.fatbin: tests/programs/driver/managed_kernels.cu
	@mkdir -p $(@D)
	$(NVCC) -fatbin -arch=sm_90 -o $@ $<
