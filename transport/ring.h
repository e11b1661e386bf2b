/*
 * ring.h - the control ring: a byte pipe in each direction through a
 * shared window, underneath the protocol's framing (DESIGN §4).
 *
 * Protocol messages (header + payload, DATA frames too) flow through it
 * exactly as through a socket: sendv() and recv() of whole buffers.  What
 * changes is the cost of a round trip: a producer writes a record and its
 * tag; the consumer, spinning on the tag, sees it within one cache-line
 * transfer instead of a system call and a wake-up.
 *
 * Layout of a region (offset and size chosen by the guest inside its
 * window, announced in window_attach):
 *
 *   [0, 4096)              struct pvgpu_ring_shared: two directions'
 *                          control words, each on its own cache line;
 *                          the device's completion word and landing
 *                          (below)
 *   [4096, 4096 + cap)     records guest -> worker (requests)
 *   [4096 + cap, + 2*cap)  records worker -> guest (replies)
 *
 * cap is a power of two.  Positions are free-running u64 byte counts.  A
 * send is one or more records, each at a position that is a multiple of
 * PVGPU_RING_ALIGN: a u64 tag, then the bytes (wrapping at the end of the
 * area), then padding to the next multiple.  The tag is
 *
 *   (u32)(position / PVGPU_RING_ALIGN) << 32 | length      (length >= 1)
 *
 * and the word where the next record will start is 0 until that record is
 * published: the producer zeroes it before it stores this record's tag
 * (release), so a consumer polling the next position never takes old bytes
 * for a tag.  It does so ahead of time: after each send it zeroes the tag
 * words of the lines up to PVGPU_RING_RUNWAY bytes ahead, in space the
 * consumer has released, so that publishing a small record is one store
 * to one line and not first a store to another line the consumer may
 * still hold (which, stores becoming visible in order, held the record
 * back by that line's transfer).  A small message and its tag share one cache line: the
 * consumer's poll brings the message with it (one transfer per crossing,
 * not an index and then the data).  The consumer's index (cons) says how
 * far the producer may write: never past cons + cap.
 *
 * Trust: every word in the region can be rewritten by the other side at
 * any moment.  Each side keeps its own positions privately and never reads
 * them back; what it reads of the peer is checked (a tag must name the
 * position it is at and a length that fits; cons may only move forwards,
 * and never past what was sent), and a violation is -EPROTO, which ends
 * the session.  Bytes are copied out of the ring before anyone decodes
 * them, so a peer cannot change them after a check.
 *
 * Waiting: spin (bounded, adaptive), then announce "I sleep" in a flag,
 * fence, look once more, and block in the caller's wait_kick(); the other
 * side, after publishing, fences, and if the flag is up, takes it down and
 * calls kick().  Either order of the two fences leaves one of the two
 * sides seeing the other's store: no lost wake-up.  What "block" and
 * "kick" are (a byte on a socket, a futex, a doorbell) is the caller's.
 * A producer waiting for room is the exception: the consumer, having read
 * a record, stores cons and looks at the producer's flag without a fence
 * (a fence there sat on every message's path), and looks again while it
 * waits for its next record, each time round its spin and after its
 * fence before it blocks.  A look that passed its own store of cons can
 * miss a producer going to sleep at that moment; the producer then sleeps
 * until the consumer's next look, and a consumer that read everything
 * always comes to one: a full ring never stalls.
 */
#ifndef PVGPU_RING_H
#define PVGPU_RING_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#define PVGPU_RING_HDR_SIZE	4096u
#define PVGPU_RING_MIN_CAP	4096u
#define PVGPU_RING_MAX_CAP	(16u << 20)
#define PVGPU_RING_ALIGN	64u	/* records start on a cache line */
#define PVGPU_RING_TAG_SIZE	8u
#define PVGPU_RING_RUNWAY	1024u	/* tags kept zeroed ahead of the producer */
/*
 * The device's completion word (feature signal, PVGPU_F_SIGNAL in wire.h):
 * a u32 in the region's first page, on a line of its own, that the worker
 * has the device write when a signalled call's work is done, and the
 * guest polls instead of waiting for a reply to cross.
 */
#define PVGPU_RING_SIGNAL_OFFSET	2048u
/*
 * The landing: where a small synchronous copy from the device into the
 * guest's pageable memory puts its bytes, in the page the worker pins for
 * the word, so that copy too ends on the word and not on a reply carrying
 * them; the guest copies them out before its next call.
 */
#define PVGPU_RING_LANDING_OFFSET	3072u
#define PVGPU_RING_LANDING_SIZE		1024u

