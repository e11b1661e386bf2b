/*
 * client.c - the protocol client: framing, batching and bulk data for one
 * connection to one backend (protocol/README.md).
 *
 * Bulk data never passes through a library buffer: DATA frames are sent
 * with writev straight from the caller's memory and received straight into
 * it.  Everything the backend sends is checked before it is used.
 */
#include <errno.h>
#include <pthread.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client.h"
#include "size.h"
#include "debug.h"
#include "guest_window.h"
#include "pvgpu_generic.h"
#include "pvgpu_guest.h"
#include "pvgpu_proto.h"
#include "transport.h"
#include "ring.h"
#include "trace.h"
#include "wait.h"
#include "wire.h"

/* DATA frames per sendmsg: 2 iovecs each, well under IOV_MAX. */
#define FRAMES_PER_SEND		32

/*
 * Resume (feature resume): the bytes of async messages sent since the
 * last reply that the client keeps to send again after a reconnect.  Past
 * it, nothing more is kept and a connection lost before the next reply
 * ends the session as it would without resume.
 */
#define RESUME_KEEP_MAX		(8u << 20)

/* Objects known idle at once (client.h, pvgpu_client_known_idle). */
#define IDLE_KEYS		16

struct idle_key {
	uint8_t kind;
	uint64_t ctx, handle;
};

/*
 * What carries the messages: the channel itself, or, from the message
 * after the backend took the control ring at window attach, the ring in
 * front of it (the channel then carries only wake-ups and the hang-up).
 * Chosen there, once.  A resume's hello goes over the new channel itself
 * (the ring still holds what the session had in flight).
 */
struct wire {
	int (*sendv)(struct pvgpu_client *c, struct iovec *iov, int iovcnt);
	int (*recv)(struct pvgpu_client *c, void *buf, size_t len);
	/* Nothing from the backend yet: no reply begun, no hang-up. */
	int (*quiet)(struct pvgpu_client *c);
	/* The reply may be long in coming: spin up to ns for it, then sleep. */
	void (*expect_wait)(struct pvgpu_client *c, uint64_t ns);
};

struct pvgpu_client {
	pthread_mutex_t lock;		/* the wire: one message at a time */
	struct pvgpu_transport tr;
	char uri[256];			/* for diagnostics */
	int broken;			/* set once; every call then fails */
	uint64_t next_id;
	uint16_t version;		/* in headers we send */
	struct pvgpu_client_info info;
	/* Queued async messages, after room for one BATCH header. */
	uint8_t *batch;
	size_t batch_len;		/* payload bytes after the header */
	unsigned int batch_count;
	uint8_t *reply;			/* one reply payload */
	/*
	 * A deferred error that came back on a reply whose own status was an
	 * error too: the backend has cleared it, so it is kept here and
	 * reported by the next call that succeeds.
	 */
	int32_t deferred_kept;
	struct pvgpu_client_stats stats;
	struct pvgpu_window_map *win;	/* shared window; NULL: none */
	/*
	 * The control ring in the window (feature ring): once the backend
	 * took it, every message goes through it; the socket carries only
	 * wake-up bytes and the hang-up.
	 */
	struct pvgpu_ring ring;
	void *ring_mem;			/* in win's arena; NULL: none */
	int ring_on;
	const struct wire *wire;	/* what carries the messages (below) */
	/*
	 * The window is this process's own memfd (shm://): nothing but
	 * this process and the worker ever writes it, so a ring session
	 * survives its connection.  Not a VM's window device: a live
	 * migration makes QEMU copy that window into the very file both
	 * QEMUs and the worker map, which loses writes (docs/design.md §5).
	 */
	int ring_resumes;
	/*
	 * The device's completion word in the ring's first page (feature
	 * signal; NULL: not in use), and the value the call being answered
	 * waits for in it.
	 */
	uint32_t *signal_word;
	uint32_t signal_value;
	int32_t reply_status;		/* the last reply's own status */
	struct pvgpu_client_config cfg;
	/*
	 * Forwarded operations that may leave work on the device, and the
	 * objects known idle while work_seq still equals idle_seq.
	 */
	uint64_t work_seq;
	uint64_t idle_seq;
	unsigned int nidle;
	struct idle_key idle[IDLE_KEYS];
	/*
	 * Resume after a lost connection (feature resume): the token the
	 * hello gave (0, 0: none), how long the backend keeps the session,
	 * the id of the last reply read whole, and every async message sent
	 * since (keep, keep_len bytes, as on the wire; keep_over: more than
	 * RESUME_KEEP_MAX was, and none is kept).  lost: the connection
	 * broke (a read or write failed), not the protocol.
	 */
	uint64_t resume_token[2];
	uint64_t grace_ms;
	uint64_t last_reply;
	uint8_t *keep;
	size_t keep_len, keep_cap;
	int keep_over;
	int lost;
	const char *lost_why;		/* what broke it, for the resume's line */
	int lost_err;
	int resuming;
	unsigned int resumes;
};

static uint64_t take_id(struct pvgpu_client *c)
{
	if (!c->next_id)		/* 0 is never a request id */
		c->next_id = 1;
	return c->next_id++;
}

/* The id of an operation the trace build follows (common/trace.h). */
static uint64_t take_traced_id(struct pvgpu_client *c, uint16_t opcode)
{
	uint64_t id = take_id(c);

	pvgpu_trace_mark(id, PVGPU_TR_G_ENTER);
	pvgpu_trace_mark(id, PVGPU_TR_OPCODE + opcode);
	return id;
}

/*
 * What a call does beyond sending its work: leave nothing on the device
 * (it waits for work or asks about it, or chooses a context), wait for
 * the device (the reply may be long in coming: spin longer for it).  By
 * opcode; pvgpu_client_wait says it for its generic calls.
 */
enum { CALL_NO_WORK = 1, CALL_WAITS = 2 };

static unsigned int op_how(uint16_t opcode)
{
	switch (opcode) {
	case PVGPU_OP_CTX_SYNCHRONIZE:
	case PVGPU_OP_STREAM_SYNCHRONIZE:
		return CALL_NO_WORK | CALL_WAITS;
	case PVGPU_OP_CTX_SET:
		return CALL_NO_WORK;
	default:
		return pvgpu_op_waits_on_device(opcode) ? CALL_WAITS : 0;
	}
}

/* Read the reply to (opcode, id), spinning long for one that waits on the device. */
static int32_t read_reply_locked(struct pvgpu_client *c, uint16_t opcode,
				 uint64_t id, uint8_t *data_out,
				 uint64_t data_len, uint8_t *rep,
				 size_t rep_cap, size_t *rep_len);

static int32_t await_reply_locked(struct pvgpu_client *c, uint16_t opcode,
				  unsigned int how, uint64_t id,
				  uint8_t *data_out, uint64_t data_len,
				  uint8_t *rep, size_t rep_cap, size_t *rep_len)
{
	int32_t st;

	if (!(how & CALL_WAITS))
		return read_reply_locked(c, opcode, id, data_out, data_len, rep,
					 rep_cap, rep_len);
	c->wire->expect_wait(c, c->cfg.wait_spin_ns);
	st = read_reply_locked(c, opcode, id, data_out, data_len, rep, rep_cap,
			       rep_len);
	c->wire->expect_wait(c, 0);	/* the reply needed no wait */
	return st;
}

static void note_work_locked(struct pvgpu_client *c, unsigned int how)
{
	if (!(how & CALL_NO_WORK))
		c->work_seq++;
}

static void note_idle(struct pvgpu_client *c, uint64_t mark,
		      enum pvgpu_idle_kind kind, uint64_t ctx, uint64_t handle)
{
	struct idle_key k = { .kind = (uint8_t)kind, .ctx = ctx,
			      .handle = kind == PVGPU_IDLE_CTX ? 0 : handle };

