/*
 * cuda_capture.c - stream capture queries and staged graph copies, guest
 * side (ops.spec stream_capture_*, graph_staged_*; the backend's half is
 * host-backend/session/capture.c).
 *
 * Capture queries.  Libraries ask whether a stream is capturing before
 * nearly every call; while this process has no capture under way the
 * answer is "none" from here (cuStreamIsCapturing, cuda_stream.c).  While
 * one is, cuStreamGetCaptureInfo asks the backend and answers what the
 * driver would: the capture's id, its graph (the id cuStreamEndCapture will
 * give: nodes can be added to it), and the nodes the next captured work
 * depends on, with their edge data, in arrays of the calling thread's that
 * stay valid until its next query (the driver's stay valid until the next
 * call on the stream).  cuStreamUpdateCaptureDependencies goes to the
 * backend; cuThreadExchangeStreamCaptureMode keeps the mode per thread, as
 * the driver does (the backend captures in relaxed mode, generic.c).
 *
 * Staged copies.  A copy node (cuGraphAddMemcpyNode, or cuMemcpy*Async
 * captured from a stream) whose host end is ordinary guest memory
 * (pageable or malloc'd, not in the backend's shared window) cannot be
 * reached by the worker.  Such a node copies from or into a staging buffer
 * of the worker's instead, and this file moves the bytes, keeping CUDA's
 * rule that a copy node reads and writes host memory when it runs:
 *
 * - the guest keeps each such node's host address, size and direction,
 *   and, at cuGraphInstantiate (and cuGraphExecUpdate), the list of them
 *   the executable graph runs;
 * - cuGraphLaunch first sends what host memory holds then for the
 *   host-to-device nodes (graph_staged_put, queued ahead of the launch in
 *   the same stream of messages), then launches;
 * - a launch with device-to-host nodes is remembered as pending; the
 *   synchronisation that covers it (cuStreamSynchronize or a successful
 *   cuStreamQuery of its stream, cuCtxSynchronize of its context,
 *   cuEventSynchronize or a successful cuEventQuery of an event recorded on
 *   its stream after it) fetches what they wrote (graph_staged_get) into
 *   guest memory before returning, as device printf is delivered.
 *
 * The host end in the window stays zero-copy (cuda_graph.c, cuda_mem.c).
 * What differs from the driver: host-to-device bytes are those of launch
 * time, not of the moment the node runs (the same unless the program
 * writes the memory while the graph is in flight, a race under CUDA too),
 * and device-to-host bytes land at the synchronisation, not earlier (a
 * program that reads them without synchronising races under CUDA too).
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
#define MAX_DEPS	512	/* ops.spec: deps, staging max */

/* ---- capture queries ---------------------------------------------------- */

static _Thread_local CUgraphNode info_deps[MAX_DEPS];
static _Thread_local CUgraphEdgeData info_edges[MAX_DEPS];
static _Thread_local CUstreamCaptureMode capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

