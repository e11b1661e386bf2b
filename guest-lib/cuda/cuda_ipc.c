/*
 * cuda_ipc.c - CUDA IPC of device memory and events between processes of
 * one VM, over the backend (host-backend/session/ipc.c): a CUipcMemHandle
 * (CUipcEventHandle) here is a token the backend gave, never the driver's handle, and it opens only
 * in a session of the same VM.  An opened allocation is device memory of
 * this process (for the guest's range checks) until it is closed.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cuda_internal.h"	/* cuda.h, as the driver is built */
#include "pvgpu_guest.h"
#include "pvgpu_proto.h"

/* The backend's token, whole, into a handle's 64 bytes. */
static CUresult take_handle(CUresult r, const uint8_t *token, uint32_t len, char out[64])
{
	if (!r && len != 64)
		r = CUDA_ERROR_UNKNOWN;
	if (!r)
		memcpy(out, token, 64);
	return r;
}

CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle *handle, CUdeviceptr dptr)
{
	struct pvgpu_ipc_get_mem_handle_req req = { .dptr = dptr };
	struct pvgpu_ipc_get_mem_handle_rep rep = { 0 };
	struct cu_op op;
	CUresult r;

	if (!handle || !dptr)
		return CUDA_ERROR_INVALID_VALUE;
	r = cu_op_current(&op);
	if (r)
		return r;
	r = cu_status(pvgpu_call_ipc_get_mem_handle(op.client, &req, &rep));
	cu_op_end(&op);
	return take_handle(r, rep.handle, rep.handle_len, handle->reserved);
}

CUresult CUDAAPI cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle,
				       unsigned int flags)
{
	struct pvgpu_ipc_open_mem_handle_req req = {
		.handle = (const uint8_t *)handle.reserved,
		.handle_len = sizeof(handle.reserved), .flags = flags };
	struct pvgpu_ipc_open_mem_handle_rep rep = { 0 };
	struct cu_ctx *ctx = cu_current();
	struct cu_op op;
	CUresult r;

	if (!pdptr)
		return CUDA_ERROR_INVALID_VALUE;
	r = cu_op_current(&op);
	if (r)
		return r;
	r = cu_status(pvgpu_call_ipc_open_mem_handle(op.client, &req, &rep));
	cu_op_end(&op);
	if (r)
		return r;
	cu_alloc_add(rep.dptr, rep.size, ctx ? ctx->device : 0);
	*pdptr = rep.dptr;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle,
				    unsigned int flags)
{
	return cuIpcOpenMemHandle_v2(pdptr, handle, flags);
}

CUresult CUDAAPI cuIpcCloseMemHandle(CUdeviceptr dptr)
{
	struct pvgpu_ipc_close_mem_handle_req req = { .dptr = dptr };
	struct pvgpu_ipc_close_mem_handle_rep rep;
	struct cu_op op;
	CUresult r = cu_op_current(&op);

	if (r)
		return r;
	r = cu_status(pvgpu_call_ipc_close_mem_handle(op.client, &req, &rep));
	cu_op_end(&op);
	if (!r)
		cu_alloc_remove(dptr);
	return r;
}

/*
 * Events shared between processes of one VM: the handle is a token of the
 * backend's registry, as for memory.  The event must be this process's,
 * made with CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING (the driver
 * checks); the opened one is an event of the current context.
 */
CUresult CUDAAPI cuIpcGetEventHandle(CUipcEventHandle *handle, CUevent event)
{
	struct cu_event *ev = (struct cu_event *)event;
	struct pvgpu_ipc_get_event_handle_req req = { 0 };
	struct pvgpu_ipc_get_event_handle_rep rep = { 0 };
	struct cu_op op;
	CUresult r;

	if (!handle)
		return CUDA_ERROR_INVALID_VALUE;
	if (!ev || ev->magic != CU_MAGIC_EVENT || !ev->alive)
		return CUDA_ERROR_INVALID_HANDLE;
	req.event = ev->remote;
	r = cu_op_begin(&op, ev->ctx);
	if (r)
		return r;
	r = cu_status(pvgpu_call_ipc_get_event_handle(op.client, &req, &rep));
	cu_op_end(&op);
	return take_handle(r, rep.handle, rep.handle_len, handle->reserved);
}

CUresult CUDAAPI cuIpcOpenEventHandle(CUevent *phEvent, CUipcEventHandle handle)
{
	struct pvgpu_ipc_open_event_handle_req req = {
		.handle = (const uint8_t *)handle.reserved,
		.handle_len = sizeof(handle.reserved) };
	struct pvgpu_ipc_open_event_handle_rep rep = { 0 };
	struct cu_event *ev;
	struct cu_op op;
	CUresult r;

	if (!phEvent)
		return CUDA_ERROR_INVALID_VALUE;
	ev = calloc(1, sizeof(*ev));
	if (!ev)
		return CUDA_ERROR_OUT_OF_MEMORY;
	r = cu_op_current(&op);
	if (!r) {
		r = cu_status(pvgpu_call_ipc_open_event_handle(op.client, &req, &rep));
		cu_op_end(&op);
	}
	if (r) {
		free(ev);
		return r;
	}
	ev->magic = CU_MAGIC_EVENT;
	ev->alive = 1;
	ev->ctx = op.ctx;
	ev->remote = rep.event;
	ev->flags = CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING;
	*phEvent = (CUevent)ev;
	return CUDA_SUCCESS;
}

/*
 * Shareable handles (POSIX file descriptors) of VMM memory and memory
 * pools: a sealed memfd holding a header and the token, so the program can
 * pass it to another process (SCM_RIGHTS, fork) as it would the driver's.
 * Holding the descriptor grants nothing by itself: the backend honours
 * the token only for a session of the exporter's VM.
 */
#define SHAREABLE_MAGIC	"pvgpu-shareable"
struct shareable {
	char magic[16];
	uint32_t kind;
	uint32_t zero;
	uint8_t token[CU_SHAREABLE_TOKEN];
};

int cu_shareable_fd(uint32_t kind, const uint8_t token[CU_SHAREABLE_TOKEN])
{
	struct shareable s = { .kind = kind };
	int fd = memfd_create("pvgpu-shareable", MFD_CLOEXEC | MFD_ALLOW_SEALING);

	if (fd < 0)
		return -1;
	memcpy(s.magic, SHAREABLE_MAGIC, sizeof(SHAREABLE_MAGIC));
	memcpy(s.token, token, sizeof(s.token));
	if (pwrite(fd, &s, sizeof(s), 0) != (ssize_t)sizeof(s) ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK | F_SEAL_SEAL)) {
		close(fd);
		return -1;
	}
	return fd;
}

CUresult cu_shareable_read(int fd, uint32_t kind, uint8_t token[CU_SHAREABLE_TOKEN])
{
	struct shareable s;

	if (fd < 0 || pread(fd, &s, sizeof(s), 0) != (ssize_t)sizeof(s) ||
	    memcmp(s.magic, SHAREABLE_MAGIC, sizeof(SHAREABLE_MAGIC)) || s.kind != kind)
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(token, s.token, CU_SHAREABLE_TOKEN);
	return CUDA_SUCCESS;
}
