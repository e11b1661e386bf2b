/*
 * output.c - what the session's kernels print belongs to its guest.
 *
 * The CUDA driver writes device printf and failed-assert messages to the
 * process's stdout and stderr when the program synchronises.  The worker is
 * one process per session, so its fd 1 and 2 hold exactly this session's
 * device output: at start both become memfds (append-only, never blocking
 * the driver, unlike a pipe that fills), the log moves to a copy of the
 * daemon's stderr, and before the reply to a call where CUDA delivers it (a
 * synchronize, a synchronous copy, a module load or unload, a context's
 * end, the session's end; output_may_come) what appeared since the last
 * one goes to the guest as OUTPUT frames (opcode PVGPU_OP_OUTPUT, the request's
 * id, payload: u32 stream 1 or 2, then the bytes).  A guest that did not
 * agree to the `output` feature gets nothing; the bytes are dropped and
 * counted, never written to the host's log.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "log.h"
#include "pvgpu_proto.h"
#include "wire.h"
#include "worker.h"

/* Bytes one reply carries at most; CUDA's own printf FIFO is 1 MiB. */
#define OUTPUT_MAX_PER_REPLY	(4u * 1024 * 1024)
#define OUTPUT_CHUNK		(PVGPU_MAX_PAYLOAD - 4)

/* fd 1 or 2 onto a fresh memfd, or onto /dev/null when there is none. */
static int capture_fd(int target, const char *name)
{
	int fd = memfd_create(name, MFD_CLOEXEC);

	if (fd < 0) {
		log_warn("device output: memfd_create: %s; %s discarded",
			 strerror(errno), name);
		fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
		if (fd < 0)
			return -1;
	}
	if (dup2(fd, target) < 0) {
		close(fd);
		return -1;
	}
	close(fd);
	/* Shared by both fds' description: the driver always appends. */
	return fcntl(target, F_SETFL, O_APPEND);
}

int pvgpu_output_open(struct pvgpu_worker *w)
{
	int logfd;

	w->output.ok = 0;
	fflush(stdout);
	fflush(stderr);
	logfd = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
	if (logfd < 0) {
		log_warn("device output: cannot keep the log: %s", strerror(errno));
		return -1;
	}
	pvgpu_log_set_fd(logfd);
	if (capture_fd(STDOUT_FILENO, "pvgpu-device-stdout") ||
	    capture_fd(STDERR_FILENO, "pvgpu-device-stderr")) {
		log_warn("device output: cannot redirect: %s", strerror(errno));
		return -1;
	}
	/* Line buffering would split a kernel's output over several writes. */
	setvbuf(stdout, NULL, _IOFBF, 64 * 1024);
	w->output.ok = 1;
	return 0;
}

/*
 * Bytes waiting in fd (1 or 2); 0 when it is not a memfd.  The end of
 * the file, not fstat(): one system call either way, but lseek copies
 * nothing out (a third of fstat's cost where system calls are dear); the
 * position it moves is nobody's (O_APPEND writes, pread reads).
 */
static uint64_t pending(int fd)
{
	off_t end = lseek(fd, 0, SEEK_END);

	return end > 0 ? (uint64_t)end : 0;
}

/*
 * Where CUDA writes what kernels printed (the CUDA programming guide's
 * list): synchronizes, blocking copies, module load and unload, the end
 * of a context; and the session's end.  A generic driver call may be any
 * of them.  Other replies never look: two system calls each otherwise.
 */
static int output_may_come(uint16_t opcode)
{
	if (pvgpu_op_waits_on_device(opcode))
		return 1;
	switch (opcode) {
	case PVGPU_OP_ARRAY_COPY:
	case PVGPU_OP_MODULE_LOAD:
	case PVGPU_OP_MODULE_UNLOAD:
	case PVGPU_OP_CTX_DESTROY:
	case PVGPU_OP_DRIVER_CALL:
	case PVGPU_OP_DRIVER_CALL_DATA:
	case PVGPU_OP_BYE:
		return 1;
	default:
		return 0;
	}
}

void pvgpu_output_arm(struct pvgpu_worker *w)
{
	/* Kernels of two contexts: only the session's end disarms. */
	if (!w->output.armed)
		w->output.armed_ctx = w->cur_ctx;
	else if (w->output.armed_ctx != w->cur_ctx)
		w->output.armed_ctx = 0;
	w->output.armed = 1;
}

static int deliver_fd(struct pvgpu_worker *w, int fd, uint64_t size)
{
	uint8_t buf[4 + OUTPUT_CHUNK];
	uint64_t off = 0, send = size;
	int rc = 0;

	if (!(w->features & PVGPU_FEATURE_OUTPUT))
		send = 0;
	else if (send > OUTPUT_MAX_PER_REPLY)
		send = OUTPUT_MAX_PER_REPLY;
	pvgpu_put_u32(buf, (uint32_t)fd);
	while (off < send && !rc) {
		size_t want = send - off < OUTPUT_CHUNK ? (size_t)(send - off) : OUTPUT_CHUNK;
		ssize_t n = pread(fd, buf + 4, want, (off_t)off);

		if (n <= 0)
			break;
		rc = pvgpu_worker_send_output(w, buf, (uint32_t)(4 + n));
		off += (uint64_t)n;
	}
	if (off < size) {
		w->output.dropped += size - off;
		wlog_debug(w, "device output: %llu bytes on fd %d not delivered (%s)",
			   (unsigned long long)(size - off), fd,
			   w->features & PVGPU_FEATURE_OUTPUT ? "over the limit" :
								"guest without the output feature");
	}
	/* Appends continue at 0; the driver writes only while we wait on it. */
	if (ftruncate(fd, 0))
		wlog_debug(w, "device output: ftruncate: %s", strerror(errno));
	return rc;
}

/* A generic call's reply is by its function (annotations.py quiet): the
 * opcode says only that it is a driver call. */
void pvgpu_output_quiet(struct pvgpu_worker *w)
{
	w->output.quiet = 1;
}

int pvgpu_output_deliver(struct pvgpu_worker *w, uint16_t opcode,
			  int32_t status)
{
	int quiet = w->output.quiet;
	int rc = 0;

	/*
	 * Until a kernel runs nothing prints, and then only where CUDA
	 * delivers it: no system call on any other reply.
	 */
	w->output.quiet = 0;
	if (quiet || !w->output.ok || !w->output.armed ||
	    !output_may_come(opcode))
		return 0;
	/* A sim twin (or anything else) printing through stdio. */
	fflush(stdout);
	fflush(stderr);
	for (int fd = STDOUT_FILENO; fd <= STDERR_FILENO && !rc; fd++) {
		uint64_t size = pending(fd);

		if (size)
			rc = deliver_fd(w, fd, size);
	}
	/*
	 * A context synchronized without error after kernels of that context
	 * alone: they are done and the driver has written all they printed.
	 */
	if (opcode == PVGPU_OP_CTX_SYNCHRONIZE && !status && !rc &&
	    w->output.armed_ctx && w->output.armed_ctx == w->cur_ctx)
		w->output.armed = 0;
	return rc;
}
