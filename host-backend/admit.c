/* admit.c - the policy applied to callers and to the shared table (see admit.h). */
#include <stdio.h>

#include "admit.h"

int pvgpu_policy_apply(struct pvgpu_policy *p, struct pvgpu_accounting *acct,
		       char *err, size_t errlen)
{
	struct pvgpu_vm_policy *all[PVGPU_POLICY_MAX_VMS + 1];
	unsigned int n = 0;

	all[n++] = &p->unknown;
	for (unsigned int i = 0; i < p->nvms; i++)
		all[n++] = &p->vms[i];
	/*
	 * Entries are kept for names that left the file (their sessions may
	 * still run), so reloads with ever new names can fill the table.
	 * Find them all first: a policy that does not fit changes no limit.
	 */
	for (unsigned int i = 0; i < n; i++) {
		all[i]->entry = pvgpu_accounting_vm_get(acct, all[i]->name);
		if (all[i]->entry < 0) {
			snprintf(err, errlen, "no room for [vm %s]: at most %d VM names per daemon lifetime",
				 all[i]->name, PVGPU_MAX_VM_ENTRIES - 1);
			return -1;
		}
	}
	for (unsigned int i = 0; i < n; i++) {
		struct pvgpu_vm_entry *e = &acct->vms[all[i]->entry];

		atomic_store(&e->quota, all[i]->memory);
		atomic_store(&e->max_sessions, all[i]->max_sessions);
		atomic_store(&e->gpus, all[i]->gpus);
		atomic_store(&e->pinned_quota, all[i]->pinned);
		atomic_store(&e->exclusive, all[i]->mode == VM_EXCLUSIVE);
		atomic_store(&e->exclusive_wait_ms,
			     all[i]->exclusive_wait_ms > 0 ?
			     (uint32_t)all[i]->exclusive_wait_ms : 0);
	}
	return 0;
}

static const struct pvgpu_vm_policy *caller_vm(const struct pvgpu_policy *p,
					       const struct pvgpu_peer *peer,
					       const char *token)
{
	switch (peer->kind) {
	case EP_UNIX:
		return pvgpu_policy_by_uid(p, peer->uid);
	case EP_VSOCK:
		return pvgpu_policy_by_cid(p, peer->cid);
	case EP_TCP:
		return pvgpu_policy_by_token(p, token ? token : "");
	}
	return NULL;
}

int pvgpu_admit(const struct pvgpu_policy *p, struct pvgpu_accounting *acct,
		struct pvgpu_slot *slot, const struct pvgpu_peer *peer,
		const char *token, char *why, size_t whylen)
{
	const struct pvgpu_vm_policy *vm = caller_vm(p, peer, token);
	uint32_t max, live;
	int e;

	if (!vm) {
		if (!p->allow_unknown) {
			snprintf(why, whylen, "%s names no [vm] of the policy and [default] policy = refuse",
				 peer->kind == EP_TCP ? "its token" : "its identity");
			return -1;
		}
		vm = &p->unknown;
	}
	e = vm->entry;
	/* Count and take under the lock: two callers must not both get the last session. */
	pvgpu_accounting_vm_lock(acct, e);
	max = atomic_load(&acct->vms[e].max_sessions);
	live = pvgpu_accounting_vm_sessions(acct, e);
	if (max && live >= max) {
		pvgpu_accounting_vm_unlock(acct, e);
		snprintf(why, whylen, "vm %s already has %u session(s), its max_sessions",
			 vm->name, live);
		return -1;
	}
	atomic_store(&slot->vm, e);
	pvgpu_accounting_vm_unlock(acct, e);
	return 0;
}
