/*
 * runtime_memory.c - device and host allocations, and the per-device map
 * of cudaMalloc'd ranges that lets copies find their direction and reject
 * a bad range before it reaches the wire (the backend checks again).
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "client.h"
#include "guest_window.h"
#include "pvgpu_guest.h"
#include "pvgpu_proto.h"
#include "runtime.h"

/* Index of the last allocation with base <= addr, or -1.  table_lock held. */
static long alloc_floor(const struct pvgpu_device *dev, uint64_t addr)
{
	long lo = 0, hi = (long)dev->nallocs - 1, found = -1;

	while (lo <= hi) {
		long mid = lo + (hi - lo) / 2;

		if (dev->allocs[mid].base <= addr) {
			found = mid;
			lo = mid + 1;
		} else {
			hi = mid - 1;
		}
	}
	return found;
}

static enum pvgpu_ptr_kind classify_on(const struct pvgpu_device *dev,
				       uint64_t addr, uint64_t len)
{
	long i = alloc_floor(dev, addr);
	const struct pvgpu_alloc *a;

	if (i < 0)
		return PVGPU_PTR_HOST;
	a = &dev->allocs[i];
	if (addr - a->base >= a->size)
		return PVGPU_PTR_HOST;
	return len <= a->size - (addr - a->base) ? PVGPU_PTR_DEVICE
						 : PVGPU_PTR_OVERRUN;
}

enum pvgpu_ptr_kind pvgpu_ptr_classify(const void *ptr, uint64_t len,
				       int *device)
{
	struct pvgpu_runtime *rt = &pvgpu_rt;
	uint64_t addr = (uint64_t)(uintptr_t)ptr;
	enum pvgpu_ptr_kind kind = PVGPU_PTR_HOST;
	int cur = pvgpu_current_device();

	pthread_mutex_lock(&rt->table_lock);
	/* The current device first: backends may reuse each other's addresses. */
	for (int n = 0; n < rt->ndevices && kind == PVGPU_PTR_HOST; n++) {
		int d = n == 0 ? cur : (n <= cur ? n - 1 : n);

		if (d < 0 || d >= rt->ndevices)
			continue;
		kind = classify_on(&rt->devices[d], addr, len);
		if (kind != PVGPU_PTR_HOST)
			*device = d;
	}
	pthread_mutex_unlock(&rt->table_lock);
	return kind;
}

static int alloc_insert(int device, uint64_t base, uint64_t size, int global)
{
	struct pvgpu_runtime *rt = &pvgpu_rt;
	struct pvgpu_device *dev = &rt->devices[device];
	int rc = -1;
	long i;

	pthread_mutex_lock(&rt->table_lock);
	if (dev->nallocs == dev->allocs_cap) {
		size_t cap = dev->allocs_cap ? dev->allocs_cap * 2 : 64;
		struct pvgpu_alloc *a = realloc(dev->allocs, cap * sizeof(*a));

		if (!a)
			goto out;
		dev->allocs = a;
		dev->allocs_cap = cap;
	}
	i = alloc_floor(dev, base);
	/* A backend handing out overlapping ranges is not to be believed. */
	if (i >= 0 && base - dev->allocs[i].base < dev->allocs[i].size)
		goto out;
	if ((size_t)(i + 1) < dev->nallocs && dev->allocs[i + 1].base - base < size)
		goto out;
	memmove(&dev->allocs[i + 2], &dev->allocs[i + 1],
		(dev->nallocs - (size_t)(i + 1)) * sizeof(dev->allocs[0]));
	dev->allocs[i + 1] = (struct pvgpu_alloc){ base, size, global };
	dev->nallocs++;
	rc = 0;
out:
	pthread_mutex_unlock(&rt->table_lock);
	return rc;
}

/* Take the allocation starting exactly at base out of the map. */
static int alloc_remove(uint64_t base, int global, int *device)
{
	struct pvgpu_runtime *rt = &pvgpu_rt;
	int cur = pvgpu_current_device(), rc = -1;

	pthread_mutex_lock(&rt->table_lock);
	for (int n = 0; n < rt->ndevices; n++) {
		int d = n == 0 ? cur : (n <= cur ? n - 1 : n);
		struct pvgpu_device *dev;
		long i;

		if (d < 0 || d >= rt->ndevices)
			continue;
		dev = &rt->devices[d];
		i = alloc_floor(dev, base);
		if (i < 0 || dev->allocs[i].base != base)
			continue;
		/* A module's variable lives as long as its module. */
		if (dev->allocs[i].global != global)
			break;
		memmove(&dev->allocs[i], &dev->allocs[i + 1],
			(dev->nallocs - (size_t)i - 1) * sizeof(dev->allocs[0]));
		dev->nallocs--;
		*device = d;
		rc = 0;
		break;
	}
	pthread_mutex_unlock(&rt->table_lock);
	return rc;
}

