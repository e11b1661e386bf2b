/*
 * capture.c - stream capture queries and staged graph copies, backend side
 * (ops.spec stream_capture_*, graph_staged_*).
 *
 * Capture queries: the executor answers with its own graph and node
 * handles; the guest sees the session's ids for them (graphs.c makes them
 * on first sight), so the graph a capture builds has one id from the
 * first cuStreamGetCaptureInfo to cuStreamEndCapture and after, and nodes
 * named in cuStreamUpdateCaptureDependencies are checked to be the
 * capture graph's.
 *
 * Staged copies.  A copy node's host end may be guest memory the worker
 * cannot see (pageable memory, not in the shared window): such a node is
 * made here with a staging buffer of the worker's as its host end, and the
 * guest moves the bytes.  Before each launch of an executable graph the
 * guest sends what its host-to-device nodes' memory holds then
 * (graph_staged_put, queued ahead of the launch), and after a
 * synchronisation that covers the launch it fetches what the
 * device-to-host nodes wrote (graph_staged_get) into its own memory.  The
 * driver copies a node's parameters into every executable graph made from
 * its graph (and cuGraphExecUpdate into the one updated), so a buffer must
 * outlive its graph while such an executable graph lives: each counts its
 * users, the graph (until it or the node is destroyed) and the executable
 * graphs made with it (an executable graph's handle lists the buffers it
 * uses in its data).  What the session holds in buffers is bounded
 * (PVGPU_STAGED_MAX); all of them go with the session.
 *
 * Graph memory.  An allocation node (explicit, or cuMemAllocAsync
 * captured) reserves its address when it is made; the session may use
 * that range in its graphs from then on (it is one of its allocations,
 * marked PVGPU_ALLOC_GRAPH), a free node may name only such an address,
 * and the bytes count against the VM's quota until the context goes
 * (whether a launch has the memory mapped or not: the conservative count),
 * or until a cuMemAlloc gets part of the range (the graph is gone).
 * cuMemFree / cuMemFreeAsync may free it outside any graph, as NVIDIA's
 * driver lets a program do (ops.c mem_free): its charge goes, the record
 * stays (unmapped), and a graph launch, which maps it again at the same
 * address, charges it again first (pvgpu_graph_allocs_mapped).
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>

#include "log.h"
#include "pvgpu_dispatch.h"
#include "worker.h"

/* How many elements the array a (a message's, so ops.spec's max) holds. */
#define LEN(a) (sizeof(a) / sizeof((a)[0]))

static struct pvgpu_staged *staged_find(struct pvgpu_worker *w, uint64_t id)
{
	for (size_t i = 0; id && i < w->staged.n; i++)
		if (w->staged.v[i].id == id)
			return &w->staged.v[i];
	return NULL;
}

/* Free the buffers nobody uses any more. */
static void staged_sweep(struct pvgpu_worker *w)
{
	for (size_t i = w->staged.n; i-- > 0;) {
		struct pvgpu_staged *s = &w->staged.v[i];

		if (s->graph || s->execs)
			continue;
		w->staged.bytes -= s->size;
		free(s->buf);
		*s = w->staged.v[--w->staged.n];
	}
}

void pvgpu_staged_unref(struct pvgpu_worker *w, uint64_t graph, uint64_t node)
{
	for (size_t i = 0; i < w->staged.n; i++) {
		struct pvgpu_staged *s = &w->staged.v[i];

		if ((!graph || s->graph == graph) && (!node || s->node == node))
			s->graph = s->node = 0;
	}
	staged_sweep(w);
}

void pvgpu_staged_exec_gone(struct pvgpu_worker *w, uint64_t exec)
{
	struct pvgpu_handle *x = pvgpu_handle_get(&w->handles, exec, H_GRAPH_EXEC);
	const uint64_t *ids = x ? x->data : NULL;

	for (uint32_t i = 0; ids && i < x->ndata; i++) {
		struct pvgpu_staged *s = staged_find(w, ids[i]);

		if (s && s->execs)
			s->execs--;
	}
	if (x) {
		free(x->data);
		x->data = NULL;
		x->ndata = 0;
	}
	staged_sweep(w);
}

