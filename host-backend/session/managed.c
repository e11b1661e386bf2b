/*
 * managed.c - managed memory (cuMemAllocManaged) inside the session's
 * window.
 *
 * Where the worker maps the window at the guest program's own address
 * (window_attach's guest_base, window.c), a part of it pinned and mapped
 * for the GPU is memory that the guest's CPU, this worker and the GPU all
 * reach at one address: the guest writes it, a kernel given the guest's
 * pointer reads and writes the same bytes, and the guest reads them after
 * a synchronize, as with the driver's managed memory.  It lives in host
 * memory and never migrates: prefetches and advice are hints the guest
 * accepts (guest-lib/cuda/cuda_managed.c).
 *
 * The guest names only an offset and a size; both are checked against the
 * window (pvgpu_window_pin), and the GPU's address for the part must be
 * its host address (CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM, as on Hopper),
 * or the allocation is refused.  Its bytes count against the VM's memory
 * quota like a cuMemAlloc, until window_unregister or the context's end.
 */
#include <cuda.h>
#include <stdatomic.h>

#include "accounting.h"
#include "handles.h"
#include "log.h"
#include "pvgpu_dispatch.h"
#include "worker.h"

/* The executor's say on whether registered memory keeps its address. */
static int32_t host_pointer_usable(struct pvgpu_worker *w, int32_t device)
{
	int32_t v = 0;

	if (!w->ex_ops->device_attribute ||
	    w->ex_ops->device_attribute(w->ex, device,
					CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM,
					&v) || !v) {
		wlog_debug(w, "managed_alloc: device %d cannot use host pointers for registered memory: not supported",
			   device);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	return CUDA_SUCCESS;
}

int32_t pvgpu_window_pin_same(struct pvgpu_worker *w, struct pvgpu_window_pin *pin,
			      uint64_t kind, int32_t device)
{
	uint8_t *p = w->win.base + pin->offset;
	uint64_t dptr = 0, host = (uint64_t)(uintptr_t)p;
	int32_t st;

	if (!w->win.same_address || !w->ex_ops->host_device_pointer)
		return CUDA_ERROR_NOT_SUPPORTED;
	st = w->ex_ops->host_device_pointer(w->ex, p, &dptr);
	if (st)
		return st;
	if (dptr != host) {
		wlog_debug(w, "window: the device's address 0x%llx for registered memory at 0x%llx differs: not supported",
			   (unsigned long long)dptr, (unsigned long long)host);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	if (pvgpu_alloc_add(&w->allocs, &(struct pvgpu_alloc){
		.base = host, .size = pin->size, .ctx = pin->ctx,
		.module = kind, .device = device }))
		return CUDA_ERROR_OUT_OF_MEMORY;
	pin->dptr = host;
	return CUDA_SUCCESS;
}

int32_t pvgpu_handle_managed_alloc(struct pvgpu_worker *w,
				   const struct pvgpu_managed_alloc_req *req,
				   struct pvgpu_managed_alloc_rep *rep)
{
	struct pvgpu_window *win = &w->win;
	struct pvgpu_window_pin *pin;
	struct pvgpu_handle *ctx;
	int32_t st;

	if (!win->base || !win->same_address) {
		wlog_debug(w, "managed_alloc: %s: not supported",
			   win->base ? "the window is not at the guest's address here" :
				       "no shared window");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	if (!w->cur_ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (req->flags != CU_MEM_ATTACH_GLOBAL && req->flags != CU_MEM_ATTACH_HOST)
		return CUDA_ERROR_INVALID_VALUE;
	ctx = pvgpu_handle_get(&w->handles, w->cur_ctx, H_CTX);
	if (!ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	st = host_pointer_usable(w, ctx->device);
	if (st)
		return st;
	if (pvgpu_accounting_charge(w->acct, w->slot, req->size)) {
		wlog_debug(w, "managed_alloc of %llu bytes: over the quota of vm %s",
			   (unsigned long long)req->size,
			   w->acct->vms[atomic_load(&w->slot->vm)].name);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	st = pvgpu_window_pin(w, req->offset, req->size, &pin);
	if (st)
		goto err_uncharge;
	st = pvgpu_window_pin_same(w, pin, PVGPU_ALLOC_MANAGED, ctx->device);
	if (st)
		goto err_unpin;
	pin->managed = 1;
	pvgpu_accounting_commit(w->slot, ctx->device, req->size);
	rep->dptr = pin->dptr;
	return CUDA_SUCCESS;

err_unpin:
	w->ex_ops->host_release(w->ex, win->base + req->offset, true);
	*pin = win->pins[--win->npins];
err_uncharge:
	pvgpu_accounting_uncharge(w->slot, req->size);
	return st;
}
