/* admit.c - the policy applied to callers and to the shared table (see admit.h). */
#include <stdio.h>

#include "admit.h"
#include "handles.h"
#include "modcache.h"

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
		atomic_store(&e->ipc_max, all[i]->ipc_handles);
		atomic_store(&e->modcache_max, all[i]->module_cache);
		atomic_store(&e->handles_max, all[i]->handles);
		atomic_store(&e->exclusive, all[i]->mode == VM_EXCLUSIVE);
		atomic_store(&e->exclusive_wait_ms,
			     all[i]->exclusive_wait_ms > 0 ?
			     (uint32_t)all[i]->exclusive_wait_ms : 0);
	}
	return 0;
}

void pvgpu_registry_apply(struct pvgpu_registry *r,
			  const struct pvgpu_policy *p,
			  struct pvgpu_accounting *acct)
{
	for (unsigned int i = 0; i < r->nvms; i++) {
		struct pvgpu_vm_record *rec = &r->vms[i];
		const struct pvgpu_vm_policy *named =
			p ? pvgpu_policy_by_name(p, rec->name) : NULL;
		struct pvgpu_vm_entry *e;

		if (named) {
			rec->entry = named->entry;
			continue;
		}
		rec->entry = pvgpu_accounting_vm_get(acct, rec->name);
		if (rec->entry < 0)
			continue;	/* admission refuses it, saying why */
		e = &acct->vms[rec->entry];
		atomic_store(&e->quota, rec->memory);
		atomic_store(&e->max_sessions, 0);
		atomic_store(&e->gpus, 1u << rec->gpu);
		atomic_store(&e->ipc_max, PVGPU_IPC_PER_VM);
		atomic_store(&e->modcache_max, PVGPU_MODCACHE_PER_VM);
		atomic_store(&e->handles_max, PVGPU_HANDLES_PER_SESSION);
	}
}

int pvgpu_admit(const struct pvgpu_policy *p, struct pvgpu_accounting *acct,
		struct pvgpu_slot *slot, const struct pvgpu_peer *peer,
		char *why, size_t whylen)
{
	const struct pvgpu_vm_policy *vm = NULL;
	const char *name;
	uint32_t max, live;
	int e;

	if (peer->vm.name[0]) {
		/* Registered: the channel says which VM. */
		vm = p ? pvgpu_policy_by_name(p, peer->vm.name) : NULL;
		e = vm ? vm->entry : peer->vm.entry;
		name = peer->vm.name;
		if (e < 0) {
			snprintf(why, whylen, "no room for vm %s: at most %d VM names per daemon lifetime",
				 name, PVGPU_MAX_VM_ENTRIES - 1);
			return -1;
		}
	} else if (!p) {
		if (peer->features & PVGPU_TR_VM_CALLERS) {
			snprintf(why, whylen, "%s %s is not attached to any VM",
				 pvgpu_id_kind_name(peer->id.kind), peer->id.value);
			return -1;
		}
		return 0;	/* a local caller, no policy: as without a registry */
	} else {
		/* A name the channel vouches for (Xen: dom0's) names the VM. */
		vm = peer->name[0] ? pvgpu_policy_by_name(p, peer->name) : NULL;
		if (!vm)
			vm = pvgpu_policy_lookup(p, &peer->id);
		if (!vm) {
			if (!p->allow_unknown) {
				snprintf(why, whylen, "%s names no [vm] of the policy and [default] policy = refuse",
					 peer->id.kind == PVGPU_ID_TOKEN ?
					 "its token" : "its identity");
				return -1;
			}
			vm = &p->unknown;
		}
		e = vm->entry;
		name = vm->name;
	}
	/* A token holds only from the VM's own addresses, where it lists any. */
	if (vm && peer->addr[0] && !pvgpu_policy_addr_ok(vm, peer->addr)) {
		snprintf(why, whylen, "source address %s is not one of vm %s's addresses",
			 peer->addr, name);
		return -1;
	}
	/*
	 * Count, then take, with no lock: only the supervisor makes or ends
	 * sessions (it alone writes a slot's pid and vm, in its one thread;
	 * metrics are served from its own loop), so nothing can take the last
	 * session between the two.  Workers only read them.  And the VM's
	 * lock, which its workers take, is one the supervisor must never wait
	 * on: a worker stopped while holding it would stop every admission.
	 */
	max = atomic_load(&acct->vms[e].max_sessions);
	live = pvgpu_accounting_vm_sessions(acct, e);
	if (max && live >= max) {
		snprintf(why, whylen, "vm %s already has %u session(s), its max_sessions",
			 name, live);
		return -1;
	}
	atomic_store(&slot->vm, e);
	return 0;
}
