/*
 * runtime_copy.c - cudaMemcpy, cudaMemcpyAsync, cudaMemset, cudaMemsetAsync.
 *
 * The direction of a copy comes from its kind, or for cudaMemcpyDefault
 * from whether each pointer lies in one of this process's device
 * allocations.  Ranges are checked here where NVIDIA's runtime fails
 * synchronously (a copy past the end of an allocation); the backend checks
 * everything again.
 */
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "debug.h"
#include "guest_window.h"
#include "pvgpu_guest.h"
#include "pvgpu_proto.h"
#include "runtime.h"

/* Staging size for a copy between devices of two different backends. */
#define CROSS_BACKEND_CHUNK	(16u * 1024 * 1024)

struct copy_plan {
	int src_dev, dst_dev;	/* -1: host memory */
};

/*
 * An explicit kind says which side is host memory; only the device side is
 * looked up.  The guest's own addresses and the backend's device addresses
 * come from two different address spaces (the worker's, the guest's), so a
 * pageable buffer may well sit at an address that is also inside a device
 * allocation: classifying it would turn a valid host-to-device copy into
 * cudaErrorInvalidValue (NVIDIA's warpAggregatedAtomicsCG sample hit it).
 * Only cudaMemcpyDefault has to guess from the pointers, device first.
 */
static enum pvgpu_ptr_kind classify_side(const void *ptr, size_t count,
					 int host_by_kind, int *device)
{
	if (host_by_kind)
		return PVGPU_PTR_HOST;
	return pvgpu_ptr_classify(ptr, count, device);
}

static cudaError_t plan_copy(void *dst, const void *src, size_t count,
			     enum cudaMemcpyKind kind, struct copy_plan *plan)
{
	enum pvgpu_ptr_kind dk, sk;
	int dst_host, src_host;

	plan->src_dev = plan->dst_dev = -1;
	switch (kind) {
	case cudaMemcpyHostToHost:
		dst_host = src_host = 1;
		break;
	case cudaMemcpyHostToDevice:
		dst_host = 0, src_host = 1;
		break;
	case cudaMemcpyDeviceToHost:
		dst_host = 1, src_host = 0;
		break;
	case cudaMemcpyDeviceToDevice:
	case cudaMemcpyDefault:
		dst_host = src_host = 0;
		break;
	default:
		return cudaErrorInvalidMemcpyDirection;
	}
	/*
	 * Nothing to move, nothing to check: NVIDIA's runtime returns success
	 * for a zero-length copy even at one past the end of an allocation
	 * (mergeSort's last, empty, segment).
	 */
	if (!count)
		return cudaSuccess;
	dk = classify_side(dst, count, dst_host, &plan->dst_dev);
	sk = classify_side(src, count, src_host, &plan->src_dev);
	if (dk == PVGPU_PTR_OVERRUN || sk == PVGPU_PTR_OVERRUN)
		return cudaErrorInvalidValue;
	/* What the kind says is device memory must be a device range. */
	if (kind != cudaMemcpyDefault &&
	    ((!dst_host && dk != PVGPU_PTR_DEVICE) ||
	     (!src_host && sk != PVGPU_PTR_DEVICE)))
		return cudaErrorInvalidValue;
	if (dk == PVGPU_PTR_HOST)
		plan->dst_dev = -1;
	if (sk == PVGPU_PTR_HOST)
		plan->src_dev = -1;
	/* Host memory at NULL would fault in the middle of a message. */
	if ((plan->dst_dev < 0 && !dst) || (plan->src_dev < 0 && !src))
		return cudaErrorInvalidValue;
	return cudaSuccess;
}

/* Wait for everything queued on a stream (cudaStreamSynchronize). */
static cudaError_t drain_stream(int device, uint64_t remote)
{
	struct pvgpu_op op;
	cudaError_t err;

	err = pvgpu_op_begin(&op, device, 1);
	if (err)
		return err;
	err = pvgpu_error_from_status(pvgpu_client_wait(op.client, PVGPU_IDLE_STREAM, 0,
							op.dev->ctx, remote));
	pvgpu_op_end(&op);
	return err;
}

