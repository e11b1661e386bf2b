/*
 * unidentified.h - callers the channel does not name (DESIGN §5).
 *
 * A caller on a channel that says nothing about who calls (tcp:
 * PVGPU_TR_ID_AT_HELLO) is known only by the token in its hello.  Until
 * that hello is here it costs no worker and no session slot: the
 * supervisor holds the connection in this set, reads its first message
 * piece by piece as it arrives (never waiting for it), and once that is a
 * whole hello hands the connection on with the bytes read, which the
 * worker then serves as its first message.
 *
 * The set has a budget of its own, apart from the session slots, so that
 * it can never take a known VM's: at most max connections at once, and at
 * most a quarter of that (at least one) from one source address, so one
 * host's silent sockets leave room for the others'.  A connection past
 * the quarter is closed as soon as it is accepted.  When the whole budget
 * is taken, a newcomer closes the oldest connection of the address that
 * holds the most, if that address holds two more than the newcomer's
 * (else the newcomer is closed at once): a few hosts' silent sockets
 * cannot keep the others' hellos out.  One that has not sent its whole
 * hello by its deadline is closed then.  What a caller can make happen at
 * will (those closings, a first message that is no hello) is logged at
 * most once a second for each (saylimit.h).
 */
#ifndef PVGPU_UNIDENTIFIED_H
#define PVGPU_UNIDENTIFIED_H

#include <stdint.h>

#include "host.h"
#include "pvgpu_proto.h"
#include "saylimit.h"

#define PVGPU_HELLO_TIMEOUT_MS		5000
#define PVGPU_MAX_UNIDENTIFIED		32

/* One connection waiting for its hello. */
struct pvgpu_pending {
	struct pvgpu_conn *conn;
	struct pvgpu_peer peer;
	/* Where it was accepted: one of the supervisor's listeners[], which stay put. */
	struct pvgpu_listener *l;
	uint64_t deadline_ns;		/* CLOCK_MONOTONIC */
	uint32_t got;			/* bytes of msg read so far */
	uint8_t msg[PVGPU_HDR_SIZE + PVGPU_HELLO_REQ_MAX];
};

struct pvgpu_unidentified {
	struct pvgpu_pending **v;
	unsigned int n;
	unsigned int max;		/* --max-unidentified */
	unsigned int per_addr;		/* from one source address */
	uint64_t timeout_ns;		/* --hello-timeout */
	struct pvgpu_saylimit full, crowded, evicted, late, broken;
};

/* 0, or -1 (out of memory). */
int pvgpu_unid_init(struct pvgpu_unidentified *u, unsigned int max,
		    uint64_t timeout_ms);
/* Close every connection held and free the set (the supervisor's end). */
void pvgpu_unid_fini(struct pvgpu_unidentified *u);
/* In a forked worker: drop the supervisor's copies, leave the callers be. */
void pvgpu_unid_forget(struct pvgpu_unidentified *u);

/*
 * Hold conn, just accepted on l, until its hello: 0 (another caller's
 * connection may have been closed for it); or -1 when the budget has no
 * room (conn is closed then, and the closing logged).
 */
int pvgpu_unid_add(struct pvgpu_unidentified *u, struct pvgpu_listener *l,
		   const struct pvgpu_peer *peer, struct pvgpu_conn *conn);

/* What to poll for POLLIN for the i-th connection held. */
static inline int pvgpu_unid_fd(const struct pvgpu_unidentified *u,
				unsigned int i)
{
	return u->v[i]->conn->fd;
}

/*
 * Read what the i-th connection has sent, without waiting.  NULL while
 * its hello is not whole yet, and when it was closed (the caller hung up,
 * or sent something other than a hello): either way the set may have
 * moved its last connection to i.  A whole hello: the connection, out of
 * the set and the caller's (free() it once its conn is handed on or
 * refused), with the hello decoded into req.
 */
struct pvgpu_pending *pvgpu_unid_read(struct pvgpu_unidentified *u,
				      unsigned int i,
				      struct pvgpu_hello_req *req);

/*
 * Answer p's hello with status (a refusal; the connection is closed
 * next).  The reply is the first thing sent on the connection, so the
 * channel takes it without waiting for room.
 */
void pvgpu_pending_answer(const struct pvgpu_pending *p, int32_t status);

/* Milliseconds until the first deadline; -1 when nothing is held. */
int pvgpu_unid_timeout_ms(const struct pvgpu_unidentified *u);
/* Close the connections past their deadline. */
void pvgpu_unid_expire(struct pvgpu_unidentified *u);

#endif /* PVGPU_UNIDENTIFIED_H */
