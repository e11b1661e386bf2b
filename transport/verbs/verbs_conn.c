/*
 * verbs_conn.c - a verbs:// connection as a byte stream over one RC queue
 * pair: RDMA WRITE WITH IMMEDIATE into the peer's registered ring, credits
 * back by RDMA WRITE (verbs_wire.h).  Both halves use it; everything here
 * runs in the process that owns the connection (the worker, on the host).
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <arpa/inet.h>

#include "verbs_conn.h"

#define WR_DATA		1
#define WR_CREDIT	2
#define WR_READ		3

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int fail(struct verbs_conn *c, int rc, const char *fmt, const char *what)
{
	if (!c->broken) {
		c->broken = rc;
		snprintf(c->why, sizeof(c->why), fmt, what);
	}
	return c->broken;
}

int verbs_cm_wait(struct rdma_event_channel *ch, enum rdma_cm_event_type want,
		  int timeout_ms, struct rdma_cm_event **ev, char *err,
		  size_t errlen)
{
	struct pollfd pfd = { ch->fd, POLLIN, 0 };
	struct rdma_cm_event *e;
	int rc;

	rc = poll(&pfd, 1, timeout_ms);
	if (rc <= 0) {
		snprintf(err, errlen, "no answer within %d ms (%s)", timeout_ms,
			 rdma_event_str(want));
		return -ETIMEDOUT;
	}
	if (rdma_get_cm_event(ch, &e)) {
		snprintf(err, errlen, "rdma_get_cm_event: %s", strerror(errno));
		return -errno;
	}
	if (e->event != want) {
		snprintf(err, errlen, "%s (status %d) instead of %s",
			 rdma_event_str(e->event), e->status,
			 rdma_event_str(want));
		rc = e->event == RDMA_CM_EVENT_REJECTED ? -ECONNREFUSED :
							  -ECONNABORTED;
		rdma_ack_cm_event(e);
		return rc;
	}
	*ev = e;
	return 0;
}

static void *ring_alloc(size_t size)
{
	void *p = NULL;

	if (posix_memalign(&p, 4096, size))
		return NULL;
	memset(p, 0, size);
	return p;
}

int verbs_conn_resources(struct verbs_conn *c, char *err, size_t errlen)
{
	size_t ring = (size_t)c->nslots * c->slot_size + 64;
	int flags;

	c->pd = ibv_alloc_pd(c->ctx);
	if (!c->pd)
		goto err_verbs;
	c->comp = ibv_create_comp_channel(c->ctx);
	if (!c->comp)
		goto err_verbs;
	flags = fcntl(c->comp->fd, F_GETFL);
	if (flags < 0 || fcntl(c->comp->fd, F_SETFL, flags | O_NONBLOCK))
		goto err_verbs;
	c->scq = ibv_create_cq(c->ctx, (int)c->nslots + 8 + VERBS_RD_CHUNKS,
			       NULL, NULL, 0);
	c->rcq = ibv_create_cq(c->ctx, (int)c->nslots + 8, NULL, c->comp, 0);
	if (!c->scq || !c->rcq)
		goto err_verbs;
	/* Registered once, for the connection's life: never per message. */
	c->rx = ring_alloc(ring);
	c->tx = ring_alloc(ring);
	if (!c->rx || !c->tx) {
		snprintf(err, errlen, "out of memory for the rings");
		return -ENOMEM;
	}
	c->rx_mr = ibv_reg_mr(c->pd, c->rx, ring,
			      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	c->tx_mr = ibv_reg_mr(c->pd, c->tx, ring, IBV_ACCESS_LOCAL_WRITE);
	if (!c->rx_mr || !c->tx_mr)
		goto err_verbs;
	return 0;

err_verbs:
	snprintf(err, errlen, "verbs resources: %s", strerror(errno));
	return errno ? -errno : -EIO;
}

