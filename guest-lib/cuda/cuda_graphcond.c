/*
 * cuda_graphcond.c - conditional graph nodes (cuGraphConditionalHandleCreate,
 * cuGraphAddNode with CU_GRAPH_NODE_TYPE_CONDITIONAL: IF, WHILE, SWITCH;
 * ops.spec graph_cond_*, host-backend/session/graphs.c).
 *
 * A conditional handle is the driver's value itself: kernels take it as a
 * parameter and set it on the GPU (cudaGraphSetConditional).  The worker
 * keeps which handles each of the session's graphs made, and a conditional
 * node may use only those of its own graph.  The body graphs the driver
 * makes with the node come back as the session's graph ids, graphs the
 * program adds nodes to as to any other; the array the driver hands back
 * in phGraph_out is kept here, per node, while the node's graph lives.
 */
#include "cuda_internal.h"	/* first: the legacy entries' own types */

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "cuda_surface.h"
#include "debug.h"
#include "pvgpu_guest.h"
#include "pvgpu_proto.h"

#define ID(h)		((uint64_t)(uintptr_t)(h))
#define MAX_DEPS	512	/* ops.spec graph_cond_node: deps max */

struct cond_node {
	struct cond_node *next;
	uint64_t node, graph;
	CUgraph bodies[];
};

static pthread_mutex_t cond_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cond_node *cond_nodes;

/* The body arrays of graph's conditional nodes (0: of every graph), or
 * of one node, forgotten. */
void cu_graph_cond_forget(uint64_t graph, uint64_t node)
{
	struct cond_node **pp, *c;

	pthread_mutex_lock(&cond_lock);
	for (pp = &cond_nodes; (c = *pp);) {
		if ((graph && c->graph == graph) || (node && c->node == node)) {
			*pp = c->next;
			free(c);
		} else {
			pp = &c->next;
		}
	}
	pthread_mutex_unlock(&cond_lock);
}

CUresult CUDAAPI cuGraphConditionalHandleCreate(CUgraphConditionalHandle *out,
						CUgraph g, CUcontext c,
						unsigned int default_value,
						unsigned int flags)
{
	struct pvgpu_graph_cond_handle_req req = {
		.graph = ID(g), .default_value = default_value, .flags = flags,
	};
	struct pvgpu_graph_cond_handle_rep rep = { 0 };
	struct cu_ctx *ctx = c ? cu_ctx_check(c) : NULL;
	struct cu_op op;
	CUresult r;

	if (!out || !g)
		return CUDA_ERROR_INVALID_VALUE;
	if (!ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	r = cu_op_begin(&op, ctx);
	if (r)
		return r;
	r = cu_status(pvgpu_call_graph_cond_handle(op.client, &req, &rep));
	cu_op_end(&op);
	if (r == CUDA_ERROR_NOT_SUPPORTED)
		pvgpu_cuda_unsupported("cuGraphConditionalHandleCreate");
	if (!r)
		*out = (CUgraphConditionalHandle)rep.handle;
	return r;
}

/* cuGraphAddNode(_v2) with CU_GRAPH_NODE_TYPE_CONDITIONAL. */
CUresult cu_graph_add_cond_node(CUgraphNode *out, CUgraph g, const CUgraphNode *deps,
				size_t ndeps, CUgraphNodeParams *p)
{
	CUDA_CONDITIONAL_NODE_PARAMS *cp = &p->conditional;
	struct pvgpu_graph_cond_node_req *req;
	struct pvgpu_graph_cond_node_rep rep = { 0 };
	struct cu_ctx *ctx = cp->ctx ? cu_ctx_check(cp->ctx) : NULL;
	struct cond_node *c;
	struct cu_op op;
	CUresult r;

	if (!out || (ndeps && !deps) || !cp->size)
		return CUDA_ERROR_INVALID_VALUE;
	if (!ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (ndeps > MAX_DEPS || cp->size > 64) {
		pvgpu_debug("cuGraphAddNode: a conditional node with %zu "
			    "dependencies and %u bodies (pvgpu takes %d and 64)",
			    ndeps, cp->size, MAX_DEPS);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	req = calloc(1, sizeof(*req));
	c = calloc(1, sizeof(*c) + cp->size * sizeof(CUgraph));
	if (!req || !c) {
		free(req);
		free(c);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	req->graph = ID(g);
	req->handle = cp->handle;
	req->type = (uint32_t)cp->type;
	req->size = cp->size;
	req->deps_count = (uint32_t)ndeps;
	for (size_t i = 0; i < ndeps; i++)
		req->deps[i] = ID(deps[i]);
	r = cu_op_begin(&op, ctx);
	if (!r) {
		r = cu_status(pvgpu_call_graph_cond_node(op.client, req, &rep));
		cu_op_end(&op);
	}
	free(req);
	if (!r && rep.bodies_count != cp->size)
		r = CUDA_ERROR_UNKNOWN;
	if (r) {
		free(c);
		if (r == CUDA_ERROR_NOT_SUPPORTED)
			pvgpu_cuda_unsupported("cuGraphAddNode (conditional)");
		return r;
	}
	c->node = rep.node;
	c->graph = ID(g);
	for (uint32_t i = 0; i < cp->size; i++)
		c->bodies[i] = (CUgraph)(uintptr_t)rep.bodies[i];
	pthread_mutex_lock(&cond_lock);
	c->next = cond_nodes;
	cond_nodes = c;
	pthread_mutex_unlock(&cond_lock);
	cp->phGraph_out = c->bodies;
	*out = (CUgraphNode)(uintptr_t)rep.node;
	return CUDA_SUCCESS;
}
