/*
 * cuda_managed.c - managed memory (cuMemAllocManaged, cudaMallocManaged)
 * in the connection's shared window.
 *
 * Where the backend maps the window at our own address (window_attach's
 * same_address: shm://, the VM window device), a part of it pinned for
 * the GPU is reached by one pointer from this program's CPU and from the
 * kernels the backend runs: that is what managed memory is here.  It never
 * migrates, so concurrent access from the CPU and the GPU is always safe
 * (CONCURRENT_MANAGED_ACCESS); prefetches and advice are accepted and
 * remembered (cuMemRangeGetAttribute answers what was asked) but move
 * nothing.  Advice applies to the whole allocation holding the range.
 *
 * Over a plain socket, or where the backend could not map the window at
 * our address, there is no memory both sides see: CUDA_ERROR_NOT_SUPPORTED
 * naming the call, and the device attributes say no managed memory.
 */
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "cuda_surface.h"
#include "debug.h"
#include "guest_window.h"
#include "pvgpu_guest.h"

#define CPU_BIT		63

/* The window managed memory of ctx's device would live in, or NULL. */
static struct pvgpu_window_map *managed_window(struct cu_ctx *ctx)
{
	struct pvgpu_client *c = cu.devices[ctx->device].be->client;
	struct pvgpu_window_map *win = c ? pvgpu_client_window(c) : NULL;

	return win && win->same_address ? win : NULL;
}

int cu_managed_window(int device)
{
	struct pvgpu_client *c = cu.devices[device].be->client;
	struct pvgpu_window_map *win = c ? pvgpu_client_window(c) : NULL;

	return win && win->same_address;
}

int cu_params_reach_window(struct pvgpu_client *c, const void *params, size_t len)
{
	struct pvgpu_window_map *win = pvgpu_client_window(c);
	uint64_t base, v;

	if (!win || !win->same_address)
		return 0;
	base = (uint64_t)(uintptr_t)win->base;
	/* Pointers sit 8-byte aligned in the block. */
	for (size_t off = 0; off + 8 <= len; off += 8) {
		memcpy(&v, (const uint8_t *)params + off, 8);
		if (v - base < win->size)
			return 1;
	}
	return 0;
}

/* The record holding [ptr, ptr + n) (n 0: ptr alone); under table_lock. */
static struct cu_managed *find_locked(uint64_t ptr, uint64_t n)
{
	for (size_t i = 0; i < cu.nmanaged; i++) {
		struct cu_managed *m = &cu.managed[i];

		if (ptr - m->base < m->size && n <= m->size - (ptr - m->base))
			return m;
	}
	return NULL;
}

int cu_managed_holds(uint64_t ptr, uint64_t n)
{
	int found;

	pthread_mutex_lock(&cu.table_lock);
	found = find_locked(ptr, n) != NULL;
	pthread_mutex_unlock(&cu.table_lock);
	return found;
}

static int record_add(const struct cu_managed *m)
{
	pthread_mutex_lock(&cu.table_lock);
	if (cu.nmanaged == cu.managed_cap) {
		size_t cap = cu.managed_cap ? cu.managed_cap * 2 : 16;
		struct cu_managed *v = realloc(cu.managed, cap * sizeof(*v));

		if (!v) {
			pthread_mutex_unlock(&cu.table_lock);
			return -1;
		}
		cu.managed = v;
		cu.managed_cap = cap;
	}
	cu.managed[cu.nmanaged++] = *m;
	pthread_mutex_unlock(&cu.table_lock);
	return 0;
}

static int record_take(uint64_t base, struct cu_managed *out)
{
	int found = 0;

	pthread_mutex_lock(&cu.table_lock);
	for (size_t i = 0; i < cu.nmanaged; i++)
		if (cu.managed[i].base == base) {
			*out = cu.managed[i];
			cu.managed[i] = cu.managed[--cu.nmanaged];
			found = 1;
			break;
		}
	pthread_mutex_unlock(&cu.table_lock);
	return found;
}

