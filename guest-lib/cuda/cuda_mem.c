/*
 * cuda_mem.c - memory: device allocations (tracked in the guest, so
 * unified copies and pointer attributes know a pointer's kind), pinned
 * host memory (inside the connection's shared window where it has one),
 * copies in every direction, and memsets.
 */
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "cuda_surface.h"
#include "guest_window.h"
#include "pvgpu_guest.h"

#define STAGED_MIN	(64u * 1024)

/* ---- tracking ----------------------------------------------------------- */

void cu_alloc_add(uint64_t base, uint64_t size, int device)
{
	size_t i;

	pthread_mutex_lock(&cu.table_lock);
	if (cu.nallocs == cu.allocs_cap) {
		size_t cap = cu.allocs_cap ? cu.allocs_cap * 2 : 64;
		struct cu_alloc *a = realloc(cu.allocs, cap * sizeof(*a));

		if (!a) {
			pthread_mutex_unlock(&cu.table_lock);
			return;
		}
		cu.allocs = a;
		cu.allocs_cap = cap;
	}
	for (i = cu.nallocs; i > 0 && cu.allocs[i - 1].base > base; i--)
		cu.allocs[i] = cu.allocs[i - 1];
	cu.allocs[i] = (struct cu_alloc){ base, size, device };
	cu.nallocs++;
	pthread_mutex_unlock(&cu.table_lock);
}

int cu_alloc_remove(uint64_t base)
{
	int found = 0;

	pthread_mutex_lock(&cu.table_lock);
	for (size_t i = 0; i < cu.nallocs; i++)
		if (cu.allocs[i].base == base) {
			memmove(&cu.allocs[i], &cu.allocs[i + 1],
				(cu.nallocs - i - 1) * sizeof(cu.allocs[0]));
			cu.nallocs--;
			found = 1;
			break;
		}
	pthread_mutex_unlock(&cu.table_lock);
	return found;
}

/* The allocation holding ptr (interior pointers too). */
int cu_alloc_find(uint64_t ptr, struct cu_alloc *out)
{
	size_t lo = 0, hi;
	int found = 0;

	pthread_mutex_lock(&cu.table_lock);
	hi = cu.nallocs;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (cu.allocs[mid].base <= ptr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo > 0) {
		const struct cu_alloc *a = &cu.allocs[lo - 1];

		if (ptr - a->base < a->size || (ptr == a->base)) {
			*out = *a;
			found = 1;
		}
	}
	pthread_mutex_unlock(&cu.table_lock);
	return found;
}

int cu_host_find(const void *ptr, struct cu_host *out)
{
	const uint8_t *p = ptr;
	int found = 0;

	pthread_mutex_lock(&cu.table_lock);
	for (size_t i = 0; i < cu.nhosts; i++) {
		const uint8_t *b = cu.hosts[i].ptr;

		if (p >= b && (size_t)(p - b) < cu.hosts[i].size) {
			*out = cu.hosts[i];
			found = 1;
			break;
		}
	}
	pthread_mutex_unlock(&cu.table_lock);
	return found;
}

static int host_add(const struct cu_host *h)
{
	pthread_mutex_lock(&cu.table_lock);
	if (cu.nhosts == cu.hosts_cap) {
		size_t cap = cu.hosts_cap ? cu.hosts_cap * 2 : 16;
		struct cu_host *n = realloc(cu.hosts, cap * sizeof(*n));

		if (!n) {
			pthread_mutex_unlock(&cu.table_lock);
			return -1;
		}
		cu.hosts = n;
		cu.hosts_cap = cap;
	}
	cu.hosts[cu.nhosts++] = *h;
	pthread_mutex_unlock(&cu.table_lock);
	return 0;
}

static int host_remove(const void *ptr, struct cu_host *out)
{
	int found = 0;

	pthread_mutex_lock(&cu.table_lock);
	for (size_t i = 0; i < cu.nhosts; i++)
		if (cu.hosts[i].ptr == ptr) {
			*out = cu.hosts[i];
			cu.hosts[i] = cu.hosts[--cu.nhosts];
			found = 1;
			break;
		}
	pthread_mutex_unlock(&cu.table_lock);
	return found;
}

