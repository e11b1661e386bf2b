/*
 * signal.c - a synchronous call's completion written by the device itself
 * (feature signal: PVGPU_F_SIGNAL in wire.h, the word in
 * transport/shm/ring.h).
 *
 * A guest that marked a synchronous copy or synchronize may be answered
 * before the work is done: the worker queues the work and, after it on
 * the same stream, the device's write of the request's value into the
 * guest's word, and replies at once with PVGPU_F_SIGNAL.  That reply
 * crosses while the device works; the guest then polls the word, which
 * the device writes as soon as the work is done, so the call ends when
 * NVIDIA's driver would have seen it end, with no second crossing on its
 * path (BENCHMARKS.md).  The worker meanwhile waits for the stream as the
 * call would have, answers a second time only if the work failed, and
 * wakes a guest that went to sleep waiting.
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
	return w->signal_word && (w->req_flags & PVGPU_F_SIGNAL) &&
	       !w->deferred && !w->capturing &&
	       !(w->output_ok && w->output_armed);
}

/* The word pinned and mapped for the device, in the current context. */
static int word_ready(struct pvgpu_worker *w)
{
	void *page = (void *)((uintptr_t)w->signal_word & ~(uintptr_t)4095);
	int32_t st;

	if (w->signal_dptr && w->signal_ctx == w->cur_ctx)
		return 1;
	st = w->ex_ops->host_register(w->ex, page, 4096);
	if (st && st != CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED) {
		log_debug("signal: cannot pin the completion word: CUresult %d; replies as before", st);
		return 0;
	}
	st = w->ex_ops->host_device_pointer(w->ex, w->signal_word, &w->signal_dptr);
	if (st) {
		log_debug("signal: no device address for the completion word: CUresult %d; replies as before", st);
		w->signal_dptr = 0;
		return 0;
	}
	w->signal_ctx = w->cur_ctx;
	return 1;
}

int pvgpu_signal_queue(struct pvgpu_worker *w, uint64_t stream, int ctx_sync)
{
	uint32_t value = (uint32_t)w->req_id ? (uint32_t)w->req_id : 1;
	int32_t st;

	if (!w->ex_ops->stream_write_value || !w->ex_ops->host_device_pointer ||
	    !w->ex_ops->host_register || !word_ready(w)) {
		w->signal_word = NULL;		/* not for this session */
		return 0;
	}
	st = w->ex_ops->stream_write_value(w->ex, stream, w->signal_dptr, value);
	if (st) {
		/* The call's own wait then gives its error (a faulted context...). */
		if (st == CUDA_ERROR_NOT_SUPPORTED || st == CUDA_ERROR_INVALID_VALUE) {
			log_debug("signal: the device's write cannot be queued: CUresult %d; replies as before", st);
			w->signal_word = NULL;
		}
		return 0;
	}
	w->signalled = 1;
	w->signals++;
	w->signal_stream = stream;
	w->signal_ctx_sync = ctx_sync;
	return 1;
}

void pvgpu_signal_finish(struct pvgpu_worker *w, uint16_t opcode)
{
	int32_t st;

	w->signalled = 0;
	pvgpu_watchdog_begin(w->slot, opcode);
	st = w->ex_ops->stream_synchronize(w->ex, w->signal_stream);
	pvgpu_watchdog_end(w->slot);
	if (st) {
		/* The word was never written: the guest waits for this. */
		pvgpu_worker_send_reply(w, opcode, st, NULL, 0);
		return;
	}
	if (w->signal_ctx_sync)
		pvgpu_sched_ctx_synced(w);	/* as a context synchronize */
	if (w->ring_on)
		(void)pvgpu_ring_wake(&w->ring);	/* a hang-up shows at the next read */
}
