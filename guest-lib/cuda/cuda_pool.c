/*
 * cuda_pool.c - memory pools and stream-ordered allocation, answered in
 * the guest over forwarded allocations.
 *
 * Every byte of a pool is a real allocation on the backend (cuMemAlloc,
 * charged to the VM's quota like any other): what a pool adds is
 * bookkeeping the program can query, and that lives here.  A pool keeps
 * nothing cached: memory freed to it goes back at once, so its reserved
 * memory is its used memory and trimming has nothing to do; a program can
 * tell only by asking for RESERVED_MEM_* after a free.  Allocation is
 * made at once (usable earlier than the stream would make it, which no
 * correct program can tell); a free waits for the stream's work before it.
 * Pools shared between processes of one VM (handleTypes POSIX file
 * descriptor): the pool's shareable handle is a descriptor of the guest's
 * (cuda_ipc.c) naming the pool; each exported pointer travels as an IPC
 * memory token (cuIpcGetMemHandle, the backend's registry seeing that
 * only a process of the same VM opens it), and an imported pointer is
 * closed again by cuMemFreeAsync.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "cuda_internal.h"	/* cuda.h, as the driver is built */
#include "cuda_surface.h"

#define CU_MAGIC_POOL 0x70706f6cu

struct cu_pool {
	uint32_t magic;
	int alive;
	int device;
	int is_default;
	uint64_t max_size;		/* 0: no limit */
	uint64_t threshold;		/* CU_MEMPOOL_ATTR_RELEASE_THRESHOLD */
	int reuse[3];			/* the three REUSE_* attributes */
	uint64_t used, used_high;
	unsigned int handle_types;	/* CUmemAllocationHandleType bits */
	int imported;			/* cuMemPoolImportFromShareableHandle */
	uint8_t id[CU_SHAREABLE_TOKEN];	/* its shareable handle's content */
};

struct pool_alloc {
	uint64_t base, size;
	struct cu_pool *pool;
	int imported;			/* cuMemPoolImportPointer: IPC-opened */
};

static struct {
	pthread_mutex_t lock;
	struct cu_pool defaults[CU_MAX_DEVICES];
	struct cu_pool *current[CU_MAX_DEVICES];
	struct pool_alloc *v;
	size_t n, cap;
} pools = { .lock = PTHREAD_MUTEX_INITIALIZER };

static void pool_init(struct cu_pool *p, int device, int is_default)
{
	memset(p, 0, sizeof(*p));
	p->magic = CU_MAGIC_POOL;
	p->alive = 1;
	p->device = device;
	p->is_default = is_default;
	p->reuse[0] = p->reuse[1] = p->reuse[2] = 1;
}

static CUresult device_ok(CUdevice dev)
{
	if (!cu.initialized || cu.init_error)
		return cu.initialized ? cu.init_error : CUDA_ERROR_NOT_INITIALIZED;
	if (dev < 0 || dev >= cu.ndevices || dev >= CU_MAX_DEVICES)
		return CUDA_ERROR_INVALID_DEVICE;
	return CUDA_SUCCESS;
}

/* Under pools.lock. */
static struct cu_pool *default_pool(int dev)
{
	struct cu_pool *p = &pools.defaults[dev];

	if (p->magic != CU_MAGIC_POOL)
		pool_init(p, dev, 1);
	return p;
}

static struct cu_pool *pool_check(CUmemoryPool h)
{
	struct cu_pool *p = (struct cu_pool *)h;

	if (!p || p->magic != CU_MAGIC_POOL || !p->alive)
		return NULL;
	return p;
}

/* The device's default pool, or (current) the one cuDeviceSetMemPool set. */
static CUresult get_pool(CUmemoryPool *pool, CUdevice dev, int current)
{
	CUresult r = device_ok(dev);

	if (r)
		return r;
	if (!pool)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&pools.lock);
	*pool = (CUmemoryPool)(current && pools.current[dev] ? pools.current[dev] :
							      default_pool(dev));
	pthread_mutex_unlock(&pools.lock);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev)
{
	return get_pool(pool, dev, 0);
}

CUresult CUDAAPI cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
	return get_pool(pool, dev, 1);
}

