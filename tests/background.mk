# tests/background.mk - the slow suites, each in a process of its own beside
# the rest of `make test` (included by the top-level Makefile).  A suite
# NAME is the target test-NAME, run in the foreground; here, for each:
#
#   make test-NAME-start   run `make test-NAME` in the background
#   make test-NAME-wait    wait for that run, print its log, fail if it did
#
# `make test` starts each once what it needs is built and waits for them
# at the end.  A suite's log and exit status are $(BG_DIR)/NAME/log and
# rc; its pytest keeps its temporary files under $(BG_DIR)/NAME/tmp
# (BG_PYTEST), where the pytest runs beside it do not clean up.  Its
# target takes the folder as an order-only prerequisite (test-NAME: |
# $(BG_DIR)/NAME): pytest makes --basetemp, not the folders above it.

BG_DIR = $(BUILD)/background
# $(call BG_PYTEST,NAME): pytest for suite NAME.
BG_PYTEST = python3 -m pytest -q -s -p no:cacheprovider \
	--basetemp=$(abspath $(BG_DIR))/$(1)/tmp

$(BG_DIR)/%:
	@mkdir -p $@

# Pattern rules (not .PHONY, which would turn the search for them off).
# The suite's seconds and CPU seconds (its processes', QEMU's included)
# go to took: on two cores the suites share, CPU is what a cut must save.
test-%-start: | $(BG_DIR)/%
	@rm -f $(BG_DIR)/$*/rc $(BG_DIR)/$*/took
	@( start=$$(date +%s); \
	   $(MAKE) --no-print-directory test-$* >$(BG_DIR)/$*/log 2>&1; rc=$$?; \
	   times >$(BG_DIR)/$*/times; \
	   echo "$$(( $$(date +%s) - start )) s," \
		"$$(scripts/cpu-seconds.sh $(BG_DIR)/$*/times) CPU-s" >$(BG_DIR)/$*/took; \
	   echo $$rc >$(BG_DIR)/$*/rc ) </dev/null >/dev/null 2>&1 &
	@echo "test-$*: started in the background, log: $(BG_DIR)/$*/log"

test-%-wait:
	@while [ ! -f $(BG_DIR)/$*/rc ]; do sleep 5; done
	@echo "==== make test-$* (log: $(BG_DIR)/$*/log) ===="
	@cat $(BG_DIR)/$*/log
	@echo "==== make test-$*: took $$(cat $(BG_DIR)/$*/took)"
	@exit $$(cat $(BG_DIR)/$*/rc)
