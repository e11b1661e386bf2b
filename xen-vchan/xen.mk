# xen-vchan/: the Xen vchan transport (both halves), its probe and tests.
# Included from the top Makefile.  Built only where libxen-dev is installed
# (pkg-config xenvchan): everything else builds without it, and `make`
# says in one line that vchan was left out.
#
#   $(BUILD)/lib/pvgpu/transport-vchan.so   both halves, dlopened at run time
#                                     by the transport registry
#   $(BUILD)/xen/xen-cuda             driver-API checks a domU runs (tests/xen)
#   $(BUILD)/xen/vchan-probe          the bare libxenvchan pair
#   $(BUILD)/xen/vchan-echo           the .so end to end (tests/xen)
#   $(BUILD)/xen/vchan-fuzz           randomized decoder test (no libxen)
#   $(BUILD)/xen/stack-sample         where a stuck pvgpud is (tests/xen's
#                                     stall report; static: dom0 has no libc6-dev)
XEN_PKGS    = xenvchan xengnttab xenstore xenevtchn
XEN_LIBS   := $(shell pkg-config --libs $(XEN_PKGS) 2>/dev/null)
XEN_CFLAGS := $(shell pkg-config --cflags $(XEN_PKGS) 2>/dev/null)

VCHAN_SO    = $(BUILD)/lib/pvgpu/transport-vchan.so
XEN_CUDA    = $(BUILD)/xen/xen-cuda
VCHAN_PROBE = $(BUILD)/xen/vchan-probe
VCHAN_ECHO  = $(BUILD)/xen/vchan-echo
VCHAN_FUZZ  = $(BUILD)/xen/vchan-fuzz
STACK_SAMPLE = $(BUILD)/xen/stack-sample
VCHAN_SRC   = xen-vchan/vchan_io.c xen-vchan/vchan_proto.c \
              xen-vchan/vchan_guest.c xen-vchan/vchan_host.c

# The decoders need no libxen: their randomized test always builds.
all: $(VCHAN_FUZZ)
# The module binds both halves to transport/'s ops tables; like every
# transport it sees nothing of the daemon's (no BACKEND_INC).
$(OBJ_DIR)/xen-vchan/%.o $(OBJ_DIR)/tests/xen/%.o: CFLAGS += -Ixen-vchan $(XEN_CFLAGS)
$(VCHAN_FUZZ): $(call objs,tests/xen/vchan_fuzz.c xen-vchan/vchan_proto.c \
		xen-vchan/vchan_parse.c)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^

# libFuzzer flavour of the same target, with `make fuzz`.
fuzz: $(BUILD)/fuzz/fuzz_vchan
$(BUILD)/fuzz/fuzz_vchan: tests/xen/vchan_fuzz.c xen-vchan/vchan_proto.c xen-vchan/vchan_parse.c \
		$(wildcard xen-vchan/*.h) common/window.h
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -g -O1 -fsanitize=fuzzer,address,undefined -std=c11 -D_GNU_SOURCE \
		-DPVGPU_LIBFUZZER -Icommon -Itransport -Ixen-vchan \
		-o $@ tests/xen/vchan_fuzz.c xen-vchan/vchan_proto.c xen-vchan/vchan_parse.c

ifneq ($(XEN_LIBS),)
all: xen-vchan
.PHONY: xen-vchan
xen-vchan: $(VCHAN_SO) $(VCHAN_PROBE) $(VCHAN_ECHO) $(XEN_CUDA) $(STACK_SAMPLE)

$(STACK_SAMPLE): tests/xen/stack_sample.c
	@mkdir -p $(dir $@)
	$(CC) -O1 -g -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -static -o $@ $<

$(VCHAN_SO): $(call objs,$(VCHAN_SRC) xen-vchan/vchan_parse.c xen-vchan/vchan_module.c)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -shared -Wl,-z,defs -o $@ $^ $(XEN_LIBS)

$(XEN_CUDA): $(call objs,tests/xen/xen_cuda.c) $(BUILD)/lib/libcuda.so.1
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< -L$(BUILD)/lib -l:libcuda.so.1

$(VCHAN_PROBE): $(call objs,xen-vchan/probe.c xen-vchan/vchan_io.c)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(XEN_LIBS)

# The echo test links the host half directly and dlopens the guest half.
$(VCHAN_ECHO): $(call objs,tests/xen/vchan_echo.c $(VCHAN_SRC) xen-vchan/vchan_parse.c)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(XEN_LIBS) -ldl
else
all: xen-vchan-skipped
.PHONY: xen-vchan-skipped
xen-vchan-skipped:
	@echo "xen-vchan: left out (no libxen-dev: pkg-config xenvchan not found)"
endif

# The suites that boot Xen (tests/xen/test_xen_boot.py: the bare vchan
# pair and transport-vchan.so with two domUs; tests/xen/test_xen_pvgpud.py:
# pvgpud in dom0 and the same two domUs), one boot for both
# (tests/xen/conftest.py), 3-6 minutes on 2 shared cores under TCG, in a process of their own beside the rest
# (tests/background.mk: `make test` starts test-xen once `make all` is done
# and waits for it at the end).  The plain pytest run skips them.
#
#   make test-xen            in the foreground
#   make test-xen-e2e        only the pvgpud suite, in the foreground
#
# Where Xen cannot be booted (no qemu, kernel or Xen packages) or vchan was
# left out, the suites skip saying why.  A boot ends when its console has
# been silent for PVGPU_XEN_QUIET seconds (default 300) or after
# PVGPU_XEN_TIMEOUT in all (tests/xen/xenvm.py).
XEN_PYTEST   = PVGPU_XEN_TESTS=1 $(call BG_PYTEST,xen)

.PHONY: test-xen test-xen-e2e
test-xen: | $(BG_DIR)/xen
	$(XEN_PYTEST) tests/xen/test_xen_boot.py tests/xen/test_xen_pvgpud.py

test-xen-e2e: | $(BG_DIR)/xen
	$(XEN_PYTEST) tests/xen/test_xen_pvgpud.py
