/*
 * shlock_test.c - a lock shared between processes that a stopped holder
 * cannot keep (host-backend/daemon/shlock.h): a child that takes it and
 * stops itself is killed once the bound has passed, by a waiter's take and
 * by a supervisor's try alike, with one log line, and the lock is whole
 * afterwards; try never waits; a holder that keeps letting go in time is
 * not killed, nor is the waiter's parent however long it holds.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "shlock.h"

#include "unit_check.h"
#include "unit_log.h"

#define BOUND_S		(PVGPU_SHLOCK_HOLD_MAX_MS / 1e3)
/* A loaded 2-core machine, the sanitizer build: late, never early. */
#define MARGIN_S	3.0

static double seconds(void)
{
	return (double)pvgpu_now_ns() / 1e9;
}

static void nap_ms(long ms)
{
	struct timespec t = { ms / 1000, (ms % 1000) * 1000000L };

	nanosleep(&t, NULL);
}

/* A child that takes l and stops itself there, stopped when this returns. */
static pid_t stopped_holder(struct pvgpu_shlock *l)
{
	int status;
	pid_t pid = fork();

	if (pid == 0) {
		pvgpu_shlock_take(l, NULL);
		raise(SIGSTOP);
		_exit(0);	/* never: it is killed while stopped */
	}
	if (pid < 0 || waitpid(pid, &status, WUNTRACED) != pid ||
	    !WIFSTOPPED(status))
		return -1;
	return pid;
}

static int killed(pid_t pid)
{
	int status;

	return waitpid(pid, &status, 0) == pid && WIFSIGNALED(status) &&
	       WTERMSIG(status) == SIGKILL;
}

static int exited_ok(pid_t pid)
{
	int status;

	return waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
	       WEXITSTATUS(status) == 0;
}

/* The lock works as a lock again: free, and taken without repair. */
static int whole(struct pvgpu_shlock *l)
{
	struct pvgpu_shlock_watch w = { 0 };

	if (pvgpu_shlock_try(l, &w, NULL) != 0)
		return 0;
	pvgpu_shlock_give(l);
	return 1;
}

static void a_waiter_kills_a_stopped_holder(struct pvgpu_shlock *l, char *text,
					    size_t size)
{
	pid_t child = stopped_holder(l);
	double t0, took;
	int rc;

	CHECK(child > 0);
	t0 = seconds();
	rc = pvgpu_shlock_take(l, NULL);
	took = seconds() - t0;
	CHECK(rc == PVGPU_SHLOCK_REPAIR);
	CHECK(took >= BOUND_S && took < BOUND_S + MARGIN_S);
	pvgpu_shlock_give(l);
	CHECK(killed(child));
	CHECK(whole(l));
	CHECK(unit_log_lines(text, size) == 1);
	CHECK(strstr(text, "test lock: pid ") && strstr(text, "killed it"));
}

static void a_try_never_waits_and_kills_past_the_bound(struct pvgpu_shlock *l,
						       char *text, size_t size)
{
	struct pvgpu_shlock_watch w = { 0 };
	pid_t child = stopped_holder(l);
	double t0 = seconds(), longest = 0;
	int rc = -EBUSY, busy = 0;

	CHECK(child > 0);
	while (rc == -EBUSY && seconds() - t0 < BOUND_S + MARGIN_S) {
		double t = seconds();

		rc = pvgpu_shlock_try(l, &w, NULL);
		t = seconds() - t;
		longest = t > longest ? t : longest;
		busy += rc == -EBUSY;
		if (rc == -EBUSY)
			nap_ms(20);
	}
	CHECK(rc == PVGPU_SHLOCK_REPAIR);
	CHECK(seconds() - t0 >= BOUND_S);
	CHECK(busy > 10);
	/* None waited (one that waited for the lock would wait for good). */
	CHECK(longest < 0.5);
	pvgpu_shlock_give(l);
	CHECK(killed(child));
	CHECK(whole(l));
	CHECK(unit_log_lines(text, size) == 1);
}

/* Holds of a quarter of the bound, over and over, for twice the bound. */
static void a_holder_that_lets_go_lives(struct pvgpu_shlock *l, char *text,
					size_t size)
{
	long hold_ms = PVGPU_SHLOCK_HOLD_MAX_MS / 4;
	pid_t child = fork();
	double t0;

	if (child == 0) {
		double end = seconds() + 2 * BOUND_S;

		while (seconds() < end) {
			pvgpu_shlock_take(l, NULL);
			nap_ms(hold_ms);
			pvgpu_shlock_give(l);
			nap_ms(1);
		}
		_exit(0);
	}
	CHECK(child > 0);
	nap_ms(10);
	t0 = seconds();
	while (seconds() - t0 < 2 * BOUND_S) {
		CHECK(pvgpu_shlock_take(l, NULL) == 0);
		pvgpu_shlock_give(l);
		nap_ms(5);
	}
	CHECK(exited_ok(child));
	CHECK(unit_log_lines(text, size) == 0);
}

/* A worker's parent is the supervisor: never killed, however long it holds. */
static void the_parent_is_never_killed(struct pvgpu_shlock *l, char *text,
				       size_t size)
{
	pid_t child;

	CHECK(pvgpu_shlock_take(l, NULL) == 0);
	child = fork();
	if (child == 0) {
		int rc = pvgpu_shlock_take(l, NULL);

		pvgpu_shlock_give(l);
		_exit(rc == 0 ? 0 : 1);
	}
	CHECK(child > 0);
	nap_ms(PVGPU_SHLOCK_HOLD_MAX_MS + 4 * PVGPU_SHLOCK_STEP_MS);
	pvgpu_shlock_give(l);
	CHECK(exited_ok(child));
	CHECK(unit_log_lines(text, size) == 0);
}

int main(void)
{
	struct pvgpu_shlock *l;
	static char text[1 << 16];

	CHECK(unit_log_open() == 0);
	l = mmap(NULL, sizeof(*l), PROT_READ | PROT_WRITE,
		 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	CHECK(l != MAP_FAILED);
	CHECK(pvgpu_shlock_init(l, "test lock") == 0);

	/* Uncontended: taken at once, no repair, no line. */
	CHECK(pvgpu_shlock_take(l, NULL) == 0);
	pvgpu_shlock_give(l);
	CHECK(whole(l));

	a_waiter_kills_a_stopped_holder(l, text, sizeof(text));
	a_try_never_waits_and_kills_past_the_bound(l, text, sizeof(text));
	a_holder_that_lets_go_lives(l, text, sizeof(text));
	the_parent_is_never_killed(l, text, sizeof(text));
	return UNIT_REPORT();
}
