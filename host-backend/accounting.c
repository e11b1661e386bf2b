/* accounting.c - the shared session table (see accounting.h). */
#include <string.h>
#include <sys/mman.h>

#include "accounting.h"

static size_t table_size(uint32_t nslots)
{
	return sizeof(struct pvgpu_accounting) +
	       (size_t)nslots * sizeof(struct pvgpu_slot);
}

struct pvgpu_accounting *pvgpu_accounting_create(uint32_t nslots)
{
	struct pvgpu_accounting *acct;

	acct = mmap(NULL, table_size(nslots), PROT_READ | PROT_WRITE,
		    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (acct == MAP_FAILED)
		return NULL;
	acct->nslots = nslots;	/* the mapping comes zeroed: all slots free */
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
	atomic_store(&slot->calls, 0);
	atomic_store(&slot->bytes_h2d, 0);
	atomic_store(&slot->bytes_d2h, 0);
	for (int d = 0; d < PVGPU_MAX_DEVICES; d++)
		atomic_store(&slot->mem_used[d], 0);
}

uint64_t pvgpu_accounting_mem_used(struct pvgpu_accounting *acct, int dev)
{
	uint64_t sum = 0;

	if (dev < 0 || dev >= PVGPU_MAX_DEVICES)
		return 0;
	for (uint32_t i = 0; i < acct->nslots; i++)
		if (acct->slots[i].pid)
			sum += atomic_load(&acct->slots[i].mem_used[dev]);
	return sum;
}