/*
 * Where a stream-ordered operation on memory of mem_dev runs: on the
 * stream's device when both share a backend (one device may reach
 * another's memory there), otherwise on mem_dev's legacy stream once the
 * stream has drained, which keeps the order across backends.
 */
static cudaError_t pick_device(cudaStream_t stream, int mem_dev, int *device,
			       uint64_t *remote)
{
	cudaError_t err;
	int sdev;

	err = pvgpu_stream_resolve(stream, &sdev, remote);
	if (err)
		return err;
	if (sdev < 0 || sdev >= pvgpu_rt.ndevices)
		return cudaErrorInvalidDevice;
	if (pvgpu_rt.devices[sdev].be == pvgpu_rt.devices[mem_dev].be) {
		*device = sdev;
		return cudaSuccess;
	}
	err = drain_stream(sdev, *remote);
	*device = mem_dev;
	*remote = 0;
	return err;
}

/*
 * Copies of at least this many bytes from pageable memory go through the
 * window's staging ring; smaller ones ride in one DATA frame, which is one
 * message fewer.
 */
#define STAGED_MIN	(64u * 1024)

/*
 * Host-to-device through the connection's shared window, if it has one:
 * zero-copy DMA from memory inside it (cudaMallocHost), or the staging
 * ring for pageable memory.  Returns 1 when it handled the copy.
 */
static int htod_window(struct pvgpu_client *c, uint64_t dst, const void *src,
		       size_t count, uint64_t stream, int async, int32_t *st)
{
	struct pvgpu_window_map *win = pvgpu_client_window(c);
	uint64_t offset;

	if (!win)
		return 0;
	if (pvgpu_window_holds(win, src, count, &offset)) {
		struct pvgpu_memcpy_htod_window_req req = { dst, offset, count, stream };
		struct pvgpu_memcpy_htod_window_async_req areq = { dst, offset, count, stream };
		struct pvgpu_memcpy_htod_window_rep rep;

		*st = async ? pvgpu_call_memcpy_htod_window_async(c, &areq) :
			      pvgpu_call_memcpy_htod_window(c, &req, &rep);
		return 1;
	}
	if (count >= STAGED_MIN) {
		struct pvgpu_memcpy_htod_staged_req req = { dst, count, stream };
		uint8_t q[PVGPU_MEMCPY_HTOD_STAGED_REQ_MAX];
		long qn = pvgpu_memcpy_htod_staged_req_encode(q, &req);

		*st = pvgpu_client_call_staged(c, PVGPU_OP_MEMCPY_HTOD_STAGED, q,
					       (size_t)qn, src, NULL, count);
		return 1;
	}
	return 0;
}

static int dtoh_window(struct pvgpu_client *c, void *dst, uint64_t src,
		       size_t count, uint64_t stream, int async, int32_t *st)
{
	struct pvgpu_window_map *win = pvgpu_client_window(c);
	uint64_t offset;

	if (!win)
		return 0;
	if (pvgpu_window_holds(win, dst, count, &offset)) {
		struct pvgpu_memcpy_dtoh_window_req req = { src, offset, count, stream };
		struct pvgpu_memcpy_dtoh_window_async_req areq = { src, offset, count, stream };
		struct pvgpu_memcpy_dtoh_window_rep rep;

		/* Into pinned memory an async copy really is async. */
		*st = async ? pvgpu_call_memcpy_dtoh_window_async(c, &areq) :
			      pvgpu_call_memcpy_dtoh_window(c, &req, &rep);
		return 1;
	}
	if (count >= STAGED_MIN) {
		struct pvgpu_memcpy_dtoh_staged_req req = { src, count, stream };
		uint8_t q[PVGPU_MEMCPY_DTOH_STAGED_REQ_MAX];
		long qn = pvgpu_memcpy_dtoh_staged_req_encode(q, &req);

		*st = pvgpu_client_call_staged(c, PVGPU_OP_MEMCPY_DTOH_STAGED, q,
					       (size_t)qn, NULL, dst, count);
		return 1;
	}
	/* Into pageable memory even an async copy completes first. */
	return pvgpu_client_dtoh_landing(c, dst, src, count, stream, st);
}

