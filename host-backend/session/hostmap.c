/*
 * hostmap.c - mapped host memory (cuMemHostGetDevicePointer) for memory
 * inside the session's window.
 *
 * The guest's cuMemHostAlloc memory in the window is pinned by the worker
 * (window_register); the GPU reaches pinned memory at a device address of
 * its own, and a kernel given that address reads and writes the window's
 * bytes, which are the guest's.  Only a part the guest pinned can be
 * named, and the whole part becomes a device range of the session (for
 * the copy and memset checks), gone again when it is unpinned.
 */
#include "pvgpu_dispatch.h"
#include "worker.h"

#include <cuda.h>

int32_t pvgpu_handle_window_device_pointer(struct pvgpu_worker *w,
					   const struct pvgpu_window_device_pointer_req *req,
					   struct pvgpu_window_device_pointer_rep *rep)
{
	struct pvgpu_window *win = &w->win;
	struct pvgpu_window_pin *p = NULL;
	struct pvgpu_handle *ctx;
	int32_t st;

	if (!win->base)
		return CUDA_ERROR_NOT_SUPPORTED;	/* no window: nothing mapped */
	if (!w->cur_ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	for (unsigned int i = 0; i < win->npins; i++)
		if (req->offset >= win->pins[i].offset &&
		    req->offset - win->pins[i].offset < win->pins[i].size)
			p = &win->pins[i];
	if (!p || !p->ctx)
		return CUDA_ERROR_INVALID_VALUE;
	if (!p->dptr) {
		if (!w->ex_ops->host_device_pointer)
			return CUDA_ERROR_NOT_SUPPORTED;
		st = w->ex_ops->host_device_pointer(w->ex, win->base + p->offset, &p->dptr);
		if (st) {
			p->dptr = 0;
			return st;
		}
		ctx = pvgpu_handle_get(&w->handles, p->ctx, H_CTX);
		if (pvgpu_alloc_add(&w->allocs, &(struct pvgpu_alloc){
			.base = p->dptr, .size = p->size, .ctx = p->ctx,
			.module = PVGPU_ALLOC_HOSTMAP, .device = ctx ? ctx->device : 0 })) {
			p->dptr = 0;
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
	}
	rep->dptr = p->dptr + (req->offset - p->offset);
	return CUDA_SUCCESS;
}
