/*
 * graphs.c - explicit graph nodes, backend side (ops.spec graph_*).
 *
 * Graphs and executable graphs are the generic driver call's handles
 * (generic.c); a node is a handle of the session's too, remembering its
 * graph (in `module`) and its type (in `device`), so that a node of another
 * graph, a stale one or another session's is refused here, before the
 * executor sees it.  Nodes the session did not add (a captured or cloned
 * graph's) get their ids when cuGraphGetNodes or cuGraphExecUpdate first
 * names them.  A kernel node's function and packed parameters are
 * checked as a launch's are (modules.c); a memset or memcpy node's ranges
 * must lie inside the session's allocations when it is made (the executor
 * checks them again when the graph runs: memory may be freed meanwhile),
 * a copy's host end inside the arena of its window, where its host
 * allocations are (mapped, and so reachable, as long as the session lasts).
 */
#include <cuda.h>

#include "log.h"
#include "pvgpu_dispatch.h"
#include "pvgpu_generic.h"
#include "worker.h"

/* A live node of graph (0: of any graph) made in this session. */
static struct pvgpu_handle *node_get(struct pvgpu_worker *w, uint64_t id,
				     uint64_t graph)
{
	struct pvgpu_handle *h = pvgpu_handle_get(&w->handles, id,
						  H_GRAPH_NODE);

	if (!h || (graph && h->module != graph))
		return NULL;
	return h;
}

static struct pvgpu_handle *graph_get(struct pvgpu_worker *w, uint64_t id)
{
	return pvgpu_handle_get(&w->handles, id, H_GRAPH);
}

/*
 * What a call on a graph checks first, in this order: a current context,
 * the graph (one of the session's: *g), the call's own arguments (bad: the
 * error they earn, 0 when they are fine), then an executor that can do it
 * (can: its op is there).
 */
