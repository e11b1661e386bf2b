/*
 * cuda_graph.c - explicit CUDA graph nodes (ops.spec graph_*).
 *
 * Graphs and executable graphs are the generic driver call's
 * (annotations.py GENERIC: cuGraphCreate, cuGraphInstantiate, ...); a
 * CUgraph and a CUgraphNode are the session's ids for them, checked by the
 * worker (host-backend/session/graphs.c).  A kernel node's parameters are
 * packed as cuLaunchKernel packs them (cu_kernel_pack); the guest keeps a
 * copy of each kernel node's parameters so that cuGraphKernelNodeGetParams
 * can answer as the driver does, with pointers the guest owns.
 *
 * A copy node's host end in the backend's shared window (cuMemHostAlloc
 * over shm:// or the VM window) is reached by the worker directly, with no
 * copy; other host memory (pageable, malloc'd) is staged: the worker's
 * node copies from or into a buffer of its own and the guest moves the
 * bytes at each launch and at the synchronisation after it
 * (cuda_capture.c says how).  cuGraphClone clones on the backend, then
 * asks the worker which of the clone's nodes each kept node became
 * (graph_clone_node, as cuGraphNodeFindInClone) and keeps the same for
 * it: host functions, kernel parameters, staged copies (each with a
 * staging buffer of its own).  Not here: pitched copies, arrays, host to
 * host, and node types other than kernel, memcpy, memset, empty and host:
 * each is CUDA_ERROR_NOT_SUPPORTED with a debug line saying why.
 */
#include "cuda_internal.h"	/* first: the legacy entries' own types */

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "cuda_surface.h"
#include "debug.h"
#include "guest_window.h"
#include "pvgpu_generic.h"
#include "pvgpu_guest.h"
#include "pvgpu_proto.h"

#define NODE(id)	((CUgraphNode)(uintptr_t)(id))
#define ID(h)		((uint64_t)(uintptr_t)(h))
#define MAX_DEPS	512	/* ops.spec graph_add_node: deps max */

/* A kernel node's parameters as last set, for cuGraphKernelNodeGetParams. */
struct kernel_node {
	struct kernel_node *next;
	uint64_t id;
	uint64_t graph;			/* the graph it is a node of */
	CUDA_KERNEL_NODE_PARAMS p;	/* kernelParams points into args */
	void **args;
	uint8_t *buf;
};

/*
 * A host node: the guest's function.  The worker's graph holds an empty
 * node in its place (so that edges and node lists stay whole); nothing may
 * come after it in the graph, so a launch of a graph with host nodes is the
 * graph's device work, then, as cuLaunchHostFunc does, the stream waited
 * for and each host function called here, in the launching thread.
 */
struct host_node {
	struct host_node *next;
	uint64_t id, graph;
	CUhostFn fn;
	void *data;
};

/* An executable graph's host functions, copied at instantiation. */
struct exec_hosts {
	struct exec_hosts *next;
	uint64_t exec;
	size_t n;
	struct host_node *v;
};

static pthread_mutex_t nodes_lock = PTHREAD_MUTEX_INITIALIZER;
static struct kernel_node *kernel_nodes;
static struct host_node *host_nodes;
static struct exec_hosts *exec_hosts;

/* Is id a host node (graph 0: of any graph)?  How many has graph? */
static int is_host_node(uint64_t id)
{
	int found = 0;

	pthread_mutex_lock(&nodes_lock);
	for (struct host_node *h = host_nodes; h && !found; h = h->next)
		found = h->id == id;
	pthread_mutex_unlock(&nodes_lock);
	return found;
}

static size_t host_nodes_of(uint64_t graph)
{
	size_t n = 0;

	pthread_mutex_lock(&nodes_lock);
	for (struct host_node *h = host_nodes; h; h = h->next)
		n += h->graph == graph;
	pthread_mutex_unlock(&nodes_lock);
	return n;
}

/* Drop the host nodes of graph (0: any) with id (0: any). */
static void host_nodes_drop(uint64_t graph, uint64_t id)
{
	struct host_node **pp, *h;

	pthread_mutex_lock(&nodes_lock);
	for (pp = &host_nodes; (h = *pp);) {
		if ((!graph || h->graph == graph) && (!id || h->id == id)) {
			*pp = h->next;
			free(h);
		} else {
			pp = &h->next;
		}
	}
	pthread_mutex_unlock(&nodes_lock);
}

/* Nodes after a host node cannot be carried (see struct host_node). */
static CUresult after_host(const char *name, const CUgraphNode *deps, size_t n)
{
	for (size_t i = 0; deps && i < n; i++) {
		if (is_host_node(ID(deps[i]))) {
			pvgpu_debug("%s: a node after a host node is not supported "
				    "(host nodes run in the guest once the graph's "
				    "device work is done)", name);
			return CUDA_ERROR_NOT_SUPPORTED;
		}
	}
	return CUDA_SUCCESS;
}

/* Parameter i of a kernel node's function (func, else kern). */
static CUresult param_info(const CUDA_KERNEL_NODE_PARAMS *p, size_t i,
			   size_t *off, size_t *size)
{
	return p->func ? cuFuncGetParamInfo(p->func, i, off, size) :
			 cuKernelGetParamInfo(p->kern, i, off, size);
}

static void kernel_node_free(struct kernel_node *k)
{
	free(k->args);
	free(k->buf);
	free(k);
}

