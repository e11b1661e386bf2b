/*
 * worker.c - the life of one session: open the executor, read messages,
 * dispatch them, reply, and free everything when the session ends.
 *
 *   guest message --> serve_message() --> pvgpu_dispatch() (generated)
 *                  --> pvgpu_handle_<op>() (ops.c) --> executor
 */
#include <cuda.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "mps.h"
#include "trace.h"
#include "pvgpu_dispatch.h"
#include "watchdog.h"
#include "worker.h"

static uint64_t mem_used_by_all(void *arg, int32_t dev)
{
	return pvgpu_accounting_mem_used(arg, dev);
}

/*
 * Errors a guest caused are logged once per (opcode, status) pair; past
 * the pairs remembered, as often as the session's log limit lets them.
 */
static void note_error(struct pvgpu_worker *w, uint16_t opcode, int32_t st)
{
	const struct pvgpu_op_info *info = pvgpu_op_info(opcode);

	for (unsigned int i = 0; i < w->nnoted; i++)
		if (w->noted[i].opcode == opcode && w->noted[i].status == st)
			return;
	if (w->nnoted < PVGPU_NOTED_ERRORS) {
		w->noted[w->nnoted].opcode = opcode;
		w->noted[w->nnoted].status = st;
		w->nnoted++;
	}
	wlog_info(w, "%s failed with CUresult %d (further failures of this kind are not logged)",
		  info ? info->name : "?", st);
}

/* Without a policy a session holds what one of the [default] pool would. */
static const _Atomic uint32_t handles_without_vm = PVGPU_HANDLES_PER_SESSION;

/*
 * Handles a request could not add for the session's bound (handles.h):
 * one line, kept to the session's budget of such lines (loglimit.h).
 */
static void tell_refusals(struct pvgpu_worker *w)
{
	int32_t vm = atomic_load(&w->slot->vm);
	uint32_t max = atomic_load(w->handles.max);

	if (!w->handles.refused)
		return;
	if (vm >= 0)
		wlog_info(w, "handle refused: the session holds its %u (handles of vm %s)",
			  max, w->acct->vms[vm].name);
	else
		wlog_info(w, "handle refused: the session holds its %u (handles)",
			  max);
	w->handles.refused = 0;
}

/* Held launches (runs.c), watched as any call is. */
static void flush_runs(struct pvgpu_worker *w)
{
	if (!w->run.count)
		return;
	pvgpu_watchdog_begin(w->slot, PVGPU_OP_LAUNCH_KERNEL);
	pvgpu_run_flush(w);
	pvgpu_watchdog_end(w->slot);
}

/* Run one async operation (alone or from a batch). */
static void serve_async(struct pvgpu_worker *w, const struct pvgpu_hdr *h,
			const uint8_t *payload)
{
	uint8_t rep[PVGPU_MAX_REP];
	size_t rep_len;
	int32_t st;

	if (h->opcode != PVGPU_OP_LAUNCH_KERNEL)
		flush_runs(w);		/* held launches were queued first */
	w->served++;
	w->req_id = h->id;
	w->req_opcode = h->opcode;
	w->req_len = h->length;
	/* Queued work counts too: an executor may run it now (the sim does). */
	pvgpu_watchdog_begin(w->slot, h->opcode);
	st = pvgpu_dispatch(w, h->opcode, payload, h->length, rep, &rep_len);
	pvgpu_watchdog_end(w->slot);
	tell_refusals(w);
	pvgpu_trace_mark(h->id, PVGPU_TR_W_DONE);
	if (st == PVGPU_DISPATCH_EDECODE) {
		const struct pvgpu_op_info *info = pvgpu_op_info(h->opcode);

		if (info && info->data_dir != PVGPU_DATA_NONE) {
			/* We cannot know how much data follows: out of step. */
			wlog_warn(w, "protocol error: malformed %s request; ending session",
				  info->name);
			w->fatal = 1;
			return;
		}
		st = CUDA_ERROR_INVALID_VALUE;
	}
	/* Cut off by a lost connection: sent again on resume, not failed. */
	if (st != 0 && !w->resume.lost)
		pvgpu_worker_async_failed(w, h->opcode, st);
}

