/* ring.c - see ring.h. */
#include <errno.h>
#include <string.h>

#include "ring.h"
#include "wait.h"

/* A big send is published in pieces, so the consumer can start early. */
#define PUBLISH_CHUNK	(64u * 1024)

uint64_t pvgpu_ring_check_region(uint64_t offset, uint64_t size,
				 uint64_t window_size, uint64_t not_before,
				 const char **why)
{
	uint64_t cap;

	*why = NULL;
	if (offset % PVGPU_RING_HDR_SIZE) {
		*why = "offset is not page-aligned";
		return 0;
	}
	if (offset < not_before || offset > window_size ||
	    size > window_size - offset) {
		*why = "region lies outside the window's free part";
		return 0;
	}
	if (size <= PVGPU_RING_HDR_SIZE || (size - PVGPU_RING_HDR_SIZE) % 2) {
		*why = "size is not a header page and two equal halves";
		return 0;
	}
	cap = (size - PVGPU_RING_HDR_SIZE) / 2;
	if (cap < PVGPU_RING_MIN_CAP || cap > PVGPU_RING_MAX_CAP ||
	    (cap & (cap - 1))) {
		*why = "capacity is not a power of two in range";
		return 0;
	}
	return cap;
}

void pvgpu_ring_init_region(void *region)
{
	memset(region, 0, sizeof(struct pvgpu_ring_shared));
}

void pvgpu_ring_attach(struct pvgpu_ring *r, void *region, uint64_t cap,
		       enum pvgpu_ring_role role,
		       const struct pvgpu_ring_waiter *waiter)
{
	struct pvgpu_ring_shared *sh = region;
	uint8_t *data = (uint8_t *)region + PVGPU_RING_HDR_SIZE;
	int out = role == PVGPU_RING_GUEST ? 0 : 1;

	memset(r, 0, sizeof(*r));
	r->tx_ctrl = &sh->dir[out];
	r->rx_ctrl = &sh->dir[!out];
	r->tx = data + (uint64_t)out * cap;
	r->rx = data + (uint64_t)!out * cap;
	r->cap = cap;
	r->waiter = *waiter;
	if (r->waiter.spin_min_ns > r->waiter.spin_max_ns)
		r->waiter.spin_min_ns = r->waiter.spin_max_ns;
	r->spin_ns = r->waiter.spin_max_ns;
}

/* Bytes the peer published that we have not taken; -EPROTO if impossible. */
static int64_t rx_avail(struct pvgpu_ring *r)
{
	uint64_t p = __atomic_load_n(&r->rx_ctrl->prod, __ATOMIC_ACQUIRE);

	if (p < r->rx_peer) {
		r->error = "the peer's producer index went backwards";
		return -EPROTO;
	}
	if (p - r->rx_pos > r->cap) {
		r->error = "the peer's producer index is past the ring's capacity";
		return -EPROTO;
	}
	r->rx_peer = p;
	return (int64_t)(p - r->rx_pos);
}

/* Free bytes for us to fill; -EPROTO if the peer's index is impossible. */
static int64_t tx_room(struct pvgpu_ring *r)
{
	uint64_t c = __atomic_load_n(&r->tx_ctrl->cons, __ATOMIC_ACQUIRE);

	if (c < r->tx_peer) {
		r->error = "the peer's consumer index went backwards";
		return -EPROTO;
	}
	if (c > r->tx_pos) {
		r->error = "the peer's consumer index is past what was sent";
		return -EPROTO;
	}
	r->tx_peer = c;
	return (int64_t)(r->cap - (r->tx_pos - c));
}

int64_t pvgpu_ring_pending(struct pvgpu_ring *r)
{
	return rx_avail(r);
}

/* After a store the peer may be asleep waiting for: wake it if it said so. */
static int wake_peer(struct pvgpu_ring *r, uint32_t *flag)
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (!__atomic_load_n(flag, __ATOMIC_RELAXED) ||
	    !__atomic_exchange_n(flag, 0, __ATOMIC_ACQ_REL))
		return 0;
	r->kicks_sent++;
	return r->waiter.kick(r->waiter.arg);
}

/*
 * Until probe() finds something (> 0) or fails (< 0): spin up to the
 * current budget, then raise *flag, fence, look again and block.  The
 * budget adapts: a wait that blocked only briefly doubles it (a little
 * more spinning would have caught it), one that blocked for long halves
 * it (the peer is idle: spinning is waste).
 */
