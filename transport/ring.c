/* ring.c - see ring.h. */
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>

#include "relax.h"
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

void pvgpu_ring_init_region(void *region, uint64_t cap)
{
	uint8_t *data = (uint8_t *)region + PVGPU_RING_HDR_SIZE;

	memset(region, 0, sizeof(struct pvgpu_ring_shared));
	memset(data, 0, PVGPU_RING_TAG_SIZE);
	memset(data + cap, 0, PVGPU_RING_TAG_SIZE);
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

static uint64_t align_up(uint64_t v)
{
	return (v + PVGPU_RING_ALIGN - 1) & ~(uint64_t)(PVGPU_RING_ALIGN - 1);
}

/* The ring space a record of n bytes takes, tag and padding included. */
static uint64_t record_size(uint64_t n)
{
	return align_up(PVGPU_RING_TAG_SIZE + n);
}

static uint64_t *tag_at(uint8_t *area, uint64_t cap, uint64_t pos)
{
	return (uint64_t *)(void *)(area + (pos & (cap - 1)));
}

/*
 * Bytes of the record being read, else of the next one if its tag is
 * published (taking it); 0 if none; -EPROTO if the tag is impossible.
 */
static int64_t rx_avail(struct pvgpu_ring *r)
{
	uint64_t tag, len;

	if (r->rx_pos != r->rx_end)
		return (int64_t)(r->rx_end - r->rx_pos);
	tag = __atomic_load_n(tag_at(r->rx, r->cap, r->rx_next), __ATOMIC_ACQUIRE);
	if (!tag)
		return 0;
	len = tag & 0xffffffffu;
	if (tag != pvgpu_ring_tag(r->rx_next, len)) {
		r->error = "a record's tag names another position";
		return -EPROTO;
	}
	if (!len || len > pvgpu_ring_max_record(r->cap)) {
		r->error = "a record's length is past the ring's capacity";
		return -EPROTO;
	}
	r->rx_pos = r->rx_next + PVGPU_RING_TAG_SIZE;
	r->rx_end = r->rx_pos + len;
	r->rx_next += record_size(len);
	return (int64_t)len;
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

/* Room, once it holds a record of at least one byte; else 0. */
static int64_t tx_room_for_record(struct pvgpu_ring *r)
{
	int64_t room = tx_room(r);

	return room < 0 || room >= 2 * PVGPU_RING_ALIGN ? room : 0;
}

int64_t pvgpu_ring_pending(struct pvgpu_ring *r)
{
	return rx_avail(r);
}

/* What pvgpu_ring_wait_until() waits for: INT64_MAX once done, else bytes. */
static int64_t until_avail(struct pvgpu_ring *r)
{
	return r->until(r->until_arg) ? INT64_MAX : rx_avail(r);
}

/* The peer said it sleeps on flag: take the flag down and wake it. */
static int kick_if_asleep(struct pvgpu_ring *r, uint32_t *flag)
{
	if (!__atomic_load_n(flag, __ATOMIC_RELAXED) ||
	    !__atomic_exchange_n(flag, 0, __ATOMIC_ACQ_REL))
		return 0;
	r->kicks_sent++;
	return r->waiter.kick(r->waiter.arg);
}

/* After a store the peer may be asleep waiting for: wake it if it said so. */
static int wake_peer(struct pvgpu_ring *r, uint32_t *flag)
{
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	return kick_if_asleep(r, flag);
}

/*
 * A wait told to spin long (a reply that waits on the device) spins hard
 * this long, then gives the CPU to anything else runnable between looks
 * (sched_yield returns at once when nothing else is), as NVIDIA's driver
 * spins or yields by how busy the machine is: with cores to spare it is
 * still a spin; where the guest shares its cores with the device's work
 * (the sim on a 2-core machine), that work runs.
 */
#define YIELD_AFTER_NS	(2ull * 1000 * 1000)

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
	int rx = probe == rx_avail || probe == until_avail;
	/* The one-shot budget is for a reply: waits for room keep theirs. */
	uint64_t blocked_at = 0, once = rx ? r->spin_once_ns : 0;
	uint64_t budget = once > r->spin_ns ? once : r->spin_ns;
	int64_t n;

	if (rx)
		r->spin_once_ns = 0;
	for (;;) {
		n = probe(r);
		if (n)
			break;
		/* A producer that went to sleep for room unseen (ring.h). */
		if (rx) {
			int rc = kick_if_asleep(r, &r->rx_ctrl->prod_sleeping);

			if (rc)
				return rc;
		}
		if (!blocked_at && budget && pvgpu_poll_again(&poll, budget)) {
			if (once > YIELD_AFTER_NS &&
			    poll.now - poll.start >= YIELD_AFTER_NS) {
				r->yields++;
				sched_yield();
			}
			continue;
		}
		if (!blocked_at)
			blocked_at = pvgpu_now_ns();
		__atomic_store_n(flag, 1, __ATOMIC_RELAXED);
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		n = probe(r);
		if (n) {
			__atomic_store_n(flag, 0, __ATOMIC_RELAXED);
			break;
		}
		/* Past the fence: our cons is seen, and so is a sleeping producer. */
		if (rx) {
			n = kick_if_asleep(r, &r->rx_ctrl->prod_sleeping);
			if (n) {
				__atomic_store_n(flag, 0, __ATOMIC_RELAXED);
				return n;
			}
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

/*
 * Room for a record of n bytes and the next record's tag (we zero it),
 * and how many of n bytes fit if not all: the payload that fits, which may
 * be 0.
 */
static uint64_t fits(uint64_t room, uint64_t n)
{
	uint64_t max;

	if (record_size(n) + PVGPU_RING_ALIGN <= room)
		return n;
	if (room < 2 * PVGPU_RING_ALIGN)
		return 0;
	max = room - PVGPU_RING_ALIGN;		/* whole lines for the record */
	return (max & ~(uint64_t)(PVGPU_RING_ALIGN - 1)) - PVGPU_RING_TAG_SIZE;
}

/*
 * Zero the tags of the lines ahead of tx_pos, up to PVGPU_RING_RUNWAY
 * bytes, that the consumer has released (a word at q is free once the
 * consumer is past q - cap): a later record whose next tag falls among
 * them is then published with one store (ring.h).
 */
static void extend_runway(struct pvgpu_ring *r)
{
	uint64_t end = r->tx_pos + PVGPU_RING_RUNWAY,
		 free_end = r->tx_peer + r->cap - PVGPU_RING_ALIGN;
	uint64_t z = r->tx_zeroed;

	if (end > free_end)
		end = free_end;
	while (z + PVGPU_RING_ALIGN <= end) {
		z += PVGPU_RING_ALIGN;
		__atomic_store_n(tag_at(r->tx, r->cap, z), 0, __ATOMIC_RELAXED);
	}
	r->tx_zeroed = z;
}

/* Copy n bytes of iov (from element *iv, byte *ivoff on) into the ring at pos. */
static void put_bytes(struct pvgpu_ring *r, uint64_t pos, const struct iovec *iov,
		      int *iv, size_t *ivoff, uint64_t n)
{
	uint64_t mask = r->cap - 1;

	while (n) {
		const uint8_t *p = (const uint8_t *)iov[*iv].iov_base + *ivoff;
		uint64_t k = iov[*iv].iov_len - *ivoff, off, first;

		if (!k) {
			(*iv)++;
			*ivoff = 0;
			continue;
		}
		if (k > n)
			k = n;
		off = pos & mask;
		first = r->cap - off < k ? r->cap - off : k;
		memcpy(r->tx + off, p, first);
		memcpy(r->tx, p + first, k - first);
		pos += k;
		n -= k;
		*ivoff += k;
	}
}

int pvgpu_ring_sendv(struct pvgpu_ring *r, const struct iovec *iov, int iovcnt)
{
	uint64_t total = 0, room;
	size_t ivoff = 0;
	int iv = 0;

	for (int i = 0; i < iovcnt; i++)
		total += iov[i].iov_len;
	/*
	 * The peer's consumer index is read only when what we last saw of it
	 * leaves less than half the ring, or too little for this message: the
	 * peer writes that word after every record it reads, and loading it
	 * for every message would pull its cache line across to us and back
	 * each time (on the critical path of both sides).  What we last saw
	 * is never more room than there is: indexes only move forwards.
	 */
	room = r->cap - (r->tx_pos - r->tx_peer);
	while (total) {
		uint64_t n = total < PUBLISH_CHUNK ? total : PUBLISH_CHUNK, next;
		int64_t got;
		int rc;

		if (n > pvgpu_ring_max_record(r->cap))
			n = pvgpu_ring_max_record(r->cap);
		if (room < r->cap / 2 || fits(room, n) < n) {
			got = tx_room(r);
			if (got < 0)
				return (int)got;
			room = (uint64_t)got;
		}
		if (!fits(room, n)) {
			got = wait_for(r, tx_room_for_record, &r->tx_ctrl->prod_sleeping);
			if (got < 0)
				return (int)got;
			room = (uint64_t)got;
		}
		n = fits(room, n);
		next = r->tx_pos + record_size(n);
		/*
		 * The next record's tag zeroed first (by an earlier send, if
		 * the runway reaches it), then the bytes, then this tag: a
		 * consumer polling this line takes it once, whole.
		 */
		if (next > r->tx_zeroed) {
			__atomic_store_n(tag_at(r->tx, r->cap, next), 0, __ATOMIC_RELAXED);
			r->tx_zeroed = next;
		}
		put_bytes(r, r->tx_pos + PVGPU_RING_TAG_SIZE, iov, &iv, &ivoff, n);
		__atomic_store_n(tag_at(r->tx, r->cap, r->tx_pos),
				 pvgpu_ring_tag(r->tx_pos, n), __ATOMIC_RELEASE);
		/* Towards the reader: its poll of the tag then hits the shared cache. */
		pvgpu_cache_demote(tag_at(r->tx, r->cap, r->tx_pos));
		if (record_size(n) > PVGPU_RING_ALIGN)
			pvgpu_cache_demote(tag_at(r->tx, r->cap, r->tx_pos + PVGPU_RING_ALIGN));
		room -= next - r->tx_pos;
		r->tx_pos = next;
		total -= n;
		rc = wake_peer(r, &r->tx_ctrl->cons_sleeping);
		if (rc)
			return rc;
		extend_runway(r);
	}
	return 0;
}

int pvgpu_ring_send(struct pvgpu_ring *r, const void *buf, size_t len)
{
	struct iovec iov = { (void *)buf, len };

	return pvgpu_ring_sendv(r, &iov, 1);
}

int64_t pvgpu_ring_wait_until(struct pvgpu_ring *r, int (*done)(void *arg),
			      void *arg, uint64_t spin_ns)
{
	int64_t n;

	r->until = done;
	r->until_arg = arg;
	r->spin_once_ns = spin_ns;
	n = until_avail(r);
	if (!n)
		n = wait_for(r, until_avail, &r->rx_ctrl->cons_sleeping);
	r->until = NULL;
	return n == INT64_MAX ? 0 : n;
}

int pvgpu_ring_wake(struct pvgpu_ring *r)
{
	return wake_peer(r, &r->tx_ctrl->cons_sleeping);
}

int pvgpu_ring_recv(struct pvgpu_ring *r, void *buf, size_t len)
{
	uint64_t mask = r->cap - 1;
	uint8_t *p = buf;

	while (len) {
		int64_t avail = (int64_t)(r->rx_end - r->rx_pos);
		uint64_t n, off, first;
		int rc;

		if (!avail)
			avail = rx_avail(r);
		if (!avail)
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
		if (r->rx_pos != r->rx_end)
			continue;
		/* The record is read: the producer may reuse its space. */
		__atomic_store_n(&r->rx_ctrl->cons, r->rx_next, __ATOMIC_RELEASE);
		rc = kick_if_asleep(r, &r->rx_ctrl->prod_sleeping);	/* no fence: ring.h */
		if (rc)
			return rc;
	}
	return 0;
}
