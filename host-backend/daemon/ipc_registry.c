/*
 * ipc_registry.c - allocations exported with cuIpcGetMemHandle and events
 * with cuIpcGetEventHandle, shared by every worker through the
 * supervisor's table (accounting.h).
 *
 * A guest never holds the driver's IPC handle: any process on the host
 * could open that, whichever VM it serves.  It holds a random token, and
 * the registry gives the handle back only to a session of the VM that
 * exported it, while the exporting session lives.  Each VM holds at
 * most its own share of the table (ipc_handles), so one VM's exports
 * never make another's fail.
 */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/random.h>

#include "accounting.h"

static void lock(struct pvgpu_accounting *acct)
{
	/* A worker died holding it: an entry it was writing goes with its
	 * session, so there is nothing to repair. */
	(void)pvgpu_shlock_take(&acct->ipc_lock, acct);
}

/*
 * Is the session that made e still served?  Its slot says: a slot is
 * reused by later sessions, a session id never.
 */
static int entry_live(struct pvgpu_accounting *acct,
		      const struct pvgpu_ipc_entry *e)
{
	const struct pvgpu_slot *s;

	if (!e->session_id || e->slot >= acct->nslots)
		return 0;
	s = &acct->slots[e->slot];
	return s->pid && s->session_id == e->session_id;
}

int pvgpu_ipc_put(struct pvgpu_accounting *acct, struct pvgpu_slot *slot,
		  enum pvgpu_ipc_kind kind, const uint8_t handle[64], uint64_t size,
		  uint8_t token[PVGPU_IPC_TOKEN])
{
	int32_t vm = atomic_load(&slot->vm);
	uint32_t max = vm >= 0 ? atomic_load(&acct->vms[vm].ipc_max) : 0;
	struct pvgpu_ipc_entry *e = NULL;
	uint32_t held = 0;
	int rc;

	if (getrandom(token, PVGPU_IPC_TOKEN, 0) != PVGPU_IPC_TOKEN)
		return -EIO;
	lock(acct);
	/*
	 * The VM's bound holds over all its sessions, so its live entries
	 * are counted wherever they are, in the same pass that finds a free
	 * one.
	 */
	for (int i = 0; i < PVGPU_MAX_IPC; i++) {
		struct pvgpu_ipc_entry *x = &acct->ipc[i];

		if (!entry_live(acct, x)) {
			if (!e)
				e = x;
		} else if (vm >= 0 && x->vm == vm) {
			held++;
		}
	}
	if (max && held >= max) {
		rc = -EDQUOT;
	} else if (!e) {
		rc = -ENOSPC;
	} else {
		e->session_id = slot->session_id;
		e->slot = (uint32_t)(slot - acct->slots);
		e->vm = vm;
		e->kind = kind;
		memcpy(e->token, token, PVGPU_IPC_TOKEN);
		memcpy(e->handle, handle, 64);
		e->size = size;
		rc = 0;
	}
	pvgpu_shlock_give(&acct->ipc_lock);
	return rc;
}

int pvgpu_ipc_get(struct pvgpu_accounting *acct, struct pvgpu_slot *slot,
		  enum pvgpu_ipc_kind kind, const uint8_t token[PVGPU_IPC_TOKEN],
		  uint8_t handle[64], uint64_t *size)
{
	int32_t vm = atomic_load(&slot->vm);
	int rc = -1;

	lock(acct);
	for (int i = 0; i < PVGPU_MAX_IPC; i++) {
		struct pvgpu_ipc_entry *e = &acct->ipc[i];

		if (!entry_live(acct, e) || e->vm != vm || e->kind != kind ||
		    memcmp(e->token, token, PVGPU_IPC_TOKEN))
			continue;
		memcpy(handle, e->handle, 64);
		*size = e->size;
		rc = 0;
		break;
	}
	pvgpu_shlock_give(&acct->ipc_lock);
	return rc;
}