	pthread_mutex_lock(&c->lock);
	/* Work forwarded since the mark: the answer is already out of date. */
	if (mark != c->work_seq || c->broken || c->deferred_kept)
		goto out;
	if (c->idle_seq != mark) {
		c->idle_seq = mark;
		c->nidle = 0;
	}
	for (unsigned int i = 0; i < c->nidle; i++)
		if (c->idle[i].kind == k.kind && c->idle[i].ctx == k.ctx &&
		    c->idle[i].handle == k.handle)
			goto out;
	/* Full: the oldest goes (asking again costs one round trip). */
	if (c->nidle == IDLE_KEYS) {
		memmove(c->idle, c->idle + 1, (IDLE_KEYS - 1) * sizeof(c->idle[0]));
		c->nidle--;
	}
	c->idle[c->nidle++] = k;
out:
	pthread_mutex_unlock(&c->lock);
}

/*
 * Noted idle (or its context noted idle) with nothing forwarded since and
 * no error held back.  *mark: the work count as of this look (one lock
 * for both: a synchronize takes it often enough).
 */
static int known_idle(struct pvgpu_client *c, enum pvgpu_idle_kind kind,
		      uint64_t ctx, uint64_t handle, uint64_t *mark)
{
	int known = 0;

	if (kind == PVGPU_IDLE_CTX)
		handle = 0;
	pthread_mutex_lock(&c->lock);
	*mark = c->work_seq;
	if (c->broken || c->deferred_kept || c->idle_seq != c->work_seq)
		goto out;
	for (unsigned int i = 0; i < c->nidle && !known; i++)
		known = c->idle[i].ctx == ctx &&
			((c->idle[i].kind == kind && c->idle[i].handle == handle) ||
			 c->idle[i].kind == PVGPU_IDLE_CTX);
	if (known)
		c->stats.local_answers++;
out:
	pthread_mutex_unlock(&c->lock);
	return known;
}

static int32_t call(struct pvgpu_client *c, uint16_t opcode,
		    unsigned int how, const uint8_t *req, size_t req_len,
		    const void *data_in, uint64_t data_len,
		    void *data_out, uint8_t *rep, size_t rep_cap,
		    size_t *rep_len, void *landing_dst, size_t landing_len);

/* A stream's or an event's wait or query: a generic driver call (as the
 * guest's library names the function) that leaves no work. */
static int32_t wait_call(struct pvgpu_client *c, uint32_t fn, uint64_t handle,
			 int query)
{
	struct pvgpu_driver_call_req req = { .fn = fn, .args_count = 1,
					     .args = { handle } };
	struct pvgpu_driver_call_rep rep;
	uint8_t q[PVGPU_DRIVER_CALL_REQ_MAX];
	uint8_t r[PVGPU_DRIVER_CALL_REP_MAX];
	long qn = pvgpu_driver_call_req_encode(q, &req);
	size_t rn = 0;
	int32_t st;

	if (qn < 0)
		return PVGPU_CLIENT_EENCODE;
	st = call(c, PVGPU_OP_DRIVER_CALL, CALL_NO_WORK | (query ? 0 : CALL_WAITS),
		  q, (size_t)qn, NULL, 0, NULL, r, sizeof(r), &rn, NULL, 0);
	if (pvgpu_driver_call_rep_decode(r, rn, &rep) && st == 0)
		st = PVGPU_CLIENT_EPROTO;
	return st;
}

int32_t pvgpu_client_wait(struct pvgpu_client *c, enum pvgpu_idle_kind kind,
			  int query, uint64_t ctx, uint64_t handle)
{
	uint64_t mark;
	int32_t st;

	if (known_idle(c, kind, ctx, handle, &mark))
		return 0;
	switch (kind) {
	case PVGPU_IDLE_CTX: {
		struct pvgpu_ctx_synchronize_req req = { 0 };
		struct pvgpu_ctx_synchronize_rep rep;

		/* A context has no query: cuCtxSynchronize only. */
		st = pvgpu_call_ctx_synchronize(c, &req, &rep);
		break;
	}
	case PVGPU_IDLE_STREAM:
		if (query) {
			st = wait_call(c, PVGPU_GENERIC_cuStreamQuery, handle, 1);
		} else {
			struct pvgpu_stream_synchronize_req req = { .stream = handle };
			struct pvgpu_stream_synchronize_rep rep;

			st = pvgpu_call_stream_synchronize(c, &req, &rep);
		}
		break;
	case PVGPU_IDLE_EVENT:
		st = wait_call(c, query ? PVGPU_GENERIC_cuEventQuery :
				   PVGPU_GENERIC_cuEventSynchronize, handle, query);
		break;
	default:
		return PVGPU_CLIENT_EENCODE;
	}
	if (st == 0)
		note_idle(c, mark, kind, ctx, handle);
	return st;
}

/* --- the wire: the control ring when there is one, else the transport --- */

static int ring_lost(struct pvgpu_client *c, int rc);

/* The control ring's wake-ups go over the transport (see transport.h). */
static int ring_kick(void *arg)
{
	struct pvgpu_client *c = arg;
	int rc = c->tr.ops->kick(&c->tr);

	return rc ? ring_lost(c, rc) : 0;
}

static int ring_wait(void *arg)
{
	struct pvgpu_client *c = arg;
	int rc = c->tr.ops->wait_kick(&c->tr);

	return rc ? ring_lost(c, rc) : 0;
}

static int channel_sendv(struct pvgpu_client *c, struct iovec *iov, int iovcnt)
{
	return c->tr.ops->sendv(&c->tr, iov, iovcnt);
}

static int channel_recv(struct pvgpu_client *c, void *buf, size_t len)
{
	return c->tr.ops->recv(&c->tr, buf, len);
}

static int channel_quiet(struct pvgpu_client *c)
{
	return pvgpu_transport_quiet(&c->tr);
}

/* A socket's receive blocks in the kernel: nothing to choose. */
static void channel_expect_wait(struct pvgpu_client *c, uint64_t ns)
{
	(void)c;
	(void)ns;
}

static const struct wire channel_wire = {
	.sendv = channel_sendv,
	.recv = channel_recv,
	.quiet = channel_quiet,
	.expect_wait = channel_expect_wait,
};

static int ring_sendv(struct pvgpu_client *c, struct iovec *iov, int iovcnt)
{
	return pvgpu_ring_sendv(&c->ring, iov, iovcnt);
}

static int ring_recv(struct pvgpu_client *c, void *buf, size_t len)
{
	return pvgpu_ring_recv(&c->ring, buf, len);
}

static int ring_quiet(struct pvgpu_client *c)
{
	int rc;

	if (pvgpu_ring_pending(&c->ring) != 0)
		return 0;		/* the reply began (or the ring is broken) */
	if (pvgpu_transport_quiet(&c->tr))
		return 1;
	/*
	 * Kick bytes or the hang-up: this does not block now, and drops them.
	 * A hang-up with the copy under way is resumed here, and the copy
	 * goes on: the backend, resumed too, still fills or empties the ring.
	 */
	rc = c->tr.ops->wait_kick(&c->tr);
	return rc == 0 || ring_lost(c, rc) == 0;
}

static void ring_expect(struct pvgpu_client *c, uint64_t ns)
{
	pvgpu_ring_expect_wait(&c->ring, ns);
}

static const struct wire ring_wire = {
	.sendv = ring_sendv,
	.recv = ring_recv,
	.quiet = ring_quiet,
	.expect_wait = ring_expect,
};

static int wire_sendv(struct pvgpu_client *c, struct iovec *iov, int iovcnt)
{
	return c->wire->sendv(c, iov, iovcnt);
}

static int wire_recv(struct pvgpu_client *c, void *buf, size_t len)
{
	return c->wire->recv(c, buf, len);
}

static void put_hdr_flags(struct pvgpu_client *c, uint8_t *out,
			  uint16_t opcode, uint32_t flags, uint32_t length,
			  uint64_t id)
{
	struct pvgpu_hdr h = {
		.magic = PVGPU_MAGIC,
		.version = c->version,
		.opcode = opcode,
		.flags = flags,
		.length = length,
		.id = id,
	};

	pvgpu_hdr_encode(out, &h);
}