/*
 * The largest record payload a ring of capacity cap carries: the record,
 * its padding and the next record's tag fit in the ring.
 */
static inline uint64_t pvgpu_ring_max_record(uint64_t cap)
{
	return cap - PVGPU_RING_ALIGN - PVGPU_RING_TAG_SIZE;
}

/* The tag of a record of len bytes at pos (the layout above). */
static inline uint64_t pvgpu_ring_tag(uint64_t pos, uint64_t len)
{
	return (uint64_t)(uint32_t)(pos / PVGPU_RING_ALIGN) << 32 | len;
}

/* One direction's control words: one writer per cache line, mostly. */
struct pvgpu_ring_ctrl {
	uint64_t cons;			/* bytes consumed, by the consumer */
	uint8_t pad0[56];
	uint32_t cons_sleeping;		/* consumer blocked for bytes; the producer clears it */
	uint8_t pad1[60];
	uint32_t prod_sleeping;		/* producer blocked for room; the consumer clears it */
	uint8_t pad2[60];
};

struct pvgpu_ring_shared {
	struct pvgpu_ring_ctrl dir[2];	/* 0: guest -> worker, 1: worker -> guest */
};

_Static_assert(sizeof(struct pvgpu_ring_shared) <= PVGPU_RING_SIGNAL_OFFSET &&
	       PVGPU_RING_SIGNAL_OFFSET + 64 <= PVGPU_RING_LANDING_OFFSET &&
	       PVGPU_RING_LANDING_OFFSET % 64 == 0 &&
	       PVGPU_RING_LANDING_OFFSET + PVGPU_RING_LANDING_SIZE <= PVGPU_RING_HDR_SIZE,
	       "the ring's control words, the completion word and the landing fit its first page");

enum pvgpu_ring_role { PVGPU_RING_GUEST, PVGPU_RING_WORKER };

/* The completion word of the region at region (its first page). */
static inline uint32_t *pvgpu_ring_signal_word(void *region)
{
	return (uint32_t *)(void *)((uint8_t *)region + PVGPU_RING_SIGNAL_OFFSET);
}

/* The landing of the region at region (its first page). */
static inline uint8_t *pvgpu_ring_landing(void *region)
{
	return (uint8_t *)region + PVGPU_RING_LANDING_OFFSET;
}

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
	uint64_t tx_pos;		/* where our next record goes: the truth */
	uint64_t tx_zeroed;		/* tags at line starts in (tx_pos, this] are 0 */
	uint64_t tx_peer;		/* peer's consumer index, last seen */
	uint64_t rx_next;		/* where the peer's next record's tag is */
	uint64_t rx_pos, rx_end;	/* bytes of the record being read */
	uint64_t spin_ns;		/* current spin budget (adaptive) */
	/*
	 * The next wait for bytes spins at least this long (then 0 again),
	 * without teaching the adaptive budget: set by the caller before a
	 * reply it knows waits on the device (pvgpu_ring_expect_wait).
	 */
	uint64_t spin_once_ns;
	int (*until)(void *arg);	/* pvgpu_ring_wait_until()'s, while it waits */
	void *until_arg;
	struct pvgpu_ring_waiter waiter;
	/* Counters for the curious (tests, debug logs). */
	uint64_t kicks_sent, sleeps, yields;
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

/*
 * The guest, before announcing the region: zero its control words and the
 * first tag of each direction.
 */
void pvgpu_ring_init_region(void *region, uint64_t cap);

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

/*
 * Wait until done(arg) says yes (0) or the peer sent bytes (their count, > 0:
 * the caller receives them), spinning up to spin_ns first, then sleeping as
 * a receive does; -EPROTO or what wait_kick() returned on failure.  The
 * peer, once whatever done() watches has happened, calls pvgpu_ring_wake().
 */
int64_t pvgpu_ring_wait_until(struct pvgpu_ring *r, int (*done)(void *arg),
			      void *arg, uint64_t spin_ns);

/* Wake the peer if it sleeps waiting for bytes (or in pvgpu_ring_wait_until). */
int pvgpu_ring_wake(struct pvgpu_ring *r);

/* Receive exactly len bytes; 0, -EPROTO, or what wait_kick() returned. */
int pvgpu_ring_recv(struct pvgpu_ring *r, void *buf, size_t len);

/*
 * Bytes waiting to be received without waiting (those of the record being
 * read, or of the next one if it is published); -EPROTO when what the peer
 * wrote is impossible.
 */
int64_t pvgpu_ring_pending(struct pvgpu_ring *r);

#endif /* PVGPU_RING_H */
