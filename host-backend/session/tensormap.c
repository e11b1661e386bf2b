/*
 * tensormap.c - TMA descriptors (ops.spec tensor_map_encode), backend side.
 *
 * The descriptor names device memory by its address; the kernel that gets
 * it reads and writes through it, as through a pointer.  So its base must
 * be the session's memory, like a pointer a kernel gets; the extent may run
 * past that allocation, as NVIDIA's driver allows, since each session is a
 * process of its own on the GPU (textures.c says the same).  Counts must
 * match the rank; values are the driver's to refuse.
 */
#include <cuda.h>
#include <string.h>

#include "pvgpu_dispatch.h"
#include "worker.h"

int32_t pvgpu_handle_tensor_map_encode(struct pvgpu_worker *w,
				       const struct pvgpu_tensor_map_encode_req *req,
				       struct pvgpu_tensor_map_encode_rep *rep)
{
	struct pvgpu_tensor_map m = { 0 };
	uint32_t r = req->rank, corners = r > 2 ? r - 2 : 0;
	int32_t st;

	if (!w->ex)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!pvgpu_handle_get(&w->handles, w->cur_ctx, H_CTX))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!w->ex_ops->tensor_map_encode)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (req->im2col > 1 || r < (req->im2col ? 3u : 1u) || r > 5 ||
	    req->dims_count != r || req->strides_count != r - 1 ||
	    req->elem_strides_count != r ||
	    req->box_count != (req->im2col ? 0 : r) ||
	    req->lower_count != (req->im2col ? corners : 0) ||
	    req->upper_count != (req->im2col ? corners : 0))
		return CUDA_ERROR_INVALID_VALUE;
	if (!pvgpu_alloc_range(&w->allocs, req->address, 1))
		return CUDA_ERROR_INVALID_VALUE;
	m.im2col = (int)req->im2col;
	m.dtype = req->dtype;
	m.rank = r;
	m.address = req->address;
	memcpy(m.dims, req->dims, r * sizeof(m.dims[0]));
	memcpy(m.strides, req->strides, (r - 1) * sizeof(m.strides[0]));
	memcpy(m.box, req->box, req->box_count * sizeof(m.box[0]));
	memcpy(m.lower, req->lower, req->lower_count * sizeof(m.lower[0]));
	memcpy(m.upper, req->upper, req->upper_count * sizeof(m.upper[0]));
	m.channels = req->channels;
	m.pixels = req->pixels;
	memcpy(m.elem_strides, req->elem_strides, r * sizeof(m.elem_strides[0]));
	m.interleave = req->interleave;
	m.swizzle = req->swizzle;
	m.l2 = req->l2;
	m.oob = req->oob;
	st = w->ex_ops->tensor_map_encode(w->ex, &m, rep->desc);
	if (!st)
		rep->desc_count = 16;
	return st;
}
