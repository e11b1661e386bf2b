/*
 * cuda_stream.c - streams, events and host functions on streams.  The
 * legacy and per-thread default streams are the backend's stream 0 of the
 * current context; host functions run in the guest, in stream order.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "pvgpu_generic.h"
#include "pvgpu_guest.h"

static atomic_ullong next_stream_id = 16;

static struct cu_stream *stream_check(CUstream s)
{
	struct cu_stream *st = (struct cu_stream *)s;

	if (!st || st->magic != CU_MAGIC_STREAM || !st->alive)
		return NULL;
	return st;
}

static int is_default(CUstream s)
{
	return !s || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
}

CUresult cu_stream_resolve(CUstream s, struct cu_ctx **ctx, uint64_t *remote)
{
	struct cu_stream *st;

	if (is_default(s)) {
		*ctx = cu_current();
		*remote = 0;
		if (!cu.initialized)
			return CUDA_ERROR_NOT_INITIALIZED;
		return *ctx ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
	}
	st = stream_check(s);
	if (!st)
		return CUDA_ERROR_INVALID_HANDLE;
	*ctx = st->ctx;
	*remote = st->remote;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamCreateWithPriority(CUstream *ph, unsigned int flags, int priority)
{
	struct pvgpu_stream_create_req req = { .flags = flags, .priority = priority };
	struct pvgpu_stream_create_rep rep = { 0 };
	struct cu_stream *st;
	struct cu_op op;
	CUresult r;

	if (!ph || (flags & ~1u))
		return CUDA_ERROR_INVALID_VALUE;
	r = cu_op_current(&op);
	if (r)
		return r;
	r = cu_status(pvgpu_call_stream_create(op.client, &req, &rep));
	cu_op_end(&op);
	if (r)
		return r;
	st = calloc(1, sizeof(*st));
	if (!st)
		return CUDA_ERROR_OUT_OF_MEMORY;
	st->magic = CU_MAGIC_STREAM;
	st->alive = 1;
	st->ctx = op.ctx;
	st->remote = rep.stream;
	st->flags = flags;
	st->priority = priority < -5 ? -5 : priority > 0 ? 0 : priority;
	st->id = atomic_fetch_add(&next_stream_id, 1);
	*ph = (CUstream)st;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamCreate(CUstream *ph, unsigned int flags)
{
	return cuStreamCreateWithPriority(ph, flags, 0);
}

CUresult CUDAAPI cuStreamDestroy_v2(CUstream s)
{
	struct cu_stream *st = stream_check(s);
	struct pvgpu_stream_destroy_req req;
	struct pvgpu_stream_destroy_rep rep;
	struct cu_op op;
	CUresult r;

	if (!st)
		return CUDA_ERROR_INVALID_HANDLE;
	req.stream = st->remote;
	r = cu_op_begin(&op, st->ctx);
	if (r)
		return r;
	r = cu_status(pvgpu_call_stream_destroy(op.client, &req, &rep));
	cu_op_end(&op);
	st->alive = 0;	/* never freed: a stale handle stays harmless */
	return r;
}

CUresult CUDAAPI cuStreamDestroy(CUstream s)
{
	return cuStreamDestroy_v2(s);
}

static CUresult stream_sync(CUstream s, int query)
{
	struct cu_ctx *ctx;
	uint64_t remote, seq;
	struct cu_op op;
	CUresult r;

	r = cu_stream_resolve(s, &ctx, &remote);
	if (r)
		return r;
	seq = cu_staged_seq();
	r = cu_op_begin(&op, ctx);
	if (r)
		return r;
	r = cu_status(pvgpu_client_wait(op.client, PVGPU_IDLE_STREAM, query,
					ctx->remote, remote));
	cu_op_end(&op);
	/* Graph copies into guest memory it has seen finish. */
	return r ? r : cu_staged_sync(ctx, remote, 0, seq);
}

