/*
 * vchan_io.c - bounded reads and writes on a libxenvchan ring; see
 * vchan_io.h for what "bounded" means.
 */
#include "vchan_io.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <time.h>

#include <libxenvchan.h>

/* A wait without a limit still wakes this often to check the peer. */
#define VCHAN_TICK_MS 250

int64_t pvgpu_vchan_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int pvgpu_vchan_check(struct libxenvchan *ctrl)
{
	/*
	 * Our copies of the orders (ctrl->read.order) are what libxenvchan
	 * uses; the shared page's may have been rewritten, which is harmless
	 * to it but says the peer is hostile.
	 */
	struct ring_shared *r = ctrl->read.shr, *w = ctrl->write.shr;
	uint32_t rp = __atomic_load_n(&r->prod, __ATOMIC_ACQUIRE);
	uint32_t rc = __atomic_load_n(&r->cons, __ATOMIC_ACQUIRE);
	uint32_t wp = __atomic_load_n(&w->prod, __ATOMIC_ACQUIRE);
	uint32_t wc = __atomic_load_n(&w->cons, __ATOMIC_ACQUIRE);

	if (!pvgpu_vchan_ring_ok(rp, rc, ctrl->read.order) ||
	    !pvgpu_vchan_ring_ok(wp, wc, ctrl->write.order))
		return -EPROTO;
	return 0;
}

int pvgpu_vchan_wait(struct libxenvchan *ctrl, int timeout_ms)
{
	struct pollfd pfd = { .fd = libxenvchan_fd_for_select(ctrl),
			      .events = POLLIN };
	int n;

	do
		n = poll(&pfd, 1, timeout_ms);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	if (n == 0)
		return 0;
	/* Acknowledges the event; does not block after poll said readable. */
	if (libxenvchan_wait(ctrl) < 0)
		return -EIO;
	return 1;
}

/* Wait for progress until deadline (-1: none); 0 to retry, or -errno. */
static int wait_until(struct libxenvchan *ctrl, int64_t deadline, int closed_err)
{
	int64_t left;
	int rc;

	for (;;) {
		if (libxenvchan_is_open(ctrl) == 0)
			return closed_err;
		rc = pvgpu_vchan_check(ctrl);
		if (rc < 0)
			return rc;
		left = VCHAN_TICK_MS;
		if (deadline >= 0) {
			left = deadline - pvgpu_vchan_now_ms();
			if (left <= 0)
				return -ETIMEDOUT;
			if (left > VCHAN_TICK_MS)
				left = VCHAN_TICK_MS;
		}
		rc = pvgpu_vchan_wait(ctrl, (int)left);
		if (rc != 0)
			return rc < 0 ? rc : 0;
		/* A tick without an event: check the peer and the clock again. */
	}
}

int pvgpu_vchan_writev(struct libxenvchan *ctrl, struct iovec *iov,
		       int iovcnt, int stall_ms)
{
	int64_t deadline = pvgpu_vchan_now_ms() + stall_ms;
	int rc;

	ctrl->blocking = 0;
	while (iovcnt > 0) {
		if (iov->iov_len == 0) {
			iov++;
			iovcnt--;
			continue;
		}
		rc = pvgpu_vchan_check(ctrl);
		if (rc < 0)
			return rc;
		int n = libxenvchan_write(ctrl, iov->iov_base, iov->iov_len);
		if (n < 0)
			return libxenvchan_is_open(ctrl) ? -EIO : -EPIPE;
		if (n > 0) {
			iov->iov_base = (char *)iov->iov_base + n;
			iov->iov_len -= (size_t)n;
			deadline = pvgpu_vchan_now_ms() + stall_ms;
			continue;
		}
		rc = wait_until(ctrl, deadline, -EPIPE);
		if (rc < 0)
			return rc;
	}
	return 0;
}

int pvgpu_vchan_write_all(struct libxenvchan *ctrl, const void *buf,
			  size_t len, int stall_ms)
{
	struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };

	return pvgpu_vchan_writev(ctrl, &iov, 1, stall_ms);
}

int pvgpu_vchan_read_all(struct libxenvchan *ctrl, void *buf, size_t len,
			 int idle_ms, int stall_ms)
{
	char *p = buf;
	size_t got = 0;
	int64_t deadline = idle_ms < 0 ? -1 : pvgpu_vchan_now_ms() + idle_ms;
	int rc;

	ctrl->blocking = 0;
	while (got < len) {
		rc = pvgpu_vchan_check(ctrl);
		if (rc < 0)
			return rc;
		int n = libxenvchan_read(ctrl, p + got, len - got);
		if (n < 0)
			return libxenvchan_is_open(ctrl) ? -EIO : -ECONNRESET;
		if (n > 0) {
			got += (size_t)n;
			deadline = pvgpu_vchan_now_ms() + stall_ms;
			continue;
		}
		rc = wait_until(ctrl, deadline, -ECONNRESET);
		if (rc < 0)
			return rc;
	}
	return 0;
}
