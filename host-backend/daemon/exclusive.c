/* exclusive.c - GPUs a VM has alone (see exclusive.h). */
#include <cuda.h>
#include <stdio.h>
#include <time.h>

#include "exclusive.h"
#include "host.h"
#include "log.h"
#include "loglimit.h"
#include "watchdog.h"

#define POLL_MS		20

static void gpu_lock(struct pvgpu_accounting *acct)
{
	/* A worker died holding it; what it guards is atomics, still sound. */
	(void)pvgpu_shlock_take(&acct->gpu_lock, acct);
}

/*
 * Under gpu_lock: a VM entry whose contexts on dev keep this session off
 * it, or -1.  Without a policy nobody is exclusive, and sessions of one VM
 * never exclude each other.
 */
static int excluded_by(struct pvgpu_accounting *acct,
		       const struct pvgpu_slot *slot, int dev)
{
	int me = atomic_load(&slot->vm), mine;
	uint32_t bit = 1u << dev;

	if (me < 0)
		return -1;
	mine = atomic_load(&acct->vms[me].exclusive);
	for (uint32_t i = 0; i < acct->nslots; i++) {
		const struct pvgpu_slot *s = &acct->slots[i];
		int other;

		if (s == slot || !s->pid || !(atomic_load(&s->gpus_held) & bit))
			continue;
		other = atomic_load(&s->vm);
		if (other < 0 || other == me)
			continue;
		if (mine || atomic_load(&acct->vms[other].exclusive))
			return other;
	}
	return -1;
}

static void why(struct pvgpu_accounting *acct, const struct pvgpu_slot *slot,
		int other, int dev, char *buf, size_t len)
{
	int me = atomic_load(&slot->vm);

	if (atomic_load(&acct->vms[other].exclusive))
		snprintf(buf, len, "vm %s has device %d in exclusive mode",
			 acct->vms[other].name, dev);
	else
		snprintf(buf, len, "vm %s is in exclusive mode and vm %s is using device %d",
			 acct->vms[me].name, acct->vms[other].name, dev);
}

static double ms_since(const struct timespec *t0)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (double)(now.tv_sec - t0->tv_sec) * 1e3 +
	       (double)(now.tv_nsec - t0->tv_nsec) / 1e6;
}

int32_t pvgpu_exclusive_take(struct pvgpu_accounting *acct,
			     struct pvgpu_slot *slot, int dev,
			     struct pvgpu_conn *conn,
			     struct pvgpu_log_limit *lim)
{
	uint32_t bit = 1u << dev;
	uint64_t paused = 0;
	struct timespec t0;
	double wait_ms = 0;
	int other, waiting = 0;
	char reason[192];

	if (atomic_load(&slot->gpus_held) & bit)
		return CUDA_SUCCESS;
	for (;;) {
		double left;

		gpu_lock(acct);
		other = excluded_by(acct, slot, dev);
		if (other < 0)
			atomic_fetch_or(&slot->gpus_held, bit);
		pvgpu_shlock_give(&acct->gpu_lock);
		if (other < 0)
			break;
		if (!waiting) {
			int vm = atomic_load(&slot->vm);

			/* Read once: a reload during the wait changes nothing here. */
			wait_ms = atomic_load(&acct->vms[vm].exclusive_wait_ms);
			clock_gettime(CLOCK_MONOTONIC, &t0);
			why(acct, slot, other, dev, reason, sizeof(reason));
			if (wait_ms > 0) {
				pvgpu_session_log(lim, LOG_INFO, "ctx_create on device %d waits up to %.1f s: %s",
						  dev, wait_ms / 1e3, reason);
				/* A bounded wait of its own, not a hung call. */
				paused = pvgpu_watchdog_pause(slot);
			}
			waiting = 1;
		}
		left = wait_ms - ms_since(&t0);
		/* The guest hung up: nobody is waiting for the answer any more. */
		if (left <= 0 || conn->ops->hung_up(conn)) {
			pvgpu_watchdog_resume(slot, paused);
			why(acct, slot, other, dev, reason, sizeof(reason));
			if (wait_ms > 0)
				pvgpu_session_log(lim, LOG_WARN, "ctx_create on device %d refused after waiting %.1f s: %s (CUDA_ERROR_DEVICE_UNAVAILABLE)",
						  dev, ms_since(&t0) / 1e3, reason);
			else
				pvgpu_session_log(lim, LOG_WARN, "ctx_create on device %d refused: %s (CUDA_ERROR_DEVICE_UNAVAILABLE)",
						  dev, reason);
			return CUDA_ERROR_DEVICE_UNAVAILABLE;
		}
		{
			long nap_ms = left < POLL_MS ? (long)left + 1 : POLL_MS;
			struct timespec nap = { 0, nap_ms * 1000000L };

			nanosleep(&nap, NULL);
		}
	}
	if (waiting) {
		pvgpu_watchdog_resume(slot, paused);
		pvgpu_session_log(lim, LOG_INFO, "device %d free after waiting %.1f s", dev,
				  ms_since(&t0) / 1e3);
	}
	return CUDA_SUCCESS;
}

void pvgpu_exclusive_drop(struct pvgpu_slot *slot, int dev)
{
	atomic_fetch_and(&slot->gpus_held, ~(1u << dev));
}
