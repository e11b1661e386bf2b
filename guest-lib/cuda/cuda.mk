# pvgpu's driver-API front-end: build/lib/libcuda.so.1 (DESIGN §2b).
# Included by the top-level Makefile. Its surface is generated from CUDA
# 13.0's cuda.h by protocol/api/gen_api.py (libclang); hand-written entry
# points live in guest-lib/cuda/*.c, and protocol/api/annotations.py says
# which ones those are.

LIBCUDA      = $(BUILD)/lib/libcuda.so.1
CUDA_API_GEN = $(addprefix $(GEN_DIR)/,cuda_surface.c libcuda.map api-coverage.md)
LIBCUDA_SRC  = $(wildcard guest-lib/cuda/*.c) $(GEN_DIR)/cuda_surface.c \
               $(GEN_DIR)/cuda_generic.c $(GEN_DIR)/cuda_generic_alias.c $(CLIENT_SRC)

$(CUDA_API_GEN) &: protocol/api/gen_api.py protocol/api/header.py protocol/api/annotations.py $(wildcard protocol/api/*.nm)
	python3 protocol/api/gen_api.py $(CUDA_INCLUDE) $(GEN_DIR)

$(OBJ_DIR)/guest-lib/cuda/%.o $(OBJ_DIR)/gen/cuda_surface.o $(OBJ_DIR)/gen/cuda_generic.o: CFLAGS += -Iguest-lib/cuda $(GUEST_INC)
$(OBJ_DIR)/gen/cuda_surface.o: $(CUDA_API_GEN)

$(LIBCUDA): $(call objs,$(LIBCUDA_SRC)) $(GEN_DIR)/libcuda.map
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -shared -Wl,-soname,libcuda.so.1 \
		-Wl,--version-script=$(GEN_DIR)/libcuda.map -Wl,-z,defs \
		-o $@ $(call objs,$(LIBCUDA_SRC)) $(LDLIBS)

# Without libclang (a GPU host with no package registry) make leaves
# libcuda.so.1 out and says so, as for the other optional pieces.
HAVE_LIBCLANG := $(shell python3 -c 'import clang.cindex' 2>/dev/null && echo 1)
ifeq ($(HAVE_LIBCLANG),1)
all: $(LIBCUDA)
else
all: libcuda-missing
.PHONY: libcuda-missing
libcuda-missing:
	@echo "make: python3 has no libclang (pip install libclang): leaving out $(LIBCUDA)"
endif

# The test programs built nvcc's default way (NVIDIA's runtime linked in
# statically), to run over libcuda.so.1: $(BUILD)/tests/static/NAME and
# $(BUILD)/tests/static/kernels/NAME. The -cudart shared builds are the
# ones tests/tests.mk makes, run with NVIDIA's libcudart.so.13 beside
# libcuda.so.1 (tests/conftest.py's pvgpu_env).
STATIC_PROGRAMS := $(patsubst tests/programs/%.cu,$(BUILD)/tests/static/%,$(TEST_PROGRAM_SRCS)) \
	$(patsubst tests/programs/kernels/%.cu,$(BUILD)/tests/static/kernels/%,$(KERNEL_PROGRAM_SRCS))

$(BUILD)/tests/static/%: tests/programs/%.cu tests/programs/check.h
	@mkdir -p $(@D)
	$(NVCC) -arch=sm_90 -L$(CUDA_LIBDIR) -Xcompiler -Wall,-Wextra,-Werror -o $@ $< -lpthread

test-programs: $(STATIC_PROGRAMS)
