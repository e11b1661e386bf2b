/* shlock.c - a lock shared between processes that a stopped holder cannot keep (see shlock.h). */
#include <errno.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "accounting.h"
#include "clock.h"
#include "log.h"
#include "shlock.h"

/* The thread holding it, from the futex word; 0: free, or its owner died. */
static pid_t owner_of(struct pvgpu_shlock *l)
{
	return (pid_t)(__atomic_load_n(&l->mutex.__data.__lock, __ATOMIC_RELAXED) &
		       FUTEX_TID_MASK);
}

int pvgpu_shlock_init(struct pvgpu_shlock *l, const char *name)
{
	pthread_mutexattr_t attr;
	int rc = 0;

	if (pthread_mutexattr_init(&attr))
		return -1;
	if (pthread_mutexattr_setpshared(&attr, PTHREAD_PROCESS_SHARED) ||
	    pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST) ||
	    pthread_mutex_init(&l->mutex, &attr))
		rc = -1;
	pthread_mutexattr_destroy(&attr);
	if (rc)
		return -1;
	atomic_store(&l->takes, 0);
	snprintf(l->name, sizeof(l->name), "%s", name);
	/* Everything here rests on the owner in the word: see that it is. */
	if (pthread_mutex_lock(&l->mutex))
		return -1;
	if (owner_of(l) != gettid()) {
		errno = ENOTSUP;
		rc = -1;
	}
	pthread_mutex_unlock(&l->mutex);
	return rc;
}

/* After the mutex answered rc: 0, PVGPU_SHLOCK_REPAIR, or -rc. */
static int took(struct pvgpu_shlock *l, int rc)
{
	if (rc == EOWNERDEAD) {
		pthread_mutex_consistent(&l->mutex);
		return PVGPU_SHLOCK_REPAIR;
	}
	return -rc;
}

/*
 * The lock is busy: note who holds it, and kill that holder once the same
 * hold has lasted past the bound.
 */
static void watch(struct pvgpu_shlock *l, struct pvgpu_shlock_watch *w,
		  struct pvgpu_accounting *acct)
{
	/* The count first: a hold that ends between the two reads looks new. */
	uint64_t takes = atomic_load_explicit(&l->takes, memory_order_acquire);
	pid_t owner = owner_of(l);
	uint64_t now = pvgpu_now_ns(), held;
	struct pvgpu_slot *slot;
	char whose[160];

	if (!owner) {
		*w = (struct pvgpu_shlock_watch){ 0 };
		return;
	}
	if (owner != w->owner || takes != w->takes) {
		*w = (struct pvgpu_shlock_watch){ owner, takes, now };
		return;
	}
	held = now - w->since_ns;
	if (held < PVGPU_SHLOCK_HOLD_MAX_MS * 1000000ull)
		return;
	/* Never ourselves, never the supervisor: only a worker may be stopped so. */
	if (owner == getpid() || owner == getppid())
		return;
	slot = acct ? pvgpu_accounting_by_pid(acct, owner) : NULL;
	if (slot) {
		int vm = atomic_load(&slot->vm);

		snprintf(whose, sizeof(whose), "worker pid %d (session %llu, vm %s)",
			 (int)owner, (unsigned long long)slot->session_id,
			 vm < 0 ? "-" : acct->vms[vm].name);
	} else {
		snprintf(whose, sizeof(whose), "pid %d", (int)owner);
	}
	if (kill(owner, SIGKILL) && errno == ESRCH)
		return;		/* gone already: the mutex hands it over */
	log_warn("%s: %s has held it %.1f s, past the %.1f s bound on a shared lock; killed it",
		 l->name, whose, (double)held / 1e9,
		 PVGPU_SHLOCK_HOLD_MAX_MS / 1e3);
	/* One line per kill: a holder that outlives SIGKILL waits another bound. */
	w->since_ns = now;
}

int pvgpu_shlock_take(struct pvgpu_shlock *l, struct pvgpu_accounting *acct)
{
	struct pvgpu_shlock_watch w = { 0 };
	int rc = pthread_mutex_trylock(&l->mutex);

	while (rc == EBUSY || rc == ETIMEDOUT) {
		struct timespec until;

		watch(l, &w, acct);
		clock_gettime(CLOCK_MONOTONIC, &until);
		until.tv_nsec += PVGPU_SHLOCK_STEP_MS * 1000000L;
		if (until.tv_nsec >= 1000000000L) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000L;
		}
		rc = pthread_mutex_clocklock(&l->mutex, CLOCK_MONOTONIC, &until);
	}
	rc = took(l, rc);
	if (rc < 0) {
		/* Only a lock left inconsistent by our own code gets here. */
		log_error("%s: cannot take it: %s", l->name, strerror(-rc));
		abort();
	}
	return rc;
}

int pvgpu_shlock_try(struct pvgpu_shlock *l, struct pvgpu_shlock_watch *w,
		     struct pvgpu_accounting *acct)
{
	int rc = pthread_mutex_trylock(&l->mutex);

	if (rc == EBUSY) {
		watch(l, w, acct);
		return -EBUSY;
	}
	*w = (struct pvgpu_shlock_watch){ 0 };
	rc = took(l, rc);
	return rc < 0 ? -EBUSY : rc;
}

void pvgpu_shlock_give(struct pvgpu_shlock *l)
{
	/* Only the holder writes it: a plain store, ordered by the unlock. */
	atomic_store_explicit(&l->takes,
			      atomic_load_explicit(&l->takes, memory_order_relaxed) + 1,
			      memory_order_relaxed);
	pthread_mutex_unlock(&l->mutex);
}
