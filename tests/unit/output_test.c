/*
 * output_test.c - a worker looks for device output (printf, assert;
 * host-backend/session/output.c) only in the replies where CUDA delivers
 * it (synchronizes, blocking copies, the session's end), only once a
 * kernel has run, and no more after a context synchronize that saw all
 * those kernels finish.  Every other reply costs no system call.
 *
 * The worker's fd 1 and 2 are memfds here, as pvgpu_output_open makes
 * them; the session has not agreed to the output feature, so what is
 * delivered is counted in output_dropped (and the memfd emptied) instead
 * of being sent.
 */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "pvgpu_proto.h"
#include "worker.h"

#include "unit_check.h"

#define MAX_SEEN 32

static int seen[MAX_SEEN], nseen;

/* Checks made while stdout and stderr are memfds: CHECKed afterwards. */
static void note(int ok)
{
	if (nseen < MAX_SEEN)
		seen[nseen++] = ok;
}

static long waiting(int fd)
{
	return (long)lseek(fd, 0, SEEK_END);
}

static void put(const char *s)
{
	if (write(STDOUT_FILENO, s, strlen(s)) != (ssize_t)strlen(s))
		note(0);
}

static int deliver(struct pvgpu_worker *w, uint16_t opcode, int32_t status)
{
	return pvgpu_output_deliver(w, opcode, status);
}

static void run(void)
{
	struct pvgpu_worker w;

	memset(&w, 0, sizeof(w));
	w.output.ok = 1;
	w.cur_ctx = 1;

	/* No kernel has run: not even a synchronize looks. */
	put("before\n");
	note(deliver(&w, PVGPU_OP_CTX_SYNCHRONIZE, 0) == 0 && waiting(1) == 7 &&
	     w.output.dropped == 0);

	/* A kernel ran: a reply that is no synchronisation still does not. */
	pvgpu_output_arm(&w);
	note(deliver(&w, PVGPU_OP_MEM_ALLOC, 0) == 0 && waiting(1) == 7 &&
	     w.output.dropped == 0);
	note(deliver(&w, PVGPU_OP_STREAM_CREATE, 0) == 0 && waiting(1) == 7);

	/* A stream synchronize takes it, and keeps looking after. */
	note(deliver(&w, PVGPU_OP_STREAM_SYNCHRONIZE, 0) == 0 &&
	     waiting(1) == 0 && w.output.dropped == 7 && w.output.armed);

	/* A blocking copy takes what comes later, stderr too. */
	put("copy\n");
	if (write(STDERR_FILENO, "assert\n", 7) != 7)
		note(0);
	note(deliver(&w, PVGPU_OP_MEMCPY_DTOH_WINDOW, 0) == 0 &&
	     waiting(1) == 0 && waiting(2) == 0 && w.output.dropped == 19);

	/* A context synchronize that failed does not end the looking... */
	note(deliver(&w, PVGPU_OP_CTX_SYNCHRONIZE, 700) == 0 && w.output.armed);
	/* ...one that succeeded does: every kernel of it is done. */
	note(deliver(&w, PVGPU_OP_CTX_SYNCHRONIZE, 0) == 0 && !w.output.armed);
	put("late\n");
	note(deliver(&w, PVGPU_OP_STREAM_SYNCHRONIZE, 0) == 0 && waiting(1) == 5);

	/* Kernels in two contexts: one context's synchronize is not enough. */
	pvgpu_output_arm(&w);
	w.cur_ctx = 2;
	pvgpu_output_arm(&w);
	note(deliver(&w, PVGPU_OP_CTX_SYNCHRONIZE, 0) == 0 && w.output.armed &&
	     waiting(1) == 0 && w.output.dropped == 24);

	/* The session's end takes the rest. */
	put("bye\n");
	note(deliver(&w, PVGPU_OP_BYE, 0) == 0 && waiting(1) == 0 &&
	     w.output.dropped == 28);
}

/* fd onto a fresh append-only memfd; the old one kept in *saved. */
static int capture(int fd, int *saved)
{
	int m = memfd_create("output-test", MFD_CLOEXEC);

	*saved = dup(fd);
	if (m < 0 || *saved < 0 || dup2(m, fd) < 0)
		return -1;
	close(m);
	return fcntl(fd, F_SETFL, O_APPEND);
}

int main(void)
{
	int out, err;

	fflush(stdout);
	fflush(stderr);
	if (capture(STDOUT_FILENO, &out) || capture(STDERR_FILENO, &err)) {
		perror("output_test: capture");
		return 1;
	}
	run();
	dup2(out, STDOUT_FILENO);
	dup2(err, STDERR_FILENO);
	close(out);
	close(err);
	CHECK(nseen == 10);
	for (int i = 0; i < nseen; i++) {
		if (!seen[i])
			fprintf(stderr, "output_test: check %d failed\n", i + 1);
		CHECK(seen[i]);
	}
	return UNIT_REPORT();
}
