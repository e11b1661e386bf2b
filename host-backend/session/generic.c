/*
 * generic.c - the generic driver call, backend side.
 *
 * protocol/api/annotations.py GENERIC describes each function's arguments
 * (gen_generic.py makes the table in build/gen/pvgpu_generic.c); here every
 * guest-supplied value is checked and translated before the executor calls
 * the real function: stream handles through the session's handle table (in
 * its current context), device ranges against its allocations, a device
 * against the current context's, result slots reduced to "wanted or not".
 * What goes back is only the results: the backend's own handles never
 * reach the guest.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>

#include "gpusched.h"
#include "pvgpu_dispatch.h"
#include "pvgpu_generic.h"
#include "worker.h"

/*
 * The handle kinds of annotations.py, as the session's table keeps them:
 * the table's kind; bound: usable only in the context that made it (as
 * the driver's own: a function, array or object of another context is
 * not this one's); by_value: the guest names it by the driver's value
 * (kernels read texture and surface objects as they are), not by an id;
 * always_gone: the entry goes whatever the destroy said (the guest
 * forgets it either way, as it always did).
 */
static const struct {
	enum pvgpu_handle_kind kind;
	bool bound, by_value, always_gone;
} kinds[PVGPU_GH_COUNT] = {
	[PVGPU_GH_GRAPH]	= { H_GRAPH, false, false, false },
	[PVGPU_GH_GRAPH_EXEC]	= { H_GRAPH_EXEC, false, false, false },
	[PVGPU_GH_MEM]		= { H_MEM, false, false, false },
	[PVGPU_GH_EVENT]	= { H_EVENT, false, false, true },
	[PVGPU_GH_FUNC]		= { H_FUNC, true, false, false },
	[PVGPU_GH_MODULE]	= { H_MODULE, true, false, false },
	[PVGPU_GH_ARRAY]	= { H_ARRAY, true, false, true },
	[PVGPU_GH_TEX]		= { H_TEX, true, true, true },
	[PVGPU_GH_SURF]		= { H_SURF, true, true, true },
	[PVGPU_GH_GRAPH_NODE]	= { H_GRAPH_NODE, false, false, false },
};

static enum pvgpu_handle_kind handle_kind(uint32_t gh)
{
	return gh < PVGPU_GH_COUNT ? kinds[gh].kind : H_FREE;
}

/*
 * The session's live handle of kind gh that the guest named v, checked
 * once here for every generic call: its kind, that it is alive (a stale id
 * misses by its generation), and for a bound kind that it is the current
 * context's.  The table is the worker's own, one per session: another
 * session's handles are not in it.  *id: the table's id for it.
 */
static struct pvgpu_handle *handle_lookup(struct pvgpu_worker *w, uint32_t gh,
					  uint64_t v, uint64_t *id)
{
	enum pvgpu_handle_kind kind = handle_kind(gh);
	struct pvgpu_handle *h = NULL;

	if (kind == H_FREE)
		return NULL;
	if (kinds[gh].by_value) {
		for (uint32_t i = 0; i < w->handles.n && !h; i++)
			if (w->handles.v[i].kind == kind &&
			    w->handles.v[i].exec_handle == v &&
			    w->handles.v[i].ctx == w->cur_ctx)
				h = &w->handles.v[i];
	} else {
		h = pvgpu_handle_get(&w->handles, v, kind);
	}
	if (!h || (kinds[gh].bound && h->ctx != w->cur_ctx))
		return NULL;
	*id = pvgpu_handle_id(&w->handles, h);
	return h;
}

/* What the session keeps of a handle the call destroyed goes with it: its
 * charge, the staging of a graph's copies, a captured graph's id. */
static void handle_gone(struct pvgpu_worker *w, uint32_t gh, uint64_t id)
{
	struct pvgpu_handle *h = pvgpu_handle_get(&w->handles, id,
						  handle_kind(gh));

	if (!h)
		return;
	if (gh == PVGPU_GH_GRAPH_EXEC)
		pvgpu_staged_exec_gone(w, id);
	if (gh == PVGPU_GH_GRAPH_NODE)
		pvgpu_staged_unref(w, 0, id);
	if (gh == PVGPU_GH_ARRAY)
		pvgpu_module_uncharge(w, h);
	pvgpu_handle_del(&w->handles, id);
	if (gh == PVGPU_GH_GRAPH)
		pvgpu_graph_forget(w, id);
}

