/*
 * cuda_init.c - pvgpu's libcuda.so.1: finding the backends, the device list
 * and what cannot change about each device (fetched once, at cuInit), the
 * driver's version and error names, and contexts (primary and created,
 * with the per-thread current-context stack the driver defines).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "cuda_surface.h"
#include "config_env.h"
#include "debug.h"
#include "devices.h"
#include "pvgpu_guest.h"

#define PVGPU_DRIVER_VERSION	13000
#define CTX_STACK		64

struct cu_state cu = {
	.once = PTHREAD_ONCE_INIT,
	.init_error = CUDA_ERROR_NOT_INITIALIZED,
	.table_lock = PTHREAD_MUTEX_INITIALIZER,
};

static _Thread_local struct cu_ctx *ctx_stack[CTX_STACK];
static _Thread_local int ctx_depth;	/* entries; the top is current */
static atomic_ullong next_id = 1;

int pvgpu_cuda_unsupported(const char *name)
{
	pvgpu_debug("%s: not supported by pvgpu", name);
	return CUDA_ERROR_NOT_SUPPORTED;
}

/*
 * The configuration: the PVGPU_* variables, read once, by the one reader
 * every front-end shares (guest-lib/frontend/).
 */
static struct pvgpu_client_config cu_cfg;

const char *cu_config_devices(void)
{
	return cu_cfg.devices[0] ? cu_cfg.devices : PVGPU_CLIENT_DEFAULT_DEVICES;
}

CUresult cu_status(int32_t st)
{
	if (st == PVGPU_CLIENT_EIO || st == PVGPU_CLIENT_EPROTO)
		return CUDA_ERROR_DEVICE_UNAVAILABLE;
	if (st < 0)
		return CUDA_ERROR_INVALID_VALUE;
	return (CUresult)st;
}

static int backend_of(const char *uri)
{
	for (int i = 0; i < cu.nbackends; i++)
		if (!strcmp(cu.backends[i].uri, uri))
			return i;
	snprintf(cu.backends[cu.nbackends].uri,
		 sizeof(cu.backends[0].uri), "%s", uri);
	pthread_mutex_init(&cu.backends[cu.nbackends].lock, NULL);
	return cu.nbackends++;
}

/*
 * What the program may do with host memory and managed memory is what
 * pvgpu gives it (cuda_managed.c), not what the host's driver does: managed
 * memory and GPU access to host memory by its own pointer only in a window
 * the backend maps at our address, where the CPU and the GPU may always
 * touch it at once; never pageable memory of ours.
 */
static void managed_attributes(struct cu_device *d)
{
	int win = cu_managed_window((int)(d - cu.devices)) &&
		  d->attr[CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM];

	d->attr[CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY] = win;
	d->attr[CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS] = win;
	d->attr[CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM] = win;
	d->attr[CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS] = 0;
	d->attr[CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES] = 0;
	d->attr[CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST] = 0;
}

/* Everything about a device that cannot change, in a few calls. */
static void fetch_device(struct cu_device *d)
{
	struct pvgpu_client *c = d->be->client;
	struct pvgpu_device_get_attributes_req areq = { .device = d->remote };
	struct pvgpu_device_get_attributes_rep arep;
	struct pvgpu_device_get_name_req nreq = { .device = d->remote };
	struct pvgpu_device_get_name_rep nrep;
	struct pvgpu_device_get_uuid_req ureq = { .device = d->remote };
	struct pvgpu_device_get_uuid_rep urep;
	struct pvgpu_device_total_mem_req treq = { .device = d->remote };
	struct pvgpu_device_total_mem_rep trep;

	memset(&arep, 0, sizeof(arep));
	areq.attrs_count = CU_ATTR_SLOTS - 1;
	for (int a = 1; a < CU_ATTR_SLOTS; a++)
		areq.attrs[a - 1] = a;
	if (!pvgpu_call_device_get_attributes(c, &areq, &arep) &&
	    arep.values_count == areq.attrs_count) {
		for (int a = 1; a < CU_ATTR_SLOTS; a++)
			d->attr[a] = arep.values[a - 1];
	} else {
		/* Some attribute the backend does not know: one at a time. */
		for (int a = 1; a < CU_ATTR_SLOTS; a++) {
			areq.attrs_count = 1;
			areq.attrs[0] = a;
			memset(&arep, 0, sizeof(arep));
			if (!pvgpu_call_device_get_attributes(c, &areq, &arep) &&
			    arep.values_count == 1)
				d->attr[a] = arep.values[0];
		}
	}
	managed_attributes(d);
	memset(&nrep, 0, sizeof(nrep));
	if (!pvgpu_call_device_get_name(c, &nreq, &nrep))
		snprintf(d->name, sizeof(d->name), "%.*s", (int)nrep.name_len,
			 nrep.name);
	else
		snprintf(d->name, sizeof(d->name), "pvgpu device");
	memset(&urep, 0, sizeof(urep));
	if (!pvgpu_call_device_get_uuid(c, &ureq, &urep) && urep.uuid_len == 16)
		memcpy(d->uuid, urep.uuid, 16);
	memset(&trep, 0, sizeof(trep));
	if (!pvgpu_call_device_total_mem(c, &treq, &trep))
		d->total_mem = trep.bytes;
}