/*
 * A device range must lie inside the allocation it starts in (interior
 * pointers are fine).  Pointers pvgpu does not know pass: the backend
 * checks them against what it allocated.
 */
static int range_ok(uint64_t ptr, size_t n)
{
	struct cu_alloc a;

	if (!cu_alloc_find(ptr, &a))
		return 1;
	return n <= a.size - (ptr - a.base);
}

/* ---- device memory -------------------------------------------------------- */

CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	struct pvgpu_mem_alloc_req req = { .size = bytesize };
	struct pvgpu_mem_alloc_rep rep = { 0 };
	struct cu_op op;
	CUresult r;

	if (!dptr || !bytesize)
		return CUDA_ERROR_INVALID_VALUE;
	r = cu_op_current(&op);
	if (r)
		return r;
	r = cu_status(pvgpu_call_mem_alloc(op.client, &req, &rep));
	cu_op_end(&op);
	if (r)
		return r;
	cu_alloc_add(rep.dptr, bytesize, op.ctx->device);
	*dptr = (CUdeviceptr)rep.dptr;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr)
{
	struct pvgpu_mem_free_req req = { .dptr = dptr };
	struct pvgpu_mem_free_rep rep;
	struct cu_alloc a;
	struct cu_op op;
	CUresult r;

	if (!dptr)
		return CUDA_SUCCESS;
	if (!cu_alloc_find(dptr, &a) || a.base != dptr)
		return CUDA_ERROR_INVALID_VALUE;
	r = cu_op_begin(&op, cu_current() && cu_current()->device == a.device ?
			cu_current() : cu_primary(a.device));
	if (r)
		return r;
	r = cu_status(pvgpu_call_mem_free(op.client, &req, &rep));
	cu_op_end(&op);
	if (!r)
		cu_alloc_remove(dptr);
	return r;
}

CUresult CUDAAPI cuMemGetInfo_v2(size_t *free_, size_t *total)
{
	struct pvgpu_mem_get_info_req req;
	struct pvgpu_mem_get_info_rep rep = { 0 };
	struct cu_op op;
	CUresult r;

	if (!free_ || !total)
		return CUDA_ERROR_INVALID_VALUE;
	r = cu_op_current(&op);
	if (r)
		return r;
	r = cu_status(pvgpu_call_mem_get_info(op.client, &req, &rep));
	cu_op_end(&op);
	if (!r) {
		*free_ = rep.free;
		*total = rep.total;
	}
	return r;
}

CUresult CUDAAPI cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
	struct cu_alloc a;

	if (!cu_alloc_find(dptr, &a))
		return CUDA_ERROR_NOT_FOUND;
	if (pbase)
		*pbase = a.base;
	if (psize)
		*psize = a.size;
	return CUDA_SUCCESS;
}

/* ---- host memory ------------------------------------------------------ */

