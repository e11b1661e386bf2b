/*
 * admit.h - the policy file put to work: which VM a caller is, whether it
 * may start one more session, and the limits the workers read from the
 * shared accounting table.
 *
 * Every caller is admitted by the supervisor before it forks a worker:
 * Unix, vsock, vchan and verbs callers at accept, a TCP caller once the
 * supervisor has read its hello and put its token in peer->id
 * (unidentified.h).  All go through pvgpu_admit() so that the same rules
 * hold for every channel.
 */
#ifndef PVGPU_ADMIT_H
#define PVGPU_ADMIT_H

#include <stddef.h>

#include "accounting.h"
#include "host.h"
#include "policy.h"
#include "registry.h"

/*
 * Give every VM of p (and the pool of unknown callers) its entry in the
 * shared table and write its limits there, for workers old and new.  0, or
 * -1 with one line in err and nothing changed but entry names.
 */
int pvgpu_policy_apply(struct pvgpu_policy *p, struct pvgpu_accounting *acct,
		       char *err, size_t errlen);

/*
 * Give every VM of the registry its entry in the shared table, and write
 * there the quota and GPU qemu-device recorded for it, except for VMs the
 * policy file names (p may be NULL): their [vm] section's limits win.
 * Called after pvgpu_policy_apply whenever either changes.
 */
void pvgpu_registry_apply(struct pvgpu_registry *r,
			  const struct pvgpu_policy *p,
			  struct pvgpu_accounting *acct);

/*
 * Decide the VM of peer (by peer->id: a TCP caller's is the token of its
 * hello) and take one of its sessions: 0 with slot->vm set, or -1 with
 * why the caller is refused in why.  A peer the registry names
 * (peer->vm.name) is that VM.  p may be NULL (no policy file): then a
 * registered VM is admitted, a vsock peer no VM is registered for is
 * refused, and a local Unix caller is let in without a VM.
 */
int pvgpu_admit(const struct pvgpu_policy *p, struct pvgpu_accounting *acct,
		struct pvgpu_slot *slot, const struct pvgpu_peer *peer,
		char *why, size_t whylen);

#endif /* PVGPU_ADMIT_H */