/* Remember (or forget, p NULL) a kernel node's parameters. */
static void kernel_node_keep(uint64_t id, uint64_t graph,
			     const CUDA_KERNEL_NODE_PARAMS *p,
			     const struct cu_kernel_args *a)
{
	struct kernel_node *k = NULL, **pp;
	size_t n = 0, off, size;

	if (p) {
		k = calloc(1, sizeof(*k));
		if (!k)
			return;
		k->id = id;
		k->graph = graph;
		k->p = *p;
		k->p.extra = NULL;
		k->buf = malloc(a->params_len ? a->params_len : 1);
		while (param_info(p, n, &off, &size) == CUDA_SUCCESS)
			n++;
		k->args = calloc(n ? n : 1, sizeof(*k->args));
		if (!k->buf || !k->args) {
			kernel_node_free(k);
			return;
		}
		if (a->params_len)
			memcpy(k->buf, a->params, a->params_len);
		for (size_t i = 0; i < n; i++) {
			param_info(p, i, &off, &size);
			k->args[i] = off + size <= a->params_len ? k->buf + off : NULL;
		}
		k->p.kernelParams = k->args;
	}
	pthread_mutex_lock(&nodes_lock);
	for (pp = &kernel_nodes; *pp; pp = &(*pp)->next) {
		if ((*pp)->id == id) {
			struct kernel_node *old = *pp;

			*pp = old->next;
			kernel_node_free(old);
			break;
		}
	}
	if (k) {
		k->next = kernel_nodes;
		kernel_nodes = k;
	}
	pthread_mutex_unlock(&nodes_lock);
}

/* The graph of a kept kernel node (0: not kept). */
static uint64_t kernel_node_graph(uint64_t id)
{
	uint64_t graph = 0;

	pthread_mutex_lock(&nodes_lock);
	for (struct kernel_node *k = kernel_nodes; k; k = k->next)
		if (k->id == id)
			graph = k->graph;
	pthread_mutex_unlock(&nodes_lock);
	return graph;
}

/* cuGraphDestroy: the generic call, and the graph's kept nodes go. */
CUresult CUDAAPI cuGraphDestroy(CUgraph g)
{
	uint64_t a[1] = { ID(g) };
	struct kernel_node **pp, *k;
	CUresult r = cu_generic_call(PVGPU_GENERIC_cuGraphDestroy,
				     "cuGraphDestroy", 0, NULL, a, 1);

	if (r)
		return r;
	pthread_mutex_lock(&nodes_lock);
	for (pp = &kernel_nodes; (k = *pp);) {
		if (k->graph == ID(g)) {
			*pp = k->next;
			kernel_node_free(k);
		} else {
			pp = &k->next;
		}
	}
	pthread_mutex_unlock(&nodes_lock);
	host_nodes_drop(ID(g), 0);
	cu_staged_forget(ID(g), 0);
	cu_graph_cond_forget(ID(g), 0);
	return CUDA_SUCCESS;
}

/* The context a node's work runs in: c, else the current one. */
static CUresult node_ctx(CUcontext c, struct cu_ctx **out)
{
	*out = c ? cu_ctx_check(c) : cu_current();
	if (!*out)
		return c ? CUDA_ERROR_INVALID_CONTEXT : CUDA_ERROR_INVALID_CONTEXT;
	return CUDA_SUCCESS;
}

static CUresult add_node(struct cu_ctx *ctx, CUgraphNode *out,
			 struct pvgpu_graph_add_node_req *req,
			 const CUgraphNode *deps, size_t ndeps)
{
	struct pvgpu_graph_add_node_rep rep = { 0 };
	struct cu_op op;
	CUresult r;

	if (!out || (ndeps && !deps))
		return CUDA_ERROR_INVALID_VALUE;
	r = after_host("cuGraphAdd*Node", deps, ndeps);
	if (r)
		return r;
	if (ndeps > MAX_DEPS) {
		pvgpu_debug("cuGraphAdd*Node: %zu dependencies, pvgpu takes %d",
			    ndeps, MAX_DEPS);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	for (size_t i = 0; i < ndeps; i++)
		req->deps[i] = ID(deps[i]);
	req->deps_count = (uint32_t)ndeps;
	r = ctx ? cu_op_begin(&op, ctx) : cu_op_current(&op);
	if (r)
		return r;
	r = cu_status(pvgpu_call_graph_add_node(op.client, req, &rep));
	cu_op_end(&op);
	if (!r)
		*out = NODE(rep.node);
	return r;
}

/* A request's kernel fields (graph_add_node, graph_kernel_node_set). */
#define KERNEL_REQ(req, p, a) do {					\
	(req)->func = (a)->func;					\
	(req)->grid_x = (p)->gridDimX;					\
	(req)->grid_y = (p)->gridDimY;					\
	(req)->grid_z = (p)->gridDimZ;					\
	(req)->block_x = (p)->blockDimX;				\
	(req)->block_y = (p)->blockDimY;				\
	(req)->block_z = (p)->blockDimZ;				\
	(req)->shared_bytes = (p)->sharedMemBytes;			\
	(req)->params = (a)->params;					\
	(req)->params_len = (a)->params_len;				\
} while (0)

/*
 * A kernel node's function (func, else kern) and parameters packed for its
 * context (*ctx); *buf (freed by the caller, also on failure) holds them.
 */
