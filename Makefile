# pvgpu: one build, one test command, one demo command.
#
#   make            build everything that needs no GPU into build/
#   make test       install what is missing, build, run the suite (+ ASan/UBSan)
#   make test-gpu   on a GPU machine: build, run every GPU test natively and
#                   through pvgpu
#   make demo       run the main job (see README.md)
#   make fuzz       build the libFuzzer decoder target
#   make vm-bundle  QEMU, a guest kernel and the rest in one archive, for
#                   the GPU host (scripts/vm/bundle.mk)
#
# BUILD selects the output tree; SANITIZE=1 builds with ASan+UBSan.

BUILD    ?= build
SANITIZE ?= 0

CUDA_HOME   ?= $(shell scripts/find-cuda.sh 2>/dev/null)
NVCC        ?= $(CUDA_HOME)/bin/nvcc
# NVCC_REUSE=TREE (a variant build): copy the nvcc-built programs from TREE.
ifneq ($(NVCC_REUSE),)
NVCC := scripts/nvcc-reuse.sh $(BUILD) $(NVCC_REUSE) $(NVCC)
endif
CUDA_INCLUDE = $(CUDA_HOME)/include
CUDA_LIBDIR ?= $(shell scripts/find-cuda.sh --libdir 2>/dev/null)

# Without a CUDA toolkit nothing here builds (every part includes cuda.h):
# say so once, with the command that installs one.
ifeq ($(CUDA_HOME),)
ifeq ($(filter deps clean vm-bundle,$(MAKECMDGOALS))$(filter test demo,$(MAKECMDGOALS)),)
$(error no CUDA toolkit (cuda.h, nvcc) found: run `make deps` (the CUDA 13.0 compiler from PyPI into .deps/) or set CUDA_HOME)
endif
endif

CC      ?= cc
CFLAGS  ?= -O2 -g
# The release version, written once: the packages' (debian/version.sh:
# from git, else debian/changelog's top entry where the tree is no git
# checkout), which pvgpud --version prints beside the protocol version;
# make PVGPU_VERSION=V sets another.  (make deb PVGPU_DEB_VERSION=V, the
# upgrade test's later version, names the packages alone: it must not
# rebuild the tree the rest of the suite is running.)
PVGPU_VERSION := $(or $(shell debian/version.sh 2>/dev/null),0.0~unknown)
# Each part sees the shared folders (common/, protocol/, transport/, the
# generated code) and its own; DESIGN §1 says which folder holds what.
SHARED_INC  = -Icommon -Iprotocol -Itransport -I$(BUILD)/gen
BACKEND_INC = -Ihost-backend/daemon -Ihost-backend/session -Ihost-backend/exec
GUEST_INC   = -Iguest-lib/client -Iguest-lib/frontend -Iguest-driver
CFLAGS  += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -fPIC \
           $(SHARED_INC) -I$(CUDA_INCLUDE)
LDLIBS  += -ldl -lpthread
# The policy file is read with inih; a machine without it (the GPU host has
# no package registry) still builds pvgpud, which then refuses --config.
# A GPU host can be given Debian's inih from elsewhere instead:
# make INIH_DIR=DIR, with DIR/include/ini.h and DIR/lib/libinih.so.
ifneq ($(INIH_DIR),)
CFLAGS += -I$(INIH_DIR)/include
INIH_LIBS := -L$(INIH_DIR)/lib -Wl,-rpath,$(abspath $(INIH_DIR))/lib -linih
else
INIH_LIBS := $(shell pkg-config --libs inih 2>/dev/null)
endif
# One line per optional feature a build leaves out, once per build tree
# (a recursive make for the same tree says nothing more).  Goals that run
# `make deps` first (deps, test, demo) say nothing when they are parsed,
# before deps has installed those libraries: the make they run after deps
# to build (PVGPU_LEFT_OUT_SAID emptied) says what is really left out.
ifeq ($(filter deps test demo,$(MAKECMDGOALS)),)
ifneq ($(PVGPU_LEFT_OUT_SAID),$(BUILD))
left_out = $(info pvgpu: built without $(1))
endif
endif
export PVGPU_LEFT_OUT_SAID := $(BUILD)
ifeq ($(INIH_LIBS),)
CFLAGS += -DPVGPU_NO_INIH
$(call left_out,inih (libinih-dev): pvgpud refuses --config and --registry)
endif
# pvgpud --metrics serves HTTP with libmicrohttpd, and `pvgpuctl status`
# fetches it with libcurl; likewise optional: without them pvgpud refuses
# --metrics and pvgpuctl status says why.
MHD_LIBS  := $(shell pkg-config --libs libmicrohttpd 2>/dev/null)
CURL_LIBS := $(shell pkg-config --libs libcurl 2>/dev/null)
ifeq ($(MHD_LIBS),)
CFLAGS += -DPVGPU_NO_MHD
$(call left_out,libmicrohttpd (libmicrohttpd-dev): pvgpud refuses --metrics)
else
CFLAGS += $(shell pkg-config --cflags libmicrohttpd)
endif
ifeq ($(CURL_LIBS),)
CURL_CFLAGS := -DPVGPU_NO_CURL
$(call left_out,libcurl (libcurl4-openssl-dev): pvgpuctl status is unavailable)
else
CURL_CFLAGS := $(shell pkg-config --cflags libcurl)
endif
ifeq ($(SANITIZE),1)
SANFLAGS = -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
CFLAGS  += $(SANFLAGS)
LDFLAGS += $(SANFLAGS)
endif

