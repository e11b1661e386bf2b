/*
 * ipc_registry.c - allocations exported with cuIpcGetMemHandle and events
 * with cuIpcGetEventHandle, shared by every worker through the
 * supervisor's table (accounting.h).
 *
 * A guest never holds the driver's IPC handle: any process on the host
 * could open that, whichever VM it serves.  It holds a random token, and
 * the registry gives the handle back only to a session of the VM that
 * exported it, while the exporting session lives.
 */
#include <errno.h>
#include <string.h>
#include <sys/random.h>

#include "accounting.h"

static void lock(struct pvgpu_accounting *acct)
{
	if (pthread_mutex_lock(&acct->ipc_lock) == EOWNERDEAD)
		pthread_mutex_consistent(&acct->ipc_lock);
}

/* Is a session with this id still served? */
static int session_live(struct pvgpu_accounting *acct, uint64_t id)
{
	for (uint32_t i = 0; i < acct->nslots; i++)
		if (acct->slots[i].pid && acct->slots[i].session_id == id)
			return 1;
	return 0;
}

int pvgpu_ipc_put(struct pvgpu_accounting *acct, struct pvgpu_slot *slot,
		  enum pvgpu_ipc_kind kind, const uint8_t handle[64], uint64_t size,
		  uint8_t token[PVGPU_IPC_TOKEN])
{
	int rc = -1;

	if (getrandom(token, PVGPU_IPC_TOKEN, 0) != PVGPU_IPC_TOKEN)
		return -1;
	lock(acct);
	for (int i = 0; i < PVGPU_MAX_IPC; i++) {
		struct pvgpu_ipc_entry *e = &acct->ipc[i];

		if (e->session_id && session_live(acct, e->session_id))
			continue;
		e->session_id = slot->session_id;
		e->vm = atomic_load(&slot->vm);
		e->kind = kind;
		memcpy(e->token, token, PVGPU_IPC_TOKEN);
		memcpy(e->handle, handle, 64);
		e->size = size;
		rc = 0;
		break;
	}
	pthread_mutex_unlock(&acct->ipc_lock);
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

		if (!e->session_id || e->vm != vm || e->kind != kind ||
		    memcmp(e->token, token, PVGPU_IPC_TOKEN) ||
		    !session_live(acct, e->session_id))
			continue;
		memcpy(handle, e->handle, 64);
		*size = e->size;
		rc = 0;
		break;
	}
	pthread_mutex_unlock(&acct->ipc_lock);
	return rc;
}