CUresult CUDAAPI cuMemHostAlloc(void **pp, size_t bytesize, unsigned int flags)
{
	struct cu_ctx *ctx = cu_current();
	struct cu_host h = { .size = bytesize, .flags = flags };
	struct pvgpu_client *c;

	if (!pp || !bytesize)
		return CUDA_ERROR_INVALID_VALUE;
	if (!ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	c = cu.devices[ctx->device].be->client;
	h.win = c ? pvgpu_client_window(c) : NULL;
	if (h.win) {
		h.ptr = pvgpu_window_alloc(h.win, bytesize);
		if (h.ptr) {
			struct pvgpu_window_register_req req;
			struct pvgpu_window_register_rep rep;
			uint64_t off;
			struct cu_op op;

			pvgpu_window_holds(h.win, h.ptr, bytesize, &off);
			req.offset = off;
			/* The window's allocations are whole pages; so are pins. */
			req.size = (bytesize + 4095) & ~(uint64_t)4095;
			if (!cu_op_begin(&op, ctx)) {
				pvgpu_call_window_register(op.client, &req, &rep);
				cu_op_end(&op);
			}
			h.client = c;
		} else {
			h.win = NULL;
		}
	}
	if (!h.ptr) {
		h.ptr = aligned_alloc(4096, (bytesize + 4095) & ~(size_t)4095);
		if (!h.ptr)
			return CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (host_add(&h)) {
		if (h.win)
			pvgpu_window_free(h.win, h.ptr);
		else
			free(h.ptr);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*pp = h.ptr;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAllocHost_v2(void **pp, size_t bytesize)
{
	return cuMemHostAlloc(pp, bytesize, 0);
}

static void unmap_host(void *p);

CUresult CUDAAPI cuMemFreeHost(void *p)
{
	struct cu_host h;

	if (!p || !host_remove(p, &h) || h.registered)
		return CUDA_ERROR_INVALID_VALUE;
	if (h.win) {
		struct pvgpu_window_unregister_req req;
		struct pvgpu_window_unregister_rep rep;
		uint64_t off;

		if (pvgpu_window_holds(h.win, h.ptr, h.size, &off)) {
			req.offset = off;
			for (int i = 0; i < cu.ndevices; i++)
				if (cu.devices[i].be->client == h.client) {
					pthread_mutex_lock(&cu.devices[i].be->lock);
					pvgpu_call_window_unregister(h.client, &req, &rep);
					pthread_mutex_unlock(&cu.devices[i].be->lock);
					break;
				}
		}
		unmap_host(h.ptr);
		pvgpu_window_free(h.win, h.ptr);
	} else {
		free(h.ptr);
	}
	return CUDA_SUCCESS;
}

/* Registered memory is remembered (pointer attributes); copies stay pageable. */
CUresult CUDAAPI cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int flags)
{
	struct cu_host h = { .ptr = p, .size = bytesize, .flags = flags, .registered = 1 };
	struct cu_host old;

	if (!p || !bytesize)
		return CUDA_ERROR_INVALID_VALUE;
	if (cu_host_find(p, &old))
		return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
	return host_add(&h) ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemHostRegister(void *p, size_t bytesize, unsigned int flags)
{
	return cuMemHostRegister_v2(p, bytesize, flags);
}

CUresult CUDAAPI cuMemHostUnregister(void *p)
{
	struct cu_host h;

	if (!cu_host_find(p, &h) || !h.registered || h.ptr != p)
		return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
	host_remove(p, &h);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemHostGetFlags(unsigned int *flags, void *p)
{
	struct cu_host h;

	if (!flags)
		return CUDA_ERROR_INVALID_VALUE;
	if (!cu_host_find(p, &h))
		return CUDA_ERROR_INVALID_VALUE;
	*flags = h.flags;
	return CUDA_SUCCESS;
}

/* Window memory a kernel may reach (cuMemHostGetDevicePointer): its host
 * address and device range, under cu.table_lock. */
#define MAX_MAPPED 256
static struct mapped_host {
	void *host;
	uint64_t dptr, size;
} mapped[MAX_MAPPED];
static size_t nmapped;

/* Does dptr lie in mapped window memory? */
static int mapped_host_range(uint64_t dptr)
{
	int found = 0;

	pthread_mutex_lock(&cu.table_lock);
	for (size_t i = 0; i < nmapped && !found; i++)
		found = dptr - mapped[i].dptr < mapped[i].size;
	pthread_mutex_unlock(&cu.table_lock);
	return found;
}

CUresult CUDAAPI cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int flags)
{
	struct pvgpu_window_device_pointer_req req;
	struct pvgpu_window_device_pointer_rep rep = { 0 };
	struct cu_ctx *ctx = cu_current();
	struct cu_alloc a;
	struct cu_host h;
	struct cu_op op;
	uint64_t off;
	CUresult r;

	if (!pdptr || !p || flags)
		return CUDA_ERROR_INVALID_VALUE;
	if (!ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!cu_host_find(p, &h))
		return CUDA_ERROR_INVALID_VALUE;
	/* Only memory in a shared window can be the GPU's as well: host
	 * memory of the guest's own, or over a socket, cannot. */
	if (!h.win || h.registered || !pvgpu_window_holds(h.win, p, 1, &off))
		return pvgpu_cuda_unsupported("cuMemHostGetDevicePointer_v2 (memory outside a shared window)");
	req.offset = off;
	r = cu_op_begin(&op, ctx);
	if (r)
		return r;
	r = cu_status(pvgpu_call_window_device_pointer(op.client, &req, &rep));
	cu_op_end(&op);
	if (r)
		return r;
	/* The whole allocation is now a device range of ours (range_ok),
	 * until cuMemFreeHost. */
	if (!cu_alloc_find(rep.dptr, &a)) {
		uint64_t base_off, base;

		pvgpu_window_holds(h.win, h.ptr, h.size, &base_off);
		base = rep.dptr - (off - base_off);
		pthread_mutex_lock(&cu.table_lock);
		if (nmapped < MAX_MAPPED)
			mapped[nmapped++] = (struct mapped_host){ h.ptr, base, h.size };
		pthread_mutex_unlock(&cu.table_lock);
		cu_alloc_add(base, (h.size + 4095) & ~(uint64_t)4095, ctx->device);
	}
	*pdptr = rep.dptr;
	return CUDA_SUCCESS;
}

/* Forget the device range of window memory being freed. */
static void unmap_host(void *p)
{
	uint64_t dptr = 0;

	pthread_mutex_lock(&cu.table_lock);
	for (size_t i = 0; i < nmapped; i++)
		if (mapped[i].host == p) {
			dptr = mapped[i].dptr;
			mapped[i] = mapped[--nmapped];
			break;
		}
	pthread_mutex_unlock(&cu.table_lock);
	if (dptr)
		cu_alloc_remove(dptr);
}

/* ---- copies ------------------------------------------------------------- */

/* The stream and the context it runs in; NULL: the current context's. */
static CUresult begin_on(struct cu_op *op, CUstream s, uint64_t *remote)
{
	struct cu_ctx *ctx;
	CUresult r = cu_stream_resolve(s, &ctx, remote);

	if (r)
		return r;
	return cu_op_begin(op, ctx);
}

static CUresult htod(CUdeviceptr dst, const void *src, size_t n, CUstream s, int async)
{
	struct pvgpu_window_map *win;
	uint64_t stream, off;
	struct cu_op op;
	int32_t st;
	CUresult r;

	if (!n)
		return CUDA_SUCCESS;
	if (!src || !dst || !range_ok(dst, n))
		return CUDA_ERROR_INVALID_VALUE;
	r = begin_on(&op, s, &stream);
	if (r)
		return r;
	win = pvgpu_client_window(op.client);
	if (win && pvgpu_window_holds(win, src, n, &off)) {
		struct pvgpu_memcpy_htod_window_req req = { dst, off, n, stream };
		struct pvgpu_memcpy_htod_window_async_req areq = { dst, off, n, stream };
		struct pvgpu_memcpy_htod_window_rep rep;

		st = async ? pvgpu_call_memcpy_htod_window_async(op.client, &areq) :
			     pvgpu_call_memcpy_htod_window(op.client, &req, &rep);
	} else if (win && n >= STAGED_MIN) {
		struct pvgpu_memcpy_htod_staged_req req = { dst, n, stream };
		uint8_t q[PVGPU_MEMCPY_HTOD_STAGED_REQ_MAX];
		long qn = pvgpu_memcpy_htod_staged_req_encode(q, &req);

		st = pvgpu_client_call_staged(op.client, PVGPU_OP_MEMCPY_HTOD_STAGED,
					      q, (size_t)qn, src, NULL, n);
	} else if (async) {
		struct pvgpu_memcpy_htod_async_req req = { dst, n, stream };

		st = pvgpu_call_memcpy_htod_async(op.client, &req, src);
	} else {
		struct pvgpu_memcpy_htod_req req = { dst, n, stream };
		struct pvgpu_memcpy_htod_rep rep;

		st = pvgpu_call_memcpy_htod(op.client, &req, &rep, src);
	}
	cu_op_end(&op);
	return cu_status(st);
}

static CUresult dtoh(void *dst, CUdeviceptr src, size_t n, CUstream s, int async)
{
	struct pvgpu_window_map *win;
	uint64_t stream, off;
	struct cu_op op;
	int32_t st;
	CUresult r;

	if (!n)
		return CUDA_SUCCESS;
	if (!src || !dst || !range_ok(src, n))
		return CUDA_ERROR_INVALID_VALUE;
	r = begin_on(&op, s, &stream);
	if (r)
		return r;
	win = pvgpu_client_window(op.client);
	if (win && pvgpu_window_holds(win, dst, n, &off)) {
		struct pvgpu_memcpy_dtoh_window_req req = { src, off, n, stream };
		struct pvgpu_memcpy_dtoh_window_async_req areq = { src, off, n, stream };
		struct pvgpu_memcpy_dtoh_window_rep rep;

		st = async ? pvgpu_call_memcpy_dtoh_window_async(op.client, &areq) :
			     pvgpu_call_memcpy_dtoh_window(op.client, &req, &rep);
	} else if (win && n >= STAGED_MIN) {
		struct pvgpu_memcpy_dtoh_staged_req req = { src, n, stream };
		uint8_t q[PVGPU_MEMCPY_DTOH_STAGED_REQ_MAX];
		long qn = pvgpu_memcpy_dtoh_staged_req_encode(q, &req);

		st = pvgpu_client_call_staged(op.client, PVGPU_OP_MEMCPY_DTOH_STAGED,
					      q, (size_t)qn, NULL, dst, n);
	} else {
		/* Into pageable memory even an async copy completes first. */
		struct pvgpu_memcpy_dtoh_req req = { src, n, stream };
		struct pvgpu_memcpy_dtoh_rep rep;

		st = pvgpu_call_memcpy_dtoh(op.client, &req, &rep, dst);
	}
	cu_op_end(&op);
	return cu_status(st);
}

static CUresult dtod(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
	struct pvgpu_memcpy_dtod_async_req req = { dst, src, n, 0 };
	struct cu_op op;
	CUresult r;

	if (!n)
		return CUDA_SUCCESS;
	if (!src || !dst || !range_ok(src, n) || !range_ok(dst, n))
		return CUDA_ERROR_INVALID_VALUE;
	r = begin_on(&op, s, &req.stream);
	if (r)
		return r;
	r = cu_status(pvgpu_call_memcpy_dtod_async(op.client, &req));
	cu_op_end(&op);
	return r;
}

/* cuMemcpy / cuMemcpyAsync: the direction from what the pointers are. */
static CUresult unified(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s, int async)
{
	struct cu_alloc a;
	int ddev = cu_alloc_find(dst, &a), sdev = cu_alloc_find(src, &a);

	if (!n)
		return CUDA_SUCCESS;
	if (ddev && sdev)
		return dtod(dst, src, n, s);
	if (ddev)
		return htod(dst, (const void *)(uintptr_t)src, n, s, async);
	if (sdev)
		return dtoh((void *)(uintptr_t)dst, src, n, s, async);
	memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	CUresult r = unified(dst, src, n, NULL, 0);

	return r ? r : CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	return unified(dst, src, n, CU_STREAM_PER_THREAD, 0);
}

CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
	return unified(dst, src, n, s, 1);
}

CUresult CUDAAPI cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
	return unified(dst, src, n, s ? s : CU_STREAM_PER_THREAD, 1);
}

CUresult CUDAAPI cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n)
{
	return htod(dst, src, n, NULL, 0);
}

CUresult CUDAAPI cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void *src, size_t n)
{
	return htod(dst, src, n, CU_STREAM_PER_THREAD, 0);
}

