/*
 * ipc.c - CUDA IPC of device memory and events between sessions of one
 * VM (cuIpcGetMemHandle, cuIpcOpenMemHandle, cuIpcCloseMemHandle,
 * cuIpcGetEventHandle, cuIpcOpenEventHandle; cuMemExportToShareableHandle
 * and cuMemImportFromShareableHandle of physical memory).
 *
 * The guest gets a token for an allocation of its own; the driver's handle
 * goes into the supervisor's registry (ipc_registry.c) with the VM and
 * session, and only a session of the same VM gets it back.  An opened
 * allocation is device memory of the opening session (copies may name
 * it) until it closes it.  The registry is the daemon's, and each VM may
 * hold only its own share of it (the policy's ipc_handles).
 */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>

#include <cuda.h>

#include "accounting.h"
#include "log.h"
#include "pvgpu_dispatch.h"
#include "pvgpu_generic.h"
#include "worker.h"

/*
 * The driver's handle into the registry, the guest's token out.  A bound
 * that refuses it is CUDA_ERROR_OUT_OF_MEMORY, as the driver says when it
 * has no room for one more export; the log says which bound, once per
 * session.
 */
static int32_t ipc_enter(struct pvgpu_worker *w, enum pvgpu_ipc_kind kind,
			 const uint8_t handle[64], uint64_t size,
			 uint8_t token[PVGPU_IPC_TOKEN])
{
	int rc = pvgpu_ipc_put(w->acct, w->slot, kind, handle, size, token);
	int vm = atomic_load(&w->slot->vm);

	if (!rc)
		return CUDA_SUCCESS;
	if (!w->ipc_refusal_said && rc == -EDQUOT && vm >= 0)
		log_info("IPC export refused: vm %s holds its %u (ipc_handles)",
			 w->acct->vms[vm].name,
			 atomic_load(&w->acct->vms[vm].ipc_max));
	else if (!w->ipc_refusal_said && rc == -ENOSPC)
		log_info("IPC export refused: all %d of the daemon's IPC entries are in use",
			 PVGPU_MAX_IPC);
	w->ipc_refusal_said = 1;
	return CUDA_ERROR_OUT_OF_MEMORY;
}

int32_t pvgpu_handle_ipc_get_mem_handle(struct pvgpu_worker *w,
					const struct pvgpu_ipc_get_mem_handle_req *req,
					struct pvgpu_ipc_get_mem_handle_rep *rep)
{
	struct pvgpu_alloc *a = pvgpu_alloc_find(&w->allocs, req->dptr);
	uint8_t handle[64];
	int32_t st;

	if (!w->cur_ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!a || a->module)
		return CUDA_ERROR_INVALID_VALUE;	/* only a cuMemAlloc of ours */
	if (!w->ex_ops->share_get)
		return CUDA_ERROR_NOT_SUPPORTED;
	st = w->ex_ops->share_get(w->ex, PVGPU_IPC_MEM, a->base, handle);
	if (st)
		return st;
	memset(rep->handle, 0, sizeof(rep->handle));
	st = ipc_enter(w, PVGPU_IPC_MEM, handle, a->size, rep->handle);
	if (st)
		return st;
	rep->handle_len = 64;
	return CUDA_SUCCESS;
}

int32_t pvgpu_handle_ipc_open_mem_handle(struct pvgpu_worker *w,
					 const struct pvgpu_ipc_open_mem_handle_req *req,
					 struct pvgpu_ipc_open_mem_handle_rep *rep)
{
	struct pvgpu_handle *ctx;
	uint8_t handle[64];
	uint64_t size = 0;
	int32_t st;

	if (!w->cur_ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (req->handle_len != 64)
		return CUDA_ERROR_INVALID_VALUE;
	if (pvgpu_ipc_get(w->acct, w->slot, PVGPU_IPC_MEM, req->handle, handle, &size)) {
		wlog_debug(w, "ipc_open_mem_handle: no handle of this VM's by that token");
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (!w->ex_ops->share_open)
		return CUDA_ERROR_NOT_SUPPORTED;
	st = w->ex_ops->share_open(w->ex, PVGPU_IPC_MEM, handle, req->flags,
				   &rep->dptr, NULL);
	if (st)
		return st;
	ctx = pvgpu_handle_get(&w->handles, w->cur_ctx, H_CTX);
	if (pvgpu_alloc_add(&w->allocs, &(struct pvgpu_alloc){
		.base = rep->dptr, .size = size, .ctx = w->cur_ctx,
		.module = PVGPU_ALLOC_IPC, .device = ctx ? ctx->device : 0 })) {
		w->ex_ops->ipc_close(w->ex, rep->dptr);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	rep->size = size;
	return CUDA_SUCCESS;
}

int32_t pvgpu_handle_ipc_close_mem_handle(struct pvgpu_worker *w,
					  const struct pvgpu_ipc_close_mem_handle_req *req)
{
	struct pvgpu_alloc *a = pvgpu_alloc_find(&w->allocs, req->dptr);
	int32_t st;

	if (!a || a->module != PVGPU_ALLOC_IPC)
		return CUDA_ERROR_INVALID_VALUE;
	st = w->ex_ops->ipc_close ? w->ex_ops->ipc_close(w->ex, req->dptr) :
				    CUDA_ERROR_NOT_SUPPORTED;
	if (!st)
		pvgpu_alloc_del(&w->allocs, a);
	return st;
}

int32_t pvgpu_handle_ipc_get_event_handle(struct pvgpu_worker *w,
					  const struct pvgpu_ipc_get_event_handle_req *req,
					  struct pvgpu_ipc_get_event_handle_rep *rep)
{
	struct pvgpu_handle *h = pvgpu_handle_get(&w->handles, req->event, H_EVENT);
	uint8_t handle[64];
	int32_t st;

	if (!w->ex)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!h)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!w->ex_ops->share_get)
		return CUDA_ERROR_NOT_SUPPORTED;
	st = w->ex_ops->share_get(w->ex, PVGPU_IPC_EVENT, h->exec_handle, handle);
	if (st)
		return st;
	memset(rep->handle, 0, sizeof(rep->handle));
	st = ipc_enter(w, PVGPU_IPC_EVENT, handle, 0, rep->handle);
	if (st)
		return st;
	rep->handle_len = 64;
	return CUDA_SUCCESS;
}

int32_t pvgpu_handle_ipc_open_event_handle(struct pvgpu_worker *w,
					   const struct pvgpu_ipc_open_event_handle_req *req,
					   struct pvgpu_ipc_open_event_handle_rep *rep)
{
	uint8_t handle[64];
	uint64_t size = 0, event = 0;
	int32_t st;