static int32_t graph_begin(struct pvgpu_worker *w, uint64_t graph, int32_t bad,
			   int can, struct pvgpu_handle **g)
{
	if (!w->cur_ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	*g = graph_get(w, graph);
	if (!*g)
		return CUDA_ERROR_INVALID_HANDLE;
	if (bad)
		return bad;
	if (!can)
		return CUDA_ERROR_NOT_SUPPORTED;
	return CUDA_SUCCESS;
}

/* The session's id for an executor graph of the current context, made on
 * first sight (the graph a capture builds); 0 when out of memory. */
uint64_t pvgpu_graph_id(struct pvgpu_worker *w, uint64_t graph)
{
	for (uint32_t i = 0; i < w->handles.n; i++)
		if (w->handles.v[i].kind == H_GRAPH &&
		    w->handles.v[i].exec_handle == graph &&
		    w->handles.v[i].ctx == w->cur_ctx)
			return pvgpu_handle_id(&w->handles, &w->handles.v[i]);
	return pvgpu_handle_add(&w->handles, H_GRAPH, graph, w->cur_ctx, 0);
}

/* With graph go its nodes, its conditional handles and the body graphs of
 * its conditional nodes (the driver's, destroyed with it), theirs too. */
void pvgpu_graph_forget(struct pvgpu_worker *w, uint64_t graph)
{
	pvgpu_staged_unref(w, graph, 0);
	for (uint32_t i = 0; i < w->handles.n; i++) {
		struct pvgpu_handle *h = &w->handles.v[i];
		uint64_t body;

		if (h->module != graph)
			continue;
		if (h->kind == H_GRAPH_NODE || h->kind == H_COND) {
			pvgpu_handle_release(&w->handles, h);
		} else if (h->kind == H_GRAPH) {
			body = pvgpu_handle_id(&w->handles, h);
			pvgpu_handle_del(&w->handles, body);
			pvgpu_graph_forget(w, body);
		}
	}
}

/* Node ids -> executor node handles, all of graph, no repeats. */
static int32_t nodes_of(struct pvgpu_worker *w, uint64_t graph,
			const uint64_t *ids, uint32_t n, uint64_t *out)
{
	for (uint32_t i = 0; i < n; i++) {
		struct pvgpu_handle *h = node_get(w, ids[i], graph);

		if (!h)
			return CUDA_ERROR_INVALID_VALUE;
		out[i] = h->exec_handle;
	}
	return CUDA_SUCCESS;
}

/* A new node's dependencies: nodes of graph, no repeats, as executor
 * node handles in out. */
int32_t pvgpu_graph_deps(struct pvgpu_worker *w, uint64_t graph,
			 const uint64_t *ids, uint32_t n, uint64_t *out)
{
	int32_t st = nodes_of(w, graph, ids, n, out);

	for (uint32_t i = 0; !st && i < n; i++)
		for (uint32_t j = 0; j < i; j++)
			if (ids[i] == ids[j])
				return CUDA_ERROR_INVALID_VALUE;
	return st;
}

/* [p, p + pitch * (rows - 1) + row) inside one of the session's
 * allocations, without overflow. */
static int range_ok(struct pvgpu_worker *w, uint64_t p, uint64_t row,
		    uint64_t pitch, uint64_t rows)
{
	uint64_t len;

	if (!row || !rows || (rows > 1 && pitch < row))
		return 0;
	if (rows > 1 && pitch > (UINT64_MAX - row) / (rows - 1))
		return 0;
	len = pitch * (rows - 1) + row;
	return p <= UINT64_MAX - len && pvgpu_alloc_range(&w->allocs, p, len);
}

#define KERNEL_FIELDS(req)						\
	((req)->func | (req)->grid_x | (req)->grid_y | (req)->grid_z |	\
	 (req)->block_x | (req)->block_y | (req)->block_z |		\
	 (req)->shared_bytes | (req)->params_len)
#define COPY_FIELDS(req)						\
	((req)->dst | (req)->src | (req)->pitch | (req)->width |	\
	 (req)->height | (req)->value | (req)->elem_size)

#define NODE_SHAPE(req)							\
	.grid = { (req)->grid_x, (req)->grid_y, (req)->grid_z },	\
	.block = { (req)->block_x, (req)->block_y, (req)->block_z },	\
	.shared_bytes = (req)->shared_bytes, .params = (req)->params,	\
	.params_size = (req)->params_len

static int32_t node_check(struct pvgpu_worker *w,
			  const struct pvgpu_graph_add_node_req *req,
			  struct pvgpu_graph_node *n)
{
	switch (req->type) {
	case CU_GRAPH_NODE_TYPE_KERNEL:
		if (COPY_FIELDS(req) || req->host)
			return CUDA_ERROR_INVALID_VALUE;
		n->kernel = (struct pvgpu_launch){ NODE_SHAPE(req) };
		return pvgpu_kernel_prepare(w, &n->kernel, req->func);
	case CU_GRAPH_NODE_TYPE_MEMSET:
		if (KERNEL_FIELDS(req) || req->src || req->host)
			return CUDA_ERROR_INVALID_VALUE;
		if (req->elem_size != 1 && req->elem_size != 2 &&
		    req->elem_size != 4)
			return CUDA_ERROR_INVALID_VALUE;
		if (req->elem_size < 4 && req->value >> (8 * req->elem_size))
			return CUDA_ERROR_INVALID_VALUE;
		if (req->width > UINT64_MAX / req->elem_size ||
		    !range_ok(w, req->dst, req->width * req->elem_size,
			      req->pitch, req->height))
			return CUDA_ERROR_INVALID_VALUE;
		break;
	case CU_GRAPH_NODE_TYPE_MEMCPY:
		if (KERNEL_FIELDS(req) || req->pitch || req->height ||
		    req->value || req->elem_size || req->host > 2)
			return CUDA_ERROR_INVALID_VALUE;
		/* A host end: the window's arena, mapped for the session. */
		if (req->host) {
			n->to_host = req->host == 1;
			n->host = pvgpu_window_host(w, n->to_host ? req->dst :
							req->src, req->width);
			if (!n->host)
				return CUDA_ERROR_INVALID_VALUE;
		}
		if ((req->host != 1 && !range_ok(w, req->dst, req->width, 0, 1)) ||
		    (req->host != 2 && !range_ok(w, req->src, req->width, 0, 1)))
			return CUDA_ERROR_INVALID_VALUE;
		break;
	case CU_GRAPH_NODE_TYPE_EMPTY:
		if (KERNEL_FIELDS(req) || COPY_FIELDS(req) || req->host)
			return CUDA_ERROR_INVALID_VALUE;
		break;
	default:
		wlog_debug(w, "graph node type %u is not supported", req->type);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	n->dst = req->dst;
	n->src = req->src;
	n->pitch = req->pitch;
	n->width = req->width;
	n->height = req->height;
	n->value = req->value;
	n->elem_size = req->elem_size;
	return CUDA_SUCCESS;
}

int32_t pvgpu_handle_graph_add_node(struct pvgpu_worker *w,
				    const struct pvgpu_graph_add_node_req *req,
				    struct pvgpu_graph_add_node_rep *rep)
{
	struct pvgpu_graph_node n = { .type = req->type };
	uint64_t deps[sizeof(req->deps) / sizeof(req->deps[0])];
	struct pvgpu_handle *g;
	uint64_t node = 0;
	int32_t st;

	st = graph_begin(w, req->graph, 0, !!w->ex_ops->graph_add_node, &g);
	if (st)
		return st;
	st = pvgpu_graph_deps(w, req->graph, req->deps, req->deps_count, deps);
	if (st)
		return st;
	st = node_check(w, req, &n);
	if (!st)
		st = pvgpu_room_for_handle(w);
	if (st)
		return st;
	st = w->ex_ops->graph_add_node(w->ex, g->exec_handle, &n, deps,
				       req->deps_count, &node);
	if (st)
		return st;
	rep->node = pvgpu_handle_add(&w->handles, H_GRAPH_NODE, node,
				     w->cur_ctx, (int32_t)req->type);
	if (!rep->node) {
		pvgpu_generic_destroy(w, PVGPU_GENERIC_cuGraphDestroyNode, node);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	pvgpu_handle_get(&w->handles, rep->node, H_GRAPH_NODE)->module =
		req->graph;
	return CUDA_SUCCESS;
}

int32_t pvgpu_handle_graph_kernel_node_set(struct pvgpu_worker *w,
					   const struct pvgpu_graph_kernel_node_set_req *req)
{
	struct pvgpu_launch l = { NODE_SHAPE(req) };
	struct pvgpu_handle *n = node_get(w, req->node, 0), *x = NULL;
	int32_t st;

	if (!w->cur_ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!n || (req->exec &&
		   !(x = pvgpu_handle_get(&w->handles, req->exec, H_GRAPH_EXEC))))
		return CUDA_ERROR_INVALID_HANDLE;
	if (n->device != CU_GRAPH_NODE_TYPE_KERNEL)
		return CUDA_ERROR_INVALID_VALUE;
	if (!w->ex_ops->graph_kernel_node_set)
		return CUDA_ERROR_NOT_SUPPORTED;
	st = pvgpu_kernel_prepare(w, &l, req->func);
	if (st)
		return st;
	return w->ex_ops->graph_kernel_node_set(w->ex, x ? x->exec_handle : 0,
						n->exec_handle, &l);
}

int32_t pvgpu_handle_graph_node_get_type(struct pvgpu_worker *w,
					 const struct pvgpu_graph_node_get_type_req *req,
					 struct pvgpu_graph_node_get_type_rep *rep)
{
	struct pvgpu_handle *n = node_get(w, req->node, 0);

	if (!n)
		return CUDA_ERROR_INVALID_HANDLE;
	rep->type = (uint32_t)n->device;
	return CUDA_SUCCESS;
}

int32_t pvgpu_handle_graph_add_deps(struct pvgpu_worker *w,
				    const struct pvgpu_graph_add_deps_req *req)
{
	uint64_t from[sizeof(req->from) / sizeof(req->from[0])];
	uint64_t to[sizeof(req->to) / sizeof(req->to[0])];
	struct pvgpu_handle *g;
	int32_t st;

	st = graph_begin(w, req->graph,
			 req->from_count != req->to_count ?
			 CUDA_ERROR_INVALID_VALUE : 0,
			 !!w->ex_ops->graph_add_deps, &g);
	if (!st)
		st = nodes_of(w, req->graph, req->from, req->from_count, from);
	if (!st)
		st = nodes_of(w, req->graph, req->to, req->to_count, to);
	for (uint32_t i = 0; !st && i < req->from_count; i++)
		if (from[i] == to[i])
			st = CUDA_ERROR_INVALID_VALUE;
	if (st)
		return st;
	return w->ex_ops->graph_add_deps(w->ex, g->exec_handle, from, to,
					 req->from_count);
}

/* The session's id for an executor node of graph, made on first sight
 * (a captured or cloned graph's nodes); 0 when out of memory. */
uint64_t pvgpu_graph_node_id(struct pvgpu_worker *w, uint64_t graph,
			     uint64_t node, uint32_t type)
{
	struct pvgpu_handle *h;
	uint64_t id;

	for (uint32_t i = 0; i < w->handles.n; i++) {
		h = &w->handles.v[i];
		if (h->kind == H_GRAPH_NODE && h->module == graph &&
		    h->exec_handle == node)
			return pvgpu_handle_id(&w->handles, h);
	}
	id = pvgpu_handle_add(&w->handles, H_GRAPH_NODE, node, w->cur_ctx,
			      (int32_t)type);
	if (id)
		pvgpu_handle_get(&w->handles, id, H_GRAPH_NODE)->module = graph;
	return id;
}

int32_t pvgpu_handle_graph_get_nodes(struct pvgpu_worker *w,
				     const struct pvgpu_graph_get_nodes_req *req,
				     struct pvgpu_graph_get_nodes_rep *rep)
{
	const uint32_t max = sizeof(rep->nodes) / sizeof(rep->nodes[0]);
	uint32_t types[sizeof(rep->nodes) / sizeof(rep->nodes[0])];
	struct pvgpu_handle *g;
	int32_t st;

	st = graph_begin(w, req->graph, 0, !!w->ex_ops->graph_nodes, &g);
	if (st)
		return st;
	st = w->ex_ops->graph_nodes(w->ex, g->exec_handle, rep->nodes, types,
				    max, &rep->count);
	if (st)
		return st;
	rep->nodes_count = rep->count < max ? (uint32_t)rep->count : max;
	for (uint32_t i = 0; i < rep->nodes_count; i++) {
		rep->nodes[i] = pvgpu_graph_node_id(w, req->graph, rep->nodes[i], types[i]);
		if (!rep->nodes[i])
			return CUDA_ERROR_OUT_OF_MEMORY;
	}
	return CUDA_SUCCESS;
}

int32_t pvgpu_handle_graph_exec_update(struct pvgpu_worker *w,
				       const struct pvgpu_graph_exec_update_req *req,
				       struct pvgpu_graph_exec_update_rep *rep)
{
	struct pvgpu_handle *g;
	struct pvgpu_handle *x = pvgpu_handle_get(&w->handles, req->exec,
						  H_GRAPH_EXEC);
	uint64_t node = 0;
	uint32_t type = 0;
	int32_t st;

	st = graph_begin(w, req->graph, x ? 0 : CUDA_ERROR_INVALID_HANDLE,
			 !!w->ex_ops->graph_exec_update, &g);
	if (st)
		return st;
	st = w->ex_ops->graph_exec_update(w->ex, x->exec_handle, g->exec_handle,
					  &rep->result, &node, &type);
	rep->error_node = node ? pvgpu_graph_node_id(w, req->graph, node, type) : 0;
	/* Its copy nodes now name the graph's staging buffers. */
	if (!st && rep->result == CU_GRAPH_EXEC_UPDATE_SUCCESS)
		st = pvgpu_staged_instantiated(w, req->exec, req->graph);
	return st;
}

/* ---- conditional nodes -------------------------------------------------- */

int32_t pvgpu_handle_graph_cond_handle(struct pvgpu_worker *w,
				       const struct pvgpu_graph_cond_handle_req *req,
				       struct pvgpu_graph_cond_handle_rep *rep)
{
	struct pvgpu_handle *g;
	uint64_t id;
	int32_t st;

	st = graph_begin(w, req->graph,
			 req->flags > CU_GRAPH_COND_ASSIGN_DEFAULT ?
			 CUDA_ERROR_INVALID_VALUE : 0,
			 !!w->ex_ops->cond_handle, &g);
	if (!st)
		st = pvgpu_room_for_handle(w);
	if (st)
		return st;
	st = w->ex_ops->cond_handle(w->ex, g->exec_handle, req->default_value,
				    req->flags, &rep->handle);
	if (st)
		return st;
	id = pvgpu_handle_add(&w->handles, H_COND, rep->handle, w->cur_ctx, 0);
	if (!id)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pvgpu_handle_get(&w->handles, id, H_COND)->module = req->graph;
	return CUDA_SUCCESS;
}

/* A conditional handle graph made, by the driver's value. */
static int cond_of(struct pvgpu_worker *w, uint64_t graph, uint64_t value)
{
	for (uint32_t i = 0; i < w->handles.n; i++)
		if (w->handles.v[i].kind == H_COND &&
		    w->handles.v[i].module == graph &&
		    w->handles.v[i].exec_handle == value)
			return 1;
	return 0;
}

int32_t pvgpu_handle_graph_cond_node(struct pvgpu_worker *w,
				     const struct pvgpu_graph_cond_node_req *req,
				     struct pvgpu_graph_cond_node_rep *rep)
{
	const uint32_t max = sizeof(rep->bodies) / sizeof(rep->bodies[0]);
	uint64_t deps[sizeof(req->deps) / sizeof(req->deps[0])];
	uint64_t bodies[sizeof(rep->bodies) / sizeof(rep->bodies[0])] = { 0 };
	struct pvgpu_graph_node n = {
		.type = CU_GRAPH_NODE_TYPE_CONDITIONAL, .cond = req->handle,
		.cond_type = req->type, .cond_size = req->size, .bodies = bodies,
	};
	struct pvgpu_handle *g;
	uint64_t node = 0;
	int32_t st;
	int bad = !cond_of(w, req->graph, req->handle) ||
		  req->type > CU_GRAPH_COND_TYPE_SWITCH || !req->size ||
		  req->size > max ||
		  (req->type == CU_GRAPH_COND_TYPE_IF && req->size > 2) ||
		  (req->type == CU_GRAPH_COND_TYPE_WHILE && req->size > 1);

	st = graph_begin(w, req->graph, bad ? CUDA_ERROR_INVALID_VALUE : 0,
			 !!w->ex_ops->graph_add_node, &g);
	if (!st)
		st = pvgpu_graph_deps(w, req->graph, req->deps, req->deps_count, deps);
	if (!st)
		st = w->ex_ops->graph_add_node(w->ex, g->exec_handle, &n, deps,
					       req->deps_count, &node);
	if (st)
		return st;
	rep->node = pvgpu_graph_node_id(w, req->graph, node,
					CU_GRAPH_NODE_TYPE_CONDITIONAL);
	if (!rep->node)
		return CUDA_ERROR_OUT_OF_MEMORY;
	/* The bodies: the session's graphs, belonging to this one. */
	rep->bodies_count = req->size;
	for (uint32_t i = 0; i < req->size; i++) {
		rep->bodies[i] = bodies[i] ? pvgpu_graph_id(w, bodies[i]) : 0;
		if (!rep->bodies[i])
			return CUDA_ERROR_OUT_OF_MEMORY;
		pvgpu_handle_get(&w->handles, rep->bodies[i], H_GRAPH)->module =
			req->graph;
	}
	return CUDA_SUCCESS;
}