GEN_DIR   = $(BUILD)/gen
GEN_FILES = $(addprefix $(GEN_DIR)/,pvgpu_proto.h pvgpu_proto.c pvgpu_guest.h \
            pvgpu_guest.c pvgpu_dispatch.h pvgpu_dispatch.c pvgpu_proto.py) \
            $(GENERIC_GEN)
# The generic driver call (protocol/api/annotations.py GENERIC): plain
# Python, no libclang, so pvgpud builds wherever Python does.
GENERIC_GEN = $(addprefix $(GEN_DIR)/,pvgpu_generic.h pvgpu_generic.c cuda_generic_alias.c \
              cuda_generic.c exec_cuda_generic.c)
OBJ_DIR   = $(BUILD)/obj

# Objects for a list of .c files (sources in the tree or generated ones).
objs = $(patsubst %.c,$(OBJ_DIR)/%.o,$(patsubst $(BUILD)/%,%,$(1)))

PROTO_SRC   = protocol/wire.c $(GEN_DIR)/pvgpu_proto.c
COMMON_SRC  = $(wildcard common/*.c)
# The transports (transport/list.h): each folder's guest half (connect,
# send, receive) and host half (listen, accept, identify, the connection),
# over the shared stream core and the registry; and the control ring
# (transport/ring.c) that both ends of a shared window use.
TRANSPORT_GUEST_SRC = transport/transport.c transport/stream.c $(wildcard transport/*/guest.c) \
                      transport/ring.c
TRANSPORT_HOST_SRC  = transport/transport.c transport/stream.c transport/host.c \
                      transport/stream_host.c $(wildcard transport/*/host.c) transport/ring.c
# The daemon without its main(): the unit tests and the fuzzer link it too.
BACKEND_LIB_SRC = $(filter-out host-backend/daemon/main.c host-backend/exec/remote/%, \
              $(wildcard host-backend/daemon/*.c host-backend/session/*.c \
                         host-backend/exec/*.c host-backend/exec/*/*.c)) \
              $(GEN_DIR)/pvgpu_dispatch.c $(GEN_DIR)/pvgpu_generic.c \
              $(GEN_DIR)/exec_cuda_generic.c \
              $(PROTO_SRC) $(COMMON_SRC) $(TRANSPORT_HOST_SRC)
