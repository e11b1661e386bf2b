# tests/deploy/deploy.mk - the deployment suite (tests/deploy/), included by
# the top-level Makefile.  It boots a Debian 12 VM under QEMU TCG, builds
# the packages, installs/upgrades/purges them there and applies
# ansible/site.yml (about 10-15 minutes on 2 cores), so it runs in a
# process of its own:
#
#   make test-deploy        run it in the foreground
#   make test-deploy-start  start it in the background (make test does,
#                           once `make all` is done); log in $(DEPLOY_LOG)
#   make test-deploy-wait   wait for that run, print its log, fail if it did
#
# Everything it caches (the debootstrap image, the packages) is under
# $(BUILD)/deploy.

DEPLOY_DIR = $(BUILD)/deploy
DEPLOY_LOG = $(DEPLOY_DIR)/test-deploy.log
DEPLOY_RC  = $(DEPLOY_DIR)/test-deploy.rc

.PHONY: test-deploy test-deploy-start test-deploy-wait
test-deploy:
	PVGPU_DEPLOY_TESTS=1 PVGPU_BUILD=$(abspath $(BUILD)) \
		python3 -m pytest -q -s -p no:cacheprovider tests/deploy

test-deploy-start:
	@mkdir -p $(DEPLOY_DIR)
	@rm -f $(DEPLOY_RC)
	@( $(MAKE) --no-print-directory test-deploy >$(DEPLOY_LOG) 2>&1; \
	   echo $$? >$(DEPLOY_RC) ) </dev/null >/dev/null 2>&1 &
	@echo "test-deploy: started in the background, log: $(DEPLOY_LOG)"

test-deploy-wait:
	@while [ ! -f $(DEPLOY_RC) ]; do sleep 5; done
	@echo "==== make test-deploy (log: $(DEPLOY_LOG)) ===="
	@cat $(DEPLOY_LOG)
	@exit $$(cat $(DEPLOY_RC))