CUresult CUDAAPI cuStreamSynchronize(CUstream s) { return stream_sync(s, 0); }
CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream s)
{ return stream_sync(s ? s : CU_STREAM_PER_THREAD, 0); }
CUresult CUDAAPI cuStreamQuery(CUstream s) { return stream_sync(s, 1); }
CUresult CUDAAPI cuStreamQuery_ptsz(CUstream s)
{ return stream_sync(s ? s : CU_STREAM_PER_THREAD, 1); }

static struct cu_event *event_check(CUevent e)
{
	struct cu_event *ev = (struct cu_event *)e;

	if (!ev || ev->magic != CU_MAGIC_EVENT || !ev->alive)
		return NULL;
	return ev;
}

CUresult cu_event_remote(CUevent e, struct cu_ctx **ctx, uint64_t *remote)
{
	struct cu_event *ev = event_check(e);

	if (!ev)
		return CUDA_ERROR_INVALID_HANDLE;
	*ctx = ev->ctx;
	*remote = ev->remote;
	return CUDA_SUCCESS;
}

/*
 * The async generic call id of an event and a stream (on the stream's
 * context): a[ei] and a[si] get their backend handles, the rest of a[n]
 * is the caller's.
 */
static CUresult event_on_stream(CUevent e, CUstream s, uint32_t id,
				uint64_t *a, uint32_t n, int ei, int si)
{
	struct cu_event *ev = event_check(e);
	struct cu_ctx *ctx;
	struct cu_op op;
	CUresult r;

	if (!ev)
		return CUDA_ERROR_INVALID_HANDLE;
	r = cu_stream_resolve(s, &ctx, &a[si]);
	if (r)
		return r;
	a[ei] = ev->remote;
	r = cu_op_begin(&op, ctx);
	if (r)
		return r;
	r = cu_status(cu_generic_op_async(&op, id, a, n));
	cu_op_end(&op);
	return r;
}

CUresult CUDAAPI cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags)
{
	uint64_t a[3] = { 0, 0, flags };

	return event_on_stream(e, s, PVGPU_GENERIC_cuStreamWaitEvent, a, 3, 1, 0);
}

CUresult CUDAAPI cuStreamWaitEvent_ptsz(CUstream s, CUevent e, unsigned int flags)
{
	return cuStreamWaitEvent(s ? s : CU_STREAM_PER_THREAD, e, flags);
}

#define STREAM_GETTER(NAME, T, EXPR_DEF, EXPR)					\
CUresult CUDAAPI NAME(CUstream s, T *out)					\
{										\
	struct cu_stream *st = stream_check(s);					\
	if (!out)								\
		return CUDA_ERROR_INVALID_VALUE;				\
	if (is_default(s)) {							\
		if (!cu_current())						\
			return CUDA_ERROR_INVALID_CONTEXT;			\
		*out = EXPR_DEF;						\
		return CUDA_SUCCESS;						\
	}									\
	if (!st)								\
		return CUDA_ERROR_INVALID_HANDLE;				\
	*out = EXPR;								\
	return CUDA_SUCCESS;							\
}										\
CUresult CUDAAPI NAME##_ptsz(CUstream s, T *out)				\
{ return NAME(s ? s : CU_STREAM_PER_THREAD, out); }

STREAM_GETTER(cuStreamGetFlags, unsigned int, 0, st->flags)
STREAM_GETTER(cuStreamGetPriority, int, 0, st->priority)
STREAM_GETTER(cuStreamGetCtx, CUcontext, (CUcontext)cu_current(), (CUcontext)st->ctx)
STREAM_GETTER(cuStreamGetId, unsigned long long, (s == CU_STREAM_PER_THREAD ? 2ull : 1ull), st->id)
STREAM_GETTER(cuStreamGetDevice, CUdevice, cu_current()->device, st->ctx->device)

CUresult CUDAAPI cuStreamGetCtx_v2(CUstream s, CUcontext *pctx, CUgreenCtx *pgreen)
{
	if (pgreen)
		*pgreen = NULL;
	return cuStreamGetCtx(s, pctx);
}

CUresult CUDAAPI cuStreamGetCtx_v2_ptsz(CUstream s, CUcontext *pctx, CUgreenCtx *pgreen)
{
	return cuStreamGetCtx_v2(s ? s : CU_STREAM_PER_THREAD, pctx, pgreen);
}