CUresult CUDAAPI cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n)
{
	return dtoh(dst, src, n, NULL, 0);
}

CUresult CUDAAPI cuMemcpyDtoH_v2_ptds(void *dst, CUdeviceptr src, size_t n)
{
	return dtoh(dst, src, n, CU_STREAM_PER_THREAD, 0);
}

CUresult CUDAAPI cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	return dtod(dst, src, n, NULL);
}

CUresult CUDAAPI cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	return dtod(dst, src, n, CU_STREAM_PER_THREAD);
}

CUresult CUDAAPI cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
	return htod(dst, src, n, s, 1);
}

CUresult CUDAAPI cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
	return htod(dst, src, n, s ? s : CU_STREAM_PER_THREAD, 1);
}

CUresult CUDAAPI cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
	return dtoh(dst, src, n, s, 1);
}

CUresult CUDAAPI cuMemcpyDtoHAsync_v2_ptsz(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
	return dtoh(dst, src, n, s ? s : CU_STREAM_PER_THREAD, 1);
}

CUresult CUDAAPI cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
	return dtod(dst, src, n, s);
}

CUresult CUDAAPI cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s)
{
	return dtod(dst, src, n, s ? s : CU_STREAM_PER_THREAD);
}

/* ---- memset --------------------------------------------------------------- */

