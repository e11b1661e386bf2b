/*
 * ring.h - the control ring: a byte pipe in each direction through a
 * shared window, underneath the protocol's framing (DESIGN §4).
 *
 * Protocol messages (header + payload, DATA frames too) flow through it
 * exactly as through a socket: sendv() and recv() of whole buffers.  What
 * changes is the cost of a round trip: a producer writes bytes and
 * publishes its index; the consumer, spinning on that index, sees it within
 * a cache-line transfer instead of a system call and a wake-up.
 *
 * Layout of a region (offset and size chosen by the guest inside its
 * window, announced in window_attach):
 *
 *   [0, 4096)              struct pvgpu_ring_shared: two directions'
 *                          control words, each on its own cache line
 *   [4096, 4096 + cap)     bytes guest -> worker (requests)
 *   [4096 + cap, + 2*cap)  bytes worker -> guest (replies)
 *
 * cap is a power of two.  Indexes are free-running u64 byte counts.
 *
 * Trust: every word in the region can be rewritten by the other side at
 * any moment.  Each side keeps its own index privately and never reads it
 * back; the peer's index is checked on every read (it may only move
 * forwards, and never further than the ring allows), and a violation is
 * -EPROTO, which ends the session.  Bytes are copied out of the ring
 * before anyone decodes them, so a peer cannot change them after a check.
 *
 * Waiting: spin (bounded, adaptive), then announce "I sleep" in a flag,
 * fence, look once more, and block in the caller's wait_kick(); the other
 * side, after publishing, fences, and if the flag is up, takes it down and
 * calls kick().  Either order of the two fences leaves one of the two
 * sides seeing the other's store: no lost wake-up.  What "block" and
 * "kick" are (a byte on a socket, a futex, a doorbell) is the caller's.
 */
#ifndef PVGPU_RING_H
#define PVGPU_RING_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define PVGPU_RING_HDR_SIZE	4096u
#define PVGPU_RING_MIN_CAP	4096u
#define PVGPU_RING_MAX_CAP	(16u << 20)

/* One direction's control words: one writer per cache line, mostly. */
struct pvgpu_ring_ctrl {
	uint64_t prod;			/* bytes published, by the producer */
	uint8_t pad0[56];
	uint64_t cons;			/* bytes consumed, by the consumer */
	uint8_t pad1[56];
	uint32_t cons_sleeping;		/* consumer blocked for bytes; the producer clears it */
	uint8_t pad2[60];
	uint32_t prod_sleeping;		/* producer blocked for room; the consumer clears it */
	uint8_t pad3[60];
};

struct pvgpu_ring_shared {
	struct pvgpu_ring_ctrl dir[2];	/* 0: guest -> worker, 1: worker -> guest */
};

_Static_assert(sizeof(struct pvgpu_ring_shared) <= PVGPU_RING_HDR_SIZE,
	       "the ring's control words fit its first page");

enum pvgpu_ring_role { PVGPU_RING_GUEST, PVGPU_RING_WORKER };

/*
 * How to sleep and how to wake the other side; arg is passed to both.
 * wait_kick() returns 0 after a kick, a spurious wake or a timeout (the
 * ring looks again), or -errno when the peer is gone; kick() 0 or -errno.
 */
struct pvgpu_ring_waiter {
	int (*kick)(void *arg);
	int (*wait_kick)(void *arg);
	void *arg;
	uint64_t spin_max_ns;		/* 0: never spin, block at once */
	uint64_t spin_min_ns;
};

/* One side's end of both directions; private memory. */
struct pvgpu_ring {
	struct pvgpu_ring_ctrl *tx_ctrl, *rx_ctrl;
	uint8_t *tx, *rx;		/* data areas */
	uint64_t cap;
	uint64_t tx_pos;		/* our producer index: the truth */
	uint64_t tx_peer;		/* peer's consumer index, last seen */
	uint64_t tx_published;		/* what we last stored in prod */
	uint64_t rx_pos;		/* our consumer index: the truth */
	uint64_t rx_peer;		/* peer's producer index, last seen */
	uint64_t spin_ns;		/* current spin budget (adaptive) */
	/*
	 * The next wait for bytes spins at least this long (then 0 again),
	 * without teaching the adaptive budget: set by the caller before a
	 * reply it knows waits on the device (pvgpu_ring_expect_wait).
	 */
	uint64_t spin_once_ns;
	struct pvgpu_ring_waiter waiter;
	/* Counters for the curious (tests, debug logs). */
	uint64_t kicks_sent, sleeps;
	const char *error;		/* why the last -EPROTO */
};

/* The region size for a capacity per direction. */
static inline uint64_t pvgpu_ring_region_size(uint64_t cap)
{
	return PVGPU_RING_HDR_SIZE + 2 * cap;
}

/*
 * Whether [offset, offset + size) is a ring region that fits a window of
 * window_size bytes and starts at or after not_before (the end of what
 * else the window holds: header, staging slots): page-aligned, with a
 * power-of-two capacity in range.  The capacity, or 0 with why in *why.
 */
uint64_t pvgpu_ring_check_region(uint64_t offset, uint64_t size,
				 uint64_t window_size, uint64_t not_before,
				 const char **why);

/* The guest, before announcing the region: zero its control words. */
void pvgpu_ring_init_region(void *region);

/* Set up one side's end over a checked region of capacity cap. */
void pvgpu_ring_attach(struct pvgpu_ring *r, void *region, uint64_t cap,
		       enum pvgpu_ring_role role,
		       const struct pvgpu_ring_waiter *waiter);

/*
 * Send every byte iov describes, waiting for room as needed (iov is not
 * modified).  0, -EPROTO (the peer's index is impossible: r->error says
 * which), or what wait_kick()/kick() returned.
 */
int pvgpu_ring_sendv(struct pvgpu_ring *r, const struct iovec *iov, int iovcnt);
int pvgpu_ring_send(struct pvgpu_ring *r, const void *buf, size_t len);

/*
 * The next receive waits for something that takes a while on the other
 * side (a synchronize, a copy): spin up to ns for it before sleeping, as
 * NVIDIA's driver spins in a synchronous call, instead of paying a sleep
 * and a wake-up once the bounded budget runs out.
 */
static inline void pvgpu_ring_expect_wait(struct pvgpu_ring *r, uint64_t ns)
{
	r->spin_once_ns = ns;
}

/* Receive exactly len bytes; 0, -EPROTO, or what wait_kick() returned. */
int pvgpu_ring_recv(struct pvgpu_ring *r, void *buf, size_t len);

/*
 * Bytes waiting to be received, without waiting; -EPROTO when the peer's
 * index is impossible.
 */
int64_t pvgpu_ring_pending(struct pvgpu_ring *r);

#endif /* PVGPU_RING_H */