int verbs_conn_qp(struct verbs_conn *c, char *err, size_t errlen)
{
	struct ibv_qp_init_attr qa;

	memset(&qa, 0, sizeof(qa));
	qa.send_cq = c->scq;
	qa.recv_cq = c->rcq;
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = c->nslots + 4 + VERBS_RD_CHUNKS;
	qa.cap.max_recv_wr = c->nslots + 2;
	qa.cap.max_send_sge = 1;
	qa.cap.max_recv_sge = 1;
	c->qp = ibv_create_qp(c->pd, &qa);
	if (!c->qp) {
		snprintf(err, errlen, "ibv_create_qp: %s", strerror(errno));
		return errno ? -errno : -EIO;
	}
	c->own_qp = 1;
	return 0;
}

int verbs_conn_qp_state(struct verbs_conn *c, enum ibv_qp_state s, char *err,
			size_t errlen)
{
	struct ibv_qp_attr attr;
	int mask = 0;

	memset(&attr, 0, sizeof(attr));
	attr.qp_state = s;
	if (rdma_init_qp_attr(c->id, &attr, &mask)) {
		snprintf(err, errlen, "rdma_init_qp_attr(%d): %s", s, strerror(errno));
		return errno ? -errno : -EIO;
	}
	if (s == IBV_QPS_INIT)
		attr.qp_access_flags |= IBV_ACCESS_REMOTE_WRITE |
					IBV_ACCESS_REMOTE_READ;
	if (ibv_modify_qp(c->qp, &attr, mask)) {
		snprintf(err, errlen, "ibv_modify_qp(%d): %s", s, strerror(errno));
		return errno ? -errno : -EIO;
	}
	return 0;
}

void verbs_conn_local_ring(struct verbs_conn *c, struct pvgpu_verbs_ring *r)
{
	r->addr = (uint64_t)(uintptr_t)c->rx;
	r->rkey = c->rx_mr->rkey;
	r->nslots = c->nslots;
	r->slot_size = c->slot_size;
	r->features = PVGPU_VERBS_F_REF | PVGPU_VERBS_F_MORE;
}

static int post_receive(struct verbs_conn *c)
{
	/* No buffer: the data lands in the ring by RDMA WRITE. */
	struct ibv_recv_wr wr = { .wr_id = 0, .sg_list = NULL, .num_sge = 0 };
	struct ibv_recv_wr *bad;

	if (ibv_post_recv(c->qp, &wr, &bad))
		return fail(c, -EIO, "ibv_post_recv: %s", strerror(errno));
	return 0;
}

int verbs_conn_post_receives(struct verbs_conn *c, char *err, size_t errlen)
{
	for (uint32_t i = 0; i < c->nslots; i++)
		if (post_receive(c)) {
			snprintf(err, errlen, "%s", c->why);
			return c->broken;
		}
	return 0;
}

static volatile uint64_t *credit_word(struct verbs_conn *c)
{
	return (volatile uint64_t *)(c->rx + (size_t)c->nslots * c->slot_size);
}

/* Reap send completions; an error there is the end of the connection. */
static int poll_send(struct verbs_conn *c)
{
	struct ibv_wc wc[16];
	int n;

	while ((n = ibv_poll_cq(c->scq, 16, wc)) > 0) {
		for (int i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS && wc[i].wr_id == WR_READ)
				return fail(c, -EPROTO, "RDMA READ of the peer's memory failed: %s",
					    ibv_wc_status_str(wc[i].status));
			if (wc[i].status != IBV_WC_SUCCESS)
				return fail(c, -ECONNRESET, "send failed: %s (peer gone?)",
					    ibv_wc_status_str(wc[i].status));
			c->outstanding--;
			if (wc[i].wr_id == WR_DATA) {
				c->tx_done++;
			} else if (wc[i].wr_id == WR_READ) {
				/* In order, a chunk each (the last one short). */
				c->rd_done = c->ref.len - c->rd_done < VERBS_RD_CHUNK ?
					     c->ref.len : c->rd_done + VERBS_RD_CHUNK;
			} else {
				c->credit_pending = 0;
			}
		}
	}
	if (n < 0)
		return fail(c, -EIO, "ibv_poll_cq: %s", "failed");
	return c->broken;
}

