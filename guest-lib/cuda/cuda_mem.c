/*
 * cuda_mem.c - memory: device allocations (tracked in the guest, so
 * unified copies and pointer attributes know a pointer's kind), pinned
 * host memory (inside the connection's shared window where it has one),
 * copies in every direction, and memsets.
 */
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "pvgpu_generic.h"
#include "cuda_surface.h"
#include "debug.h"
#include "guest_window.h"
#include "pvgpu_guest.h"

/* ---- tracking ----------------------------------------------------------- */

int cu_alloc_insert(const struct cu_alloc *add)
{
	struct cu_alloc m = *add, *n = &m;
	size_t i, k;

	pthread_mutex_lock(&cu.table_lock);
	/*
	 * A graph's range the driver gives again.  To another allocation
	 * node: allocations of one graph share addresses where their
	 * lifetimes do not overlap, so the range is the union.  To anything
	 * else: that graph is gone (the backend forgets it so too, capture.c).
	 */
	for (i = k = 0; i < cu.nallocs; i++) {
		struct cu_alloc *a = &cu.allocs[i];
		uint64_t end = n->base + n->size, aend = a->base + a->size;

		if (!a->graph || a->base >= end || n->base >= aend) {
			cu.allocs[k++] = *a;
			continue;
		}
		if (n->graph) {
			n->base = a->base < n->base ? a->base : n->base;
			n->size = (aend > end ? aend : end) - n->base;
		}
	}
	cu.nallocs = k;
	if (cu.nallocs == cu.allocs_cap) {
		size_t cap = cu.allocs_cap ? cu.allocs_cap * 2 : 64;
		struct cu_alloc *a = realloc(cu.allocs, cap * sizeof(*a));

		if (!a) {
			pthread_mutex_unlock(&cu.table_lock);
			return -1;
		}
		cu.allocs = a;
		cu.allocs_cap = cap;
	}
	for (i = cu.nallocs; i > 0 && cu.allocs[i - 1].base > n->base; i--)
		cu.allocs[i] = cu.allocs[i - 1];
	cu.allocs[i] = *n;
	cu.nallocs++;
	pthread_mutex_unlock(&cu.table_lock);
	return 0;
}

void cu_alloc_add(uint64_t base, uint64_t size, int device)
{
	cu_alloc_insert(&(struct cu_alloc){ .base = base, .size = size, .device = device });
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
/*
 * n bytes from ptr stay in the program's memory: in its allocation, or,
 * for virtual memory mapped piece by piece into one range (XLA's
 * allocator), on through the mappings that follow without a gap.  Two
 * cuMemAlloc allocations side by side are two: NVIDIA's driver refuses a
 * copy across them.  A pointer of no known allocation is the backend's to
 * judge.
 */
static int range_ok(uint64_t ptr, size_t n)
{
	struct cu_alloc a;
	uint64_t end;

	if (!cu_alloc_find(ptr, &a))
		return 1;
	if (n <= a.size - (ptr - a.base))
		return 1;
	if (ptr + n < ptr)
		return 0;
	if (!a.mapped)
		return 0;
	for (end = a.base + a.size; end < ptr + n; end = a.base + a.size)
		if (!cu_alloc_find(end, &a) || a.base != end || !a.mapped)
			return 0;
	return 1;
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
	if (a.managed)
		return cu_managed_free(&a);
	r = cu_op_begin(&op, cu_current() && cu_current()->device == a.device ?
			cu_current() : cu_primary(a.device));
	if (r)
		return r;
	r = cu_status(pvgpu_call_mem_free(op.client, &req, &rep));
	cu_op_end(&op);
	/* Graph memory stays its graph's: a launch maps it again. */
	if (!r && !a.graph)
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

void cu_window_pin(struct cu_ctx *ctx, struct pvgpu_window_map *win, void *ptr,
		   uint64_t size)
{
	struct pvgpu_window_register_req req;
	struct pvgpu_window_register_rep rep;
	uint64_t off;
	struct cu_op op;

	if (!pvgpu_window_holds(win, ptr, size, &off))
		return;
	req.offset = off;
	/* The window's allocations are whole pages; so are pins. */
	req.size = (size + 4095) & ~(uint64_t)4095;
	if (!cu_op_begin(&op, ctx)) {
		pvgpu_call_window_register(op.client, &req, &rep);
		cu_op_end(&op);
	}
}

void cu_window_unpin(struct pvgpu_client *client, struct pvgpu_window_map *win,
		     void *ptr, uint64_t size)
{
	struct pvgpu_window_unregister_req req;
	struct pvgpu_window_unregister_rep rep;
	uint64_t off;

	if (!pvgpu_window_holds(win, ptr, size, &off))
		return;
	req.offset = off;
	for (int i = 0; i < cu.ndevices; i++)
		if (cu.devices[i].be->client == client) {
			pthread_mutex_lock(&cu.devices[i].be->lock);
			pvgpu_call_window_unregister(client, &req, &rep);
			pthread_mutex_unlock(&cu.devices[i].be->lock);
			break;
		}
}

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
			cu_window_pin(ctx, h.win, h.ptr, bytesize);
			h.client = c;
		} else {
			h.win = NULL;
		}
	}
	if (!h.ptr) {
		h.ptr = aligned_alloc(4096, (bytesize + 4095) & ~(size_t)4095);
		if (!h.ptr)
			return CUDA_ERROR_OUT_OF_MEMORY;
		/* verbs://: registered once, read in place by the backend. */
		if (c && !pvgpu_client_pin(c, h.ptr, (bytesize + 4095) & ~(size_t)4095))
			h.client = c;
	}
	if (host_add(&h)) {
		if (h.win)
			pvgpu_window_free(h.win, h.ptr);
		else if (h.client)
			pvgpu_client_unpin(h.client, h.ptr);
		if (!h.win)
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

	if (!p)
		return CUDA_SUCCESS;	/* free(NULL), as the driver does */
	if (!host_remove(p, &h) || h.registered)
		return CUDA_ERROR_INVALID_VALUE;
	if (h.win) {
		cu_window_unpin(h.client, h.win, h.ptr, h.size);
		unmap_host(h.ptr);
		pvgpu_window_free(h.win, h.ptr);
	} else {
		if (h.client)
			pvgpu_client_unpin(h.client, h.ptr);
		free(h.ptr);
	}
	return CUDA_SUCCESS;
}