	if (!w->ex)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!w->cur_ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (req->handle_len != 64)
		return CUDA_ERROR_INVALID_VALUE;
	if (pvgpu_ipc_get(w->acct, w->slot, PVGPU_IPC_EVENT, req->handle, handle, &size)) {
		wlog_debug(w, "ipc_open_event_handle: no event of this VM's by that token");
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (!w->ex_ops->share_open)
		return CUDA_ERROR_NOT_SUPPORTED;
	st = pvgpu_room_for_handle(w);
	if (st)
		return st;
	st = w->ex_ops->share_open(w->ex, PVGPU_IPC_EVENT, handle, 0, &event, NULL);
	if (st)
		return st;
	/* In the table as the guest's id, or destroyed again. */
	rep->event = pvgpu_handle_add(&w->handles, H_EVENT, event, w->cur_ctx, 0);
	if (!rep->event) {
		pvgpu_exec_event_destroy(w->ex_ops, w->ex, event);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	return CUDA_SUCCESS;
}

int32_t pvgpu_handle_vmm_export(struct pvgpu_worker *w,
				const struct pvgpu_vmm_export_req *req,
				struct pvgpu_vmm_export_rep *rep)
{
	struct pvgpu_handle *h = pvgpu_handle_get(&w->handles, req->handle, H_MEM);
	uint8_t handle[64];
	int32_t st;

	if (!w->ex)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!h)
		return CUDA_ERROR_INVALID_VALUE;
	if (req->type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || !w->ex_ops->share_get)
		return CUDA_ERROR_NOT_SUPPORTED;
	st = w->ex_ops->share_get(w->ex, PVGPU_IPC_VMM, h->exec_handle, handle);
	if (st)
		return st;
	st = ipc_enter(w, PVGPU_IPC_VMM, handle, h->charged, rep->token);
	if (st)
		return st;
	rep->token_len = PVGPU_IPC_TOKEN;
	return CUDA_SUCCESS;
}

int32_t pvgpu_handle_vmm_import(struct pvgpu_worker *w,
				const struct pvgpu_vmm_import_req *req,
				struct pvgpu_vmm_import_rep *rep)
{
	struct pvgpu_handle *h, *ctx;
	uint64_t size = 0, mem = 0, got = 0;
	uint8_t handle[64];
	int32_t st;

	if (!w->ex)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!w->cur_ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (req->type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (req->token_len != PVGPU_IPC_TOKEN ||
	    pvgpu_ipc_get(w->acct, w->slot, PVGPU_IPC_VMM, req->token, handle, &size)) {
		wlog_debug(w, "vmm_import: no memory of this VM's by that token");
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (!w->ex_ops->share_open)
		return CUDA_ERROR_NOT_SUPPORTED;
	st = pvgpu_room_for_handle(w);
	if (st)
		return st;
	st = w->ex_ops->share_open(w->ex, PVGPU_IPC_VMM, handle, 0, &mem, &got);
	if (st)
		return st;
	ctx = pvgpu_handle_get(&w->handles, w->cur_ctx, H_CTX);
	rep->handle = pvgpu_handle_add(&w->handles, H_MEM, mem, w->cur_ctx,
				       ctx ? ctx->device : 0);
	h = rep->handle ? pvgpu_handle_get(&w->handles, rep->handle, H_MEM) : NULL;
	if (!h) {
		const struct pvgpu_generic_fn *rel = pvgpu_generic_find(PVGPU_GENERIC_cuMemRelease);
		uint64_t a[1] = { mem };

		if (rel && w->ex_ops->driver_call)
			w->ex_ops->driver_call(w->ex, rel, a);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	h->module = PVGPU_MEM_IMPORTED;
	h->charged = size;
	rep->size = size;
	return CUDA_SUCCESS;
}