/* Reap receive completions: each is one more slot in our ring. */
static int poll_recv(struct verbs_conn *c)
{
	struct ibv_wc wc[16];
	int n;

	while ((n = ibv_poll_cq(c->rcq, 16, wc)) > 0) {
		for (int i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS)
				return fail(c, wc[i].status == IBV_WC_WR_FLUSH_ERR ?
					    -ECONNRESET : -EPROTO,
					    "receive failed: %s",
					    ibv_wc_status_str(wc[i].status));
			/* A SEND, or a write without a sequence: garbage. */
			if (wc[i].opcode != IBV_WC_RECV_RDMA_WITH_IMM ||
			    !(wc[i].wc_flags & IBV_WC_WITH_IMM))
				return fail(c, -EPROTO, "%s", "peer posted something other than a ring write");
			if (ntohl(wc[i].imm_data) != (uint32_t)c->rx_seq)
				return fail(c, -EPROTO, "%s", "ring write out of sequence");
			if (c->rx_seq - c->rx_used >= c->nslots)
				return fail(c, -EPROTO, "%s", "peer overran the ring");
			c->rx_seq++;
		}
	}
	if (n < 0)
		return fail(c, -EIO, "ibv_poll_cq: %s", "failed");
	return c->broken;
}

/* A disconnect (or worse) on the connection's event channel. */
static int poll_cm(struct verbs_conn *c)
{
	struct pollfd pfd = { c->ch->fd, POLLIN, 0 };
	struct rdma_cm_event *e;

	if (poll(&pfd, 1, 0) <= 0)
		return 0;
	if (rdma_get_cm_event(c->ch, &e))
		return 0;
	if (e->event == RDMA_CM_EVENT_DISCONNECTED ||
	    e->event == RDMA_CM_EVENT_DEVICE_REMOVAL ||
	    e->event == RDMA_CM_EVENT_TIMEWAIT_EXIT ||
	    e->event == RDMA_CM_EVENT_UNREACHABLE)
		fail(c, -ECONNRESET, "%s", rdma_event_str(e->event));
	rdma_ack_cm_event(e);
	return c->broken;
}

/* Sleep until a receive completion or a connection event, at most ms. */
static int block(struct verbs_conn *c, int ms)
{
	struct pollfd pfd[2] = {
		{ c->comp->fd, POLLIN, 0 },
		{ c->ch->fd, POLLIN, 0 },
	};
	struct ibv_cq *cq;
	void *ctx;

	if (ibv_req_notify_cq(c->rcq, 0))
		return fail(c, -EIO, "ibv_req_notify_cq: %s", strerror(errno));
	if (poll_recv(c) || c->rx_seq > c->rx_used)
		return c->broken;
	if (poll(pfd, 2, ms) < 0 && errno != EINTR)
		return fail(c, -EIO, "poll: %s", strerror(errno));
	if ((pfd[0].revents & POLLIN) && !ibv_get_cq_event(c->comp, &cq, &ctx))
		ibv_ack_cq_events(cq, 1);
	return poll_cm(c);
}

/*
 * Longer than this since stalled() last looked, we were not running
 * (stopped, or a paused VM): what arrived meanwhile is judged first.
 */
#define STALL_GAP_NS	(100u * 1000 * 1000)

/*
 * A peer that neither hands credit back nor completes our writes by
 * give_up, yet never disconnected (frozen, or its host gone quietly):
 * the connection ends, saying so.  Only a peer silent while we watched:
 * after a gap of our own, the caller's loop looks once more at what the
 * completions it just reaped (or the peer's writes) changed.
 */
static int stalled(struct verbs_conn *c, uint64_t give_up)
{
	uint64_t now = now_ns(), last = c->stall_look;
	char what[16];

	c->stall_look = now;
	if (now < give_up || now - last > STALL_GAP_NS)
		return 0;
	snprintf(what, sizeof(what), "%u", c->timeout_ms);
	return fail(c, -ETIMEDOUT,
		    "peer silent for %s ms: no credit or completion, no disconnect",
		    what);
}

/*
 * Nothing more by give_up of a message whose last slot said more follows
 * (a peer frozen halfway through sending it, or gone quietly): an idle
 * peer never leaves a message unfinished, so this one is bounded too.
 */