static void put_hdr(struct pvgpu_client *c, uint8_t *out, uint16_t opcode,
		    uint32_t length, uint64_t id)
{
	put_hdr_flags(c, out, opcode, 0, length, id);
}

/*
 * Completion through the device's word (feature signal, wire.h): the
 * synchronous calls that may end that way, and the wait for the word.
 */
static int signal_op(const struct pvgpu_client *c, uint16_t opcode)
{
	if (!c->signal_word)
		return 0;
	switch (opcode) {
	case PVGPU_OP_MEMCPY_HTOD_WINDOW:
	case PVGPU_OP_MEMCPY_DTOH_WINDOW:
	case PVGPU_OP_CTX_SYNCHRONIZE:
	case PVGPU_OP_STREAM_SYNCHRONIZE:
		return 1;
	default:
		return 0;
	}
}

static int signal_seen(void *arg)
{
	const struct pvgpu_client *c = arg;

	return __atomic_load_n(c->signal_word, __ATOMIC_ACQUIRE) == c->signal_value;
}

/*
 * Can a lost connection be resumed (feature resume)?  A stream session by
 * sending again what the backend did not read (keep_locked); a session
 * whose messages go through the control ring of its own memfd window by
 * connecting again alone: the ring and the window stay mapped on both
 * sides, so nothing of a message is lost with the connection, which only
 * carried wake-ups.  A shared window without the ring is neither (its
 * staging positions go with the stream), nor is a VM's window device
 * (ring_resumes).
 */
static int resumable(const struct pvgpu_client *c)
{
	return (c->resume_token[0] | c->resume_token[1]) &&
	       (c->ring_on ? c->ring_resumes : !c->win);
}

/* Does a resume send again what was kept?  Not where the ring holds it. */
static int keeps(const struct pvgpu_client *c)
{
	return resumable(c) && !c->ring_on;
}

/* The stream is unusable (lost, or out of step): close it for good. */
static int32_t break_locked(struct pvgpu_client *c, const char *why, int err)
{
	if (!c->broken) {
		/* A transport's error, not the stream out of step: resumable. */
		c->lost = err && err != EPROTO;
		c->lost_why = why;
		c->lost_err = err;
		/* One that will be resumed is said once, with its resume. */
		if (!c->lost || !resumable(c) || c->keep_over)
			pvgpu_debug("%s: connection lost: %s%s%s%s%s", c->uri, why,
			    err ? ": " : "", err ? strerror(err) : "",
			    err == EPROTO && c->ring.error ? ": " : "",
			    err == EPROTO && c->ring.error ? c->ring.error : "");
		c->broken = 1;
		c->tr.ops->close(&c->tr);
	}
	return PVGPU_CLIENT_EIO;
}

/* Bytes of async messages on their way: kept until the next reply; the bytes copied. */
static size_t keep_locked(struct pvgpu_client *c, const void *p, size_t len)
{
	if (!keeps(c) || c->keep_over || !len)
		return 0;
	if (c->keep_len + len > RESUME_KEEP_MAX) {
		c->keep_over = 1;
		c->keep_len = 0;
		return 0;
	}
	if (c->keep_len + len > c->keep_cap) {
		size_t cap = c->keep_cap ? c->keep_cap : 64 * 1024;
		uint8_t *k;

		while (cap < c->keep_len + len)
			cap *= 2;
		k = realloc(c->keep, cap);
		if (!k) {
			c->keep_over = 1;
			c->keep_len = 0;
			return 0;
		}
		c->keep = k;
		c->keep_cap = cap;
	}
	memcpy(c->keep + c->keep_len, p, len);
	c->keep_len += len;
	return len;
}

/*
 * The queued async messages as one buffer (a BATCH, or a lone message),
 * taken off the queue: 1 and *iov, or 0 when none are queued.  The bytes
 * stay in c->batch until the next message is queued, under the lock.
 */
static int take_queue_locked(struct pvgpu_client *c, struct iovec *iov)
{
	if (!c->batch_count)
		return 0;
	if (c->batch_count == 1) {
		/* A lone message needs no BATCH wrapper. */
		iov->iov_base = c->batch + PVGPU_HDR_SIZE;
		iov->iov_len = c->batch_len;
	} else {
		put_hdr(c, c->batch, PVGPU_OP_BATCH, (uint32_t)c->batch_len,
			take_id(c));
		iov->iov_base = c->batch;
		iov->iov_len = PVGPU_HDR_SIZE + c->batch_len;
	}
	if (c->batch_count > 1)
		c->stats.batches++;
	c->stats.sends++;
	c->batch_len = 0;
	c->batch_count = 0;
	return 1;
}

static int32_t flush_locked(struct pvgpu_client *c)
{
	struct iovec iov;
	int rc;

	if (!take_queue_locked(c, &iov))
		return 0;
	keep_locked(c, iov.iov_base, iov.iov_len);
	rc = wire_sendv(c, &iov, 1);
	if (rc)
		return break_locked(c, "send batch", -rc);
	return 0;
}

/*
 * The queue (program order: the backend must see it first), then header,
 * payload and data as DATA frames of at most data_block bytes: a small
 * request goes out with what was queued before it in one write -- one
 * system call on a socket, one publication (and at most one wake-up) on
 * the control ring.  The caller takes the request's id after the queue's
 * (take_queue_locked), so ids keep their order on the wire.
 */
static int32_t send_request_locked(struct pvgpu_client *c,
				   const struct iovec *queue, uint16_t opcode,
				   uint32_t flags, uint64_t id,
				   const uint8_t *req, size_t req_len,
				   const uint8_t *data, uint64_t data_len)
{
	uint8_t hdr[PVGPU_HDR_SIZE];
	uint8_t frame_hdr[FRAMES_PER_SEND][PVGPU_HDR_SIZE];
	struct iovec iov[3 + 2 * FRAMES_PER_SEND];
	const struct pvgpu_op_info *info = pvgpu_op_info(opcode);
	/* An async request is kept whole, DATA frames too: the caller moves on. */
	int keep_all = info && info->is_async;
	uint64_t off = 0;
	int n = 0, rc;

	if (queue) {
		iov[n++] = *queue;
		keep_locked(c, queue->iov_base, queue->iov_len);
	}
	put_hdr_flags(c, hdr, opcode, flags, (uint32_t)req_len, id);
	if (keep_all) {
		keep_locked(c, hdr, PVGPU_HDR_SIZE);
		keep_locked(c, req, req_len);
		/* All of it before any is sent: a send may break off anywhere. */
		for (uint64_t k = 0; k < data_len;) {
			uint64_t chunk = data_len - k;

			if (chunk > c->info.data_block)
				chunk = c->info.data_block;
			put_hdr(c, frame_hdr[0], PVGPU_OP_DATA, (uint32_t)chunk, id);
			keep_locked(c, frame_hdr[0], PVGPU_HDR_SIZE);
			c->stats.cpu_copied += keep_locked(c, data + k, (size_t)chunk);
			k += chunk;
		}
	}
	c->stats.sends++;
	iov[n++] = (struct iovec){ hdr, PVGPU_HDR_SIZE };
	if (req_len)
		iov[n++] = (struct iovec){ (void *)req, req_len };
	do {
		for (int f = 0; f < FRAMES_PER_SEND && off < data_len; f++) {
			uint64_t chunk = data_len - off;

			if (chunk > c->info.data_block)
				chunk = c->info.data_block;
			put_hdr(c, frame_hdr[f], PVGPU_OP_DATA, (uint32_t)chunk, id);
			c->stats.sends++;
			c->stats.data_frames++;
			c->stats.cpu_copied += chunk;
			iov[n++] = (struct iovec){ frame_hdr[f], PVGPU_HDR_SIZE };
			iov[n++] = (struct iovec){ (void *)(data + off), (size_t)chunk };
			off += chunk;
		}
		rc = wire_sendv(c, iov, n);
		if (rc)
			return break_locked(c, "send", -rc);
		n = 0;
	} while (off < data_len);
	return 0;
}