static CUresult memset_any(CUdeviceptr dst, uint32_t value, uint32_t elem,
			   size_t count, CUstream s, int sync)
{
	struct pvgpu_memset_async_req req = {
		.dst = dst, .value = value, .elem_size = elem, .count = count,
	};
	struct cu_op op;
	CUresult r;

	if (!count)
		return CUDA_SUCCESS;
	if (!dst || count > UINT64_MAX / elem || !range_ok(dst, count * elem))
		return CUDA_ERROR_INVALID_VALUE;
	r = begin_on(&op, s, &req.stream);
	if (r)
		return r;
	r = cu_status(pvgpu_call_memset_async(op.client, &req));
	if (!r && sync && mapped_host_range(dst)) {
		/* Synchronous for pinned host memory: the program reads it next. */
		struct pvgpu_ctx_synchronize_req sq;
		struct pvgpu_ctx_synchronize_rep sp;

		r = cu_status(pvgpu_call_ctx_synchronize(op.client, &sq, &sp));
	} else if (!r && sync) {
		/* cuMemsetD* are synchronous for pageable... keep order only. */
		r = cu_status(pvgpu_client_flush(op.client));
	}
	cu_op_end(&op);
	return r;
}

#define MEMSET_FNS(N, T, V)								\
CUresult CUDAAPI cuMemsetD##N##_v2(CUdeviceptr d, T v, size_t n)			\
{ return memset_any(d, V, N / 8, n, NULL, 1); }						\
CUresult CUDAAPI cuMemsetD##N##_v2_ptds(CUdeviceptr d, T v, size_t n)			\
{ return memset_any(d, V, N / 8, n, CU_STREAM_PER_THREAD, 1); }				\
CUresult CUDAAPI cuMemsetD##N##Async(CUdeviceptr d, T v, size_t n, CUstream s)		\
{ return memset_any(d, V, N / 8, n, s, 0); }						\
CUresult CUDAAPI cuMemsetD##N##Async_ptsz(CUdeviceptr d, T v, size_t n, CUstream s)	\
{ return memset_any(d, V, N / 8, n, s ? s : CU_STREAM_PER_THREAD, 0); }

