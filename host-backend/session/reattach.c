/*
 * reattach.c - a session that outlives its connection: a guest whose
 * channel was reset (a VM's live migration resets its virtio-vsock
 * connection) comes back with the resume token its hello was given, and
 * finds its session as it left it.
 *
 * The worker whose connection drops (a read or write fails; not bye, not a
 * protocol error) keeps everything the session holds, says so in its slot
 * (PVGPU_DETACHED) and waits, off the watchdog's clock, on the socket the
 * supervisor hands resuming connections over: one SEQPACKET message, the
 * resume hello the supervisor read (it checked the token and the caller),
 * with the new connection's descriptor.  The worker answers that hello
 * with the id of the last message it read whole, sends again the last
 * synchronous reply the guest says it did not get (or runs again the
 * device-to-host copy whose DATA frames it was), and serves on.  Past the
 * grace the session ends as any other.  Nothing runs twice: the guest
 * sends again only what came after last_received.
 */
#include <errno.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "policy.h"
#include "pvgpu_proto.h"
#include "stream.h"
#include "watchdog.h"
#include "worker.h"

/* A kept reply: header, status words and fields. */
#define KEPT_MAX	(PVGPU_HDR_SIZE + PVGPU_REPLY_PREFIX + PVGPU_MAX_PAYLOAD)

int pvgpu_worker_resume_offer(struct pvgpu_worker *w)
{
	int64_t ms;

	w->resume.grace_ns = 0;
	if (!(w->features & PVGPU_FEATURE_RESUME) || w->cfg->reattach_fd < 0 ||
	    !(w->cfg->resume_token[0] | w->cfg->resume_token[1]) ||
	    !(w->peer.features & PVGPU_TR_REATTACH))
		return 0;
	ms = pvgpu_policy_resume_grace_ms(w->cfg->policy, atomic_load(&w->slot->vm));
	if (ms <= 0)
		return 0;
	w->resume.kept = malloc(KEPT_MAX);
	w->resume.kept_req = malloc(PVGPU_MAX_PAYLOAD);
	if (!w->resume.kept || !w->resume.kept_req) {
		free(w->resume.kept);
		free(w->resume.kept_req);
		w->resume.kept = w->resume.kept_req = NULL;
		return 0;
	}
	w->resume.grace_ns = (uint64_t)ms * 1000000u;
	return 1;
}

void pvgpu_worker_keep_reply(struct pvgpu_worker *w, const uint8_t *hdr,
			     size_t hdr_len, const uint8_t *payload, size_t len)
{
	/* A copy's DATA frames are not kept: the request is, to run again. */
	if (!w->resume.grace_ns || w->ring_on || hdr_len + len > KEPT_MAX ||
	    (w->resume.kept_rerun && w->resume.kept_id == w->req_id))
		return;
	memcpy(w->resume.kept, hdr, hdr_len);
	if (len)
		memcpy(w->resume.kept + hdr_len, payload, len);
	w->resume.kept_len = hdr_len + len;
	w->resume.kept_id = w->req_id;
	w->resume.kept_rerun = 0;
}

void pvgpu_worker_keep_request(struct pvgpu_worker *w,
			       const struct pvgpu_hdr *h,
			       const uint8_t *payload)
{
	if (!w->resume.grace_ns || w->ring_on || h->length > PVGPU_MAX_PAYLOAD ||
	    payload == w->resume.kept_req)	/* the kept one, run again */
		return;
	memcpy(w->resume.kept_req, payload, h->length);
	w->resume.kept_hdr = *h;
	w->resume.kept_id = h->id;
	w->resume.kept_rerun = 1;
}

static const char *vm_of(const struct pvgpu_worker *w)
{
	int32_t vm = atomic_load(&w->slot->vm);

	return vm >= 0 ? w->acct->vms[vm].name : "-";
}