static int halfway(struct verbs_conn *c, uint64_t give_up)
{
	char what[16];

	if (!c->rx_more || now_ns() < give_up)
		return 0;
	snprintf(what, sizeof(what), "%u", c->timeout_ms);
	return fail(c, -ETIMEDOUT,
		    "peer stopped halfway through a message: nothing more for %s ms, no disconnect",
		    what);
}

/*
 * One signalled RDMA operation of len bytes at local (key lkey) and
 * raddr (key rkey) of the peer: 0, or the connection fails.
 */
static int post_rdma(struct verbs_conn *c, uint64_t wr_id,
		     enum ibv_wr_opcode op, void *local, uint32_t len,
		     uint32_t lkey, uint64_t raddr, uint32_t rkey, uint32_t imm)
{
	struct ibv_sge sge = { (uintptr_t)local, len, lkey };
	struct ibv_send_wr wr, *bad;

	memset(&wr, 0, sizeof(wr));
	wr.wr_id = wr_id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = op;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.imm_data = htonl(imm);
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	if (ibv_post_send(c->qp, &wr, &bad))
		return fail(c, -EIO, "ibv_post_send: %s", strerror(errno));
	c->outstanding++;
	return 0;
}

/*
 * Hand consumed slots back when a quarter of the ring has been read, or at
 * once (force: a REF slot, whose memory its sender waits to have back).
 */
static int give_credit(struct verbs_conn *c, int force)
{
	uint64_t *word = (uint64_t *)(c->tx + (size_t)c->nslots * c->slot_size);
	uint32_t step = c->nslots / 4 ? c->nslots / 4 : 1;
	uint64_t give_up;

	if (c->rx_used == c->credit_sent ||
	    (!force && c->rx_used - c->credit_sent < step))
		return 0;
	give_up = now_ns() + (uint64_t)c->timeout_ms * 1000000u;
	while (c->credit_pending)		/* its source word is still being read */
		if (poll_send(c) || poll_cm(c) || stalled(c, give_up))
			return c->broken;
	*word = htole64(c->rx_used);
	if (post_rdma(c, WR_CREDIT, IBV_WR_RDMA_WRITE, word, 8, c->tx_mr->lkey,
		      c->peer.addr + (uint64_t)c->peer.nslots * c->peer.slot_size,
		      c->peer.rkey, 0))
		return c->broken;
	c->credit_pending = 1;
	c->credit_sent = c->rx_used;
	return 0;
}

/* The current slot's header, checked: 0, or the connection fails. */
static int open_slot(struct verbs_conn *c, const uint8_t *slot)
{
	uint8_t hdr[PVGPU_VERBS_SLOT_HDR];

	uint8_t ref[PVGPU_VERBS_REF_LEN];
	int kind;

	/* Read the header once: the peer may write again. */
	memcpy(hdr, slot, sizeof(hdr));
	kind = pvgpu_verbs_slot_check(hdr, (uint32_t)c->rx_used, c->slot_size,
				      &c->rx_len);
	if (kind < 0)
		return fail(c, -EPROTO, "%s", "garbage in a ring slot");
	c->rx_more = !!(kind & PVGPU_VERBS_SLOT_MORE);
	kind &= ~(int)PVGPU_VERBS_SLOT_MORE;
	c->rx_ref = 0;
	if (kind == PVGPU_VERBS_SLOT_REF) {
		memcpy(ref, slot + PVGPU_VERBS_SLOT_HDR, sizeof(ref));
		if (pvgpu_verbs_ref_decode(ref, c->rx_len, &c->ref))
			return fail(c, -EPROTO, "%s", "a bad reference in a ring slot");
		if (!c->rd) {
			/* Registered once, at the first reference. */
			c->rd = ring_alloc((size_t)VERBS_RD_CHUNK * VERBS_RD_CHUNKS);
			if (!c->rd)
				return fail(c, -ENOMEM, "%s", "out of memory for RDMA READ");
			c->rd_mr = ibv_reg_mr(c->pd, c->rd,
					      (size_t)VERBS_RD_CHUNK * VERBS_RD_CHUNKS,
					      IBV_ACCESS_LOCAL_WRITE);
			if (!c->rd_mr)
				return fail(c, -EIO, "ibv_reg_mr: %s", strerror(errno));
		}
		c->rx_ref = 1;
		c->rx_len = c->ref.len;	/* the bytes of the stream it stands for */
		c->rd_posted = c->rd_done = 0;
	}
	c->rx_off = 0;
	c->rx_have = 1;
	return 0;
}

