/* accounting.c - the shared session table (see accounting.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include "accounting.h"

static size_t table_size(uint32_t nslots)
{
	return sizeof(struct pvgpu_accounting) +
	       (size_t)nslots * sizeof(struct pvgpu_slot);
}

/* The locks live in the shared mapping, so every worker takes the same one. */
static int init_locks(struct pvgpu_accounting *acct)
{
	for (int i = 0; i < PVGPU_MAX_VM_ENTRIES; i++)
		if (pvgpu_shlock_init(&acct->vms[i].lock, "quota lock of an unnamed VM entry"))
			return -1;
	if (pvgpu_shlock_init(&acct->gpu_lock, "exclusive-mode lock of the GPUs") ||
	    pvgpu_shlock_init(&acct->ipc_lock, "lock of the IPC registry"))
		return -1;
	return 0;
}

struct pvgpu_accounting *pvgpu_accounting_create(uint32_t nslots)
{
	struct pvgpu_accounting *acct;

	acct = mmap(NULL, table_size(nslots), PROT_READ | PROT_WRITE,
		    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (acct == MAP_FAILED)
		return NULL;
	acct->nslots = nslots;	/* the mapping comes zeroed: all slots free */
	for (uint32_t i = 0; i < nslots; i++)
		acct->slots[i].vm = -1;
	if (init_locks(acct)) {
		munmap(acct, table_size(nslots));
		return NULL;
	}
	return acct;
}

void pvgpu_accounting_destroy(struct pvgpu_accounting *acct)
{
	if (acct)
		munmap(acct, table_size(acct->nslots));
}

struct pvgpu_slot *pvgpu_accounting_claim(struct pvgpu_accounting *acct)
{
	for (uint32_t i = 0; i < acct->nslots; i++) {
		struct pvgpu_slot *slot = &acct->slots[i];

		if (slot->pid == 0) {
			pvgpu_accounting_release(slot);
			slot->pid = -1;	/* taken; the real pid comes after fork */
			return slot;
		}
	}
	return NULL;
}

struct pvgpu_slot *pvgpu_accounting_by_pid(struct pvgpu_accounting *acct,
					   pid_t pid)
{
	for (uint32_t i = 0; i < acct->nslots; i++)
		if (acct->slots[i].pid == pid)
			return &acct->slots[i];
	return NULL;
}

void pvgpu_accounting_release(struct pvgpu_slot *slot)
{
	slot->pid = 0;
	slot->session_id = 0;
	slot->identity[0] = '\0';
	atomic_store(&slot->vm, -1);
	atomic_store(&slot->mem_pending, 0);
	atomic_store(&slot->host_pinned, 0);
	atomic_store(&slot->gpus_held, 0);
	atomic_store(&slot->call_started_ns, 0);
	atomic_store(&slot->call_opcode, 0);
	atomic_store(&slot->calls, 0);
	atomic_store(&slot->bytes_h2d, 0);
	atomic_store(&slot->bytes_d2h, 0);
	atomic_store(&slot->gpu_ns, 0);
	atomic_store(&slot->guest_pid, 0);
	atomic_store(&slot->state, PVGPU_SLOT_RUNNING);
	atomic_store(&slot->resume_wanted, 0);
	atomic_store(&slot->room_bytes, 0);
	atomic_store(&slot->room_dev, 0);
	atomic_store(&slot->resumed_ns, 0);
	atomic_store(&slot->detached, PVGPU_ATTACHED);
	for (int d = 0; d < PVGPU_MAX_DEVICES; d++)
		atomic_store(&slot->mem_used[d], 0);
}

uint64_t pvgpu_accounting_mem_used(struct pvgpu_accounting *acct, int dev)
{
	uint64_t sum = 0;

	if (dev < 0 || dev >= PVGPU_MAX_DEVICES)
		return 0;
	/* A suspended session's bytes are in its worker's host memory. */
	for (uint32_t i = 0; i < acct->nslots; i++)
		if (acct->slots[i].pid &&
		    atomic_load(&acct->slots[i].state) != PVGPU_SLOT_SUSPENDED)
			sum += atomic_load(&acct->slots[i].mem_used[dev]);
	return sum;
}

uint64_t pvgpu_accounting_slot_mem(struct pvgpu_slot *slot)
{
	uint64_t sum = 0;

	for (int d = 0; d < PVGPU_MAX_DEVICES; d++)
		sum += atomic_load(&slot->mem_used[d]);
	return sum;
}

int pvgpu_accounting_vm_get(struct pvgpu_accounting *acct, const char *name)
{
	for (int i = 0; i < PVGPU_MAX_VM_ENTRIES; i++) {
		struct pvgpu_vm_entry *e = &acct->vms[i];

		if (!strcmp(e->name, name))
			return i;
		if (!e->name[0]) {
			snprintf(e->name, sizeof(e->name), "%s", name);
			snprintf(e->lock.name, sizeof(e->lock.name),
				 "quota lock of vm %s", e->name);
			return i;
		}
	}
	return -1;
}

/* Workers only: the supervisor takes no lock a worker can hold (admit.c). */
static void vm_lock(struct pvgpu_accounting *acct, int vm)
{
	/* A holder that died in it leaves nothing to repair: what it guards is atomics. */
	(void)pvgpu_shlock_take(&acct->vms[vm].lock, acct);
}

static void vm_unlock(struct pvgpu_accounting *acct, int vm)
{
	pvgpu_shlock_give(&acct->vms[vm].lock);
}

uint32_t pvgpu_accounting_vm_sessions(struct pvgpu_accounting *acct, int vm)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < acct->nslots; i++)
		n += acct->slots[i].pid && atomic_load(&acct->slots[i].vm) == vm;
	return n;
}