/*
 * What the session's kernels printed (an OUTPUT frame, DESIGN §3): to this
 * program's stdout or stderr, through stdio as NVIDIA's driver writes it,
 * at the synchronising call whose reply it came with.
 */
static int32_t read_output_locked(struct pvgpu_client *c, uint32_t len)
{
	FILE *to;
	uint32_t stream;
	int rc;

	if (len < 4 || len > PVGPU_MAX_PAYLOAD)
		return break_locked(c, "bad output frame from backend", 0);
	rc = wire_recv(c, c->reply, len);
	if (rc)
		return break_locked(c, "receive output", -rc);
	stream = pvgpu_get_u32(c->reply);
	to = stream == 2 ? stderr : stdout;
	c->stats.output_bytes += len - 4;
	if (len > 4) {
		fwrite(c->reply + 4, 1, len - 4, to);
		fflush(to);
	}
	return 0;
}

/*
 * Read until the reply to (opcode, id): DATA frames first, each written at
 * the running offset of data_out; OUTPUT frames anywhere before the reply.
 */
static int32_t read_reply_locked(struct pvgpu_client *c, uint16_t opcode,
				 uint64_t id, uint8_t *data_out,
				 uint64_t data_len, uint8_t *rep,
				 size_t rep_cap, size_t *rep_len)
{
	uint8_t raw[PVGPU_HDR_SIZE];
	struct pvgpu_hdr h;
	uint64_t got = 0;
	int32_t status, deferred;
	size_t fields;
	int rc;

again:
	for (;;) {
		rc = wire_recv(c, raw, sizeof(raw));
		if (rc)
			return break_locked(c, "receive", -rc);
		pvgpu_trace_mark(id, PVGPU_TR_G_HDR);
		if (pvgpu_hdr_decode(raw, &h))
			return break_locked(c, "bad magic from backend", 0);
		if (!(h.flags & PVGPU_F_REPLY) || h.id != id)
			return break_locked(c, "unexpected message from backend", 0);
		if (h.opcode == PVGPU_OP_OUTPUT &&
		    (c->info.features & PVGPU_FEATURE_OUTPUT)) {
			rc = read_output_locked(c, h.length);
			if (rc)
				return rc;
			continue;
		}
		if (h.opcode != PVGPU_OP_DATA)
			break;
		if (!data_out || h.length > PVGPU_MAX_DATA_FRAME ||
		    h.length > data_len - got)
			return break_locked(c, "unexpected data from backend", 0);
		rc = wire_recv(c, data_out + got, h.length);
		if (rc)
			return break_locked(c, "receive data", -rc);
		got += h.length;
		c->stats.cpu_copied += h.length;
	}
	if (h.opcode != opcode || h.length > PVGPU_MAX_PAYLOAD ||
	    h.length < PVGPU_REPLY_PREFIX)
		return break_locked(c, "bad reply from backend", 0);
	rc = wire_recv(c, c->reply, h.length);
	if (rc)
		return break_locked(c, "receive reply", -rc);
	if (h.flags & PVGPU_F_SIGNAL) {
		int64_t n;

		/* Queued: done when the device writes the word, failed if a reply comes. */
		if (!signal_op(c, opcode))
			return break_locked(c, "a signal not asked for, from backend", 0);
		n = pvgpu_ring_wait_until(&c->ring, signal_seen, c, c->cfg.wait_spin_ns);
		if (n < 0)
			return break_locked(c, "wait for the device's signal", (int)-n);
		if (n > 0)
			goto again;
		c->stats.signalled++;
	}

	/* The stream is in step from here on: errors are this call's only. */
	if (!c->resuming) {
		/* Everything sent before it has arrived: nothing to keep. */
		c->last_reply = id;
		c->keep_len = 0;
		c->keep_over = 0;
	}
	status = (int32_t)pvgpu_get_u32(c->reply);
	c->reply_status = status;
	deferred = (int32_t)pvgpu_get_u32(c->reply + 4);
	fields = h.length - PVGPU_REPLY_PREFIX;
	if (fields > rep_cap)
		return PVGPU_CLIENT_EPROTO;
	memcpy(rep, c->reply + PVGPU_REPLY_PREFIX, fields);
	*rep_len = fields;
	/* Not a CUresult: must not pass for one of our own codes. */
	if (status < 0)
		status = 999;		/* CUDA_ERROR_UNKNOWN */
	if (deferred < 0)
		deferred = 999;
	if (status) {
		if (deferred && !c->deferred_kept)
			c->deferred_kept = deferred;
		return status;
	}
	if (data_out && got != data_len)
		return PVGPU_CLIENT_EPROTO;
	if (!deferred) {
		deferred = c->deferred_kept;
		c->deferred_kept = 0;
	}
	return deferred;
}

/* A connection given up on quietly (the resume says why). */
static void drop_locked(struct pvgpu_client *c)
{
	if (!c->broken) {
		c->broken = 1;
		c->tr.ops->close(&c->tr);
	}
}

static uint64_t now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000u + (uint64_t)t.tv_nsec / 1000000u;
}

/*
 * One try at resuming: connect again, say hello with the token and the
 * last reply read; 0 and *last_received (the id of the last message the
 * backend read whole), 1 to try again (no connection, or the backend has
 * not yet seen the old one go), -1 refused.
 */
static int resume_once_locked(struct pvgpu_client *c, uint64_t *last_received)
{
	struct pvgpu_hello_req req = {
		.version_min = c->version,
		.version_max = c->version,
		.pid = (uint32_t)getpid(),
		.features = c->info.features,
		.resume_lo = c->resume_token[0],
		.resume_hi = c->resume_token[1],
		.last_reply = c->last_reply,
	};
	struct pvgpu_hello_rep rep;
	uint8_t q[PVGPU_HELLO_REQ_MAX], r[PVGPU_HELLO_REP_MAX];
	const struct pvgpu_transport_ops *ops;
	const struct wire *wire;
	const char *addr;
	char err[256];
	size_t rn;
	long qn;
	uint64_t id;
	int32_t st;

	ops = pvgpu_transport_lookup(c->uri, &addr, err, sizeof(err));
	if (!ops)
		return -1;
	if (c->cfg.token[0] && (ops->features & PVGPU_TRG_SENDS_TOKEN)) {
		req.token_len = (uint32_t)strnlen(c->cfg.token, sizeof(req.token) - 1);
		memcpy(req.token, c->cfg.token, req.token_len);
	}
	qn = pvgpu_hello_req_encode(q, &req);
	if (qn < 0)
		return -1;
	c->tr.fd = -1;
	if (ops->connect(&c->tr, addr, err, sizeof(err)))
		return 1;
	c->broken = 0;
	c->lost = 0;
	c->resuming = 1;
	wire = c->wire;
	c->wire = &channel_wire;
	id = take_id(c);
	st = send_request_locked(c, NULL, PVGPU_OP_HELLO, 0, id, q, (size_t)qn,
				 NULL, 0);
	if (!st)
		st = read_reply_locked(c, PVGPU_OP_HELLO, id, NULL, 0, r,
				       sizeof(r), &rn);
	c->wire = wire;
	c->resuming = 0;
	if (c->broken)
		return c->lost ? 1 : -1;
	if (st == 600) {	/* CUDA_ERROR_NOT_READY: not detached yet */
		drop_locked(c);
		return 1;
	}
	if (st || pvgpu_hello_rep_decode(r, rn, &rep) ||
	    rep.session_id != c->info.session_id) {
		pvgpu_debug("%s: resume refused (CUresult %d)", c->uri, st);
		drop_locked(c);
		return -1;
	}
	*last_received = rep.last_received;
	return 0;
}

