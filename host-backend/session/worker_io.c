/*
 * worker_io.c - the worker's side of the framing in protocol/README.md:
 * reading exactly what the guest said it would send, and sending replies
 * and DATA frames.  Anything that breaks the framing marks the session
 * fatal: a stream that is out of step cannot be trusted again.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "log.h"
#include "trace.h"
#include "pvgpu_proto.h"
#include "wait.h"
#include "watchdog.h"
#include "worker.h"

/*
 * Poll for a little while before sleeping in the kernel: a guest in a
 * tight loop of small synchronous calls sends its next message within
 * microseconds, and a wake-up from a blocking read costs more than that.
 * The poll is bounded (--poll-us), so an idle session costs no CPU.
 */
static ssize_t read_some(struct pvgpu_worker *w, void *buf, size_t len)
{
	struct pvgpu_poll poll = { 0 };
	uint64_t paused;
	ssize_t n;

	while (w->cfg->poll_ns) {
		n = w->conn->ops->recv(w->conn, buf, len, 1);
		if (n != -EAGAIN && n != -EWOULDBLOCK)
			return n;
		if (!pvgpu_poll_again(&poll, w->cfg->poll_ns))
			break;
	}
	/* Waiting for the guest mid-call is not the call hanging. */
	paused = pvgpu_watchdog_pause(w->slot);
	/*
	 * Kernels of this session still on the GPU: look at them now and
	 * then while the guest is quiet, so that the scheduler learns when
	 * they are done (the next VM's turn may wait for it).
	 */
	/* Not while suspended: a locked process's driver calls block. */
	while (pvgpu_sched_pending(&w->sched) &&
	       atomic_load(&w->slot->state) == PVGPU_SLOT_RUNNING) {
		pvgpu_sched_poll(&w->sched);
		if (!pvgpu_sched_pending(&w->sched) ||
		    w->conn->ops->wait(w->conn, 200000) != 0)
			break;
	}
	n = w->conn->ops->recv(w->conn, buf, len, 0);
	pvgpu_watchdog_resume(w->slot, paused);
	return n;
}

/* "" between calls, else " during NAME": what a lost connection cut short. */
static void call_in_progress(struct pvgpu_worker *w, char *buf, size_t len)
{
	const struct pvgpu_op_info *info;

	buf[0] = '\0';
	if (!atomic_load(&w->slot->call_started_ns))
		return;
	info = pvgpu_op_info((uint16_t)atomic_load(&w->slot->call_opcode));
	snprintf(buf, len, " during %s", info ? info->name : "a call");
}

/*
 * What carries the messages: the channel, or the control ring in front of
 * it (the channel then carries only wake-ups and the hang-up).  Either way
 * exactly the bytes asked for; 0, or -1 with the session marked fatal and
 * why said once.
 */
struct pvgpu_worker_wire {
	int (*read)(struct pvgpu_worker *w, void *buf, size_t len);
	int (*write)(struct pvgpu_worker *w, struct iovec *iov, int iovcnt);
};

static const struct pvgpu_worker_wire ring_wire;

/* --- the control ring ------------------------------------------------------ */

/*
 * The guest's channel went under the ring (a VM's live migration resets
 * its vsock connections).  The ring and the window stay mapped on both
 * sides, so nothing of a message went with the channel, which only
 * carried wake-ups: a session kept for a resume waits for the guest's new
 * connection here (reattach.c), and the ring looks again.  rc when it
 * ends instead.
 */
static int ring_lost(struct pvgpu_worker *w, int rc)
{
	if (!w->resume.grace_ns || w->fatal || w->wire != &ring_wire)
		return rc;
	w->resume.lost = PVGPU_LOST_READ;
	w->fatal = 1;
	if (!pvgpu_worker_detach(w))
		return 0;
	w->resume.lost = 0;		/* not resumed: the session ends, once */
	return rc;
}

/*
 * Wake the guest: one byte on the channel.  The guest raises its flag
 * only just before it sleeps and reads every byte when it wakes, so at
 * most a byte or so per sleep is ever waiting there.
 */
static int ring_kick(void *arg)
{
	struct pvgpu_worker *w = arg;
	char k = 'k';
	struct iovec iov = { &k, 1 };
	int rc = w->conn->ops->sendv(w->conn, &iov, 1);

	return rc ? ring_lost(w, rc) : 0;
}

/*
 * Sleep until the guest kicks or hangs up, off the watchdog's clock; with
 * kernels of the session still on the GPU, wake every 200 us to tell the
 * scheduler when they are done (the ring looks again after each wake).
 * Whatever the guest writes to the channel now is a kick: read and
 * dropped (a descriptor passed with it is closed).
 */