MEMSET_FNS(8, unsigned char, v)
MEMSET_FNS(16, unsigned short, v)
MEMSET_FNS(32, unsigned int, v)

/* ---- pointer attributes: answered in the guest -------------------------- */

static CUresult ptr_attr(void *data, CUpointer_attribute attr, CUdeviceptr ptr)
{
	struct cu_alloc a;
	struct cu_host h;
	int dev = cu_alloc_find(ptr, &a);
	int host = !dev && cu_host_find((const void *)(uintptr_t)ptr, &h);

	if (!data)
		return CUDA_ERROR_INVALID_VALUE;
	if (!dev && !host)
		return CUDA_ERROR_INVALID_VALUE;
	switch (attr) {
	case CU_POINTER_ATTRIBUTE_CONTEXT:
		*(CUcontext *)data = (CUcontext)cu_primary(dev ? a.device : 0);
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
		*(unsigned *)data = dev ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
		if (!dev)
			return CUDA_ERROR_INVALID_VALUE;
		*(CUdeviceptr *)data = ptr;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_HOST_POINTER:
		if (dev)
			return CUDA_ERROR_INVALID_VALUE;
		*(void **)data = (void *)(uintptr_t)ptr;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_IS_MANAGED:
	case CU_POINTER_ATTRIBUTE_MAPPED:
		*(int *)data = attr == CU_POINTER_ATTRIBUTE_MAPPED;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
		*(int *)data = dev ? a.device : 0;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
		*(CUdeviceptr *)data = dev ? a.base : (CUdeviceptr)(uintptr_t)h.ptr;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
		*(size_t *)data = dev ? a.size : h.size;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_BUFFER_ID:
		*(unsigned long long *)data = dev ? a.base : (uintptr_t)h.ptr;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
	case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
	case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
		*(int *)data = 0;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
		*(unsigned long long *)data = 0;
		return CUDA_SUCCESS;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

CUresult CUDAAPI cuPointerGetAttribute(void *data, CUpointer_attribute attr, CUdeviceptr ptr)
{
	return ptr_attr(data, attr, ptr);
}

CUresult CUDAAPI cuPointerGetAttributes(unsigned int n, CUpointer_attribute *attrs,
					void **data, CUdeviceptr ptr)
{
	struct cu_alloc a;
	struct cu_host h;
	int known;

	if (!attrs || !data)
		return CUDA_ERROR_INVALID_VALUE;
	known = cu_alloc_find(ptr, &a) || cu_host_find((const void *)(uintptr_t)ptr, &h);
	for (unsigned i = 0; i < n; i++) {
		if (!data[i])
			continue;
		if (known) {
			if (ptr_attr(data[i], attrs[i], ptr))
				memset(data[i], 0, sizeof(int));
			continue;
		}
		/* Unknown memory: plain pageable host memory, as the driver says. */
		switch (attrs[i]) {
		case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
		case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
			*(int *)data[i] = attrs[i] == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL ? -2 : 0;
			break;
		case CU_POINTER_ATTRIBUTE_CONTEXT:
		case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
		case CU_POINTER_ATTRIBUTE_HOST_POINTER:
		case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
			*(void **)data[i] = NULL;
			break;
		case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
		case CU_POINTER_ATTRIBUTE_BUFFER_ID:
		case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
			*(unsigned long long *)data[i] = 0;
			break;
		default:
			*(int *)data[i] = 0;
			break;
		}
	}
	return CUDA_SUCCESS;
}

/* ---- 2D copies: row by row (one copy when both sides are packed) -------- */

static CUresult copy1d(CUmemorytype dt, uint64_t dst, CUmemorytype st, uint64_t src,
		       size_t n, CUstream s, int async)
{
	int ddev = dt == CU_MEMORYTYPE_DEVICE, sdev = st == CU_MEMORYTYPE_DEVICE;

	if (dt == CU_MEMORYTYPE_UNIFIED || st == CU_MEMORYTYPE_UNIFIED)
		return unified(dst, src, n, s, async);
	if (ddev && sdev)
		return dtod(dst, src, n, s);
	if (ddev)
		return htod(dst, (const void *)(uintptr_t)src, n, s, async);
	if (sdev)
		return dtoh((void *)(uintptr_t)dst, src, n, s, async);
	memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, n);
	return CUDA_SUCCESS;
}

static CUresult copy2d(const CUDA_MEMCPY2D *c, CUstream s, int async)
{
	uint64_t dst, src;
	size_t dpitch, spitch;
	CUresult r = CUDA_SUCCESS;

	if (!c)
		return CUDA_ERROR_INVALID_VALUE;
	if (c->srcMemoryType == CU_MEMORYTYPE_ARRAY || c->dstMemoryType == CU_MEMORYTYPE_ARRAY)
		return pvgpu_cuda_unsupported("cuMemcpy2D with a CUDA array");
	src = c->srcMemoryType == CU_MEMORYTYPE_HOST ? (uintptr_t)c->srcHost : c->srcDevice;
	dst = c->dstMemoryType == CU_MEMORYTYPE_HOST ? (uintptr_t)c->dstHost : c->dstDevice;
	spitch = c->srcPitch ? c->srcPitch : c->WidthInBytes;
	dpitch = c->dstPitch ? c->dstPitch : c->WidthInBytes;
	if (spitch < c->WidthInBytes || dpitch < c->WidthInBytes)
		return CUDA_ERROR_INVALID_VALUE;
	src += c->srcY * spitch + c->srcXInBytes;
	dst += c->dstY * dpitch + c->dstXInBytes;
	if (spitch == c->WidthInBytes && dpitch == c->WidthInBytes)
		return copy1d(c->dstMemoryType, dst, c->srcMemoryType, src,
			      c->WidthInBytes * c->Height, s, async);
	for (size_t y = 0; y < c->Height && !r; y++)
		r = copy1d(c->dstMemoryType, dst + y * dpitch, c->srcMemoryType,
			   src + y * spitch, c->WidthInBytes, s, async);
	return r;
}

CUresult CUDAAPI cuMemcpy2D_v2(const CUDA_MEMCPY2D *c) { return copy2d(c, NULL, 0); }
CUresult CUDAAPI cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D *c)
{ return copy2d(c, CU_STREAM_PER_THREAD, 0); }
CUresult CUDAAPI cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *c) { return copy2d(c, NULL, 0); }
CUresult CUDAAPI cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D *c)
{ return copy2d(c, CU_STREAM_PER_THREAD, 0); }
CUresult CUDAAPI cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *c, CUstream s) { return copy2d(c, s, 1); }
CUresult CUDAAPI cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D *c, CUstream s)
{ return copy2d(c, s ? s : CU_STREAM_PER_THREAD, 1); }

