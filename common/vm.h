/*
 * vm.h - what a channel knows of the VM that calls on it: the record the
 * registry of VMs (host-backend/daemon/registry.h) keeps for each, and
 * which a transport's host half fills in for a caller it can name (the
 * vhost-user socket or the CID it came from).  Shared by the transports
 * and the daemon, so neither reaches into the other.
 */
#ifndef PVGPU_VM_H
#define PVGPU_VM_H

#include <stdint.h>

#define PVGPU_VM_NAME_LEN	64
#define PVGPU_PATH_LEN		256
#define PVGPU_UNIX_PATH_LEN	108	/* sizeof(sockaddr_un.sun_path) */

/* A VM's window as the registry describes it; path "" when it has none. */
struct pvgpu_vm_window {
	char path[PVGPU_PATH_LEN];
	uint64_t size;
	uint64_t id;
	uint64_t staging_offset;
	uint32_t slot_size, nslots;
};

struct pvgpu_vm_record {
	char name[PVGPU_VM_NAME_LEN];
	struct pvgpu_vm_window window;
	int vhost_user;			/* 0: kernel vsock, identified by cid */
	unsigned int cid;
	unsigned int port;
	char listen[PVGPU_UNIX_PATH_LEN];	/* vhost-user: where we listen */
	unsigned int gpu;
	uint64_t memory;		/* quota in bytes; 0: none */
	int entry;			/* its index in the shared VM table */
};

#endif /* PVGPU_VM_H */
