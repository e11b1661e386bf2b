/*
 * admit.h - the policy file put to work: which VM a caller is, whether it
 * may start one more session, and the limits the workers read from the
 * shared accounting table.
 *
 * Unix and vsock callers are admitted by the supervisor at accept, before
 * it forks; a TCP caller by its worker at hello, from the token.  Both go
 * through pvgpu_admit() so that the same rules hold for every channel.
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
 * Decide the VM of peer (token: what a TCP caller sent in hello, else
 * ignored) and take one of its sessions: 0 with slot->vm set, or -1 with
 * why the caller is refused in why.  A peer the registry names
 * (peer->vm.name) is that VM.  p may be NULL (no policy file): then a
 * registered VM is admitted, a vsock peer no VM is registered for is
 * refused, and a local Unix caller is let in without a VM.
 */
int pvgpu_admit(const struct pvgpu_policy *p, struct pvgpu_accounting *acct,
		struct pvgpu_slot *slot, const struct pvgpu_peer *peer,
		const char *token, char *why, size_t whylen);

#endif /* PVGPU_ADMIT_H */
