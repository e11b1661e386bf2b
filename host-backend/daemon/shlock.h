/*
 * shlock.h - a lock shared between processes that a stopped holder cannot
 * keep.
 *
 * The tables the supervisor maps before it forks (accounting.h,
 * gpusched.c) are guarded by locks that workers of every VM take: each
 * VM's quota lock, the GPUs' exclusivity lock, the IPC registry's lock,
 * each device's scheduler lock.  A robust mutex is handed on when its
 * holder dies, not when it stops: a worker SIGSTOPped, traced or frozen
 * while it held one would keep every other worker that wants it waiting
 * for as long as it stayed stopped.  So a waiter waits in steps, and once
 * one hold has lasted longer than PVGPU_SHLOCK_HOLD_MAX_MS it SIGKILLs
 * the holder (never itself, never its parent: a worker's parent is the
 * supervisor), says so in one log line, and takes the lock as a robust
 * mutex hands it over from a dead owner, repairing what it guards.  The
 * killed worker's session ends as any session whose worker dies.  The
 * supervisor never waits at all: it only tries (pvgpu_shlock_try).
 *
 * Who holds the lock is read from the mutex's futex word.  The kernel's
 * robust-futex ABI keeps the owner's thread id there (that is how the
 * kernel marks the lock when its owner dies), written by the very
 * compare-and-swap that takes it: there is no moment at which the lock is
 * held and its holder unknown.  A pid the taker stored after acquiring
 * would leave one, and a waiter that read the last holder's pid there
 * would kill a process that no longer holds the lock, and wait on.
 * Whether a hold is the same one: `takes`, which each holder bumps just
 * before it lets go; the same owner with the same count, seen over the
 * bound, is one unbroken hold.  Neither costs a syscall: an uncontended
 * take is the mutex's compare-and-swap, a give one plain store more.
 */
#ifndef PVGPU_SHLOCK_H
#define PVGPU_SHLOCK_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

/*
 * The longest one hold may last before a waiter kills its holder.  Holds
 * are a scan of the session table under the lock: 2 us at the default 256
 * slots, 1.6 ms at the most --max-sessions allows (65536; measured on the
 * project's 2-core machine).  A holder preempted on a loaded host keeps it
 * some milliseconds more, a page fault on a swapped-out page tens; 2 s is
 * a hundred times the worst of those, so a worker that is only slow is not
 * killed, and still short enough that the sessions waiting behind a
 * stopped worker (a session start of another VM, a launch) are late by
 * seconds, not hung.
 */
#define PVGPU_SHLOCK_HOLD_MAX_MS	2000
/* A waiter looks at the holder this often. */
#define PVGPU_SHLOCK_STEP_MS		100

/* take and try: the lock is ours, but its last holder died holding it. */
#define PVGPU_SHLOCK_REPAIR		1

struct pvgpu_shlock {
	pthread_mutex_t mutex;		/* robust, process-shared */
	_Atomic uint64_t takes;		/* holds ended: bumped before each unlock */
	char name[96];			/* which lock, for the log line */
};

/* What one waiter has seen of a lock's holder; zeroed: nothing yet. */
struct pvgpu_shlock_watch {
	pid_t owner;
	uint64_t takes;
	uint64_t since_ns;		/* CLOCK_MONOTONIC: first seen so */
};

/* Names the holder in the log line: its session and VM, if a worker of acct's. */
struct pvgpu_accounting;

/*
 * In memory shared before fork: 0, or -1 when the mutex cannot be made or
 * this C library's robust mutex does not keep its owner in its futex word.
 */
int pvgpu_shlock_init(struct pvgpu_shlock *l, const char *name);

/*
 * Wait for the lock, killing a holder past the bound (above): 0, or
 * PVGPU_SHLOCK_REPAIR when its holder died in it, for the caller to repair
 * what it guards.  acct may be NULL.
 */
int pvgpu_shlock_take(struct pvgpu_shlock *l, struct pvgpu_accounting *acct);

/*
 * Never waits: 0 or PVGPU_SHLOCK_REPAIR as take, or -EBUSY.  w carries
 * what the caller saw of the holder from one try to the next, so that a
 * holder over the bound is killed as take would (the lock is then free
 * for a later try).
 */
int pvgpu_shlock_try(struct pvgpu_shlock *l, struct pvgpu_shlock_watch *w,
		     struct pvgpu_accounting *acct);

void pvgpu_shlock_give(struct pvgpu_shlock *l);

#endif /* PVGPU_SHLOCK_H */