static CUresult kernel_pack(const CUDA_KERNEL_NODE_PARAMS *p, struct cu_ctx **ctx,
			    uint8_t **buf, struct cu_kernel_args *a)
{
	const unsigned grid[3] = { p->gridDimX, p->gridDimY, p->gridDimZ };
	const unsigned block[3] = { p->blockDimX, p->blockDimY, p->blockDimZ };
	CUfunction f = p->func ? p->func : (CUfunction)p->kern;
	CUresult r;

	*buf = NULL;
	if (!f)
		return CUDA_ERROR_INVALID_VALUE;
	r = node_ctx(p->func ? NULL : p->ctx, ctx);
	if (r)
		return r;
	*buf = malloc(CU_MAX_PARAMS);
	if (!*buf)
		return CUDA_ERROR_OUT_OF_MEMORY;
	return cu_kernel_pack(f, *ctx, grid, block, p->sharedMemBytes,
			      p->kernelParams, p->extra, *buf, a);
}

static CUresult add_kernel(CUgraphNode *out, CUgraph g, const CUgraphNode *deps,
			   size_t ndeps, const CUDA_KERNEL_NODE_PARAMS *p)
{
	struct pvgpu_graph_add_node_req req = {
		.graph = ID(g), .type = CU_GRAPH_NODE_TYPE_KERNEL,
	};
	struct cu_kernel_args a;
	struct cu_ctx *ctx;
	uint8_t *buf;
	CUresult r;

	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	r = kernel_pack(p, &ctx, &buf, &a);
	if (!r) {
		KERNEL_REQ(&req, p, &a);
		r = add_node(ctx, out, &req, deps, ndeps);
	}
	if (!r)
		kernel_node_keep(ID(*out), ID(g), p, &a);
	free(buf);
	return r;
}

CUresult CUDAAPI cuGraphAddKernelNode_v2(CUgraphNode *out, CUgraph g,
					 const CUgraphNode *deps, size_t ndeps,
					 const CUDA_KERNEL_NODE_PARAMS *p)
{
	return add_kernel(out, g, deps, ndeps, p);
}

/* The legacy entry: its parameters lack kern and ctx. */
CUresult CUDAAPI cuGraphAddKernelNode(CUgraphNode *out, CUgraph g,
				      const CUgraphNode *deps, size_t ndeps,
				      const CUDA_KERNEL_NODE_PARAMS_v1 *p1)
{
	CUDA_KERNEL_NODE_PARAMS p = { 0 };

	if (!p1)
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(&p, p1, sizeof(*p1));
	return add_kernel(out, g, deps, ndeps, &p);
}

static CUresult add_memset(CUgraphNode *out, CUgraph g, const CUgraphNode *deps,
			   size_t ndeps, const CUDA_MEMSET_NODE_PARAMS *p,
			   CUcontext c)
{
	struct pvgpu_graph_add_node_req req = {
		.graph = ID(g), .type = CU_GRAPH_NODE_TYPE_MEMSET,
	};
	struct cu_ctx *ctx;
	CUresult r;

	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	r = node_ctx(c, &ctx);
	if (r)
		return r;
	req.dst = p->dst;
	req.pitch = p->height > 1 ? p->pitch : 0;
	req.value = p->value;
	req.elem_size = p->elementSize;
	req.width = p->width;
	req.height = p->height;
	return add_node(ctx, out, &req, deps, ndeps);
}

CUresult CUDAAPI cuGraphAddMemsetNode(CUgraphNode *out, CUgraph g,
				      const CUgraphNode *deps, size_t ndeps,
				      const CUDA_MEMSET_NODE_PARAMS *p, CUcontext c)
{
	return add_memset(out, g, deps, ndeps, p, c);
}

/*
 * One end of a copy node: a device address (*host 0), an offset in the
 * window of ctx's backend, memory cuMemHostAlloc gave (*host 1), or other
 * host memory, staged (*host 2, *hostp its address); else why not.
 */
