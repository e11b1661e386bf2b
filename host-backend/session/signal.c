/*
 * signal.c - a synchronous call's completion written by the device itself
 * (feature signal: PVGPU_F_SIGNAL in wire.h, the word in
 * transport/ring.h).
 *
 * A guest that marked a synchronous copy or synchronize may be answered
 * before the work is done: the worker queues the work and, after it on
 * the same stream, the device's write of the request's value into the
 * guest's word, and replies at once with PVGPU_F_SIGNAL.  That reply
 * crosses while the device works; the guest then polls the word, which
 * the device writes as soon as the work is done, so the call ends when
 * NVIDIA's driver would have seen it end, with no second crossing on its
 * path (docs/benchmarks-history.md).  Before its next read the worker
 * watches the word too (and now and then the stream): a new request, or
 * the word, is success; a stream that failed gets a second reply with its
 * error; a guest that went to sleep waiting is woken.  Not a synchronize
 * of the worker's own: that one's return, later than the word's write,
 * held up the guest's next call (docs/benchmarks-history.md, 2026-11-28).
 */
#include <cuda.h>

#include "log.h"
#include "pvgpu_proto.h"
#include "watchdog.h"
#include "wire.h"
#include "worker.h"

int pvgpu_signal_wanted(const struct pvgpu_worker *w)
{
	/*
	 * Not with an async error to report (the reply carries it), in
	 * stream capture (a synchronize there is an error the call must
	 * give), or with device output possibly on its way (it must come
	 * before the call returns).
	 */
	return w->signal.word && (w->req_flags & PVGPU_F_SIGNAL) &&
	       !w->deferred && !w->capturing &&
	       !(w->output.ok && w->output.armed);
}

/* The word pinned and mapped for the device, in the current context. */
static int word_ready(struct pvgpu_worker *w)
{
	void *page = (void *)((uintptr_t)w->signal.word & ~(uintptr_t)4095);
	int32_t st;

	if (w->signal.dptr && w->signal.ctx == w->cur_ctx)
		return 1;
	st = w->ex_ops->host_register(w->ex, page, 4096);
	if (st && st != CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED) {
		wlog_debug(w, "signal: cannot pin the completion word: CUresult %d; replies as before", st);
		return 0;
	}
	st = w->ex_ops->host_device_pointer(w->ex, w->signal.word, &w->signal.dptr);
	if (st) {
		wlog_debug(w, "signal: no device address for the completion word: CUresult %d; replies as before", st);
		w->signal.dptr = 0;
		return 0;
	}
	w->signal.ctx = w->cur_ctx;
	return 1;
}

int pvgpu_signal_queue(struct pvgpu_worker *w, uint64_t stream)
{
	uint32_t value = pvgpu_signal_value(w->req_id);
	int32_t st;

	/* Without host_device_pointer the feature is not agreed (hello). */
	if (!w->ex_ops->host_device_pointer || !w->ex_ops->host_register ||
	    !word_ready(w)) {
		w->signal.word = NULL;		/* not for this session */
		return 0;
	}
	st = pvgpu_exec_stream_write_value(w->ex_ops, w->ex, stream, w->signal.dptr, value);
	if (st) {
		/* The call's own wait then gives its error (a faulted context...). */
		if (st == CUDA_ERROR_NOT_SUPPORTED || st == CUDA_ERROR_INVALID_VALUE) {
			wlog_debug(w, "signal: the device's write cannot be queued: CUresult %d; replies as before", st);
			w->signal.word = NULL;
		}
		return 0;
	}
	w->signal.signalled = 1;
	w->signal.count++;
	w->signal.value = value;
	w->signal.stream = stream;
	return 1;
}

/*
 * Whether the signalled work has settled: the word written (the guest's
 * own look, made here too: a plain load, no driver call), or every 256th
 * look the stream idle or failed.
 */
static int settled(void *arg)
{
	struct pvgpu_worker *w = arg;
	int32_t st;

	if (__atomic_load_n(w->signal.word, __ATOMIC_ACQUIRE) == w->signal.value) {
		w->signal.status = CUDA_SUCCESS;
		return 1;
	}
	if (++w->signal.looks % 256)
		return 0;
	st = pvgpu_exec_stream_query(w->ex_ops, w->ex, w->signal.stream);
	if (st == CUDA_ERROR_NOT_READY)
		return 0;
	w->signal.status = st;
	return 1;
}

/*
 * How long the worker looks at the word before it sleeps: as long as the
 * guest spins on it (--wait-spin-us, by default the guest's
 * PVGPU_WAIT_SPIN_US; wait.h), never less than its poll.  The guest is
 * inside its synchronous call until the word: a worker asleep by then has
 * to be woken by the guest's next request, which waits for it.  A copy
 * longer than a 50 us look (pinned, from ~4 MiB) ran ~10 us later each
 * (docs/benchmarks-history.md, 2026-11-28, evening), and a synchronous
 * copy or a synchronize behind an 8 ms kernel paid a wake-up before every
 * next launch, with the GPU idle meanwhile (pvgpu-synth 10/90,
 * docs/benchmarks-history.md, 2026-11-28, late night).  After 2 ms the look
 * yields between tries (ring.c), as the guest's does.
 */
static uint64_t settle_spin_ns(const struct pvgpu_worker *w)
{
	return w->cfg->wait_spin_ns > w->cfg->poll_ns ? w->cfg->wait_spin_ns :
							 w->cfg->poll_ns;
}

void pvgpu_signal_settle(struct pvgpu_worker *w)
{
	int64_t n;

	w->signal.pending = 0;
	w->signal.looks = 0;
	w->signal.settling = 1;
	pvgpu_watchdog_begin(w->slot, w->signal.opcode);
	n = pvgpu_ring_wait_until(&w->ring, settled, w,
				  settle_spin_ns(w));
	pvgpu_watchdog_end(w->slot);
	w->signal.settling = 0;
	if (n < 0)
		return;			/* the read that follows says why */
	/*
	 * A new request means the guest saw the word (it holds its connection
	 * until then): done.  Else the word, or the stream's own answer.
	 */
	if (n == 0 && w->signal.status) {
		/* The word was never written: the guest waits for this (req_id
		 * is still the request's: nothing was read since). */
		pvgpu_worker_send_reply(w, w->signal.opcode, w->signal.status, NULL, 0);
		return;
	}
	if (n == 0)
		(void)pvgpu_ring_wake(&w->ring);	/* a hang-up shows at the next read */
	if (w->signal.opcode == PVGPU_OP_CTX_SYNCHRONIZE) {
		/* As the synchronize would have, and the reply's poll did not. */
		pvgpu_sched_ctx_synced(&w->sched);
		if (pvgpu_sched_pending(&w->sched))
			pvgpu_sched_poll(&w->sched);
	}
}
