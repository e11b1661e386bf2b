# pvgpu: one build, one test command, one demo command.
#
#   make            build everything that needs no GPU into build/
#   make test       install what is missing, build, run the suite (+ ASan/UBSan)
#   make test-gpu   on a GPU machine: build, run every GPU test natively and
#                   through pvgpu
#   make demo       run the main job (see README.md)
#   make fuzz       build the libFuzzer decoder target
#
# BUILD selects the output tree; SANITIZE=1 builds with ASan+UBSan.

BUILD    ?= build
SANITIZE ?= 0

CUDA_HOME   ?= $(shell scripts/find-cuda.sh 2>/dev/null)
NVCC        ?= $(CUDA_HOME)/bin/nvcc
CUDA_INCLUDE = $(CUDA_HOME)/include
CUDA_LIBDIR ?= $(shell scripts/find-cuda.sh --libdir 2>/dev/null)

CC      ?= cc
CFLAGS  ?= -O2 -g
CFLAGS  += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -fPIC \
           -Iprotocol -I$(BUILD)/gen -I$(CUDA_INCLUDE)
LDLIBS  += -ldl -lpthread
# The policy file parser (host-backend/policy.c); the backend's alone: the
# guest shim must not depend on it.
# The policy file is read with inih; a machine without it (the GPU host has
# no package registry) still builds pvgpud, which then refuses --config.
INIH_LIBS := $(shell pkg-config --libs inih 2>/dev/null)
ifeq ($(INIH_LIBS),)
CFLAGS += -DPVGPU_NO_INIH
endif
ifeq ($(SANITIZE),1)
SANFLAGS = -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
CFLAGS  += $(SANFLAGS)
LDFLAGS += $(SANFLAGS)
endif

GEN_DIR   = $(BUILD)/gen
GEN_FILES = $(addprefix $(GEN_DIR)/,pvgpu_proto.h pvgpu_proto.c pvgpu_guest.h \
            pvgpu_guest.c pvgpu_dispatch.h pvgpu_dispatch.c pvgpu_proto.py)
OBJ_DIR   = $(BUILD)/obj

# Objects for a list of .c files (sources in the tree or generated ones).
objs = $(patsubst %.c,$(OBJ_DIR)/%.o,$(patsubst $(BUILD)/%,%,$(1)))

PROTO_SRC   = protocol/wire.c $(GEN_DIR)/pvgpu_proto.c
BACKEND_SRC = $(filter-out host-backend/pvgpuctl.c,$(wildcard host-backend/*.c)) \
              $(GEN_DIR)/pvgpu_dispatch.c $(PROTO_SRC)
CTL_SRC     = host-backend/pvgpuctl.c $(PROTO_SRC)
GUEST_SRC   = $(wildcard guest-lib/*.c) $(GEN_DIR)/pvgpu_guest.c $(PROTO_SRC)

PVGPUD  = $(BUILD)/bin/pvgpud
PVGPUCTL = $(BUILD)/bin/pvgpuctl
SHIM    = $(BUILD)/lib/libcudart.so.13

.PHONY: all test test-gpu demo fuzz clean deps unit-tests guest-driver
all: $(PVGPUD) $(PVGPUCTL) $(SHIM) test-programs bench unit-tests

# The guest kernel driver, against Debian's linux-headers-*-amd64 (kbuild
# copies the sources to build/guest-driver/).  Not part of `all`: a GPU
# host or a machine without kernel headers has no use for it.
guest-driver:
	$(MAKE) -C guest-driver OUTDIR=$(abspath $(BUILD))/guest-driver

deps:
	scripts/install-deps.sh

$(GEN_FILES) &: protocol/ops.spec protocol/gen.py
	python3 protocol/gen.py protocol/ops.spec $(GEN_DIR)

# The generated guest stubs call the client in guest-lib/; dispatch calls
# the handlers declared for host-backend/.
$(OBJ_DIR)/gen/pvgpu_guest.o: CFLAGS += -Iguest-lib
$(OBJ_DIR)/gen/%.o: $(GEN_DIR)/%.c $(GEN_FILES)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c -o $@ $<

# Each folder sees its own headers (unit tests see the backend's).
$(OBJ_DIR)/%.o: %.c $(GEN_FILES)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -I$(dir $<) $(if $(filter tests/%,$<),-Ihost-backend) \
		-MMD -MP -c -o $@ $<

$(PVGPUD): $(call objs,$(BACKEND_SRC))
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(INIH_LIBS)

$(PVGPUCTL): $(call objs,$(CTL_SRC))
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(SHIM): $(call objs,$(GUEST_SRC)) guest-lib/libcudart.map
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -shared -Wl,-soname,libcudart.so.13 \
		-Wl,--version-script=guest-lib/libcudart.map -Wl,-z,defs \
		-o $@ $(call objs,$(GUEST_SRC)) $(LDLIBS)

# C unit tests: tests/unit/NAME_test.c -> $(BUILD)/tests/unit/NAME_test,
# linked with the backend's and protocol's objects (never with main.c).
UNIT_SRC  = $(wildcard tests/unit/*_test.c)
UNIT_BINS = $(patsubst tests/unit/%.c,$(BUILD)/tests/unit/%,$(UNIT_SRC))
UNIT_LINK = $(call objs,$(filter-out host-backend/main.c,$(BACKEND_SRC)))
unit-tests: $(UNIT_BINS)
$(BUILD)/tests/unit/%: $(OBJ_DIR)/tests/unit/%.o $(UNIT_LINK)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(INIH_LIBS)

# libFuzzer: a whole hostile session against a real worker (sim executor).
FUZZ_CC   ?= clang
FUZZ_SRC   = tests/fuzz/fuzz_worker.c $(filter-out host-backend/main.c,$(BACKEND_SRC))
fuzz: $(BUILD)/fuzz/fuzz_worker
$(BUILD)/fuzz/fuzz_worker: $(FUZZ_SRC) $(GEN_FILES) $(wildcard host-backend/*.h protocol/*.h)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -g -O1 -fsanitize=fuzzer,address,undefined -std=c11 -D_GNU_SOURCE \
		-Iprotocol -I$(GEN_DIR) -I$(CUDA_INCLUDE) -Ihost-backend \
		-o $@ $(FUZZ_SRC) -ldl -lpthread $(INIH_LIBS)

include tests/tests.mk
include bench/bench.mk

PYTEST = python3 -m pytest

test: deps
	$(MAKE) all fuzz guest-driver
	$(MAKE) BUILD=build-asan SANITIZE=1 all
	$(PYTEST) -q
	PVGPU_BUILD=build-asan $(PYTEST) -q tests/unit tests/integration

test-gpu:
	$(MAKE) all
	$(PYTEST) -q -m gpu tests/gpu

# The main job inside a guest; where no guest can be booted (exit 3: no
# qemu or guest kernel, as on the GPU machine), the same job as a local process.
demo: deps
	$(MAKE) all
	@scripts/demo_vm.py --build $(BUILD); rc=$$?; \
	if [ $$rc = 3 ]; then echo "demo: running pvgpu-synth as a local process instead"; \
		BUILD=$(BUILD) scripts/demo.sh; else exit $$rc; fi

clean:
	rm -rf build build-asan

-include $(shell find $(OBJ_DIR) -name '*.d' 2>/dev/null)