/*
 * The connection was lost: connect again and resume the session, within
 * the grace the backend said, then send again what it did not read of
 * what is kept.  0 with *last_received, or the error of the lost call.
 */
static int32_t resume_locked(struct pvgpu_client *c, uint64_t *last_received)
{
	uint64_t t0 = now_ms(), deadline = t0 + c->grace_ms;
	const char *why = c->lost_why;
	int err = c->lost_err;
	unsigned int pause_ms = 10, resent, tries = 0;
	int rc;

	if (!c->broken || !c->lost || !resumable(c) || c->keep_over)
		return PVGPU_CLIENT_EIO;
	for (;;) {
		size_t off = 0;

		rc = resume_once_locked(c, last_received);
		tries++;
		resent = 0;
		/* What the backend did not read whole, in order, DATA frames with their request. */
		while (!rc && off + PVGPU_HDR_SIZE <= c->keep_len) {
			struct pvgpu_hdr h;
			size_t len = 0, start = off;
			uint64_t id;

			if (pvgpu_hdr_decode(c->keep + off, &h))
				break;
			id = h.id;
			do {
				len += PVGPU_HDR_SIZE + h.length;
				off = start + len;
			} while (off + PVGPU_HDR_SIZE <= c->keep_len &&
				 !pvgpu_hdr_decode(c->keep + off, &h) &&
				 h.opcode == PVGPU_OP_DATA && h.id == id);
			if (id > *last_received) {
				struct iovec iov = { c->keep + start, len };
				int src = wire_sendv(c, &iov, 1);

				if (src) {
					break_locked(c, "send again", -src);
					rc = 1;		/* lost again: from the start */
				}
				resent++;
			}
		}
		if (rc <= 0 || now_ms() >= deadline)
			break;
		{
			struct timespec ts = { 0, (long)pause_ms * 1000000L };

			nanosleep(&ts, NULL);
		}
		if (pause_ms < 200)
			pause_ms *= 2;
	}
	if (rc) {
		pvgpu_debug("%s: connection lost: %s%s%s; not resumed (%u tries in %.2f s)",
			    c->uri, why, err ? ": " : "", err ? strerror(err) : "",
			    tries, (double)(now_ms() - t0) / 1e3);
		drop_locked(c);
		c->lost = 0;	/* for good */
		return PVGPU_CLIENT_EIO;
	}
	c->resumes++;
	pvgpu_debug("%s: connection lost: %s%s%s; session %llu resumed after %.2f s (resume %u; backend had read %llu, we had reply %llu; %u message(s) sent again)",
		    c->uri, why, err ? ": " : "", err ? strerror(err) : "",
		    (unsigned long long)c->info.session_id,
		    (double)(now_ms() - t0) / 1e3, c->resumes,
		    (unsigned long long)*last_received,
		    (unsigned long long)c->last_reply, resent);
	return 0;
}

/*
 * The control ring's wake-up channel went (a VM's live migration resets
 * its vsock connections): connect again and resume, then let the ring
 * look again; the messages it holds were never on the connection.  rc
 * where the session cannot be resumed, 0 once it was.
 */
static int ring_lost(struct pvgpu_client *c, int rc)
{
	uint64_t got;

	if (c->resuming || c->broken || !resumable(c))
		return rc;
	c->lost = 1;
	c->lost_why = "the control ring's wake-up channel";
	c->lost_err = -rc;
	c->broken = 1;
	c->tr.ops->close(&c->tr);
	return resume_locked(c, &got) ? rc : 0;
}

/*
 * A sync operation (pvgpu_client_call); with landing_dst, the landing's
 * first landing_len bytes are copied there once the call succeeded, before
 * any other call can land there.
 */
static int32_t call(struct pvgpu_client *c, uint16_t opcode,
		    unsigned int how, const uint8_t *req, size_t req_len,
		    const void *data_in, uint64_t data_len,
		    void *data_out, uint8_t *rep, size_t rep_cap,
		    size_t *rep_len, void *landing_dst, size_t landing_len)
{
	struct iovec queue;
	uint32_t flags;
	uint64_t id;
	int32_t st;
	int queued;

	*rep_len = 0;
	if (req_len > PVGPU_MAX_PAYLOAD || (data_in && data_out) ||
	    (data_len && !data_in && !data_out))
		return PVGPU_CLIENT_EENCODE;
	pthread_mutex_lock(&c->lock);
	if (c->broken) {
		st = PVGPU_CLIENT_EIO;
		goto out;
	}
	queued = take_queue_locked(c, &queue);
	id = take_traced_id(c, opcode);
	c->stats.calls++;
	note_work_locked(c, how);
	flags = signal_op(c, opcode) ? PVGPU_F_SIGNAL : 0;
	if (flags) {
		/* Cleared before the request: the device writes it after. */
		c->signal_value = pvgpu_signal_value(id);
		__atomic_store_n(c->signal_word, 0, __ATOMIC_RELAXED);
	}
	st = send_request_locked(c, queued ? &queue : NULL, opcode, flags, id,
				 req, req_len, data_in,
				 data_in ? data_len : 0);
	if (!st) {
		pvgpu_trace_mark(id, PVGPU_TR_G_SENT);
		st = await_reply_locked(c, opcode, how, id, data_out,
					data_out ? data_len : 0, rep, rep_cap,
					rep_len);
	}
	/* The connection went mid-call: resume, and send it again if need be. */
	while (c->broken && c->lost && opcode != PVGPU_OP_HELLO &&
	       opcode != PVGPU_OP_BYE) {
		uint64_t got;

		if (resume_locked(c, &got))
			break;
		st = 0;
		if (id > got)
			st = send_request_locked(c, NULL, opcode, flags, id, req,
						 req_len, data_in,
						 data_in ? data_len : 0);
		if (!st)
			st = await_reply_locked(c, opcode, how, id, data_out,
						data_out ? data_len : 0, rep,
						rep_cap, rep_len);
	}
	if (landing_dst && !c->broken && c->reply_status == 0) {
		memcpy(landing_dst, pvgpu_ring_landing(c->ring_mem), landing_len);
		c->stats.cpu_copied += landing_len;
	}
	pvgpu_trace_mark(id, PVGPU_TR_G_RETURN);
out:
	pthread_mutex_unlock(&c->lock);
	return st;
}

int32_t pvgpu_client_call(struct pvgpu_client *c, uint16_t opcode,
			  const uint8_t *req, size_t req_len,
			  const void *data_in, uint64_t data_len,
			  void *data_out, uint8_t *rep, size_t rep_cap,
			  size_t *rep_len)
{
	return call(c, opcode, op_how(opcode), req, req_len, data_in, data_len,
		    data_out, rep, rep_cap, rep_len, NULL, 0);
}

int pvgpu_client_dtoh_landing(struct pvgpu_client *c, void *dst,
			      uint64_t src, uint64_t size, uint64_t stream,
			      int32_t *st)
{
	struct pvgpu_memcpy_dtoh_window_req req = { src, 0, size, stream };
	uint8_t q[PVGPU_MEMCPY_DTOH_WINDOW_REQ_MAX];
	uint8_t rep[PVGPU_MEMCPY_DTOH_WINDOW_REP_MAX];
	size_t rep_len;
	long qn;

	/* Pinned by the worker with the word: no landing without it. */
	if (!c->signal_word || !size || size > PVGPU_RING_LANDING_SIZE)
		return 0;
	req.offset = (uint64_t)(pvgpu_ring_landing(c->ring_mem) - c->win->base);
	qn = pvgpu_memcpy_dtoh_window_req_encode(q, &req);
	if (qn < 0)
		return 0;
	*st = call(c, PVGPU_OP_MEMCPY_DTOH_WINDOW,
		   op_how(PVGPU_OP_MEMCPY_DTOH_WINDOW), q, (size_t)qn, NULL, 0,
		   NULL, rep, sizeof(rep), &rep_len, dst, (size_t)size);
	return 1;
}

/*
 * Nothing from the backend yet: no reply begun (in the ring, or on the
 * socket without one), no hang-up.  Kick bytes are not news.
 */