void pvgpu_worker_async_failed(struct pvgpu_worker *w, uint16_t opcode,
			       int32_t st)
{
	note_error(w, opcode, st);
	if (w->deferred == 0)
		w->deferred = st;
}

int pvgpu_worker_more_input(struct pvgpu_worker *w)
{
	return w->batch_left || (w->ring_on && pvgpu_ring_pending(&w->ring) > 0);
}

int pvgpu_worker_next_alike(struct pvgpu_worker *w)
{
	struct pvgpu_hdr h;

	if (w->batch_left)
		return w->batch_left >= PVGPU_HDR_SIZE &&
		       !pvgpu_hdr_decode(w->batch_next, &h) &&
		       h.opcode == w->req_opcode && h.length == w->req_len;
	/* A message this small is one record (transport/ring.h). */
	return w->ring_on &&
	       pvgpu_ring_pending(&w->ring) == (int64_t)(PVGPU_HDR_SIZE + w->req_len);
}

static void serve_batch(struct pvgpu_worker *w, const uint8_t *p, size_t left)
{
	while (left && !w->fatal) {
		const struct pvgpu_op_info *info;
		struct pvgpu_hdr h;

		if (left < PVGPU_HDR_SIZE || pvgpu_hdr_decode(p, &h) ||
		    h.length > left - PVGPU_HDR_SIZE) {
			wlog_warn(w, "protocol error: malformed batch; ending session");
			w->fatal = 1;
			return;
		}
		info = pvgpu_op_info(h.opcode);
		if (!info || !info->is_async || info->data_dir != PVGPU_DATA_NONE) {
			wlog_warn(w, "protocol error: opcode %#x may not be batched; ending session",
				  h.opcode);
			w->fatal = 1;
			return;
		}
		p += PVGPU_HDR_SIZE + h.length;
		left -= PVGPU_HDR_SIZE + h.length;
		w->batch_next = p;
		w->batch_left = left;
		serve_async(w, &h, p - h.length);
		atomic_fetch_add(&w->slot->calls, 1);
	}
}

