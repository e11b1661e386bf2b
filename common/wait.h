/*
 * wait.h - how both halves wait for the other side: spin first, because
 * the answer usually comes within microseconds and a wake-up from the
 * kernel costs more than that; then give the core away; then nap, looking
 * now and then whether to stop.
 */
#ifndef PVGPU_WAIT_H
#define PVGPU_WAIT_H

#include <stdint.h>

#include "clock.h"
#include "relax.h"

/*
 * How long a call that waits on the device (a synchronize, a synchronous
 * copy) is watched by spinning before the watcher sleeps, as NVIDIA's
 * driver spins (yielding between looks after the first 2 ms): the guest's
 * PVGPU_WAIT_SPIN_US and the worker's --wait-spin-us, by default.  A
 * watcher asleep when the device is done costs the call a wake-up.
 */
#define PVGPU_WAIT_SPIN_US	200000u

/*
 * A bounded busy poll: call pvgpu_poll_again() after each attempt that
 * found nothing; it returns 0 once budget_ns have passed since the first
 * call.  The clock is read every 64th call only: reading it costs more
 * than a look at a socket or a counter.  The CPU pauses every 8th call
 * only: on recent Xeons a PAUSE takes longer than a look at a cache line
 * (~70 ns), and pausing after every look added it to each crossing of the
 * control ring (a round trip 535-557 ns without, 623-656 ns with;
 * docs/benchmarks-history.md, 2026-11-25); every 8th still keeps the loop
 * from flooding the memory pipeline or starving a hyper-thread sibling.
 */
struct pvgpu_poll {
	unsigned int i;
	uint64_t start, now;	/* the clock at the first call, and at the last read */
	uint64_t deadline;
};

static inline int pvgpu_poll_again(struct pvgpu_poll *p, uint64_t budget_ns)
{
	if ((p->i++ & 63) == 0) {
		p->now = pvgpu_now_ns();
		if (!p->deadline) {
			p->start = p->now;
			p->deadline = p->now + budget_ns;
		} else if (p->now > p->deadline) {
			return 0;
		}
	}
	if ((p->i & 7) == 0)
		pvgpu_cpu_relax();
	return 1;
}

enum pvgpu_wait_result {
	PVGPU_WAIT_READY,	/* ready() said yes */
	PVGPU_WAIT_STOPPED,	/* stop() said give up */
	PVGPU_WAIT_TIMEOUT,	/* neither, for timeout_ns of napping */
};

/*
 * Spin, then yield, then nap 20 us at a time until ready(arg).  stop(arg)
 * is asked only once napping, where a poll of the channel is cheap next
 * to the nap; timeout_ns counts from the first nap, so a peer that is
 * merely slow is not one that went away.
 */
enum pvgpu_wait_result pvgpu_spin_wait(int (*ready)(void *arg),
				       int (*stop)(void *arg), void *arg,
				       uint64_t timeout_ns);

#endif /* PVGPU_WAIT_H */