static int transport_quiet(void *arg)
{
	struct pvgpu_client *c = arg;

	return c->wire->quiet(c);
}

int32_t pvgpu_client_call_staged(struct pvgpu_client *c, uint16_t opcode,
				 const uint8_t *req, size_t req_len,
				 const void *src, void *dst, uint64_t size)
{
	struct iovec queue;
	uint8_t rep[16];
	size_t rep_len;
	uint64_t id;
	int32_t st;
	int queued;

	if (req_len > PVGPU_MAX_PAYLOAD || !c->win || (!src == !dst))
		return PVGPU_CLIENT_EENCODE;
	pthread_mutex_lock(&c->lock);
	if (c->broken) {
		st = PVGPU_CLIENT_EIO;
		goto out;
	}
	queued = take_queue_locked(c, &queue);
	id = take_traced_id(c, opcode);
	c->stats.calls++;
	note_work_locked(c, op_how(opcode));
	st = send_request_locked(c, queued ? &queue : NULL, opcode, 0, id, req,
				 req_len, NULL, 0);
	if (st)
		goto out;
	pvgpu_trace_mark(id, PVGPU_TR_G_SENT);
	/*
	 * The ring moves the data while the backend DMAs it; the reply comes
	 * once all of it is on the device.  A copy the backend refuses is
	 * answered at once and the ring is never read: the wait ends as soon
	 * as anything arrives, and the reply says why.
	 */
	if (src)
		pvgpu_window_stage_in(c->win, id, src, size, transport_quiet, c);
	else
		pvgpu_window_stage_out(c->win, id, dst, size, transport_quiet, c);
	c->stats.cpu_copied += size;
	st = await_reply_locked(c, opcode, op_how(opcode), id, NULL, 0, rep,
				sizeof(rep), &rep_len);
	pvgpu_trace_mark(id, PVGPU_TR_G_RETURN);
	if (c->broken)
		goto out;
	if (rep_len != 8) {
		st = break_locked(c, "bad staged-copy reply", 0);
		goto out;
	}
	/* Both reply layouts are one u64: where the backend's ring stands. */
	pvgpu_window_ring_sync(c->win, src != NULL, pvgpu_get_u64(rep));
out:
	pthread_mutex_unlock(&c->lock);
	return st;
}

int pvgpu_client_pin(struct pvgpu_client *c, void *p, size_t size)
{
	int rc = -ENOTSUP;

	pthread_mutex_lock(&c->lock);
	if (!c->broken && c->tr.ops->pin)
		rc = c->tr.ops->pin(&c->tr, p, size);
	pthread_mutex_unlock(&c->lock);
	return rc;
}

void pvgpu_client_unpin(struct pvgpu_client *c, void *p)
{
	pthread_mutex_lock(&c->lock);
	if (!c->broken && c->tr.ops->unpin)
		c->tr.ops->unpin(&c->tr, p);
	pthread_mutex_unlock(&c->lock);
}

struct pvgpu_window_map *pvgpu_client_window(struct pvgpu_client *c)
{
	return c->win;
}

/*
 * Make or open a window and hand it to the backend: a memfd of our own,
 * passed on the Unix socket (shm://, fd >= 0), or in a VM the window of
 * /dev/pvgpuN, which the backend finds by its id.  Without one the client
 * still works, over the socket alone: say why once under PVGPU_DEBUG and
 * carry on.
 */
enum window_kind { WINDOW_MEMFD, WINDOW_DEVICE, WINDOW_CHANNEL };

static struct pvgpu_window_map *channel_window(struct pvgpu_client *c,
					       char *err, size_t errlen)
{
	void *base;
	uint64_t size;

	if (c->tr.ops->window(&c->tr, &base, &size)) {
		snprintf(err, errlen, "the channel has no window");
		return NULL;
	}
	return pvgpu_window_from_memory(base, size, &c->cfg, err, errlen);
}

static void attach_window(struct pvgpu_client *c, enum window_kind kind)
{
	int device = kind == WINDOW_DEVICE;
	struct pvgpu_window_attach_req req = { 0 };
	struct pvgpu_window_attach_rep arep = { 0 };
	uint8_t q[PVGPU_WINDOW_ATTACH_REQ_MAX], hdr[PVGPU_HDR_SIZE];
	uint8_t rep[PVGPU_WINDOW_ATTACH_REP_MAX];
	struct iovec iov[2];
	size_t rep_len = 0;
	uint64_t cap = 0;
	char err[240];
	uint64_t id;
	long qn;
	int fd = -1, rc;
	int32_t st;

	c->win = kind == WINDOW_DEVICE ? pvgpu_window_open_device(&c->cfg, err, sizeof(err)) :
		 kind == WINDOW_CHANNEL ? channel_window(c, err, sizeof(err)) :
		 pvgpu_window_create(&c->cfg, &fd, err, sizeof(err));
	if (!c->win) {
		pvgpu_debug("%s: no shared window (%s): using the socket alone",
			    c->uri, err);
		return;
	}
	req.size = c->win->size;
	req.window_id = c->win->window_id;
	req.guest_base = (uint64_t)(uintptr_t)c->win->base;
	/* The control ring: a region of the arena, like pinned memory. */
	if (c->cfg.ring && (c->info.features & PVGPU_FEATURE_RING) &&
	    c->tr.ops->kick && c->tr.ops->wait_kick) {
		cap = c->cfg.ring_cap;
		if (cap < PVGPU_RING_MIN_CAP || cap > PVGPU_RING_MAX_CAP || (cap & (cap - 1)))
			cap = PVGPU_CLIENT_DEFAULT_RING_CAP;
		c->ring_mem = pvgpu_window_alloc(c->win, pvgpu_ring_region_size(cap));
		if (c->ring_mem) {
			pvgpu_ring_init_region(c->ring_mem, cap);
			req.ring_offset = (uint64_t)((uint8_t *)c->ring_mem - c->win->base);
			req.ring_size = pvgpu_ring_region_size(cap);
		} else {
			pvgpu_debug("%s: no room in the window for a control ring", c->uri);
		}
	}
	qn = pvgpu_window_attach_req_encode(q, &req);
	pthread_mutex_lock(&c->lock);
	id = take_id(c);
	put_hdr(c, hdr, PVGPU_OP_WINDOW_ATTACH, (uint32_t)qn, id);
	iov[0] = (struct iovec){ hdr, sizeof(hdr) };
	iov[1] = (struct iovec){ q, (size_t)qn };
	if (fd >= 0) {
		rc = c->tr.ops->sendv_fd(&c->tr, iov, 2, fd);
		close(fd);
	} else {
		rc = c->tr.ops->sendv(&c->tr, iov, 2);
	}
	st = rc ? break_locked(c, "send window", -rc) :
		  read_reply_locked(c, PVGPU_OP_WINDOW_ATTACH, id, NULL, 0, rep,
				    sizeof(rep), &rep_len);
	if (!st && pvgpu_window_attach_rep_decode(rep, rep_len, &arep))
		st = break_locked(c, "bad window_attach reply", 0);
	if (!st)
		c->win->same_address = arep.same_address == 1;
	/* From the next message on, the backend reads and writes the ring. */
	if (!st && arep.ring && c->ring_mem) {
		struct pvgpu_ring_waiter wt = {
			.kick = ring_kick,
			.wait_kick = ring_wait,
			.arg = c,
			.spin_max_ns = c->cfg.poll_ns,
			.spin_min_ns = c->cfg.poll_ns / 16,
		};

		pvgpu_ring_attach(&c->ring, c->ring_mem, cap, PVGPU_RING_GUEST, &wt);
		c->ring_on = 1;
		c->wire = &ring_wire;
		c->ring_resumes = kind == WINDOW_MEMFD;
		if (c->info.features & PVGPU_FEATURE_SIGNAL)
			c->signal_word = pvgpu_ring_signal_word(c->ring_mem);
	}
	pthread_mutex_unlock(&c->lock);
	if (!st)
		pvgpu_debug("%s: shared window %s%llu MiB%s%s", c->uri,
			    device ? "of the pvgpu device, " : "",
			    (unsigned long long)(c->win->size >> 20),
			    c->ring_on ? ", control ring" : "",
			    c->win->same_address ? ", at one address on both sides" : "");
	if (!st && c->ring_mem && !c->ring_on) {
		pvgpu_window_free(c->win, c->ring_mem);
		c->ring_mem = NULL;
	}
	if (st) {
		pvgpu_debug("%s: backend refused the shared window (status %d): using the socket alone",
			    c->uri, st);
		pvgpu_window_destroy(c->win);
		c->win = NULL;
		c->ring_mem = NULL;
	}
}

