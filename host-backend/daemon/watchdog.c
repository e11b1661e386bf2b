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
 * stores, which the supervisor's timer reads whenever it likes.  The same
 * reading says when the guest was last heard from, for the idle limit.
 */
void pvgpu_watchdog_begin(struct pvgpu_slot *slot, uint16_t opcode)
{
	uint64_t now = pvgpu_now_coarse_ns();

	atomic_store_explicit(&slot->call_opcode, opcode, memory_order_relaxed);
	atomic_store_explicit(&slot->guest_seen_ns, now, memory_order_relaxed);
	atomic_store_explicit(&slot->call_started_ns, now, memory_order_release);
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
	uint64_t now;

	if (!paused)
		return;
	/* The guest answered (or a bounded wait of the call's own ended). */
	now = pvgpu_now_ns();
	atomic_store_explicit(&slot->guest_seen_ns, now, memory_order_relaxed);
	atomic_store(&slot->call_started_ns, now - (paused - 1));
}

/* --- supervisor side ------------------------------------------------------- */

int pvgpu_watchdog_init(struct pvgpu_supervisor *sv)
{
	sv->wd_killed = calloc(sv->acct->nslots, 1);
	sv->wd_busy_ns = calloc(sv->acct->nslots, sizeof(*sv->wd_busy_ns));
	if (!sv->wd_killed || !sv->wd_busy_ns) {
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
	free(sv->wd_busy_ns);
	sv->wd_busy_ns = NULL;
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

/*
 * The idle limit for a session of VM entry vm, in ms; 0: none.  A VM the
 * file does not name (a registered one) has [default]'s.
 */
static uint64_t idle_ms(const struct pvgpu_supervisor *sv, int vm)
{
	const struct pvgpu_policy *p = sv->policy;

	if (!p || vm < 0)
		return 0;
	for (unsigned int i = 0; i < p->nvms; i++)
		if (p->vms[i].entry == vm)
			return p->vms[i].idle_timeout_ms > 0 ?
			       (uint64_t)p->vms[i].idle_timeout_ms : 0;
	return p->unknown.idle_timeout_ms > 0 ?
	       (uint64_t)p->unknown.idle_timeout_ms : 0;
}

void pvgpu_watchdog_arm(struct pvgpu_supervisor *sv)
{
	const struct pvgpu_policy *p = sv->policy;
	struct itimerspec its = { { 0, 0 }, { 0, 0 } };
	/* Slots waiting to be freed are retried on the tick too (supervisor.c). */
	int needed = sv->call_timeout_ms > 0 || sv->ngone;

	for (unsigned int i = 0; p && !needed && i < p->nvms; i++)
		needed = p->vms[i].call_timeout_ms > 0 ||
			 p->vms[i].idle_timeout_ms > 0;
	if (p && (p->unknown.call_timeout_ms > 0 ||
		  p->unknown.idle_timeout_ms > 0))
		needed = 1;
	/* Set again only on a change: each setting puts the next tick off. */
	if (sv->timerfd < 0 || needed == sv->ticking)
		return;
	if (needed) {
		its.it_interval.tv_nsec = PVGPU_WATCHDOG_TICK_MS * 1000000L;
		its.it_value = its.it_interval;
	}
	if (timerfd_settime(sv->timerfd, 0, &its, NULL)) {
		log_warn("timerfd_settime: %s; the watchdog is off",
			 strerror(errno));
		return;
	}
	sv->ticking = needed;
}

enum { WD_CALL = 1, WD_IDLE = 2 };	/* wd_killed[]: why */

static void kill_call(struct pvgpu_supervisor *sv, uint32_t i, uint64_t now,
		      uint64_t t0)
{
	struct pvgpu_slot *slot = &sv->acct->slots[i];
	int vm = atomic_load(&slot->vm);
	uint64_t limit = limit_ms(sv, vm);
	const struct pvgpu_op_info *info;

	if (!limit || now < t0 || now - t0 <= limit * 1000000u)
		return;
	info = pvgpu_op_info((uint16_t)atomic_load(&slot->call_opcode));
	log_warn("session %llu (%s, vm %s): watchdog: %s has run %.1f s, past the call timeout of %.1f s; killing worker pid %d",
		 (unsigned long long)slot->session_id, slot->identity,
		 vm < 0 ? "-" : sv->acct->vms[vm].name,
		 info ? info->name : "?", (double)(now - t0) / 1e9,
		 (double)limit / 1e3, (int)slot->pid);
	kill(slot->pid, SIGKILL);
	sv->wd_killed[i] = WD_CALL;
}

/*
 * No call runs: the session is idle since the later of its start, the
 * last word from its guest, and the last tick that saw a call running
 * (a long call that ended a moment ago is not idleness).  A worker that
 * was stopped between calls is idle too; SIGKILL ends it all the same.
 */
static void kill_idle(struct pvgpu_supervisor *sv, uint32_t i, uint64_t now)
{
	struct pvgpu_slot *slot = &sv->acct->slots[i];
	int vm = atomic_load(&slot->vm);
	uint64_t limit = idle_ms(sv, vm), since;

	if (!limit)
		return;
	since = (uint64_t)slot->started.tv_sec * 1000000000u +
		(uint64_t)slot->started.tv_nsec;
	if (since < atomic_load(&slot->guest_seen_ns))
		since = atomic_load(&slot->guest_seen_ns);
	if (since < sv->wd_busy_ns[i])
		since = sv->wd_busy_ns[i];
	if (now < since || now - since <= limit * 1000000u)
		return;
	log_warn("session %llu (%s, vm %s): watchdog: nothing from the guest for %.1f s, past the idle timeout of %.1f s; killing worker pid %d",
		 (unsigned long long)slot->session_id, slot->identity,
		 vm < 0 ? "-" : sv->acct->vms[vm].name,
		 (double)(now - since) / 1e9, (double)limit / 1e3,
		 (int)slot->pid);
	kill(slot->pid, SIGKILL);
	sv->wd_killed[i] = WD_IDLE;
}

void pvgpu_watchdog_tick(struct pvgpu_supervisor *sv)
{
	uint64_t expirations, now = pvgpu_now_ns();

	if (read(sv->timerfd, &expirations, sizeof(expirations)) < 0)
		return;		/* EAGAIN: nothing yet */
	for (uint32_t i = 0; i < sv->acct->nslots; i++) {
		struct pvgpu_slot *slot = &sv->acct->slots[i];
		uint64_t t0 = atomic_load(&slot->call_started_ns);

		/* pid -1: forked a moment ago, not yet recorded. */
		if (slot->pid <= 0 || sv->wd_killed[i])
			continue;
		if (t0) {
			sv->wd_busy_ns[i] = now;
			kill_call(sv, i, now, t0);
		} else {
			kill_idle(sv, i, now);
		}
	}
}

const char *pvgpu_watchdog_killed(struct pvgpu_supervisor *sv,
				  const struct pvgpu_slot *slot)
{
	switch (sv->wd_killed ? sv->wd_killed[slot - sv->acct->slots] : 0) {
	case WD_CALL:
		return "worker killed by the watchdog (call timeout)";
	case WD_IDLE:
		return "worker killed by the watchdog (idle timeout)";
	default:
		return NULL;
	}
}

void pvgpu_watchdog_forget(struct pvgpu_supervisor *sv,
			   const struct pvgpu_slot *slot)
{
	if (sv->wd_killed)
		sv->wd_killed[slot - sv->acct->slots] = 0;
	if (sv->wd_busy_ns)
		sv->wd_busy_ns[slot - sv->acct->slots] = 0;
}