static void add_device(int backend, int index)
{
	struct cu_device *devs;

	for (int i = 0; i < cu.ndevices; i++)
		if (cu.devices[i].be == &cu.backends[backend] &&
		    cu.devices[i].remote == index)
			return;
	if (cu.ndevices >= CU_MAX_DEVICES)
		return;
	devs = realloc(cu.devices, (size_t)(cu.ndevices + 1) * sizeof(*devs));
	if (!devs)
		return;
	cu.devices = devs;
	memset(&devs[cu.ndevices], 0, sizeof(devs[0]));
	devs[cu.ndevices].be = &cu.backends[backend];
	devs[cu.ndevices].remote = index;
	cu.ndevices++;
}

static void init_once(void)
{
	struct pvgpu_device_entry *entries;
	int n, *backend;

	pvgpu_config_from_env(&cu_cfg);
	n = pvgpu_devices_parse(cu_config_devices(), &entries);
	backend = n < 0 ? NULL : calloc((size_t)n + 1, sizeof(*backend));
	cu.backends = backend ? calloc((size_t)n + 1, sizeof(*cu.backends)) : NULL;
	if (!cu.backends) {
		free(backend);
		free(entries);
		cu.init_error = CUDA_ERROR_OUT_OF_MEMORY;
		return;
	}
	for (int i = 0; i < n; i++)
		backend[i] = backend_of(entries[i].uri);
	for (int i = 0; i < cu.nbackends; i++) {
		char err[256] = "";

		if (pvgpu_client_open(cu.backends[i].uri, &cu_cfg,
				      &cu.backends[i].client, err, sizeof(err))) {
			cu.backends[i].client = NULL;
			pvgpu_debug("cannot use %s: %s", cu.backends[i].uri, err);
		}
	}
	for (int i = 0; i < n; i++) {
		struct cu_backend *be = &cu.backends[backend[i]];
		int first, end;

		if (!be->client)
			continue;
		pvgpu_device_entry_gpus(&entries[i],
					pvgpu_client_info(be->client)->device_count,
					&first, &end);
		for (int g = first; g < end; g++)
			add_device(backend[i], g);
	}
	free(backend);
	free(entries);
	for (int i = 0; i < cu.ndevices; i++)
		fetch_device(&cu.devices[i]);
	cu.init_error = cu.ndevices ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
	cu.initialized = 1;
}

CUresult cu_init(void)
{
	pthread_once(&cu.once, init_once);
	return cu.init_error;
}

/*
 * At exit: tell each backend goodbye so it frees the session at once (and,
 * under PVGPU_DEBUG, say what went over the wire).
 */
__attribute__((destructor)) static void cu_fini(void)
{
	if (!cu.initialized)
		return;
	for (int i = 0; i < cu.nbackends; i++)
		if (cu.backends[i].client)
			pvgpu_client_exit(cu.backends[i].client);
}

CUresult CUDAAPI cuInit(unsigned int Flags)
{
	if (Flags)
		return CUDA_ERROR_INVALID_VALUE;
	return cu_init();
}

