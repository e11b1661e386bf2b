/*
 * runtime_stream.c - streams.  A cudaStream_t the program holds points at
 * a struct pvgpu_stream of ours; a handle is looked up in the table before
 * anything in it is believed, so a stale or made-up one gets
 * cudaErrorInvalidResourceHandle rather than a crash.  The legacy stream
 * (0, cudaStreamLegacy) and, for now, cudaStreamPerThread are the current
 * device's default stream, backend stream 0.
 */
#include <stdlib.h>

#include "pvgpu_guest.h"
#include "pvgpu_proto.h"
#include "runtime.h"

static int is_default_stream(cudaStream_t stream)
{
	return !stream || stream == cudaStreamLegacy || stream == cudaStreamPerThread;
}

cudaError_t pvgpu_stream_resolve(cudaStream_t stream, int *device,
				 uint64_t *remote)
{
	struct pvgpu_runtime *rt = &pvgpu_rt;
	cudaError_t err = cudaErrorInvalidResourceHandle;

	if (is_default_stream(stream)) {
		*device = pvgpu_current_device();
		*remote = 0;
		return cudaSuccess;
	}
	pthread_mutex_lock(&rt->table_lock);
	for (struct pvgpu_stream *s = rt->streams; s; s = s->next) {
		if (s == (struct pvgpu_stream *)stream) {
			*device = s->device;
			*remote = s->remote;
			err = cudaSuccess;
			break;
		}
	}
	pthread_mutex_unlock(&rt->table_lock);
	return err;
}

/* Take a stream out of the table: only one caller can destroy it. */
static struct pvgpu_stream *stream_unlink(cudaStream_t stream)
{
	struct pvgpu_runtime *rt = &pvgpu_rt;
	struct pvgpu_stream **link, *found = NULL;

	pthread_mutex_lock(&rt->table_lock);
	for (link = &rt->streams; *link; link = &(*link)->next) {
		if (*link == (struct pvgpu_stream *)stream) {
			found = *link;
			*link = found->next;
			break;
		}
	}
	pthread_mutex_unlock(&rt->table_lock);
	return found;
}

void pvgpu_streams_forget_device(int device)
{
	struct pvgpu_runtime *rt = &pvgpu_rt;
	struct pvgpu_stream **link = &rt->streams, *s;

	pthread_mutex_lock(&rt->table_lock);
	while ((s = *link)) {
		if (s->device == device) {
			*link = s->next;
			free(s);
		} else {
			link = &s->next;
		}
	}
	pthread_mutex_unlock(&rt->table_lock);
}

cudaError_t cudaStreamCreateWithPriority(cudaStream_t *pStream,
					 unsigned int flags, int priority)
{
	struct pvgpu_runtime *rt = &pvgpu_rt;
	int device = pvgpu_current_device();
	struct pvgpu_stream_create_req req = {
		.flags = flags,
		.priority = priority,
	};
	struct pvgpu_stream_create_rep rep = { 0 };
	struct pvgpu_stream *s;
	struct pvgpu_op op;
	cudaError_t err;
	int32_t st;

	if (!pStream || (flags & ~(unsigned int)cudaStreamNonBlocking))
		return pvgpu_record(cudaErrorInvalidValue);
	s = calloc(1, sizeof(*s));
	if (!s)
		return pvgpu_record(cudaErrorMemoryAllocation);
	err = pvgpu_op_begin(&op, device, 1);
	if (err)
		goto err_free;
	st = pvgpu_call_stream_create(op.client, &req, &rep);
	pvgpu_op_end(&op);
	/* Backend stream 0 is the legacy stream: never a new one. */
	if (!st && !rep.stream)
		st = PVGPU_CLIENT_EPROTO;
	err = pvgpu_error_from_status(st);
	if (!rep.stream)
		goto err_free;
	s->device = device;
	s->remote = rep.stream;
	pthread_mutex_lock(&rt->table_lock);
	s->next = rt->streams;
	rt->streams = s;
	pthread_mutex_unlock(&rt->table_lock);
	*pStream = (cudaStream_t)s;
	/* err may still be an earlier async error surfacing here. */
	return pvgpu_record(err);

err_free:
	free(s);
	return pvgpu_record(err);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
	return cudaStreamCreateWithPriority(pStream, flags, 0);
}