static void serve_message(struct pvgpu_worker *w, const struct pvgpu_hdr *h,
			  const uint8_t *payload)
{
	const struct pvgpu_op_info *info = pvgpu_op_info(h->opcode);
	uint8_t rep[PVGPU_MAX_REP];
	size_t rep_len = 0;
	int32_t st;

	/* Nothing reaches a suspended executor (resume.c). */
	if (pvgpu_worker_await_running(w)) {
		w->fatal = 1;
		return;
	}
	if (h->opcode == PVGPU_OP_BATCH) {
		serve_batch(w, payload, h->length);
		w->batch_left = 0;
		return;
	}
	if (!w->said_hello && h->opcode != PVGPU_OP_HELLO) {
		wlog_warn(w, "protocol error: first message is opcode %#x, not hello; ending session",
			  h->opcode);
		w->fatal = 1;
		return;
	}
	atomic_fetch_add(&w->slot->calls, 1);
	if (info && info->is_async) {
		serve_async(w, h, payload);
		return;
	}
	flush_runs(w);			/* held launches were queued first */
	w->served++;
	w->req_id = h->id;
	w->req_flags = h->flags;
	if (h->opcode < PVGPU_SYNC_OPS)
		w->sync_ops[h->opcode]++;
	/* Its DATA frames are not kept: run again for a guest that lost them. */
	if (info && info->data_dir == PVGPU_DATA_OUT)
		pvgpu_worker_keep_request(w, h, payload);
	pvgpu_watchdog_begin(w->slot, h->opcode);
	st = pvgpu_dispatch(w, h->opcode, payload, h->length, rep, &rep_len);
	pvgpu_watchdog_end(w->slot);
	tell_refusals(w);
	pvgpu_trace_mark(h->id, PVGPU_TR_W_DONE);
	if (w->fatal) {
		w->signal.signalled = 0;
		return;
	}
	if (st == PVGPU_DISPATCH_EOPCODE) {
		wlog_warn(w, "unknown opcode %#x: answered CUDA_ERROR_NOT_SUPPORTED",
			  h->opcode);
		st = CUDA_ERROR_NOT_SUPPORTED;
	} else if (st == PVGPU_DISPATCH_EDECODE) {
		if (info->data_dir != PVGPU_DATA_NONE) {
			wlog_warn(w, "protocol error: malformed %s request; ending session",
				  info->name);
			w->fatal = 1;
			return;
		}
		wlog_info(w, "malformed %s request: answered CUDA_ERROR_INVALID_VALUE",
			  info->name);
		st = CUDA_ERROR_INVALID_VALUE;
	} else if (st != 0) {
		note_error(w, h->opcode, st);
	}
	pvgpu_worker_send_reply(w, h->opcode, st, rep, rep_len);
	if (w->signal.signalled) {
		/* Settled before the next read (signal.c). */
		w->signal.signalled = 0;
		w->signal.pending = !w->fatal;
		w->signal.opcode = h->opcode;
	}
	/* The window_attach that named a ring was answered on the socket. */
	if (w->ring_pending) {
		w->ring_pending = 0;
		w->ring_on = !w->fatal;
		pvgpu_worker_wire_ring(w, w->ring_on);
	}
	/*
	 * A synchronising call may have seen the session's kernels finish:
	 * tell the scheduler now, after the reply, not at the next launch.
	 * A context synchronize answered before its work is done tells it
	 * once settled (signal.c): a poll now would mark, with an event,
	 * the launches it is about to see end.
	 */
	if (pvgpu_sched_pending(&w->sched) &&
	    !(w->signal.pending && h->opcode == PVGPU_OP_CTX_SYNCHRONIZE))
		pvgpu_sched_poll(&w->sched);
}

/* The policy of VM entry vm, or NULL (a registered VM the file does not name). */
static const struct pvgpu_vm_policy *vm_policy(const struct pvgpu_policy *p,
					       int32_t vm)
{
	if (p->unknown.entry == vm)
		return &p->unknown;
	for (unsigned int i = 0; i < p->nvms; i++)
		if (p->vms[i].entry == vm)
			return &p->vms[i];
	return NULL;
}

static int worker_init(struct pvgpu_worker *w, struct pvgpu_conn *conn,
		       const struct pvgpu_peer *peer,
		       const struct pvgpu_worker_config *cfg,
		       struct pvgpu_accounting *acct, struct pvgpu_slot *slot)
{
	struct pvgpu_exec_config ecfg = {
		.device_mem_used = mem_used_by_all,
		.arg = acct,
		.remotes = cfg->remotes,
		.nremotes = cfg->nremotes,
		.remote_token = cfg->remote_token,
	};
	int32_t vm;

	memset(w, 0, sizeof(*w));
	pvgpu_worker_wire_ring(w, 0);
	pvgpu_log_limit_init(&w->loglim);
	w->conn = conn;
	w->peer = *peer;
	w->cfg = cfg;
	w->acct = acct;
	w->slot = slot;
	w->ex_ops = cfg->exec;
	vm = atomic_load(&slot->vm);
	w->handles.max = vm >= 0 ? &acct->vms[vm].handles_max :
			 &handles_without_vm;
	pvgpu_sched_session_init(&w->sched, &(struct pvgpu_sched_who){
		.table = cfg->sched, .slot = slot, .ex_ops = w->ex_ops,
		.ex = &w->ex, .cur_ctx = &w->cur_ctx,
		.capturing = &w->capturing,
	});
	w->rx = malloc(PVGPU_MAX_BATCH);
	if (!w->rx)
		return -1;
	/* Before the executor: the driver's stdout is the guest's from the start. */
	if (cfg->capture_output)
		(void)pvgpu_output_open(w);
	ecfg.log_fd = pvgpu_log_fd();
	/* A client of its GPU's MPS server, if it shares by MPS: before the driver starts. */
	if (cfg->policy && cfg->policy->mps_gpus && vm >= 0)
		pvgpu_mps_client_env(vm_policy(cfg->policy, vm),
				     cfg->policy->mps_gpus, cfg->mps_pipe);
	w->ex = w->ex_ops->open(&ecfg, w->ex_error, sizeof(w->ex_error));
	if (!w->ex)
		log_warn("executor %s unavailable: %s", w->ex_ops->name,
			 log_esc(w->ex_error));
	return 0;
}