/*
 * Stream capture is the driver's, on the backend: the guest's launches
 * during it go to the stream as usual.  It is always begun relaxed, so that
 * the worker's own calls (the scheduler's event queries, memory accounting)
 * cannot invalidate a capture the guest began in global mode; a program
 * correct in global mode is correct in relaxed mode.
 */
static void capture_before(struct pvgpu_worker *w,
			   const struct pvgpu_generic_fn *f, uint64_t *a)
{
	(void)w;
	if (f->id == PVGPU_GENERIC_cuStreamBeginCapture_v2)
		a[1] = CU_STREAM_CAPTURE_MODE_RELAXED;
}

static void capture_after(struct pvgpu_worker *w,
			  const struct pvgpu_generic_fn *f, int32_t st)
{
	if (f->id == PVGPU_GENERIC_cuStreamBeginCapture_v2 && !st)
		w->capturing++;
	/* Ended, even when the capture had been invalidated. */
	if (f->id == PVGPU_GENERIC_cuStreamEndCapture && w->capturing &&
	    st != CUDA_ERROR_INVALID_HANDLE && st != CUDA_ERROR_INVALID_CONTEXT &&
	    st != CUDA_ERROR_NOT_SUPPORTED && st != CUDA_ERROR_ILLEGAL_STATE)
		w->capturing--;
}

/* Structures a call reads or writes (PVGPU_GA_INBUF/OUTBUF): the guest's
 * bytes copied into aligned storage, results gathered from it. */
#define DATA_MAX 1024
struct call_data {
	const uint8_t *in;		/* the guest's, unaligned */
	uint32_t nin, used;
	uint8_t *out;			/* the reply's */
	uint32_t *nout;
	uint32_t want;			/* output bytes the call will give */
	_Alignas(16) uint8_t store[2 * DATA_MAX];
	uint32_t stored;
};

/* Room for one structure of size bytes in d->store, or NULL. */
static void *data_slot(struct call_data *d, uint32_t size)
{
	uint32_t at = (d->stored + 15) & ~15u;

	if (!d || size > sizeof(d->store) || at > sizeof(d->store) - size)
		return NULL;
	d->stored = at + size;
	return d->store + at;
}

static int32_t data_arg(struct call_data *d, const struct pvgpu_generic_arg *g,
			uint64_t given, uint64_t *a)
{
	void *p;

	*a = 0;
	if (!given)
		return CUDA_SUCCESS;	/* NULL: the driver says what that means */
	if (!d || !g->size)
		return CUDA_ERROR_INVALID_VALUE;
	p = data_slot(d, g->size);
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	if (g->kind == PVGPU_GA_INBUF) {
		if (g->size > d->nin - d->used)
			return CUDA_ERROR_INVALID_VALUE;
		memcpy(p, d->in + d->used, g->size);
		d->used += g->size;
	} else {
		if (g->size > DATA_MAX - d->want)
			return CUDA_ERROR_INVALID_VALUE;
		d->want += g->size;
		memset(p, 0, g->size);
	}
	*a = (uint64_t)(uintptr_t)p;
	return CUDA_SUCCESS;
}

/* The reply has a result slot for every argument a function may have. */
_Static_assert(sizeof(((struct pvgpu_driver_call_rep *)0)->results) ==
	       PVGPU_GENERIC_MAX_ARGS * sizeof(uint64_t),
	       "driver_call results differ from PVGPU_GENERIC_MAX_ARGS");

/* Kinds the pass after the call has work for. */
#define RESULT_KINDS (PVGPU_GA_BIT(OUT) | PVGPU_GA_BIT(HNEW) | \
		      PVGPU_GA_BIT(HDEL) | PVGPU_GA_BIT(OUTBUF))