/*
 * On the control ring a send is a store, no system call: each async op
 * goes to the worker as it is made, so that the driver works on it (a
 * launch: its few microseconds) while the program goes on to its next
 * call.  Measured on the H100 against batching them as on a socket
 * (PVGPU_RING_BATCH=1): launch + synchronize 1-2 us faster, PyTorch's
 * small-op loops 2x faster, the async launch rate the same.
 */
static int ring_sends_now(const struct pvgpu_client *c)
{
	return c->ring_on && !c->cfg.ring_batch;
}

/* An async send that lost the connection: resume (what was sent is kept). */
static int32_t recover_locked(struct pvgpu_client *c, int32_t st)
{
	uint64_t got;

	if (st && c->broken && c->lost && !resume_locked(c, &got))
		return 0;
	return st;
}

int32_t pvgpu_client_queue(struct pvgpu_client *c, uint16_t opcode,
			   const uint8_t *req, size_t req_len,
			   const void *data_in, uint64_t data_in_len)
{
	size_t need = PVGPU_HDR_SIZE + req_len;
	struct iovec queue;
	uint8_t *slot;
	uint64_t id;
	int32_t st = 0;
	int queued;

	if (req_len > PVGPU_MAX_PAYLOAD || (data_in_len && !data_in))
		return PVGPU_CLIENT_EENCODE;
	pthread_mutex_lock(&c->lock);
	if (c->broken) {
		st = PVGPU_CLIENT_EIO;
		goto out;
	}
	c->stats.async_ops++;
	note_work_locked(c, op_how(opcode));
	if (data_in_len) {
		/* Data must be on the wire before the caller reuses it. */
		queued = take_queue_locked(c, &queue);
		id = take_traced_id(c, opcode);
		st = send_request_locked(c, queued ? &queue : NULL, opcode, 0,
					 id, req, req_len, data_in,
					 data_in_len);
		pvgpu_trace_mark(id, PVGPU_TR_G_SENT);
		goto out;
	}
	if (c->batch_len + need > PVGPU_MAX_BATCH) {
		/* A lost connection resumed: the batch went (kept), this one goes on. */
		st = recover_locked(c, flush_locked(c));
		if (st)
			goto out;
	}
	id = take_traced_id(c, opcode);
	slot = c->batch + PVGPU_HDR_SIZE + c->batch_len;
	put_hdr(c, slot, opcode, (uint32_t)req_len, id);
	memcpy(slot + PVGPU_HDR_SIZE, req, req_len);
	c->batch_len += need;
	c->batch_count++;
	if (!(c->info.features & PVGPU_FEATURE_BATCH) || ring_sends_now(c)) {
		st = flush_locked(c);
		pvgpu_trace_mark(id, PVGPU_TR_G_SENT);	/* batched: not marked */
	}
out:
	st = recover_locked(c, st);
	pthread_mutex_unlock(&c->lock);
	return st;
}

int32_t pvgpu_client_flush(struct pvgpu_client *c)
{
	int32_t st;

	pthread_mutex_lock(&c->lock);
	st = recover_locked(c, c->broken ? PVGPU_CLIENT_EIO : flush_locked(c));
	pthread_mutex_unlock(&c->lock);
	return st;
}

int pvgpu_client_stats(struct pvgpu_client *c, struct pvgpu_client_stats *out)
{
	/* At exit a thread may be stuck mid-call: never wait for it. */
	if (pthread_mutex_trylock(&c->lock))
		return -1;
	*out = c->stats;
	if (c->ring_on) {
		out->ring_kicks = c->ring.kicks_sent;
		out->ring_sleeps = c->ring.sleeps;
	}
	pthread_mutex_unlock(&c->lock);
	return 0;
}

void pvgpu_client_exit(struct pvgpu_client *c)
{
	struct pvgpu_client_stats s;

	pvgpu_client_shutdown(c);
	if (pvgpu_client_stats(c, &s))
		return;
	pvgpu_debug("%s: sent %llu messages: %llu calls, %llu async ops "
		    "(%llu batches), %llu data frames; %llu synchronizes "
		    "and queries answered here; %llu calls ended on the "
		    "device's signal; %llu wake-ups sent, %llu waits slept; "
		    "%llu bytes of data copied by this CPU",
		    c->uri, (unsigned long long)s.sends,
		    (unsigned long long)s.calls,
		    (unsigned long long)s.async_ops,
		    (unsigned long long)s.batches,
		    (unsigned long long)s.data_frames,
		    (unsigned long long)s.local_answers,
		    (unsigned long long)s.signalled,
		    (unsigned long long)s.ring_kicks,
		    (unsigned long long)s.ring_sleeps,
		    (unsigned long long)s.cpu_copied);
}

int pvgpu_client_wire_counts(struct pvgpu_client *c,
			     unsigned long long out[PVGPU_WIRE_COUNTS])
{
	struct pvgpu_client_stats s;

	if (pvgpu_client_stats(c, &s))
		return -1;
	out[0] += s.sends;
	out[1] += s.calls;
	out[2] += s.async_ops;
	out[3] += s.batches;
	out[4] += s.data_frames;
	out[5] += s.ring_kicks;
	out[6] += s.ring_sleeps;
	return c->ring_on;
}

int pvgpu_wire_export(pvgpu_wire_sum_fn sum, unsigned long long *out,
		      int first, int n)
{
	unsigned long long all[PVGPU_WIRE_COUNTS];
	int rings = 0, backends = sum(all, &rings);

	memcpy(out, all + first, (size_t)n * sizeof(out[0]));
	if (backends < 0 || first < PVGPU_WIRE_STATS)
		return backends;
	return rings;
}

const struct pvgpu_client_info *pvgpu_client_info(const struct pvgpu_client *c)
{
	return &c->info;
}

