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
#include <stddef.h>
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

CUresult cu_generic_stream(CUstream s, int ptsz, struct cu_ctx **ctx,
			   uint64_t *remote)
{
	if (ptsz && !s)
		s = CU_STREAM_PER_THREAD;
	return cu_stream_resolve(s, ctx, remote);
}

/*
 * Virtual memory calls that NVIDIA's driver takes without a current
 * context (NVIDIA's memMapIPCDrv makes and releases its allocations after
 * destroying its contexts): without one they go through the device's
 * primary context on the backend (every context of a device is one there),
 * the device being the allocation properties' where they name one.
 */
static int ctxless(uint32_t id)
{
	switch (id) {
	case PVGPU_GENERIC_cuMemGetAllocationGranularity:
	case PVGPU_GENERIC_cuMemCreate:
	case PVGPU_GENERIC_cuMemRelease:
	case PVGPU_GENERIC_cuMemGetAllocationPropertiesFromHandle:
	/* XLA reserves and maps on threads with no context current too. */
	case PVGPU_GENERIC_cuMemAddressReserve:
	case PVGPU_GENERIC_cuMemAddressFree:
	case PVGPU_GENERIC_cuMemMap:
	case PVGPU_GENERIC_cuMemUnmap:
	case PVGPU_GENERIC_cuMemSetAccess:
	case PVGPU_GENERIC_cuMemGetAccess:
	case PVGPU_GENERIC_cuMemRetainAllocationHandle:
		return 1;
	default:
		return 0;
	}
}

CUresult cu_op_device(struct cu_op *op, int device)
{
	struct cu_ctx *cur = cu_current();

	if (cur && cur->alive)
		return cu_op_begin(op, cur);
	if (!cu.initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!cu.ndevices)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (device < 0 || device >= cu.ndevices)
		device = 0;
	return cu_op_begin(op, cu_primary(device));
}

static CUresult cu_op_ctxless(struct cu_op *op, uint32_t id, int device)
{
	return ctxless(id) ? cu_op_device(op, device) : cu_op_current(op);
}

int32_t cu_generic_op(struct cu_op *op, uint32_t id, uint64_t *a, uint32_t n)
{
	struct pvgpu_driver_call_req req = { .fn = id, .args_count = n };
	struct pvgpu_driver_call_rep rep = { 0 };
	int32_t st;

	if (n > 8)		/* ops.spec: args max=8 */
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(req.args, a, n * sizeof(*a));
	st = pvgpu_call_driver_call(op->client, &req, &rep);
	if (!st && rep.results_count == n)
		memcpy(a, rep.results, n * sizeof(*a));
	else if (!st)
		st = CUDA_ERROR_UNKNOWN;
	return st;
}

int32_t cu_generic_op_async(struct cu_op *op, uint32_t id, const uint64_t *a,
			    uint32_t n)
{
	struct pvgpu_driver_call_async_req req = { .fn = id, .args_count = n };

	if (n > 8)		/* ops.spec: args max=8 */
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(req.args, a, n * sizeof(*a));
	return pvgpu_call_driver_call_async(op->client, &req);
}

CUresult cu_generic_handle(uint32_t gh, const void *h, struct cu_ctx **ctx,
			   uint64_t *remote)
{
	struct cu_ctx *mine = NULL;
	struct cu_array *arr;
	CUresult r = CUDA_SUCCESS;

	switch (gh) {
	case PVGPU_GH_EVENT:
		r = cu_event_remote((CUevent)h, &mine, remote);
		break;
	case PVGPU_GH_FUNC:
		r = cu_func_remote((CUfunction)h, &mine, remote);
		break;
	case PVGPU_GH_MODULE:
		r = cu_module_remote((CUmodule)h, &mine, remote);
		break;
	case PVGPU_GH_ARRAY:
		arr = cu_array_get((CUarray)h);
		if (!arr)
			return CUDA_ERROR_INVALID_HANDLE;
		mine = arr->ctx;
		*remote = arr->remote;
		break;
	default:
		*remote = (uint64_t)(uintptr_t)h;
		break;
	}
	/* The call goes to the context its first argument names (a stream
	 * before an event it waits for, which may be another's). */
	if (!r && !*ctx)
		*ctx = mine;
	return r;
}

CUresult cu_generic_call(uint32_t id, const char *name, int async,
			 struct cu_ctx *ctx, uint64_t *a, uint32_t n)
{
	struct cu_op op;
	CUresult r;
	int32_t st;

	r = ctx ? cu_op_begin(&op, ctx) : cu_op_ctxless(&op, id, 0);
	if (r)
		return r;
	st = async ? cu_generic_op_async(&op, id, a, n) : cu_generic_op(&op, id, a, n);
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
	int dev = 0;
	CUresult r;
	int32_t st;

	if (n > 8 || nin > sizeof(rep->output) || nout > sizeof(rep->output))
		return CUDA_ERROR_INVALID_VALUE;
	rep = calloc(1, sizeof(*rep));
	if (!rep)
		return CUDA_ERROR_OUT_OF_MEMORY;
	/* A CUmemAllocationProp (granularity, create) names its device in
	 * location.id; an access descriptor's location is the device given
	 * access, not the one asked. */
	if (!ctx && (id == PVGPU_GENERIC_cuMemGetAllocationGranularity ||
		     id == PVGPU_GENERIC_cuMemCreate) &&
	    nin >= offsetof(CUmemAllocationProp, location) + sizeof(CUmemLocation))
		memcpy(&dev, (const uint8_t *)in + offsetof(CUmemAllocationProp, location.id),
		       sizeof(dev));
	r = ctx ? cu_op_begin(&op, ctx) : cu_op_ctxless(&op, id, dev);
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