CUresult CUDAAPI cuDriverGetVersion(int *driverVersion)
{
	if (!driverVersion)
		return CUDA_ERROR_INVALID_VALUE;
	*driverVersion = PVGPU_DRIVER_VERSION;
	return CUDA_SUCCESS;
}

/* ---- devices: answered from what cuInit fetched ---------------------- */

static CUresult dev_check(CUdevice dev)
{
	if (!cu.initialized || cu.init_error)
		return cu.initialized ? cu.init_error : CUDA_ERROR_NOT_INITIALIZED;
	if (dev < 0 || dev >= cu.ndevices)
		return CUDA_ERROR_INVALID_DEVICE;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal)
{
	CUresult r = dev_check(ordinal);

	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	if (!r)
		*device = ordinal;
	return r;
}

CUresult CUDAAPI cuDeviceGetCount(int *count)
{
	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	if (!cu.initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	*count = cu.init_error ? 0 : cu.ndevices;
	return cu.init_error == CUDA_ERROR_NO_DEVICE ? CUDA_SUCCESS : cu.init_error;
}

CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev)
{
	CUresult r = dev_check(dev);

	if (!name || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (!r)
		snprintf(name, (size_t)len, "%s", cu.devices[dev].name);
	return r;
}

CUresult CUDAAPI cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
	CUresult r = dev_check(dev);

	if (!uuid)
		return CUDA_ERROR_INVALID_VALUE;
	if (!r)
		memcpy(uuid->bytes, cu.devices[dev].uuid, 16);
	return r;
}

CUresult CUDAAPI cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
	return cuDeviceGetUuid_v2(uuid, dev);
}

CUresult CUDAAPI cuDeviceGetLuid(char *luid, unsigned int *mask, CUdevice dev)
{
	(void)luid;
	(void)mask;
	return dev_check(dev) ? dev_check(dev) : (CUresult)pvgpu_cuda_unsupported("cuDeviceGetLuid");
}

CUresult CUDAAPI cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
	CUresult r = dev_check(dev);

	if (!bytes)
		return CUDA_ERROR_INVALID_VALUE;
	if (!r)
		*bytes = cu.devices[dev].total_mem;
	return r;
}

CUresult CUDAAPI cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
	CUresult r = dev_check(dev);

	if (!pi || (int)attrib <= 0 || (int)attrib >= CU_ATTR_SLOTS)
		return CUDA_ERROR_INVALID_VALUE;
	if (!r)
		*pi = cu.devices[dev].attr[attrib];
	return r;
}

CUresult CUDAAPI cuDeviceComputeCapability(int *major, int *minor, CUdevice dev)
{
	CUresult r = dev_check(dev);

	if (!major || !minor)
		return CUDA_ERROR_INVALID_VALUE;
	if (!r) {
		*major = cu.devices[dev].attr[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR];
		*minor = cu.devices[dev].attr[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR];
	}
	return r;
}

