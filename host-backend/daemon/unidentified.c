/* unidentified.c - callers waiting to say who they are (see unidentified.h). */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "clock.h"
#include "log.h"
#include "unidentified.h"

int pvgpu_unid_init(struct pvgpu_unidentified *u, unsigned int max,
		    uint64_t timeout_ms)
{
	memset(u, 0, sizeof(*u));
	u->v = calloc(max ? max : 1, sizeof(*u->v));
	if (!u->v)
		return -1;
	u->max = max;
	u->per_addr = max / 4 ? max / 4 : 1;
	u->timeout_ns = timeout_ms * 1000000ull;
	return 0;
}

/* Close the i-th connection; the last one takes its place. */
static void drop(struct pvgpu_unidentified *u, unsigned int i)
{
	struct pvgpu_pending *p = u->v[i];

	p->conn->ops->release(p->conn);
	if (p->l->ops && p->l->ops->done)
		p->l->ops->done(p->l, p->peer.cookie);
	free(p);
	u->v[i] = u->v[--u->n];
	u->v[u->n] = NULL;
}

void pvgpu_unid_fini(struct pvgpu_unidentified *u)
{
	while (u->v && u->n)
		drop(u, u->n - 1);
	free(u->v);
	u->v = NULL;
}

void pvgpu_unid_forget(struct pvgpu_unidentified *u)
{
	for (unsigned int i = 0; i < u->n; i++) {
		u->v[i]->conn->ops->release(u->v[i]->conn);
		free(u->v[i]);
		u->v[i] = NULL;
	}
	u->n = 0;
}

/* FNV-1a: spreads the addresses of most_crowded()'s table. */
static uint32_t addr_hash(const char *a)
{
	uint32_t h = 2166136261u;

	while (*a)
		h = (h ^ (uint8_t)*a++) * 16777619u;
	return h;
}

/*
 * The connection to close to make room, when the set is full, for one
 * more from an address that has same waiting: the oldest from the
 * address with the most, if that is more than same + 1 (so that the
 * newcomer's address ends with fewer than it had).  -1: none, or no
 * memory to count with.  One pass over the set with a table of the
 * addresses seen: the set is full only while somebody fills it.
 */
static int most_crowded(const struct pvgpu_unidentified *u, unsigned int same)
{
	struct slot { unsigned int count, oldest; } *t;
	unsigned int size = 2, best = 0, victim = 0;

	while (size < 2 * u->n)
		size *= 2;
	t = calloc(size, sizeof(*t));
	if (!t)
		return -1;
	for (unsigned int i = 0; i < u->n; i++) {
		const struct pvgpu_pending *p = u->v[i];
		unsigned int k = addr_hash(p->peer.addr) & (size - 1);

		/* Linear probing: the table is never more than half full. */
		while (t[k].count &&
		       strcmp(u->v[t[k].oldest]->peer.addr, p->peer.addr))
			k = (k + 1) & (size - 1);
		if (!t[k].count || p->deadline_ns < u->v[t[k].oldest]->deadline_ns)
			t[k].oldest = i;
		if (++t[k].count > best) {
			best = t[k].count;
			victim = t[k].oldest;
		} else if (t[k].count == best &&
			   u->v[t[k].oldest]->deadline_ns < u->v[victim]->deadline_ns) {
			victim = t[k].oldest;
		}
	}
	free(t);
	return best > same + 1 ? (int)victim : -1;
}

int pvgpu_unid_add(struct pvgpu_unidentified *u, struct pvgpu_listener *l,
		   const struct pvgpu_peer *peer, struct pvgpu_conn *conn)
{
	struct pvgpu_pending *p = NULL;
	unsigned int same = 0;
	int victim = -1;

	for (unsigned int i = 0; i < u->n; i++)
		same += !strcmp(u->v[i]->peer.addr, peer->addr);
	/* A caller the channel named (a uid, a CID) has no address to crowd. */
	if (peer->addr[0] && same >= u->per_addr) {
		pvgpu_say(&u->crowded, "closed %s via %s at once: %u connection(s) from %s wait for their hello already (a quarter of --max-unidentified)",
		    peer->identity, l->uri, same, peer->addr);
		goto err_conn;
	}
	/*
	 * Full: room is made at the expense of the address that holds the
	 * most, so that silent sockets from a few hosts cannot keep out the
	 * hellos of the many (the budget ends shared about evenly between
	 * the addresses that want it).
	 */
	if (u->n >= u->max && (victim = most_crowded(u, same)) < 0) {
		pvgpu_say(&u->full, "closed %s via %s at once: %u connection(s) wait for their hello already (--max-unidentified)",
		    peer->identity, l->uri, u->n);
		goto err_conn;
	}
	p = malloc(sizeof(*p));
	if (!p) {
		log_error("out of memory for %s's hello: closed", peer->identity);
		goto err_conn;
	}
	if (victim >= 0) {
		pvgpu_say(&u->evicted, "closed %s via %s, still without a hello, for %s: --max-unidentified is full and %s holds the most of it",
		    u->v[victim]->peer.identity, u->v[victim]->l->uri,
		    peer->identity, u->v[victim]->peer.addr);
		drop(u, (unsigned int)victim);
	}
	p->conn = conn;
	p->peer = *peer;
	p->l = l;
	p->deadline_ns = pvgpu_now_ns() + u->timeout_ns;
	p->got = 0;
	u->v[u->n++] = p;
	return 0;

err_conn:
	conn->ops->release(conn);
	if (l->ops->done)
		l->ops->done(l, peer->cookie);
	return -1;
}

