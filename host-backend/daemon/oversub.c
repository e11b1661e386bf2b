/* oversub.c - see oversub.h. */
#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "oversub.h"
#include "supervisor.h"
#include "suspend.h"

#define SETTLE_NS	((uint64_t)PVGPU_OVERSUB_SETTLE_MS * 1000000ull)
/* The supervisor's "no room" lines: at most one a second. */
#define SAY_NS		(1000 * 1000000ull)

int pvgpu_oversub_on(struct pvgpu_supervisor *sv, int dev)
{
	return sv->policy && dev >= 0 && dev < PVGPU_MAX_DEVICES &&
	       sv->policy->oversub_milli[dev] > 1000 &&
	       sv->suspend.mem_total[dev] &&
	       sv->wcfg.exec->checkpoint;
}

/* A suspend of a session holding memory on dev is under way. */
static int suspending_on(struct pvgpu_supervisor *sv, int dev)
{
	for (int i = 0; i < PVGPU_MAX_CHECKPOINTERS; i++) {
		struct pvgpu_ckpt *ck = &sv->suspend.ck[i];

		if (ck->pid && !ck->resume &&
		    atomic_load(&sv->acct->slots[ck->slot].mem_used[dev]))
			return 1;
	}
	return 0;
}

static int any_checkpointer(struct pvgpu_supervisor *sv)
{
	for (int i = 0; i < PVGPU_MAX_CHECKPOINTERS; i++)
		if (sv->suspend.ck[i].pid)
			return 1;
	return 0;
}

static int candidate(struct pvgpu_supervisor *sv, struct pvgpu_slot *c,
		     struct pvgpu_slot *self, int dev, uint64_t now)
{
	int32_t vm = atomic_load(&c->vm);

	return c != self && c->pid > 0 &&
	       atomic_load(&c->state) == PVGPU_SLOT_RUNNING &&
	       atomic_load(&c->mem_used[dev]) &&
	       !atomic_load(&c->call_started_ns) &&
	       !(vm >= 0 && atomic_load(&sv->acct->vms[vm].exclusive)) &&
	       now - atomic_load(&c->resumed_ns) >= SETTLE_NS;
}

/*
 * Start suspends on dev, least recently active first, until they would
 * free need bytes.  1: some started or a checkpointer is at work (wait
 * for the reaps); 0: nothing more can be done.
 */
static int make_room(struct pvgpu_supervisor *sv, struct pvgpu_slot *self,
		     int dev, uint64_t need)
{
	uint64_t now = pvgpu_now_ns(), freed = 0, could = 0;
	int started = 0;

	/* Suspending all of them would not do: move nobody for nothing. */
	for (uint32_t i = 0; i < sv->acct->nslots; i++)
		if (candidate(sv, &sv->acct->slots[i], self, dev, now))
			could += atomic_load(&sv->acct->slots[i].mem_used[dev]);
	if (could < need)
		return 0;
	while (freed < need) {
		struct pvgpu_slot *best = NULL;
		char why[128];

		for (uint32_t i = 0; i < sv->acct->nslots; i++) {
			struct pvgpu_slot *c = &sv->acct->slots[i];

			if (candidate(sv, c, self, dev, now) &&
			    (!best || atomic_load(&c->guest_seen_ns) <
				      atomic_load(&best->guest_seen_ns)))
				best = c;
		}
		if (!best)
			break;
		freed += atomic_load(&best->mem_used[dev]);
		if (pvgpu_suspend_start(sv, best, 0, why, sizeof(why))) {
			/* No checkpointer free: the next reap looks again. */
			return started || any_checkpointer(sv);
		}
		log_info("session %llu: suspending it to make room on device %d",
			 (unsigned long long)best->session_id, dev);
		started = 1;
	}
	return started;
}

/* Bytes past the device's memory were `more` added on dev (0: they fit). */
static uint64_t deficit(struct pvgpu_supervisor *sv, int dev, uint64_t more)
{
	uint64_t used = pvgpu_accounting_mem_used(sv->acct, dev) + more;
	uint64_t total = sv->suspend.mem_total[dev];

	/* The part of it the policy gives VMs ([gpu N] memory), if less. */
	if (sv->policy && sv->policy->mem_cap[dev] &&
	    sv->policy->mem_cap[dev] < total)
		total = sv->policy->mem_cap[dev];

	return used > total ? used - total : 0;
}

static void answer(struct pvgpu_slot *s)
{
	atomic_store(&s->room_bytes, 0);
	atomic_fetch_add(&s->room_seq, 1);
	syscall(SYS_futex, &s->room_seq, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

void pvgpu_oversub_serve(struct pvgpu_supervisor *sv)
{
	for (uint32_t i = 0; i < sv->acct->nslots; i++) {
		struct pvgpu_slot *s = &sv->acct->slots[i];
		uint64_t bytes = atomic_load(&s->room_bytes), need;
		uint32_t dev = atomic_load(&s->room_dev);

		if (!bytes || s->pid <= 0)
			continue;
		if (!pvgpu_oversub_on(sv, (int)dev)) {
			answer(s);
			continue;
		}
		if (suspending_on(sv, (int)dev))
			continue;	/* answered when they are done */
		need = deficit(sv, (int)dev, bytes);
		if (need && make_room(sv, s, (int)dev, need))
			continue;
		answer(s);
	}
}

int pvgpu_oversub_resume_ok(struct pvgpu_supervisor *sv, struct pvgpu_slot *s)
{
	for (int dev = 0; dev < PVGPU_MAX_DEVICES; dev++) {
		uint64_t mine = atomic_load(&s->mem_used[dev]), need, now;

		if (!mine || !pvgpu_oversub_on(sv, dev))
			continue;
		if (suspending_on(sv, dev))
			return 0;
		need = deficit(sv, dev, mine);
		if (!need)
			continue;
		if (make_room(sv, s, dev, need))
			return 0;
		/* The worker asks again (resume.c): by then one may have settled. */
		atomic_store(&s->resume_wanted, 0);
		now = pvgpu_now_ns();
		if (now - sv->suspend.room_said_ns >= SAY_NS) {
			sv->suspend.room_said_ns = now;
			log_info("session %llu: no room on device %d to resume it yet (every other session there is busy, exclusive or resumed under %d ms ago)",
				 (unsigned long long)s->session_id, dev,
				 PVGPU_OVERSUB_SETTLE_MS);
		}
		return 0;
	}
	return 1;
}