CUresult CUDAAPI cuDeviceSetMemPool(CUdevice dev, CUmemoryPool h)
{
	CUresult r = device_ok(dev);
	struct cu_pool *p;

	if (r)
		return r;
	pthread_mutex_lock(&pools.lock);
	p = pool_check(h);
	if (!p || p->device != dev) {
		pthread_mutex_unlock(&pools.lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	pools.current[dev] = p;
	pthread_mutex_unlock(&pools.lock);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
	struct cu_pool *p;
	CUresult r;

	if (!pool || !props || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED)
		return CUDA_ERROR_INVALID_VALUE;
	if (props->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
		/* Host pools would be guest memory the GPU reads: not across a VM. */
		return props->location.type == CU_MEM_LOCATION_TYPE_HOST ||
		       props->location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA ?
		       (CUresult)pvgpu_cuda_unsupported("cuMemPoolCreate (host location)") :
		       CUDA_ERROR_INVALID_VALUE;
	}
	r = device_ok(props->location.id);
	if (r)
		return r == CUDA_ERROR_INVALID_DEVICE ? CUDA_ERROR_INVALID_VALUE : r;
	if (props->handleTypes & ~(unsigned)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return pvgpu_cuda_unsupported("cuMemPoolCreate (shareable handles but POSIX file descriptors)");
	p = malloc(sizeof(*p));		/* never freed: a stale handle stays readable */
	if (!p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pool_init(p, props->location.id, 0);
	p->max_size = props->maxSize;
	p->handle_types = props->handleTypes;
	/* Its name in a shareable handle: random, then the device. */
	if (p->handle_types &&
	    getrandom(p->id, sizeof(p->id) - 4, 0) != (ssize_t)sizeof(p->id) - 4) {
		free(p);
		return CUDA_ERROR_OPERATING_SYSTEM;
	}
	memcpy(p->id + sizeof(p->id) - 4, &p->device, 4);
	*pool = (CUmemoryPool)p;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemPoolDestroy(CUmemoryPool h)
{
	struct cu_pool *p;

	pthread_mutex_lock(&pools.lock);
	p = pool_check(h);
	if (!p || p->is_default) {
		pthread_mutex_unlock(&pools.lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	/* Its allocations stay valid until freed, as the driver keeps them. */
	p->alive = 0;
	if (pools.current[p->device] == p)
		pools.current[p->device] = NULL;
	pthread_mutex_unlock(&pools.lock);
	return CUDA_SUCCESS;
}

static int attr_is_64(CUmemPool_attribute a)
{
	return a == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD ||
	       a == CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT ||
	       a == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH ||
	       a == CU_MEMPOOL_ATTR_USED_MEM_CURRENT ||
	       a == CU_MEMPOOL_ATTR_USED_MEM_HIGH;
}

/* Read (set 0) or write (set 1) one attribute; *value is an int or a
 * cuuint64_t by the attribute, as the driver takes it. */
static CUresult pool_attr(CUmemoryPool h, CUmemPool_attribute attr, void *value, int set)
{
	int wide = attr_is_64(attr), idx = attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES;
	CUresult r = CUDA_SUCCESS;
	struct cu_pool *p;
	cuuint64_t v64 = 0;
	int v32 = 0;

	if (!value)
		return CUDA_ERROR_INVALID_VALUE;
	if (set)
		memcpy(wide ? (void *)&v64 : (void *)&v32, value, wide ? sizeof(v64) : sizeof(v32));
	pthread_mutex_lock(&pools.lock);
	p = pool_check(h);
	if (!p) {
		r = CUDA_ERROR_INVALID_VALUE;
		goto out;
	}
	switch (attr) {
	case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
	case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
	case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
		if (set)
			p->reuse[idx] = v32 != 0;
		v32 = p->reuse[idx];
		break;
	case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
		if (set)
			p->threshold = v64;
		v64 = p->threshold;
		break;
	case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:	/* nothing cached: reserved is used */
	case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
		if (set)
			r = CUDA_ERROR_INVALID_VALUE;
		v64 = p->used;
		break;
	case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
	case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
		/* Setting is only a reset, to the current value. */
		if (set && v64)
			r = CUDA_ERROR_INVALID_VALUE;
		else if (set)
			p->used_high = p->used;
		v64 = p->used_high;
		break;
	default:
		r = CUDA_ERROR_INVALID_VALUE;
	}
out:
	pthread_mutex_unlock(&pools.lock);
	if (!r && !set)
		memcpy(value, wide ? (void *)&v64 : (void *)&v32, wide ? sizeof(v64) : sizeof(v32));
	return r;
}

CUresult CUDAAPI cuMemPoolSetAttribute(CUmemoryPool h, CUmemPool_attribute attr, void *value)
{
	return pool_attr(h, attr, value, 1);
}

CUresult CUDAAPI cuMemPoolGetAttribute(CUmemoryPool h, CUmemPool_attribute attr, void *value)
{
	return pool_attr(h, attr, value, 0);
}

CUresult CUDAAPI cuMemPoolTrimTo(CUmemoryPool h, size_t keep)
{
	(void)keep;
	/* Nothing is ever cached beyond what is in use. */
	return pool_check(h) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuMemPoolSetAccess(CUmemoryPool h, const CUmemAccessDesc *map, size_t count)
{
	struct cu_pool *p = pool_check(h);

	if (!p || (count && !map))
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < count; i++) {
		if (map[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
		    device_ok(map[i].location.id))
			return CUDA_ERROR_INVALID_VALUE;
		/* The pool's own device always reads and writes it; others
		 * would be peer mappings of pool memory, not forwarded. */
		if (map[i].location.id == p->device &&
		    map[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
			return CUDA_ERROR_INVALID_DEVICE;
		if (map[i].location.id != p->device)
			return pvgpu_cuda_unsupported("cuMemPoolSetAccess (peer device)");
	}
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemPoolGetAccess(CUmemAccess_flags *flags, CUmemoryPool h,
				    CUmemLocation *location)
{
	struct cu_pool *p = pool_check(h);

	if (!p || !flags || !location || location->type != CU_MEM_LOCATION_TYPE_DEVICE ||
	    device_ok(location->id))
		return CUDA_ERROR_INVALID_VALUE;
	*flags = location->id == p->device ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE :
					     CU_MEM_ACCESS_FLAGS_PROT_NONE;
	return CUDA_SUCCESS;
}

/* ---- stream-ordered allocation ------------------------------------------ */

/* An allocation of pool p from now on (counted in its use). */
static CUresult record(CUdeviceptr dptr, size_t size, struct cu_pool *p, int imported)
{
	struct pool_alloc *v;

	pthread_mutex_lock(&pools.lock);
	if (pools.n == pools.cap) {
		size_t cap = pools.cap ? pools.cap * 2 : 64;

		v = realloc(pools.v, cap * sizeof(*v));
		if (!v) {
			pthread_mutex_unlock(&pools.lock);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		pools.v = v;
		pools.cap = cap;
	}
	pools.v[pools.n++] = (struct pool_alloc){ dptr, size, p, imported };
	p->used += size;
	if (p->used > p->used_high)
		p->used_high = p->used;
	pthread_mutex_unlock(&pools.lock);
	return CUDA_SUCCESS;
}

static CUresult alloc_from(CUdeviceptr *dptr, size_t size, struct cu_pool *p, CUstream s)
{
	struct cu_ctx *ctx;
	uint64_t remote;
	CUresult r;

	if (!dptr)
		return CUDA_ERROR_INVALID_VALUE;
	/* In a capture: an allocation node of the graph (cuda_graphmem.c). */
	if (!p && size && cu_graph_mem_captured(s, size, dptr, &r))
		return r;
	r = cu_stream_resolve(s, &ctx, &remote);
	if (r)
		return r;
	pthread_mutex_lock(&pools.lock);
	if (!p)
		p = pools.current[ctx->device] ? pools.current[ctx->device] :
						 default_pool(ctx->device);
	else if (!pool_check((CUmemoryPool)p) || p->imported)
		r = CUDA_ERROR_INVALID_VALUE;	/* an imported pool only maps pointers */
	else if (p->max_size && (size > p->max_size || p->used > p->max_size - size))
		r = CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_unlock(&pools.lock);
	if (r)
		return r;
	/* The memory is made in the stream's context, on its device. */
	if (p->device != ctx->device)
		return pvgpu_cuda_unsupported("cuMemAllocFromPoolAsync (a pool of another device)");
	r = cuMemAlloc_v2(dptr, size);
	if (r)
		return r;
	r = record(*dptr, size, p, 0);
	if (r)
		cuMemFree_v2(*dptr);
	return r;
}

static CUresult free_async(CUdeviceptr dptr, CUstream s)
{
	struct cu_alloc a;
	int imported = 0;
	CUresult r;

	if (!dptr)
		return CUDA_SUCCESS;	/* as cuMemFree(0): cuSPARSE frees so */
	if (!cu_alloc_find(dptr, &a) || a.base != dptr)
		return CUDA_ERROR_INVALID_VALUE;
	/* In a capture: a free node of the graph (cuda_graphmem.c). */
	if (cu_graph_mem_captured(s, 0, &dptr, &r))
		return r;
	r = cuStreamSynchronize(s);
	if (r)
		return r;
	pthread_mutex_lock(&pools.lock);
	for (size_t i = 0; i < pools.n; i++)
		if (pools.v[i].base == dptr)
			imported = pools.v[i].imported;
	pthread_mutex_unlock(&pools.lock);
	/* Another process's, imported: closed, as the driver does. */
	r = imported ? cuIpcCloseMemHandle(dptr) : cuMemFree_v2(dptr);
	if (r)
		return r;
	pthread_mutex_lock(&pools.lock);
	for (size_t i = 0; i < pools.n; i++) {
		if (pools.v[i].base != dptr)
			continue;
		pools.v[i].pool->used -= pools.v[i].size;
		pools.v[i] = pools.v[--pools.n];
		break;
	}
	pthread_mutex_unlock(&pools.lock);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream s)
{ return alloc_from(dptr, size, NULL, s); }
CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t size, CUstream s)
{ return alloc_from(dptr, size, NULL, s ? s : CU_STREAM_PER_THREAD); }
CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t size, CUmemoryPool pool,
					 CUstream s)
{ return pool ? alloc_from(dptr, size, (struct cu_pool *)pool, s) : CUDA_ERROR_INVALID_VALUE; }
CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t size,
					      CUmemoryPool pool, CUstream s)
{
	return pool ? alloc_from(dptr, size, (struct cu_pool *)pool, s ? s : CU_STREAM_PER_THREAD) :
		      CUDA_ERROR_INVALID_VALUE;
}
CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream s)
{ return free_async(dptr, s); }
CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s)
{ return free_async(dptr, s ? s : CU_STREAM_PER_THREAD); }

/* ---- pools shared between processes of one VM --------------------------- */

CUresult CUDAAPI cuMemPoolExportToShareableHandle(void *handle_out, CUmemoryPool h,
						  CUmemAllocationHandleType type,
						  unsigned long long flags)
{
	struct cu_pool *p = pool_check(h);
	int fd;

	if (!p || !handle_out || flags || p->imported)
		return CUDA_ERROR_INVALID_VALUE;
	if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || !(p->handle_types & type))
		return CUDA_ERROR_INVALID_VALUE;
	fd = cu_shareable_fd(CU_SHAREABLE_POOL, p->id);
	if (fd < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*(int *)handle_out = fd;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemPoolImportFromShareableHandle(CUmemoryPool *pool_out, void *handle,
						    CUmemAllocationHandleType type,
						    unsigned long long flags)
{
	uint8_t id[CU_SHAREABLE_TOKEN];
	struct cu_pool *p;
	int dev;
	CUresult r;

	if (!pool_out || flags || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_INVALID_VALUE;
	r = cu_shareable_read((int)(intptr_t)handle, CU_SHAREABLE_POOL, id);
	if (r)
		return r;
	memcpy(&dev, id + sizeof(id) - 4, 4);
	r = device_ok(dev);
	if (r)
		return r == CUDA_ERROR_INVALID_DEVICE ? CUDA_ERROR_INVALID_VALUE : r;
	p = malloc(sizeof(*p));		/* never freed, as cuMemPoolCreate's */
	if (!p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pool_init(p, dev, 0);
	p->handle_types = type;
	p->imported = 1;
	memcpy(p->id, id, sizeof(id));
	*pool_out = (CUmemoryPool)p;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemPoolExportPointer(CUmemPoolPtrExportData *out, CUdeviceptr ptr)
{
	struct cu_pool *p = NULL;
	CUipcMemHandle h;
	CUresult r;

	if (!out || !ptr)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&pools.lock);
	for (size_t i = 0; i < pools.n; i++)
		if (pools.v[i].base == ptr && !pools.v[i].imported)
			p = pools.v[i].pool;
	pthread_mutex_unlock(&pools.lock);
	if (!p || !p->handle_types)
		return CUDA_ERROR_INVALID_VALUE;	/* not of an exportable pool */
	r = cuIpcGetMemHandle(&h, ptr);
	if (!r)
		memcpy(out->reserved, h.reserved, sizeof(out->reserved));
	return r;
}

CUresult CUDAAPI cuMemPoolImportPointer(CUdeviceptr *ptr, CUmemoryPool h,
					CUmemPoolPtrExportData *data)
{
	struct cu_pool *p = pool_check(h);
	CUipcMemHandle ipc;
	struct cu_alloc a;
	CUresult r;

	if (!ptr || !data || !p || !p->imported)
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(ipc.reserved, data->reserved, sizeof(ipc.reserved));
	r = cuIpcOpenMemHandle_v2(ptr, ipc, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
	if (r)
		return r;
	if (!cu_alloc_find(*ptr, &a))
		a.size = 0;
	r = record(*ptr, a.size, p, 1);
	if (r)
		cuIpcCloseMemHandle(*ptr);
	return r;
}