/* Give the pinned part back to the backend (window_unregister). */
static void unpin(struct pvgpu_window_map *win, struct pvgpu_client *client,
		  int device, void *p)
{
	struct pvgpu_window_unregister_req req;
	struct pvgpu_window_unregister_rep rep;
	struct cu_ctx *cur = cu_current();
	struct cu_op op;
	uint64_t off;

	if (!pvgpu_window_holds(win, p, 1, &off))
		return;
	req.offset = off;
	if (cu_op_begin(&op, cur && cur->device == device ? cur : cu_primary(device)))
		return;
	if (op.client == client)
		pvgpu_call_window_unregister(op.client, &req, &rep);
	cu_op_end(&op);
}

CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
	struct pvgpu_managed_alloc_req req = { .flags = flags };
	struct pvgpu_managed_alloc_rep rep = { 0 };
	struct pvgpu_window_map *win;
	struct cu_ctx *ctx = cu_current();
	struct cu_op op;
	uint64_t off;
	CUresult r;
	void *p;

	if (!dptr || !bytesize ||
	    (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST))
		return CUDA_ERROR_INVALID_VALUE;
	if (!ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	win = managed_window(ctx);
	if (!win)
		return pvgpu_cuda_unsupported("cuMemAllocManaged (needs a shared window the backend maps at the program's address: shm:// or the VM window device)");
	if (bytesize > UINT64_MAX - 4095)
		return CUDA_ERROR_OUT_OF_MEMORY;
	p = pvgpu_window_alloc(win, bytesize);
	if (!p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	/* Fresh, as the driver's is (the window's parts are reused). */
	memset(p, 0, bytesize);
	pvgpu_window_holds(win, p, bytesize, &off);
	req.offset = off;
	req.size = (bytesize + 4095) & ~(uint64_t)4095;
	r = cu_op_begin(&op, ctx);
	if (r)
		goto err_free;
	r = cu_status(pvgpu_call_managed_alloc(op.client, &req, &rep));
	cu_op_end(&op);
	if (r)
		goto err_free;
	if (rep.dptr != (uint64_t)(uintptr_t)p) {
		/* The backend's answer is not ours to believe otherwise. */
		r = CUDA_ERROR_INVALID_VALUE;
		goto err_unpin;
	}
	if (record_add(&(struct cu_managed){
		.base = rep.dptr, .size = bytesize, .device = ctx->device,
		.preferred = CU_DEVICE_INVALID, .last_prefetch = CU_DEVICE_INVALID,
		.win = win, .client = op.client })) {
		r = CUDA_ERROR_OUT_OF_MEMORY;
		goto err_unpin;
	}
	if (cu_alloc_insert(&(struct cu_alloc){ .base = rep.dptr, .size = bytesize,
						.device = ctx->device, .managed = 1 })) {
		struct cu_managed m;

		record_take(rep.dptr, &m);
		r = CUDA_ERROR_OUT_OF_MEMORY;
		goto err_unpin;
	}
	*dptr = rep.dptr;
	return CUDA_SUCCESS;

err_unpin:
	unpin(win, op.client, ctx->device, p);
err_free:
	pvgpu_window_free(win, p);
	return r;
}

CUresult cu_managed_free(const struct cu_alloc *a)
{
	void *p = (void *)(uintptr_t)a->base;
	struct cu_managed m;

	if (!record_take(a->base, &m))
		return CUDA_ERROR_INVALID_VALUE;
	cu_alloc_remove(a->base);
	unpin(m.win, m.client, m.device, p);
	pvgpu_window_free(m.win, p);
	return CUDA_SUCCESS;
}

/* ---- hints: checked, remembered, moving nothing -------------------------- */

/* A location as a device number: CU_DEVICE_CPU, a device, or -3 (bad). */
static int location_device(CUmemLocation loc)
{
	switch (loc.type) {
	case CU_MEM_LOCATION_TYPE_HOST:
	case CU_MEM_LOCATION_TYPE_HOST_NUMA:
	case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
		return CU_DEVICE_CPU;
	case CU_MEM_LOCATION_TYPE_DEVICE:
		return loc.id >= 0 && loc.id < cu.ndevices ? loc.id : -3;
	default:
		return -3;
	}
}

static CUmemLocation device_location(CUdevice d)
{
	return d == CU_DEVICE_CPU ?
		(CUmemLocation){ CU_MEM_LOCATION_TYPE_HOST, 0 } :
		(CUmemLocation){ CU_MEM_LOCATION_TYPE_DEVICE, d };
}

static CUresult prefetch(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned flags,
			 CUstream s)
{
	int dev = location_device(loc);
	struct cu_managed *m;
	struct cu_ctx *ctx;
	uint64_t remote;
	CUresult r;

	if (!n || flags || dev == -3)
		return CUDA_ERROR_INVALID_VALUE;
	r = cu_stream_resolve(s, &ctx, &remote);
	if (r)
		return r;
	pthread_mutex_lock(&cu.table_lock);
	m = find_locked(p, n);
	if (m)
		m->last_prefetch = dev;
	pthread_mutex_unlock(&cu.table_lock);
	return m ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuMemPrefetchAsync_v2(CUdeviceptr p, size_t n, CUmemLocation loc,
				       unsigned int flags, CUstream s)
{
	return prefetch(p, n, loc, flags, s);
}

CUresult CUDAAPI cuMemPrefetchAsync_v2_ptsz(CUdeviceptr p, size_t n, CUmemLocation loc,
					    unsigned int flags, CUstream s)
{
	return prefetch(p, n, loc, flags, s ? s : CU_STREAM_PER_THREAD);
}

CUresult CUDAAPI cuMemPrefetchAsync(CUdeviceptr p, size_t n, CUdevice d, CUstream s)
{
	return prefetch(p, n, device_location(d), 0, s);
}

CUresult CUDAAPI cuMemPrefetchAsync_ptsz(CUdeviceptr p, size_t n, CUdevice d, CUstream s)
{
	return prefetch(p, n, device_location(d), 0, s ? s : CU_STREAM_PER_THREAD);
}

static CUresult advise(CUdeviceptr p, size_t n, CUmem_advise advice, CUmemLocation loc)
{
	int dev = location_device(loc);
	int bit = dev == CU_DEVICE_CPU ? CPU_BIT : dev;
	struct cu_managed *m;
	CUresult r = CUDA_SUCCESS;

	if (!n)
		return CUDA_ERROR_INVALID_VALUE;
	/* Read-mostly takes no location; the others a valid one. */
	if (advice != CU_MEM_ADVISE_SET_READ_MOSTLY &&
	    advice != CU_MEM_ADVISE_UNSET_READ_MOSTLY &&
	    advice != CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION && dev == -3)
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&cu.table_lock);
	m = find_locked(p, n);
	if (!m) {
		r = CUDA_ERROR_INVALID_VALUE;
	} else {
		switch (advice) {
		case CU_MEM_ADVISE_SET_READ_MOSTLY:
		case CU_MEM_ADVISE_UNSET_READ_MOSTLY:
			m->read_mostly = advice == CU_MEM_ADVISE_SET_READ_MOSTLY;
			break;
		case CU_MEM_ADVISE_SET_PREFERRED_LOCATION:
			m->preferred = dev;
			break;
		case CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION:
			m->preferred = CU_DEVICE_INVALID;
			break;
		case CU_MEM_ADVISE_SET_ACCESSED_BY:
			m->accessed_by |= 1ull << bit;
			break;
		case CU_MEM_ADVISE_UNSET_ACCESSED_BY:
			m->accessed_by &= ~(1ull << bit);
			break;
		default:
			r = CUDA_ERROR_INVALID_VALUE;
			break;
		}
	}
	pthread_mutex_unlock(&cu.table_lock);
	return r;
}

CUresult CUDAAPI cuMemAdvise_v2(CUdeviceptr p, size_t n, CUmem_advise advice, CUmemLocation loc)
{
	return advise(p, n, advice, loc);
}

CUresult CUDAAPI cuMemAdvise(CUdeviceptr p, size_t n, CUmem_advise advice, CUdevice d)
{
	return advise(p, n, advice, device_location(d));
}

/* One attribute of a range, from its allocation's record. */
static CUresult range_attr(const struct cu_managed *m, void *data, size_t size,
			   CUmem_range_attribute attr)
{
	int v;

	if (!data)
		return CUDA_ERROR_INVALID_VALUE;
	if (attr == CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY) {
		size_t k = 0;

		if (!size || size % sizeof(int))
			return CUDA_ERROR_INVALID_VALUE;
		for (int d = 0; d < cu.ndevices && k < size / sizeof(int); d++)
			if (m->accessed_by & (1ull << d))
				((int *)data)[k++] = d;
		if ((m->accessed_by & (1ull << CPU_BIT)) && k < size / sizeof(int))
			((int *)data)[k++] = CU_DEVICE_CPU;
		while (k < size / sizeof(int))
			((int *)data)[k++] = CU_DEVICE_INVALID;
		return CUDA_SUCCESS;
	}
	if (size != sizeof(int))
		return CUDA_ERROR_INVALID_VALUE;
	switch (attr) {
	case CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY:
		v = m->read_mostly;
		break;
	case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION:
		v = m->preferred;
		break;
	case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION:
		v = m->last_prefetch;
		break;
	case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE:
	case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE:
		v = attr == CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE ?
		    m->preferred : m->last_prefetch;
		v = v == CU_DEVICE_CPU ? CU_MEM_LOCATION_TYPE_HOST :
		    v == CU_DEVICE_INVALID ? CU_MEM_LOCATION_TYPE_INVALID :
		    CU_MEM_LOCATION_TYPE_DEVICE;
		break;
	case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID:
	case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID:
		v = attr == CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID ?
		    m->preferred : m->last_prefetch;
		v = v < 0 ? 0 : v;
		break;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
	*(int *)data = v;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemRangeGetAttributes(void **data, size_t *sizes,
					 CUmem_range_attribute *attrs, size_t nattrs,
					 CUdeviceptr p, size_t n)
{
	struct cu_managed m, *f;
	CUresult r = CUDA_SUCCESS;

	if (!data || !sizes || !attrs || !nattrs || !n)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&cu.table_lock);
	f = find_locked(p, n);
	if (f)
		m = *f;
	pthread_mutex_unlock(&cu.table_lock);
	if (!f)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < nattrs && !r; i++)
		r = range_attr(&m, data[i], sizes[i], attrs[i]);
	return r;
}

CUresult CUDAAPI cuMemRangeGetAttribute(void *data, size_t size, CUmem_range_attribute attr,
					CUdeviceptr p, size_t n)
{
	return cuMemRangeGetAttributes(&data, &size, &attr, 1, p, n);
}

/*
 * Which stream may reach the memory matters to a driver that migrates;
 * here every stream and the CPU always may.  Checked like the driver: a
 * whole managed allocation (length 0 or its size) and a known flag.
 */
static CUresult attach(CUstream s, CUdeviceptr p, size_t len, unsigned flags)
{
	struct cu_ctx *ctx;
	uint64_t remote;
	struct cu_alloc a;
	CUresult r;

	if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST &&
	    flags != CU_MEM_ATTACH_SINGLE)
		return CUDA_ERROR_INVALID_VALUE;
	r = cu_stream_resolve(s, &ctx, &remote);
	if (r)
		return r;
	if (!cu_alloc_find(p, &a) || !a.managed || a.base != p ||
	    (len && len != a.size))
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamAttachMemAsync(CUstream s, CUdeviceptr p, size_t len, unsigned int flags)
{
	return attach(s, p, len, flags);
}

CUresult CUDAAPI cuStreamAttachMemAsync_ptsz(CUstream s, CUdeviceptr p, size_t len,
					     unsigned int flags)
{
	return attach(s ? s : CU_STREAM_PER_THREAD, p, len, flags);
}