/*
 * f: the table's entry for the guest's id (NULL: none); out: the reply's
 * PVGPU_GENERIC_MAX_ARGS results, or NULL for an async call.
 */
static int32_t generic_call(struct pvgpu_worker *w,
			    const struct pvgpu_generic_fn *f,
			    const uint64_t *in, uint32_t n, int async,
			    uint64_t *out, struct call_data *d)
{
	uint64_t a[PVGPU_GENERIC_MAX_ARGS] = { 0 };
	uint64_t ids[PVGPU_GENERIC_MAX_ARGS] = { 0 };
	struct pvgpu_vmm_call vmm;
	struct pvgpu_handle *h;
	uint32_t made = 0;
	int32_t st;

	if (!f)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (f->async != async || n != f->nargs || n > PVGPU_GENERIC_MAX_ARGS ||
	    f->data != (d != NULL))
		return CUDA_ERROR_INVALID_VALUE;
	if (!w->ex)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!w->cur_ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	for (uint32_t i = 0; i < n; i++) {
		const struct pvgpu_generic_arg *g = &f->args[i];

		switch (g->kind) {
		case PVGPU_GA_IN:
			a[i] = in[i];
			break;
		case PVGPU_GA_OUT:
			a[i] = in[i] != 0;
			break;
		case PVGPU_GA_STREAM:
			st = pvgpu_lookup_stream(w, in[i], &a[i]);
			if (st)
				return st;
			break;
		case PVGPU_GA_DPTR:
			if (!pvgpu_alloc_range(&w->allocs, in[i], g->size))
				return CUDA_ERROR_INVALID_VALUE;
			a[i] = in[i];
			break;
		case PVGPU_GA_HIN:
		case PVGPU_GA_HDEL:
			h = handle_lookup(w, g->size, in[i], &ids[i]);
			if (!h)
				return CUDA_ERROR_INVALID_HANDLE;
			a[i] = h->exec_handle;
			break;
		case PVGPU_GA_HNEW:
			a[i] = in[i] != 0;
			made++;
			break;
		case PVGPU_GA_INBUF:
		case PVGPU_GA_OUTBUF:
			st = data_arg(d, g, in[i], &a[i]);
			if (st)
				return st;
			break;
		case PVGPU_GA_DEVICE:
			/* Only the current context's: a context is made only
			 * on a device the VM may use. */
			if (pvgpu_cur_device(w) < 0 ||
			    in[i] != (uint64_t)pvgpu_cur_device(w))
				return CUDA_ERROR_INVALID_DEVICE;
			a[i] = in[i];
			break;
		default:
			return CUDA_ERROR_NOT_SUPPORTED;
		}
	}
	if (d && d->used != d->nin)
		return CUDA_ERROR_INVALID_VALUE;	/* bytes nobody reads */
	if (!w->ex_ops->driver_call)
		return CUDA_ERROR_NOT_SUPPORTED;
	/*
	 * The handles for what the call makes must fit before the driver
	 * makes it: an object the session could not name would stay the
	 * driver's, out of the session's reach, for as long as it lasts.
	 */
	if (made && pvgpu_handles_room(&w->handles, made))
		return CUDA_ERROR_OUT_OF_MEMORY;
	st = pvgpu_vmm_before(w, f, a, ids, &vmm);
	if (st)
		return st;
	capture_before(w, f, a);
	if (f->id == PVGPU_GENERIC_cuGraphLaunch) {
		/* Graph memory freed outside its graph is mapped again
		 * (capture.c). */
		if (w->allocs.graph_unmapped &&
		    (st = pvgpu_graph_allocs_mapped(w)))
			return st;
		/* A graph's launches take the VM's turn like any other (§3). */
		pvgpu_sched_admit(&w->sched, pvgpu_cur_device(w), 1);
		st = w->ex_ops->driver_call(w->ex, f, a);
		pvgpu_sched_launched(&w->sched, a[1], st, 1);
		pvgpu_output_arm(w);	/* its kernels may print (output.c) */
	} else {
		st = w->ex_ops->driver_call(w->ex, f, a);
	}
	capture_after(w, f, st);
	/* Nothing comes back but the status (a query, a record): the
	 * dispatcher hands every handler a zeroed reply. */
	if (!PVGPU_GA_HAS(f, RESULT_KINDS))
		return pvgpu_vmm_after(w, f, a, in, out, &vmm, st);
	for (uint32_t i = 0; i < n; i++) {
		const struct pvgpu_generic_arg *g = &f->args[i];
		uint64_t v = 0;

		if (g->kind == PVGPU_GA_OUT && !st)
			v = a[i];
		if (g->kind == PVGPU_GA_HNEW && !st && a[i]) {
			/* The guest sees our id, never the executor's value;
			 * a captured graph keeps the id capture info gave. */
			v = g->size == PVGPU_GH_GRAPH ? pvgpu_graph_id(w, a[i]) :
			    pvgpu_handle_add(&w->handles, handle_kind(g->size),
					     a[i], w->cur_ctx, 0);
			if (!v)
				st = CUDA_ERROR_OUT_OF_MEMORY;
			/* Its copy nodes' staging buffers (capture.c). */
			if (v && f->id == PVGPU_GENERIC_cuGraphInstantiateWithFlags)
				st = pvgpu_staged_instantiated(w, v, ids[1]);
		}
		if (g->kind == PVGPU_GA_HDEL &&
		    (!st || (g->size < PVGPU_GH_COUNT && kinds[g->size].always_gone)))
			handle_gone(w, g->size, ids[i]);
		if (g->kind == PVGPU_GA_OUTBUF && !st && a[i]) {
			memcpy(d->out + *d->nout, (void *)(uintptr_t)a[i], g->size);
			*d->nout += g->size;
		}
		if (out)
			out[i] = v;
	}
	return pvgpu_vmm_after(w, f, a, in, out, &vmm, st);
}

