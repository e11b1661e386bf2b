/* wait.c - see wait.h. */
#include <sched.h>
#include <time.h>

#include "wait.h"

/* About 10 us of PAUSE on current x86, then as many yields. */
#define SPIN_LOOPS	4096u
#define YIELD_LOOPS	4096u
#define NAP_NS		(20 * 1000)

enum pvgpu_wait_result pvgpu_spin_wait(int (*ready)(void *arg),
				       int (*stop)(void *arg), void *arg,
				       uint64_t timeout_ns)
{
	uint64_t start = 0;

	for (unsigned int spins = 0;; spins++) {
		if (ready(arg))
			return PVGPU_WAIT_READY;
		if (spins < SPIN_LOOPS) {
			pvgpu_cpu_relax();
			continue;
		}
		if (spins < SPIN_LOOPS + YIELD_LOOPS) {
			sched_yield();
			continue;
		}
		if (!start)
			start = pvgpu_now_ns();
		if (stop && stop(arg))
			return PVGPU_WAIT_STOPPED;
		if (pvgpu_now_ns() - start > timeout_ns)
			return PVGPU_WAIT_TIMEOUT;
		{
			struct timespec nap = { 0, NAP_NS };

			nanosleep(&nap, NULL);
		}
		/* Past SPIN + YIELD it stays: no wrap back to spinning. */
		spins = SPIN_LOOPS + YIELD_LOOPS;
	}
}
