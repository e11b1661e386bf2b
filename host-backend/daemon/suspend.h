/*
 * suspend.h - suspending and resuming sessions (DESIGN §5): the
 * supervisor's half.
 *
 *   running --suspend--> suspending --> suspended --resume--> resuming --> running
 *
 * The supervisor never calls the driver and never waits for one: for each
 * step it forks a short-lived checkpointer that runs the executor's
 * checkpoint or restore on the worker's pid (executor.h) and exits with
 * what happened written to a pipe, read when it is reaped.  A checkpointer
 * still there at its deadline (--suspend-timeout) is killed: if it had not
 * yet touched the worker the session is as it was (running, or still
 * suspended); if it had, nobody knows what state the worker's GPU
 * resources are in, and the session is ended rather than left to a guest
 * that might see memory half moved.  At most PVGPU_MAX_CHECKPOINTERS run
 * at once.
 *
 * Suspending is the operator's (pvgpuctl session suspend, admin.h), or
 * the supervisor's own to make room on an oversubscribed GPU (oversub.h);
 * resuming is the operator's too, or the guest's: a worker that gets a
 * call while its session is not running sets its slot's resume_wanted,
 * writes to the supervisor's wake eventfd and sleeps on the slot's state
 * (worker side: pvgpu_worker_await_running).  The supervisor takes the
 * flag as "start a resume of this slot" and nothing more.
 */
#ifndef PVGPU_SUSPEND_H
#define PVGPU_SUSPEND_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "accounting.h"
#include "admin.h"

#define PVGPU_MAX_CHECKPOINTERS		8
#define PVGPU_SUSPEND_TIMEOUT_MS	(120 * 1000)

struct pvgpu_supervisor;

/* One checkpointer at work. */
struct pvgpu_ckpt {
	pid_t pid;			/* 0: none */
	int fd;				/* its pipe's read end */
	uint32_t slot;
	uint64_t session_id;
	int resume;			/* 0: a suspend */
	uint64_t started_ns, deadline_ns;
	uint64_t bytes;			/* the session's device memory */
	int killed;			/* at its deadline */
};

struct pvgpu_suspend {
	int wake_fd;			/* eventfd the workers write; -1: none */
	uint64_t timeout_ms;
	struct pvgpu_ckpt ck[PVGPU_MAX_CHECKPOINTERS];
	/* Each device's memory, as the start-up probe read it (oversub.h). */
	uint64_t mem_total[PVGPU_MAX_DEVICES];
	uint64_t room_said_ns;		/* the last "no room" line */
};

/* Before any worker is forked.  0, or -1 after logging why. */
int pvgpu_suspend_init(struct pvgpu_supervisor *sv, uint64_t timeout_ms);
/* Kill the checkpointers still at work (shutdown). */
void pvgpu_suspend_fini(struct pvgpu_supervisor *sv);
/* In a forked child: close what belongs to the supervisor. */
void pvgpu_suspend_forget(struct pvgpu_supervisor *sv);
/*
 * Fork a checkpointer that suspends (resume 0) or resumes slot s: 0, or
 * -1 with a line in why.
 */
int pvgpu_suspend_start(struct pvgpu_supervisor *sv, struct pvgpu_slot *s,
			int resume, char *why, size_t len);
/* The admin socket's requests (admin.h's pvgpu_admin_fn). */
char *pvgpu_suspend_admin(void *arg, const struct pvgpu_admin_req *req);
/* The wake eventfd is readable: start the resumes workers asked for. */
void pvgpu_suspend_wake(struct pvgpu_supervisor *sv);
/* A child was reaped: 1 when it was a checkpointer (then handled). */
int pvgpu_suspend_reaped(struct pvgpu_supervisor *sv, pid_t pid, int status);
/* Kill the checkpointers past their deadline; ms to the next one (-1: none). */
int pvgpu_suspend_expire(struct pvgpu_supervisor *sv);

#endif /* PVGPU_SUSPEND_H */
