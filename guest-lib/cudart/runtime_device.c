/*
 * runtime_device.c - device selection, device-wide synchronisation and
 * reset, and versions.
 */
#include <stdatomic.h>

#include "pvgpu_guest.h"
#include "pvgpu_proto.h"
#include "runtime.h"

#define STR_(x)	#x
#define STR(x)	STR_(x)

/* For benchmarks and tests: proof that this library, not NVIDIA's, is loaded. */
__attribute__((visibility("default")))
const char *pvgpu_shim_version(void)
{
	return "pvgpu 0.1, protocol " STR(PVGPU_PROTO_VERSION);
}

cudaError_t cudaGetDeviceCount(int *count)
{
	cudaError_t err;

	if (!count)
		return pvgpu_record(cudaErrorInvalidValue);
	err = pvgpu_init();
	if (err) {
		*count = 0;
		return pvgpu_record(err);
	}
	*count = pvgpu_rt.ndevices;
	return cudaSuccess;
}

cudaError_t cudaSetDevice(int device)
{
	cudaError_t err = pvgpu_init();

	if (err)
		return pvgpu_record(err);
	if (device < 0 || device >= pvgpu_rt.ndevices)
		return pvgpu_record(cudaErrorInvalidDevice);
	/* The context is made on the device's first real use. */
	pvgpu_set_current_device(device);
	return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device)
{
	cudaError_t err;

	if (!device)
		return pvgpu_record(cudaErrorInvalidValue);
	err = pvgpu_init();
	if (err)
		return pvgpu_record(err);
	*device = pvgpu_current_device();
	return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void)
{
	struct pvgpu_op op;
	cudaError_t err;

	err = pvgpu_op_begin(&op, pvgpu_current_device(), 1);
	if (err)
		return pvgpu_record(err);
	err = pvgpu_error_from_status(pvgpu_client_wait(op.client, PVGPU_IDLE_CTX, 0,
							op.dev->ctx, 0));
	pvgpu_op_end(&op);
	return pvgpu_record(err);
}

/*
 * Destroy the current device's context: the backend frees everything made
 * in it, and the handles the program holds for it become invalid.
 */
cudaError_t cudaDeviceReset(void)
{
	int device = pvgpu_current_device();
	struct pvgpu_ctx_destroy_req req;
	struct pvgpu_ctx_destroy_rep rep;
	struct pvgpu_op op;
	cudaError_t err;
	int32_t st = 0;

	err = pvgpu_op_begin(&op, device, 0);
	if (err)
		return pvgpu_record(err);
	if (op.dev->ctx) {
		req.ctx = op.dev->ctx;
		st = pvgpu_call_ctx_destroy(op.client, &req, &rep);
		if (op.dev->be->current_ctx == op.dev->ctx)
			op.dev->be->current_ctx = 0;
		op.dev->ctx = 0;
	}
	pvgpu_forget_device(device);
	err = pvgpu_error_from_status(st);
	/*
	 * Reset is the way out of a sticky fault: the dead context is gone
	 * (whatever its destruction said about the fault) and a new one
	 * starts healthy.
	 */
	if (pvgpu_error_is_sticky(err))
		err = cudaSuccess;
	atomic_store(&op.dev->sticky, 0);
	pvgpu_op_end(&op);
	return pvgpu_record(err);
}

/* The oldest driver among the backends: what every device can rely on. */
cudaError_t cudaDriverGetVersion(int *driverVersion)
{
	struct pvgpu_runtime *rt = &pvgpu_rt;
	int version = 0;

	if (!driverVersion)
		return pvgpu_record(cudaErrorInvalidValue);
	/* Like NVIDIA's with no driver installed: success, version 0. */
	if (pvgpu_init()) {
		*driverVersion = 0;
		return cudaSuccess;
	}
	for (int i = 0; i < rt->nbackends; i++) {
		struct pvgpu_backend *be = &rt->backends[i];
		struct pvgpu_driver_get_version_req req = { 0 };
		struct pvgpu_driver_get_version_rep rep = { 0 };
		int32_t st;

		if (!be->client)
			continue;
		pthread_mutex_lock(&be->lock);
		if (!be->driver_version) {
			st = pvgpu_call_driver_get_version(be->client, &req, &rep);
			be->driver_version = rep.version;
			if (st) {
				pthread_mutex_unlock(&be->lock);
				return pvgpu_record(pvgpu_error_from_status(st));
			}
		}
		if (!version || be->driver_version < version)
			version = be->driver_version;
		pthread_mutex_unlock(&be->lock);
	}
	*driverVersion = version;
	return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *runtimeVersion)
{
	if (!runtimeVersion)
		return pvgpu_record(cudaErrorInvalidValue);
	*runtimeVersion = CUDART_VERSION;
	return cudaSuccess;
}
