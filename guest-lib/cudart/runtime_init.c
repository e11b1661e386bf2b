/*
 * runtime_init.c - process-wide and per-thread state of the runtime
 * front-end: finding the backends (PVGPU_DEVICES, DESIGN §6), the device
 * list, the current device and last error of each thread, and the
 * context a device operation needs.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config_env.h"
#include "debug.h"
#include "devices.h"
#include "pvgpu_guest.h"
#include "runtime.h"

struct pvgpu_runtime pvgpu_rt = {
	.once = PTHREAD_ONCE_INIT,
	.init_error = cudaErrorNoDevice,
	.table_lock = PTHREAD_MUTEX_INITIALIZER,
};

/* What the runtime keeps per host thread, as NVIDIA's does. */
struct pvgpu_thread_state {
	int device;
	cudaError_t last_error;
	int op_device;		/* device of the last pvgpu_op_begin, plus one */
};

static _Thread_local struct pvgpu_thread_state thread_state;

cudaError_t pvgpu_record(cudaError_t err)
{
	/* "Not ready" is an answer, not a failure: NVIDIA keeps it out too. */
	if (err != cudaSuccess && err != cudaErrorNotReady)
		thread_state.last_error = err;
	return err;
}

cudaError_t pvgpu_last_error(int clear)
{
	cudaError_t err = thread_state.last_error;

	if (clear)
		thread_state.last_error = cudaSuccess;
	return err;
}

void pvgpu_mark_sticky(cudaError_t err)
{
	int device = thread_state.op_device - 1;
	int healthy = 0;

	/* The first fault is the one every later call reports. */
	if (device >= 0 && device < pvgpu_rt.ndevices)
		atomic_compare_exchange_strong(&pvgpu_rt.devices[device].sticky,
					       &healthy, (int)err);
}

int pvgpu_current_device(void)
{
	return thread_state.device;
}

void pvgpu_set_current_device(int device)
{
	thread_state.device = device;
}

static int find_or_add_backend(const char *uri)
{
	struct pvgpu_runtime *rt = &pvgpu_rt;
	struct pvgpu_backend *be;

	for (int i = 0; i < rt->nbackends; i++)
		if (!strcmp(rt->backends[i].uri, uri))
			return i;
	be = &rt->backends[rt->nbackends];
	snprintf(be->uri, sizeof(be->uri), "%s", uri);
	pthread_mutex_init(&be->lock, NULL);
	return rt->nbackends++;
}

static int add_device(int backend, int index)
{
	struct pvgpu_runtime *rt = &pvgpu_rt;
	struct pvgpu_backend *be = &rt->backends[backend];
	struct pvgpu_device *devs;

	for (int i = 0; i < rt->ndevices; i++)
		if (rt->devices[i].be == be && rt->devices[i].remote == index)
			return 0;	/* listed twice: one device */
	devs = realloc(rt->devices, (size_t)(rt->ndevices + 1) * sizeof(*devs));
	if (!devs)
		return -1;
	rt->devices = devs;
	memset(&devs[rt->ndevices], 0, sizeof(devs[0]));
	devs[rt->ndevices].be = be;
	devs[rt->ndevices].remote = index;
	rt->ndevices++;
	return 0;
}

/* Returns how many backends could not be reached. */
static int connect_backends(const struct pvgpu_client_config *cfg)
{
	struct pvgpu_runtime *rt = &pvgpu_rt;
	int unreachable = 0;

	for (int i = 0; i < rt->nbackends; i++) {
		struct pvgpu_backend *be = &rt->backends[i];
		char err[256] = "";

		if (pvgpu_client_open(be->uri, cfg, &be->client, err,
				      sizeof(err))) {
			be->client = NULL;
			pvgpu_debug("cannot use %s: %s", be->uri, err);
			unreachable++;
		}
	}
	return unreachable;
}

static void runtime_init_once(void)
{
	struct pvgpu_runtime *rt = &pvgpu_rt;
	struct pvgpu_client_config cfg;
	struct pvgpu_device_entry *entries = NULL;
	const char *list;
	int nentries, unreachable, *backend;

	/* The one place this front-end reads its environment. */
	pvgpu_config_from_env(&cfg);
	list = cfg.devices;
	nentries = pvgpu_devices_parse(list, &entries);
	backend = nentries < 0 ? NULL : calloc((size_t)nentries + 1, sizeof(*backend));
	rt->backends = backend ? calloc((size_t)nentries + 1, sizeof(*rt->backends)) : NULL;
	if (!rt->backends) {
		pvgpu_debug("out of memory reading PVGPU_DEVICES");
		free(backend);
		free(entries);
		return;
	}
	for (int i = 0; i < nentries; i++)
		backend[i] = find_or_add_backend(entries[i].uri);
	unreachable = connect_backends(&cfg);
	for (int i = 0; i < nentries; i++) {
		struct pvgpu_backend *be = &rt->backends[backend[i]];
		int first, end;

		if (!be->client)
			continue;
		pvgpu_device_entry_gpus(&entries[i],
					pvgpu_client_info(be->client)->device_count,
					&first, &end);
		for (int gpu = first; gpu < end; gpu++)
			if (add_device(backend[i], gpu))
				break;
	}
	free(backend);
	free(entries);
	if (rt->ndevices > 0)
		rt->init_error = cudaSuccess;
	else if (!unreachable)
		pvgpu_debug("no GPU in PVGPU_DEVICES=%s", list);
	rt->initialized = 1;
}