CUresult CUDAAPI cuDeviceGetProperties(CUdevprop *p, CUdevice dev)
{
	CUresult r = dev_check(dev);
	const int32_t *a;

	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	if (r)
		return r;
	a = cu.devices[dev].attr;
	memset(p, 0, sizeof(*p));
	p->maxThreadsPerBlock = a[CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK];
	p->maxThreadsDim[0] = a[CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X];
	p->maxThreadsDim[1] = a[CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y];
	p->maxThreadsDim[2] = a[CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z];
	p->maxGridSize[0] = a[CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X];
	p->maxGridSize[1] = a[CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y];
	p->maxGridSize[2] = a[CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z];
	p->sharedMemPerBlock = a[CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK];
	p->totalConstantMemory = a[CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY];
	p->SIMDWidth = a[CU_DEVICE_ATTRIBUTE_WARP_SIZE];
	p->memPitch = a[CU_DEVICE_ATTRIBUTE_MAX_PITCH];
	p->regsPerBlock = a[CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK];
	p->clockRate = a[CU_DEVICE_ATTRIBUTE_CLOCK_RATE];
	p->textureAlign = a[CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT];
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
	CUresult r = dev_check(dev);
	const int32_t *a;

	if (!pciBusId || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (r)
		return r;
	a = cu.devices[dev].attr;
	snprintf(pciBusId, (size_t)len, "%08x:%02x:%02x.0",
		 (unsigned)a[CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID],
		 (unsigned)a[CU_DEVICE_ATTRIBUTE_PCI_BUS_ID],
		 (unsigned)a[CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID]);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetByPCIBusId(CUdevice *dev, const char *pciBusId)
{
	char id[64];

	if (!dev || !pciBusId)
		return CUDA_ERROR_INVALID_VALUE;
	for (int i = 0; i < cu.ndevices; i++) {
		cuDeviceGetPCIBusId(id, sizeof(id), i);
		if (!strcasecmp(id, pciBusId) || !strcasecmp(id + 4, pciBusId)) {
			*dev = i;
			return CUDA_SUCCESS;
		}
	}
	return CUDA_ERROR_INVALID_DEVICE;
}

/*
 * Peers.  Devices of one backend are peers as the host's driver says (the
 * backend checks the VM's `gpus` too); devices of two backends share no
 * memory and never are: copies between them are staged (cuda_mem.c).
 */
static int same_backend(CUdevice a, CUdevice b)
{
	return cu.devices[a].be == cu.devices[b].be;
}

/* A call about devices, in no context: dev's backend locked, or why not. */
static CUresult device_op(struct cu_op *op, CUdevice dev)
{
	op->be = cu.devices[dev].be;
	op->client = op->be->client;
	op->ctx = NULL;
	pthread_mutex_lock(&op->be->lock);
	if (!op->client) {
		pthread_mutex_unlock(&op->be->lock);
		return CUDA_ERROR_DEVICE_UNAVAILABLE;
	}
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceCanAccessPeer(int *can, CUdevice dev, CUdevice peer)
{
	struct pvgpu_device_can_access_peer_req req;
	struct pvgpu_device_can_access_peer_rep rep = { 0 };
	struct cu_op op;
	CUresult r = dev_check(dev);

	if (!r)
		r = dev_check(peer);
	if (r)
		return r;
	if (!can)
		return CUDA_ERROR_INVALID_VALUE;
	if (dev == peer || !same_backend(dev, peer)) {
		*can = 0;
		return CUDA_SUCCESS;
	}
	req.device = cu.devices[dev].remote;
	req.peer = cu.devices[peer].remote;
	r = device_op(&op, dev);
	if (r)
		return r;
	r = cu_status(pvgpu_call_device_can_access_peer(op.client, &req, &rep));
	cu_op_end(&op);
	if (!r)
		*can = rep.can_access != 0;
	return r;
}

CUresult CUDAAPI cuDeviceGetP2PAttribute(int *value, CUdevice_P2PAttribute attrib,
					 CUdevice src, CUdevice dst)
{
	struct pvgpu_device_p2p_attribute_req req;
	struct pvgpu_device_p2p_attribute_rep rep = { 0 };
	struct cu_op op;
	CUresult r = dev_check(src);

	if (!r)
		r = dev_check(dst);
	if (r)
		return r;
	if (!value)
		return CUDA_ERROR_INVALID_VALUE;
	/* As the driver: a device is not its own peer. */
	if (src == dst)
		return CUDA_ERROR_INVALID_DEVICE;
	if (!same_backend(src, dst)) {
		if (attrib < CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK ||
		    attrib > CU_DEVICE_P2P_ATTRIBUTE_ONLY_PARTIAL_NATIVE_ATOMIC_SUPPORTED)
			return CUDA_ERROR_INVALID_VALUE;
		*value = 0;	/* no access, no atomics, rank 0 */
		return CUDA_SUCCESS;
	}
	req.attrib = (int32_t)attrib;
	req.src_device = cu.devices[src].remote;
	req.dst_device = cu.devices[dst].remote;
	r = device_op(&op, src);
	if (r)
		return r;
	r = cu_status(pvgpu_call_device_p2p_attribute(op.client, &req, &rep));
	cu_op_end(&op);
	if (!r)
		*value = rep.value;
	return r;
}

/* ---- contexts -------------------------------------------------------- */

struct cu_ctx *cu_current(void)
{
	return ctx_depth ? ctx_stack[ctx_depth - 1] : NULL;
}

void cu_set_current(struct cu_ctx *ctx)
{
	if (!ctx) {
		if (ctx_depth)
			ctx_depth--;
		return;
	}
	if (!ctx_depth)
		ctx_depth = 1;
	ctx_stack[ctx_depth - 1] = ctx;
}

CUresult cu_ctx_enter(CUcontext ctx)
{
	return ctx ? cuCtxPushCurrent(ctx) : CUDA_SUCCESS;
}

CUresult cu_ctx_leave(CUcontext ctx, CUresult r)
{
	CUcontext old = NULL;
	CUresult e = ctx ? cuCtxPopCurrent(&old) : CUDA_SUCCESS;

	return r ? r : e;
}

struct cu_ctx *cu_ctx_check(CUcontext c)
{
	struct cu_ctx *ctx = (struct cu_ctx *)c;

	if (!ctx || ctx->magic != CU_MAGIC_CTX || !ctx->alive)
		return NULL;
	return ctx;
}

static struct cu_ctx *ctx_new(int device, int primary, unsigned flags)
{
	struct cu_ctx *ctx = calloc(1, sizeof(*ctx));

	if (!ctx)
		return NULL;
	ctx->magic = CU_MAGIC_CTX;
	ctx->alive = 1;
	ctx->device = device;
	ctx->is_primary = primary;
	ctx->flags = flags;
	ctx->id = atomic_fetch_add(&next_id, 1);
	return ctx;
}

/* The device's primary context struct (made once; alive while retained). */
struct cu_ctx *cu_primary(int device)
{
	struct cu_device *d = &cu.devices[device];

	pthread_mutex_lock(&cu.table_lock);
	if (!d->primary)
		d->primary = ctx_new(device, 1, 0);
	pthread_mutex_unlock(&cu.table_lock);
	return d->primary;
}

/* ctx's context on the backend, made there on first use; under its lock. */
static int32_t remote_ctx(struct cu_op *op, struct cu_ctx *ctx)
{
	struct cu_device *d = &cu.devices[ctx->device];
	struct pvgpu_ctx_create_req req = { .device = d->remote };
	struct pvgpu_ctx_create_rep rep = { 0 };
	int32_t st;

	if (ctx->remote)
		return 0;
	st = pvgpu_call_ctx_create(op->client, &req, &rep);
	if (!st && !rep.ctx)
		st = PVGPU_CLIENT_EPROTO;
	if (st)
		return st;
	ctx->remote = rep.ctx;
	/* Every context of a device is one on the backend. */
	if (d->primary && !d->primary->remote)
		d->primary->remote = rep.ctx;
	return 0;
}

CUresult cu_op_begin(struct cu_op *op, struct cu_ctx *ctx)
{
	struct cu_device *d;
	int32_t st;

	if (!ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	d = &cu.devices[ctx->device];
	op->be = d->be;
	op->client = d->be->client;
	op->ctx = ctx;
	pthread_mutex_lock(&op->be->lock);
	if (!op->client) {
		pthread_mutex_unlock(&op->be->lock);
		return CUDA_ERROR_DEVICE_UNAVAILABLE;
	}
	st = remote_ctx(op, ctx);
	if (st) {
		pthread_mutex_unlock(&op->be->lock);
		return cu_status(st);
	}
	if (op->be->current_ctx != ctx->remote) {
		struct pvgpu_ctx_set_req req = { .ctx = ctx->remote };

		st = pvgpu_call_ctx_set(op->client, &req);
		if (st) {
			pthread_mutex_unlock(&op->be->lock);
			return cu_status(st);
		}
		op->be->current_ctx = ctx->remote;
	}
	return CUDA_SUCCESS;
}

CUresult cu_op_peer(struct cu_op *op, struct cu_ctx *peer, uint64_t *remote)
{
	int32_t st;

	if (cu.devices[peer->device].be != op->be)
		return CUDA_ERROR_INVALID_CONTEXT;
	st = remote_ctx(op, peer);
	if (st)
		return cu_status(st);
	*remote = peer->remote;
	return CUDA_SUCCESS;
}

CUresult cu_op_current(struct cu_op *op)
{
	struct cu_ctx *ctx = cu_current();

	if (!cu.initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!ctx || !ctx->alive)
		return CUDA_ERROR_INVALID_CONTEXT;
	return cu_op_begin(op, ctx);
}

void cu_op_end(struct cu_op *op)
{
	pthread_mutex_unlock(&op->be->lock);
}

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	CUresult r = dev_check(dev);
	struct cu_ctx *ctx;

	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	if (r)
		return r;
	ctx = cu_primary(dev);
	if (!ctx)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&cu.table_lock);
	cu.devices[dev].primary_refs++;
	ctx->alive = 1;
	pthread_mutex_unlock(&cu.table_lock);
	*pctx = (CUcontext)ctx;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
	CUresult r = dev_check(dev);

	if (r)
		return r;
	pthread_mutex_lock(&cu.table_lock);
	if (cu.devices[dev].primary_refs > 0)
		cu.devices[dev].primary_refs--;
	pthread_mutex_unlock(&cu.table_lock);
	/* The context stays on the backend: its modules are worth keeping. */
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev)
{
	return cuDevicePrimaryCtxRelease_v2(dev);
}

CUresult CUDAAPI cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
	CUresult r = dev_check(dev);

	if (r)
		return r;
	cu.devices[dev].primary_flags = flags;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags)
{
	return cuDevicePrimaryCtxSetFlags_v2(dev, flags);
}

CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
	CUresult r = dev_check(dev);

	if (!flags || !active)
		return CUDA_ERROR_INVALID_VALUE;
	if (r)
		return r;
	*flags = cu.devices[dev].primary_flags;
	*active = cu.devices[dev].primary_refs > 0;
	return CUDA_SUCCESS;
}