/* The current slot is read: hand it back. */
static int close_slot(struct verbs_conn *c)
{
	int ref = c->rx_ref;

	c->rx_have = 0;
	c->rx_ref = 0;
	c->rx_used++;
	if (post_receive(c))
		return c->broken;
	return give_credit(c, ref);
}

/* RDMA READs of the current REF slot's bytes, as far as rd has room. */
static int ref_post(struct verbs_conn *c)
{
	while (c->rd_posted < c->ref.len &&
	       c->rd_posted / VERBS_RD_CHUNK < c->rx_off / VERBS_RD_CHUNK + VERBS_RD_CHUNKS) {
		uint32_t n = c->ref.len - c->rd_posted < VERBS_RD_CHUNK ?
			     c->ref.len - c->rd_posted : VERBS_RD_CHUNK;
		uint8_t *to = c->rd + (size_t)(c->rd_posted / VERBS_RD_CHUNK %
					      VERBS_RD_CHUNKS) * VERBS_RD_CHUNK;

		if (post_rdma(c, WR_READ, IBV_WR_RDMA_READ, to, n, c->rd_mr->lkey,
			      c->ref.addr + c->rd_posted, c->ref.rkey, 0))
			return c->broken;
		c->rd_posted += n;
	}
	return 0;
}

/* Up to n bytes of the current REF slot, as its reads arrive: > 0 or -errno. */
static ssize_t ref_take(struct verbs_conn *c, uint8_t *out, size_t n)
{
	uint64_t give_up = now_ns() + (uint64_t)c->timeout_ms * 1000000u;
	uint32_t at, avail;

	if (ref_post(c))
		return c->broken;
	while (c->rd_done == c->rx_off)
		if (poll_send(c) || poll_cm(c) || stalled(c, give_up))
			return c->broken;
	at = c->rx_off % VERBS_RD_CHUNK;
	avail = c->rd_done - c->rx_off;
	if (avail > VERBS_RD_CHUNK - at)
		avail = VERBS_RD_CHUNK - at;
	if (avail > n)
		avail = (uint32_t)n;
	memcpy(out, c->rd + (size_t)(c->rx_off / VERBS_RD_CHUNK % VERBS_RD_CHUNKS) *
		    VERBS_RD_CHUNK + at, avail);
	return avail;
}

/*
 * While we wait for credit, move what has arrived into the stash, so the
 * peer (perhaps waiting for credit from us) can go on.
 */
static int drain(struct verbs_conn *c)
{
	if (poll_recv(c))
		return c->broken;
	while (c->rx_have || c->rx_seq > c->rx_used) {
		uint8_t *slot = c->rx + (size_t)(c->rx_used % c->nslots) * c->slot_size;
		size_t n;

		if (!c->rx_have && open_slot(c, slot))
			return c->broken;
		if (c->rx_ref)
			return 0;	/* read in order, by its reader */
		n = c->rx_len - c->rx_off;
		if (c->stash_off && c->stash_off == c->stash_len)
			c->stash_off = c->stash_len = 0;
		if (c->stash_len + n > c->stash_cap) {
			size_t cap = c->stash_cap ? c->stash_cap : 1u << 20;
			uint8_t *p;

			while (cap < c->stash_len + n)
				cap *= 2;
			if (cap > VERBS_STASH_MAX)
				return fail(c, -ENOBUFS, "%s",
					    "peer sends without ever reading: gave up");
			p = realloc(c->stash, cap);
			if (!p)
				return fail(c, -ENOMEM, "%s", "out of memory for the stash");
			c->stash = p;
			c->stash_cap = cap;
		}
		memcpy(c->stash + c->stash_len, slot + PVGPU_VERBS_SLOT_HDR + c->rx_off, n);
		c->stash_len += n;
		if (close_slot(c))
			return c->broken;
	}
	return 0;
}

