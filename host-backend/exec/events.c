/*
 * events.c - the worker's own events and stream queries, as generic
 * driver calls.
 *
 * The guest's cuEvent* and cuStreamQuery calls reach the executor through
 * driver_call by their ids in protocol/api/annotations.py GENERIC; the
 * worker's own (the scheduler's marks, the window's slots, copy staging)
 * go the same way, so that an executor models each function once.  The
 * worker's values need no checking: they are the executor's own.
 */
#include <cuda.h>

#include "executor.h"
#include "pvgpu_generic.h"

static int32_t call(const struct pvgpu_executor_ops *ops, struct pvgpu_exec *ex,
		    uint32_t id, uint64_t *a)
{
	const struct pvgpu_generic_fn *f = pvgpu_generic_find(id);

	if (!ex)
		return CUDA_ERROR_INVALID_VALUE;
	if (!f || !ops->driver_call)
		return CUDA_ERROR_NOT_SUPPORTED;
	return ops->driver_call(ex, f, a);
}

/* A function of one handle (an event, a stream). */
static int32_t call1(const struct pvgpu_executor_ops *ops, struct pvgpu_exec *ex,
		     uint32_t id, uint64_t h)
{
	uint64_t a[1] = { h };

	return call(ops, ex, id, a);
}

int32_t pvgpu_exec_event_create(const struct pvgpu_executor_ops *ops,
				struct pvgpu_exec *ex, uint32_t flags,
				uint64_t *event)
{
	uint64_t a[2] = { 1, flags };	/* a[0]: the result is wanted */
	int32_t st = call(ops, ex, PVGPU_GENERIC_cuEventCreate, a);

	*event = st ? 0 : a[0];
	return st;
}

int32_t pvgpu_exec_event_destroy(const struct pvgpu_executor_ops *ops,
				 struct pvgpu_exec *ex, uint64_t event)
{
	return call1(ops, ex, PVGPU_GENERIC_cuEventDestroy_v2, event);
}

int32_t pvgpu_exec_event_record(const struct pvgpu_executor_ops *ops,
				struct pvgpu_exec *ex, uint64_t event,
				uint64_t stream)
{
	uint64_t a[2] = { event, stream };

	return call(ops, ex, PVGPU_GENERIC_cuEventRecord, a);
}

int32_t pvgpu_exec_event_synchronize(const struct pvgpu_executor_ops *ops,
				     struct pvgpu_exec *ex, uint64_t event)
{
	return call1(ops, ex, PVGPU_GENERIC_cuEventSynchronize, event);
}

int32_t pvgpu_exec_event_query(const struct pvgpu_executor_ops *ops,
			       struct pvgpu_exec *ex, uint64_t event)
{
	return call1(ops, ex, PVGPU_GENERIC_cuEventQuery, event);
}

int32_t pvgpu_exec_stream_query(const struct pvgpu_executor_ops *ops,
				struct pvgpu_exec *ex, uint64_t stream)
{
	return call1(ops, ex, PVGPU_GENERIC_cuStreamQuery, stream);
}

int32_t pvgpu_exec_stream_write_value(const struct pvgpu_executor_ops *ops,
				      struct pvgpu_exec *ex, uint64_t stream,
				      uint64_t dptr, uint32_t value)
{
	uint64_t a[4] = { stream, dptr, value, 0 };

	return call(ops, ex, PVGPU_GENERIC_cuStreamWriteValue32_v2, a);
}