/*
 * Registered memory is remembered (pointer attributes); over a shared
 * window it is also moved into the window where it fits (cuda_hostreg.c),
 * so that a kernel can reach it (cuMemHostGetDevicePointer: NPP does).
 * Elsewhere its copies stay pageable.
 */
CUresult CUDAAPI cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int flags)
{
	struct cu_host h = { .ptr = p, .size = bytesize, .flags = flags, .registered = 1 };
	struct cu_host old;

	if (!p || !bytesize)
		return CUDA_ERROR_INVALID_VALUE;
	if (cu_host_find(p, &old))
		return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
	if (cu_current())
		(void)cu_hostreg_alias(&h, cu_current());
	if (host_add(&h)) {
		cu_hostreg_unalias(&h);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	return CUDA_SUCCESS;
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
	if (h.alias) {
		unmap_host(h.ptr);
		cu_hostreg_unalias(&h);
	}
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
	if (!h.win || !cu_host_window_ptr(&h, p) ||
	    !pvgpu_window_holds(h.win, cu_host_window_ptr(&h, p), 1, &off))
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

		pvgpu_window_holds(h.win, cu_host_window_ptr(&h, h.ptr), h.size, &base_off);
		base = rep.dptr - (off - base_off);
		pthread_mutex_lock(&cu.table_lock);
		if (nmapped < MAX_MAPPED)
			mapped[nmapped++] = (struct mapped_host){ h.ptr, base, h.size };
		pthread_mutex_unlock(&cu.table_lock);
		/* At an address of its own, it is a device range too; at
		 * ours (same_address), it stays host memory to us. */
		if (base != (uint64_t)(uintptr_t)h.ptr)
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

/*
 * A copy on a stream being captured, with its host end outside the shared
 * window: a staged copy node of the capture (cuda_capture.c), *r how that
 * went; 0 when it is not that case.
 */
static int capture_staged(CUdeviceptr dptr, const void *host, size_t n,
			  CUstream s, int to_host, CUresult *r)
{
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
	struct pvgpu_window_map *win;
	struct cu_ctx *ctx;
	uint64_t remote, off;
	struct cu_op op;
	int in_window;

	if (!cu_captures_active() || cuStreamIsCapturing(s, &st) ||
	    st != CU_STREAM_CAPTURE_STATUS_ACTIVE)
		return 0;
	*r = cu_stream_resolve(s, &ctx, &remote);
	if (!*r)
		*r = cu_op_begin(&op, ctx);
	if (*r)
		return 1;
	win = pvgpu_client_window(op.client);
	in_window = win && pvgpu_window_holds(win, host, n, &off);
	cu_op_end(&op);
	if (in_window)
		return 0;	/* zero-copy: the worker reaches it */
	*r = cu_staged_add(ctx, 0, NULL, 0, remote, dptr, (void *)(uintptr_t)host,
			   n, to_host, NULL);
	return 1;
}

/* Where p lies in op's window, for the client's choice of path: off, or
 * NULL when it does not. */
static const uint64_t *in_window(struct cu_op *op, const void *p, size_t n,
				 uint64_t *off)
{
	struct pvgpu_window_map *win = pvgpu_client_window(op->client);

	return win && cu_window_offset(win, p, n, off) ? off : NULL;
}

/* A copy between host memory and the device, to_host or from it. */
static CUresult host_copy(CUdeviceptr dptr, const void *host, size_t n,
			  CUstream s, int async, int to_host)
{
	const uint64_t *at;
	uint64_t stream, off;
	struct cu_op op;
	int32_t st;
	CUresult r;

	if (!n)
		return CUDA_SUCCESS;
	if (!host || !dptr || !range_ok(dptr, n))
		return CUDA_ERROR_INVALID_VALUE;
	if (async && capture_staged(dptr, host, n, s, to_host, &r))
		return r;
	r = begin_on(&op, s, &stream);
	if (r)
		return r;
	at = in_window(&op, host, n, &off);
	st = to_host ? pvgpu_client_dtoh(op.client, (void *)host, dptr, n, stream,
					 async, at) :
		       pvgpu_client_htod(op.client, dptr, host, n, stream, async, at);
	cu_op_end(&op);
	return cu_status(st);
}

static CUresult htod(CUdeviceptr dst, const void *src, size_t n, CUstream s, int async)
{
	return host_copy(dst, src, n, s, async, 0);
}

static CUresult dtoh(void *dst, CUdeviceptr src, size_t n, CUstream s, int async)
{
	return host_copy(src, dst, n, s, async, 1);
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

/*
 * A synchronous copy into managed memory is there for the program to read
 * when the call returns, as with the driver: device-to-device copies are
 * queued, so wait for this one.
 */
static CUresult dtod_settled(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s,
			     int async)
{
	CUresult r = dtod(dst, src, n, s);

	if (!r && !async && cu_managed_holds(dst, n))
		r = cuStreamSynchronize(s);
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
		return dtod_settled(dst, src, n, s, async);
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
	return dtod_settled(dst, src, n, NULL, 0);
}

CUresult CUDAAPI cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
	return dtod_settled(dst, src, n, CU_STREAM_PER_THREAD, 0);
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

/* ---- cuMemcpyPeer ---------------------------------------------------------- */

/*
 * n bytes at ptr: not null, not wrapping.  Whose memory it is the backend
 * judges; one backend's devices share one address space, and like NVIDIA's
 * driver it copies memory of either device whichever context is named.
 */
static int peer_range_ok(CUdeviceptr ptr, size_t n)
{
	return ptr && range_ok(ptr, n);
}

/*
 * Between two devices of one backend: GPU to GPU on the host.  Async, on
 * s (a stream of that backend; another backend's stream is waited for
 * first, to keep its order); else synchronous, ordered with the work of
 * both contexts.
 */
static CUresult peer_on_backend(CUdeviceptr dst, struct cu_ctx *d, CUdeviceptr src,
				struct cu_ctx *sc, size_t n, CUstream s, int async)
{
	struct cu_ctx *on = d;
	uint64_t stream = 0, dremote = 0, sremote = 0;
	struct cu_op op;
	CUresult r;

	if (async) {
		r = cu_stream_resolve(s, &on, &stream);
		if (r)
			return r;
		if (cu.devices[on->device].be != cu.devices[d->device].be) {
			r = cuStreamSynchronize(s);
			if (r)
				return r;
			on = d;
			async = 0;
		}
	}
	r = cu_op_begin(&op, on);
	if (r)
		return r;
	r = cu_op_peer(&op, d, &dremote);
	if (!r)
		r = cu_op_peer(&op, sc, &sremote);
	if (r)
		goto err_end;
	if (async) {
		struct pvgpu_memcpy_peer_async_req req = {
			.dst = dst, .dst_ctx = dremote, .src = src, .src_ctx = sremote,
			.size = n, .stream = stream,
		};

		r = cu_status(pvgpu_call_memcpy_peer_async(op.client, &req));
	} else {
		struct pvgpu_memcpy_peer_req req = {
			.dst = dst, .dst_ctx = dremote, .src = src, .src_ctx = sremote,
			.size = n,
		};
		struct pvgpu_memcpy_peer_rep rep;

		r = cu_status(pvgpu_call_memcpy_peer(op.client, &req, &rep));
	}
err_end:
	cu_op_end(&op);
	return r;
}

/*
 * Within one device: a device-to-device copy on s in the destination's
 * context.  Between devices of one backend: forwarded (peer_on_backend).
 * Between two backends, which share no memory: staged through the guest,
 * after the work already on s, with a debug line.
 */
static CUresult peer(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src, CUcontext sctx,
		     size_t n, CUstream s, int async)
{
	enum { CHUNK = 4 << 20 };
	struct cu_ctx *d = cu_ctx_check(dctx), *sc = cu_ctx_check(sctx);
	CUresult r;
	void *buf;

	if (!d || !sc)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!n)
		return CUDA_SUCCESS;
	if (d->device == sc->device)
		return CU_WITH_CTX(dctx, dtod(dst, src, n, s));
	if (cu.devices[d->device].be == cu.devices[sc->device].be) {
		if (!peer_range_ok(dst, n) || !peer_range_ok(src, n))
			return CUDA_ERROR_INVALID_VALUE;
		return peer_on_backend(dst, d, src, sc, n, s, async);
	}
	/* Two backends may hand out the same addresses: each judges its own. */
	pvgpu_debug("cuMemcpyPeer: device %d to device %d staged through the guest",
		    sc->device, d->device);
	if (s && s != CU_STREAM_PER_THREAD && (r = cuStreamSynchronize(s)))
		return r;
	buf = malloc(n < CHUNK ? n : CHUNK);
	if (!buf)
		return CUDA_ERROR_OUT_OF_MEMORY;
	r = CUDA_SUCCESS;
	for (size_t off = 0; !r && off < n; off += CHUNK) {
		size_t len = n - off < CHUNK ? n - off : CHUNK;

		r = CU_WITH_CTX(sctx, cuMemcpyDtoH_v2(buf, src + off, len));
		if (!r)
			r = CU_WITH_CTX(dctx, cuMemcpyHtoD_v2(dst + off, buf, len));
	}
	free(buf);
	return r;
}

CUresult CUDAAPI cuMemcpyPeer(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src,
			      CUcontext sctx, size_t n)
{
	return peer(dst, dctx, src, sctx, n, NULL, 0);
}

CUresult CUDAAPI cuMemcpyPeer_ptds(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src,
				   CUcontext sctx, size_t n)
{
	return peer(dst, dctx, src, sctx, n, CU_STREAM_PER_THREAD, 0);
}

CUresult CUDAAPI cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src,
				   CUcontext sctx, size_t n, CUstream s)
{
	return peer(dst, dctx, src, sctx, n, s, 1);
}

CUresult CUDAAPI cuMemcpyPeerAsync_ptsz(CUdeviceptr dst, CUcontext dctx, CUdeviceptr src,
					CUcontext sctx, size_t n, CUstream s)
{
	return peer(dst, dctx, src, sctx, n, s ? s : CU_STREAM_PER_THREAD, 1);
}

/* ---- memset --------------------------------------------------------------- */

/* Pinned memory of a window at our address, named by its own pointer. */
static int window_host(uint64_t ptr)
{
	struct cu_host h;

	return cu_host_find((const void *)(uintptr_t)ptr, &h) && h.win &&
	       h.win->same_address && !h.registered;
}

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
	if (!r && sync && (mapped_host_range(dst) || cu_managed_holds(dst, 0) ||
			   window_host(dst))) {
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
	struct cu_alloc a = { 0 };
	struct cu_host h = { 0 };
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
		/* Window memory the backend maps at our address: the GPU's
		 * address for it is ours (managed, cuMemHostAlloc). */
		if (!dev && !(h.win && h.win->same_address && !h.registered))
			return CUDA_ERROR_INVALID_VALUE;
		*(CUdeviceptr *)data = ptr;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_HOST_POINTER:
		if (dev && !a.managed)
			return CUDA_ERROR_INVALID_VALUE;
		*(void **)data = (void *)(uintptr_t)ptr;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_IS_MANAGED:
		*(int *)data = dev && a.managed;
		return CUDA_SUCCESS;
	case CU_POINTER_ATTRIBUTE_MAPPED:
		*(int *)data = 1;
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

/* ---- CUDA arrays ---------------------------------------------------------- */

/*
 * An array is the backend's (ops.spec array_*); the guest keeps its
 * descriptor.  Copies move boxes between an array and device memory on the
 * backend; host memory and array-to-array copies go through device memory
 * allocated for the copy.
 */
struct cu_array *cu_array_get(CUarray h)
{
	struct cu_array *a = (struct cu_array *)h;

	return a && a->magic == CU_MAGIC_ARRAY && a->alive ? a : NULL;
}

#define array_get cu_array_get

static CUresult array_create(CUarray *out, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
	struct pvgpu_array_create_req req;
	struct pvgpu_array_create_rep rep = { 0 };
	struct cu_array *a;
	struct cu_op op;
	CUresult r;

	if (!out || !d)
		return CUDA_ERROR_INVALID_VALUE;
	if (d->Flags & ~CU_ARRAY_FLAGS) {	/* sparse, depth, video... */
		pvgpu_debug("cuArray3DCreate: flags %#x are not supported", d->Flags);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	req = (struct pvgpu_array_create_req){
		.width = d->Width, .height = d->Height, .depth = d->Depth,
		.format = (uint32_t)d->Format, .channels = d->NumChannels,
		.flags = d->Flags,
	};
	a = calloc(1, sizeof(*a));
	if (!a)
		return CUDA_ERROR_OUT_OF_MEMORY;
	r = cu_op_current(&op);
	if (r) {
		free(a);
		return r;
	}
	r = cu_status(pvgpu_call_array_create(op.client, &req, &rep));
	a->ctx = op.ctx;
	cu_op_end(&op);
	if (r) {
		free(a);
		return r;
	}
	a->magic = CU_MAGIC_ARRAY;
	a->alive = 1;
	a->remote = rep.array;
	a->desc = *d;
	*out = (CUarray)a;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuArray3DCreate_v2(CUarray *out, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
	return array_create(out, d);
}

CUresult CUDAAPI cuArrayCreate_v2(CUarray *out, const CUDA_ARRAY_DESCRIPTOR *d)
{
	CUDA_ARRAY3D_DESCRIPTOR d3;

	if (!d)
		return CUDA_ERROR_INVALID_VALUE;
	d3 = (CUDA_ARRAY3D_DESCRIPTOR){ .Width = d->Width, .Height = d->Height,
		.Format = d->Format, .NumChannels = d->NumChannels };
	return array_create(out, &d3);
}

CUresult CUDAAPI cuArrayDestroy(CUarray h)
{
	struct cu_array *a = array_get(h);
	struct cu_op op;
	uint64_t arg[1];
	CUresult r;

	if (!a)
		return CUDA_ERROR_INVALID_HANDLE;
	arg[0] = a->remote;
	r = cu_op_begin(&op, a->ctx);
	if (r)
		return r;
	r = cu_status(cu_generic_op(&op, PVGPU_GENERIC_cuArrayDestroy, arg, 1));
	cu_op_end(&op);
	if (!r)
		a->alive = 0;	/* never freed: a stale handle stays harmless */
	return r;
}

CUresult CUDAAPI cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR *d, CUarray h)
{
	struct cu_array *a = array_get(h);

	if (!d)
		return CUDA_ERROR_INVALID_VALUE;
	if (!a)
		return CUDA_ERROR_INVALID_HANDLE;
	*d = a->desc;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR *d, CUarray h)
{
	struct cu_array *a = array_get(h);

	if (!d)
		return CUDA_ERROR_INVALID_VALUE;
	if (!a)
		return CUDA_ERROR_INVALID_HANDLE;
	if (a->desc.Depth)	/* as the driver: a 3D array has no 2D descriptor */
		return CUDA_ERROR_INVALID_VALUE;
	*d = (CUDA_ARRAY_DESCRIPTOR){ .Width = a->desc.Width, .Height = a->desc.Height,
		.Format = a->desc.Format, .NumChannels = a->desc.NumChannels };
	return CUDA_SUCCESS;
}

/* A box between array a and device memory, in stream order on the backend. */
static CUresult array_box(struct cu_array *a, size_t x, size_t y, size_t z,
			  size_t w, size_t h, size_t d, CUdeviceptr dptr,
			  size_t pitch, size_t rows, int to_array, CUstream s)
{
	struct pvgpu_array_copy_req req = {
		.array = a->remote, .x = x, .y = y, .z = z, .width = w,
		.height = h, .depth = d, .dptr = dptr, .pitch = pitch,
		.rows = rows, .to_array = (uint32_t)to_array,
	};
	struct pvgpu_array_copy_rep rep;
	struct cu_op op;
	CUresult r;

	r = begin_on(&op, s, &req.stream);
	if (r)
		return r;
	if (op.ctx != a->ctx) {
		cu_op_end(&op);
		return CUDA_ERROR_INVALID_HANDLE;
	}
	r = cu_status(pvgpu_call_array_copy(op.client, &req, &rep));
	cu_op_end(&op);
	return r;
}

static CUresult copy3d(const CUDA_MEMCPY3D *c, CUstream s, int async);

/* Where one side of a 3D copy starts in linear memory. */
static CUdeviceptr side_start(CUdeviceptr base, size_t x, size_t y, size_t z,
			      size_t pitch, size_t rows)
{
	return base + (z * rows + y) * pitch + x;
}

/*
 * A 3D copy with an array at one end or both.  Synchronous: the device
 * memory between host and array is freed before it returns (the driver's
 * async array copies may be synchronous too).
 */
static CUresult copy3d_array(const CUDA_MEMCPY3D *c, CUstream s)
{
	int sarr = c->srcMemoryType == CU_MEMORYTYPE_ARRAY;
	int darr = c->dstMemoryType == CU_MEMORYTYPE_ARRAY;
	struct cu_array *sa = sarr ? array_get(c->srcArray) : NULL;
	struct cu_array *da = darr ? array_get(c->dstArray) : NULL;
	size_t w = c->WidthInBytes, h = c->Height, d = c->Depth, n;
	size_t sp = c->srcPitch ? c->srcPitch : w, dp = c->dstPitch ? c->dstPitch : w;
	size_t sr = c->srcHeight ? c->srcHeight : h, dr = c->dstHeight ? c->dstHeight : h;
	CUdeviceptr t;
	CUDA_MEMCPY3D m;
	CUresult r, r2;

	if ((sarr && !sa) || (darr && !da))
		return CUDA_ERROR_INVALID_HANDLE;
	if (c->srcLOD || c->dstLOD || c->reserved0 || c->reserved1)
		return CUDA_ERROR_INVALID_VALUE;
	if (!w || !h || !d)
		return CUDA_SUCCESS;
	if (sa && c->dstMemoryType == CU_MEMORYTYPE_DEVICE)
		return array_box(sa, c->srcXInBytes, c->srcY, c->srcZ, w, h, d,
				 side_start(c->dstDevice, c->dstXInBytes, c->dstY,
					    c->dstZ, dp, dr), dp, dr, 0, s);
	if (da && c->srcMemoryType == CU_MEMORYTYPE_DEVICE)
		return array_box(da, c->dstXInBytes, c->dstY, c->dstZ, w, h, d,
				 side_start(c->srcDevice, c->srcXInBytes, c->srcY,
					    c->srcZ, sp, sr), sp, sr, 1, s);
	/* Through device memory of its own: host <-> array, array <-> array. */
	if (__builtin_mul_overflow(w, h, &n) || __builtin_mul_overflow(n, d, &n))
		return CUDA_ERROR_INVALID_VALUE;
	r = cuMemAlloc_v2(&t, n);
	if (r)
		return r;
	if (sa) {
		r = array_box(sa, c->srcXInBytes, c->srcY, c->srcZ, w, h, d, t, w, h, 0, s);
	} else {
		m = *c;
		m.dstMemoryType = CU_MEMORYTYPE_DEVICE;
		m.dstDevice = t;
		m.dstXInBytes = m.dstY = m.dstZ = 0;
		m.dstPitch = w;
		m.dstHeight = h;
		m.dstArray = NULL;
		r = copy3d(&m, s, 0);
	}
	if (!r && da) {
		r = array_box(da, c->dstXInBytes, c->dstY, c->dstZ, w, h, d, t, w, h, 1, s);
	} else if (!r) {
		m = *c;
		m.srcMemoryType = CU_MEMORYTYPE_DEVICE;
		m.srcDevice = t;
		m.srcXInBytes = m.srcY = m.srcZ = 0;
		m.srcPitch = w;
		m.srcHeight = h;
		m.srcArray = NULL;
		r = copy3d(&m, s, 0);
	}
	r2 = cuStreamSynchronize(s);
	cuMemFree_v2(t);
	return r ? r : r2;
}

/*
 * The linear array copies (cuMemcpyHtoA and kin): n bytes at a byte
 * offset of a 1D array.  What they mean for an array with rows is not
 * supported.
 */
static int linear_ok(CUarray h, const char *name)
{
	struct cu_array *a = array_get(h);

	if (a && a->desc.Height) {
		pvgpu_cuda_unsupported(name);
		return 0;
	}
	return 1;
}

static CUresult copy_linear(CUmemorytype dt, void *dhost, CUdeviceptr ddev, CUarray darr,
			    size_t doff, CUmemorytype st, const void *shost,
			    CUdeviceptr sdev, CUarray sarr, size_t soff, size_t n,
			    CUstream s, const char *name)
{
	CUDA_MEMCPY3D m = {
		.srcMemoryType = st, .srcHost = shost, .srcDevice = sdev,
		.srcArray = sarr, .srcXInBytes = sarr ? soff : 0,
		.dstMemoryType = dt, .dstHost = dhost, .dstDevice = ddev,
		.dstArray = darr, .dstXInBytes = darr ? doff : 0,
		.WidthInBytes = n, .Height = 1, .Depth = 1,
	};

	if ((darr && !linear_ok(darr, name)) || (sarr && !linear_ok(sarr, name)))
		return CUDA_ERROR_NOT_SUPPORTED;
	return copy3d_array(&m, s);
}

#define HTOA(s_) copy_linear(CU_MEMORYTYPE_ARRAY, NULL, 0, dst, off, CU_MEMORYTYPE_HOST, \
			     src, 0, NULL, 0, n, s_, "cuMemcpyHtoA on an array with rows")
#define ATOH(s_) copy_linear(CU_MEMORYTYPE_HOST, dst, 0, NULL, 0, CU_MEMORYTYPE_ARRAY, \
			     NULL, 0, src, off, n, s_, "cuMemcpyAtoH on an array with rows")
#define DTOA(s_) copy_linear(CU_MEMORYTYPE_ARRAY, NULL, 0, dst, off, CU_MEMORYTYPE_DEVICE, \
			     NULL, src, NULL, 0, n, s_, "cuMemcpyDtoA on an array with rows")
