/*
 * ops.c - the backend's half of every operation in protocol/ops.spec.
 *
 * The generated dispatcher has already decoded and bounds-checked the
 * message; here every handle and device pointer is checked against what
 * this session owns before the executor is asked to do anything.
 */
#include <cuda.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "exclusive.h"
#include "log.h"
#include "pvgpu_dispatch.h"
#include "worker.h"

/* --- checks shared by the handlers ----------------------------------------- */

static int32_t need_context(struct pvgpu_worker *w)
{
	if (!w->ex)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!w->cur_ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	return CUDA_SUCCESS;
}

/* The executor's stream for the session's id, in the current context. */
static int32_t stream_here(struct pvgpu_worker *w, uint64_t id, uint64_t *stream)
{
	int32_t st = need_context(w);

	return st ? st : pvgpu_lookup_stream(w, id, stream);
}

int32_t pvgpu_lookup_stream(struct pvgpu_worker *w, uint64_t id,
			    uint64_t *exec)
{
	struct pvgpu_handle *h;

	if (id == 0) {
		*exec = 0;
		return CUDA_SUCCESS;
	}
	h = pvgpu_handle_get(&w->handles, id, H_STREAM);
	if (!h || h->ctx != w->cur_ctx)
		return CUDA_ERROR_INVALID_HANDLE;
	*exec = h->exec_handle;
	return CUDA_SUCCESS;
}

/*
 * [ptr, ptr+len) must lie inside one allocation of this session.  Any of
 * its contexts will do: with unified addressing a copy issued in one
 * context may touch another device's memory, as NVIDIA's runtime does.
 */
static int32_t check_range(struct pvgpu_worker *w, uint64_t ptr, uint64_t len)
{
	return pvgpu_alloc_range(&w->allocs, ptr, len) ? CUDA_SUCCESS :
							 CUDA_ERROR_INVALID_VALUE;
}

static struct pvgpu_handle *current_ctx(struct pvgpu_worker *w)
{
	return pvgpu_handle_get(&w->handles, w->cur_ctx, H_CTX);
}

/* The policy's gpus for this session's VM; without a policy, every device. */
int pvgpu_vm_may_use(struct pvgpu_worker *w, int32_t device)
{
	int vm = atomic_load(&w->slot->vm);
	uint32_t gpus = vm < 0 ? 0 : atomic_load(&w->acct->vms[vm].gpus);

	return !gpus || (gpus >> device) & 1;
}

/* --- session -------------------------------------------------------------- */

int32_t pvgpu_handle_hello(struct pvgpu_worker *w,
			   const struct pvgpu_hello_req *req,
			   struct pvgpu_hello_rep *rep)
{
	uint32_t version = req->version_max < PVGPU_PROTO_VERSION ?
			   req->version_max : PVGPU_PROTO_VERSION;
	int32_t count = 0, st;