int32_t pvgpu_handle_driver_call(struct pvgpu_worker *w,
				 const struct pvgpu_driver_call_req *req,
				 struct pvgpu_driver_call_rep *rep)
{
	const struct pvgpu_generic_fn *f = pvgpu_generic_find(req->fn);
	int32_t st = generic_call(w, f, req->args, req->args_count, 0,
				  rep->results, NULL);

	if (f && f->quiet)
		pvgpu_output_quiet(w);
	rep->results_count = req->args_count <= PVGPU_GENERIC_MAX_ARGS ?
			     req->args_count : 0;
	return st;
}

int32_t pvgpu_handle_driver_call_async(struct pvgpu_worker *w,
				       const struct pvgpu_driver_call_async_req *req)
{
	return generic_call(w, pvgpu_generic_find(req->fn), req->args,
			    req->args_count, 1, NULL, NULL);
}

int32_t pvgpu_handle_driver_call_data(struct pvgpu_worker *w,
				      const struct pvgpu_driver_call_data_req *req,
				      struct pvgpu_driver_call_data_rep *rep)
{
	struct call_data *d = calloc(1, sizeof(*d));
	int32_t st;

	if (!d)
		return CUDA_ERROR_OUT_OF_MEMORY;
	d->in = req->input;
	d->nin = req->input_len;
	d->out = rep->output;
	d->nout = &rep->output_len;
	rep->output_len = 0;
	st = generic_call(w, pvgpu_generic_find(req->fn), req->args,
			  req->args_count, 0, rep->results, d);
	if (st)
		rep->output_len = 0;
	rep->results_count = req->args_count <= PVGPU_GENERIC_MAX_ARGS ?
			     req->args_count : 0;
	free(d);
	return st;
}

int32_t pvgpu_generic_destroy(struct pvgpu_worker *w, uint32_t fn, uint64_t obj)
{
	const struct pvgpu_generic_fn *f = pvgpu_generic_find(fn);
	uint64_t a[PVGPU_GENERIC_MAX_ARGS] = { obj };

	if (!f || f->nargs != 1 || f->args[0].kind != PVGPU_GA_HDEL ||
	    !w->ex_ops->driver_call)
		return CUDA_ERROR_NOT_SUPPORTED;
	return w->ex_ops->driver_call(w->ex, f, a);
}
