/*
 * runtime_callback.c - host functions in stream order: cudaLaunchHostFunc
 * and cudaStreamAddCallback.
 *
 * The backend cannot call into the guest process, so a host function runs
 * here, in the thread that enqueues it, once the stream has drained: it
 * runs after all earlier work in the stream and before any later work,
 * since none has been submitted yet, which is the order CUDA promises.
 * Unlike CUDA, the call blocks the enqueuing thread until then, and the
 * function runs in that thread rather than in a runtime thread of its own;
 * work of other streams is not held back.
 */
#include "pvgpu_guest.h"
#include "pvgpu_proto.h"
#include "runtime.h"

/* What --default-stream per-thread builds call (cuda_runtime_api.h). */
cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t stream, cudaHostFn_t fn,
				    void *userData);
cudaError_t cudaStreamAddCallback_ptsz(cudaStream_t stream,
				       cudaStreamCallback_t callback,
				       void *userData, unsigned int flags);

/*
 * Wait until everything queued on the stream has run.  *status is how the
 * stream stands (an error of its work surfaces here); the return value is
 * non-zero only when the stream itself is no good.
 */
static cudaError_t drain(cudaStream_t stream, cudaError_t *status)
{
	struct pvgpu_stream_synchronize_req req;
	struct pvgpu_stream_synchronize_rep rep;
	struct pvgpu_op op;
	cudaError_t err;
	int device;

	err = pvgpu_init();
	if (!err)
		err = pvgpu_stream_resolve(stream, &device, &req.stream);
	if (err)
		return err;
	err = pvgpu_op_begin(&op, device, 1);
	if (err) {
		/* A context that died of a fault: the stream's status. */
		*status = err;
		return pvgpu_error_is_sticky(err) ? cudaSuccess : err;
	}
	*status = pvgpu_error_from_status(pvgpu_call_stream_synchronize(op.client, &req, &rep));
	pvgpu_op_end(&op);
	return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn,
			       void *userData)
{
	cudaError_t err, status = cudaSuccess;

	if (!fn)
		return pvgpu_record(cudaErrorInvalidValue);
	err = drain(stream, &status);
	if (err)
		return pvgpu_record(err);
	/* As in CUDA, a context that faulted runs no more host functions. */
	if (!pvgpu_error_is_sticky(status))
		fn(userData);
	return pvgpu_record(status);
}

cudaError_t cudaStreamAddCallback(cudaStream_t stream,
				  cudaStreamCallback_t callback,
				  void *userData, unsigned int flags)
{
	cudaError_t err, status = cudaSuccess;

	if (!callback || flags)
		return pvgpu_record(cudaErrorInvalidValue);
	err = drain(stream, &status);
	if (err)
		return pvgpu_record(err);
	/* A callback always runs, and is told how the stream stands. */
	callback(stream, status, userData);
	return pvgpu_record(status);
}

cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t stream, cudaHostFn_t fn,
				    void *userData)
{
	return cudaLaunchHostFunc(stream, fn, userData);
}

cudaError_t cudaStreamAddCallback_ptsz(cudaStream_t stream,
				       cudaStreamCallback_t callback,
				       void *userData, unsigned int flags)
{
	return cudaStreamAddCallback(stream, callback, userData, flags);
}
