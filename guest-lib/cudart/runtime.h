/*
 * runtime.h - the CUDA runtime front-end's process-wide state and the
 * helpers its API files share.  Internal to the guest library.
 *
 * Locking, outermost first:
 *   backend->lock   one device operation at a time per connection, so the
 *                   ctx_set that selects a context and the operation that
 *                   needs it reach the backend together; also guards the
 *                   per-device context and attribute cache.
 *   rt.table_lock   the handle tables: streams, events, allocation maps,
 *                   host allocations.  Never held across a wire call.
 *   the client's own mutex (client.c), innermost.
 */
#ifndef PVGPU_RUNTIME_H
#define PVGPU_RUNTIME_H

#include <pthread.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "client.h"

/* Attribute ids the cache and device_get_attributes can carry. */
#define PVGPU_ATTR_SLOTS	256

struct pvgpu_window_map;

struct pvgpu_backend {
	char uri[256];			/* as in PVGPU_DEVICES, without #N */
	struct pvgpu_client *client;	/* NULL when unreachable */
	pthread_mutex_t lock;
	uint64_t current_ctx;		/* last made current on the wire; 0: none */
	int32_t driver_version;		/* 0 until asked */
};

/* One cudaMallocHost/cudaHostAlloc block. */
struct pvgpu_host_alloc {
	void *ptr;
	size_t size;
	struct pvgpu_window_map *win;	/* inside this window; NULL: own mapping */
	struct pvgpu_client *client;	/* the window's connection */
};

/* One cudaMalloc'd range, or a module's __device__/__constant__ variable. */
struct pvgpu_alloc {
	uint64_t base;
	uint64_t size;
	int global;			/* a module variable: cudaFree refuses it */
};

struct pvgpu_device {
	struct pvgpu_backend *be;
	int32_t remote;			/* GPU index on that backend */
	/* Under be->lock: */
	uint64_t ctx;			/* 0 until first use */
	uint32_t ctx_gen;		/* bumped per new ctx: module caches key on it */
	int props_valid;
	struct cudaDeviceProp props;
	int attrs_loaded;
	int32_t attr_value[PVGPU_ATTR_SLOTS];
	uint8_t attr_known[PVGPU_ATTR_SLOTS];
	/* Under rt.table_lock, sorted by base: */
	struct pvgpu_alloc *allocs;
	size_t nallocs;
	size_t allocs_cap;
	/*
	 * A fault that killed the context (cudaErrorIllegalAddress and kin):
	 * as in CUDA, every later call that needs the context returns it
	 * until cudaDeviceReset.  0 when healthy.
	 */
	_Atomic int sticky;
};

/* What a cudaStream_t handed to the program points at. */
struct pvgpu_stream {
	struct pvgpu_stream *next;	/* rt.streams */
	int device;
	uint64_t remote;		/* backend's handle */
};

/* What a cudaEvent_t handed to the program points at. */
struct pvgpu_event {
	struct pvgpu_event *next;	/* rt.events */
	int device;
	uint64_t remote;
};

struct pvgpu_runtime {
	pthread_once_t once;
	int initialized;
	cudaError_t init_error;		/* cudaErrorNoDevice when none usable */
	struct pvgpu_backend *backends;
	int nbackends;
	struct pvgpu_device *devices;
	int ndevices;

	pthread_mutex_t table_lock;
	struct pvgpu_stream *streams;
	struct pvgpu_event *events;
	struct pvgpu_host_alloc *host_allocs;	/* cudaMallocHost/cudaHostAlloc */
	size_t nhost_allocs;
	size_t host_allocs_cap;
};

extern struct pvgpu_runtime pvgpu_rt;

/* Connect to every backend once; cudaSuccess or cudaErrorNoDevice. */
cudaError_t pvgpu_init(void);

/* Record a failure as the calling thread's last error; returns err. */
cudaError_t pvgpu_record(cudaError_t err);
/* The thread's last error, and clear it if requested. */
cudaError_t pvgpu_last_error(int clear);

int pvgpu_current_device(void);
void pvgpu_set_current_device(int device);

/*
 * A backend status or client code as the runtime reports it.  A status
 * that kills a context (see pvgpu_error_is_sticky) poisons the device of
 * this thread's last pvgpu_op_begin.
 */
cudaError_t pvgpu_error_from_status(int32_t status);
/* Does this error leave the context unusable, as on a GPU? */
int pvgpu_error_is_sticky(cudaError_t err);
/* Remember a context-killing error for the device of the thread's last op. */
void pvgpu_mark_sticky(cudaError_t err);
/* Is err a cudaError_t this runtime knows by name? */
int pvgpu_error_known(int err);

/*
 * A device operation in flight: holds the device's backend lock and, with
 * need_ctx, has its context created and current on the wire.
 */
struct pvgpu_op {
	struct pvgpu_device *dev;
	struct pvgpu_client *client;
};

cudaError_t pvgpu_op_begin(struct pvgpu_op *op, int device, int need_ctx);
void pvgpu_op_end(struct pvgpu_op *op);
/*
 * Under an op: the context of device `peer` on the same backend, made if
 * need be (not made current).  cudaErrorInvalidDevice for a device of
 * another backend.
 */
cudaError_t pvgpu_op_peer_ctx(struct pvgpu_op *op, int peer, uint64_t *ctx);

/*
 * A device attribute (cached per device), for checks made under an op: 0
 * and *value, else why not.  An earlier async error that comes back on the
 * way goes to *deferred, if that is still 0.
 */
int32_t pvgpu_device_attr(struct pvgpu_op *op, int attr, int32_t *value,
			  int32_t *deferred);

/* Stream handle -> device and backend stream; the legacy stream is 0. */
cudaError_t pvgpu_stream_resolve(cudaStream_t stream, int *device,
				 uint64_t *remote);
cudaError_t pvgpu_event_resolve(cudaEvent_t event, int *device,
				uint64_t *remote);

/* Where a pointer range lies, for copies and memsets. */
enum pvgpu_ptr_kind {
	PVGPU_PTR_HOST,		/* in no device allocation: host memory */
	PVGPU_PTR_DEVICE,	/* wholly inside one device allocation */
	PVGPU_PTR_OVERRUN,	/* starts in one, runs past its end */
};

/* Classify [ptr, ptr+len); *device is set for DEVICE and OVERRUN. */
enum pvgpu_ptr_kind pvgpu_ptr_classify(const void *ptr, uint64_t len,
				       int *device);

/* Forget every handle and allocation of a device (after its ctx died). */
void pvgpu_forget_device(int device);
void pvgpu_allocs_forget_device(int device);
void pvgpu_streams_forget_device(int device);
void pvgpu_events_forget_device(int device);

/* A module variable's range, so copies to and from it find their way. */
int pvgpu_alloc_track_global(int device, uint64_t base, uint64_t size);
void pvgpu_alloc_untrack_global(int device, uint64_t base);

#endif /* PVGPU_RUNTIME_H */
