/*
 * cuda_graphmem.c - graph memory: allocation and free nodes, explicit
 * (cuGraphAddMemAllocNode, cuGraphAddMemFreeNode, cuGraphAddNode) and
 * captured (cuMemAllocAsync / cuMemFreeAsync on a capturing stream,
 * cuda_pool.c) (ops.spec graph_mem_node, stream_mem_async; the backend's
 * half is host-backend/session/capture.c), and the device's graph memory
 * attributes (the generic call: annotations.py GENERIC).
 *
 * The driver on the backend makes the nodes and reserves each
 * allocation's address when the node is made; the worker records the range
 * as the session's (so that copies, memsets and kernels may use it) and
 * refuses a free node of anything else.  The guest records the range too
 * (its copies check their pointers) and each node's parameters, for
 * cuGraphMemAllocNodeGetParams / cuGraphMemFreeNodeGetParams.  The range
 * stays recorded when cuMemFree frees it outside any graph: the graph's
 * next launch maps it again at the same address (NVIDIA's graphMemoryNodes
 * frees it so between launches).  pvgpu takes
 * device memory of the context's own device, readable and writable there
 * (what cudaMallocAsync asks for); other pool properties and peer access
 * are CUDA_ERROR_NOT_SUPPORTED naming why.
 */
#include "cuda_internal.h"	/* first: the legacy entries' own types */

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "cuda_surface.h"
#include "debug.h"
#include "pvgpu_generic.h"
#include "pvgpu_guest.h"
#include "pvgpu_proto.h"

#define ID(h)		((uint64_t)(uintptr_t)(h))
#define MAX_DEPS	512	/* ops.spec graph_mem_node: deps max */

struct mem_node {
	struct mem_node *next;
	uint64_t node;
	int device;
	CUdeviceptr dptr;
	size_t size;			/* 0: a free node */
};

static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mem_node *mem_nodes;

static void mem_node_keep(uint64_t node, int device, CUdeviceptr dptr, size_t size)
{
	struct mem_node *m = calloc(1, sizeof(*m));

	if (!m)
		return;		/* only GetParams loses it */
	*m = (struct mem_node){ .node = node, .device = device, .dptr = dptr,
				.size = size };
	pthread_mutex_lock(&mem_lock);
	m->next = mem_nodes;
	mem_nodes = m;
	pthread_mutex_unlock(&mem_lock);
}

static int mem_node_find(uint64_t node, struct mem_node *out)
{
	int found = 0;

	pthread_mutex_lock(&mem_lock);
	for (struct mem_node *m = mem_nodes; m && !found; m = m->next)
		if (m->node == node) {
			*out = *m;
			found = 1;
		}
	pthread_mutex_unlock(&mem_lock);
	return found;
}

/* The range an allocation node reserved, known to the guest's checks
 * (in place of a range of a graph gone that it overlaps, cuda_mem.c). */
static void range_keep(CUdeviceptr dptr, size_t size, int device)
{
	cu_alloc_insert(&(struct cu_alloc){ .base = dptr, .size = size,
					    .device = device, .graph = 1 });
}

