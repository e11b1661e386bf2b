# tests/deploy/deploy.mk - the deployment suite (tests/deploy/), included by
# the top-level Makefile.  It boots a Debian 12 VM under QEMU TCG, builds
# the packages, applies ansible/site.yml there (which installs them), then
# upgrades and purges them (about 20-27 minutes on 2 cores), so it runs in a
# process of its own (tests/background.mk: make test-deploy-start, once
# `make all` is done, and test-deploy-wait at the end):
#
#   make test-deploy        run it in the foreground
#
# Everything it caches (the debootstrap image, the packages) is under
# $(BUILD)/deploy.  The image needs nothing built and takes minutes of
# debootstrap: `make test` starts it first (test-deploy-image-start), beside
# the build, and the suite's own tests/deploy/make-image.sh waits for it.

# Under make test this suite is the longest chain of steps (image,
# packages, boot, install twice, upgrade, purge), and from the build to
# its end every core is busy: at the same priority as the other suites it
# got under half of what it needs and finished last, minutes after them.
# It runs at nice -10 (it needs root anyway), above the sanitizer build
# and pass (nice -5, the next longest chain: Makefile) and the other
# suites, which fill the time around it instead of stretching it; so does
# its image, which then takes a share of the build's cores and is there
# when the suite starts.
DEPLOY_NICE = $(if $(filter 0,$(shell id -u)),nice -n -10)

.PHONY: test-deploy
test-deploy: | $(BG_DIR)/deploy
	PVGPU_DEPLOY_TESTS=1 PVGPU_BUILD=$(abspath $(BUILD)) \
		$(DEPLOY_NICE) $(call BG_PYTEST,deploy) tests/deploy

.PHONY: test-deploy-image-start
test-deploy-image-start: | $(BG_DIR)/deploy
	@( $(DEPLOY_NICE) tests/deploy/make-image.sh $(abspath $(BUILD))/deploy \
	   >$(BG_DIR)/deploy/image.log 2>&1 & ) </dev/null >/dev/null 2>&1
	@echo "test-deploy: image started in the background, log: $(BG_DIR)/deploy/image.log"