static int ring_wait(void *arg)
{
	struct pvgpu_worker *w = arg;
	/* Work the guest waits on through the device's word: on the clock. */
	int signal = w->signal.settling;
	uint64_t paused = signal ? 0 : pvgpu_watchdog_pause(w->slot);
	int pending = pvgpu_sched_pending(&w->sched) &&
		      atomic_load(&w->slot->state) == PVGPU_SLOT_RUNNING;
	int rc = 0, n;
	char buf[64];

	if (pending)
		pvgpu_sched_poll(&w->sched);
	n = w->conn->ops->wait(w->conn, pending || signal ? 200000 : -1);
	if (n == -EINTR && w->between_calls)
		pvgpu_worker_idle_point(w);
	if (n < 0 && n != -EINTR)
		rc = n;
	if (n > 0) {
		ssize_t k = w->conn->ops->recv(w->conn, buf, sizeof(buf), 1);

		if (k == 0)
			rc = -ECONNRESET;
		else if (k < 0 && k != -EAGAIN && k != -EWOULDBLOCK && k != -EINTR)
			rc = (int)k;
		if (w->conn->ops->take_fd) {
			int fd = w->conn->ops->take_fd(w->conn);

			if (fd >= 0)
				close(fd);
		}
	}
	if (!signal)
		pvgpu_watchdog_resume(w->slot, paused);
	return rc ? ring_lost(w, rc) : 0;
}

void pvgpu_worker_ring_waiter(struct pvgpu_worker *w,
			      struct pvgpu_ring_waiter *out)
{
	*out = (struct pvgpu_ring_waiter){
		.kick = ring_kick,
		.wait_kick = ring_wait,
		.arg = w,
		.spin_max_ns = w->cfg->poll_ns,
		.spin_min_ns = w->cfg->poll_ns / 16,
	};
}

/* A ring error ends the session, saying why once. */
static int ring_failed(struct pvgpu_worker *w, int rc, const char *doing)
{
	if (!w->fatal) {
		char during[64];

		call_in_progress(w, during, sizeof(during));
		if (rc == -EPROTO)
			wlog_warn(w, "protocol error: control ring: %s%s; ending session",
				  w->ring.error ? w->ring.error : "?", during);
		else if (rc == -ECONNRESET || rc == -EPIPE)
			wlog_info(w, "connection closed by the guest%s", during);
		else
			wlog_info(w, "control ring: %s%s: %s", doing, during,
				  strerror(-rc));
	}
	w->fatal = 1;
	return -1;
}

static int channel_read(struct pvgpu_worker *w, void *buf, size_t len)
{
	uint8_t *p = buf;

	while (len) {
		ssize_t n = read_some(w, p, len);

		if (n > 0) {
			p += n;
			len -= (size_t)n;
			continue;
		}
		if (n == -EINTR) {
			/* Between calls, a signal may be a checkpointer's. */
			if (w->between_calls)
				pvgpu_worker_idle_point(w);
			continue;
		}
		if (!w->fatal)
			w->resume.lost = PVGPU_LOST_READ;
		/* A session kept for its guest says so itself (reattach.c). */
		if (!w->fatal && !w->resume.grace_ns) {
			char during[64];

			call_in_progress(w, during, sizeof(during));
			if (n == 0 || n == -ECONNRESET)
				wlog_info(w, "connection closed by the guest%s%s",
					  during, n < 0 ? " (read error)" : "");
			else
				wlog_info(w, "connection closed by the guest%s (read error: %s)",
					  during, strerror((int)-n));
		}
		w->fatal = 1;
		return -1;
	}
	return 0;
}

static int channel_write(struct pvgpu_worker *w, struct iovec *iov, int iovcnt)
{
	uint64_t paused;
	int rc;

	paused = pvgpu_watchdog_pause(w->slot);
	rc = w->conn->ops->sendv(w->conn, iov, iovcnt);

	pvgpu_watchdog_resume(w->slot, paused);
	if (rc) {
		if (!w->fatal)
			w->resume.lost = PVGPU_LOST_WRITE;
		if (!w->fatal && !w->resume.grace_ns) {
			char during[64];

			call_in_progress(w, during, sizeof(during));
			wlog_info(w, "connection lost while sending%s: %s",
				  during, strerror(-rc));
		}
		w->fatal = 1;
		return -1;
	}
	return 0;
}

static int ring_read(struct pvgpu_worker *w, void *buf, size_t len)
{
	int rc = pvgpu_ring_recv(&w->ring, buf, len);

	return rc ? ring_failed(w, rc, "receiving") : 0;
}

static int ring_write(struct pvgpu_worker *w, struct iovec *iov, int iovcnt)
{
	int rc = pvgpu_ring_sendv(&w->ring, iov, iovcnt);

	return rc ? ring_failed(w, rc, "sending") : 0;
}

static const struct pvgpu_worker_wire channel_wire = {
	.read = channel_read,
	.write = channel_write,
};

static const struct pvgpu_worker_wire ring_wire = {
	.read = ring_read,
	.write = ring_write,
};