/*
 * Capture is the backend's (generic driver call); libraries ask this on
 * every call, so while this process has no capture under way the answer
 * comes from here, without a round trip.
 */
static CUresult is_capturing(CUstream s, int ptsz, CUstreamCaptureStatus *status)
{
	uint64_t a[2] = { 0, 1 };
	struct cu_ctx *ctx = NULL;
	CUresult r;

	if (!status)
		return CUDA_ERROR_INVALID_VALUE;
	if (!is_default(s) && !stream_check(s))
		return CUDA_ERROR_INVALID_HANDLE;
	if (!cu_captures_active()) {
		*status = CU_STREAM_CAPTURE_STATUS_NONE;
		return CUDA_SUCCESS;
	}
	r = cu_generic_stream(s, ptsz, &ctx, &a[0]);
	if (!r)
		r = cu_generic_call(PVGPU_GENERIC_cuStreamIsCapturing,
				    "cuStreamIsCapturing", 0, ctx, a, 2);
	if (!r)
		*status = (CUstreamCaptureStatus)a[1];
	return r;
}

CUresult CUDAAPI cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *status)
{
	return is_capturing(s, 0, status);
}

CUresult CUDAAPI cuStreamIsCapturing_ptsz(CUstream s, CUstreamCaptureStatus *status)
{
	return is_capturing(s, 1, status);
}

/* Host functions: wait for the stream's work, then run it here (in a
 * capture: a host node, cuda_capture.c). */