uint64_t pvgpu_accounting_vm_mem_used(struct pvgpu_accounting *acct, int vm)
{
	uint64_t sum = 0;

	for (uint32_t i = 0; i < acct->nslots; i++) {
		struct pvgpu_slot *s = &acct->slots[i];

		if (!s->pid || atomic_load(&s->vm) != vm)
			continue;
		sum += atomic_load(&s->mem_pending);
		for (int d = 0; d < PVGPU_MAX_DEVICES; d++)
			sum += atomic_load(&s->mem_used[d]);
	}
	return sum;
}

int pvgpu_accounting_charge(struct pvgpu_accounting *acct,
			    struct pvgpu_slot *slot, uint64_t size)
{
	int vm = atomic_load(&slot->vm);
	uint64_t quota, used;
	int rc = 0;

	if (vm < 0) {
		atomic_fetch_add(&slot->mem_pending, size);
		return 0;
	}
	vm_lock(acct, vm);
	quota = atomic_load(&acct->vms[vm].quota);
	used = pvgpu_accounting_vm_mem_used(acct, vm);
	if (quota && (used > quota || size > quota - used))
		rc = -1;
	else
		atomic_fetch_add(&slot->mem_pending, size);
	vm_unlock(acct, vm);
	return rc;
}

void pvgpu_accounting_commit(struct pvgpu_slot *slot, int dev, uint64_t size)
{
	/* Used before no longer pending: a concurrent count may see it twice, never not at all. */
	atomic_fetch_add(&slot->mem_used[dev], size);
	atomic_fetch_sub(&slot->mem_pending, size);
}

void pvgpu_accounting_uncharge(struct pvgpu_slot *slot, uint64_t size)
{
	atomic_fetch_sub(&slot->mem_pending, size);
}

int pvgpu_accounting_pin(struct pvgpu_accounting *acct,
			 struct pvgpu_slot *slot, uint64_t size)
{
	int vm = atomic_load(&slot->vm);
	uint64_t quota, used;
	int rc = 0;

	if (vm < 0) {
		atomic_fetch_add(&slot->host_pinned, size);
		return 0;
	}
	vm_lock(acct, vm);
	quota = atomic_load(&acct->vms[vm].pinned_quota);
	used = pvgpu_accounting_vm_pinned(acct, vm);
	if (quota && (used > quota || size > quota - used))
		rc = -1;
	else
		atomic_fetch_add(&slot->host_pinned, size);
	vm_unlock(acct, vm);
	return rc;
}

void pvgpu_accounting_unpin(struct pvgpu_slot *slot, uint64_t size)
{
	atomic_fetch_sub(&slot->host_pinned, size);
}

uint64_t pvgpu_accounting_vm_pinned(struct pvgpu_accounting *acct, int vm)
{
	uint64_t sum = 0;

	for (uint32_t i = 0; i < acct->nslots; i++) {
		struct pvgpu_slot *s = &acct->slots[i];

		if (s->pid && atomic_load(&s->vm) == vm)
			sum += atomic_load(&s->host_pinned);
	}
	return sum;
}