int32_t pvgpu_staged_instantiated(struct pvgpu_worker *w, uint64_t exec,
				  uint64_t graph)
{
	struct pvgpu_handle *x;
	uint64_t *ids = NULL;
	uint32_t n = 0;

	for (size_t i = 0; i < w->staged.n; i++)
		n += w->staged.v[i].graph == graph;
	if (n && !(ids = calloc(n, sizeof(*ids))))
		return CUDA_ERROR_OUT_OF_MEMORY;
	n = 0;
	for (size_t i = 0; ids && i < w->staged.n; i++) {
		if (w->staged.v[i].graph == graph) {
			w->staged.v[i].execs++;
			ids[n++] = w->staged.v[i].id;
		}
	}
	pvgpu_staged_exec_gone(w, exec);	/* what it used before */
	x = pvgpu_handle_get(&w->handles, exec, H_GRAPH_EXEC);
	if (!x) {
		free(ids);
		return CUDA_ERROR_INVALID_HANDLE;
	}
	x->data = ids;
	x->ndata = n;
	return CUDA_SUCCESS;
}

void pvgpu_staged_free(struct pvgpu_worker *w)
{
	for (size_t i = 0; i < w->staged.n; i++)
		free(w->staged.v[i].buf);
	free(w->staged.v);
	memset(&w->staged, 0, sizeof(w->staged));
}

/* A new buffer of size bytes (its graph and node still 0), or NULL. */
static struct pvgpu_staged *staged_new(struct pvgpu_worker *w, uint64_t size,
				       int to_host)
{
	struct pvgpu_staged *s;

	if (!size || size > PVGPU_STAGED_MAX - w->staged.bytes)
		return NULL;
	if (w->staged.n == w->staged.cap) {
		size_t cap = w->staged.cap ? 2 * w->staged.cap : 16;
		void *v = realloc(w->staged.v, cap * sizeof(*w->staged.v));

		if (!v)
			return NULL;
		w->staged.v = v;
		w->staged.cap = cap;
	}
	s = &w->staged.v[w->staged.n];
	*s = (struct pvgpu_staged){ .size = size, .to_host = to_host,
				    .id = ++w->staged.serial };
	s->buf = calloc(1, (size_t)size);
	if (!s->buf)
		return NULL;
	w->staged.n++;
	w->staged.bytes += size;
	return s;
}

/* Drop the newest buffer again (its node could not be made). */
static void staged_drop_last(struct pvgpu_worker *w)
{
	struct pvgpu_staged *s = &w->staged.v[--w->staged.n];

	w->staged.bytes -= s->size;
	free(s->buf);
}

/* ---- capture queries ---------------------------------------------------- */

int32_t pvgpu_handle_stream_capture_info(struct pvgpu_worker *w,
					 const struct pvgpu_stream_capture_info_req *req,
					 struct pvgpu_stream_capture_info_rep *rep)
{
	uint32_t types[LEN(rep->deps)];
	uint64_t stream = 0, graph = 0, count = 0;
	int32_t st;

	_Static_assert(LEN(rep->edges) == LEN(rep->deps),
		       "ops.spec: stream_capture_info's edges as many as its deps");