/*
 * One message from the supervisor: the resume hello (header and payload)
 * and the new connection.  The descriptor, or -1 (nothing usable came:
 * anything passed is closed).
 */
static int take_connection(struct pvgpu_worker *w, uint8_t *msg, size_t cap,
			   size_t *len)
{
	struct iovec iov = { msg, cap };
	int fd, flags;
	ssize_t n;

	n = pvgpu_sock_recv_fd(w->cfg->reattach_fd, &iov, 1,
			       MSG_DONTWAIT | MSG_CMSG_CLOEXEC, &fd, &flags);
	if (n <= 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	if (fd >= 0 && (flags & (MSG_TRUNC | MSG_CTRUNC))) {
		close(fd);
		fd = -1;
	}
	*len = (size_t)n;
	return fd;
}

/* Wait for the guest within the grace: its new connection, or -1. */
static int await_guest(struct pvgpu_worker *w, uint8_t *msg, size_t cap,
		       size_t *len)
{
	uint64_t deadline = pvgpu_now_ns() + w->resume.grace_ns;
	uint32_t want = PVGPU_DETACHED;

	for (;;) {
		uint64_t now = pvgpu_now_ns();
		struct pollfd p = { .fd = w->cfg->reattach_fd, .events = POLLIN };
		int ms, fd;

		if (now >= deadline) {
			/* Too late, unless the supervisor is handing one over now. */
			if (atomic_compare_exchange_strong(&w->slot->detached, &want,
							   PVGPU_DETACH_GONE))
				return -1;
			deadline = now + 1000000000ull;	/* it is sent: take it */
		}
		ms = (int)((deadline - now + 999999) / 1000000);
		/*
		 * Kernels of the session still on the GPU: the scheduler
		 * learns when they are done (another VM's turn may wait for
		 * it), as while a guest is quiet (worker_io.c).
		 */
		if (pvgpu_sched_pending(&w->sched) &&
		    atomic_load(&w->slot->state) == PVGPU_SLOT_RUNNING) {
			pvgpu_sched_poll(&w->sched);
			if (ms > 1)
				ms = 1;
		}
		if (poll(&p, 1, ms) < 0 && errno != EINTR)
			return -1;
		if (!(p.revents & (POLLIN | POLLHUP)))
			continue;
		if (p.revents & POLLHUP && !(p.revents & POLLIN))
			return -1;	/* the supervisor is gone */
		fd = take_connection(w, msg, cap, len);
		if (fd >= 0)
			return fd;
		/* A message without a connection: wait on. */
		want = PVGPU_HANDED;
		atomic_compare_exchange_strong(&w->slot->detached, &want,
					       PVGPU_DETACHED);
		want = PVGPU_DETACHED;
	}
}

/* The hello reply that resumes: the session as the guest had it. */
static int send_resume_reply(struct pvgpu_worker *w, uint64_t id)
{
	struct pvgpu_hello_rep rep = {
		.version = w->version,
		.device_count = w->device_count,
		.session_id = w->slot->session_id,
		.data_block = w->cfg->block,
		.features = w->features,
		.resume_lo = w->cfg->resume_token[0],
		.resume_hi = w->cfg->resume_token[1],
		.resume_grace_ms = (uint32_t)(w->resume.grace_ns / 1000000u),
		.last_received = w->resume.last_received,
	};
	uint8_t fields[PVGPU_HELLO_REP_MAX];
	long n;

	/* Nothing of the executor's: a suspended session's driver is locked. */
	n = pvgpu_hello_rep_encode(fields, &rep);
	if (n < 0)
		return -1;
	w->req_id = id;
	return pvgpu_worker_send_reply(w, PVGPU_OP_HELLO, 0, fields, (size_t)n);
}

int pvgpu_worker_detach(struct pvgpu_worker *w)
{
	uint8_t msg[PVGPU_HDR_SIZE + PVGPU_HELLO_REQ_MAX + 1];
	struct pvgpu_hello_req req;
	struct pvgpu_hdr h;
	uint64_t t0, paused, kept_id = w->resume.kept_id;
	size_t len = 0;
	int fd, rc;

	if (!w->resume.lost || !w->resume.grace_ns || w->said_hello <= 0)
		return -1;
	/*
	 * A shared window's staging slots hold positions both sides must
	 * agree on, which a lost stream leaves unknown; with the control
	 * ring, the messages and the positions are all in the window.  But
	 * a VM's window is copied into itself by a live migration on one
	 * host, losing what was written meanwhile (docs/design.md §5): only
	 * a process's own memfd window is kept.
	 */
	if (w->win.base && !w->ring_on) {
		wlog_info(w, "connection lost; not kept for a resume: the session has a shared window without its control ring");
		return -1;
	}
	if (w->win.base && !w->win.own) {
		wlog_info(w, "connection lost; not kept for a resume: the session uses its VM's window");
		return -1;
	}
	t0 = pvgpu_now_ns();
	wlog_info(w, "vm %s: connection lost; kept %.1f s for its guest to resume it",
		  vm_of(w), (double)w->resume.grace_ns / 1e9);
	paused = pvgpu_watchdog_pause(w->slot);
	atomic_store(&w->slot->detached, PVGPU_DETACHED);
	for (;;) {
		fd = await_guest(w, msg, sizeof(msg), &len);
		if (fd < 0) {
			wlog_info(w, "vm %s: not resumed within %.1f s; ending the session",
				  vm_of(w), (double)w->resume.grace_ns / 1e9);
			pvgpu_watchdog_resume(w->slot, paused);
			return -1;
		}
		/* The supervisor read and checked it; decoded here all the same. */
		if (len >= PVGPU_HDR_SIZE && len <= PVGPU_HDR_SIZE + PVGPU_HELLO_REQ_MAX &&
		    !pvgpu_hdr_decode(msg, &h) && h.opcode == PVGPU_OP_HELLO &&
		    h.length == len - PVGPU_HDR_SIZE &&
		    !pvgpu_hello_req_decode(msg + PVGPU_HDR_SIZE, h.length, &req))
			break;
		log_warn("a resuming connection came with a broken hello; waiting on");
		close(fd);
		atomic_store(&w->slot->detached, PVGPU_DETACHED);
	}
	/* The old descriptor's number stays the connection's. */
	if (dup2(fd, w->conn->fd) < 0) {
		log_error("cannot take the resuming connection: %s", strerror(errno));
		close(fd);
		pvgpu_watchdog_resume(w->slot, paused);
		return -1;
	}
	close(fd);
	atomic_store(&w->slot->detached, PVGPU_ATTACHED);
	pvgpu_watchdog_resume(w->slot, paused);
	w->fatal = 0;
	w->resume.lost = 0;
	pvgpu_worker_wire_ring(w, 0);
	rc = send_resume_reply(w, h.id);
	pvgpu_worker_wire_ring(w, w->ring_on);
	if (rc)
		return -1;
	/* The last reply, if the guest did not get it (the ring keeps its own). */
	w->resume.rerun = 0;
	if (!w->ring_on && kept_id && req.last_reply < kept_id) {
		if (w->resume.kept_rerun) {
			w->resume.rerun = 1;
		} else {
			struct iovec iov = { w->resume.kept, w->resume.kept_len };

			if (w->conn->ops->sendv(w->conn, &iov, 1)) {
				w->resume.lost = PVGPU_LOST_WRITE;
				w->fatal = 1;
				return pvgpu_worker_detach(w);
			}
		}
	}
	wlog_info(w, "vm %s: resumed after %.2f s away (guest had reply %llu, backend had read %llu)",
		  vm_of(w), (double)(pvgpu_now_ns() - t0) / 1e9,
		  (unsigned long long)req.last_reply,
		  (unsigned long long)w->resume.last_received);
	return 0;
}