#define ATOD(s_) copy_linear(CU_MEMORYTYPE_DEVICE, NULL, dst, NULL, 0, CU_MEMORYTYPE_ARRAY, \
			     NULL, 0, src, off, n, s_, "cuMemcpyAtoD on an array with rows")
#define ATOA(s_) copy_linear(CU_MEMORYTYPE_ARRAY, NULL, 0, dst, doff, CU_MEMORYTYPE_ARRAY, \
			     NULL, 0, src, soff, n, s_, "cuMemcpyAtoA on an array with rows")

CUresult CUDAAPI cuMemcpyHtoA_v2(CUarray dst, size_t off, const void *src, size_t n)
{ return HTOA(NULL); }
CUresult CUDAAPI cuMemcpyHtoA_v2_ptds(CUarray dst, size_t off, const void *src, size_t n)
{ return HTOA(CU_STREAM_PER_THREAD); }
CUresult CUDAAPI cuMemcpyHtoAAsync_v2(CUarray dst, size_t off, const void *src, size_t n,
				      CUstream s)
{ return HTOA(s); }
CUresult CUDAAPI cuMemcpyHtoAAsync_v2_ptsz(CUarray dst, size_t off, const void *src,
					   size_t n, CUstream s)
{ return HTOA(s ? s : CU_STREAM_PER_THREAD); }
CUresult CUDAAPI cuMemcpyAtoH_v2(void *dst, CUarray src, size_t off, size_t n)
{ return ATOH(NULL); }
CUresult CUDAAPI cuMemcpyAtoH_v2_ptds(void *dst, CUarray src, size_t off, size_t n)
{ return ATOH(CU_STREAM_PER_THREAD); }
CUresult CUDAAPI cuMemcpyAtoHAsync_v2(void *dst, CUarray src, size_t off, size_t n, CUstream s)
{ return ATOH(s); }
CUresult CUDAAPI cuMemcpyAtoHAsync_v2_ptsz(void *dst, CUarray src, size_t off, size_t n,
					   CUstream s)
{ return ATOH(s ? s : CU_STREAM_PER_THREAD); }
CUresult CUDAAPI cuMemcpyDtoA_v2(CUarray dst, size_t off, CUdeviceptr src, size_t n)
{ return DTOA(NULL); }
CUresult CUDAAPI cuMemcpyDtoA_v2_ptds(CUarray dst, size_t off, CUdeviceptr src, size_t n)
{ return DTOA(CU_STREAM_PER_THREAD); }
CUresult CUDAAPI cuMemcpyAtoD_v2(CUdeviceptr dst, CUarray src, size_t off, size_t n)
{ return ATOD(NULL); }
CUresult CUDAAPI cuMemcpyAtoD_v2_ptds(CUdeviceptr dst, CUarray src, size_t off, size_t n)
{ return ATOD(CU_STREAM_PER_THREAD); }
CUresult CUDAAPI cuMemcpyAtoA_v2(CUarray dst, size_t doff, CUarray src, size_t soff, size_t n)
{ return ATOA(NULL); }
CUresult CUDAAPI cuMemcpyAtoA_v2_ptds(CUarray dst, size_t doff, CUarray src, size_t soff,
				      size_t n)
{ return ATOA(CU_STREAM_PER_THREAD); }