/*
 * The header is whole: is it a hello the supervisor may read?  Its
 * length is the caller's word, so it is held to the longest hello there
 * can be before a byte more is read.
 */
static int hello_header(struct pvgpu_unidentified *u, struct pvgpu_pending *p,
			struct pvgpu_hdr *h)
{
	if (pvgpu_hdr_decode(p->msg, h)) {
		pvgpu_say(&u->broken, "closed %s via %s: its first message has a bad magic",
		    p->peer.identity, p->l->uri);
		return -1;
	}
	if (h->opcode != PVGPU_OP_HELLO) {
		pvgpu_say(&u->broken, "closed %s via %s: its first message is opcode %#x, not hello",
		    p->peer.identity, p->l->uri, h->opcode);
		return -1;
	}
	if (h->length > PVGPU_HELLO_REQ_MAX) {
		pvgpu_say(&u->broken, "closed %s via %s: a hello of %u bytes, longer than any (%d)",
		    p->peer.identity, p->l->uri, h->length, PVGPU_HELLO_REQ_MAX);
		return -1;
	}
	return 0;
}

struct pvgpu_pending *pvgpu_unid_read(struct pvgpu_unidentified *u,
				      unsigned int i,
				      struct pvgpu_hello_req *req)
{
	struct pvgpu_pending *p = u->v[i];
	struct pvgpu_hdr h = { 0 };
	uint32_t need = PVGPU_HDR_SIZE;

	if (p->got >= PVGPU_HDR_SIZE) {
		pvgpu_hdr_decode(p->msg, &h);	/* checked when it came */
		need += h.length;
	}
	while (p->got < need) {
		ssize_t n = p->conn->ops->recv(p->conn, p->msg + p->got,
					       need - p->got, 1);

		if (n == -EAGAIN || n == -EWOULDBLOCK)
			return NULL;
		if (n == -EINTR)
			continue;
		if (n <= 0) {
			/* A port scan or a readiness probe looks like this. */
			log_debug("%s via %s hung up before its hello%s%s",
				  p->peer.identity, p->l->uri, n ? ": " : "",
				  n ? strerror((int)-n) : "");
			goto err_drop;
		}
		p->got += (uint32_t)n;
		if (p->got == PVGPU_HDR_SIZE) {
			if (hello_header(u, p, &h))
				goto err_drop;
			need += h.length;
		}
	}
	if (pvgpu_hello_req_decode(p->msg + PVGPU_HDR_SIZE, h.length, req)) {
		pvgpu_say(&u->broken, "closed %s via %s: malformed hello",
		    p->peer.identity, p->l->uri);
		goto err_drop;
	}
	u->v[i] = u->v[--u->n];
	u->v[u->n] = NULL;
	return p;

err_drop:
	drop(u, i);
	return NULL;
}

void pvgpu_pending_answer(const struct pvgpu_pending *p, int32_t status)
{
	uint8_t raw[PVGPU_HDR_SIZE + PVGPU_REPLY_PREFIX + PVGPU_HELLO_REP_MAX];
	const struct pvgpu_hello_rep none = { 0 };
	struct pvgpu_hdr req, rep;
	struct iovec iov = { raw, 0 };
	long len;

	/* The fields too, zero, as a worker's refusal has them. */
	len = pvgpu_hello_rep_encode(raw + PVGPU_HDR_SIZE + PVGPU_REPLY_PREFIX, &none);
	if (len < 0)
		return;
	pvgpu_hdr_decode(p->msg, &req);
	rep = (struct pvgpu_hdr){
		.magic = PVGPU_MAGIC,
		.version = PVGPU_PROTO_VERSION,
		.opcode = PVGPU_OP_HELLO,
		.flags = PVGPU_F_REPLY,
		.length = (uint32_t)(PVGPU_REPLY_PREFIX + len),
		.id = req.id,
	};
	pvgpu_hdr_encode(raw, &rep);
	pvgpu_put_u32(raw + PVGPU_HDR_SIZE, (uint32_t)status);
	pvgpu_put_u32(raw + PVGPU_HDR_SIZE + 4, 0);	/* deferred */
	iov.iov_len = PVGPU_HDR_SIZE + rep.length;
	/* The caller is refused either way: whether it heard why is its affair. */
	(void)p->conn->ops->sendv(p->conn, &iov, 1);
}

int pvgpu_unid_timeout_ms(const struct pvgpu_unidentified *u)
{
	uint64_t now = pvgpu_now_ns(), first = UINT64_MAX, ms;

	if (!u->n)
		return -1;
	for (unsigned int i = 0; i < u->n; i++)
		if (u->v[i]->deadline_ns < first)
			first = u->v[i]->deadline_ns;
	if (first <= now)
		return 0;
	ms = (first - now + 999999) / 1000000;	/* not a moment early */
	return ms > INT_MAX ? INT_MAX : (int)ms;
}

void pvgpu_unid_expire(struct pvgpu_unidentified *u)
{
	uint64_t now = pvgpu_now_ns();

	for (unsigned int i = u->n; i-- > 0;) {
		struct pvgpu_pending *p = u->v[i];

		if (now < p->deadline_ns)
			continue;
		pvgpu_say(&u->late, "closed %s via %s: no whole hello within %g s (--hello-timeout)",
		    p->peer.identity, p->l->uri, (double)u->timeout_ns / 1e9);
		drop(u, i);
	}
}