static cudaError_t copy_htod(int device, uint64_t stream, void *dst,
			     const void *src, size_t count, int async)
{
	struct pvgpu_memcpy_htod_req req = {
		.dst = (uint64_t)(uintptr_t)dst,
		.size = count,
		.stream = stream,
	};
	struct pvgpu_memcpy_htod_async_req areq = {
		.dst = req.dst,
		.size = count,
		.stream = stream,
	};
	struct pvgpu_memcpy_htod_rep rep;
	struct pvgpu_op op;
	cudaError_t err;
	int32_t st;

	err = pvgpu_op_begin(&op, device, 1);
	if (err)
		return err;
	/* Either way the bytes are on the wire before we return. */
	if (htod_window(op.client, req.dst, src, count, stream, async, &st))
		;
	else if (async)
		st = pvgpu_call_memcpy_htod_async(op.client, &areq, src);
	else
		st = pvgpu_call_memcpy_htod(op.client, &req, &rep, src);
	pvgpu_op_end(&op);
	return pvgpu_error_from_status(st);
}

/* Always waits: the backend runs it in stream order and sends the bytes. */
static cudaError_t copy_dtoh(int device, uint64_t stream, void *dst,
			     const void *src, size_t count, int async)
{
	struct pvgpu_memcpy_dtoh_req req = {
		.src = (uint64_t)(uintptr_t)src,
		.size = count,
		.stream = stream,
	};
	struct pvgpu_memcpy_dtoh_rep rep;
	struct pvgpu_op op;
	cudaError_t err;
	int32_t st;

	err = pvgpu_op_begin(&op, device, 1);
	if (err)
		return err;
	if (!dtoh_window(op.client, dst, req.src, count, stream, async, &st))
		st = pvgpu_call_memcpy_dtoh(op.client, &req, &rep, dst);
	pvgpu_op_end(&op);
	return pvgpu_error_from_status(st);
}

/* Like NVIDIA's, a device-to-device copy does not wait for completion. */
static cudaError_t copy_dtod(int device, uint64_t stream, void *dst,
			     const void *src, size_t count)
{
	struct pvgpu_memcpy_dtod_async_req req = {
		.dst = (uint64_t)(uintptr_t)dst,
		.src = (uint64_t)(uintptr_t)src,
		.size = count,
		.stream = stream,
	};
	struct pvgpu_op op;
	cudaError_t err;
	int32_t st;

	err = pvgpu_op_begin(&op, device, 1);
	if (err)
		return err;
	st = pvgpu_call_memcpy_dtod_async(op.client, &req);
	pvgpu_op_end(&op);
	return pvgpu_error_from_status(st);
}

/* Two backends share no memory: stage through the host, in order. */
static cudaError_t copy_cross_backend(const struct copy_plan *plan, void *dst,
				      const void *src, size_t count)
{
	size_t chunk = count < CROSS_BACKEND_CHUNK ? count : CROSS_BACKEND_CHUNK;
	uint8_t *bounce = malloc(chunk);
	cudaError_t err = cudaSuccess;

	if (!bounce)
		return cudaErrorMemoryAllocation;
	pvgpu_debug("copy of %zu bytes from device %d to device %d: two backends, "
		    "staged through this process", count, plan->src_dev,
		    plan->dst_dev);
	for (size_t off = 0; off < count && !err; off += chunk) {
		size_t n = count - off < chunk ? count - off : chunk;

		err = copy_dtoh(plan->src_dev, 0, bounce, (const uint8_t *)src + off, n, 0);
		if (!err)
			err = copy_htod(plan->dst_dev, 0, (uint8_t *)dst + off,
					bounce, n, 0);
	}
	free(bounce);
	return err;
}