BACKEND_SRC = host-backend/daemon/main.c $(BACKEND_LIB_SRC)
# The guest's protocol client and the front-end's start-up: libcuda.so.1
# (guest-lib/cuda/cuda.mk) and pvgpuctl link the same one.
CLIENT_SRC  = $(wildcard guest-lib/client/*.c guest-lib/frontend/*.c) \
              $(GEN_DIR)/pvgpu_guest.c $(PROTO_SRC) $(COMMON_SRC) $(TRANSPORT_GUEST_SRC)
CTL_SRC     = host-backend/ctl/pvgpuctl.c $(CLIENT_SRC)
# The simulated device: a test fixture (tests/sim/), loaded by pvgpud as a
# plugin from build/lib/pvgpud/, never linked into it.
SIM_SRC     = $(wildcard tests/sim/*.c)

PVGPUD  = $(BUILD)/bin/pvgpud
PVGPUCTL = $(BUILD)/bin/pvgpuctl
SIM_EXEC = $(BUILD)/lib/pvgpud/exec-sim.so

.PHONY: all test test-gpu demo fuzz clean deps unit-tests guest-driver \
	c-parts build-minimal cross-arm64
all: $(PVGPUD) $(PVGPUCTL) $(SIM_EXEC) test-programs bench unit-tests

# The guest kernel driver, against Debian's linux-headers-*-amd64 (kbuild
# copies the sources to build/guest-driver/).  Not part of `all`: a GPU
# host or a machine without kernel headers has no use for it.
guest-driver:
	$(MAKE) -C guest-driver OUTDIR=$(abspath $(BUILD))/guest-driver

deps:
	scripts/install-deps.sh

$(filter-out $(GENERIC_GEN),$(GEN_FILES)) &: protocol/ops.spec protocol/gen.py
	python3 protocol/gen.py protocol/ops.spec $(GEN_DIR)

$(GENERIC_GEN) &: protocol/api/gen_generic.py protocol/api/annotations.py \
		protocol/ops.spec protocol/gen.py
	python3 protocol/api/gen_generic.py $(GEN_DIR)

# Include paths by part: the guest's sources (and the generated stubs that
# call its client), the backend's (and the dispatch that calls its
# handlers), the test fixtures' (which see the backend's).
$(OBJ_DIR)/guest-lib/%.o $(OBJ_DIR)/gen/pvgpu_guest.o: CFLAGS += $(GUEST_INC)
$(OBJ_DIR)/host-backend/%.o $(OBJ_DIR)/gen/pvgpu_dispatch.o: CFLAGS += $(BACKEND_INC)
$(OBJ_DIR)/tests/%.o: CFLAGS += $(BACKEND_INC) -Itests/sim
$(OBJ_DIR)/host-backend/ctl/pvgpuctl.o: CFLAGS += $(CURL_CFLAGS) $(GUEST_INC)
# Only main.o sees the version, so a new commit recompiles that one file;
# the stamp changes only when the version does.
VERSION_STAMP = $(GEN_DIR)/pvgpu_version
$(OBJ_DIR)/host-backend/daemon/main.o: CFLAGS += -DPVGPU_VERSION='"$(PVGPU_VERSION)"'
$(OBJ_DIR)/host-backend/daemon/main.o: $(VERSION_STAMP)
$(VERSION_STAMP): FORCE
	@mkdir -p $(dir $@)
	@echo '$(PVGPU_VERSION)' | cmp -s - $@ || echo '$(PVGPU_VERSION)' > $@
.PHONY: FORCE

$(OBJ_DIR)/gen/%.o: $(GEN_DIR)/%.c $(GEN_FILES)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -MMD -MP -c -o $@ $<

$(OBJ_DIR)/%.o: %.c $(GEN_FILES)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -I$(dir $<) -MMD -MP -c -o $@ $<

$(PVGPUD): $(call objs,$(BACKEND_SRC))
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(INIH_LIBS) $(MHD_LIBS)

$(PVGPUCTL): $(call objs,$(CTL_SRC))
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS) $(CURL_LIBS)

$(SIM_EXEC): $(call objs,$(SIM_SRC))
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -shared -Wl,-z,defs -o $@ $^ $(LDLIBS) -lm

# The C parts alone (no nvcc): what the variant builds below need.
c-parts: $(PVGPUD) $(PVGPUCTL) $(SIM_EXEC)

# `make` where the optional libraries are missing: every one left out, one
# line each, and the rest must still build (CI proves it here).
build-minimal:
	$(MAKE) BUILD=build-minimal INIH_LIBS= MHD_LIBS= CURL_LIBS= VERBS_LIBS= INIH_DIR= c-parts

# The guest library and pvgpud for arm64 (Grace hosts, arm64 guests) with
# Debian's cross compiler (gcc-aarch64-linux-gnu); optional libraries are
# the build machine's, so they are left out.
cross-arm64:
	$(MAKE) BUILD=build-arm64 CC=aarch64-linux-gnu-gcc PKG_CONFIG_LIBDIR=/nonexistent \
		INIH_LIBS= MHD_LIBS= CURL_LIBS= VERBS_LIBS= INIH_DIR= c-parts

# C unit tests: tests/unit/NAME_test.c -> $(BUILD)/tests/unit/NAME_test,
# linked with the backend's, the protocol's and the sim fixture's objects.
UNIT_SRC  = $(wildcard tests/unit/*_test.c)
UNIT_BINS = $(patsubst tests/unit/%.c,$(BUILD)/tests/unit/%,$(UNIT_SRC))
UNIT_LINK = $(call objs,$(BACKEND_LIB_SRC) $(SIM_SRC))
unit-tests: $(UNIT_BINS)
$(UNIT_BINS): $(SIM_EXEC)
$(BUILD)/tests/unit/%: $(OBJ_DIR)/tests/unit/%.o $(UNIT_LINK)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $(filter %.o,$^) $(LDLIBS) $(INIH_LIBS) $(MHD_LIBS) -lm
# The front-ends' device-list parser is the guest's, not the backend's.
$(BUILD)/tests/unit/devices_test: $(call objs,guest-lib/frontend/devices.c guest-lib/client/debug.c)
$(OBJ_DIR)/tests/unit/devices_test.o: CFLAGS += $(GUEST_INC)

# libFuzzer: a whole hostile session against a real worker (sim executor).
FUZZ_CC   ?= clang
FUZZ_SRC   = tests/fuzz/fuzz_worker.c $(BACKEND_LIB_SRC) $(SIM_SRC)
fuzz: $(BUILD)/fuzz/fuzz_worker $(BUILD)/fuzz/fuzz_ring $(BUILD)/fuzz/fuzz_admin
$(BUILD)/fuzz/fuzz_worker: $(FUZZ_SRC) $(GEN_FILES) $(shell find common host-backend transport protocol tests/sim -name '*.h')
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -g -O1 -fsanitize=fuzzer,address,undefined -std=c11 -D_GNU_SOURCE \
		$(SHARED_INC) $(BACKEND_INC) -Itests/sim -I$(CUDA_INCLUDE) \
		$(filter -D%,$(CFLAGS)) \
		-o $@ $(FUZZ_SRC) -ldl -lpthread -lm $(INIH_LIBS) $(MHD_LIBS)

# libFuzzer: the worker's end of the control ring against a guest that
# scribbles on every index and byte of it (transport/ring.h).
$(BUILD)/fuzz/fuzz_ring: tests/fuzz/fuzz_ring.c transport/ring.c transport/ring.h common/wait.h common/relax.h common/clock.h
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -g -O1 -fsanitize=fuzzer,address,undefined -std=c11 -D_GNU_SOURCE \
		$(SHARED_INC) -o $@ tests/fuzz/fuzz_ring.c transport/ring.c

# libFuzzer: the admin socket's request parser (host-backend/daemon/admin.h).
$(BUILD)/fuzz/fuzz_admin: tests/fuzz/fuzz_admin.c host-backend/daemon/admin.c host-backend/daemon/admin.h common/log.c common/log.h
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -g -O1 -fsanitize=fuzzer,address,undefined -std=c11 -D_GNU_SOURCE \
		$(SHARED_INC) -Ihost-backend/daemon -o $@ tests/fuzz/fuzz_admin.c \
		host-backend/daemon/admin.c common/log.c

include tests/tests.mk
include guest-lib/cuda/cuda.mk
include guest-lib/nvml/nvml.mk
include bench/bench.mk
include host-backend/exec/remote/remote.mk
# Before the suites that use BG_DIR in their prerequisites.
include tests/background.mk
include transport/verbs/verbs.mk
include xen-vchan/xen.mk
include debian/deb.mk
include tests/deploy/deploy.mk
include scripts/vm/bundle.mk

PYTEST = python3 -m pytest
# make test's builds use every core: on 2 cores a serial build left one
# idle for minutes while the suites that start after it waited.
JOBS ?= $(shell nproc 2>/dev/null || echo 2)

# After the build every pass runs to its end, whatever the ones before it
# did, and one summary at the end says what failed (tests/keep-going.sh).
# The unit, integration and hostile tests run once, against the sanitizer
# build; the main pass runs the rest and what only the plain build can
# (markers set in tests/conftest.py).  The main pass needs only the plain
# build, so it runs in the background (test-main) beside the sanitizer
# build and pass, as the VM suites do.  Alone the sanitizer pass uses
# under half of two cores; beside everything else both are busy from the
# build to the end either way, so make test's time is its CPU seconds
# over the cores (each pass prints its own), wherever a pass runs, if
# the longest chains never wait: the deploy suite (nice -10,
# tests/deploy/deploy.mk), then the sanitizer build and pass (nice -5:
# at the suites' priority the build took 500 s for its 130 CPU seconds,
# and the pass ended minutes after everything else, on half-idle cores).
CHAIN_NICE = $(if $(filter 0,$(shell id -u)),nice -n -5)
# The sanitizer pass on two workers, a file each at a time (pytest-xdist,
# which scripts/install-deps.sh installs): on one it was the last to end,
# for minutes, on half-idle cores.  Without xdist, one worker.
SAN_WORKERS = $(shell python3 -c 'import xdist' 2>/dev/null && printf -- '-n 2 --dist loadfile')
test: deps
	$(MAKE) test-deploy-image-start
	PVGPU_LEFT_OUT_SAID= $(MAKE) -j$(JOBS) all fuzz guest-driver build-minimal cross-arm64
	$(MAKE) test-deploy-start test-main-start test-demo-vm-start test-rdma-start \
		test-xen-start test-timed-start
	@tests/keep-going.sh $(BUILD)/test-logs \
		build-asan '$(CHAIN_NICE) $(MAKE) -j$(JOBS) BUILD=build-asan SANITIZE=1 NVCC_REUSE=$(BUILD) all' \
		sanitizer 'PVGPU_BUILD=build-asan $(CHAIN_NICE) $(PYTEST) -q -m sanitized \
			--durations=10 $(SAN_WORKERS)' \
		main '$(MAKE) --no-print-directory test-main-wait' \
		demo-vm '$(MAKE) --no-print-directory test-demo-vm-wait' \
		rdma '$(MAKE) --no-print-directory test-rdma-wait' \
		xen '$(MAKE) --no-print-directory test-xen-wait' \
		deploy '$(MAKE) --no-print-directory test-deploy-wait' \
		timed '$(MAKE) --no-print-directory test-timed-wait'

# The main pass: what the sanitizer pass leaves out, but for the timed
# tests and the demo's.  Without -s: its log stays one line per file, as
# in the foreground.  Its slowest tests are listed: it was make test's
# longest chain on CI, alone on one of two cores for its last minutes.
.PHONY: test-main
test-main: | $(BG_DIR)/main
	$(PYTEST) -q -p no:cacheprovider --basetemp=$(abspath $(BG_DIR))/main/tmp \
		--durations=15 -m "not sanitized or plain_build" \
		$(TIMED_TESTS:%=--ignore=%) $(DEMO_VM_TESTS:%=--ignore=%)

# make demo's guest boots, the longest file of the VM tests (a third of
# the main pass's time), in a pass of its own beside the main one: their
# guests have their own folders, sockets and vhost-device-vsock.
DEMO_VM_TESTS = tests/vm/test_demo.py
.PHONY: test-demo-vm
test-demo-vm: | $(BG_DIR)/demo-vm
	$(call BG_PYTEST,demo-vm) -m "not sanitized or plain_build" $(DEMO_VM_TESTS)

# Tests that run for a set time and take whatever CPU is free meanwhile
# (the fuzzers, the hostile soak's two minutes): in the foreground they
# held every later pass up for that whole time, so make test runs them in
# the background beside the VM suites (tests/background.mk) and its main
# pass leaves them out.
TIMED_TESTS = tests/fuzz tests/rdma/test_verbs_fuzz.py tests/hostile/test_soak_hostile.py
.PHONY: test-timed
test-timed: | $(BG_DIR)/timed
	$(call BG_PYTEST,timed) $(TIMED_TESTS)

# The slowest tests' times at the end: a device lent by the minute is
# planned by them.
test-gpu:
	$(MAKE) all
	$(PYTEST) -q -m gpu --durations=20 tests/gpu

# The main job inside a guest; where no guest can be booted (exit 3: no
# qemu or guest kernel, as on the GPU machine), the same job as a local process.
# A machine without a package registry (the GPU host) still runs the demo
# with what it has: a failed install is said, not fatal.
demo:
	@scripts/install-deps.sh || echo "demo: installing what is missing failed" \
		"(no package registry here?): going on with what this machine has"
	PVGPU_LEFT_OUT_SAID= $(MAKE) all
	@scripts/demo_vm.py --build $(BUILD); rc=$$?; \
	if [ $$rc = 3 ]; then echo "demo: running pvgpu-synth as a local process instead"; \
		BUILD=$(BUILD) scripts/demo.sh; else exit $$rc; fi

clean:
	rm -rf build build-asan build-minimal build-arm64

-include $(shell find $(OBJ_DIR) -name '*.d' 2>/dev/null)
