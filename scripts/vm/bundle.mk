# scripts/vm/bundle.mk - make vm-bundle (included by the top-level Makefile).
#
# $(BUILD)/vm-bundle.tar.xz: what a guest VM needs on a machine that has
# none of it (the GPU host: no package registry, no QEMU, no guest kernel),
# in one archive of at most 64 MiB, the most one call to it carries: QEMU
# with its libraries, TCG module and firmware, vhost-device-vsock, a static
# busybox, the guest kernel with its vsock modules and pvgpu.ko built for
# it (scripts/vm/bundle.py says how it is laid out).  Always rebuilt: its
# inputs are the system's, which make cannot see change; the same inputs
# give the same bytes.

VM_BUNDLE = $(BUILD)/vm-bundle.tar.xz

.PHONY: vm-bundle
vm-bundle:
	python3 scripts/vm/bundle.py --build $(BUILD) -o $(VM_BUNDLE)