CUresult CUDAAPI cuLaunchHostFunc(CUstream s, CUhostFn fn, void *data)
{
	CUresult r;

	if (!fn)
		return CUDA_ERROR_INVALID_VALUE;
	/* In a capture: a host node of the graph. */
	if (cu_capture_host(s, fn, data, &r))
		return r;
	r = stream_sync(s, 0);
	if (r)
		return r;
	fn(data);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLaunchHostFunc_ptsz(CUstream s, CUhostFn fn, void *data)
{
	return cuLaunchHostFunc(s ? s : CU_STREAM_PER_THREAD, fn, data);
}

CUresult CUDAAPI cuStreamAddCallback(CUstream s, CUstreamCallback cb, void *data,
				     unsigned int flags)
{
	CUresult r;

	if (!cb || flags)
		return CUDA_ERROR_INVALID_VALUE;
	r = stream_sync(s, 0);
	cb(s, r, data);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamAddCallback_ptsz(CUstream s, CUstreamCallback cb, void *data,
					  unsigned int flags)
{
	return cuStreamAddCallback(s ? s : CU_STREAM_PER_THREAD, cb, data, flags);
}

/* ---- events ----------------------------------------------------------- */

CUresult CUDAAPI cuEventCreate(CUevent *ph, unsigned int flags)
{
	uint64_t a[2] = { 1, flags };	/* a[0]: the new event wanted */
	struct cu_event *ev;
	struct cu_op op;
	CUresult r;

	if (!ph)
		return CUDA_ERROR_INVALID_VALUE;
	r = cu_op_current(&op);
	if (r)
		return r;
	r = cu_status(cu_generic_op(&op, PVGPU_GENERIC_cuEventCreate, a, 2));
	cu_op_end(&op);
	if (r)
		return r;
	ev = calloc(1, sizeof(*ev));
	if (!ev)
		return CUDA_ERROR_OUT_OF_MEMORY;
	ev->magic = CU_MAGIC_EVENT;
	ev->alive = 1;
	ev->ctx = op.ctx;
	ev->remote = a[0];
	ev->flags = flags;
	*ph = (CUevent)ev;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventDestroy_v2(CUevent e)
{
	struct cu_event *ev = event_check(e);
	uint64_t a[1];
	struct cu_op op;
	CUresult r;

	if (!ev)
		return CUDA_ERROR_INVALID_HANDLE;
	a[0] = ev->remote;
	r = cu_op_begin(&op, ev->ctx);
	if (r)
		return r;
	r = cu_status(cu_generic_op(&op, PVGPU_GENERIC_cuEventDestroy_v2, a, 1));
	cu_op_end(&op);
	ev->alive = 0;
	return r;
}

CUresult CUDAAPI cuEventDestroy(CUevent e)
{
	return cuEventDestroy_v2(e);
}

/* cuEventRecord, or cuEventRecordWithFlags with flags. */
static CUresult event_record(CUevent e, CUstream s, int with_flags,
			     unsigned int flags)
{
	uint64_t a[3] = { 0, 0, flags };
	CUresult r = event_on_stream(e, s, with_flags ?
				     PVGPU_GENERIC_cuEventRecordWithFlags :
				     PVGPU_GENERIC_cuEventRecord,
				     a, with_flags ? 3 : 2, 0, 1);
	struct cu_event *ev = event_check(e);

	if (!r) {
		ev->rec_stream = a[1];
		ev->rec_seq = cu_staged_seq();
	}
	return r;
}

CUresult CUDAAPI cuEventRecord(CUevent e, CUstream s)
{ return event_record(e, s, 0, 0); }
CUresult CUDAAPI cuEventRecord_ptsz(CUevent e, CUstream s)
{ return event_record(e, s ? s : CU_STREAM_PER_THREAD, 0, 0); }
CUresult CUDAAPI cuEventRecordWithFlags(CUevent e, CUstream s, unsigned int flags)
{ return event_record(e, s, 1, flags); }
CUresult CUDAAPI cuEventRecordWithFlags_ptsz(CUevent e, CUstream s, unsigned int flags)
{ return event_record(e, s ? s : CU_STREAM_PER_THREAD, 1, flags); }

static CUresult event_wait(CUevent e, int query)
{
	struct cu_event *ev = event_check(e);
	struct cu_op op;
	CUresult r;

	if (!ev)
		return CUDA_ERROR_INVALID_HANDLE;
	r = cu_op_begin(&op, ev->ctx);
	if (r)
		return r;
	r = cu_status(pvgpu_client_wait(op.client, PVGPU_IDLE_EVENT, query,
					ev->ctx->remote, ev->remote));
	cu_op_end(&op);
	return r ? r : cu_staged_sync(ev->ctx, ev->rec_stream, 0, ev->rec_seq);
}

CUresult CUDAAPI cuEventSynchronize(CUevent e) { return event_wait(e, 0); }
CUresult CUDAAPI cuEventQuery(CUevent e) { return event_wait(e, 1); }

CUresult CUDAAPI cuEventElapsedTime_v2(float *ms, CUevent a, CUevent b)
{
	struct cu_event *s = event_check(a), *e = event_check(b);
	uint64_t arg[3] = { 1 };
	struct cu_op op;
	CUresult r;

	if (!ms)
		return CUDA_ERROR_INVALID_VALUE;
	if (!s || !e)
		return CUDA_ERROR_INVALID_HANDLE;
	arg[1] = s->remote;
	arg[2] = e->remote;
	r = cu_op_begin(&op, s->ctx);
	if (r)
		return r;
	r = cu_status(cu_generic_op(&op, PVGPU_GENERIC_cuEventElapsedTime_v2, arg, 3));
	cu_op_end(&op);
	if (!r)
		memcpy(ms, &arg[0], sizeof(*ms));	/* a float result: its bits */
	return r;
}

CUresult CUDAAPI cuEventElapsedTime(float *ms, CUevent a, CUevent b)
{
	return cuEventElapsedTime_v2(ms, a, b);
}

/* pvgpu makes no green contexts, so no stream belongs to one: NULL, as the
 * driver answers for a stream of a primary or regular context (cuBLAS 13.1
 * asks it in cublasCreate). */
CUresult CUDAAPI cuStreamGetGreenCtx(CUstream s, CUgreenCtx *out)
{
	CUcontext ctx;
	CUresult r;

	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	r = cuStreamGetCtx(s, &ctx);	/* checks the handle */
	if (!r)
		*out = NULL;
	return r;
}