int pvgpu_alloc_track_global(int device, uint64_t base, uint64_t size)
{
	return alloc_insert(device, base, size, 1);
}

void pvgpu_alloc_untrack_global(int device, uint64_t base)
{
	struct pvgpu_runtime *rt = &pvgpu_rt;
	struct pvgpu_device *dev = &rt->devices[device];
	long i;

	pthread_mutex_lock(&rt->table_lock);
	i = alloc_floor(dev, base);
	if (i >= 0 && dev->allocs[i].base == base && dev->allocs[i].global) {
		memmove(&dev->allocs[i], &dev->allocs[i + 1],
			(dev->nallocs - (size_t)i - 1) * sizeof(dev->allocs[0]));
		dev->nallocs--;
	}
	pthread_mutex_unlock(&rt->table_lock);
}

void pvgpu_allocs_forget_device(int device)
{
	struct pvgpu_runtime *rt = &pvgpu_rt;

	pthread_mutex_lock(&rt->table_lock);
	rt->devices[device].nallocs = 0;
	pthread_mutex_unlock(&rt->table_lock);
}

cudaError_t cudaMalloc(void **devPtr, size_t size)
{
	int device = pvgpu_current_device();
	struct pvgpu_mem_alloc_req req = { .size = size };
	struct pvgpu_mem_alloc_rep rep = { 0 };
	struct pvgpu_mem_free_req free_req;
	struct pvgpu_mem_free_rep free_rep;
	struct pvgpu_op op;
	cudaError_t err;
	int32_t st;

	if (!devPtr)
		return pvgpu_record(cudaErrorInvalidValue);
	err = pvgpu_op_begin(&op, device, 1);
	if (err)
		return pvgpu_record(err);
	if (!size) {
		*devPtr = NULL;
		goto out;
	}
	st = pvgpu_call_mem_alloc(op.client, &req, &rep);
	/* A non-zero pointer exists on the device, whatever else st says. */
	if (rep.dptr && alloc_insert(device, rep.dptr, size, 0)) {
		free_req.dptr = rep.dptr;
		(void)pvgpu_call_mem_free(op.client, &free_req, &free_rep);
		rep.dptr = 0;
		if (!st)
			st = (int32_t)cudaErrorMemoryAllocation;
	}
	if (!st && !rep.dptr)
		st = PVGPU_CLIENT_EPROTO;
	if (rep.dptr)
		*devPtr = (void *)(uintptr_t)rep.dptr;
	err = pvgpu_error_from_status(st);
out:
	pvgpu_op_end(&op);
	return pvgpu_record(err);
}

cudaError_t cudaFree(void *devPtr)
{
	struct pvgpu_mem_free_req req = { .dptr = (uint64_t)(uintptr_t)devPtr };
	struct pvgpu_mem_free_rep rep;
	struct pvgpu_op op;
	cudaError_t err;
	int device;

	err = pvgpu_init();
	if (err)
		return pvgpu_record(err);
	if (!devPtr)
		return cudaSuccess;
	/* Out of the map first, so two threads cannot free it twice. */
	if (alloc_remove(req.dptr, 0, &device))
		return pvgpu_record(cudaErrorInvalidValue);
	err = pvgpu_op_begin(&op, device, 1);
	if (err)
		return pvgpu_record(err);
	err = pvgpu_error_from_status(pvgpu_call_mem_free(op.client, &req, &rep));
	pvgpu_op_end(&op);
	return pvgpu_record(err);
}

cudaError_t cudaMemGetInfo(size_t *free, size_t *total)
{
	struct pvgpu_mem_get_info_req req = { 0 };
	struct pvgpu_mem_get_info_rep rep = { 0 };
	struct pvgpu_op op;
	cudaError_t err;

	if (!free || !total)
		return pvgpu_record(cudaErrorInvalidValue);
	err = pvgpu_op_begin(&op, pvgpu_current_device(), 1);
	if (err)
		return pvgpu_record(err);
	err = pvgpu_error_from_status(pvgpu_call_mem_get_info(op.client, &req, &rep));
	pvgpu_op_end(&op);
	if (!err) {
		*free = (size_t)rep.free;
		*total = (size_t)rep.total;
	}
	return pvgpu_record(err);
}

/*
 * Pinned host memory.  Where the current device's backend shares a window
 * with us, it comes from the window, which the backend has pinned: copies
 * to and from it are straight DMA, no staging.  Otherwise (no window, or
 * the window is full) it is plain page-aligned memory of its own mapping,
 * and copies from it are staged like any other.  Absurd sizes fail cleanly,
 * as they do natively.  Tracked so that cudaFreeHost can refuse anything
 * else.
 */
