/*
 * vchan_io.h - bounded I/O on a libxenvchan ring (both halves use it).
 *
 * libxenvchan's own blocking mode waits on the event channel without a
 * limit, and a peer that corrupts the shared ring indexes makes its
 * data_ready() return 0 forever ("locking up the ring"), so a blocking
 * reader would never come back.  Everything here runs the vchan in
 * non-blocking mode and waits with poll() on the event channel's fd:
 *
 *  - the indexes in the shared page are checked before every transfer
 *    (pvgpu_vchan_ring_ok); a peer that wrote nonsense gets -EPROTO;
 *  - a transfer that has started must make progress within stall_ms,
 *    else -ETIMEDOUT (the caller ends the session);
 *  - waiting for the first byte of a message is bounded by idle_ms
 *    (-1: no limit, but the wait still wakes every 250 ms to check that
 *    the peer is alive and the ring is sane).
 */
#ifndef PVGPU_VCHAN_IO_H
#define PVGPU_VCHAN_IO_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

struct libxenvchan;

/* Largest ring libxenvchan sets up for one direction (order 20, 1 MiB). */
#define PVGPU_VCHAN_MAX_ORDER	20
#define PVGPU_VCHAN_MIN_ORDER	10

/*
 * Whether a ring's shared indexes are possible: the producer is at most
 * one ring ahead of the consumer (unsigned 32-bit arithmetic, as the
 * indexes wrap) and the order is one libxenvchan can have set up.
 * Pure: the fuzz target feeds it garbage.
 */
static inline int pvgpu_vchan_ring_ok(uint32_t prod, uint32_t cons, int order)
{
	if (order < PVGPU_VCHAN_MIN_ORDER || order > PVGPU_VCHAN_MAX_ORDER)
		return 0;
	return (uint32_t)(prod - cons) <= (1u << order);
}

/* Both rings of ctrl sane right now (reads the shared page once each). */
int pvgpu_vchan_check(struct libxenvchan *ctrl);

/*
 * Write every byte of iov (consumed) or fail: 0, -EPIPE when the peer
 * closed, -EPROTO for a corrupt ring, -ETIMEDOUT when no room appeared
 * for stall_ms.
 */
int pvgpu_vchan_writev(struct libxenvchan *ctrl, struct iovec *iov,
		       int iovcnt, int stall_ms);
int pvgpu_vchan_write_all(struct libxenvchan *ctrl, const void *buf,
			  size_t len, int stall_ms);

/*
 * Read exactly len bytes: 0, -ECONNRESET when the peer closed, -EPROTO,
 * -ETIMEDOUT (no first byte within idle_ms, or a stall of stall_ms after
 * it).
 */
int pvgpu_vchan_read_all(struct libxenvchan *ctrl, void *buf, size_t len,
			 int idle_ms, int stall_ms);

/*
 * Wait until the vchan has an event (data, room, a state change) or
 * timeout_ms pass: 1 on an event, 0 on a timeout, -errno.
 */
int pvgpu_vchan_wait(struct libxenvchan *ctrl, int timeout_ms);

/* Monotonic milliseconds. */
int64_t pvgpu_vchan_now_ms(void);

#endif /* PVGPU_VCHAN_IO_H */