void cu_cls_destroy_ctx(struct cu_ctx *ctx);

CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
	CUresult r = dev_check(dev);
	struct cu_ctx *ctx;
	struct cu_op op;

	if (r)
		return r;
	ctx = cu_primary(dev);
	if (ctx && ctx->remote && !cu_op_begin(&op, ctx)) {
		struct pvgpu_ctx_synchronize_req req;
		struct pvgpu_ctx_synchronize_rep rep;

		pvgpu_call_ctx_synchronize(op.client, &req, &rep);
		cu_op_end(&op);
	}
	if (ctx)
		cu_cls_destroy_ctx(ctx);
	pthread_mutex_lock(&cu.table_lock);
	cu.devices[dev].primary_refs = 0;
	pthread_mutex_unlock(&cu.table_lock);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice dev)
{
	return cuDevicePrimaryCtxReset_v2(dev);
}

CUresult CUDAAPI cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params,
				unsigned int flags, CUdevice dev)
{
	CUresult r = dev_check(dev);
	struct cu_ctx *ctx;

	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	if (r)
		return r;
	if (params && (params->execAffinityParams || params->cigParams))
		return pvgpu_cuda_unsupported("cuCtxCreate_v4 with exec affinity or CIG");
	ctx = ctx_new(dev, 0, flags);
	if (!ctx)
		return CUDA_ERROR_OUT_OF_MEMORY;
	/* One context per device on the backend: share the primary's. */
	ctx->remote = cu_primary(dev)->remote;
	if (ctx_depth < CTX_STACK)
		ctx_stack[ctx_depth++] = ctx;
	*pctx = (CUcontext)ctx;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	return cuCtxCreate_v4(pctx, NULL, flags, dev);
}

