# The "remote" executor (host-backend/exec/remote/): a plugin,
# $(BUILD)/lib/pvgpud/exec-remote.so, that forwards a session's work to
# other pvgpud nodes through the guest's own protocol client.  A plugin, not
# built in: it carries a second protocol stack (the client, its transports
# and through them verbs) that pvgpud itself never needs, and a host that
# does not forward simply does not install it.
REMOTE_EXEC = $(BUILD)/lib/pvgpud/exec-remote.so
REMOTE_SRC  = host-backend/exec/remote/exec_remote.c \
              $(wildcard guest-lib/client/*.c) $(GEN_DIR)/pvgpu_guest.c \
              $(PROTO_SRC) $(COMMON_SRC) $(TRANSPORT_GUEST_SRC)

$(OBJ_DIR)/host-backend/exec/remote/%.o: CFLAGS += $(GUEST_INC)

$(REMOTE_EXEC): $(call objs,$(REMOTE_SRC))
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -shared -Wl,-z,defs -o $@ $^ $(LDLIBS)

all c-parts: $(REMOTE_EXEC)