static cudaError_t do_copy(void *dst, const void *src, size_t count,
			   enum cudaMemcpyKind kind, cudaStream_t stream,
			   int async)
{
	struct copy_plan plan;
	uint64_t remote;
	cudaError_t err;
	int device;

	err = pvgpu_init();
	if (err)
		return err;
	err = plan_copy(dst, src, count, kind, &plan);
	if (err || !count)
		return err;
	if (plan.src_dev < 0 && plan.dst_dev < 0) {
		if (async) {
			/* Still a stream handle the program must own. */
			err = pvgpu_stream_resolve(stream, &device, &remote);
			if (err)
				return err;
		}
		memmove(dst, src, count);
		return cudaSuccess;
	}
	if (plan.src_dev >= 0 && plan.dst_dev >= 0 &&
	    pvgpu_rt.devices[plan.src_dev].be != pvgpu_rt.devices[plan.dst_dev].be) {
		/* Staged on the legacy streams, after the program's stream. */
		err = pvgpu_stream_resolve(stream, &device, &remote);
		if (!err && remote)
			err = drain_stream(device, remote);
		return err ? err : copy_cross_backend(&plan, dst, src, count);
	}
	err = pick_device(stream, plan.dst_dev >= 0 ? plan.dst_dev : plan.src_dev,
			  &device, &remote);
	if (err)
		return err;
	if (plan.src_dev < 0)
		return copy_htod(device, remote, dst, src, count, async);
	if (plan.dst_dev < 0)
		return copy_dtoh(device, remote, dst, src, count, async);
	return copy_dtod(device, remote, dst, src, count);
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t count,
		       enum cudaMemcpyKind kind)
{
	return pvgpu_record(do_copy(dst, src, count, kind, 0, 0));
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count,
			    enum cudaMemcpyKind kind, cudaStream_t stream)
{
	return pvgpu_record(do_copy(dst, src, count, kind, stream, 1));
}

static cudaError_t do_memset(void *devPtr, int value, size_t count,
			     cudaStream_t stream)
{
	struct pvgpu_memset_async_req req = {
		.dst = (uint64_t)(uintptr_t)devPtr,
		.value = (uint8_t)value,
		.elem_size = 1,
		.count = count,
	};
	struct pvgpu_op op;
	cudaError_t err;
	int mem_dev, device;

	err = pvgpu_init();
	if (err || !count)
		return err;
	if (pvgpu_ptr_classify(devPtr, count, &mem_dev) != PVGPU_PTR_DEVICE)
		return cudaErrorInvalidValue;
	err = pick_device(stream, mem_dev, &device, &req.stream);
	if (err)
		return err;
	err = pvgpu_op_begin(&op, device, 1);
	if (err)
		return err;
	err = pvgpu_error_from_status(pvgpu_call_memset_async(op.client, &req));
	pvgpu_op_end(&op);
	return err;
}

cudaError_t cudaMemset(void *devPtr, int value, size_t count)
{
	return pvgpu_record(do_memset(devPtr, value, count, 0));
}

cudaError_t cudaMemsetAsync(void *devPtr, int value, size_t count,
			    cudaStream_t stream)
{
	return pvgpu_record(do_memset(devPtr, value, count, stream));
}

/* --- cudaMemcpyPeer ------------------------------------------------------- */

/*
 * [ptr, ptr+count) wholly inside an allocation on `device` (the backend
 * checks it again, against its own tables).
 */
static cudaError_t peer_ptr(const void *ptr, size_t count, int device)
{
	int where = -1;

	if (pvgpu_ptr_classify(ptr, count, &where) != PVGPU_PTR_DEVICE ||
	    where != device)
		return cudaErrorInvalidValue;
	return cudaSuccess;
}