CUresult CUDAAPI cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	return cuCtxCreate_v4(pctx, NULL, flags, dev);
}

CUresult CUDAAPI cuCtxDestroy_v2(CUcontext c)
{
	struct cu_ctx *ctx = cu_ctx_check(c);

	if (!ctx || ctx->is_primary)
		return CUDA_ERROR_INVALID_CONTEXT;
	cuCtxSynchronize_v2(c);
	cu_cls_destroy_ctx(ctx);
	ctx->alive = 0;
	for (int i = 0; i < ctx_depth; i++)
		if (ctx_stack[i] == ctx) {
			memmove(&ctx_stack[i], &ctx_stack[i + 1],
				(size_t)(ctx_depth - i - 1) * sizeof(ctx_stack[0]));
			ctx_depth--;
			i--;
		}
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxDestroy(CUcontext c)
{
	return cuCtxDestroy_v2(c);
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx)
{
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	if (!cu.initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	*pctx = (CUcontext)cu_current();
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext c)
{
	struct cu_ctx *ctx = (struct cu_ctx *)c;

	if (!cu.initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (ctx && !cu_ctx_check(c))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!ctx) {
		ctx_depth = 0;
		return CUDA_SUCCESS;
	}
	cu_set_current(ctx);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext c)
{
	struct cu_ctx *ctx = cu_ctx_check(c);

	if (!ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (ctx_depth >= CTX_STACK)
		return CUDA_ERROR_OUT_OF_MEMORY;
	ctx_stack[ctx_depth++] = ctx;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPushCurrent(CUcontext c)
{
	return cuCtxPushCurrent_v2(c);
}

CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext *pctx)
{
	if (!ctx_depth)
		return CUDA_ERROR_INVALID_CONTEXT;
	ctx_depth--;
	if (pctx)
		*pctx = (CUcontext)ctx_stack[ctx_depth];
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxPopCurrent(CUcontext *pctx)
{
	return cuCtxPopCurrent_v2(pctx);
}

static struct cu_ctx *ctx_or_current(CUcontext c)
{
	return c ? cu_ctx_check(c) : cu_current();
}

CUresult CUDAAPI cuCtxGetDevice_v2(CUdevice *device, CUcontext c)
{
	struct cu_ctx *ctx = ctx_or_current(c);

	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	if (!ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	*device = ctx->device;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetDevice(CUdevice *device)
{
	return cuCtxGetDevice_v2(device, NULL);
}

CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext c)
{
	struct cu_ctx *ctx = ctx_or_current(c);
	struct cu_op op;
	uint64_t seq;
	CUresult r;

	if (!ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	seq = cu_staged_seq();
	r = cu_op_begin(&op, ctx);
	if (r)
		return r;
	r = cu_status(pvgpu_client_wait(op.client, PVGPU_IDLE_CTX, 0, ctx->remote, 0));
	cu_op_end(&op);
	return r ? r : cu_staged_sync(ctx, 0, 1, seq);
}

CUresult CUDAAPI cuCtxSynchronize(void)
{
	return cuCtxSynchronize_v2(NULL);
}

CUresult CUDAAPI cuCtxGetFlags(unsigned int *flags)
{
	struct cu_ctx *ctx = cu_current();

	if (!flags)
		return CUDA_ERROR_INVALID_VALUE;
	if (!ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	*flags = ctx->is_primary ? cu.devices[ctx->device].primary_flags : ctx->flags;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetFlags(unsigned int flags)
{
	struct cu_ctx *ctx = cu_current();

	if (!ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (ctx->is_primary)
		cu.devices[ctx->device].primary_flags = flags;
	else
		ctx->flags = flags;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetApiVersion(CUcontext c, unsigned int *version)
{
	if (!version)
		return CUDA_ERROR_INVALID_VALUE;
	if (!ctx_or_current(c))
		return CUDA_ERROR_INVALID_CONTEXT;
	*version = 3020;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetId(CUcontext c, unsigned long long *id)
{
	struct cu_ctx *ctx = ctx_or_current(c);

	if (!id)
		return CUDA_ERROR_INVALID_VALUE;
	if (!ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	*id = ctx->id;
	return CUDA_SUCCESS;
}

/* Limits and cache preferences: remembered, as a driver with one size. */
CUresult CUDAAPI cuCtxGetSharedMemConfig(CUsharedconfig *config)
{
	if (!config)
		return CUDA_ERROR_INVALID_VALUE;
	*config = CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetSharedMemConfig(CUsharedconfig config)
{
	(void)config;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetExecAffinity(CUexecAffinityParam *p, CUexecAffinityType type)
{
	(void)p;
	(void)type;
	return CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY;
}

/*
 * The current context gains (or loses) access to peer's memory.  As
 * NVIDIA's driver answers: no current context or a bad peer is
 * CUDA_ERROR_INVALID_CONTEXT; a peer on the current context's own device
 * (itself included) CUDA_ERROR_INVALID_DEVICE, which NVIDIA's runtime
 * passes on as cudaErrorInvalidDevice for cudaDeviceEnablePeerAccess of
 * the current device (tests/programs/peer.cu, natively); another
 * backend's device, which shares no memory, CUDA_ERROR_PEER_ACCESS_UNSUPPORTED
 * (and access to it was never enabled).  The backend answers the rest
 * (already enabled or not enabled, too many peers, the VM's `gpus`).
 * pvgpu holds one context per device on the backend, so access is granted
 * device to device: another context of the same device finds it enabled.
 */
static CUresult peer_access(CUcontext peer, unsigned int flags, int enable)
{
	struct cu_ctx *cur = cu_current(), *p = cu_ctx_check(peer);
	uint64_t remote = 0;
	struct cu_op op;
	CUresult r;
	int32_t st;

	if (!cu.initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!cur || !cur->alive || !p)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (enable && flags)
		return CUDA_ERROR_INVALID_VALUE;
	/* A device is not its own peer (a context of the same device is
	 * refused as NVIDIA's driver refuses it), nor one of another backend. */
	if (p->device == cur->device || !same_backend(p->device, cur->device))
		return enable ? CUDA_ERROR_PEER_ACCESS_UNSUPPORTED :
				CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
	r = cu_op_begin(&op, cur);
	if (r)
		return r;
	r = cu_op_peer(&op, p, &remote);
	if (r)
		goto err_end;
	if (enable) {
		struct pvgpu_ctx_enable_peer_access_req req = { remote, 0 };
		struct pvgpu_ctx_enable_peer_access_rep rep;

		st = pvgpu_call_ctx_enable_peer_access(op.client, &req, &rep);
	} else {
		struct pvgpu_ctx_disable_peer_access_req req = { remote };
		struct pvgpu_ctx_disable_peer_access_rep rep;

		st = pvgpu_call_ctx_disable_peer_access(op.client, &req, &rep);
	}
	r = cu_status(st);
err_end:
	cu_op_end(&op);
	return r;
}

CUresult CUDAAPI cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags)
{
	return peer_access(peer, flags, 1);
}

CUresult CUDAAPI cuCtxDisablePeerAccess(CUcontext peer)
{
	return peer_access(peer, 0, 0);
}

/* ---- errors: generated names (cuda_surface.c) -------------------------- */

CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr)
{
	if (!pStr)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < pvgpu_cu_error_count; i++)
		if (pvgpu_cu_errors[i].code == (int)error) {
			*pStr = pvgpu_cu_errors[i].name;
			return CUDA_SUCCESS;
		}
	*pStr = NULL;
	return CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr)
{
	if (!pStr)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < pvgpu_cu_error_count; i++)
		if (pvgpu_cu_errors[i].code == (int)error) {
			*pStr = pvgpu_cu_errors[i].text;
			return CUDA_SUCCESS;
		}
	*pStr = NULL;
	return CUDA_ERROR_INVALID_VALUE;
}

/*
 * pvgpu's own exports, for benchmarks (found with dlsym, absent natively),
 * summed over the backends (pvgpu_client_wire_counts).  pvgpu_wire_stats:
 * messages sent, sync calls (each one round trip), async ops, batches,
 * DATA frames: the number of backends counted, or -1 before any.
 * pvgpu_ring_wakes: wake-ups sent to a backend asleep on the control ring,
 * and our waits on it that slept: the number of backends with the ring, or
 * -1 before any.
 */
static int wire_counts(unsigned long long out[PVGPU_WIRE_COUNTS], int *rings)
{
	int n = 0;

	*rings = 0;
	memset(out, 0, PVGPU_WIRE_COUNTS * sizeof(out[0]));
	if (!cu.initialized)
		return -1;
	for (int i = 0; i < cu.nbackends; i++) {
		int rc = cu.backends[i].client ?
			 pvgpu_client_wire_counts(cu.backends[i].client, out) : -1;

		n += rc >= 0;
		*rings += rc > 0;
	}
	return n;
}

PVGPU_WIRE_EXPORTS(wire_counts)