	if (w->said_hello) {
		wlog_info(w, "hello sent twice: refused");
		return CUDA_ERROR_INVALID_VALUE;
	}
	/*
	 * Who calls was settled before this worker existed: from the channel,
	 * or by the supervisor from the token in this very hello.
	 */
	w->said_hello = -1;		/* anything refused below ends the session */
	/* Resuming is the supervisor's to hand over (reattach.c), not a new session's. */
	if (req->resume_lo | req->resume_hi) {
		wlog_info(w, "a resume hello reached a new session: refused");
		return CUDA_ERROR_NOT_PERMITTED;
	}
	if (version < 1 || version < req->version_min) {
		wlog_warn(w, "guest speaks protocol %u..%u, this backend %d..%d: refused",
			  req->version_min, req->version_max, 1, PVGPU_PROTO_VERSION);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	if (req->required & ~(uint64_t)PVGPU_FEATURES_KNOWN) {
		wlog_warn(w, "guest '%s' needs feature bits %#llx, which this backend lacks (it knows %#llx): refused",
			  log_esc(req->client),
			  (unsigned long long)(req->required & ~(uint64_t)PVGPU_FEATURES_KNOWN),
			  (unsigned long long)PVGPU_FEATURES_KNOWN);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	if (!w->ex) {
		wlog_info(w, "no device for client '%s': %s", log_esc(req->client),
			  log_esc(w->ex_error));
		return CUDA_ERROR_NO_DEVICE;
	}
	st = w->ex_ops->driver_info(w->ex, NULL, &count);
	if (st)
		return st;
	w->version = version;
	w->device_count = count;
	w->said_hello = 1;
	atomic_store(&w->slot->guest_pid, req->pid);
	rep->version = version;
	rep->device_count = count;
	rep->session_id = w->slot->session_id;
	rep->data_block = w->cfg->block;
	/*
	 * Both sides know what is agreed.  A guest that sent no bits knows
	 * protocol 1's and would not read a features word: it gets none.
	 */
	w->features = (req->features ? req->features : PVGPU_FEATURES_V1) &
		      PVGPU_FEATURES_KNOWN;
	/* The device writes the word at a host page's device address. */
	if (!w->ex_ops->host_device_pointer || !w->ex_ops->driver_call)
		w->features &= ~PVGPU_FEATURE_SIGNAL;
	rep->features = req->features ? w->features : 0;
	/* A resume token, where the VM's policy and the channel allow one. */
	if (pvgpu_worker_resume_offer(w)) {
		rep->resume_lo = w->cfg->resume_token[0];
		rep->resume_hi = w->cfg->resume_token[1];
		rep->resume_grace_ms = (uint32_t)(w->resume.grace_ns / 1000000u);
	}
	wlog_debug(w, "hello from '%s' (guest pid %u): protocol %u, %d device(s), features %#llx agreed (guest %#llx, backend %#llx)",
		   log_esc(req->client), req->pid, version, count,
		   (unsigned long long)w->features,
		   (unsigned long long)req->features,
		   (unsigned long long)PVGPU_FEATURES_KNOWN);
	return CUDA_SUCCESS;
}

int32_t pvgpu_handle_bye(struct pvgpu_worker *w, const struct pvgpu_bye_req *req)
{
	(void)req;
	w->said_hello = -1;
	return CUDA_SUCCESS;
}

/* --- devices -------------------------------------------------------------- */

int32_t pvgpu_handle_driver_get_version(struct pvgpu_worker *w,
					const struct pvgpu_driver_get_version_req *req,
					struct pvgpu_driver_get_version_rep *rep)
{
	(void)req;
	return w->ex_ops->driver_info(w->ex, &rep->version, NULL);
}

int32_t pvgpu_handle_device_get_count(struct pvgpu_worker *w,
				      const struct pvgpu_device_get_count_req *req,
				      struct pvgpu_device_get_count_rep *rep)
{
	(void)req;
	return w->ex_ops->driver_info(w->ex, NULL, &rep->count);
}

int32_t pvgpu_handle_device_get_attributes(struct pvgpu_worker *w,
					   const struct pvgpu_device_get_attributes_req *req,
					   struct pvgpu_device_get_attributes_rep *rep)
{
	for (uint32_t i = 0; i < req->attrs_count; i++) {
		int32_t st = w->ex_ops->device_attribute(w->ex, req->device,
							 req->attrs[i],
							 &rep->values[i]);
		if (st)
			return st;
	}
	rep->values_count = req->attrs_count;
	return CUDA_SUCCESS;
}

int32_t pvgpu_handle_device_get_name(struct pvgpu_worker *w,
				     const struct pvgpu_device_get_name_req *req,
				     struct pvgpu_device_get_name_rep *rep)
{
	struct pvgpu_exec_device d;
	int32_t st = w->ex_ops->device_info(w->ex, req->device, &d);

	rep->name_len = 0;
	if (!st) {
		snprintf(rep->name, sizeof(rep->name), "%s", d.name);
		rep->name_len = (uint32_t)strlen(rep->name);
	}
	return st;
}

int32_t pvgpu_handle_device_get_uuid(struct pvgpu_worker *w,
				     const struct pvgpu_device_get_uuid_req *req,
				     struct pvgpu_device_get_uuid_rep *rep)
{
	struct pvgpu_exec_device d;
	int32_t st = w->ex_ops->device_info(w->ex, req->device, &d);

	rep->uuid_len = st ? 0 : sizeof(d.uuid);
	if (!st)
		memcpy(rep->uuid, d.uuid, sizeof(d.uuid));
	return st;
}

int32_t pvgpu_handle_device_total_mem(struct pvgpu_worker *w,
				      const struct pvgpu_device_total_mem_req *req,
				      struct pvgpu_device_total_mem_rep *rep)
{
	struct pvgpu_exec_device d;
	int32_t st = w->ex_ops->device_info(w->ex, req->device, &d);

	rep->bytes = st ? 0 : d.total_mem;
	return st;
}

/* --- contexts ------------------------------------------------------------- */

int32_t pvgpu_room_for_handle(struct pvgpu_worker *w)
{
	return pvgpu_handles_room(&w->handles, 1) ? CUDA_ERROR_OUT_OF_MEMORY :
						    CUDA_SUCCESS;
}

/*
 * A context or a stream takes device memory of its own, what the start-up
 * probe measured on its device (accounting.h ctx_bytes, stream_bytes):
 * charged to the VM's quota as an allocation is, before the driver makes
 * it, and given back when it goes.  CUDA_ERROR_OUT_OF_MEMORY (logged)
 * when that would pass the quota.
 */
static int32_t charge_object(struct pvgpu_worker *w, const char *what,
			     int32_t dev, uint64_t bytes)
{
	int vm;

	if (!bytes || !pvgpu_accounting_charge(w->acct, w->slot, bytes))
		return CUDA_SUCCESS;
	vm = atomic_load(&w->slot->vm);
	wlog_info(w, "%s on device %d refused: its %llu bytes are over the memory quota of vm %s",
		  what, dev, (unsigned long long)bytes,
		  vm < 0 ? "-" : w->acct->vms[vm].name);
	return CUDA_ERROR_OUT_OF_MEMORY;
}

/* The live context of this session, other than h, that is the same driver
 * context (the cuda executor's are each device's primary), or NULL. */
static struct pvgpu_handle *same_context(struct pvgpu_worker *w,
					 const struct pvgpu_handle *h)
{
	for (uint32_t i = 0; i < w->handles.n; i++) {
		struct pvgpu_handle *o = &w->handles.v[i];

		if (o != h && o->kind == H_CTX &&
		    o->exec_handle == h->exec_handle)
			return o;
	}
	return NULL;
}

/* How many of this session's contexts live on dev. */
static unsigned int contexts_on(struct pvgpu_worker *w, int32_t dev)
{
	unsigned int n = 0;

	for (uint32_t i = 0; i < w->handles.n; i++)
		n += w->handles.v[i].kind == H_CTX &&
		     w->handles.v[i].device == dev;
	return n;
}

int32_t pvgpu_handle_ctx_create(struct pvgpu_worker *w,
				const struct pvgpu_ctx_create_req *req,
				struct pvgpu_ctx_create_rep *rep)
{
	uint64_t ctx, id, bytes;
	struct pvgpu_handle *h;
	int32_t st;

	if (req->device < 0 || req->device >= PVGPU_MAX_DEVICES)
		return CUDA_ERROR_INVALID_DEVICE;
	if (!pvgpu_vm_may_use(w, req->device))
		return CUDA_ERROR_INVALID_DEVICE;
	if (!w->ex)
		return CUDA_ERROR_NOT_INITIALIZED;
	bytes = w->acct->ctx_bytes[req->device];
	/* Charged or not, a session needs no more than a few per GPU. */
	if (contexts_on(w, req->device) >= PVGPU_CTX_PER_DEVICE) {
		wlog_info(w, "context refused: the session holds %u on device %d already",
			  PVGPU_CTX_PER_DEVICE, req->device);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	st = pvgpu_room_for_handle(w);
	if (!st)
		st = charge_object(w, "context", req->device, bytes);
	if (st)
		return st;
	/* Exclusive mode: the device must be ours to take before we touch it. */
	st = pvgpu_exclusive_take(w->acct, w->slot, req->device, w->conn,
				  &w->loglim);
	if (st)
		goto err_uncharge;
	st = w->ex_ops->ctx_create(w->ex, req->device, &ctx);
	if (st)
		goto err_drop;
	id = pvgpu_handle_add(&w->handles, H_CTX, ctx, 0, req->device);
	if (!id) {
		w->ex_ops->ctx_destroy(w->ex, ctx);
		st = CUDA_ERROR_OUT_OF_MEMORY;
		goto err_drop;
	}
	rep->ctx = id;
	h = pvgpu_handle_get(&w->handles, id, H_CTX);
	/* One the session holds already took nothing more: charged once. */
	if (same_context(w, h)) {
		pvgpu_accounting_uncharge(w->slot, bytes);
		return CUDA_SUCCESS;
	}
	h->charged = bytes;
	pvgpu_accounting_commit(w->slot, req->device, bytes);
	return CUDA_SUCCESS;

err_drop:
	if (!contexts_on(w, req->device))
		pvgpu_exclusive_drop(w->slot, req->device);
err_uncharge:
	pvgpu_accounting_uncharge(w->slot, bytes);
	return st;
}

int32_t pvgpu_handle_ctx_destroy(struct pvgpu_worker *w,
				 const struct pvgpu_ctx_destroy_req *req)
{
	struct pvgpu_handle *h = pvgpu_handle_get(&w->handles, req->ctx, H_CTX);
	struct pvgpu_handle *o;
	int32_t st, dev;

	if (!h)
		return CUDA_ERROR_INVALID_HANDLE;
	dev = h->device;
	/* Staging events live in the current context: drop them first. */
	if (req->ctx == w->cur_ctx)
		pvgpu_staging_release(w);
	pvgpu_window_forget_ctx(w, req->ctx);
	pvgpu_sched_forget_ctx(&w->sched, req->ctx);
	st = w->ex_ops->ctx_destroy(w->ex, h->exec_handle);
	/* The context took its memory, streams and events with it. */
	for (size_t i = w->allocs.n; i-- > 0;) {
		struct pvgpu_alloc *a = &w->allocs.v[i];

		if (a->ctx == req->ctx) {
			if (pvgpu_alloc_charged(a))
				atomic_fetch_sub(&w->slot->mem_used[a->device],
						 a->size);
			pvgpu_alloc_del(&w->allocs, a);
		}
	}
	for (uint32_t i = 0; i < w->handles.n; i++) {
		o = &w->handles.v[i];

		if (o->kind == H_FREE || o->kind == H_CTX || o->ctx != req->ctx)
			continue;
		if (o->charged)		/* modules, arrays, streams */
			pvgpu_module_uncharge(w, o);
		pvgpu_handle_release(&w->handles, o);
	}
	/* The driver context lives on while another of its handles does. */
	o = same_context(w, h);
	if (o) {
		o->charged += h->charged;
		h->charged = 0;
	}
	pvgpu_module_uncharge(w, h);
	pvgpu_handle_del(&w->handles, req->ctx);
	if (req->ctx == w->cur_ctx)
		w->cur_ctx = 0;
	/* Its last context there gone, the session leaves the device to others. */
	if (!contexts_on(w, dev))
		pvgpu_exclusive_drop(w->slot, dev);
	return st;
}

int32_t pvgpu_handle_ctx_set(struct pvgpu_worker *w,
			     const struct pvgpu_ctx_set_req *req)
{
	struct pvgpu_handle *h = pvgpu_handle_get(&w->handles, req->ctx, H_CTX);
	int32_t st;

	if (!h)
		return CUDA_ERROR_INVALID_HANDLE;
	if (req->ctx == w->cur_ctx)
		return CUDA_SUCCESS;
	st = w->ex_ops->ctx_set(w->ex, h->exec_handle);
	if (st)
		return st;
	/* Staging buffers and their events belong to the old context. */
	pvgpu_staging_release(w);
	w->cur_ctx = req->ctx;
	return CUDA_SUCCESS;
}

int32_t pvgpu_handle_ctx_synchronize(struct pvgpu_worker *w,
				     const struct pvgpu_ctx_synchronize_req *req)
{
	int32_t st = need_context(w);

	(void)req;
	if (st)
		return st;
	/*
	 * The device's word after the legacy stream's work, which waits for
	 * every blocking stream's: the whole context's, unless a stream that
	 * does not wait for it exists.
	 */
	if (!w->signal.nonblocking_streams && pvgpu_signal_wanted(w) &&
	    pvgpu_signal_queue(w, 0))
		return CUDA_SUCCESS;
	st = w->ex_ops->synchronize(w->ex, true, 0);
	if (st == CUDA_SUCCESS)
		pvgpu_sched_ctx_synced(&w->sched);	/* no event needed to know */
	return st;
}

/* --- memory --------------------------------------------------------------- */

/* The executor's allocation; past the part of the GPU the policy gives
 * VMs ([gpu N] memory), out of memory as on a full GPU. */
static int32_t alloc_in_cap(struct pvgpu_worker *w, int dev, uint64_t size,
			    uint64_t *base)
{
	if (pvgpu_worker_over_cap(w, dev, size))
		return CUDA_ERROR_OUT_OF_MEMORY;
	return w->ex_ops->mem_alloc(w->ex, size, base);
}

int32_t pvgpu_handle_mem_alloc(struct pvgpu_worker *w,
			       const struct pvgpu_mem_alloc_req *req,
			       struct pvgpu_mem_alloc_rep *rep)
{
	struct pvgpu_alloc a = { 0 };
	int32_t st = need_context(w);
	int dev;

	if (st)
		return st;
	if (req->size == 0)
		return CUDA_ERROR_INVALID_VALUE;
	/* The VM's quota first: charged as pending so that no other session of it can take the same bytes. */
	if (pvgpu_accounting_charge(w->acct, w->slot, req->size)) {
		wlog_debug(w, "mem_alloc of %llu bytes: over the quota of vm %s",
			   (unsigned long long)req->size,
			   w->acct->vms[atomic_load(&w->slot->vm)].name);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	dev = current_ctx(w)->device;
	st = alloc_in_cap(w, dev, req->size, &a.base);
	/* A full GPU the policy oversubscribes: others may make room (oversub.h). */
	if (st == CUDA_ERROR_OUT_OF_MEMORY &&
	    pvgpu_worker_make_room(w, dev, req->size)) {
		st = alloc_in_cap(w, dev, req->size, &a.base);
		if (st == CUDA_ERROR_OUT_OF_MEMORY)
			wlog_info(w, "mem_alloc of %llu bytes on device %d: out of memory after making room (no other session there could be suspended)",
				  (unsigned long long)req->size, dev);
	}
	if (st)
		goto err_uncharge;
	pvgpu_graph_allocs_reused(w, a.base, req->size);
	a.size = req->size;
	a.ctx = w->cur_ctx;
	a.module = 0;
	a.device = dev;
	if (pvgpu_alloc_add(&w->allocs, &a)) {
		w->ex_ops->mem_free(w->ex, a.base);
		st = CUDA_ERROR_OUT_OF_MEMORY;
		goto err_uncharge;
	}
	pvgpu_accounting_commit(w->slot, a.device, a.size);
	rep->dptr = a.base;
	return CUDA_SUCCESS;

err_uncharge:
	pvgpu_accounting_uncharge(w->slot, req->size);
	return st;
}

int32_t pvgpu_handle_mem_free(struct pvgpu_worker *w,
			      const struct pvgpu_mem_free_req *req)
{
	struct pvgpu_alloc *a;
	int32_t st = need_context(w);

	if (st)
		return st;
	a = pvgpu_alloc_find(&w->allocs, req->dptr);
	/* Graph memory too, by its start, as NVIDIA's driver frees it
	 * outside any graph (capture.c). */
	if (!a || (a->module && a->module != PVGPU_ALLOC_GRAPH) ||
	    (a->module == PVGPU_ALLOC_GRAPH && a->base != req->dptr))
		return CUDA_ERROR_INVALID_VALUE;
	if (a->unmapped)
		return CUDA_ERROR_INVALID_VALUE;	/* freed already */
	st = w->ex_ops->mem_free(w->ex, a->base);
	if (st)
		return st;
	atomic_fetch_sub(&w->slot->mem_used[a->device], a->size);
	if (a->module == PVGPU_ALLOC_GRAPH) {
		/* Still its graph's: a launch maps it again (capture.c). */
		a->unmapped = 1;
		w->allocs.graph_unmapped = 1;
		return CUDA_SUCCESS;
	}
	pvgpu_alloc_del(&w->allocs, a);
	return CUDA_SUCCESS;
}

int32_t pvgpu_handle_mem_get_info(struct pvgpu_worker *w,
				  const struct pvgpu_mem_get_info_req *req,
				  struct pvgpu_mem_get_info_rep *rep)
{
	int32_t st = need_context(w);
	int vm = atomic_load(&w->slot->vm);
	uint64_t quota, used;

	(void)req;
	if (st)
		return st;
	st = w->ex_ops->mem_get_info(w->ex, &rep->free, &rep->total);
	quota = vm < 0 ? 0 : atomic_load(&w->acct->vms[vm].quota);
	if (st || !quota)
		return st;
	/* A VM with a quota sees the quota as its GPU; below its use (after a reload shrank it), nothing free. */
	used = pvgpu_accounting_vm_mem_used(w->acct, vm);
	rep->total = quota;
	rep->free = used < quota ? quota - used : 0;
	return CUDA_SUCCESS;
}

static int32_t htod(struct pvgpu_worker *w, uint64_t dst, uint64_t size,
		    uint64_t stream_id, int sync)
{
	uint64_t stream = 0;
	int32_t st = need_context(w);

	if (!st && size)
		st = check_range(w, dst, size);
	if (!st)
		st = pvgpu_lookup_stream(w, stream_id, &stream);
	if (st) {
		pvgpu_copy_refuse_htod(w, size);
		return st;
	}
	return size ? pvgpu_copy_htod(w, dst, size, stream, sync) : CUDA_SUCCESS;
}

int32_t pvgpu_handle_memcpy_htod(struct pvgpu_worker *w,
				 const struct pvgpu_memcpy_htod_req *req)
{
	return htod(w, req->dst, req->size, req->stream, 1);
}

int32_t pvgpu_handle_memcpy_htod_async(struct pvgpu_worker *w,
				       const struct pvgpu_memcpy_htod_async_req *req)
{
	return htod(w, req->dst, req->size, req->stream, 0);
}

int32_t pvgpu_handle_memcpy_dtoh(struct pvgpu_worker *w,
				 const struct pvgpu_memcpy_dtoh_req *req)
{
	uint64_t stream = 0;
	int32_t st = need_context(w);

	if (!st && req->size)
		st = check_range(w, req->src, req->size);
	if (!st)
		st = pvgpu_lookup_stream(w, req->stream, &stream);
	if (st || !req->size)
		return st;
	return pvgpu_copy_dtoh(w, req->src, req->size, stream);
}

static int32_t dtod(struct pvgpu_worker *w, uint64_t dst, uint64_t src,
		    uint64_t size, uint64_t stream_id, int sync)
{
	const struct pvgpu_alloc *d, *s;
	uint64_t stream = 0;
	int32_t st = need_context(w);

	if (st || size == 0)
		return st;
	d = pvgpu_alloc_range(&w->allocs, dst, size);
	s = pvgpu_alloc_range(&w->allocs, src, size);
	if (!d || !s)
		return CUDA_ERROR_INVALID_VALUE;
	st = pvgpu_lookup_stream(w, stream_id, &stream);
	if (st)
		return st;
	/* Between two GPUs under unified addressing: a peer copy, on the host. */
	if (d->device != s->device)
		return pvgpu_peer_dtod(w, d, dst, s, src, size, stream, sync);
	st = pvgpu_exec_dtod(w->ex_ops, w->ex, dst, src, size, stream);
	if (!st && sync)
		st = w->ex_ops->synchronize(w->ex, false, stream);
	return st;
}

int32_t pvgpu_handle_memcpy_dtod(struct pvgpu_worker *w,
				 const struct pvgpu_memcpy_dtod_req *req)
{
	return dtod(w, req->dst, req->src, req->size, req->stream, 1);
}

int32_t pvgpu_handle_memcpy_dtod_async(struct pvgpu_worker *w,
				       const struct pvgpu_memcpy_dtod_async_req *req)
{
	return dtod(w, req->dst, req->src, req->size, req->stream, 0);
}

int32_t pvgpu_handle_memset_async(struct pvgpu_worker *w,
				  const struct pvgpu_memset_async_req *req)
{
	uint64_t stream = 0;
	int32_t st = need_context(w);

	if (st || req->count == 0)
		return st;
	if (req->elem_size != 1 && req->elem_size != 2 && req->elem_size != 4)
		return CUDA_ERROR_INVALID_VALUE;
	if (req->count > UINT64_MAX / req->elem_size)
		return CUDA_ERROR_INVALID_VALUE;
	st = check_range(w, req->dst, req->count * req->elem_size);
	if (!st)
		st = pvgpu_lookup_stream(w, req->stream, &stream);
	if (!st)
		st = w->ex_ops->memset_async(w->ex, req->dst, req->value,
					     req->elem_size, req->count, stream);
	return st;
}

/* --- streams -------------------------------------------------------------- */

int32_t pvgpu_handle_stream_create(struct pvgpu_worker *w,
				   const struct pvgpu_stream_create_req *req,
				   struct pvgpu_stream_create_rep *rep)
{
	uint64_t stream, id, bytes = 0;
	int32_t dev = 0, st = need_context(w);

	if (!st) {
		dev = current_ctx(w)->device;
		bytes = w->acct->stream_bytes[dev];
		st = pvgpu_room_for_handle(w);
	}
	if (!st)
		st = charge_object(w, "stream", dev, bytes);
	if (st)
		return st;
	st = w->ex_ops->stream_create(w->ex, req->flags, req->priority, &stream);
	if (st)
		goto err_uncharge;
	if (req->flags & CU_STREAM_NON_BLOCKING)
		w->signal.nonblocking_streams = 1;	/* a context synchronize waits as before */
	/* Its device kept, for the charge to go back to (module_uncharge). */
	id = pvgpu_handle_add(&w->handles, H_STREAM, stream, w->cur_ctx, dev);
	if (!id) {
		w->ex_ops->stream_destroy(w->ex, stream);
		st = CUDA_ERROR_OUT_OF_MEMORY;
		goto err_uncharge;
	}
	pvgpu_handle_get(&w->handles, id, H_STREAM)->charged = bytes;
	pvgpu_accounting_commit(w->slot, dev, bytes);
	rep->stream = id;
	return CUDA_SUCCESS;

err_uncharge:
	pvgpu_accounting_uncharge(w->slot, bytes);
	return st;
}

int32_t pvgpu_handle_stream_destroy(struct pvgpu_worker *w,
				    const struct pvgpu_stream_destroy_req *req)
{
	uint64_t stream;
	int32_t st = stream_here(w, req->stream, &stream);

	if (st)
		return st;
	if (req->stream == 0)
		return CUDA_ERROR_INVALID_HANDLE;
	st = w->ex_ops->stream_destroy(w->ex, stream);
	pvgpu_module_uncharge(w, pvgpu_handle_get(&w->handles, req->stream,
						  H_STREAM));
	pvgpu_handle_del(&w->handles, req->stream);
	return st;
}

int32_t pvgpu_handle_stream_synchronize(struct pvgpu_worker *w,
					const struct pvgpu_stream_synchronize_req *req)
{
	uint64_t stream;
	int32_t st = stream_here(w, req->stream, &stream);

	if (st)
		return st;
	if (pvgpu_signal_wanted(w) && pvgpu_signal_queue(w, stream))
		return CUDA_SUCCESS;
	return w->ex_ops->synchronize(w->ex, false, stream);
}
