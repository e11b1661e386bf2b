/*
 * resume.c - a call that finds its session suspended (suspend.h) waits
 * while the supervisor resumes it, then goes on: the guest's program sees
 * nothing but time.  The worker never answers such a call itself; if no
 * resume comes within cfg->resume_wait_ns the session ends (the guest's
 * library sees its connection go, as when pvgpud stops) rather than the
 * guest be handed a CUresult no driver would have returned.
 */
#include <errno.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "policy.h"
#include "worker.h"

/* How long one sleep on the state lasts: the idle point's turn comes as often. */
#define RESUME_SLICE_NS	(100 * 1000000ull)
/* A resume that failed (the session stays suspended) is asked for again. */
#define RESUME_ASK_NS	(1000 * 1000000ull)

void pvgpu_worker_idle_point(struct pvgpu_worker *w)
{
	if (w->ex && w->ex_ops->idle_point)
		w->ex_ops->idle_point(w->ex);
}

static void ask(struct pvgpu_worker *w)
{
	uint64_t one = 1;

	atomic_store(&w->slot->resume_wanted, 1);
	/* Non-blocking: a full counter means the supervisor has been told. */
	(void)!write(w->cfg->wake_fd, &one, sizeof(one));
}

int pvgpu_worker_await_running(struct pvgpu_worker *w)
{
	struct pvgpu_slot *s = w->slot;
	uint32_t st = atomic_load(&s->state);
	uint64_t t0, asked, deadline;

	if (st == PVGPU_SLOT_RUNNING || !w->cfg->resume_wait_ns)
		return 0;
	t0 = asked = pvgpu_now_ns();
	deadline = t0 + w->cfg->resume_wait_ns;
	ask(w);
	while ((st = atomic_load(&s->state)) != PVGPU_SLOT_RUNNING) {
		uint64_t now = pvgpu_now_ns(), left = deadline - now;
		struct timespec ts;

		if (now >= deadline) {
			log_warn("a call waited %.1f s for its session's resume in vain; ending the session",
				 (double)(now - t0) / 1e9);
			return -1;
		}
		if (st == PVGPU_SLOT_SUSPENDED && !atomic_load(&s->resume_wanted) &&
		    now - asked >= RESUME_ASK_NS) {
			asked = now;
			ask(w);
		}
		if (left > RESUME_SLICE_NS)
			left = RESUME_SLICE_NS;
		ts.tv_sec = (time_t)(left / 1000000000u);
		ts.tv_nsec = (long)(left % 1000000000u);
		/* The slot is in a shared mapping: not a private futex. */
		syscall(SYS_futex, &s->state, FUTEX_WAIT, st, &ts, NULL, 0);
		/* The executor may need the worker's hands for the restore. */
		pvgpu_worker_idle_point(w);
	}
	log_debug("a call waited %.2f s for its session's resume",
		  (double)(pvgpu_now_ns() - t0) / 1e9);
	return 0;
}

int pvgpu_worker_make_room(struct pvgpu_worker *w, int dev, uint64_t bytes)
{
	struct pvgpu_slot *s = w->slot;
	const struct pvgpu_policy *p = w->cfg->policy;
	uint64_t one = 1, t0, deadline;
	uint32_t seq;

	if (!p || dev < 0 || dev >= PVGPU_MAX_DEVICES ||
	    p->oversub_milli[dev] <= 1000 || !w->cfg->resume_wait_ns ||
	    w->cfg->wake_fd < 0)
		return 0;
	seq = atomic_load(&s->room_seq);
	atomic_store(&s->room_dev, (uint32_t)dev);
	atomic_store(&s->room_bytes, bytes);	/* last: the request itself */
	(void)!write(w->cfg->wake_fd, &one, sizeof(one));
	t0 = pvgpu_now_ns();
	deadline = t0 + w->cfg->resume_wait_ns;
	while (atomic_load(&s->room_seq) == seq) {
		uint64_t now = pvgpu_now_ns(), left = deadline - now;
		struct timespec ts;

		if (now >= deadline) {
			/* Withdrawn: the retry's answer is the guest's. */
			atomic_store(&s->room_bytes, 0);
			log_warn("no answer to a request for room on device %d within %.1f s",
				 dev, (double)(now - t0) / 1e9);
			break;
		}
		if (left > RESUME_SLICE_NS)
			left = RESUME_SLICE_NS;
		ts.tv_sec = (time_t)(left / 1000000000u);
		ts.tv_nsec = (long)(left % 1000000000u);
		syscall(SYS_futex, &s->room_seq, FUTEX_WAIT, seq, &ts, NULL, 0);
	}
	log_debug("waited %.2f s for room on device %d",
		  (double)(pvgpu_now_ns() - t0) / 1e9, dev);
	return 1;
}

int pvgpu_worker_over_cap(struct pvgpu_worker *w, int dev, uint64_t bytes)
{
	const struct pvgpu_policy *p = w->cfg->policy;
	uint64_t cap, used;

	if (!p || dev < 0 || dev >= PVGPU_MAX_DEVICES || !p->mem_cap[dev])
		return 0;
	cap = p->mem_cap[dev];
	used = pvgpu_accounting_mem_used(w->acct, dev);
	return used > cap || bytes > cap - used;
}