/* ---- pitched memory and 2D memsets: row by row, in one batch ------------ */

/* What cuMemAllocPitch gives on sm_90: rows padded to 512 bytes. */
#define PITCH_ALIGN	512u

CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width,
				    size_t height, unsigned int elem)
{
	size_t p;

	if (!dptr || !pitch || !width || !height ||
	    (elem != 4 && elem != 8 && elem != 16))
		return CUDA_ERROR_INVALID_VALUE;
	if (width > SIZE_MAX - PITCH_ALIGN)
		return CUDA_ERROR_INVALID_VALUE;
	p = (width + PITCH_ALIGN - 1) / PITCH_ALIGN * PITCH_ALIGN;
	if (height > SIZE_MAX / p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*pitch = p;
	return cuMemAlloc_v2(dptr, p * height);
}

static CUresult memset_2d(CUdeviceptr dst, size_t pitch, uint32_t value,
			  uint32_t elem, size_t width, size_t height, CUstream s,
			  int sync)
{
	CUresult r = CUDA_SUCCESS;

	if (!width || !height)
		return CUDA_SUCCESS;
	if (height > 1 && pitch < width * elem)
		return CUDA_ERROR_INVALID_VALUE;
	/* The whole block first: no row may start outside the allocation. */
	if (!range_ok(dst, (height - 1) * pitch + width * elem))
		return CUDA_ERROR_INVALID_VALUE;
	if (pitch == width * elem)
		return memset_any(dst, value, elem, width * height, s, sync);
	for (size_t y = 0; y < height && !r; y++)
		r = memset_any(dst + y * pitch, value, elem, width, s,
			       sync && y == height - 1);
	return r;
}

#define MEMSET2D_FNS(N, T)								\
CUresult CUDAAPI cuMemsetD2D##N##_v2(CUdeviceptr d, size_t p, T v, size_t w, size_t h)	\
{ return memset_2d(d, p, v, N / 8, w, h, NULL, 1); }					\
CUresult CUDAAPI cuMemsetD2D##N##_v2_ptds(CUdeviceptr d, size_t p, T v, size_t w,	\
					  size_t h)					\
{ return memset_2d(d, p, v, N / 8, w, h, CU_STREAM_PER_THREAD, 1); }			\
CUresult CUDAAPI cuMemsetD2D##N##Async(CUdeviceptr d, size_t p, T v, size_t w,		\
				       size_t h, CUstream s)				\
{ return memset_2d(d, p, v, N / 8, w, h, s, 0); }					\
CUresult CUDAAPI cuMemsetD2D##N##Async_ptsz(CUdeviceptr d, size_t p, T v, size_t w,	\
					    size_t h, CUstream s)			\
{ return memset_2d(d, p, v, N / 8, w, h, s ? s : CU_STREAM_PER_THREAD, 0); }

MEMSET2D_FNS(8, unsigned char)
MEMSET2D_FNS(16, unsigned short)
MEMSET2D_FNS(32, unsigned int)
