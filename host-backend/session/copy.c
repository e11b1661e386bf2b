/*
 * copy.c - bulk copies over a stream transport, pipelined through pinned
 * staging buffers (DESIGN §4).
 *
 * Host to device: while block k is arriving from the guest into staging
 * buffer k % N, block k-1 is already in a DMA.  A buffer is reused only once
 * the event recorded after its DMA has completed.
 *
 * Device to host: up to N blocks are put in flight at once; block k is sent
 * to the guest as soon as its DMA completes, while later ones are still
 * copying.
 *
 * A small synchronous copy on the legacy stream has nothing to overlap: it
 * is one synchronous driver call.  Host to device from ordinary memory,
 * which is what the guest's own copy from pageable memory is natively
 * (the driver returns once the bytes are in its staging buffer; on the
 * H100 a 1-byte copy so took 5.2-5.7 us against 7.0-8.4 us through pinned
 * staging, an async copy, an event and a synchronize); device to host
 * into a pinned staging buffer, then sent.
 */
#include <cuda.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "pvgpu_proto.h"
#include "worker.h"

static int32_t staging_ready(struct pvgpu_worker *w)
{
	uint64_t bytes = (uint64_t)PVGPU_STAGING_BUFFERS * w->cfg->block;
	int32_t st;

	if (w->copy.staging[0].buf)
		return 0;
	/* Page-locked host memory taken for this VM: its pinned figure (policy.h). */
	if (pvgpu_accounting_pin(w->acct, w->slot, bytes)) {
		wlog_info(w, "cannot set up %d staging buffers of %u bytes: over the pinned quota of vm %s",
			  PVGPU_STAGING_BUFFERS, w->cfg->block,
			  w->acct->vms[atomic_load(&w->slot->vm)].name);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	w->copy.pinned = bytes;
	for (int i = 0; i < PVGPU_STAGING_BUFFERS; i++) {
		struct pvgpu_staging *s = &w->copy.staging[i];

		st = w->ex_ops->host_alloc(w->ex, w->cfg->block, &s->buf);
		if (st)
			goto err;
		st = pvgpu_exec_event_create(w->ex_ops, w->ex, CU_EVENT_DISABLE_TIMING,
					     &s->event);
		if (st)
			goto err;
	}
	return 0;
err:
	wlog_warn(w, "cannot set up %d pinned staging buffers of %u bytes: CUresult %d",
		  PVGPU_STAGING_BUFFERS, w->cfg->block, st);
	pvgpu_staging_release(w);
	return st;
}

void pvgpu_staging_release(struct pvgpu_worker *w)
{
	for (int i = 0; i < PVGPU_STAGING_BUFFERS; i++) {
		struct pvgpu_staging *s = &w->copy.staging[i];

		if (s->event && w->ex) {
			if (s->busy)
				pvgpu_exec_event_synchronize(w->ex_ops, w->ex, s->event);
			pvgpu_exec_event_destroy(w->ex_ops, w->ex, s->event);
		}
		if (s->buf && w->ex)
			w->ex_ops->host_release(w->ex, s->buf, false);
		memset(s, 0, sizeof(*s));
	}
	pvgpu_accounting_unpin(w->slot, w->copy.pinned);
	w->copy.pinned = 0;
	free(w->copy.small);
	w->copy.small = NULL;
}

/* The next staging buffer, once no DMA uses it any more. */
static struct pvgpu_staging *staging_next(struct pvgpu_worker *w, int32_t *st)
{
	struct pvgpu_staging *s = &w->copy.staging[w->copy.next];

	w->copy.next = (w->copy.next + 1) % PVGPU_STAGING_BUFFERS;
	*st = 0;
	if (s->busy) {
		*st = pvgpu_exec_event_synchronize(w->ex_ops, w->ex, s->event);
		s->busy = 0;
	}
	return s;
}

/* Read and drop the DATA frames of a copy we refused, to stay in step. */
static void discard_data(struct pvgpu_worker *w, uint64_t size)
{
	uint8_t sink[4096];

	while (size && !w->fatal) {
		uint32_t len;

		if (pvgpu_worker_next_frame(w, PVGPU_MAX_DATA_FRAME, size, &len))
			return;
		size -= len;
		while (len && !w->fatal) {
			uint32_t n = len < sizeof(sink) ? len : (uint32_t)sizeof(sink);

			pvgpu_worker_read(w, sink, n);
			len -= n;
		}
	}
}

#define PVGPU_SMALL_COPY	(64u * 1024)

/* Is this a small synchronous copy (the executor's one call)? */
static int small_copy(struct pvgpu_worker *w, uint64_t size, uint64_t stream,
		      int sync)
{
	return sync && !stream && size && size <= PVGPU_SMALL_COPY &&
	       size <= w->cfg->block;
}

static int32_t copy_htod_small(struct pvgpu_worker *w, uint64_t dst, uint64_t size)
{
	int32_t st;

	if (!w->copy.small && !(w->copy.small = malloc(PVGPU_SMALL_COPY))) {
		discard_data(w, size);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (pvgpu_worker_recv_data(w, w->copy.small, size))
		return 0;		/* fatal: nobody to answer */
	st = pvgpu_exec_htod(w->ex_ops, w->ex, dst, w->copy.small, size,
			     false, 0);
	if (!st)
		atomic_fetch_add(&w->slot->bytes_h2d, size);
	return st;
}

int32_t pvgpu_copy_htod(struct pvgpu_worker *w, uint64_t dst, uint64_t size,
			uint64_t stream, int sync)
{
	uint64_t off = 0;
	int32_t st, first_err = 0;

	if (small_copy(w, size, stream, sync))
		return copy_htod_small(w, dst, size);
	st = staging_ready(w);
	if (st) {
		discard_data(w, size);
		return st;
	}
	while (off < size && !w->fatal) {
		struct pvgpu_staging *s;
		uint32_t len;

		if (pvgpu_worker_next_frame(w, w->cfg->block, size - off, &len))
			return 0;		/* fatal: nobody to answer */
		s = staging_next(w, &st);
		if (pvgpu_worker_read(w, s->buf, len))
			return 0;
		if (!st && !first_err)
			st = pvgpu_exec_htod(w->ex_ops, w->ex, dst + off,
					     s->buf, len, true, stream);
		if (!st && !first_err) {
			st = pvgpu_exec_event_record(w->ex_ops, w->ex, s->event, stream);
			s->busy = (st == 0);
		}
		if (st && !first_err)
			first_err = st;	/* keep reading: the guest is still sending */
		off += len;
	}
	atomic_fetch_add(&w->slot->bytes_h2d, off);
	if (!first_err && sync)
		first_err = w->ex_ops->synchronize(w->ex, false, stream);
	return first_err;
}

int32_t pvgpu_copy_dtoh(struct pvgpu_worker *w, uint64_t src, uint64_t size,
			uint64_t stream)
{
	uint64_t issued = 0, sent = 0;
	uint32_t block = w->cfg->block;
	unsigned int head;
	int32_t st, first_err;

	first_err = staging_ready(w);
	if (first_err)
		return first_err;
	if (small_copy(w, size, stream, 1)) {
		struct pvgpu_staging *s = staging_next(w, &st);

		if (!st)
			st = pvgpu_exec_dtoh(w->ex_ops, w->ex, s->buf, src,
					     size, false, 0);
		if (st)
			memset(s->buf, 0, size);	/* never leak stale staging bytes */
		if (pvgpu_worker_send_data(w, s->buf, (uint32_t)size))
			return 0;
		if (!st)
			atomic_fetch_add(&w->slot->bytes_d2h, size);
		return st;
	}
	/* Blocks sent in order: buffer for block k is (head + k) % N. */
	head = w->copy.next;
	while (sent < size && !w->fatal) {
		struct pvgpu_staging *s;
		uint32_t len;

		/* Keep every staging buffer busy with a DMA ahead of the sender. */
		while (issued < size && issued - sent < (uint64_t)block * PVGPU_STAGING_BUFFERS) {
			len = size - issued < block ? (uint32_t)(size - issued) : block;
			s = staging_next(w, &st);
			if (!st && !first_err)
				st = pvgpu_exec_dtoh(w->ex_ops, w->ex,
						     s->buf, src + issued,
						     len, true, stream);
			if (!st && !first_err) {
				st = pvgpu_exec_event_record(w->ex_ops, w->ex, s->event, stream);
				s->busy = (st == 0);
			}
			if (st && !first_err)
				first_err = st;
			issued += len;
		}
		s = &w->copy.staging[head];
		head = (head + 1) % PVGPU_STAGING_BUFFERS;
		len = size - sent < block ? (uint32_t)(size - sent) : block;
		if (s->busy) {
			st = pvgpu_exec_event_synchronize(w->ex_ops, w->ex, s->event);
			s->busy = 0;
			if (st && !first_err)
				first_err = st;
		}
		if (first_err)
			memset(s->buf, 0, len);	/* never leak stale staging bytes */
		if (pvgpu_worker_send_data(w, s->buf, len))
			return 0;
		sent += len;
	}
	atomic_fetch_add(&w->slot->bytes_d2h, sent);
	return first_err;
}

/* Exported so ops.c can refuse a copy and keep the stream in step. */
void pvgpu_copy_refuse_htod(struct pvgpu_worker *w, uint64_t size)
{
	discard_data(w, size);
}

void pvgpu_copy_refuse_upto(struct pvgpu_worker *w, uint64_t size,
			    uint64_t max)
{
	discard_data(w, size <= max ? size : 0);
	if (size > max)
		w->fatal = 1;	/* more than we will read: out of step */
}