static CUresult capture_info(CUstream s, int ptsz, CUstreamCaptureStatus *status,
			     cuuint64_t *id, CUgraph *graph,
			     const CUgraphNode **deps,
			     const CUgraphEdgeData **edges, size_t *ndeps)
{
	struct pvgpu_stream_capture_info_req req = { 0 };
	struct pvgpu_stream_capture_info_rep *rep;
	struct cu_ctx *ctx = NULL;
	struct cu_op op;
	CUresult r;

	if (!status)
		return CUDA_ERROR_INVALID_VALUE;
	/* Nothing captured in this process: the answer is here. */
	if (!cu_captures_active()) {
		r = cuStreamIsCapturing(ptsz && !s ? CU_STREAM_PER_THREAD : s, status);
		if (r)
			return r;
		rep = NULL;
		goto none;
	}
	r = cu_generic_stream(s, ptsz, &ctx, &req.stream);
	if (r)
		return r;
	rep = calloc(1, sizeof(*rep));
	if (!rep)
		return CUDA_ERROR_OUT_OF_MEMORY;
	r = cu_op_begin(&op, ctx);
	if (!r) {
		r = cu_status(pvgpu_call_stream_capture_info(op.client, &req, rep));
		cu_op_end(&op);
	}
	if (!r && rep->edges_count != rep->deps_count)
		r = CUDA_ERROR_UNKNOWN;
	if (r) {
		free(rep);
		if (r == CUDA_ERROR_NOT_SUPPORTED)
			pvgpu_cuda_unsupported("cuStreamGetCaptureInfo");
		return r;
	}
	*status = (CUstreamCaptureStatus)rep->status;
	if (rep->status == CU_STREAM_CAPTURE_STATUS_NONE)
		goto none;
	for (uint32_t i = 0; i < rep->deps_count; i++) {
		info_deps[i] = (CUgraphNode)(uintptr_t)rep->deps[i];
		memcpy(&info_edges[i], &rep->edges[i], sizeof(info_edges[i]));
	}
	if (id)
		*id = rep->id;
	if (graph)
		*graph = (CUgraph)(uintptr_t)rep->graph;
	if (deps)
		*deps = rep->deps_count ? info_deps : NULL;
	if (edges)
		*edges = rep->deps_count ? info_edges : NULL;
	if (ndeps)
		*ndeps = rep->deps_count;
	free(rep);
	return CUDA_SUCCESS;
none:
	/* The driver leaves the rest alone when nothing is captured; zero
	 * them anyway, so that nobody reads garbage. */
	free(rep);
	if (id)
		*id = 0;
	if (graph)
		*graph = NULL;
	if (deps)
		*deps = NULL;
	if (edges)
		*edges = NULL;
	if (ndeps)
		*ndeps = 0;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamGetCaptureInfo_v3(CUstream s, CUstreamCaptureStatus *status,
					   cuuint64_t *id, CUgraph *graph,
					   const CUgraphNode **deps,
					   const CUgraphEdgeData **edges,
					   size_t *ndeps)
{
	return capture_info(s, 0, status, id, graph, deps, edges, ndeps);
}

CUresult CUDAAPI cuStreamGetCaptureInfo_v3_ptsz(CUstream s, CUstreamCaptureStatus *status,
						cuuint64_t *id, CUgraph *graph,
						const CUgraphNode **deps,
						const CUgraphEdgeData **edges,
						size_t *ndeps)
{
	return capture_info(s, 1, status, id, graph, deps, edges, ndeps);
}

/* The _v2 entries have no edge data: a capture with edge data other than
 * the default is one they cannot describe (as the driver says). */
static CUresult capture_info_v2(CUstream s, int ptsz, CUstreamCaptureStatus *status,
				cuuint64_t *id, CUgraph *graph,
				const CUgraphNode **deps, size_t *ndeps)
{
	static const CUgraphEdgeData zero;
	const CUgraphEdgeData *e = NULL;
	size_t n = 0;
	CUresult r = capture_info(s, ptsz, status, id, graph, deps, &e, &n);

	for (size_t i = 0; !r && e && i < n; i++)
		if (memcmp(&e[i], &zero, sizeof(zero)))
			return CUDA_ERROR_LOSSY_QUERY;
	if (!r && ndeps)
		*ndeps = n;
	return r;
}

CUresult CUDAAPI cuStreamGetCaptureInfo_v2(CUstream s, CUstreamCaptureStatus *status,
					   cuuint64_t *id, CUgraph *graph,
					   const CUgraphNode **deps, size_t *ndeps)
{
	return capture_info_v2(s, 0, status, id, graph, deps, ndeps);
}

CUresult CUDAAPI cuStreamGetCaptureInfo_v2_ptsz(CUstream s, CUstreamCaptureStatus *status,
						cuuint64_t *id, CUgraph *graph,
						const CUgraphNode **deps, size_t *ndeps)
{
	return capture_info_v2(s, 1, status, id, graph, deps, ndeps);
}

CUresult CUDAAPI cuStreamGetCaptureInfo(CUstream s, CUstreamCaptureStatus *status,
					cuuint64_t *id)
{
	return capture_info(s, 0, status, id, NULL, NULL, NULL, NULL);
}

CUresult CUDAAPI cuStreamGetCaptureInfo_ptsz(CUstream s, CUstreamCaptureStatus *status,
					     cuuint64_t *id)
{
	return capture_info(s, 1, status, id, NULL, NULL, NULL, NULL);
}

static CUresult capture_deps(CUstream s, int ptsz, CUgraphNode *deps,
			     const CUgraphEdgeData *edges, size_t n,
			     unsigned int flags)
{
	struct pvgpu_stream_capture_deps_req *req;
	struct pvgpu_stream_capture_deps_rep rep;
	struct cu_ctx *ctx = NULL;
	struct cu_op op;
	CUresult r;

	if ((n && !deps) || flags > CU_STREAM_SET_CAPTURE_DEPENDENCIES)
		return CUDA_ERROR_INVALID_VALUE;
	if (n > MAX_DEPS) {
		pvgpu_debug("cuStreamUpdateCaptureDependencies: %zu nodes, pvgpu "
			    "takes %d", n, MAX_DEPS);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	if (!cu_captures_active())
		return CUDA_ERROR_ILLEGAL_STATE;	/* not capturing */
	req = calloc(1, sizeof(*req));
	if (!req)
		return CUDA_ERROR_OUT_OF_MEMORY;
	r = cu_generic_stream(s, ptsz, &ctx, &req->stream);
	for (size_t i = 0; !r && i < n; i++) {
		req->deps[i] = ID(deps[i]);
		if (edges)
			memcpy(&req->edges[i], &edges[i], sizeof(req->edges[i]));
	}
	req->deps_count = (uint32_t)n;
	req->edges_count = edges ? (uint32_t)n : 0;
	req->flags = flags;
	if (!r)
		r = cu_op_begin(&op, ctx);
	if (!r) {
		r = cu_status(pvgpu_call_stream_capture_deps(op.client, req, &rep));
		cu_op_end(&op);
	}
	free(req);
	if (r == CUDA_ERROR_NOT_SUPPORTED)
		pvgpu_cuda_unsupported("cuStreamUpdateCaptureDependencies");
	return r;
}

/*
 * cuLaunchHostFunc on a capturing stream: a host node of the capture's
 * graph after what the capture depends on, made the capture's only
 * dependency (cuda_graph.c runs host nodes at each launch, after the
 * graph's device work).  1: s was capturing, *r says how it went; 0: it
 * was not (the function runs now).
 */
int cu_capture_host(CUstream s, CUhostFn fn, void *data, CUresult *r)
{
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
	CUDA_HOST_NODE_PARAMS p = { .fn = fn, .userData = data };
	const CUgraphNode *deps = NULL;
	CUgraphNode node = NULL, *v = NULL;
	CUgraph g = NULL;
	size_t n = 0;

	if (!cu_captures_active())
		return 0;
	*r = capture_info_v2(s, 0, &st, NULL, &g, &deps, &n);
	if (!*r && st == CU_STREAM_CAPTURE_STATUS_NONE)
		return 0;
	if (!*r && st != CU_STREAM_CAPTURE_STATUS_ACTIVE)
		*r = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
	/* deps is this thread's, and the next query's: copy it. */
	if (!*r && n && !(v = malloc(n * sizeof(*v))))
		*r = CUDA_ERROR_OUT_OF_MEMORY;
	if (!*r && n)
		memcpy(v, deps, n * sizeof(*v));
	if (!*r)
		*r = cuGraphAddHostNode(&node, g, v, n, &p);
	free(v);
	if (!*r)
		*r = capture_deps(s, 0, &node, NULL, 1,
				  CU_STREAM_SET_CAPTURE_DEPENDENCIES);
	return 1;
}

/* cuStreamBeginCaptureToGraph: a capture into g, which the worker checks
 * is the session's, as are deps (nodes of g). */
static CUresult capture_to_graph(CUstream s, int ptsz, CUgraph g,
				 const CUgraphNode *deps,
				 const CUgraphEdgeData *edges, size_t n,
				 CUstreamCaptureMode mode)
{
	struct pvgpu_stream_capture_to_graph_req *req;
	struct pvgpu_stream_capture_to_graph_rep rep;
	struct cu_ctx *ctx = NULL;
	struct cu_op op;
	CUresult r;

	if (!g || (n && !deps) || mode > CU_STREAM_CAPTURE_MODE_RELAXED)
		return CUDA_ERROR_INVALID_VALUE;
	if (n > MAX_DEPS) {
		pvgpu_debug("cuStreamBeginCaptureToGraph: %zu dependencies, "
			    "pvgpu takes %d", n, MAX_DEPS);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	req = calloc(1, sizeof(*req));
	if (!req)
		return CUDA_ERROR_OUT_OF_MEMORY;
	r = cu_generic_stream(s, ptsz, &ctx, &req->stream);
	if (!r && !req->stream)
		r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;	/* legacy stream */
	for (size_t i = 0; !r && i < n; i++) {
		req->deps[i] = ID(deps[i]);
		if (edges)
			memcpy(&req->edges[i], &edges[i], sizeof(req->edges[i]));
	}
	req->graph = ID(g);
	req->deps_count = (uint32_t)n;
	req->edges_count = edges ? (uint32_t)n : 0;
	req->mode = (uint32_t)mode;
	if (!r)
		r = ctx ? cu_op_begin(&op, ctx) : cu_op_current(&op);
	if (!r) {
		r = cu_status(pvgpu_call_stream_capture_to_graph(op.client, req,
								 &rep));
		cu_op_end(&op);
	}
	free(req);
	if (!r)
		cu_capture_begun();
	if (r == CUDA_ERROR_NOT_SUPPORTED)
		pvgpu_cuda_unsupported("cuStreamBeginCaptureToGraph");
	return r;
}

CUresult CUDAAPI cuStreamBeginCaptureToGraph(CUstream s, CUgraph g,
					     const CUgraphNode *deps,
					     const CUgraphEdgeData *edges, size_t n,
					     CUstreamCaptureMode mode)
{
	return capture_to_graph(s, 0, g, deps, edges, n, mode);
}

CUresult CUDAAPI cuStreamBeginCaptureToGraph_ptsz(CUstream s, CUgraph g,
						  const CUgraphNode *deps,
						  const CUgraphEdgeData *edges,
						  size_t n, CUstreamCaptureMode mode)
{
	return capture_to_graph(s, 1, g, deps, edges, n, mode);
}

CUresult CUDAAPI cuStreamUpdateCaptureDependencies(CUstream s, CUgraphNode *deps,
						   size_t n, unsigned int flags)
{
	return capture_deps(s, 0, deps, NULL, n, flags);
}

CUresult CUDAAPI cuStreamUpdateCaptureDependencies_ptsz(CUstream s, CUgraphNode *deps,
							size_t n, unsigned int flags)
{
	return capture_deps(s, 1, deps, NULL, n, flags);
}

CUresult CUDAAPI cuStreamUpdateCaptureDependencies_v2(CUstream s, CUgraphNode *deps,
						      const CUgraphEdgeData *edges,
						      size_t n, unsigned int flags)
{
	return capture_deps(s, 0, deps, edges, n, flags);
}

CUresult CUDAAPI cuStreamUpdateCaptureDependencies_v2_ptsz(CUstream s, CUgraphNode *deps,
							   const CUgraphEdgeData *edges,
							   size_t n, unsigned int flags)
{
	return capture_deps(s, 1, deps, edges, n, flags);
}

CUresult CUDAAPI cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
	CUstreamCaptureMode old = capture_mode;

	if (!mode || (unsigned)*mode > CU_STREAM_CAPTURE_MODE_RELAXED)
		return CUDA_ERROR_INVALID_VALUE;
	capture_mode = *mode;
	*mode = old;
	return CUDA_SUCCESS;
}

/* ---- staged copy nodes ---------------------------------------------------- */

/* One staged node's guest end. */
struct staged_ref {
	uint64_t staging;		/* the worker's buffer */
	void *host;
	size_t size;
	int to_host;
};

struct staged_node {
	struct staged_node *next;
	uint64_t node, graph;
	struct staged_ref ref;
};

/* An executable graph's staged nodes, or a launch still to deliver. */
struct staged_list {
	struct staged_list *next;
	uint64_t exec;
	struct cu_ctx *ctx;		/* pending: the launch's */
	uint64_t stream;		/* pending: the backend's stream */
	uint64_t seq;			/* pending: launch order */
	size_t n;
	struct staged_ref *v;
};

static pthread_mutex_t staged_lock = PTHREAD_MUTEX_INITIALIZER;
static struct staged_node *staged_nodes;
static struct staged_list *staged_execs, *staged_pending;
static uint64_t launch_seq;

static void list_free(struct staged_list *l)
{
	if (l) {
		free(l->v);
		free(l);
	}
}

/* The node (or every staged node of graph) forgotten. */
void cu_staged_forget(uint64_t graph, uint64_t node)
{
	struct staged_node **pp, *s;

	pthread_mutex_lock(&staged_lock);
	for (pp = &staged_nodes; (s = *pp);) {
		if ((graph && s->graph == graph) || (node && s->node == node)) {
			*pp = s->next;
			free(s);
		} else {
			pp = &s->next;
		}
	}
	pthread_mutex_unlock(&staged_lock);
}

size_t cu_staged_count(uint64_t graph)
{
	size_t n = 0;

	pthread_mutex_lock(&staged_lock);
	for (struct staged_node *s = staged_nodes; s; s = s->next)
		n += s->graph == graph;
	pthread_mutex_unlock(&staged_lock);
	return n;
}

CUresult cu_staged_add(struct cu_ctx *ctx, uint64_t graph,
		       const CUgraphNode *deps, size_t ndeps, uint64_t stream,
		       CUdeviceptr dptr, void *host, size_t size, int to_host,
		       CUgraphNode *out)
{
	struct pvgpu_graph_staged_copy_req *req;
	struct pvgpu_graph_staged_copy_rep rep = { 0 };
	struct staged_node *s;
	struct cu_op op;
	CUresult r;

	if (ndeps > MAX_DEPS)
		return CUDA_ERROR_NOT_SUPPORTED;
	req = calloc(1, sizeof(*req));
	s = calloc(1, sizeof(*s));
	if (!req || !s) {
		free(req);
		free(s);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*req = (struct pvgpu_graph_staged_copy_req){
		.graph = graph, .stream = stream, .dptr = dptr, .size = size,
		.to_host = (uint32_t)to_host, .deps_count = (uint32_t)ndeps,
	};
	for (size_t i = 0; i < ndeps; i++)
		req->deps[i] = ID(deps[i]);
	r = cu_op_begin(&op, ctx);
	if (!r) {
		r = cu_status(pvgpu_call_graph_staged_copy(op.client, req, &rep));
		cu_op_end(&op);
	}
	free(req);
	if (r) {
		free(s);
		return r;
	}
	*s = (struct staged_node){
		.node = rep.node, .graph = rep.in_graph,
		.ref = { rep.staging, host, size, to_host },
	};
	pthread_mutex_lock(&staged_lock);
	s->next = staged_nodes;
	staged_nodes = s;
	pthread_mutex_unlock(&staged_lock);
	if (out)
		*out = (CUgraphNode)(uintptr_t)rep.node;
	return CUDA_SUCCESS;
}

/* After cuGraphClone: clone's copies of graph's staged nodes, each with
 * a buffer of its own on the worker and the same guest memory. */
CUresult cu_staged_clone(uint64_t graph, uint64_t clone)
{
	size_t n = 0, k = 0;
	struct staged_node *v = NULL;
	CUresult r = CUDA_SUCCESS;

	pthread_mutex_lock(&staged_lock);
	for (struct staged_node *s = staged_nodes; s; s = s->next)
		n += s->graph == graph;
	if (n && !(v = calloc(n, sizeof(*v))))
		r = CUDA_ERROR_OUT_OF_MEMORY;
	for (struct staged_node *s = staged_nodes; v && s; s = s->next)
		if (s->graph == graph)
			v[k++] = *s;
	pthread_mutex_unlock(&staged_lock);
	for (size_t i = 0; !r && i < n; i++) {
		struct staged_node *c = calloc(1, sizeof(*c));
		uint64_t node = 0, staging = 0;

		r = c ? cu_graph_clone_node(clone, v[i].node, &node, &staging) :
			CUDA_ERROR_OUT_OF_MEMORY;
		if (!r && !staging)
			r = CUDA_ERROR_UNKNOWN;	/* the worker lost it */
		if (r) {
			free(c);
			break;
		}
		*c = (struct staged_node){ .node = node, .graph = clone,
					   .ref = v[i].ref };
		c->ref.staging = staging;
		pthread_mutex_lock(&staged_lock);
		c->next = staged_nodes;
		staged_nodes = c;
		pthread_mutex_unlock(&staged_lock);
	}
	free(v);
	return r;
}

/* Drop exec's list (from lists *head). */
static void list_drop(struct staged_list **head, uint64_t exec)
{
	struct staged_list **pp, *l;

	for (pp = head; (l = *pp);) {
		if (l->exec == exec) {
			*pp = l->next;
			list_free(l);
		} else {
			pp = &l->next;
		}
	}
}

void cu_staged_exec_gone(uint64_t exec)
{
	pthread_mutex_lock(&staged_lock);
	list_drop(&staged_execs, exec);
	pthread_mutex_unlock(&staged_lock);
}

CUresult cu_staged_instantiate(uint64_t exec, uint64_t graph)
{
	size_t n = cu_staged_count(graph);
	struct staged_list *l = NULL;

	if (n) {
		l = calloc(1, sizeof(*l));
		if (l)
			l->v = calloc(n, sizeof(*l->v));
		if (!l || !l->v) {
			free(l);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		l->exec = exec;
	}
	pthread_mutex_lock(&staged_lock);
	list_drop(&staged_execs, exec);
	for (struct staged_node *s = staged_nodes; l && s && l->n < n; s = s->next)
		if (s->graph == graph)
			l->v[l->n++] = s->ref;
	if (l) {
		l->next = staged_execs;
		staged_execs = l;
	}
	pthread_mutex_unlock(&staged_lock);
	return CUDA_SUCCESS;
}

/* A copy of exec's list (NULL: none, or out of memory: *r says). */
static struct staged_list *exec_list(uint64_t exec, CUresult *r)
{
	struct staged_list *c = NULL;

	*r = CUDA_SUCCESS;
	pthread_mutex_lock(&staged_lock);
	for (struct staged_list *l = staged_execs; l && !c; l = l->next) {
		if (l->exec != exec)
			continue;
		c = calloc(1, sizeof(*c));
		if (c)
			c->v = malloc(l->n * sizeof(*c->v));
		if (!c || !c->v) {
			free(c);
			c = NULL;
			*r = CUDA_ERROR_OUT_OF_MEMORY;
			break;
		}
		memcpy(c->v, l->v, l->n * sizeof(*c->v));
		c->n = l->n;
		c->exec = exec;
	}
	pthread_mutex_unlock(&staged_lock);
	return c;
}

/*
 * Before launching exec on stream (the backend's) of ctx: the bytes of
 * its host-to-device nodes, queued ahead of the launch; *pending (freed by
 * cu_staged_launched) what its device-to-host nodes will need.
 */
CUresult cu_staged_launch(struct cu_ctx *ctx, uint64_t exec, void **pending)
{
	struct pvgpu_graph_staged_put_req *req = NULL;
	struct staged_list *l;
	uint8_t *bytes = NULL;
	size_t total = 0, k = 0;
	struct cu_op op;
	CUresult r;

	*pending = NULL;
	l = exec_list(exec, &r);
	if (!l)
		return r;
	for (size_t i = 0; i < l->n; i++) {
		if (!l->v[i].to_host)
			total += l->v[i].size;
		k += !l->v[i].to_host;
	}
	if (k > MAX_DEPS || l->n - k > MAX_DEPS) {
		pvgpu_debug("cuGraphLaunch: more than %d copy nodes each way with "
			    "host memory outside the shared window", MAX_DEPS);
		r = CUDA_ERROR_NOT_SUPPORTED;
		goto out;
	}
	k = 0;
	if (total) {
		req = calloc(1, sizeof(*req));
		bytes = malloc(total);
		if (!req || !bytes) {
			r = CUDA_ERROR_OUT_OF_MEMORY;
			goto out;
		}
		for (size_t i = 0; i < l->n; i++) {
			if (l->v[i].to_host)
				continue;
			memcpy(bytes + req->size, l->v[i].host, l->v[i].size);
			req->size += l->v[i].size;
			req->staging[req->staging_count++] = l->v[i].staging;
		}
		r = cu_op_begin(&op, ctx);
		if (r)
			goto out;
		r = cu_status(pvgpu_call_graph_staged_put(op.client, req, bytes));
		cu_op_end(&op);
		if (r)
			goto out;
	}
	/* What the launch's device-to-host nodes will need. */
	for (size_t i = 0; i < l->n; i++)
		if (l->v[i].to_host)
			l->v[k++] = l->v[i];
	l->n = k;
	l->ctx = ctx;
	if (k) {
		*pending = l;
		l = NULL;
	}
out:
	free(req);
	free(bytes);
	list_free(l);
	return r;
}

/* exec was launched on stream: remember what to deliver (NULL: nothing). */
void cu_staged_launched(void *pending, uint64_t stream, CUresult r)
{
	struct staged_list *l = pending;

	if (!l)
		return;
	if (r) {
		list_free(l);
		return;
	}
	l->stream = stream;
	pthread_mutex_lock(&staged_lock);
	l->seq = ++launch_seq;
	l->next = staged_pending;
	staged_pending = l;
	pthread_mutex_unlock(&staged_lock);
}

uint64_t cu_staged_seq(void)
{
	uint64_t s;

	pthread_mutex_lock(&staged_lock);
	s = launch_seq;
	pthread_mutex_unlock(&staged_lock);
	return s;
}

/* Fetch l's device-to-host bytes into guest memory. */
static CUresult deliver(struct staged_list *l)
{
	struct pvgpu_graph_staged_get_req *req = calloc(1, sizeof(*req));
	uint8_t *bytes = NULL;
	struct cu_op op;
	CUresult r;

	for (size_t i = 0; req && i < l->n; i++) {
		req->staging[req->staging_count++] = l->v[i].staging;
		req->size += l->v[i].size;
	}
	if (!req || !(bytes = malloc(req->size ? req->size : 1))) {
		free(req);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	r = cu_op_begin(&op, l->ctx);
	if (!r) {
		struct pvgpu_graph_staged_get_rep rep;

		r = cu_status(pvgpu_call_graph_staged_get(op.client, req, &rep, bytes));
		cu_op_end(&op);
	}
	for (size_t i = 0, off = 0; !r && i < req->staging_count; i++) {
		memcpy(l->v[i].host, bytes + off, l->v[i].size);
		off += l->v[i].size;
	}
	free(bytes);
	free(req);
	return r;
}

/*
 * A synchronisation in ctx has returned: deliver the launches it covers,
 * those on stream (all: every stream of ctx) up to launch number seq.
 */
CUresult cu_staged_sync(struct cu_ctx *ctx, uint64_t stream, int all, uint64_t seq)
{
	struct staged_list *done = NULL, **pp, *l;
	CUresult r = CUDA_SUCCESS;

	pthread_mutex_lock(&staged_lock);
	for (pp = &staged_pending; (l = *pp);) {
		if (l->ctx == ctx && (all || l->stream == stream) && l->seq <= seq) {
			*pp = l->next;
			l->next = done;
			done = l;	/* the pending list is newest first */
		} else {
			pp = &l->next;
		}
	}
	pthread_mutex_unlock(&staged_lock);
	/* Oldest first, so that the newest bytes win where two overlap. */
	while ((l = done)) {
		done = l->next;
		if (!r)
			r = deliver(l);
		list_free(l);
	}
	return r;
}