void pvgpu_worker_wire_ring(struct pvgpu_worker *w, int on)
{
	w->wire = on ? &ring_wire : &channel_wire;
}

int pvgpu_worker_read(struct pvgpu_worker *w, void *buf, size_t len)
{
	return w->wire->read(w, buf, len);
}

static int write_all(struct pvgpu_worker *w, struct iovec *iov, int iovcnt)
{
	return w->wire->write(w, iov, iovcnt);
}

int pvgpu_worker_read_data_hdr(struct pvgpu_worker *w, uint32_t max,
			       uint32_t *len)
{
	uint8_t raw[PVGPU_HDR_SIZE];
	struct pvgpu_hdr h;

	if (pvgpu_worker_read(w, raw, sizeof(raw)))
		return -1;
	if (pvgpu_hdr_decode(raw, &h) || h.opcode != PVGPU_OP_DATA ||
	    h.id != w->req_id || h.length == 0 || h.length > max) {
		wlog_warn(w, "protocol error: expected a DATA frame of 1..%u bytes for request %llu, got opcode %#x id %llu length %u; ending session",
			  max, (unsigned long long)w->req_id, h.opcode,
			  (unsigned long long)h.id, h.length);
		w->fatal = 1;
		return -1;
	}
	*len = h.length;
	return 0;
}

static void fill_hdr(struct pvgpu_worker *w, uint8_t *raw, uint16_t opcode,
		     uint32_t flags, uint32_t len)
{
	struct pvgpu_hdr h = {
		.magic = PVGPU_MAGIC,
		.version = (uint16_t)(w->version ? w->version : PVGPU_PROTO_VERSION),
		.opcode = opcode,
		.flags = flags,
		.length = len,
		.id = w->req_id,
	};

	pvgpu_hdr_encode(raw, &h);
}

int pvgpu_worker_send_data(struct pvgpu_worker *w, const void *buf,
			   uint32_t len)
{
	uint8_t raw[PVGPU_HDR_SIZE];
	struct iovec iov[2] = {
		{ raw, sizeof(raw) },
		{ (void *)buf, len },
	};

	fill_hdr(w, raw, PVGPU_OP_DATA, PVGPU_F_REPLY, len);
	return write_all(w, iov, 2);
}

int pvgpu_worker_send_output(struct pvgpu_worker *w, const void *payload,
			     uint32_t len)
{
	uint8_t raw[PVGPU_HDR_SIZE];
	struct iovec iov[2] = {
		{ raw, sizeof(raw) },
		{ (void *)payload, len },
	};

	fill_hdr(w, raw, PVGPU_OP_OUTPUT, PVGPU_F_REPLY, len);
	return write_all(w, iov, 2);
}

int pvgpu_worker_send_reply(struct pvgpu_worker *w, uint16_t opcode,
			    int32_t status, const uint8_t *fields, size_t len)
{
	uint8_t raw[PVGPU_HDR_SIZE + PVGPU_REPLY_PREFIX];
	struct iovec iov[2] = {
		{ raw, sizeof(raw) },
		{ (void *)fields, len },
	};
	int rc;

	/* Device printf the driver wrote while serving it goes first. */
	if (pvgpu_output_deliver(w, opcode, status))
		return -1;
	pvgpu_trace_mark(w->req_id, PVGPU_TR_W_OUTPUT);

	/* Queued, to end through the device's word (signal.c). */
	fill_hdr(w, raw, opcode,
		 PVGPU_F_REPLY | (w->signal.signalled ? PVGPU_F_SIGNAL : 0u),
		 (uint32_t)(PVGPU_REPLY_PREFIX + len));
	pvgpu_put_u32(raw + PVGPU_HDR_SIZE, (uint32_t)status);
	pvgpu_put_u32(raw + PVGPU_HDR_SIZE + 4, (uint32_t)w->deferred);
	w->deferred = 0;
	if (opcode != PVGPU_OP_HELLO)
		pvgpu_worker_keep_reply(w, raw, sizeof(raw), fields, len);
	rc = write_all(w, iov, len ? 2 : 1);
	pvgpu_trace_mark(w->req_id, PVGPU_TR_W_SENT);
	return rc;
}

int pvgpu_worker_next_frame(struct pvgpu_worker *w, uint32_t max, uint64_t left,
			    uint32_t *len)
{
	return pvgpu_worker_read_data_hdr(w, left < max ? (uint32_t)left : max, len);
}

int pvgpu_worker_recv_data(struct pvgpu_worker *w, uint8_t *buf, uint64_t size)
{
	uint64_t off = 0;

	while (off < size) {
		uint32_t len;

		if (pvgpu_worker_next_frame(w, PVGPU_MAX_DATA_FRAME, size - off, &len) ||
		    pvgpu_worker_read(w, buf + off, len))
			return -1;
		off += len;
	}
	return 0;
}