static CUresult copy2d(const CUDA_MEMCPY2D *c, CUstream s, int async)
{
	uint64_t dst, src;
	size_t dpitch, spitch;
	CUresult r = CUDA_SUCCESS;

	if (!c)
		return CUDA_ERROR_INVALID_VALUE;
	if (c->srcMemoryType == CU_MEMORYTYPE_ARRAY || c->dstMemoryType == CU_MEMORYTYPE_ARRAY) {
		CUDA_MEMCPY3D m = {
			.srcXInBytes = c->srcXInBytes, .srcY = c->srcY,
			.srcMemoryType = c->srcMemoryType, .srcHost = c->srcHost,
			.srcDevice = c->srcDevice, .srcArray = c->srcArray,
			.srcPitch = c->srcPitch,
			.dstXInBytes = c->dstXInBytes, .dstY = c->dstY,
			.dstMemoryType = c->dstMemoryType, .dstHost = c->dstHost,
			.dstDevice = c->dstDevice, .dstArray = c->dstArray,
			.dstPitch = c->dstPitch,
			.WidthInBytes = c->WidthInBytes, .Height = c->Height, .Depth = 1,
		};

		return copy3d_array(&m, s);
	}
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

/*
 * 3D copies between host and device memory (pitched or not, unaligned):
 * one 2D copy per slice, each slice srcPitch * srcHeight bytes after the
 * last.  CUDA arrays are not supported yet.
 */
static CUresult copy3d(const CUDA_MEMCPY3D *c, CUstream s, int async)
{
	size_t spitch, dpitch, sheight, dheight, sslice, dslice;
	CUresult r = CUDA_SUCCESS;

	if (!c)
		return CUDA_ERROR_INVALID_VALUE;
	if (c->srcMemoryType == CU_MEMORYTYPE_ARRAY || c->dstMemoryType == CU_MEMORYTYPE_ARRAY)
		return copy3d_array(c, s);
	if (c->srcLOD || c->dstLOD || c->reserved0 || c->reserved1)
		return CUDA_ERROR_INVALID_VALUE;
	if (!c->WidthInBytes || !c->Height || !c->Depth)
		return CUDA_SUCCESS;
	spitch = c->srcPitch ? c->srcPitch : c->WidthInBytes;
	dpitch = c->dstPitch ? c->dstPitch : c->WidthInBytes;
	sheight = c->srcHeight ? c->srcHeight : c->Height;
	dheight = c->dstHeight ? c->dstHeight : c->Height;
	/* A slice holds its rows: Height rows from Y, unless there is only one. */
	if (c->Depth > 1 && (sheight < c->srcY + c->Height || dheight < c->dstY + c->Height))
		return CUDA_ERROR_INVALID_VALUE;
	if (__builtin_mul_overflow(spitch, sheight, &sslice) ||
	    __builtin_mul_overflow(dpitch, dheight, &dslice) ||
	    c->srcZ + c->Depth < c->srcZ || c->dstZ + c->Depth < c->dstZ ||
	    (c->srcZ + c->Depth) > SIZE_MAX / (sslice ? sslice : 1) ||
	    (c->dstZ + c->Depth) > SIZE_MAX / (dslice ? dslice : 1))
		return CUDA_ERROR_INVALID_VALUE;
	/* Device sides whole before the first slice moves. */
	if ((c->srcMemoryType == CU_MEMORYTYPE_DEVICE &&
	     !range_ok(c->srcDevice + c->srcZ * sslice + c->srcY * spitch + c->srcXInBytes,
		       (c->Depth - 1) * sslice + (c->Height - 1) * spitch + c->WidthInBytes)) ||
	    (c->dstMemoryType == CU_MEMORYTYPE_DEVICE &&
	     !range_ok(c->dstDevice + c->dstZ * dslice + c->dstY * dpitch + c->dstXInBytes,
		       (c->Depth - 1) * dslice + (c->Height - 1) * dpitch + c->WidthInBytes)))
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t z = 0; z < c->Depth && !r; z++) {
		CUDA_MEMCPY2D p = {
			.srcXInBytes = c->srcXInBytes, .srcY = c->srcY,
			.srcMemoryType = c->srcMemoryType,
			.srcHost = (const void *)((uintptr_t)c->srcHost + (c->srcZ + z) * sslice),
			.srcDevice = c->srcDevice + (c->srcZ + z) * sslice,
			.srcPitch = spitch,
			.dstXInBytes = c->dstXInBytes, .dstY = c->dstY,
			.dstMemoryType = c->dstMemoryType,
			.dstHost = (void *)((uintptr_t)c->dstHost + (c->dstZ + z) * dslice),
			.dstDevice = c->dstDevice + (c->dstZ + z) * dslice,
			.dstPitch = dpitch,
			.WidthInBytes = c->WidthInBytes, .Height = c->Height,
		};

		r = copy2d(&p, s, async);
	}
	return r;
}

CUresult CUDAAPI cuMemcpy3D_v2(const CUDA_MEMCPY3D *c) { return copy3d(c, NULL, 0); }
CUresult CUDAAPI cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D *c)
{ return copy3d(c, CU_STREAM_PER_THREAD, 0); }
CUresult CUDAAPI cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *c, CUstream s) { return copy3d(c, s, 1); }
CUresult CUDAAPI cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D *c, CUstream s)
{ return copy3d(c, s ? s : CU_STREAM_PER_THREAD, 1); }

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
