/*
 * link.c - JIT linking for a session (link_complete, link_fetch).
 *
 * The guest sends every input of a cuLinkCreate ... cuLinkComplete at once
 * with its JIT options; the executor links them in the session's current
 * context and the image waits in the handle table (H_LINK) until the
 * guest fetches it.  Options are untrusted: only those whose value is a
 * scalar pass, with log sizes bounded, and the log buffers are the
 * executor's own, never a guest address.
 */
#include <stdlib.h>
#include <string.h>

#include <cuda.h>

#include "log.h"
#include "pvgpu_dispatch.h"
#include "worker.h"

#define LINK_MAX_INPUT	(64ull << 20)	/* all inputs of one link */
#define LINK_MAX_HELD	8		/* images linked and not yet fetched */

/* A scalar-valued option the executor may pass on as it is. */
static int option_ok(uint32_t key)
{
	switch (key) {
	case CU_JIT_MAX_REGISTERS:
	case CU_JIT_THREADS_PER_BLOCK:
	case CU_JIT_WALL_TIME:
	case CU_JIT_INFO_LOG_BUFFER:		/* "wanted": ours is used */
	case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES:
	case CU_JIT_ERROR_LOG_BUFFER:
	case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES:
	case CU_JIT_OPTIMIZATION_LEVEL:
	case CU_JIT_TARGET_FROM_CUCONTEXT:
	case CU_JIT_TARGET:
	case CU_JIT_FALLBACK_STRATEGY:
	case CU_JIT_GENERATE_DEBUG_INFO:
	case CU_JIT_LOG_VERBOSE:
	case CU_JIT_GENERATE_LINE_INFO:
	case CU_JIT_CACHE_MODE:
	case CU_JIT_POSITION_INDEPENDENT_CODE:
	case CU_JIT_MIN_CTA_PER_SM:
	case CU_JIT_MAX_THREADS_PER_BLOCK:
	case CU_JIT_OVERRIDE_DIRECTIVE_VALUES:
	case CU_JIT_FAST_COMPILE:
	case CU_JIT_LTO:			/* the deprecated scalar flags */
	case CU_JIT_FTZ:
	case CU_JIT_PREC_DIV:
	case CU_JIT_PREC_SQRT:
	case CU_JIT_FMA:
	case CU_JIT_OPTIMIZE_UNUSED_DEVICE_VARIABLES:
	case CU_JIT_SPLIT_COMPILE:
		return 1;
	default:
		return 0;
	}
}

int pvgpu_link_options(struct pvgpu_link *l, const uint32_t *key, uint32_t nkey,
		       const uint64_t *value, uint32_t nvalue)
{
	if (nkey != nvalue || nkey > PVGPU_LINK_MAX_OPTS)
		return -1;
	for (uint32_t i = 0; i < nkey; i++)
		if (!option_ok(key[i]))
			return -1;
	if (!l)
		return 0;
	l->nopts = nkey;
	for (uint32_t i = 0; i < nkey; i++) {
		l->opt_key[i] = key[i];
		l->opt_value[i] = value[i];
		if ((key[i] == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES ||
		     key[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES) &&
		    l->opt_value[i] > PVGPU_LINK_LOG)
			l->opt_value[i] = PVGPU_LINK_LOG;
	}
	return 0;
}

static uint32_t held_links(struct pvgpu_worker *w)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < w->handles.n; i++)
		n += w->handles.v[i].kind == H_LINK;
	return n;
}

int32_t pvgpu_handle_link_complete(struct pvgpu_worker *w,
				   const struct pvgpu_link_complete_req *req,
				   struct pvgpu_link_complete_rep *rep)
{
	struct pvgpu_link *l = NULL;
	uint8_t *data = NULL;
	uint64_t total = 0;
	int32_t st = CUDA_SUCCESS;

	if (req->opt_key_count != req->opt_value_count ||
	    req->input_type_count != req->input_size_count || !req->input_type_count)
		st = CUDA_ERROR_INVALID_VALUE;
	for (uint32_t i = 0; !st && i < req->input_size_count; i++) {
		if (req->input_type[i] > CU_JIT_INPUT_LIBRARY || !req->input_size[i] ||
		    req->input_size[i] > LINK_MAX_INPUT - total)
			st = CUDA_ERROR_INVALID_VALUE;
		else
			total += req->input_size[i];
	}
	if (!st && total != req->size)
		st = CUDA_ERROR_INVALID_VALUE;
	if (!st && pvgpu_link_options(NULL, req->opt_key, req->opt_key_count,
				      req->opt_value, req->opt_value_count))
		st = CUDA_ERROR_INVALID_VALUE;
	if (st) {
		/* The inputs follow all the same: keep the stream in step. */
		pvgpu_copy_refuse_upto(w, req->size, LINK_MAX_INPUT);
		return st;
	}
	data = malloc(req->size);
	l = calloc(1, sizeof(*l));
	if (!data || !l) {
		pvgpu_copy_refuse_htod(w, req->size);
		st = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	if (pvgpu_worker_recv_data(w, data, req->size)) {
		st = CUDA_ERROR_INVALID_VALUE;	/* the session is over anyway */
		goto out;
	}
	if (!w->ex)
		st = CUDA_ERROR_NOT_INITIALIZED;
	else if (!w->cur_ctx)
		st = CUDA_ERROR_INVALID_CONTEXT;
	else if (!w->ex_ops->link)
		st = CUDA_ERROR_NOT_SUPPORTED;
	else if (held_links(w) >= LINK_MAX_HELD)
		st = CUDA_ERROR_OUT_OF_MEMORY;
	else
		st = pvgpu_room_for_handle(w);
	if (st)
		goto out;
	pvgpu_link_options(l, req->opt_key, req->opt_key_count, req->opt_value,
			   req->opt_value_count);
	l->ninputs = req->input_type_count;
	l->input_type = req->input_type;
	l->input_size = req->input_size;
	l->data = data;
	st = w->ex_ops->link(w->ex, l, NULL);
	PVGPU_LINK_RESULTS(rep, l);
	if (!st && (!l->image || !l->image_size || l->image_size > UINT32_MAX))
		st = CUDA_ERROR_INVALID_IMAGE;
	if (!st) {
		rep->link = pvgpu_handle_add(&w->handles, H_LINK, 0, w->cur_ctx, 0);
		if (!rep->link) {
			st = CUDA_ERROR_OUT_OF_MEMORY;
		} else {
			struct pvgpu_handle *h = pvgpu_handle_get(&w->handles, rep->link, H_LINK);

			h->data = l->image;
			h->ndata = (uint32_t)l->image_size;
			rep->image_size = l->image_size;
			l->image = NULL;
		}
	}
	free(l->image);
out:
	free(l);
	free(data);
	return st;
}

int32_t pvgpu_handle_link_fetch(struct pvgpu_worker *w,
				const struct pvgpu_link_fetch_req *req)
{
	struct pvgpu_handle *h = pvgpu_handle_get(&w->handles, req->link, H_LINK);
	uint32_t block = w->cfg->block ? w->cfg->block : 65536;

	if (!h || req->size != h->ndata)
		return CUDA_ERROR_INVALID_VALUE;
	for (uint64_t off = 0; off < req->size; off += block) {
		uint32_t len = req->size - off < block ? (uint32_t)(req->size - off) : block;

		if (pvgpu_worker_send_data(w, (uint8_t *)h->data + off, len))
			return 0;	/* the connection is gone */
	}
	pvgpu_handle_del(&w->handles, req->link);
	return CUDA_SUCCESS;
}
