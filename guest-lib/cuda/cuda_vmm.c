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
#include "pvgpu_generic.h"

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
		cu_alloc_add(ptr, size, ctx ? ctx->device : 0);
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
