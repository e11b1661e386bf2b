/*
 * runtime_event.c - events.  As with streams, a cudaEvent_t points at a
 * struct pvgpu_event of ours and is looked up before it is believed.
 */
#include <stdlib.h>
#include <string.h>

#include "pvgpu_generic.h"
#include "pvgpu_guest.h"
#include "pvgpu_proto.h"
#include "runtime.h"
#include "runtime_module.h"

cudaError_t pvgpu_event_resolve(cudaEvent_t event, int *device, uint64_t *remote)
{
	struct pvgpu_runtime *rt = &pvgpu_rt;
	cudaError_t err = cudaErrorInvalidResourceHandle;

	pthread_mutex_lock(&rt->table_lock);
	for (struct pvgpu_event *e = rt->events; e; e = e->next) {
		if (e == (struct pvgpu_event *)event) {
			*device = e->device;
			*remote = e->remote;
			err = cudaSuccess;
			break;
		}
	}
	pthread_mutex_unlock(&rt->table_lock);
	return err;
}

static struct pvgpu_event *event_unlink(cudaEvent_t event)
{
	struct pvgpu_runtime *rt = &pvgpu_rt;
	struct pvgpu_event **link, *found = NULL;

	pthread_mutex_lock(&rt->table_lock);
	for (link = &rt->events; *link; link = &(*link)->next) {
		if (*link == (struct pvgpu_event *)event) {
			found = *link;
			*link = found->next;
			break;
		}
	}
	pthread_mutex_unlock(&rt->table_lock);
	return found;
}

void pvgpu_events_forget_device(int device)
{
	struct pvgpu_runtime *rt = &pvgpu_rt;
	struct pvgpu_event **link = &rt->events, *e;

	pthread_mutex_lock(&rt->table_lock);
	while ((e = *link)) {
		if (e->device == device) {
			*link = e->next;
			free(e);
		} else {
			link = &e->next;
		}
	}
	pthread_mutex_unlock(&rt->table_lock);
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
	const unsigned int known = cudaEventBlockingSync | cudaEventDisableTiming |
				   cudaEventInterprocess;
	struct pvgpu_runtime *rt = &pvgpu_rt;
	int device = pvgpu_current_device();
	struct pvgpu_event_create_req req = { .flags = flags };
	struct pvgpu_event_create_rep rep = { 0 };
	struct pvgpu_event *e;
	struct pvgpu_op op;
	cudaError_t err;
	int32_t st;

	if (!event || (flags & ~known))
		return pvgpu_record(cudaErrorInvalidValue);
	/* An interprocess event cannot carry timing. */
	if ((flags & cudaEventInterprocess) && !(flags & cudaEventDisableTiming))
		return pvgpu_record(cudaErrorInvalidValue);
	e = calloc(1, sizeof(*e));
	if (!e)
		return pvgpu_record(cudaErrorMemoryAllocation);
	err = pvgpu_op_begin(&op, device, 1);
	if (err)
		goto err_free;
	st = pvgpu_call_event_create(op.client, &req, &rep);
	pvgpu_op_end(&op);
	if (!st && !rep.event)
		st = PVGPU_CLIENT_EPROTO;
	err = pvgpu_error_from_status(st);
	if (!rep.event)
		goto err_free;
	e->device = device;
	e->remote = rep.event;
	pthread_mutex_lock(&rt->table_lock);
	e->next = rt->events;
	rt->events = e;
	pthread_mutex_unlock(&rt->table_lock);
	*event = (cudaEvent_t)e;
	return pvgpu_record(err);

err_free:
	free(e);
	return pvgpu_record(err);
}

cudaError_t cudaEventCreate(cudaEvent_t *event)
{
	return cudaEventCreateWithFlags(event, cudaEventDefault);
}

cudaError_t cudaEventDestroy(cudaEvent_t event)
{
	struct pvgpu_event_destroy_req req;
	struct pvgpu_event_destroy_rep rep;
	struct pvgpu_event *e;
	struct pvgpu_op op;
	cudaError_t err;

	err = pvgpu_init();
	if (err)
		return pvgpu_record(err);
	e = event_unlink(event);
	if (!e)
		return pvgpu_record(cudaErrorInvalidResourceHandle);
	req.event = e->remote;
	err = pvgpu_op_begin(&op, e->device, 1);
	free(e);
	if (err)
		return pvgpu_record(err);
	err = pvgpu_error_from_status(pvgpu_call_event_destroy(op.client, &req, &rep));
	pvgpu_op_end(&op);
	return pvgpu_record(err);
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
	struct pvgpu_event_record_req req;
	struct pvgpu_op op;
	cudaError_t err;
	int edev, sdev;

	err = pvgpu_init();
	if (!err)
		err = pvgpu_event_resolve(event, &edev, &req.event);
	if (!err)
		err = pvgpu_stream_resolve(stream, &sdev, &req.stream);
	/* Event and stream must belong to one device, as in CUDA. */
	if (!err && edev != sdev)
		err = cudaErrorInvalidResourceHandle;
	if (!err)
		err = pvgpu_op_begin(&op, edev, 1);
	if (err)
		return pvgpu_record(err);
	err = pvgpu_error_from_status(pvgpu_call_event_record(op.client, &req));
	pvgpu_op_end(&op);
	return pvgpu_record(err);
}

cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
	struct pvgpu_op op;
	cudaError_t err;
	uint64_t remote;
	int device;

	err = pvgpu_init();
	if (!err)
		err = pvgpu_event_resolve(event, &device, &remote);
	if (!err)
		err = pvgpu_op_begin(&op, device, 1);
	if (err)
		return pvgpu_record(err);
	err = pvgpu_error_from_status(pvgpu_client_wait(op.client, PVGPU_IDLE_EVENT, 0,
							op.dev->ctx, remote));
	pvgpu_op_end(&op);
	return pvgpu_record(err);
}

cudaError_t cudaEventQuery(cudaEvent_t event)
{
	struct pvgpu_op op;
	cudaError_t err;
	uint64_t remote;
	int device;

	err = pvgpu_init();
	if (!err)
		err = pvgpu_event_resolve(event, &device, &remote);
	if (!err)
		err = pvgpu_op_begin(&op, device, 1);
	if (err)
		return pvgpu_record(err);
	err = pvgpu_error_from_status(pvgpu_client_wait(op.client, PVGPU_IDLE_EVENT, 1,
							op.dev->ctx, remote));
	pvgpu_op_end(&op);
	return pvgpu_record(err);
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
	uint64_t a[3] = { 1 };
	struct pvgpu_op op;
	cudaError_t err;
	int sdev, edev;

	if (!ms)
		return pvgpu_record(cudaErrorInvalidValue);
	err = pvgpu_init();
	if (!err)
		err = pvgpu_event_resolve(start, &sdev, &a[1]);
	if (!err)
		err = pvgpu_event_resolve(end, &edev, &a[2]);
	if (!err && pvgpu_rt.devices[sdev].be != pvgpu_rt.devices[edev].be)
		err = cudaErrorInvalidResourceHandle;
	if (!err)
		err = pvgpu_op_begin(&op, sdev, 1);
	if (err)
		return pvgpu_record(err);
	err = pvgpu_error_from_status(pvgpu_func_call(&op,
		PVGPU_GENERIC_cuEventElapsedTime_v2, a, 3));
	pvgpu_op_end(&op);
	if (!err)
		memcpy(ms, &a[0], sizeof(*ms));	/* a float result: its bits */
	return pvgpu_record(err);
}