/* What pvgpu takes of an allocation node's properties, for ctx's device. */
static CUresult props_ok(const CUDA_MEM_ALLOC_NODE_PARAMS *p, struct cu_ctx *ctx)
{
	const CUmemPoolProps *pp = &p->poolProps;

	if (!p->bytesize)
		return CUDA_ERROR_INVALID_VALUE;
	if (pp->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
	    pp->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
	    pp->location.id != ctx->device || pp->handleTypes ||
	    pp->win32SecurityAttributes || pp->maxSize) {
		pvgpu_debug("cuGraphAddMemAllocNode: pvgpu takes pinned device "
			    "memory of the context's device, without export "
			    "handles or a size limit");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	for (size_t i = 0; i < p->accessDescCount; i++) {
		const CUmemAccessDesc *d = &p->accessDescs[i];

		if (d->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
		    d->location.id != ctx->device ||
		    d->flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
			pvgpu_debug("cuGraphAddMemAllocNode: access from another "
				    "device is not supported");
			return CUDA_ERROR_NOT_SUPPORTED;
		}
	}
	return CUDA_SUCCESS;
}

/* An allocation (size) or free (dptr) node of graph after deps. */
static CUresult mem_node_add(CUgraphNode *out, CUgraph g, const CUgraphNode *deps,
			     size_t ndeps, size_t size, CUdeviceptr *dptr)
{
	struct pvgpu_graph_mem_node_req *req;
	struct pvgpu_graph_mem_node_rep rep = { 0 };
	struct cu_ctx *ctx = cu_current();
	struct cu_op op;
	CUresult r;

	if (!out || (ndeps && !deps))
		return CUDA_ERROR_INVALID_VALUE;
	if (!ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (ndeps > MAX_DEPS) {
		pvgpu_debug("cuGraphAddMem*Node: %zu dependencies, pvgpu takes %d",
			    ndeps, MAX_DEPS);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	req = calloc(1, sizeof(*req));
	if (!req)
		return CUDA_ERROR_OUT_OF_MEMORY;
	req->graph = ID(g);
	req->size = size;
	req->dptr = size ? 0 : *dptr;
	req->deps_count = (uint32_t)ndeps;
	for (size_t i = 0; i < ndeps; i++)
		req->deps[i] = ID(deps[i]);
	r = cu_op_begin(&op, ctx);
	if (!r) {
		r = cu_status(pvgpu_call_graph_mem_node(op.client, req, &rep));
		cu_op_end(&op);
	}
	free(req);
	if (r) {
		if (r == CUDA_ERROR_NOT_SUPPORTED)
			pvgpu_cuda_unsupported("cuGraphAddMem*Node");
		return r;
	}
	*out = (CUgraphNode)(uintptr_t)rep.node;
	if (size) {
		*dptr = rep.dptr;
		range_keep(rep.dptr, size, ctx->device);
	}
	mem_node_keep(rep.node, ctx->device, size ? rep.dptr : *dptr, size);
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphAddMemAllocNode(CUgraphNode *out, CUgraph g,
					const CUgraphNode *deps, size_t ndeps,
					CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
	struct cu_ctx *ctx = cu_current();
	CUresult r;

	if (!p || (p->accessDescCount && !p->accessDescs))
		return CUDA_ERROR_INVALID_VALUE;
	if (!ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	r = props_ok(p, ctx);
	return r ? r : mem_node_add(out, g, deps, ndeps, p->bytesize, &p->dptr);
}

CUresult CUDAAPI cuGraphAddMemFreeNode(CUgraphNode *out, CUgraph g,
				       const CUgraphNode *deps, size_t ndeps,
				       CUdeviceptr dptr)
{
	if (!dptr)
		return CUDA_ERROR_INVALID_VALUE;
	return mem_node_add(out, g, deps, ndeps, 0, &dptr);
}

/* cuGraphAddNode(_v2) with CU_GRAPH_NODE_TYPE_MEM_ALLOC / _MEM_FREE. */
CUresult cu_graph_add_mem_node(CUgraphNode *out, CUgraph g, const CUgraphNode *deps,
			       size_t ndeps, CUgraphNodeParams *p)
{
	if (p->type == CU_GRAPH_NODE_TYPE_MEM_FREE)
		return cuGraphAddMemFreeNode(out, g, deps, ndeps, p->free.dptr);
	{
		CUDA_MEM_ALLOC_NODE_PARAMS a = {
			.poolProps = p->alloc.poolProps,
			.accessDescs = p->alloc.accessDescs,
			.accessDescCount = p->alloc.accessDescCount,
			.bytesize = p->alloc.bytesize,
		};
		CUresult r = cuGraphAddMemAllocNode(out, g, deps, ndeps, &a);

		if (!r)
			p->alloc.dptr = a.dptr;
		return r;
	}
}

CUresult CUDAAPI cuGraphMemAllocNodeGetParams(CUgraphNode node,
					      CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
	struct mem_node m;

	if (!p || !mem_node_find(ID(node), &m) || !m.size)
		return CUDA_ERROR_INVALID_VALUE;
	memset(p, 0, sizeof(*p));
	p->poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	p->poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p->poolProps.location.id = m.device;
	p->bytesize = m.size;
	p->dptr = m.dptr;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphMemFreeNodeGetParams(CUgraphNode node, CUdeviceptr *dptr)
{
	struct mem_node m;

	if (!dptr || !mem_node_find(ID(node), &m) || m.size)
		return CUDA_ERROR_INVALID_VALUE;
	*dptr = m.dptr;
	return CUDA_SUCCESS;
}

/*
 * cuMemAllocAsync (size) / cuMemFreeAsync (dptr) on stream s while it is
 * being captured: a node of the capture; 0 when s is not capturing.
 */
int cu_graph_mem_captured(CUstream s, size_t size, CUdeviceptr *dptr, CUresult *r)
{
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
	struct pvgpu_stream_mem_async_req req = { .size = size };
	struct pvgpu_stream_mem_async_rep rep = { 0 };
	struct cu_ctx *ctx;
	struct cu_op op;

	if (!cu_captures_active() || cuStreamIsCapturing(s, &st) ||
	    st != CU_STREAM_CAPTURE_STATUS_ACTIVE)
		return 0;
	req.dptr = size ? 0 : *dptr;
	*r = cu_stream_resolve(s, &ctx, &req.stream);
	if (!*r)
		*r = cu_op_begin(&op, ctx);
	if (*r)
		return 1;
	*r = cu_status(pvgpu_call_stream_mem_async(op.client, &req, &rep));
	cu_op_end(&op);
	if (*r == CUDA_ERROR_NOT_SUPPORTED)
		pvgpu_cuda_unsupported(size ? "cuMemAllocAsync (captured)" :
					      "cuMemFreeAsync (captured)");
	if (*r)
		return 1;
	if (size) {
		*dptr = rep.dptr;
		range_keep(rep.dptr, size, ctx->device);
	}
	if (rep.node)
		mem_node_keep(rep.node, ctx->device, size ? rep.dptr : *dptr, size);
	return 1;
}

/*
 * The device's graph memory through the generic call: fn's id, value its
 * cuuint64_t (read or, for a set, given; NULL for a trim).  It goes to
 * the device's primary context: the worker takes only the current
 * context's device, named by the backend's index of it.
 */
static CUresult mem_attr(uint32_t fn, const char *name, CUdevice dev,
			 CUgraphMem_attribute attr, void *value)
{
	uint64_t a[3] = { 0, (uint64_t)attr, value != NULL };
	uint64_t v = 0;
	struct cu_ctx *ctx;
	CUresult r = cu_init();

	if (r)
		return r;
	if (dev < 0 || dev >= cu.ndevices)
		return CUDA_ERROR_INVALID_DEVICE;
	a[0] = (uint64_t)cu.devices[dev].remote;
	ctx = cu_primary(dev);
	if (!ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (fn == PVGPU_GENERIC_cuDeviceGraphMemTrim)
		return cu_generic_call(fn, name, 0, ctx, a, 1);
	if (fn == PVGPU_GENERIC_cuDeviceSetGraphMemAttribute) {
		memcpy(&v, value, sizeof(v));
		return cu_generic_call_data(fn, name, ctx, a, 3, &v, sizeof(v), NULL, 0);
	}
	r = cu_generic_call_data(fn, name, ctx, a, 3, NULL, 0, &v, sizeof(v));
	if (!r)
		memcpy(value, &v, sizeof(v));	/* a cuuint64_t */
	return r;
}

CUresult CUDAAPI cuDeviceGraphMemTrim(CUdevice dev)
{
	return mem_attr(PVGPU_GENERIC_cuDeviceGraphMemTrim, "cuDeviceGraphMemTrim", dev,
			(CUgraphMem_attribute)0, NULL);
}

CUresult CUDAAPI cuDeviceGetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr,
					      void *value)
{
	if (!value)
		return CUDA_ERROR_INVALID_VALUE;
	return mem_attr(PVGPU_GENERIC_cuDeviceGetGraphMemAttribute,
			"cuDeviceGetGraphMemAttribute", dev, attr, value);
}

CUresult CUDAAPI cuDeviceSetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr,
					      void *value)
{
	uint64_t v;

	if (!value)
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(&v, value, sizeof(v));
	if (v)		/* only the high watermarks, and only to 0 */
		return CUDA_ERROR_INVALID_VALUE;
	return mem_attr(PVGPU_GENERIC_cuDeviceSetGraphMemAttribute,
			"cuDeviceSetGraphMemAttribute", dev, attr, value);
}