cudaError_t pvgpu_init(void)
{
	pthread_once(&pvgpu_rt.once, runtime_init_once);
	return pvgpu_rt.init_error;
}

/*
 * pvgpu's own exports, for benchmarks (found with dlsym, absent natively),
 * summed over the backends (pvgpu_client_wire_counts).  pvgpu_wire_stats:
 * messages sent, sync calls (each one round trip), async ops, batches,
 * DATA frames: the number of backends counted, or -1 before any.
 * pvgpu_ring_wakes: wake-ups sent to a backend asleep on the control ring,
 * and our waits on it that slept: the number of backends with the ring, or
 * -1 before any.
 */
static int wire_counts(unsigned long long out[PVGPU_WIRE_COUNTS], int *rings)
{
	struct pvgpu_runtime *rt = &pvgpu_rt;
	int n = 0;

	*rings = 0;
	memset(out, 0, PVGPU_WIRE_COUNTS * sizeof(out[0]));
	if (!rt->initialized)
		return -1;
	for (int i = 0; i < rt->nbackends; i++) {
		int rc = rt->backends[i].client ?
			 pvgpu_client_wire_counts(rt->backends[i].client, out) : -1;

		n += rc >= 0;
		*rings += rc > 0;
	}
	return n;
}

PVGPU_WIRE_EXPORTS(wire_counts)

/*
 * At exit: tell each backend goodbye so it frees the session at once (and,
 * under PVGPU_DEBUG, say what went over the wire).
 */
__attribute__((destructor)) static void runtime_fini(void)
{
	struct pvgpu_runtime *rt = &pvgpu_rt;

	if (!rt->initialized)
		return;
	for (int i = 0; i < rt->nbackends; i++)
		if (rt->backends[i].client)
			pvgpu_client_exit(rt->backends[i].client);
}

/* Under the backend's lock: the device's context, made if need be. */
static int32_t ensure_ctx(struct pvgpu_client *client, struct pvgpu_device *dev)
{
	struct pvgpu_ctx_create_req req = { .device = dev->remote };
	struct pvgpu_ctx_create_rep rep = { 0 };
	int32_t st;

	if (dev->ctx)
		return 0;
	/* A non-zero ctx means it exists, whatever else st says. */
	st = pvgpu_call_ctx_create(client, &req, &rep);
	dev->ctx = rep.ctx;
	if (rep.ctx)
		dev->ctx_gen++;	/* modules of an older ctx are gone */
	if (!st && !rep.ctx)
		st = PVGPU_CLIENT_EPROTO;
	return st;
}

cudaError_t pvgpu_op_peer_ctx(struct pvgpu_op *op, int peer, uint64_t *ctx)
{
	struct pvgpu_device *dev;
	int32_t st;

	if (peer < 0 || peer >= pvgpu_rt.ndevices)
		return cudaErrorInvalidDevice;
	dev = &pvgpu_rt.devices[peer];
	if (dev->be != op->dev->be)
		return cudaErrorInvalidDevice;
	st = atomic_load(&dev->sticky);
	if (st)
		return (cudaError_t)st;
	st = ensure_ctx(op->client, dev);
	if (st)
		return pvgpu_error_from_status(st);
	*ctx = dev->ctx;
	return cudaSuccess;
}

cudaError_t pvgpu_op_begin(struct pvgpu_op *op, int device, int need_ctx)
{
	struct pvgpu_runtime *rt = &pvgpu_rt;
	struct pvgpu_device *dev;
	struct pvgpu_backend *be;
	int32_t st;

	if (pvgpu_init() != cudaSuccess)
		return cudaErrorNoDevice;
	if (device < 0 || device >= rt->ndevices)
		return cudaErrorInvalidDevice;
	dev = &rt->devices[device];
	be = dev->be;
	/* Statuses this op brings back are about this device (sticky errors). */
	thread_state.op_device = device + 1;
	pthread_mutex_lock(&be->lock);
	op->dev = dev;
	op->client = be->client;
	if (!need_ctx)
		return cudaSuccess;
	st = atomic_load(&dev->sticky);
	if (st) {
		/* The context died of a fault: nothing runs in it any more. */
		pthread_mutex_unlock(&be->lock);
		return (cudaError_t)st;
	}
	st = ensure_ctx(op->client, dev);
	if (st)
		goto err_unlock;
	if (be->current_ctx != dev->ctx) {
		struct pvgpu_ctx_set_req req = { .ctx = dev->ctx };

		st = pvgpu_call_ctx_set(op->client, &req);
		if (st)
			goto err_unlock;
		be->current_ctx = dev->ctx;
	}
	return cudaSuccess;

err_unlock:
	pthread_mutex_unlock(&be->lock);
	return pvgpu_error_from_status(st);
}

void pvgpu_op_end(struct pvgpu_op *op)
{
	pthread_mutex_unlock(&op->dev->be->lock);
}

void pvgpu_forget_device(int device)
{
	pvgpu_streams_forget_device(device);
	pvgpu_events_forget_device(device);
	pvgpu_allocs_forget_device(device);
}