static int say_hello(struct pvgpu_client *c, char *err, size_t errlen)
{
	struct pvgpu_hello_req req = {
		.version_min = 1,
		.version_max = PVGPU_PROTO_VERSION,
		.pid = (uint32_t)getpid(),
		.features = PVGPU_FEATURES_KNOWN & ~c->cfg.withheld_features &
			    ~(c->cfg.signal ? 0 : PVGPU_FEATURE_SIGNAL),
		.required = c->cfg.required_features,
	};
	uint64_t missing;
	struct pvgpu_hello_rep rep;
	const char *token = c->cfg.token;
	const char *name = program_invocation_short_name;
	int32_t st;

	if ((c->tr.ops->features & PVGPU_TRG_SENDS_TOKEN) && *token) {
		if (strlen(token) >= sizeof(req.token)) {
			snprintf(err, errlen, "the token is longer than %zu bytes",
				 sizeof(req.token) - 1);
			return PVGPU_CLIENT_EENCODE;
		}
		req.token_len = (uint32_t)strlen(token);
		memcpy(req.token, token, req.token_len + 1);
	}
	req.client_len = (uint32_t)strnlen(name, sizeof(req.client) - 1);
	memcpy(req.client, name, req.client_len);
	req.client[req.client_len] = '\0';

	st = pvgpu_call_hello(c, &req, &rep);
	if (st) {
		snprintf(err, errlen, "hello refused (%s %d)%s",
			 st < 0 ? "client error" : "CUresult", st,
			 st == 801 && req.required ?	/* CUDA_ERROR_NOT_SUPPORTED */
			 ": the backend lacks a protocol version or feature this program needs" : "");
		return st < 0 ? st : PVGPU_CLIENT_EPROTO;
	}
	if (rep.version < 1 || rep.version > PVGPU_PROTO_VERSION ||
	    rep.device_count < 0 || !rep.data_block ||
	    rep.data_block > PVGPU_MAX_DATA_FRAME) {
		snprintf(err, errlen, "bad hello reply (version %u, %d devices, block %u)",
			 rep.version, rep.device_count, rep.data_block);
		return PVGPU_CLIENT_EPROTO;
	}
	/* A backend from before feature bits answers none: protocol 1's. */
	c->info.features = (rep.features ? rep.features : PVGPU_FEATURES_V1) &
			   PVGPU_FEATURES_KNOWN;
	missing = req.required & ~c->info.features;
	if (missing) {
		snprintf(err, errlen, "the backend lacks feature bits %#llx this program needs",
			 (unsigned long long)missing);
		return PVGPU_CLIENT_EPROTO;
	}
	pvgpu_debug("%s: protocol %u, features %#llx agreed (ours %#llx, backend said %#llx)",
		    c->uri, rep.version, (unsigned long long)c->info.features,
		    (unsigned long long)req.features,
		    (unsigned long long)rep.features);
	c->version = (uint16_t)rep.version;
	c->info.version = rep.version;
	c->info.device_count = rep.device_count;
	c->info.session_id = rep.session_id;
	c->info.data_block = rep.data_block;
	/* The backend keeps the session for a while if the connection goes. */
	if ((c->info.features & PVGPU_FEATURE_RESUME) &&
	    (rep.resume_lo | rep.resume_hi) && rep.resume_grace_ms) {
		c->resume_token[0] = rep.resume_lo;
		c->resume_token[1] = rep.resume_hi;
		c->grace_ms = rep.resume_grace_ms;
	}
	if (c->cfg.block_size && c->cfg.block_size < c->info.data_block)
		c->info.data_block = c->cfg.block_size;
	return 0;
}

/*
 * Threads copying a pageable copy through the window by default: one
 * core's memcpy moves ~10 GB/s, two ~15-20 (docs/benchmarks-history.md,
 * 2026-11-22), and beating
 * NVIDIA's 8-16 GB/s twice over in every run takes more than 30; four
 * with streaming stores move ~56 GB/s on the H200 machine, past the DMA
 * behind them (~49 GB/s in 4 MiB blocks).  A quarter of the cores, two
 * to four.
 */
static unsigned int default_copy_threads(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN) / 4;

	return n < 2 ? 2 : n > 4 ? 4 : (unsigned int)n;
}

void pvgpu_client_config_init(struct pvgpu_client_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	snprintf(cfg->devices, sizeof(cfg->devices), "%s",
		 PVGPU_CLIENT_DEFAULT_DEVICES);
	cfg->poll_ns = 50 * 1000;
	cfg->wait_spin_ns = PVGPU_WAIT_SPIN_US * 1000ull;
	cfg->window = 1;
	cfg->copy_threads = default_copy_threads();
	cfg->window_size = 1ull << 30;
	cfg->staging_slot = 4u << 20;
	cfg->staging_slots = 8;
	cfg->ring = 1;
	cfg->signal = 1;
	cfg->ring_cap = PVGPU_CLIENT_DEFAULT_RING_CAP;
}

int pvgpu_client_open(const char *uri, const struct pvgpu_client_config *cfg,
		      struct pvgpu_client **out, char *err, size_t errlen)
{
	const struct pvgpu_transport_ops *ops;
	struct pvgpu_client *c;
	const char *addr;
	int rc;

	ops = pvgpu_transport_lookup(uri, &addr, err, errlen);
	if (!ops)
		return -EINVAL;
	c = calloc(1, sizeof(*c));
	if (!c)
		goto err_nomem;
	c->batch = malloc(PVGPU_HDR_SIZE + PVGPU_MAX_BATCH);
	c->reply = malloc(PVGPU_MAX_PAYLOAD);
	if (!c->batch || !c->reply)
		goto err_free;
	pthread_mutex_init(&c->lock, NULL);
	snprintf(c->uri, sizeof(c->uri), "%s", uri);
	c->cfg = *cfg;
	/* A block the wire cannot carry is no block: the backend's, then. */
	if (c->cfg.block_size > PVGPU_MAX_DATA_FRAME) {
		pvgpu_debug("ignoring a block size of %u bytes", c->cfg.block_size);
		c->cfg.block_size = 0;
	}
	pvgpu_debug_enable(cfg->debug);
	c->tr.ops = ops;
	c->tr.fd = -1;
	c->wire = &channel_wire;
	c->tr.poll_ns = cfg->poll_ns;
	c->tr.token = c->cfg.token[0] ? c->cfg.token : NULL;
	c->version = PVGPU_PROTO_VERSION;	/* hello: our newest */
	c->info.data_block = PVGPU_DEFAULT_BLOCK;

	rc = ops->connect(&c->tr, addr, err, errlen);
	if (rc)
		goto err_mutex;
	rc = say_hello(c, err, errlen);
	if (rc)
		goto err_close;
	if (!c->cfg.window || !(c->info.features & PVGPU_FEATURE_WINDOW))
		;	/* socket only, as asked or agreed */
	else if ((ops->features & PVGPU_TRG_MEMFD_WINDOW) && ops->sendv_fd)
		attach_window(c, WINDOW_MEMFD);
	else if (ops->features & PVGPU_TRG_DEVICE_WINDOW)
		attach_window(c, WINDOW_DEVICE);
	else if (ops->window)
		attach_window(c, WINDOW_CHANNEL);
	*out = c;
	return 0;

err_close:
	ops->close(&c->tr);
err_mutex:
	pthread_mutex_destroy(&c->lock);
	free(c->reply);
	free(c->batch);
	free(c);
	return rc;
err_free:
	free(c->reply);
	free(c->batch);
	free(c);
err_nomem:
	snprintf(err, errlen, "out of memory");
	return -ENOMEM;
}

static void say_bye(struct pvgpu_client *c)
{
	struct pvgpu_bye_req req = { 0 };
	struct pvgpu_bye_rep rep;

	/* Flushes the queue too; errors no longer matter to anybody. */
	(void)pvgpu_call_bye(c, &req, &rep);
}

void pvgpu_client_close(struct pvgpu_client *c)
{
	if (!c)
		return;
	say_bye(c);
	c->tr.ops->close(&c->tr);
	pvgpu_window_destroy(c->win);
	pthread_mutex_destroy(&c->lock);
	free(c->keep);
	free(c->reply);
	free(c->batch);
	free(c);
}

void pvgpu_client_shutdown(struct pvgpu_client *c)
{
	struct pvgpu_bye_req req = { 0 };
	uint8_t q[PVGPU_BYE_REQ_MAX], r[PVGPU_BYE_REP_MAX];
	long qn = pvgpu_bye_req_encode(q, &req);
	size_t rn;
	uint64_t id;

	/* A thread blocked mid-call holds the lock: leave it be. */
	if (pthread_mutex_trylock(&c->lock))
		return;
	if (!c->broken && qn >= 0) {
		struct iovec queue;
		int queued = take_queue_locked(c, &queue);

		id = take_id(c);
		c->stats.calls++;
		if (!send_request_locked(c, queued ? &queue : NULL, PVGPU_OP_BYE,
					 0, id, q, (size_t)qn,
					 NULL, 0))
			(void)read_reply_locked(c, PVGPU_OP_BYE, id, NULL, 0,
						r, sizeof(r), &rn);
	}
	if (!c->broken) {
		c->broken = 1;
		c->tr.ops->close(&c->tr);
	}
	pthread_mutex_unlock(&c->lock);
}