	if (!w->ex)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!w->cur_ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	st = pvgpu_lookup_stream(w, req->stream, &stream);
	if (st)
		return st;
	if (!w->ex_ops->capture_info)
		return CUDA_ERROR_NOT_SUPPORTED;
	st = w->ex_ops->capture_info(w->ex, stream, &rep->status, &rep->id,
				     &graph, rep->deps, types, rep->edges,
				     LEN(rep->deps), &count);
	if (st)
		return st;
	if (rep->status == CU_STREAM_CAPTURE_STATUS_NONE) {
		rep->id = 0;
		return CUDA_SUCCESS;
	}
	if (count > LEN(rep->deps)) {
		wlog_debug(w, "capture info: %llu dependencies, pvgpu carries %zu",
			   (unsigned long long)count, LEN(rep->deps));
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	rep->graph = graph ? pvgpu_graph_id(w, graph) : 0;
	if (graph && !rep->graph)
		return CUDA_ERROR_OUT_OF_MEMORY;
	rep->deps_count = rep->edges_count = (uint32_t)count;
	for (uint32_t i = 0; i < rep->deps_count; i++) {
		rep->deps[i] = pvgpu_graph_node_id(w, rep->graph, rep->deps[i],
						   types[i]);
		if (!rep->deps[i])
			return CUDA_ERROR_OUT_OF_MEMORY;
	}
	return CUDA_SUCCESS;
}

/* The capture graph of stream (session id), via the executor. */
static int32_t capture_graph(struct pvgpu_worker *w, uint64_t stream,
			     uint64_t *graph)
{
	uint64_t nodes[1], edges[1], id, g = 0, count;
	uint32_t types[1], status;
	int32_t st = w->ex_ops->capture_info(w->ex, stream, &status, &id, &g,
					     nodes, types, edges, 0, &count);

	if (st)
		return st;
	if (status != CU_STREAM_CAPTURE_STATUS_ACTIVE || !g)
		return CUDA_ERROR_ILLEGAL_STATE;
	*graph = pvgpu_graph_id(w, g);
	return *graph ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

int32_t pvgpu_handle_stream_capture_deps(struct pvgpu_worker *w,
					 const struct pvgpu_stream_capture_deps_req *req)
{
	uint64_t nodes[LEN(req->deps)], stream = 0, graph = 0;
	int32_t st;

	if (!w->ex)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!w->cur_ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (req->flags > 1 ||
	    (req->edges_count && req->edges_count != req->deps_count))
		return CUDA_ERROR_INVALID_VALUE;
	st = pvgpu_lookup_stream(w, req->stream, &stream);
	if (st)
		return st;
	if (!w->ex_ops->capture_info || !w->ex_ops->capture_deps)
		return CUDA_ERROR_NOT_SUPPORTED;
	st = capture_graph(w, stream, &graph);
	if (st)
		return st;
	/* Nodes of the graph being captured, and only those. */
	for (uint32_t i = 0; i < req->deps_count; i++) {
		struct pvgpu_handle *h = pvgpu_handle_get(&w->handles, req->deps[i],
							  H_GRAPH_NODE);

		if (!h || h->module != graph)
			return CUDA_ERROR_INVALID_VALUE;
		nodes[i] = h->exec_handle;
	}
	return w->ex_ops->capture_deps(w->ex, stream, nodes,
				       req->edges_count ? req->edges : NULL,
				       req->deps_count, req->flags);
}

/* ---- staged copy nodes ---------------------------------------------------- */

/* An explicit staged copy node of graph g after deps. */
static int32_t staged_explicit(struct pvgpu_worker *w,
			       const struct pvgpu_graph_staged_copy_req *req,
			       struct pvgpu_staged *s, uint64_t *node)
{
	struct pvgpu_graph_node n = {
		.type = CU_GRAPH_NODE_TYPE_MEMCPY, .width = req->size,
		.host = s->buf, .to_host = s->to_host,
		.dst = s->to_host ? 0 : req->dptr, .src = s->to_host ? req->dptr : 0,
	};
	struct pvgpu_handle *g = pvgpu_handle_get(&w->handles, req->graph, H_GRAPH);
	uint64_t deps[LEN(req->deps)];

	if (!g || req->stream)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!w->ex_ops->graph_add_node)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (pvgpu_graph_deps(w, req->graph, req->deps, req->deps_count, deps))
		return CUDA_ERROR_INVALID_VALUE;
	return w->ex_ops->graph_add_node(w->ex, g->exec_handle, &n, deps,
					 req->deps_count, node);
}

/* The copy captured on stream; *node and *graph the executor's. */
static int32_t staged_captured(struct pvgpu_worker *w,
			       const struct pvgpu_graph_staged_copy_req *req,
			       struct pvgpu_staged *s, uint64_t *node,
			       uint64_t *graph)
{
	uint64_t stream = 0, id, count = 0, edge;
	uint32_t status, type;
	int32_t st;

	if (req->deps_count)
		return CUDA_ERROR_INVALID_VALUE;
	st = pvgpu_lookup_stream(w, req->stream, &stream);
	if (st)
		return st;
	if (!w->ex_ops->capture_info)
		return CUDA_ERROR_NOT_SUPPORTED;
	st = w->ex_ops->capture_info(w->ex, stream, &status, &id, graph, node,
				     &type, &edge, 1, &count);
	if (st)
		return st;
	if (status != CU_STREAM_CAPTURE_STATUS_ACTIVE)
		return CUDA_ERROR_ILLEGAL_STATE;
	st = s->to_host ?
	     pvgpu_exec_dtoh(w->ex_ops, w->ex, s->buf, req->dptr, req->size,
			     true, stream) :
	     pvgpu_exec_htod(w->ex_ops, w->ex, req->dptr, s->buf, req->size,
			     true, stream);
	if (st)
		return st;
	/* What the capture now depends on is the copy just recorded. */
	st = w->ex_ops->capture_info(w->ex, stream, &status, &id, graph, node,
				     &type, &edge, 1, &count);
	if (!st && (count != 1 || type != CU_GRAPH_NODE_TYPE_MEMCPY))
		st = CUDA_ERROR_UNKNOWN;
	return st;
}

int32_t pvgpu_handle_graph_staged_copy(struct pvgpu_worker *w,
				       const struct pvgpu_graph_staged_copy_req *req,
				       struct pvgpu_graph_staged_copy_rep *rep)
{
	uint64_t node = 0, graph = req->graph, xgraph = 0;
	struct pvgpu_staged *s;
	int32_t st;

