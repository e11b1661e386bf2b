# verbs:// (transport/verbs/): both halves in one shared object,
# $(BUILD)/lib/pvgpu/transport-verbs.so, dlopen'd by the guest client (and
# so by the remote executor) and by pvgpud, so that neither needs rdma-core
# unless it speaks verbs.  Built only where libibverbs-dev and
# librdmacm-dev are installed; elsewhere one line says it was left out.
VERBS_SO   = $(BUILD)/lib/pvgpu/transport-verbs.so
VERBS_SRC  = $(wildcard transport/verbs/*.c)
VERBS_LIBS := $(shell pkg-config --libs libibverbs librdmacm 2>/dev/null)

ifeq ($(VERBS_LIBS),)
$(call left_out,libibverbs-dev librdmacm-dev: no verbs:// transport (transport-verbs.so))
else
# common/addr.c: HOST:PORT read as tcp:// reads it.
$(VERBS_SO): $(call objs,$(VERBS_SRC) common/addr.c)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -shared -Wl,-z,defs -o $@ $^ $(VERBS_LIBS)

all c-parts: $(VERBS_SO)
endif

# The private-data and slot-header checks need no rdma-core: a unit test
# links verbs_wire.c alone.
$(BUILD)/tests/unit/verbs_wire_test: $(OBJ_DIR)/transport/verbs/verbs_wire.o

# tests/rdma's misbehaving guest (bad private data, garbage on the QP).
ifneq ($(VERBS_LIBS),)
VERBS_PEER = $(BUILD)/tests/rdma/verbs-peer
$(OBJ_DIR)/tests/rdma/%.o: CFLAGS += -Itransport/verbs
$(VERBS_PEER): $(call objs,tests/rdma/verbs_peer.c transport/verbs/verbs_wire.c)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(VERBS_LIBS)
all: $(VERBS_PEER)
endif

# libFuzzer, with `make fuzz`: the private data and slot headers a peer
# sends (no rdma-core needed).
fuzz: $(BUILD)/fuzz/fuzz_verbs_wire
$(BUILD)/fuzz/fuzz_verbs_wire: tests/rdma/fuzz_verbs_wire.c transport/verbs/verbs_wire.c transport/verbs/verbs_wire.h
	@mkdir -p $(dir $@)
	$(FUZZ_CC) -g -O1 -fsanitize=fuzzer,address,undefined -std=c11 -D_GNU_SOURCE \
		-Itransport/verbs -o $@ tests/rdma/fuzz_verbs_wire.c transport/verbs/verbs_wire.c

# tests/rdma/test_rdma.py boots one QEMU guest with Soft-RoCE (about 5
# minutes under TCG), so make test runs it in a process of its own beside
# the rest (tests/background.mk: test-rdma-start, test-rdma-wait):
#   make test-rdma         in the foreground
.PHONY: test-rdma
test-rdma: | $(BG_DIR)/rdma
	PVGPU_RDMA_TESTS=1 PVGPU_BUILD=$(abspath $(BUILD)) \
		$(call BG_PYTEST,rdma) tests/rdma/test_rdma.py

# tests/rdma's pinned-memory program (zero-copy over verbs://).
PINNED_COPIES = $(BUILD)/tests/rdma/pinned-copies
$(PINNED_COPIES): $(call objs,tests/rdma/pinned_copies.c) $(BUILD)/lib/libcuda.so.1
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $< -L$(BUILD)/lib -l:libcuda.so.1
# Over pvgpu's libcuda.so.1, so only where that is built (libclang): a GPU
# host without libclang must still make everything else.
ifeq ($(HAVE_LIBCLANG),1)
all: $(PINNED_COPIES)
endif