static CUresult copy_end(struct cu_ctx *ctx, const char *end, CUmemorytype type,
			 CUdeviceptr dev, const void *hp, size_t x, size_t y,
			 size_t z, size_t pitch, size_t height, size_t bytes,
			 uint64_t *addr, int *host, void **hostp)
{
	uint64_t off = x + y * pitch + z * pitch * height;
	struct pvgpu_window_map *win;
	struct cu_alloc a;
	struct cu_host h;
	struct cu_op op;
	int in_window = 0;

	if (type == CU_MEMORYTYPE_UNIFIED && cu_alloc_find(dev, &a))
		type = CU_MEMORYTYPE_DEVICE;
	if (type == CU_MEMORYTYPE_UNIFIED) {
		type = CU_MEMORYTYPE_HOST;
		hp = (const void *)(uintptr_t)dev;
	}
	if (type == CU_MEMORYTYPE_DEVICE) {
		*addr = dev + off;
		*host = 0;
		return CUDA_SUCCESS;
	}
	if (type == CU_MEMORYTYPE_HOST && hp && cu_host_find(hp, &h) && h.win &&
	    cu_op_begin(&op, ctx) == CUDA_SUCCESS) {
		win = pvgpu_client_window(op.client);
		in_window = win == h.win &&
			    pvgpu_window_holds(win, (const uint8_t *)hp + off,
					       bytes, addr);
		cu_op_end(&op);
	}
	if (type == CU_MEMORYTYPE_HOST && hp && !in_window) {
		*hostp = (uint8_t *)(uintptr_t)hp + off;
		*host = 2;
		return CUDA_SUCCESS;
	}
	if (!in_window) {
		pvgpu_debug("cuGraphAddMemcpyNode: the %s is %s; pvgpu takes "
			    "device memory and host memory", end,
			    type == CU_MEMORYTYPE_ARRAY ? "an array" : "neither");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	*host = 1;
	return CUDA_SUCCESS;
}

static CUresult add_memcpy(CUgraphNode *out, CUgraph g, const CUgraphNode *deps,
			   size_t ndeps, const CUDA_MEMCPY3D *c, CUcontext cc)
{
	struct pvgpu_graph_add_node_req req = {
		.graph = ID(g), .type = CU_GRAPH_NODE_TYPE_MEMCPY,
	};
	int src_host, dst_host;
	void *src_hp = NULL, *dst_hp = NULL;
	size_t h, d, bytes;
	struct cu_ctx *ctx;
	CUresult r;

	if (!c || c->srcLOD || c->dstLOD)
		return CUDA_ERROR_INVALID_VALUE;
	r = node_ctx(cc, &ctx);
	if (r)
		return r;
	h = c->Height ? c->Height : 1;
	d = c->Depth ? c->Depth : 1;
	/* Rows and slices one after another on both sides: one run of bytes. */
	if ((h > 1 || d > 1) &&
	    (c->srcPitch != c->WidthInBytes || c->dstPitch != c->WidthInBytes ||
	     (d > 1 && (c->srcHeight != h || c->dstHeight != h)))) {
		pvgpu_debug("cuGraphAddMemcpyNode: a pitched copy node "
			    "(%zu rows, %zu slices) is not supported", h, d);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	if (c->WidthInBytes && (h > SIZE_MAX / c->WidthInBytes ||
				d > SIZE_MAX / (c->WidthInBytes * h)))
		return CUDA_ERROR_INVALID_VALUE;
	bytes = c->WidthInBytes * h * d;
	r = copy_end(ctx, "source", c->srcMemoryType, c->srcDevice, c->srcHost,
		     c->srcXInBytes, c->srcY, c->srcZ, c->srcPitch, c->srcHeight,
		     bytes, &req.src, &src_host, &src_hp);
	if (!r)
		r = copy_end(ctx, "destination", c->dstMemoryType, c->dstDevice,
			     c->dstHost, c->dstXInBytes, c->dstY, c->dstZ,
			     c->dstPitch, c->dstHeight, bytes, &req.dst, &dst_host,
			     &dst_hp);
	if (r)
		return r;
	if (src_host && dst_host) {
		pvgpu_debug("cuGraphAddMemcpyNode: host to host is not supported");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	if (src_host == 2 || dst_host == 2) {
		if (!out || (ndeps && !deps))
			return CUDA_ERROR_INVALID_VALUE;
		if (!bytes)
			return CUDA_ERROR_INVALID_VALUE;
		r = after_host("cuGraphAddMemcpyNode", deps, ndeps);
		if (r)
			return r;
		return cu_staged_add(ctx, ID(g), deps, ndeps, 0,
				     dst_host ? req.src : req.dst,
				     dst_host ? dst_hp : src_hp, bytes,
				     dst_host != 0, out);
	}
	req.host = dst_host ? 1 : src_host ? 2 : 0;
	req.width = bytes;
	return add_node(ctx, out, &req, deps, ndeps);
}

CUresult CUDAAPI cuGraphAddMemcpyNode(CUgraphNode *out, CUgraph g,
				      const CUgraphNode *deps, size_t ndeps,
				      const CUDA_MEMCPY3D *c, CUcontext cc)
{
	return add_memcpy(out, g, deps, ndeps, c, cc);
}

CUresult CUDAAPI cuGraphAddEmptyNode(CUgraphNode *out, CUgraph g,
				     const CUgraphNode *deps, size_t ndeps)
{
	struct pvgpu_graph_add_node_req req = {
		.graph = ID(g), .type = CU_GRAPH_NODE_TYPE_EMPTY,
	};

	return add_node(NULL, out, &req, deps, ndeps);
}

/* Edge data other than the default (all zero) cannot be carried. */
static CUresult plain_edges(const char *name, const CUgraphEdgeData *e, size_t n)
{
	static const CUgraphEdgeData zero;

	for (size_t i = 0; e && i < n; i++) {
		if (memcmp(&e[i], &zero, sizeof(zero))) {
			pvgpu_debug("%s: edge data (ports, types) is not supported",
				    name);
			return CUDA_ERROR_NOT_SUPPORTED;
		}
	}
	return CUDA_SUCCESS;
}

static CUresult add_any(CUgraphNode *out, CUgraph g, const CUgraphNode *deps,
			const CUgraphEdgeData *edges, size_t ndeps,
			CUgraphNodeParams *p)
{
	CUresult r = plain_edges("cuGraphAddNode", edges, ndeps);

	if (r)
		return r;
	if (!p || p->reserved0[0] || p->reserved0[1] || p->reserved0[2] ||
	    p->reserved2)
		return CUDA_ERROR_INVALID_VALUE;
	switch (p->type) {
	case CU_GRAPH_NODE_TYPE_KERNEL: {
		CUDA_KERNEL_NODE_PARAMS k;

		_Static_assert(sizeof(k) == sizeof(p->kernel),
			       "kernel node params v2 and v3 alike");
		memcpy(&k, &p->kernel, sizeof(k));
		return add_kernel(out, g, deps, ndeps, &k);
	}
	case CU_GRAPH_NODE_TYPE_MEMCPY:
		if (p->memcpy.flags || p->memcpy.reserved)
			return CUDA_ERROR_INVALID_VALUE;
		return add_memcpy(out, g, deps, ndeps, &p->memcpy.copyParams,
				  p->memcpy.copyCtx);
	case CU_GRAPH_NODE_TYPE_MEMSET: {
		CUDA_MEMSET_NODE_PARAMS m = {
			.dst = p->memset.dst, .pitch = p->memset.pitch,
			.value = p->memset.value,
			.elementSize = p->memset.elementSize,
			.width = p->memset.width, .height = p->memset.height,
		};

		return add_memset(out, g, deps, ndeps, &m, p->memset.ctx);
	}
	case CU_GRAPH_NODE_TYPE_EMPTY:
		return cuGraphAddEmptyNode(out, g, deps, ndeps);
	case CU_GRAPH_NODE_TYPE_HOST: {
		CUDA_HOST_NODE_PARAMS h = { p->host.fn, p->host.userData };

		return cuGraphAddHostNode(out, g, deps, ndeps, &h);
	}
	case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
	case CU_GRAPH_NODE_TYPE_MEM_FREE:
		return cu_graph_add_mem_node(out, g, deps, ndeps, p);
	case CU_GRAPH_NODE_TYPE_CONDITIONAL:
		return cu_graph_add_cond_node(out, g, deps, ndeps, p);
	default:
		pvgpu_debug("cuGraphAddNode: node type %d is not supported "
			    "(pvgpu takes kernel, memcpy, memset, empty, host, "
			    "memory and conditional nodes)",
			    (int)p->type);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
}

CUresult CUDAAPI cuGraphAddNode(CUgraphNode *out, CUgraph g,
				const CUgraphNode *deps, size_t ndeps,
				CUgraphNodeParams *p)
{
	return add_any(out, g, deps, NULL, ndeps, p);
}

CUresult CUDAAPI cuGraphAddNode_v2(CUgraphNode *out, CUgraph g,
				   const CUgraphNode *deps,
				   const CUgraphEdgeData *edges, size_t ndeps,
				   CUgraphNodeParams *p)
{
	return add_any(out, g, deps, edges, ndeps, p);
}

static CUresult add_deps(CUgraph g, const CUgraphNode *from,
			 const CUgraphNode *to, size_t n)
{
	struct pvgpu_graph_add_deps_req req = { .graph = ID(g) };
	struct pvgpu_graph_add_deps_rep rep;
	struct cu_op op;
	CUresult r;

	if (!n)
		return CUDA_SUCCESS;
	if (!from || !to)
		return CUDA_ERROR_INVALID_VALUE;
	r = after_host("cuGraphAddDependencies", from, n);
	if (r)
		return r;
	if (n > MAX_DEPS) {
		pvgpu_debug("cuGraphAddDependencies: %zu edges at once, pvgpu "
			    "takes %d", n, MAX_DEPS);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	for (size_t i = 0; i < n; i++) {
		req.from[i] = ID(from[i]);
		req.to[i] = ID(to[i]);
	}
	req.from_count = req.to_count = (uint32_t)n;
	r = cu_op_current(&op);
	if (r)
		return r;
	r = cu_status(pvgpu_call_graph_add_deps(op.client, &req, &rep));
	cu_op_end(&op);
	return r;
}

CUresult CUDAAPI cuGraphAddDependencies(CUgraph g, const CUgraphNode *from,
					const CUgraphNode *to, size_t n)
{
	return add_deps(g, from, to, n);
}

CUresult CUDAAPI cuGraphAddDependencies_v2(CUgraph g, const CUgraphNode *from,
					   const CUgraphNode *to,
					   const CUgraphEdgeData *e, size_t n)
{
	CUresult r = plain_edges("cuGraphAddDependencies", e, n);

	return r ? r : add_deps(g, from, to, n);
}

CUresult CUDAAPI cuGraphNodeGetType(CUgraphNode node, CUgraphNodeType *type)
{
	struct pvgpu_graph_node_get_type_req req = { .node = ID(node) };
	struct pvgpu_graph_node_get_type_rep rep = { 0 };
	struct cu_op op;
	CUresult r;

	if (!type)
		return CUDA_ERROR_INVALID_VALUE;
	r = cu_op_current(&op);
	if (r)
		return r;
	r = cu_status(pvgpu_call_graph_node_get_type(op.client, &req, &rep));
	cu_op_end(&op);
	if (!r)
		*type = is_host_node(ID(node)) ? CU_GRAPH_NODE_TYPE_HOST :
						 (CUgraphNodeType)rep.type;
	return r;
}

CUresult CUDAAPI cuGraphGetNodes(CUgraph g, CUgraphNode *nodes, size_t *n)
{
	struct pvgpu_graph_get_nodes_req req = { .graph = ID(g) };
	struct pvgpu_graph_get_nodes_rep *rep;
	struct cu_op op;
	CUresult r;

	if (!n)
		return CUDA_ERROR_INVALID_VALUE;
	rep = calloc(1, sizeof(*rep));
	if (!rep)
		return CUDA_ERROR_OUT_OF_MEMORY;
	r = cu_op_current(&op);
	if (!r) {
		r = cu_status(pvgpu_call_graph_get_nodes(op.client, &req, rep));
		cu_op_end(&op);
	}
	if (!r && nodes) {
		if (rep->count > rep->nodes_count && *n > rep->nodes_count) {
			pvgpu_debug("cuGraphGetNodes: a graph of %llu nodes, "
				    "pvgpu lists %u",
				    (unsigned long long)rep->count,
				    rep->nodes_count);
			r = CUDA_ERROR_NOT_SUPPORTED;
		}
		for (size_t i = 0; !r && i < *n && i < rep->nodes_count; i++)
			nodes[i] = NODE(rep->nodes[i]);
		if (!r && *n > rep->count)
			*n = rep->count;
	} else if (!r) {
		*n = rep->count;
	}
	free(rep);
	return r;
}

static CUresult kernel_set(CUgraphExec x, CUgraphNode node,
			   const CUDA_KERNEL_NODE_PARAMS *p)
{
	struct pvgpu_graph_kernel_node_set_req req = {
		.exec = ID(x), .node = ID(node),
	};
	struct pvgpu_graph_kernel_node_set_rep rep;
	struct cu_kernel_args a;
	struct cu_ctx *ctx;
	struct cu_op op;
	uint8_t *buf;
	CUresult r;

	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	r = kernel_pack(p, &ctx, &buf, &a);
	if (!r)
		r = cu_op_begin(&op, ctx);
	if (!r) {
		KERNEL_REQ(&req, p, &a);
		r = cu_status(pvgpu_call_graph_kernel_node_set(op.client, &req, &rep));
		cu_op_end(&op);
	}
	/* The graph's node changed, not an executable graph's. */
	if (!r && !x)
		kernel_node_keep(ID(node), kernel_node_graph(ID(node)), p, &a);
	free(buf);
	return r;
}

CUresult CUDAAPI cuGraphKernelNodeSetParams_v2(CUgraphNode node,
					       const CUDA_KERNEL_NODE_PARAMS *p)
{
	return kernel_set(NULL, node, p);
}

CUresult CUDAAPI cuGraphKernelNodeSetParams(CUgraphNode node,
					    const CUDA_KERNEL_NODE_PARAMS_v1 *p1)
{
	CUDA_KERNEL_NODE_PARAMS p = { 0 };

	if (!p1)
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(&p, p1, sizeof(*p1));
	return kernel_set(NULL, node, &p);
}

CUresult CUDAAPI cuGraphExecKernelNodeSetParams_v2(CUgraphExec x, CUgraphNode node,
						   const CUDA_KERNEL_NODE_PARAMS *p)
{
	if (!x)
		return CUDA_ERROR_INVALID_VALUE;
	return kernel_set(x, node, p);
}

CUresult CUDAAPI cuGraphExecKernelNodeSetParams(CUgraphExec x, CUgraphNode node,
						const CUDA_KERNEL_NODE_PARAMS_v1 *p1)
{
	CUDA_KERNEL_NODE_PARAMS p = { 0 };

	if (!x || !p1)
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(&p, p1, sizeof(*p1));
	return kernel_set(x, node, &p);
}

static CUresult kernel_get(CUgraphNode node, void *out, size_t size)
{
	CUgraphNodeType type;
	struct kernel_node *k;
	CUresult r;

	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	r = cuGraphNodeGetType(node, &type);
	if (r)
		return r;
	if (type != CU_GRAPH_NODE_TYPE_KERNEL)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&nodes_lock);
	for (k = kernel_nodes; k && k->id != ID(node); k = k->next)
		;
	if (k)
		memcpy(out, &k->p, size);
	pthread_mutex_unlock(&nodes_lock);
	if (!k) {
		pvgpu_debug("cuGraphKernelNodeGetParams: the node was not made "
			    "by cuGraphAdd*Node in this process (captured?)");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphKernelNodeGetParams_v2(CUgraphNode node,
					       CUDA_KERNEL_NODE_PARAMS *p)
{
	return kernel_get(node, p, sizeof(*p));
}

CUresult CUDAAPI cuGraphKernelNodeGetParams(CUgraphNode node,
					    CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
	return kernel_get(node, p, sizeof(*p));
}

CUresult CUDAAPI cuGraphDestroyNode(CUgraphNode node)
{
	uint64_t a[1] = { ID(node) };
	struct cu_op op;
	CUresult r = cu_op_current(&op);

	if (r)
		return r;
	r = cu_status(cu_generic_op(&op, PVGPU_GENERIC_cuGraphDestroyNode, a, 1));
	cu_op_end(&op);
	if (!r) {
		kernel_node_keep(ID(node), 0, NULL, NULL);
		host_nodes_drop(0, ID(node));
		cu_staged_forget(0, ID(node));
		cu_graph_cond_forget(0, ID(node));
	}
	return r;
}

static CUresult exec_update(CUgraphExec x, CUgraph g, CUgraphNode *error_node,
			    CUgraphExecUpdateResult *result)
{
	struct pvgpu_graph_exec_update_req req = { .exec = ID(x), .graph = ID(g) };
	struct pvgpu_graph_exec_update_rep rep = { 0 };
	struct cu_op op;
	CUresult r;

	*error_node = NULL;
	*result = CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED;
	if (host_nodes_of(ID(g))) {
		pvgpu_debug("cuGraphExecUpdate: a graph with host nodes is not "
			    "supported");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	r = cu_op_current(&op);
	if (r)
		return r;
	r = cu_status(pvgpu_call_graph_exec_update(op.client, &req, &rep));
	cu_op_end(&op);
	/* It runs the graph's copy nodes now (cuda_capture.c). */
	if (!r)
		r = cu_staged_instantiate(ID(x), ID(g));
	*error_node = NODE(rep.error_node);
	*result = r && !rep.result ? CU_GRAPH_EXEC_UPDATE_ERROR :
				     (CUgraphExecUpdateResult)rep.result;
	return r;
}

CUresult CUDAAPI cuGraphExecUpdate_v2(CUgraphExec x, CUgraph g,
				      CUgraphExecUpdateResultInfo *info)
{
	if (!info)
		return CUDA_ERROR_INVALID_VALUE;
	info->errorFromNode = NULL;
	return exec_update(x, g, &info->errorNode, &info->result);
}

CUresult CUDAAPI cuGraphExecUpdate(CUgraphExec x, CUgraph g, CUgraphNode *error_node,
				   CUgraphExecUpdateResult *result)
{
	if (!error_node || !result)
		return CUDA_ERROR_INVALID_VALUE;
	return exec_update(x, g, error_node, result);
}

CUresult CUDAAPI cuGraphAddHostNode(CUgraphNode *out, CUgraph g,
				    const CUgraphNode *deps, size_t ndeps,
				    const CUDA_HOST_NODE_PARAMS *p)
{
	struct pvgpu_graph_add_node_req req = {
		.graph = ID(g), .type = CU_GRAPH_NODE_TYPE_EMPTY,
	};
	struct host_node *h;
	CUresult r;

	if (!p || !p->fn)
		return CUDA_ERROR_INVALID_VALUE;
	h = calloc(1, sizeof(*h));
	if (!h)
		return CUDA_ERROR_OUT_OF_MEMORY;
	r = add_node(NULL, out, &req, deps, ndeps);
	if (r) {
		free(h);
		return r;
	}
	*h = (struct host_node){ .id = ID(*out), .graph = ID(g), .fn = p->fn,
				 .data = p->userData };
	pthread_mutex_lock(&nodes_lock);
	h->next = host_nodes;
	host_nodes = h;
	pthread_mutex_unlock(&nodes_lock);
	return CUDA_SUCCESS;
}

/* ---- the generic call's graph entries that must know of host nodes ---- */

CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec *out, CUgraph g,
					     unsigned long long flags)
{
	uint64_t a[3] = { out != NULL, ID(g), flags };
	struct exec_hosts *x = NULL;
	size_t n = host_nodes_of(ID(g));
	CUresult r;

	if (n) {
		x = calloc(1, sizeof(*x));
		if (x)
			x->v = calloc(n, sizeof(*x->v));
		if (!x || !x->v) {
			free(x);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
	}
	r = cu_generic_call(PVGPU_GENERIC_cuGraphInstantiateWithFlags,
			    "cuGraphInstantiateWithFlags", 0, NULL, a, 3);
	if (!r && a[0]) {
		r = cu_staged_instantiate(a[0], ID(g));
		if (r) {
			uint64_t d[1] = { a[0] };

			cu_generic_call(PVGPU_GENERIC_cuGraphExecDestroy,
					"cuGraphExecDestroy", 0, NULL, d, 1);
		}
	}
	if (r || !x) {
		if (x)
			free(x->v);
		free(x);
		if (!r)
			*out = (CUgraphExec)(uintptr_t)a[0];
		return r;
	}
	*out = (CUgraphExec)(uintptr_t)a[0];
	x->exec = a[0];
	pthread_mutex_lock(&nodes_lock);
	for (struct host_node *h = host_nodes; h && x->n < n; h = h->next)
		if (h->graph == ID(g))
			x->v[x->n++] = *h;
	x->next = exec_hosts;
	exec_hosts = x;
	pthread_mutex_unlock(&nodes_lock);
	return CUDA_SUCCESS;
}

static CUresult graph_launch(CUgraphExec x, CUstream s, int ptsz)
{
	uint64_t a[2] = { ID(x), 0 };
	struct host_node *v = NULL;
	struct cu_ctx *ctx = NULL;
	void *pending = NULL;
	size_t n = 0;
	CUresult r;

	r = cu_generic_stream(s, ptsz, &ctx, &a[1]);
	if (!r && !ctx && !(ctx = cu_current()))
		r = CUDA_ERROR_INVALID_CONTEXT;
	/* Copy nodes with guest memory: their bytes go first. */
	if (!r)
		r = cu_staged_launch(ctx, ID(x), &pending);
	if (r)
		return r;
	r = cu_generic_call(PVGPU_GENERIC_cuGraphLaunch, "cuGraphLaunch", 1,
			    ctx, a, 2);
	cu_staged_launched(pending, a[1], r);
	if (r)
		return r;
	pthread_mutex_lock(&nodes_lock);
	for (struct exec_hosts *e = exec_hosts; e && !v; e = e->next) {
		if (e->exec == ID(x) && e->n) {
			v = malloc(e->n * sizeof(*v));
			if (v) {
				memcpy(v, e->v, e->n * sizeof(*v));
				n = e->n;
			} else {
				r = CUDA_ERROR_OUT_OF_MEMORY;
			}
		}
	}
	pthread_mutex_unlock(&nodes_lock);
	/* The host nodes: after the graph's device work, in this thread. */
	if (n)
		r = cuStreamSynchronize(ptsz && !s ? CU_STREAM_PER_THREAD : s);
	for (size_t i = 0; !r && i < n; i++)
		v[i].fn(v[i].data);
	free(v);
	return r;
}

CUresult CUDAAPI cuGraphLaunch(CUgraphExec x, CUstream s)
{
	return graph_launch(x, s, 0);
}

CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec x, CUstream s)
{
	return graph_launch(x, s, 1);
}

CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec x)
{
	uint64_t a[1] = { ID(x) };
	struct exec_hosts **pp, *e;
	CUresult r = cu_generic_call(PVGPU_GENERIC_cuGraphExecDestroy,
				     "cuGraphExecDestroy", 0, NULL, a, 1);

	if (r)
		return r;
	cu_staged_exec_gone(ID(x));
	pthread_mutex_lock(&nodes_lock);
	for (pp = &exec_hosts; (e = *pp); pp = &e->next) {
		if (e->exec == ID(x)) {
			*pp = e->next;
			free(e->v);
			free(e);
			break;
		}
	}
	pthread_mutex_unlock(&nodes_lock);
	return CUDA_SUCCESS;
}

CUresult cu_graph_clone_node(uint64_t clone, uint64_t node, uint64_t *out,
			     uint64_t *staging)
{
	struct pvgpu_graph_clone_node_req req = { .clone = clone, .node = node };
	struct pvgpu_graph_clone_node_rep rep = { 0 };
	struct cu_op op;
	CUresult r = cu_op_current(&op);

	if (r)
		return r;
	r = cu_status(pvgpu_call_graph_clone_node(op.client, &req, &rep));
	cu_op_end(&op);
	if (r == CUDA_ERROR_NOT_SUPPORTED)
		pvgpu_cuda_unsupported("cuGraphNodeFindInClone");
	*out = r ? 0 : rep.node;
	*staging = r ? 0 : rep.staging;
	return r;
}

CUresult CUDAAPI cuGraphNodeFindInClone(CUgraphNode *out, CUgraphNode node,
					CUgraph clone)
{
	uint64_t id, staging;
	CUresult r;

	if (!out || !node || !clone)
		return CUDA_ERROR_INVALID_VALUE;
	r = cu_graph_clone_node(ID(clone), ID(node), &id, &staging);
	if (!r)
		*out = NODE(id);
	return r;
}

/* The guest's records of graph's host and kernel nodes, for clone's. */
static CUresult nodes_clone(uint64_t graph, uint64_t clone)
{
	struct host_node *hv = NULL, *h;
	struct kernel_node *kv = NULL, *k;
	size_t nh = 0, nk = 0, i;
	uint64_t id, staging;
	CUresult r = CUDA_SUCCESS;

	pthread_mutex_lock(&nodes_lock);
	for (h = host_nodes; h; h = h->next)
		nh += h->graph == graph;
	for (k = kernel_nodes; k; k = k->next)
		nk += k->graph == graph;
	hv = calloc(nh ? nh : 1, sizeof(*hv));
	kv = calloc(nk ? nk : 1, sizeof(*kv));
	nh = nk = 0;
	for (h = host_nodes; hv && h; h = h->next)
		if (h->graph == graph)
			hv[nh++] = *h;
	for (k = kernel_nodes; kv && k; k = k->next)
		if (k->graph == graph)
			kv[nk++] = *k;	/* only id and p are read */
	pthread_mutex_unlock(&nodes_lock);
	if (!hv || !kv)
		r = CUDA_ERROR_OUT_OF_MEMORY;
	/* Oldest first: the clone's list in the original's order. */
	for (i = nh; !r && i-- > 0;) {
		h = malloc(sizeof(*h));
		r = h ? cu_graph_clone_node(clone, hv[i].id, &id, &staging) :
			CUDA_ERROR_OUT_OF_MEMORY;
		if (r) {
			free(h);
			break;
		}
		*h = hv[i];
		h->id = id;
		h->graph = clone;
		pthread_mutex_lock(&nodes_lock);
		h->next = host_nodes;
		host_nodes = h;
		pthread_mutex_unlock(&nodes_lock);
	}
	free(hv);
	/* Kernel nodes: their parameters as last set, for GetParams. */
	for (i = 0; !r && i < nk; i++) {
		struct cu_kernel_args a = { 0 };
		uint8_t *buf = NULL;
		struct cu_ctx *ctx;

		r = cu_graph_clone_node(clone, kv[i].id, &id, &staging);
		if (!r && kernel_pack(&kv[i].p, &ctx, &buf, &a) == CUDA_SUCCESS)
			kernel_node_keep(id, clone, &kv[i].p, &a);
		free(buf);
	}
	free(kv);
	return r;
}

CUresult CUDAAPI cuGraphClone(CUgraph *out, CUgraph g)
{
	uint64_t a[2] = { out != NULL, ID(g) };
	CUresult r;

	r = cu_generic_call(PVGPU_GENERIC_cuGraphClone, "cuGraphClone", 0,
			    NULL, a, 2);
	if (r || !out)
		return r;
	/* The nodes the guest keeps something of: the clone's too. */
	r = nodes_clone(ID(g), a[0]);
	if (!r)
		r = cu_staged_clone(ID(g), a[0]);
	if (r) {
		cuGraphDestroy((CUgraph)(uintptr_t)a[0]);
		return r;
	}
	*out = (CUgraph)(uintptr_t)a[0];
	return CUDA_SUCCESS;
}
