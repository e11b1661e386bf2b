/*
 * registry.h - the VMs qemu-device attached a vGPU to (pvgpud --registry DIR).
 *
 * `pvgpu-vm` writes one file per VM, DIR/VM.conf, with lines `key = value`
 * (qemu-device/README.md, "The registry").  From it pvgpud learns, for each
 * VM, which channel is that VM — a vsock CID with kernel vsock, or the Unix
 * socket vhost-device-vsock forwards the VM's connections to — and which
 * host file is its shared window.  A VM's identity is that channel, never a
 * field in a message (DESIGN §5).
 *
 * The files are parsed with inih like the policy file.  An entry that
 * cannot be parsed is left out with one log line; an entry whose window
 * file does not match what it says keeps its vsock channel but has no
 * window, also with one line.
 */
#ifndef PVGPU_REGISTRY_H
#define PVGPU_REGISTRY_H

#include <stddef.h>
#include <stdint.h>

#include "identity.h"
#include "policy.h"
#include "vm.h"

#define PVGPU_REGISTRY_MAX	64

struct pvgpu_registry {
	struct pvgpu_vm_record vms[PVGPU_REGISTRY_MAX];
	unsigned int nvms;
};

/*
 * Read every DIR/NAME.conf into r (emptied first).  Entries that cannot be
 * used are logged and skipped; -1 only when DIR itself cannot be read, with
 * one line in err.
 */
int pvgpu_registry_load(const char *dir, struct pvgpu_registry *r,
			char *err, size_t errlen);

/* The registered VM the channel's identity names (a vsock CID), or NULL. */
const struct pvgpu_vm_record *pvgpu_registry_lookup(const struct pvgpu_registry *r,
						    const struct pvgpu_identity *id);
const struct pvgpu_vm_record *pvgpu_registry_by_name(const struct pvgpu_registry *r,
						     const char *name);

/*
 * Open the window file of w for mapping, checking it is still what the
 * registry says: a regular file (no symlink) of exactly w->size bytes whose
 * header has the registered magic, layout, size, id and ring.  The fd, or
 * -1 with one line in err.
 */
int pvgpu_vm_window_open(const struct pvgpu_vm_window *w, char *err,
			 size_t errlen);

#endif /* PVGPU_REGISTRY_H */
