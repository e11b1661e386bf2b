/*
 * cuda_vmm.c - what of virtual memory management is written by hand; the
 * rest (cuMemCreate, cuMemMap ...) is forwarded by the generic call
 * (annotations.py ids 204-214, checked by host-backend/session/vmm.c).
 *
 * cuMemSetAccess takes an array of descriptors; the wire carries one
 * structure per argument, so each goes as a call of its own, in order,
 * as the driver would apply them.  A mapped range becomes device memory
 * of the program's here too (copies check their ranges in the guest
 * first), from cuMemMap to cuMemUnmap.
 */
#include <string.h>

#include "cuda_internal.h"	/* cuda.h, as the driver is built */
#include "cuda_surface.h"
#include "pvgpu_generic.h"
#include "pvgpu_guest.h"
#include "pvgpu_proto.h"

CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
				size_t count)
{
	CUresult r = CUDA_SUCCESS;

	if (!count || !desc)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < count && !r; i++) {
		uint64_t a[4] = { ptr, size, 1, 1 };

		r = cu_generic_call_data(PVGPU_GENERIC_cuMemSetAccess, "cuMemSetAccess", NULL,
					 a, 4, &desc[i], sizeof(desc[i]), NULL, 0);
	}
	return r;
}

CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
			  CUmemGenericAllocationHandle h, unsigned long long flags)
{
	uint64_t a[5] = { ptr, size, offset, (uint64_t)h, flags };
	struct cu_ctx *ctx = cu_current();
	CUresult r = cu_generic_call(PVGPU_GENERIC_cuMemMap, "cuMemMap", 0, NULL, a, 5);

	if (!r)
		cu_alloc_insert(&(struct cu_alloc){ .base = ptr, .size = size,
						    .device = ctx ? ctx->device : 0,
						    .mapped = 1 });
	return r;
}

CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	uint64_t a[2] = { ptr, size };
	CUresult r = cu_generic_call(PVGPU_GENERIC_cuMemUnmap, "cuMemUnmap", 0, NULL, a, 2);

	/* Every mapping in the range is gone (the worker checked they all lay
	 * inside it). */
	while (!r) {
		uint64_t base = 0;

		pthread_mutex_lock(&cu.table_lock);
		for (size_t i = 0; i < cu.nallocs && !base; i++)
			if (cu.allocs[i].base >= ptr && cu.allocs[i].base - ptr < size)
				base = cu.allocs[i].base;
		pthread_mutex_unlock(&cu.table_lock);
		if (!base)
			break;
		cu_alloc_remove(base);
	}
	return r;
}

/*
 * Shareable handles of physical memory, for processes of one VM: the
 * descriptor is the guest's own (cuda_ipc.c), holding the backend's token
 * (host-backend/session/ipc.c); only CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR.
 */
CUresult CUDAAPI cuMemExportToShareableHandle(void *shareable, CUmemGenericAllocationHandle h,
					      CUmemAllocationHandleType type,
					      unsigned long long flags)
{
	struct pvgpu_vmm_export_req req = { .handle = (uint64_t)h, .type = type };
	struct pvgpu_vmm_export_rep rep = { 0 };
	struct cu_op op;
	CUresult r;
	int fd;

	if (!shareable || flags)
		return CUDA_ERROR_INVALID_VALUE;
	if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return pvgpu_cuda_unsupported("cuMemExportToShareableHandle (handle types but POSIX file descriptors)");
	r = cu_op_device(&op, 0);
	if (r)
		return r;
	r = cu_status(pvgpu_call_vmm_export(op.client, &req, &rep));
	cu_op_end(&op);
	if (!r && rep.token_len != CU_SHAREABLE_TOKEN)
		r = CUDA_ERROR_UNKNOWN;
	if (r)
		return r;
	fd = cu_shareable_fd(CU_SHAREABLE_VMM, rep.token);
	if (fd < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*(int *)shareable = fd;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *h, void *os_handle,
						CUmemAllocationHandleType type)
{
	struct pvgpu_vmm_import_req req = { .type = type };
	struct pvgpu_vmm_import_rep rep = { 0 };
	uint8_t token[CU_SHAREABLE_TOKEN];
	struct cu_op op;
	CUresult r;

	if (!h)
		return CUDA_ERROR_INVALID_VALUE;
	if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return pvgpu_cuda_unsupported("cuMemImportFromShareableHandle (handle types but POSIX file descriptors)");
	r = cu_shareable_read((int)(intptr_t)os_handle, CU_SHAREABLE_VMM, token);
	if (r)
		return r;
	req.token = token;
	req.token_len = sizeof(token);
	r = cu_op_current(&op);
	if (r)
		return r;
	r = cu_status(pvgpu_call_vmm_import(op.client, &req, &rep));
	cu_op_end(&op);
	if (!r)
		*h = (CUmemGenericAllocationHandle)rep.handle;
	return r;
}
