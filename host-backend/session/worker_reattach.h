/*
 * worker_reattach.h - a session that outlives its connection (reattach.c;
 * the supervisor's half is daemon/reattach.h).
 *
 * A guest given a resume token at hello may come back on a new connection
 * within the grace, with the same session; the worker waits for it
 * (detach) instead of ending.  What the guest may not have got is kept:
 * the last synchronous reply whole, or, for a copy whose data went out in
 * DATA frames, the request, to be served again (a read of device memory:
 * no side effect).  A session whose messages go through the control ring
 * keeps nothing: the ring holds them, and only wake-ups were lost.
 */
#ifndef PVGPU_WORKER_REATTACH_H
#define PVGPU_WORKER_REATTACH_H

#include <stddef.h>
#include <stdint.h>

#include "wire.h"

struct pvgpu_worker;

/* The connection broke at a read (1) or a write (2): pvgpu_resume's lost. */
#define PVGPU_LOST_READ		1
#define PVGPU_LOST_WRITE	2

/*
 * grace_ns: how long a detached session waits (0: it does not; no token
 * was given).  lost: the connection failed (PVGPU_LOST_*), not the
 * protocol.  last_received: the id of the last message read whole (its
 * DATA frames too).  kept_id, kept, kept_len: the last synchronous reply;
 * kept_rerun, kept_hdr, kept_req: or the request to serve again; rerun:
 * do so next.
 */
struct pvgpu_resume {
	uint64_t grace_ns;
	int lost;
	uint64_t last_received;
	uint64_t kept_id;
	uint8_t *kept;
	size_t kept_len;
	int kept_rerun, rerun;
	struct pvgpu_hdr kept_hdr;
	uint8_t *kept_req;
};

/*
 * resume_offer: at hello, the token and grace for the reply (0 when the
 * session does not offer to resume).  keep_reply: before a synchronous
 * reply is written (hdr and payload).  detach: the connection is lost;
 * wait for the guest to come back, within the grace.  0 with a new
 * connection in place and the resume reply sent (resume.rerun may say to
 * serve the kept request again), -1: end the session.
 */
int pvgpu_worker_resume_offer(struct pvgpu_worker *w);
void pvgpu_worker_keep_reply(struct pvgpu_worker *w, const uint8_t *hdr,
			     size_t hdr_len, const uint8_t *payload,
			     size_t len);
void pvgpu_worker_keep_request(struct pvgpu_worker *w,
			       const struct pvgpu_hdr *h,
			       const uint8_t *payload);
int pvgpu_worker_detach(struct pvgpu_worker *w);

#endif /* PVGPU_WORKER_REATTACH_H */