/* "name×count ..." of the eight requests made most, most first. */
static void log_sync_ops(const struct pvgpu_worker *w)
{
	char line[512];
	uint32_t taken[8] = { 0 };
	size_t n = 0;
	int len = 0;

	if (!pvgpu_log_enabled(LOG_DEBUG))
		return;
	for (int k = 0; k < 8; k++) {
		uint32_t best = 0, op = 0;

		for (uint32_t i = 0; i < PVGPU_SYNC_OPS; i++) {
			int seen = 0;

			for (int j = 0; j < k; j++)
				seen |= taken[j] == i;
			if (!seen && w->sync_ops[i] > best) {
				best = w->sync_ops[i];
				op = i;
			}
		}
		if (!best)
			break;
		taken[k] = op;
		const struct pvgpu_op_info *info = pvgpu_op_info((uint16_t)op);

		len += snprintf(line + len, sizeof(line) - (size_t)len, " %s×%u",
				info ? info->name : "?", best);
		if (len >= (int)sizeof(line))
			break;
		n++;
	}
	if (n)
		log_debug("requests waited for most:%s", line);
	if (w->signal.count)
		log_debug("%llu of them ended on the device's signal",
			  (unsigned long long)w->signal.count);
	if (w->ring_on)
		log_debug("control ring: slept %llu times waiting for the guest, woke it %llu times",
			  (unsigned long long)w->ring.sleeps,
			  (unsigned long long)w->ring.kicks_sent);
	if (w->runs)
		log_debug("%llu launches went to the GPU as %llu runs of %u",
			  (unsigned long long)w->runs * PVGPU_LAUNCH_RUN,
			  (unsigned long long)w->runs, PVGPU_LAUNCH_RUN);
}

static void worker_fini(struct pvgpu_worker *w)
{
	pvgpu_log_limit_summary(&w->loglim);
	log_sync_ops(w);
	/*
	 * A suspended worker's driver is locked: its calls would block (the
	 * staging's events, the window's pins, the close).  Nothing more goes
	 * to it: the process's exit frees what the session held there.
	 */
	if (w->ex && atomic_load(&w->slot->state) != PVGPU_SLOT_RUNNING)
		w->ex = NULL;
	pvgpu_staging_release(w);
	w->ring_on = 0;			/* it lives in the window */
	pvgpu_worker_wire_ring(w, 0);
	pvgpu_window_detach(w);
	if (w->ex)
		w->ex_ops->close(w->ex);	/* frees contexts and all in them */
	pvgpu_sched_session_end(&w->sched);		/* its work on the GPU is gone */
	for (int d = 0; d < PVGPU_MAX_DEVICES; d++)
		atomic_store(&w->slot->mem_used[d], 0);
	pvgpu_handles_free(&w->handles);
	pvgpu_staged_free(w);
	pvgpu_allocs_free(&w->allocs);
	free(w->rx);
	free(w->resume.kept);
	free(w->resume.kept_req);
	w->conn->ops->close(w->conn);
	pvgpu_trace_dump();		/* the worker ends with _exit() */
}

/*
 * The message the supervisor read for us (the hello that said who calls),
 * served as if it had been read here: the connection has moved past it.
 */
