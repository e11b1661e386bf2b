/* watchdog.c - a limit on how long one call may run (see watchdog.h). */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "pvgpu_proto.h"
#include "supervisor.h"
#include "watchdog.h"

/* --- worker side ----------------------------------------------------------- */

/*
 * Once per call, batched launches included: the coarse clock (limits are
 * seconds; it errs by a tick, towards a longer call) and plain release
 * stores, which the supervisor's timer reads whenever it likes.
 */
void pvgpu_watchdog_begin(struct pvgpu_slot *slot, uint16_t opcode)
{
	atomic_store_explicit(&slot->call_opcode, opcode, memory_order_relaxed);
	atomic_store_explicit(&slot->call_started_ns, pvgpu_now_coarse_ns(),
			      memory_order_release);
}

void pvgpu_watchdog_end(struct pvgpu_slot *slot)
{
	atomic_store_explicit(&slot->call_started_ns, 0, memory_order_release);
}

uint64_t pvgpu_watchdog_pause(struct pvgpu_slot *slot)
{
	uint64_t t0 = atomic_exchange(&slot->call_started_ns, 0);

	/* What the call had run so far, plus one so that 0 means "none". */
	return t0 ? pvgpu_now_ns() - t0 + 1 : 0;
}

void pvgpu_watchdog_resume(struct pvgpu_slot *slot, uint64_t paused)
{
	if (paused)
		atomic_store(&slot->call_started_ns, pvgpu_now_ns() - (paused - 1));
}

/* --- supervisor side ------------------------------------------------------- */

int pvgpu_watchdog_init(struct pvgpu_supervisor *sv)
{
	sv->wd_killed = calloc(sv->acct->nslots, 1);
	if (!sv->wd_killed) {
		log_error("out of memory for the watchdog");
		return -1;
	}
	sv->timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	if (sv->timerfd < 0) {
		log_error("timerfd: %s", strerror(errno));
		return -1;
	}
	pvgpu_watchdog_arm(sv);
	return 0;
}

void pvgpu_watchdog_fini(struct pvgpu_supervisor *sv)
{
	if (sv->timerfd >= 0)
		close(sv->timerfd);
	sv->timerfd = -1;
	free(sv->wd_killed);
	sv->wd_killed = NULL;
}

/* The limit for a session of VM entry vm, in ms; 0: none. */
static uint64_t limit_ms(const struct pvgpu_supervisor *sv, int vm)
{
	const struct pvgpu_policy *p = sv->policy;

	if (p && vm >= 0) {
		if (p->unknown.entry == vm && p->unknown.call_timeout_ms >= 0)
			return (uint64_t)p->unknown.call_timeout_ms;
		for (unsigned int i = 0; i < p->nvms; i++)
			if (p->vms[i].entry == vm && p->vms[i].call_timeout_ms >= 0)
				return (uint64_t)p->vms[i].call_timeout_ms;
	}
	return sv->call_timeout_ms;
}

void pvgpu_watchdog_arm(struct pvgpu_supervisor *sv)
{
	const struct pvgpu_policy *p = sv->policy;
	struct itimerspec its = { { 0, 0 }, { 0, 0 } };
	/* Slots waiting to be freed are retried on the tick too (supervisor.c). */
	int needed = sv->call_timeout_ms > 0 || sv->ngone;

	for (unsigned int i = 0; p && !needed && i < p->nvms; i++)
		needed = p->vms[i].call_timeout_ms > 0;
	if (p && p->unknown.call_timeout_ms > 0)
		needed = 1;
	/* Set again only on a change: each setting puts the next tick off. */
	if (sv->timerfd < 0 || needed == sv->ticking)
		return;
	if (needed) {
		its.it_interval.tv_nsec = PVGPU_WATCHDOG_TICK_MS * 1000000L;
		its.it_value = its.it_interval;
	}
	if (timerfd_settime(sv->timerfd, 0, &its, NULL)) {
		log_warn("timerfd_settime: %s; the call watchdog is off",
			 strerror(errno));
		return;
	}
	sv->ticking = needed;
}

void pvgpu_watchdog_tick(struct pvgpu_supervisor *sv)
{
	uint64_t expirations, now = pvgpu_now_ns();

	if (read(sv->timerfd, &expirations, sizeof(expirations)) < 0)
		return;		/* EAGAIN: nothing yet */
	for (uint32_t i = 0; i < sv->acct->nslots; i++) {
		struct pvgpu_slot *slot = &sv->acct->slots[i];
		uint64_t t0 = atomic_load(&slot->call_started_ns), limit;
		const struct pvgpu_op_info *info;
		int vm = atomic_load(&slot->vm);

		/* pid -1: forked a moment ago, not yet recorded. */
		if (slot->pid <= 0 || !t0 || sv->wd_killed[i] || now < t0)
			continue;
		limit = limit_ms(sv, vm);
		if (!limit || now - t0 <= limit * 1000000u)
			continue;
		info = pvgpu_op_info((uint16_t)atomic_load(&slot->call_opcode));
		log_warn("session %llu (%s, vm %s): watchdog: %s has run %.1f s, past the call timeout of %.1f s; killing worker pid %d",
			 (unsigned long long)slot->session_id, slot->identity,
			 vm < 0 ? "-" : sv->acct->vms[vm].name,
			 info ? info->name : "?", (double)(now - t0) / 1e9,
			 (double)limit / 1e3, (int)slot->pid);
		kill(slot->pid, SIGKILL);
		sv->wd_killed[i] = 1;
	}
}

int pvgpu_watchdog_killed(struct pvgpu_supervisor *sv,
			  const struct pvgpu_slot *slot)
{
	return sv->wd_killed && sv->wd_killed[slot - sv->acct->slots];
}

void pvgpu_watchdog_forget(struct pvgpu_supervisor *sv,
			   const struct pvgpu_slot *slot)
{
	if (sv->wd_killed)
		sv->wd_killed[slot - sv->acct->slots] = 0;
}