/* The pinned region holding [p, p+len), where len is worth a REF slot. */
static struct verbs_pin *pinned(struct verbs_conn *c, const void *p, size_t len)
{
	const uint8_t *b = p;

	if (len < VERBS_REF_MIN || !(c->peer.features & PVGPU_VERBS_F_REF))
		return NULL;
	for (size_t i = 0; i < c->npins; i++)
		if (b >= c->pins[i].base && len <= c->pins[i].size &&
		    (size_t)(b - c->pins[i].base) <= c->pins[i].size - len)
			return &c->pins[i];
	return NULL;
}

/*
 * Until the peer has read (and handed back) every REF slot we sent; silent
 * for ?timeout= is judged from the last slot it handed back, so a copy of
 * many slots may take as long as it needs on a slow link.
 */
static int wait_refs(struct verbs_conn *c)
{
	uint64_t spin_until = now_ns() + c->poll_ns;
	uint64_t give_up = spin_until + (uint64_t)c->timeout_ms * 1000000u;
	uint64_t credit = le64toh(*credit_word(c));

	while (!c->broken && credit < c->ref_wait) {
		if (poll_send(c) || poll_cm(c) || drain(c) || stalled(c, give_up))
			break;
		if (le64toh(*credit_word(c)) != credit) {
			credit = le64toh(*credit_word(c));
			give_up = now_ns() + (uint64_t)c->timeout_ms * 1000000u;
			continue;
		}
		if (now_ns() > spin_until) {
			struct timespec ts = { 0, 20000 };

			nanosleep(&ts, NULL);
		}
	}
	if (!c->broken)
		c->ref_wait = 0;
	return c->broken;
}

_Static_assert(VERBS_REF_SLOT <= PVGPU_VERBS_REF_MAX, "a REF slot the peer accepts");

/* Bytes of iov left from entry i on: the message goes on past this slot. */
static int more_after(const struct iovec *iov, int i, int iovcnt)
{
	for (; i < iovcnt; i++)
		if (iov[i].iov_len)
			return 1;
	return 0;
}

/*
 * Every byte of iov: through the ring, or, for a piece of pinned memory,
 * as a REF slot the peer reads in place (and then we wait for it to have
 * done so: the caller may change the memory once we return).
 */
int verbs_conn_sendv(struct verbs_conn *c, struct iovec *iov, int iovcnt)
{
	uint32_t room = (c->slot_size < c->peer.slot_size ? c->slot_size :
			 c->peer.slot_size) - PVGPU_VERBS_SLOT_HDR;
	int i = 0;

	while (i < iovcnt && !c->broken) {
		uint64_t spin_until = now_ns() + c->poll_ns;
		uint64_t give_up = spin_until + (uint64_t)c->timeout_ms * 1000000u;
		struct verbs_pin *pin;
		uint8_t *slot;
		uint32_t len = 0;

		/* A free slot here (its last write done) and there (credit). */
		while (!c->broken &&
		       (c->tx_seq - c->tx_done >= c->nslots ||
			c->tx_seq - le64toh(*credit_word(c)) >= c->peer.nslots)) {
			if (poll_send(c) || poll_cm(c) || drain(c) ||
			    stalled(c, give_up))
				break;
			if (now_ns() > spin_until) {
				struct timespec ts = { 0, 20000 };

				nanosleep(&ts, NULL);
			}
		}
		if (c->broken)
			break;
		slot = c->tx + (size_t)(c->tx_seq % c->nslots) * c->slot_size;
		pin = pinned(c, iov[i].iov_base, iov[i].iov_len);
		if (pin) {
			struct pvgpu_verbs_ref r = {
				(uintptr_t)iov[i].iov_base, pin->mr->rkey,
				iov[i].iov_len > VERBS_REF_SLOT ?
				VERBS_REF_SLOT : (uint32_t)iov[i].iov_len,
			};

			pvgpu_verbs_ref_encode(slot, (uint32_t)c->tx_seq, &r);
			len = PVGPU_VERBS_REF_LEN;
			iov[i].iov_base = (uint8_t *)iov[i].iov_base + r.len;
			iov[i].iov_len -= r.len;
			if (!iov[i].iov_len)
				i++;
			c->ref_wait = c->tx_seq + 1;
		}
		while (!pin && i < iovcnt && len < room) {
			size_t n = iov[i].iov_len;

			if (len && pinned(c, iov[i].iov_base, n))
				break;		/* its own REF slot, next */
			if (n > room - len)
				n = room - len;
			memcpy(slot + PVGPU_VERBS_SLOT_HDR + len, iov[i].iov_base, n);
			len += (uint32_t)n;
			iov[i].iov_base = (uint8_t *)iov[i].iov_base + n;
			iov[i].iov_len -= n;
			if (!iov[i].iov_len)
				i++;
		}
		if (!len)
			continue;
		if (!pin)
			pvgpu_verbs_slot_encode(slot, (uint32_t)c->tx_seq, len);
		if ((c->peer.features & PVGPU_VERBS_F_MORE) &&
		    more_after(iov, i, iovcnt))
			pvgpu_verbs_slot_more(slot);
		if (post_rdma(c, WR_DATA, IBV_WR_RDMA_WRITE_WITH_IMM, slot,
			      PVGPU_VERBS_SLOT_HDR + len, c->tx_mr->lkey,
			      c->peer.addr + (c->tx_seq % c->peer.nslots) * c->peer.slot_size,
			      c->peer.rkey, (uint32_t)c->tx_seq))
			return c->broken;
		c->tx_seq++;
	}
	if (c->ref_wait && !c->broken)
		wait_refs(c);
	return c->broken;
}