static void serve_given(struct pvgpu_worker *w, const uint8_t *msg, size_t len)
{
	struct pvgpu_hdr h;

	if (len < PVGPU_HDR_SIZE || pvgpu_hdr_decode(msg, &h) ||
	    h.length != len - PVGPU_HDR_SIZE || h.length > PVGPU_MAX_PAYLOAD) {
		log_error("the supervisor handed over a broken first message; ending session");
		w->fatal = 1;
		return;
	}
	memcpy(w->rx, msg + PVGPU_HDR_SIZE, h.length);
	serve_message(w, &h, w->rx);
}

int pvgpu_worker_run(struct pvgpu_conn *conn, const struct pvgpu_peer *peer,
		     const struct pvgpu_worker_config *cfg,
		     struct pvgpu_accounting *acct, struct pvgpu_slot *slot,
		     const uint8_t *first, size_t first_len)
{
	struct pvgpu_worker w;
	uint8_t raw[PVGPU_HDR_SIZE];
	struct pvgpu_hdr h;
	char err[256];

	/*
	 * A caller whose channel cannot say who it is is admitted by its
	 * hello, in the supervisor: never serve one that did not go through
	 * that.
	 */
	if ((peer->features & PVGPU_TR_ID_AT_HELLO) && !first) {
		log_error("%s reached a worker unidentified: refused", peer->identity);
		conn->ops->close(conn);
		return 1;
	}
	/*
	 * What the channel makes after fork() (a vchan, a verbs context),
	 * and the wait for its guest: before anything of the session.
	 */
	if (conn->ops->open && conn->ops->open(conn, err, sizeof(err))) {
		log_info("channel for %s not opened: %s", peer->identity,
			 log_esc(err));
		conn->ops->close(conn);
		return 1;
	}
	if (worker_init(&w, conn, peer, cfg, acct, slot)) {
		log_error("out of memory starting the session");
		conn->ops->close(conn);
		return 1;
	}
	if (first)
		serve_given(&w, first, first_len);
	for (;;) {
		uint32_t limit;

		/* A lost connection, with a token given: wait for the guest. */
		if (w.fatal && w.resume.lost && w.resume.grace_ns)
			flush_runs(&w);	/* held launches do not wait for it */
		if (w.fatal && (!w.resume.lost || pvgpu_worker_detach(&w)))
			break;
		if (w.said_hello < 0)	/* bye, or a refused hello */
			break;
		if (w.resume.rerun) {
			w.resume.rerun = 0;
			serve_message(&w, &w.resume.kept_hdr, w.resume.kept_req);
			continue;
		}

		/* Held launches wait only while the guest is ahead (runs.c). */
		if (w.run.count && !pvgpu_worker_more_input(&w))
			flush_runs(&w);
		if (w.signal.pending)
			pvgpu_signal_settle(&w);
		w.between_calls = 1;
		if (pvgpu_worker_read(&w, raw, sizeof(raw)))
			continue;
		w.between_calls = 0;
		if (pvgpu_hdr_decode(raw, &h)) {
			wlog_warn(&w, "protocol error: bad magic %#x; ending session",
				  h.magic);
			break;
		}
		limit = h.opcode == PVGPU_OP_BATCH ? PVGPU_MAX_BATCH :
						     PVGPU_MAX_PAYLOAD;
		if (h.length > limit || h.opcode == PVGPU_OP_DATA) {
			wlog_warn(&w, "protocol error: %s (opcode %#x, %u bytes); ending session",
				  h.opcode == PVGPU_OP_DATA ? "DATA frame outside a copy" :
							      "message too long",
				  h.opcode, h.length);
			break;
		}
		pvgpu_trace_mark(h.id, PVGPU_TR_W_HDR);
		if (pvgpu_worker_read(&w, w.rx, h.length))
			continue;
		pvgpu_trace_mark(h.id, PVGPU_TR_W_PAYLOAD);
		serve_message(&w, &h, w.rx);
		/* Read whole, DATA frames too, unless a read broke off. */
		if (w.resume.lost != PVGPU_LOST_READ)
			w.resume.last_received = h.id;
	}
	worker_fini(&w);
	return 0;
}