/*
 * GPU to GPU on the backend that has both: on `stream` (a backend handle
 * of `device`'s context) when async, else synchronously.
 */
static cudaError_t copy_peer(int device, uint64_t stream, void *dst,
			     int dstDevice, const void *src, int srcDevice,
			     size_t count, int async)
{
	struct pvgpu_op op;
	uint64_t dctx = 0, sctx = 0;
	cudaError_t err;
	int32_t st;

	err = pvgpu_op_begin(&op, device, 1);
	if (err)
		return err;
	err = pvgpu_op_peer_ctx(&op, dstDevice, &dctx);
	if (!err)
		err = pvgpu_op_peer_ctx(&op, srcDevice, &sctx);
	if (err)
		goto err_end;
	if (async) {
		struct pvgpu_memcpy_peer_async_req req = {
			.dst = (uint64_t)(uintptr_t)dst, .dst_ctx = dctx,
			.src = (uint64_t)(uintptr_t)src, .src_ctx = sctx,
			.size = count, .stream = stream,
		};

		st = pvgpu_call_memcpy_peer_async(op.client, &req);
	} else {
		struct pvgpu_memcpy_peer_req req = {
			.dst = (uint64_t)(uintptr_t)dst, .dst_ctx = dctx,
			.src = (uint64_t)(uintptr_t)src, .src_ctx = sctx,
			.size = count,
		};
		struct pvgpu_memcpy_peer_rep rep;

		st = pvgpu_call_memcpy_peer(op.client, &req, &rep);
	}
	err = pvgpu_error_from_status(st);
err_end:
	pvgpu_op_end(&op);
	return err;
}

static cudaError_t do_copy_peer(void *dst, int dstDevice, const void *src,
				int srcDevice, size_t count,
				cudaStream_t stream, int async)
{
	struct copy_plan plan = { .src_dev = srcDevice, .dst_dev = dstDevice };
	struct pvgpu_backend *be;
	uint64_t remote = 0;
	cudaError_t err;
	int sdev = -1;

	err = pvgpu_init();
	if (err)
		return err;
	if (dstDevice < 0 || dstDevice >= pvgpu_rt.ndevices ||
	    srcDevice < 0 || srcDevice >= pvgpu_rt.ndevices)
		return cudaErrorInvalidDevice;
	if (async) {
		err = pvgpu_stream_resolve(stream, &sdev, &remote);
		if (err)
			return err;
	}
	if (!count)
		return cudaSuccess;
	err = peer_ptr(dst, count, dstDevice);
	if (!err)
		err = peer_ptr(src, count, srcDevice);
	if (err)
		return err;
	be = pvgpu_rt.devices[dstDevice].be;
	if (be != pvgpu_rt.devices[srcDevice].be) {
		/* After the program's stream, on the legacy streams. */
		if (async && remote)
			err = drain_stream(sdev, remote);
		return err ? err : copy_cross_backend(&plan, dst, src, count);
	}
	if (async && sdev >= 0 && sdev < pvgpu_rt.ndevices &&
	    pvgpu_rt.devices[sdev].be == be)
		return copy_peer(sdev, remote, dst, dstDevice, src, srcDevice,
				 count, 1);
	if (async && remote) {
		/* The stream is another backend's: keep its order by waiting. */
		err = drain_stream(sdev, remote);
		if (err)
			return err;
	}
	return copy_peer(dstDevice, 0, dst, dstDevice, src, srcDevice, count,
			 async);
}

cudaError_t cudaMemcpyPeer(void *dst, int dstDevice, const void *src,
			   int srcDevice, size_t count)
{
	return pvgpu_record(do_copy_peer(dst, dstDevice, src, srcDevice, count,
					 0, 0));
}

cudaError_t cudaMemcpyPeerAsync(void *dst, int dstDevice, const void *src,
				int srcDevice, size_t count,
				cudaStream_t stream)
{
	return pvgpu_record(do_copy_peer(dst, dstDevice, src, srcDevice, count,
					 stream, 1));
}
