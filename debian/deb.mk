# debian/deb.mk - `make deb`: pvgpu's Debian packages (included by the
# top-level Makefile).
#
#   make deb                  pvgpu-host, pvgpu-sim, pvgpu-guest, pvgpu-dkms,
#                             pvgpu-xen
#                             into $(DEB_DIR), then lintian (errors fail)
#   make deb PVGPU_DEB_VERSION=V DEB_DIR=D   the same programs as
#                             another version, elsewhere
#   make deb DEB_LINTIAN=no   without lintian (the deploy tests' second
#                             build: the same tree, checked by the first)
#
# The version is the Makefile's PVGPU_VERSION (debian/version.sh, from
# git), the one pvgpud --version prints; debian/changelog is written from
# it here and is not tracked.  The programs are built into $(BUILD) by the
# rules above, so `make && make deb` compiles nothing twice.

DEB_DIR ?= $(BUILD)/deb
DEB_VERSION = $(or $(PVGPU_DEB_VERSION),$(PVGPU_VERSION))
DEB_LINTIAN ?= yes
DEB_LINTIAN_CMD = lintian --fail-on error --suppress-tags-from-file debian/lintian-suppress $(DEB_DIR)/*.deb

.PHONY: deb
deb:
	@command -v dh >/dev/null || { echo "make deb: debhelper missing (make deps)" >&2; exit 1; }
	dpkg-checkbuilddeps
	debian/changelog.sh "$(DEB_VERSION)" > debian/changelog
	rm -rf $(DEB_DIR) && mkdir -p $(DEB_DIR)
	PVGPU_BUILD=$(BUILD) debian/rules build
	PVGPU_BUILD=$(BUILD) PVGPU_DEB_DIR=$(abspath $(DEB_DIR)) debian/rules binary
	debian/rules clean
	$(if $(filter yes,$(DEB_LINTIAN)),$(DEB_LINTIAN_CMD),@echo "make deb: no lintian (DEB_LINTIAN=$(DEB_LINTIAN))")
	@ls -1 $(DEB_DIR)