cudaError_t cudaStreamCreate(cudaStream_t *pStream)
{
	return cudaStreamCreateWithPriority(pStream, cudaStreamDefault, 0);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
	struct pvgpu_stream_destroy_req req;
	struct pvgpu_stream_destroy_rep rep;
	struct pvgpu_stream *s;
	struct pvgpu_op op;
	cudaError_t err;

	err = pvgpu_init();
	if (err)
		return pvgpu_record(err);
	if (is_default_stream(stream))
		return pvgpu_record(cudaErrorInvalidResourceHandle);
	s = stream_unlink(stream);
	if (!s)
		return pvgpu_record(cudaErrorInvalidResourceHandle);
	req.stream = s->remote;
	err = pvgpu_op_begin(&op, s->device, 1);
	free(s);
	if (err)
		return pvgpu_record(err);
	err = pvgpu_error_from_status(pvgpu_call_stream_destroy(op.client, &req, &rep));
	pvgpu_op_end(&op);
	return pvgpu_record(err);
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
	struct pvgpu_op op;
	cudaError_t err;
	uint64_t remote;
	int device;

	err = pvgpu_init();
	if (!err)
		err = pvgpu_stream_resolve(stream, &device, &remote);
	if (!err)
		err = pvgpu_op_begin(&op, device, 1);
	if (err)
		return pvgpu_record(err);
	err = pvgpu_error_from_status(pvgpu_client_wait(op.client, PVGPU_IDLE_STREAM, 0,
							op.dev->ctx, remote));
	pvgpu_op_end(&op);
	return pvgpu_record(err);
}

cudaError_t cudaStreamQuery(cudaStream_t stream)
{
	struct pvgpu_op op;
	cudaError_t err;
	uint64_t remote;
	int device;

	err = pvgpu_init();
	if (!err)
		err = pvgpu_stream_resolve(stream, &device, &remote);
	if (!err)
		err = pvgpu_op_begin(&op, device, 1);
	if (err)
		return pvgpu_record(err);
	/* cudaErrorNotReady passes through; pvgpu_record does not keep it. */
	err = pvgpu_error_from_status(pvgpu_client_wait(op.client, PVGPU_IDLE_STREAM, 1,
							op.dev->ctx, remote));
	pvgpu_op_end(&op);
	return pvgpu_record(err);
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
				unsigned int flags)
{
	struct pvgpu_stream_wait_event_req req = { .flags = flags };
	struct pvgpu_op op;
	cudaError_t err;
	int sdev, edev;

	err = pvgpu_init();
	if (!err && (flags & ~(unsigned int)cudaEventWaitExternal))
		err = cudaErrorInvalidValue;
	if (!err)
		err = pvgpu_stream_resolve(stream, &sdev, &req.stream);
	if (!err)
		err = pvgpu_event_resolve(event, &edev, &req.event);
	if (err)
		return pvgpu_record(err);
	if (pvgpu_rt.devices[sdev].be != pvgpu_rt.devices[edev].be) {
		/* No backend sees both: the host waits, which orders as well. */
		err = pvgpu_op_begin(&op, edev, 1);
		if (err)
			return pvgpu_record(err);
		err = pvgpu_error_from_status(pvgpu_client_wait(op.client, PVGPU_IDLE_EVENT, 0,
								op.dev->ctx, req.event));
		pvgpu_op_end(&op);
		return pvgpu_record(err);
	}
	err = pvgpu_op_begin(&op, sdev, 1);
	if (err)
		return pvgpu_record(err);
	err = pvgpu_error_from_status(pvgpu_call_stream_wait_event(op.client, &req));
	pvgpu_op_end(&op);
	return pvgpu_record(err);
}