static int64_t wait_for(struct pvgpu_ring *r, int64_t (*probe)(struct pvgpu_ring *),
			uint32_t *flag)
{
	struct pvgpu_poll poll = { 0 };
	/* The one-shot budget is for a reply: waits for room keep theirs. */
	uint64_t blocked_at = 0, once = probe == rx_avail ? r->spin_once_ns : 0;
	uint64_t budget = once > r->spin_ns ? once : r->spin_ns;
	int64_t n;

	if (probe == rx_avail)
		r->spin_once_ns = 0;
	for (;;) {
		n = probe(r);
		if (n)
			break;
		if (!blocked_at && budget && pvgpu_poll_again(&poll, budget))
			continue;
		if (!blocked_at)
			blocked_at = pvgpu_now_ns();
		__atomic_store_n(flag, 1, __ATOMIC_RELAXED);
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		n = probe(r);
		if (n) {
			__atomic_store_n(flag, 0, __ATOMIC_RELAXED);
			break;
		}
		r->sleeps++;
		n = r->waiter.wait_kick(r->waiter.arg);
		__atomic_store_n(flag, 0, __ATOMIC_RELAXED);
		if (n < 0)
			return n;
	}
	if (once > r->spin_ns)
		;	/* a wait told how long to spin teaches nothing */
	else if (n > 0 && blocked_at) {
		uint64_t max = r->waiter.spin_max_ns, b = pvgpu_now_ns() - blocked_at;

		if (b < max)
			r->spin_ns = r->spin_ns * 2 > max ? max : r->spin_ns * 2;
		else if (b > 8 * max)
			r->spin_ns = r->spin_ns / 2 < r->waiter.spin_min_ns ?
				     r->waiter.spin_min_ns : r->spin_ns / 2;
		if (!r->spin_ns && max)
			r->spin_ns = r->waiter.spin_min_ns ? r->waiter.spin_min_ns : max;
	} else if (n > 0 && !blocked_at && poll.i) {
		r->spin_ns = r->waiter.spin_max_ns;	/* the peer is chatty again */
	}
	return n;
}

static int publish(struct pvgpu_ring *r)
{
	__atomic_store_n(&r->tx_ctrl->prod, r->tx_pos, __ATOMIC_RELEASE);
	r->tx_published = r->tx_pos;
	return wake_peer(r, &r->tx_ctrl->cons_sleeping);
}

int pvgpu_ring_sendv(struct pvgpu_ring *r, const struct iovec *iov, int iovcnt)
{
	uint64_t mask = r->cap - 1, total = 0;
	int64_t room;
	int rc;

	/*
	 * The peer's consumer index is read only when what we last saw of it
	 * leaves less than half the ring, or less than this message: the
	 * peer writes that word after every read, and loading it for every
	 * message would pull its cache line across to us and back each time
	 * (on the critical path of both sides).  What we last saw is never
	 * more room than there is: indexes only move forwards.
	 */
	for (int i = 0; i < iovcnt; i++)
		total += iov[i].iov_len;
	room = (int64_t)(r->cap - (r->tx_pos - r->tx_peer));
	if ((uint64_t)room < r->cap / 2 || (uint64_t)room < total) {
		room = tx_room(r);
		if (room < 0)
			return (int)room;
	}
	for (int i = 0; i < iovcnt; i++) {
		const uint8_t *p = iov[i].iov_base;
		size_t left = iov[i].iov_len;

		while (left) {
			uint64_t n, off, first;

			if (room == 0)
				room = tx_room(r);
			if (room == 0) {
				/* The consumer may be waiting for what we hold back. */
				if (r->tx_published != r->tx_pos && (rc = publish(r)))
					return rc;
				room = wait_for(r, tx_room, &r->tx_ctrl->prod_sleeping);
			}
			if (room < 0)
				return (int)room;
			n = (uint64_t)room < left ? (uint64_t)room : left;
			if (n > PUBLISH_CHUNK)
				n = PUBLISH_CHUNK;
			off = r->tx_pos & mask;
			first = r->cap - off < n ? r->cap - off : n;
			memcpy(r->tx + off, p, first);
			memcpy(r->tx, p + first, n - first);
			p += n;
			left -= n;
			r->tx_pos += n;
			room -= (int64_t)n;
			/* A big send goes out in pieces; a small one at its end. */
			if (r->tx_pos - r->tx_published >= PUBLISH_CHUNK &&
			    (rc = publish(r)))
				return rc;
		}
	}
	return r->tx_published != r->tx_pos ? publish(r) : 0;
}

int pvgpu_ring_send(struct pvgpu_ring *r, const void *buf, size_t len)
{
	struct iovec iov = { (void *)buf, len };

	return pvgpu_ring_sendv(r, &iov, 1);
}

int pvgpu_ring_recv(struct pvgpu_ring *r, void *buf, size_t len)
{
	uint64_t mask = r->cap - 1;
	uint8_t *p = buf;

	while (len) {
		/* What we saw published and have not taken yet, else a look. */
		int64_t avail = (int64_t)(r->rx_peer - r->rx_pos);
		uint64_t n, off, first;
		int rc;

		if ((uint64_t)avail < len)
			avail = rx_avail(r);

		if (avail == 0)
			avail = wait_for(r, rx_avail, &r->rx_ctrl->cons_sleeping);
		if (avail < 0)
			return (int)avail;
		n = (uint64_t)avail < len ? (uint64_t)avail : len;
		off = r->rx_pos & mask;
		first = r->cap - off < n ? r->cap - off : n;
		memcpy(p, r->rx + off, first);
		memcpy(p + first, r->rx, n - first);
		p += n;
		len -= n;
		r->rx_pos += n;
		__atomic_store_n(&r->rx_ctrl->cons, r->rx_pos, __ATOMIC_RELEASE);
		rc = wake_peer(r, &r->rx_ctrl->prod_sleeping);
		if (rc)
			return rc;
	}
	return 0;
}