int verbs_conn_pin(struct verbs_conn *c, void *p, size_t size)
{
	struct ibv_mr *mr;

	if (c->broken)
		return c->broken;
	if (c->npins == c->cappins) {
		size_t cap = c->cappins ? 2 * c->cappins : 16;
		struct verbs_pin *v = realloc(c->pins, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		c->pins = v;
		c->cappins = cap;
	}
	/* Once for the memory's life: never per copy. */
	mr = ibv_reg_mr(c->pd, p, size, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	if (!mr)
		return errno ? -errno : -EIO;
	c->pins[c->npins++] = (struct verbs_pin){ p, size, mr };
	return 0;
}

void verbs_conn_unpin(struct verbs_conn *c, void *p)
{
	for (size_t i = 0; i < c->npins; i++)
		if (c->pins[i].base == p) {
			ibv_dereg_mr(c->pins[i].mr);
			c->pins[i] = c->pins[--c->npins];
			return;
		}
}

/*
 * Up to len bytes from the ring: at least one unless nonblock (then
 * -EAGAIN while nothing has arrived); stops at the first slot not there
 * yet once it has some.  -errno once the connection failed.
 */
ssize_t verbs_conn_read(struct verbs_conn *c, void *buf, size_t len,
			int nonblock)
{
	uint8_t *out = buf;
	size_t got = 0;

	if (c->stash_off < c->stash_len) {
		got = c->stash_len - c->stash_off;
		if (got > len)
			got = len;
		memcpy(out, c->stash + c->stash_off, got);
		c->stash_off += got;
		return (ssize_t)got;
	}
	while (got < len && !c->broken) {
		uint8_t *slot = c->rx + (size_t)(c->rx_used % c->nslots) * c->slot_size;

		if (!c->rx_have) {
			uint64_t spin_until = now_ns() + c->poll_ns;
			uint64_t give_up = spin_until + (uint64_t)c->timeout_ms * 1000000u;

			while (c->rx_seq == c->rx_used && !c->broken) {
				if (poll_recv(c) || c->rx_seq > c->rx_used)
					break;
				if (got || nonblock) {
					if (poll_cm(c))
						break;
					return got ? (ssize_t)got : -EAGAIN;
				}
				if (now_ns() > spin_until && block(c, 1000))
					break;
				/*
				 * What came while we slept first: stopped past
				 * give_up (a paused VM, SIGSTOP), we would
				 * otherwise blame a peer that kept sending.
				 */
				if (poll_recv(c) || c->rx_seq > c->rx_used)
					break;
				if (halfway(c, give_up))
					break;
				/* Our credit writes complete there too. */
				poll_send(c);
			}
			if (c->broken || open_slot(c, slot))
				break;
		}
		if (c->rx_off < c->rx_len) {
			size_t n = c->rx_len - c->rx_off;

			if (n > len - got)
				n = len - got;
			if (c->rx_ref) {
				ssize_t m = ref_take(c, out + got, n);

				if (m < 0)
					break;
				n = (size_t)m;
			} else {
				memcpy(out + got, slot + PVGPU_VERBS_SLOT_HDR + c->rx_off, n);
			}
			got += n;
			c->rx_off += (uint32_t)n;
		}
		if (c->rx_off == c->rx_len && close_slot(c))
			break;
	}
	/* What arrived before a failure is still the caller's. */
	return got ? (ssize_t)got : c->broken ? c->broken : -EIO;
}

int verbs_conn_recv(struct verbs_conn *c, void *buf, size_t len)
{
	uint8_t *out = buf;

	while (len) {
		ssize_t n = verbs_conn_read(c, out, len, 0);

		if (n < 0)
			return (int)n;
		out += n;
		len -= (size_t)n;
	}
	return 0;
}

/*
 * Something to read (1), nothing within ms (0; -1: no limit), or -errno.
 * Halfway through the peer's message, never longer than the timeout.
 */
int verbs_conn_wait(struct verbs_conn *c, int ms)
{
	uint64_t start = now_ns();
	uint64_t give_up = start + (uint64_t)c->timeout_ms * 1000000u;
	int rc = verbs_conn_poll(c);

	if (rc || !c->rx_more) {
		if (rc)
			return rc;
		rc = block(c, ms);
		return rc ? rc : verbs_conn_poll(c);
	}
	while (!(rc = verbs_conn_poll(c))) {
		uint64_t spent_ms = (now_ns() - start) / 1000000u;
		int step = 1000;

		if (halfway(c, give_up))
			return c->broken;
		if (ms >= 0 && spent_ms >= (uint64_t)ms)
			return 0;
		if (ms >= 0 && (uint64_t)ms - spent_ms < (uint64_t)step)
			step = (int)((uint64_t)ms - spent_ms);
		rc = block(c, step);
		if (rc)
			return rc;
	}
	return rc;
}

int verbs_conn_poll(struct verbs_conn *c)
{
	if (c->stash_off < c->stash_len)
		return 1;
	if (c->broken)
		return c->broken;
	if (c->rx_have || c->rx_seq > c->rx_used)
		return 1;
	if (poll_recv(c) || poll_cm(c))
		return c->broken;
	return c->rx_seq > c->rx_used;
}

int verbs_conn_fd(struct verbs_conn *c)
{
	return c->comp ? c->comp->fd : -1;
}

void verbs_conn_close(struct verbs_conn *c)
{
	if (!c)
		return;
	if (c->id && c->qp && !c->broken)
		rdma_disconnect(c->id);
	if (c->qp) {
		if (c->own_qp)
			ibv_destroy_qp(c->qp);
		else
			rdma_destroy_qp(c->id);
	}
	for (size_t i = 0; i < c->npins; i++)
		ibv_dereg_mr(c->pins[i].mr);
	if (c->rd_mr)
		ibv_dereg_mr(c->rd_mr);
	if (c->rx_mr)
		ibv_dereg_mr(c->rx_mr);
	if (c->tx_mr)
		ibv_dereg_mr(c->tx_mr);
	if (c->scq)
		ibv_destroy_cq(c->scq);
	if (c->rcq)
		ibv_destroy_cq(c->rcq);
	if (c->comp)
		ibv_destroy_comp_channel(c->comp);
	if (c->pd)
		ibv_dealloc_pd(c->pd);
	if (c->own_ctx && c->ctx)
		ibv_close_device(c->ctx);
	if (c->id)
		rdma_destroy_id(c->id);
	if (c->ch)
		rdma_destroy_event_channel(c->ch);
	free(c->rx);
	free(c->tx);
	free(c->stash);
	free(c->pins);
	free(c->rd);
	free(c);
}
