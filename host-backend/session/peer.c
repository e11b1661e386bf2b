/*
 * peer.c - several GPUs in one session: peer queries, peer access between
 * the session's contexts, and copies from one GPU to another, done on the
 * host GPU to GPU (never through the guest).
 *
 * The guest is untrusted: device indexes are checked against the
 * executor's device count and the VM's `gpus`, contexts against the
 * session's own handles, and each pointer of a copy against the session's
 * allocations (on any of its devices: under unified addressing NVIDIA's
 * driver copies memory of another device than the context named with it
 * says, and so does pvgpu).  A device the
 * VM may not use is never reached, not even as the far end of a copy: the
 * session cannot hold a context or memory there (ctx_create refuses it),
 * and the queries answer "no peer access" for it.
 */
#include <cuda.h>

#include "log.h"
#include "pvgpu_dispatch.h"
#include "worker.h"

/* A device index of this backend: 0, else why not. */
static int32_t check_device(struct pvgpu_worker *w, int32_t dev)
{
	int32_t count = 0, st;

	if (!w->ex)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (dev < 0 || dev >= PVGPU_MAX_DEVICES)
		return CUDA_ERROR_INVALID_DEVICE;
	st = w->ex_ops->driver_info(w->ex, NULL, &count);
	if (st)
		return st;
	return dev < count ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

/* The executor offers peers (a plugin built before them does not). */
static int32_t have_peers(struct pvgpu_worker *w)
{
	const struct pvgpu_executor_ops *o = w->ex_ops;

	if (!w->ex)
		return CUDA_ERROR_NOT_INITIALIZED;
	return o->peer_attribute && o->peer_access ?
	       CUDA_SUCCESS : CUDA_ERROR_NOT_SUPPORTED;
}

int32_t pvgpu_handle_device_can_access_peer(struct pvgpu_worker *w,
					    const struct pvgpu_device_can_access_peer_req *req,
					    struct pvgpu_device_can_access_peer_rep *rep)
{
	int32_t st = have_peers(w);

	if (!st)
		st = check_device(w, req->device);
	if (!st)
		st = check_device(w, req->peer);
	if (st)
		return st;
	if (req->device == req->peer || !pvgpu_vm_may_use(w, req->device) ||
	    !pvgpu_vm_may_use(w, req->peer)) {
		rep->can_access = 0;
		return CUDA_SUCCESS;
	}
	return w->ex_ops->peer_attribute(w->ex, PVGPU_PEER_CAN_ACCESS,
					 req->device, req->peer,
					 &rep->can_access);
}

int32_t pvgpu_handle_device_p2p_attribute(struct pvgpu_worker *w,
					  const struct pvgpu_device_p2p_attribute_req *req,
					  struct pvgpu_device_p2p_attribute_rep *rep)
{
	int32_t st = have_peers(w);

	if (!st)
		st = check_device(w, req->src_device);
	if (!st)
		st = check_device(w, req->dst_device);
	if (st)
		return st;
	/* As the driver: a device is not its own peer. */
	if (req->src_device == req->dst_device)
		return CUDA_ERROR_INVALID_DEVICE;
	/* No CUdevice_P2PAttribute: the executor's own can-access query. */
	if (req->attrib == PVGPU_PEER_CAN_ACCESS)
		return CUDA_ERROR_INVALID_VALUE;
	if (!pvgpu_vm_may_use(w, req->src_device) || !pvgpu_vm_may_use(w, req->dst_device)) {
		/* Still refuse what the driver refuses, then say "nothing". */
		st = w->ex_ops->peer_attribute(w->ex, req->attrib,
					       req->src_device,
					       req->dst_device, &rep->value);
		rep->value = 0;
		return st;
	}
	return w->ex_ops->peer_attribute(w->ex, req->attrib, req->src_device,
					 req->dst_device, &rep->value);
}

/* One of the session's contexts: its handle entry, or NULL. */
static struct pvgpu_handle *own_ctx(struct pvgpu_worker *w, uint64_t id)
{
	return id ? pvgpu_handle_get(&w->handles, id, H_CTX) : NULL;
}

/*
 * Current and peer context for peer access, both the session's, on two
 * devices the VM may use (a reload may have narrowed `gpus` since they
 * were made: from then on no new access is granted there).
 */
static int32_t peer_pair(struct pvgpu_worker *w, uint64_t peer_id,
			 struct pvgpu_handle **peer)
{
	struct pvgpu_handle *cur, *p;
	int32_t st = have_peers(w);

	if (st)
		return st;
	cur = own_ctx(w, w->cur_ctx);
	if (!cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	p = own_ctx(w, peer_id);
	if (!p)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!pvgpu_vm_may_use(w, cur->device) || !pvgpu_vm_may_use(w, p->device))
		return CUDA_ERROR_INVALID_DEVICE;
	*peer = p;
	return CUDA_SUCCESS;
}

int32_t pvgpu_handle_ctx_enable_peer_access(struct pvgpu_worker *w,
					    const struct pvgpu_ctx_enable_peer_access_req *req)
{
	struct pvgpu_handle *peer;
	int32_t st = peer_pair(w, req->peer_ctx, &peer);

	if (st)
		return st;
	if (req->flags)
		return CUDA_ERROR_INVALID_VALUE;
	st = w->ex_ops->peer_access(w->ex, peer->exec_handle, true, 0);
	if (!st)
		wlog_debug(w, "peer access enabled: context on device %d to device %d",
			   own_ctx(w, w->cur_ctx)->device, peer->device);
	return st;
}

int32_t pvgpu_handle_ctx_disable_peer_access(struct pvgpu_worker *w,
					     const struct pvgpu_ctx_disable_peer_access_req *req)
{
	struct pvgpu_handle *peer;
	int32_t st = have_peers(w);

	if (st)
		return st;
	/* Taking access away is allowed even where `gpus` no longer reaches. */
	if (!own_ctx(w, w->cur_ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	peer = own_ctx(w, req->peer_ctx);
	if (!peer)
		return CUDA_ERROR_INVALID_CONTEXT;
	return w->ex_ops->peer_access(w->ex, peer->exec_handle, false, 0);
}

/*
 * [ptr, ptr+size) inside one allocation of the session, and ctx_id one of
 * the session's contexts (on any of its devices, as above): the
 * executor's context in *exec.
 */
static int32_t peer_range(struct pvgpu_worker *w, uint64_t ctx_id,
			  uint64_t ptr, uint64_t size, uint64_t *exec)
{
	struct pvgpu_handle *c = own_ctx(w, ctx_id);
	struct pvgpu_alloc *a;

	if (!c)
		return CUDA_ERROR_INVALID_CONTEXT;
	a = pvgpu_alloc_range(&w->allocs, ptr, size);
	if (!a)
		return CUDA_ERROR_INVALID_VALUE;
	*exec = c->exec_handle;
	return CUDA_SUCCESS;
}

static int32_t peer_copy(struct pvgpu_worker *w, uint64_t dst, uint64_t dst_ctx,
			 uint64_t src, uint64_t src_ctx, uint64_t size,
			 uint64_t stream_id, int sync)
{
	uint64_t dctx, sctx, stream = 0;
	int32_t st = have_peers(w);

	if (st)
		return st;
	if (!w->cur_ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!size) {
		/* Nothing to move, but the names must still be the session's. */
		if (!own_ctx(w, dst_ctx) || !own_ctx(w, src_ctx))
			return CUDA_ERROR_INVALID_CONTEXT;
		return sync ? CUDA_SUCCESS :
			      pvgpu_lookup_stream(w, stream_id, &stream);
	}
	st = peer_range(w, dst_ctx, dst, size, &dctx);
	if (!st)
		st = peer_range(w, src_ctx, src, size, &sctx);
	if (st)
		return st;
	if (sync)
		return pvgpu_exec_peer(w->ex_ops, w->ex, dst, dctx, src, sctx,
				       size, false, 0);
	st = pvgpu_lookup_stream(w, stream_id, &stream);
	if (st)
		return st;
	return pvgpu_exec_peer(w->ex_ops, w->ex, dst, dctx, src, sctx, size,
			       true, stream);
}

int32_t pvgpu_handle_memcpy_peer(struct pvgpu_worker *w,
				 const struct pvgpu_memcpy_peer_req *req)
{
	return peer_copy(w, req->dst, req->dst_ctx, req->src, req->src_ctx,
			 req->size, 0, 1);
}

int32_t pvgpu_handle_memcpy_peer_async(struct pvgpu_worker *w,
				       const struct pvgpu_memcpy_peer_async_req *req)
{
	return peer_copy(w, req->dst, req->dst_ctx, req->src, req->src_ctx,
			 req->size, req->stream, 0);
}

int32_t pvgpu_peer_dtod(struct pvgpu_worker *w, const struct pvgpu_alloc *d,
			uint64_t dst, const struct pvgpu_alloc *s, uint64_t src,
			uint64_t size, uint64_t stream, int sync)
{
	struct pvgpu_handle *dc = own_ctx(w, d->ctx), *sc = own_ctx(w, s->ctx);
	int32_t st = have_peers(w);

	if (st)
		return st;
	if (!dc || !sc)
		return CUDA_ERROR_INVALID_VALUE;
	if (sync && !stream)
		return pvgpu_exec_peer(w->ex_ops, w->ex, dst, dc->exec_handle,
				       src, sc->exec_handle, size, false, 0);
	st = pvgpu_exec_peer(w->ex_ops, w->ex, dst, dc->exec_handle, src,
			     sc->exec_handle, size, true, stream);
	if (!st && sync)
		st = w->ex_ops->synchronize(w->ex, false, stream);
	return st;
}