	if (!w->ex)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!w->cur_ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (req->to_host > 1 || !req->size ||
	    req->dptr > UINT64_MAX - req->size ||
	    !pvgpu_alloc_range(&w->allocs, req->dptr, req->size))
		return CUDA_ERROR_INVALID_VALUE;
	s = staged_new(w, req->size, (int)req->to_host);
	if (!s)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (req->graph) {
		st = staged_explicit(w, req, s, &node);
	} else {
		st = staged_captured(w, req, s, &node, &xgraph);
		if (!st && !(graph = pvgpu_graph_id(w, xgraph)))
			st = CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (!st) {
		rep->node = pvgpu_graph_node_id(w, graph, node,
						CU_GRAPH_NODE_TYPE_MEMCPY);
		if (!rep->node)
			st = CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (st) {
		/* A captured copy may be in the graph: it keeps the buffer. */
		if (req->graph || !node)
			staged_drop_last(w);
		else
			w->staged.v[w->staged.n - 1].graph = graph;
		return st;
	}
	s = &w->staged.v[w->staged.n - 1];
	s->graph = graph;
	s->node = rep->node;
	s->dptr = req->dptr;
	rep->in_graph = graph;
	rep->staging = s->id;
	return CUDA_SUCCESS;
}

/* staging[] named, no repeats, their sizes adding up to size. */
static int32_t staged_list(struct pvgpu_worker *w, const uint64_t *ids,
			   uint32_t n, uint64_t size, int to_host)
{
	uint64_t sum = 0;

	for (uint32_t i = 0; i < n; i++) {
		struct pvgpu_staged *s = staged_find(w, ids[i]);

		if (!s || s->to_host != to_host || s->size > UINT64_MAX - sum)
			return CUDA_ERROR_INVALID_VALUE;
		for (uint32_t j = 0; j < i; j++)
			if (ids[j] == ids[i])
				return CUDA_ERROR_INVALID_VALUE;
		sum += s->size;
	}
	return sum == size ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/*
 * The bytes go into the buffers at once: a launch queued earlier whose
 * copy has not run yet reads them too, as the driver's copy of pageable
 * memory the program changed meanwhile would.
 */
int32_t pvgpu_handle_graph_staged_put(struct pvgpu_worker *w,
				      const struct pvgpu_graph_staged_put_req *req)
{
	int32_t st = staged_list(w, req->staging, req->staging_count, req->size, 0);
	uint8_t *all = NULL;
	uint64_t off = 0;

	/* DATA frames need not end where a buffer does: take them at once. */
	if (!st && req->size && !(all = malloc((size_t)req->size)))
		st = CUDA_ERROR_OUT_OF_MEMORY;
	if (st) {
		pvgpu_copy_refuse_htod(w, req->size);
		return st;
	}
	if (pvgpu_worker_recv_data(w, all, req->size)) {
		free(all);
		return CUDA_ERROR_INVALID_VALUE;	/* the connection is gone */
	}
	for (uint32_t i = 0; i < req->staging_count; i++) {
		struct pvgpu_staged *s = staged_find(w, req->staging[i]);

		memcpy(s->buf, all + off, (size_t)s->size);
		off += s->size;
	}
	free(all);
	return CUDA_SUCCESS;
}

int32_t pvgpu_handle_graph_staged_get(struct pvgpu_worker *w,
				      const struct pvgpu_graph_staged_get_req *req)
{
	uint32_t block = w->cfg->block ? w->cfg->block : 65536;
	int32_t st = staged_list(w, req->staging, req->staging_count, req->size, 1);

	if (st)
		return st;
	for (uint32_t i = 0; i < req->staging_count; i++) {
		struct pvgpu_staged *s = staged_find(w, req->staging[i]);

		for (uint64_t off = 0; off < s->size; off += block) {
			uint32_t len = s->size - off < block ?
				       (uint32_t)(s->size - off) : block;

			if (pvgpu_worker_send_data(w, s->buf + off, len))
				return 0;	/* the connection is gone */
		}
	}
	return CUDA_SUCCESS;
}

/* ---- graph memory ------------------------------------------------------- */

/* The range an allocation node reserved (st: how making it went): the
 * session's from now on, its charge (pending until now) committed. */
static int32_t graph_alloc_add(struct pvgpu_worker *w, int32_t st,
			       uint64_t dptr, uint64_t size, int32_t device)
{
	struct pvgpu_alloc a = {
		.base = dptr, .size = size, .ctx = w->cur_ctx,
		.module = PVGPU_ALLOC_GRAPH, .device = device,
	};

	/* Known already: the driver gave a second node the same range. */
	if (st || !dptr || pvgpu_alloc_range(&w->allocs, dptr, 1)) {
		pvgpu_accounting_uncharge(w->slot, size);
		return st;
	}
	if (pvgpu_alloc_add(&w->allocs, &a)) {
		pvgpu_accounting_uncharge(w->slot, size);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	pvgpu_accounting_commit(w->slot, device, size);
	return CUDA_SUCCESS;
}

void pvgpu_graph_allocs_reused(struct pvgpu_worker *w, uint64_t base,
			       uint64_t size)
{
	for (size_t i = w->allocs.n; i-- > 0;) {
		struct pvgpu_alloc *a = &w->allocs.v[i];

		if (a->module != PVGPU_ALLOC_GRAPH || a->base >= base + size ||
		    base >= a->base + a->size)
			continue;
		if (pvgpu_alloc_charged(a))
			atomic_fetch_sub(&w->slot->mem_used[a->device], a->size);
		pvgpu_alloc_del(&w->allocs, a);
	}
}

/*
 * Before a graph launch: the context's graph memory freed outside any
 * graph is charged again, as the launch may map it again.  Which graph
 * each range is of is not kept, so a launch of any graph charges them all:
 * the count may be more than the GPU holds, never less.
 */
int32_t pvgpu_graph_allocs_mapped(struct pvgpu_worker *w)
{
	uint64_t bytes = 0;
	int others = 0;

	for (size_t i = 0; i < w->allocs.n; i++) {
		const struct pvgpu_alloc *a = &w->allocs.v[i];

		if (!a->unmapped)
			continue;
		if (a->ctx == w->cur_ctx)
			bytes += a->size;
		else
			others = 1;
	}
	if (bytes && pvgpu_accounting_charge(w->acct, w->slot, bytes))
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (size_t i = 0; bytes && i < w->allocs.n; i++) {
		struct pvgpu_alloc *a = &w->allocs.v[i];

		if (a->unmapped && a->ctx == w->cur_ctx) {
			pvgpu_accounting_commit(w->slot, a->device, a->size);
			a->unmapped = 0;
		}
	}
	w->allocs.graph_unmapped = others;
	return CUDA_SUCCESS;
}

/* A free node's address: one an allocation node of the session gave. */
static int graph_alloc_ok(struct pvgpu_worker *w, uint64_t dptr)
{
	struct pvgpu_alloc *a = pvgpu_alloc_find(&w->allocs, dptr);

	return a && a->module == PVGPU_ALLOC_GRAPH;
}

static int32_t ctx_device(struct pvgpu_worker *w)
{
	struct pvgpu_handle *c = pvgpu_handle_get(&w->handles, w->cur_ctx, H_CTX);

	return c ? c->device : 0;
}

int32_t pvgpu_handle_graph_mem_node(struct pvgpu_worker *w,
				    const struct pvgpu_graph_mem_node_req *req,
				    struct pvgpu_graph_mem_node_rep *rep)
{
	struct pvgpu_graph_mem_node_req r = *req;
	struct pvgpu_graph_node n = {
		.type = req->size ? CU_GRAPH_NODE_TYPE_MEM_ALLOC :
				    CU_GRAPH_NODE_TYPE_MEM_FREE,
		.width = req->size, .dst = req->dptr, .alloc = &rep->dptr,
	};
	struct pvgpu_handle *g;
	uint64_t deps[LEN(req->deps)], node = 0;
	int32_t st;

	if (!w->ex)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!w->cur_ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	g = pvgpu_handle_get(&w->handles, r.graph, H_GRAPH);
	if (!g)
		return CUDA_ERROR_INVALID_HANDLE;
	if ((req->size && req->dptr) || (!req->size && !graph_alloc_ok(w, req->dptr)))
		return CUDA_ERROR_INVALID_VALUE;
	if (!w->ex_ops->graph_add_node)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (pvgpu_graph_deps(w, req->graph, req->deps, req->deps_count, deps))
		return CUDA_ERROR_INVALID_VALUE;
	if (req->size && pvgpu_accounting_charge(w->acct, w->slot, req->size))
		return CUDA_ERROR_OUT_OF_MEMORY;
	st = w->ex_ops->graph_add_node(w->ex, g->exec_handle, &n, deps,
				       req->deps_count, &node);
	if (req->size)
		st = graph_alloc_add(w, st, rep->dptr, req->size, ctx_device(w));
	if (st)
		return st;	/* a node made stays in the graph: the driver's */
	rep->node = pvgpu_graph_node_id(w, req->graph, node, n.type);
	if (!rep->node)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (!req->size)
		rep->dptr = req->dptr;
	return CUDA_SUCCESS;
}

int32_t pvgpu_handle_stream_mem_async(struct pvgpu_worker *w,
				      const struct pvgpu_stream_mem_async_req *req,
				      struct pvgpu_stream_mem_async_rep *rep)
{
	uint64_t stream = 0, graph = 0, id, count = 0, edge, node = 0;
	uint32_t status, type;
	int32_t st;

	if (!w->ex)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!w->cur_ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	if ((req->size && req->dptr) || (!req->size && !graph_alloc_ok(w, req->dptr)))
		return CUDA_ERROR_INVALID_VALUE;
	st = pvgpu_lookup_stream(w, req->stream, &stream);
	if (st)
		return st;
	if (!w->ex_ops->mem_async || !w->ex_ops->capture_info)
		return CUDA_ERROR_NOT_SUPPORTED;
	st = capture_graph(w, stream, &graph);
	if (st)
		return st;
	if (req->size && pvgpu_accounting_charge(w->acct, w->slot, req->size))
		return CUDA_ERROR_OUT_OF_MEMORY;
	rep->dptr = req->dptr;
	st = w->ex_ops->mem_async(w->ex, stream, req->size, &rep->dptr);
	if (req->size)
		st = graph_alloc_add(w, st, rep->dptr, req->size, ctx_device(w));
	/* The node the capture now depends on is the one just made. */
	if (!st)
		st = w->ex_ops->capture_info(w->ex, stream, &status, &id, &graph,
					     &node, &type, &edge, 1, &count);
	if (!st && count == 1) {
		rep->node = pvgpu_graph_node_id(w, pvgpu_graph_id(w, graph), node,
						type);
		if (!rep->node)
			st = CUDA_ERROR_OUT_OF_MEMORY;
	}
	return st;
}

/* ---- capture into an existing graph ------------------------------------- */

/* Begun relaxed whatever the mode, as generic.c begins every capture. */
int32_t pvgpu_handle_stream_capture_to_graph(struct pvgpu_worker *w,
					     const struct pvgpu_stream_capture_to_graph_req *req)
{
	uint64_t nodes[LEN(req->deps)], stream = 0;
	struct pvgpu_handle *g;
	int32_t st;

	if (!w->ex)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!w->cur_ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (req->mode > CU_STREAM_CAPTURE_MODE_RELAXED ||
	    (req->edges_count && req->edges_count != req->deps_count))
		return CUDA_ERROR_INVALID_VALUE;
	g = pvgpu_handle_get(&w->handles, req->graph, H_GRAPH);
	if (!g || g->ctx != w->cur_ctx)
		return CUDA_ERROR_INVALID_HANDLE;
	st = pvgpu_lookup_stream(w, req->stream, &stream);
	if (st)
		return st;
	if (!stream)
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	if (!w->ex_ops->capture_to_graph)
		return CUDA_ERROR_NOT_SUPPORTED;
	st = pvgpu_graph_deps(w, req->graph, req->deps, req->deps_count, nodes);
	if (st)
		return st;
	st = w->ex_ops->capture_to_graph(w->ex, stream, g->exec_handle, nodes,
					 req->edges_count ? req->edges : NULL,
					 req->deps_count,
					 CU_STREAM_CAPTURE_MODE_RELAXED);
	if (!st)
		w->capturing++;
	return st;
}

/* ---- cloned graphs ------------------------------------------------------- */

/*
 * The clone's node for node of the graph clone was made from.  A staged
 * copy node gets a buffer of its own there, once, as its node's host end
 * (the driver's clone still names the original's buffer, which goes with
 * the original graph); asked again, the clone's buffer is named.
 */
int32_t pvgpu_handle_graph_clone_node(struct pvgpu_worker *w,
				      const struct pvgpu_graph_clone_node_req *req,
				      struct pvgpu_graph_clone_node_rep *rep)
{
	struct pvgpu_graph_node copy = { .type = CU_GRAPH_NODE_TYPE_MEMCPY };
	struct pvgpu_staged *orig = NULL, *s;
	struct pvgpu_handle *c, *n;
	uint64_t node = 0, size, dptr;
	int32_t st, to_host;

	if (!w->ex)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!w->cur_ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	c = pvgpu_handle_get(&w->handles, req->clone, H_GRAPH);
	n = pvgpu_handle_get(&w->handles, req->node, H_GRAPH_NODE);
	if (!c || !n || n->module == req->clone)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!w->ex_ops->clone_node)
		return CUDA_ERROR_NOT_SUPPORTED;
	st = w->ex_ops->clone_node(w->ex, c->exec_handle, n->exec_handle, NULL,
				   &node);
	if (st)
		return st;
	rep->node = pvgpu_graph_node_id(w, req->clone, node, (uint32_t)n->device);
	if (!rep->node)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (size_t i = 0; i < w->staged.n; i++) {
		s = &w->staged.v[i];
		if (s->node == rep->node && s->graph == req->clone) {
			rep->staging = s->id;
			return CUDA_SUCCESS;
		}
		if (s->node == req->node)
			orig = s;
	}
	if (!orig)
		return CUDA_SUCCESS;
	size = orig->size;
	dptr = orig->dptr;
	to_host = orig->to_host;
	s = staged_new(w, size, to_host);	/* may move orig */
	if (!s)
		return CUDA_ERROR_OUT_OF_MEMORY;
	copy.width = size;
	copy.host = s->buf;
	copy.to_host = to_host;
	copy.dst = to_host ? 0 : dptr;
	copy.src = to_host ? dptr : 0;
	st = w->ex_ops->clone_node(w->ex, c->exec_handle, n->exec_handle, &copy,
				   &node);
	if (st) {
		staged_drop_last(w);
		return st;
	}
	s = &w->staged.v[w->staged.n - 1];
	s->dptr = dptr;
	s->graph = req->clone;
	s->node = rep->node;
	rep->staging = s->id;
	return CUDA_SUCCESS;
}