static struct pvgpu_window_map *current_window(struct pvgpu_client **client)
{
	struct pvgpu_backend *be = pvgpu_rt.devices[pvgpu_current_device()].be;

	*client = be ? be->client : NULL;
	return *client ? pvgpu_client_window(*client) : NULL;
}

/*
 * A block of window memory, pinned by the backend for DMA.  NULL when the
 * window is full or the backend would not pin it: the caller falls back
 * to memory of its own.
 */
static void *window_host_alloc(struct pvgpu_client *c,
			       struct pvgpu_window_map *win, size_t size)
{
	struct pvgpu_window_register_req req;
	struct pvgpu_window_register_rep rep;
	void *p = pvgpu_window_alloc(win, size);

	if (!p)
		return NULL;
	pvgpu_window_holds(win, p, size, &req.offset);
	req.size = (size + 4095) & ~(uint64_t)4095;
	if (pvgpu_call_window_register(c, &req, &rep)) {
		pvgpu_window_free(win, p);
		return NULL;
	}
	return p;
}

static void window_host_free(struct pvgpu_client *c,
			     struct pvgpu_window_map *win, void *p)
{
	struct pvgpu_window_unregister_req req;
	struct pvgpu_window_unregister_rep rep;

	if (pvgpu_window_holds(win, p, 1, &req.offset))
		pvgpu_call_window_unregister(c, &req, &rep);
	pvgpu_window_free(win, p);
}

cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
	const unsigned int known = cudaHostAllocPortable | cudaHostAllocMapped |
				   cudaHostAllocWriteCombined;
	struct pvgpu_runtime *rt = &pvgpu_rt;
	struct pvgpu_window_map *win;
	struct pvgpu_client *client;
	void *p;
	cudaError_t err;

	if (!pHost || (flags & ~known))
		return pvgpu_record(cudaErrorInvalidValue);
	err = pvgpu_init();
	if (err)
		return pvgpu_record(err);
	if (!size) {
		*pHost = NULL;
		return cudaSuccess;
	}
	win = current_window(&client);
	p = win ? window_host_alloc(client, win, size) : NULL;
	if (!p) {
		win = NULL;
		p = mmap(NULL, size, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			return pvgpu_record(cudaErrorMemoryAllocation);
	}
	pthread_mutex_lock(&rt->table_lock);
	if (rt->nhost_allocs == rt->host_allocs_cap) {
		size_t cap = rt->host_allocs_cap ? rt->host_allocs_cap * 2 : 16;
		struct pvgpu_host_alloc *a = realloc(rt->host_allocs, cap * sizeof(*a));

		if (!a)
			goto err_unlock;
		rt->host_allocs = a;
		rt->host_allocs_cap = cap;
	}
	rt->host_allocs[rt->nhost_allocs++] =
		(struct pvgpu_host_alloc){ p, size, win, client };
	pthread_mutex_unlock(&rt->table_lock);
	*pHost = p;
	return cudaSuccess;

err_unlock:
	pthread_mutex_unlock(&rt->table_lock);
	if (win)
		window_host_free(client, win, p);
	else
		munmap(p, size);
	return pvgpu_record(cudaErrorMemoryAllocation);
}

cudaError_t cudaMallocHost(void **ptr, size_t size)
{
	return cudaHostAlloc(ptr, size, cudaHostAllocDefault);
}

cudaError_t cudaFreeHost(void *ptr)
{
	struct pvgpu_runtime *rt = &pvgpu_rt;
	struct pvgpu_window_map *win = NULL;
	struct pvgpu_client *client = NULL;
	size_t size = 0;
	cudaError_t err;
	int found = 0;

	err = pvgpu_init();
	if (err)
		return pvgpu_record(err);
	if (!ptr)
		return cudaSuccess;
	pthread_mutex_lock(&rt->table_lock);
	for (size_t i = 0; i < rt->nhost_allocs; i++) {
		if (rt->host_allocs[i].ptr == ptr) {
			size = rt->host_allocs[i].size;
			win = rt->host_allocs[i].win;
			client = rt->host_allocs[i].client;
			rt->host_allocs[i] = rt->host_allocs[--rt->nhost_allocs];
			found = 1;
			break;
		}
	}
	pthread_mutex_unlock(&rt->table_lock);
	if (!found)
		return pvgpu_record(cudaErrorInvalidValue);
	if (win)
		window_host_free(client, win, ptr);
	else
		munmap(ptr, size);
	return cudaSuccess;
}
