# xen-vchan/: the Xen vchan transport (both halves), its probe and tests.
# Included from the top Makefile.  Built only where libxen-dev is installed
# (pkg-config xenvchan): everything else builds without it, and `make`
# says in one line that vchan was left out.
XEN_PKGS    = xenvchan xengnttab xenstore xenevtchn
XEN_LIBS   := $(shell pkg-config --libs $(XEN_PKGS) 2>/dev/null)
XEN_CFLAGS := $(shell pkg-config --cflags $(XEN_PKGS) 2>/dev/null)

VCHAN_PROBE = $(BUILD)/xen/vchan-probe
VCHAN_IO_SRC = xen-vchan/vchan_io.c

ifneq ($(XEN_LIBS),)
all: xen-vchan
.PHONY: xen-vchan
xen-vchan: $(VCHAN_PROBE)

$(OBJ_DIR)/xen-vchan/%.o: CFLAGS += $(XEN_CFLAGS)

$(VCHAN_PROBE): $(call objs,xen-vchan/probe.c $(VCHAN_IO_SRC))
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(XEN_LIBS)
else
all: xen-vchan-skipped
.PHONY: xen-vchan-skipped
xen-vchan-skipped:
	@echo "xen-vchan: left out (no libxen-dev: pkg-config xenvchan not found)"
endif
