/*
 * cuda_generic.c - the generic driver call, guest side.
 *
 * Driver functions listed in protocol/api/annotations.py GENERIC get their
 * entry points generated (build/gen/cuda_generic.c by gen_generic.py): each
 * packs its arguments into one u64 apiece, stream handles already turned
 * into the backend's, and calls here.  The worker checks every value again
 * (host-backend/session/generic.c) and the executor calls the real
 * function.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>

#include "client.h"
#include "cuda_surface.h"
#include "cuda_internal.h"
#include "pvgpu_generic.h"
#include "pvgpu_guest.h"
#include "pvgpu_proto.h"

static atomic_int captures;

int cu_captures_active(void)
{
	return atomic_load(&captures) > 0;
}

void cu_capture_begun(void)
{
	atomic_fetch_add(&captures, 1);
}

/*
 * Virtual memory management needs no current context in NVIDIA's driver
 * (XLA asks the allocation granularity on a thread that has none): these
 * go through the primary context of the device the allocation properties
 * name, else of device 0, without making it current.
 */
static int context_free(uint32_t id)
{
	switch (id) {
	case PVGPU_GENERIC_cuMemGetAllocationGranularity:
	case PVGPU_GENERIC_cuMemCreate:
	case PVGPU_GENERIC_cuMemRelease:
	case PVGPU_GENERIC_cuMemAddressReserve:
	case PVGPU_GENERIC_cuMemAddressFree:
	case PVGPU_GENERIC_cuMemMap:
	case PVGPU_GENERIC_cuMemUnmap:
	case PVGPU_GENERIC_cuMemSetAccess:
	case PVGPU_GENERIC_cuMemGetAccess:
	case PVGPU_GENERIC_cuMemRetainAllocationHandle:
	case PVGPU_GENERIC_cuMemGetAllocationPropertiesFromHandle:
		return 1;
	}
	return 0;
}

/* The operation's context: ctx, the current one, or for a context-free
 * call (prop: its allocation properties, if any) a primary context. */
static CUresult generic_begin(struct cu_op *op, uint32_t id, struct cu_ctx *ctx,
			      const void *in, uint32_t nin)
{
	struct cu_ctx *cur = cu_current();
	int dev = 0;

	if (ctx || (cur && cur->alive) || !context_free(id) || !cu.initialized)
		return ctx ? cu_op_begin(op, ctx) : cu_op_current(op);
	if ((id == PVGPU_GENERIC_cuMemGetAllocationGranularity ||
	     id == PVGPU_GENERIC_cuMemCreate) && nin >= sizeof(CUmemAllocationProp)) {
		const CUmemAllocationProp *prop = in;

		if (prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
		    prop->location.id >= 0 && prop->location.id < cu.ndevices)
			dev = prop->location.id;
	}
	if (dev >= cu.ndevices)
		return CUDA_ERROR_NO_DEVICE;
	return cu_op_begin(op, cu_primary(dev));
}

CUresult cu_generic_stream(CUstream s, int ptsz, struct cu_ctx **ctx,
			   uint64_t *remote)
{
	if (ptsz && !s)
		s = CU_STREAM_PER_THREAD;
	return cu_stream_resolve(s, ctx, remote);
}

CUresult cu_generic_call(uint32_t id, const char *name, int async,
			 struct cu_ctx *ctx, uint64_t *a, uint32_t n)
{
	struct cu_op op;
	CUresult r;
	int32_t st;

	if (n > 8)		/* ops.spec: args max=8 */
		return CUDA_ERROR_INVALID_VALUE;
	r = generic_begin(&op, id, ctx, NULL, 0);
	if (r)
		return r;
	if (async) {
		struct pvgpu_driver_call_async_req req = { .fn = id, .args_count = n };

		memcpy(req.args, a, n * sizeof(*a));
		st = pvgpu_call_driver_call_async(op.client, &req);
	} else {
		struct pvgpu_driver_call_req req = { .fn = id, .args_count = n };
		struct pvgpu_driver_call_rep rep = { 0 };

		memcpy(req.args, a, n * sizeof(*a));
		st = pvgpu_call_driver_call(op.client, &req, &rep);
		if (!st && rep.results_count == n)
			memcpy(a, rep.results, n * sizeof(*a));
		else if (!st)
			st = CUDA_ERROR_UNKNOWN;
	}
	cu_op_end(&op);
	r = cu_status(st);
	if (id == PVGPU_GENERIC_cuStreamBeginCapture_v2 && !r)
		atomic_fetch_add(&captures, 1);
	/* Over, even when the capture had been invalidated. */
	if (id == PVGPU_GENERIC_cuStreamEndCapture && r != CUDA_ERROR_INVALID_HANDLE &&
	    r != CUDA_ERROR_INVALID_VALUE && r != CUDA_ERROR_ILLEGAL_STATE &&
	    r != CUDA_ERROR_NOT_SUPPORTED && atomic_load(&captures) > 0)
		atomic_fetch_sub(&captures, 1);
	/* The backend's executor could not do it (the sim, an old driver). */
	if (r == CUDA_ERROR_NOT_SUPPORTED)
		pvgpu_cuda_unsupported(name);
	return r;
}

CUresult cu_generic_call_data(uint32_t id, const char *name, struct cu_ctx *ctx,
			      uint64_t *a, uint32_t n, const void *in,
			      uint32_t nin, void *out, uint32_t nout)
{
	struct pvgpu_driver_call_data_req req = { .fn = id, .args_count = n,
						  .input = in, .input_len = nin };
	struct pvgpu_driver_call_data_rep *rep;
	struct cu_op op;
	CUresult r;
	int32_t st;

	if (n > 8 || nin > sizeof(rep->output) || nout > sizeof(rep->output))
		return CUDA_ERROR_INVALID_VALUE;
	rep = calloc(1, sizeof(*rep));
	if (!rep)
		return CUDA_ERROR_OUT_OF_MEMORY;
	r = generic_begin(&op, id, ctx, in, nin);
	if (r) {
		free(rep);
		return r;
	}
	memcpy(req.args, a, n * sizeof(*a));
	st = pvgpu_call_driver_call_data(op.client, &req, rep);
	cu_op_end(&op);
	/* Exactly the results asked for, or none at all. */
	if (!st && (rep->results_count != n || rep->output_len != nout))
		st = CUDA_ERROR_UNKNOWN;
	if (!st) {
		memcpy(a, rep->results, n * sizeof(*a));
		if (nout)
			memcpy(out, rep->output, nout);
	}
	free(rep);
	r = cu_status(st);
	if (r == CUDA_ERROR_NOT_SUPPORTED)
		pvgpu_cuda_unsupported(name);
	return r;
}
