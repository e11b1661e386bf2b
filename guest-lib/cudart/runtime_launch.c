/*
 * runtime_launch.c - kernel launches: what `kernel<<<grid, block, shmem,
 * stream>>>(args...)` compiles to (push the configuration, call the stub,
 * which pops it and launches), and cudaLaunchKernel.
 *
 * A launch is an async operation (ops.spec launch_kernel): it is queued in
 * the client and goes out in a batch with whatever else is queued, so a
 * loop of many launches makes a few large writes rather than a round trip
 * each.  What a local GPU refuses at once (a zero or oversized grid or
 * block, more threads than the kernel allows, too much dynamic shared
 * memory) is refused here at once too, with the same error; the backend
 * checks everything again and reports what it refuses at the next
 * synchronising call, as CUDA does for failures of launched work.
 */
#include <stdlib.h>
#include <string.h>

#include <cuda.h>

#include "pvgpu_guest.h"
#include "pvgpu_proto.h"
#include "runtime_module.h"

/* Parameters up to this size are packed on the stack. */
#define PARAMS_ON_STACK		4096
/* <<<>>> configurations pushed and not yet popped, per thread. */
#define CONFIG_DEPTH		16

/* Not in the public headers (crt/device_functions.h declares them). */
unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim,
				     size_t sharedMem, struct CUstream_st *stream);
cudaError_t __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim,
				       size_t *sharedMem, void *stream);
cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *fun);
cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim,
			       dim3 blockDim, void **args, size_t sharedMem,
			       cudaStream_t stream);
cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim,
				    dim3 blockDim, void **args,
				    size_t sharedMem, cudaStream_t stream);
/* What --default-stream per-thread builds call (cuda_runtime_api.h). */
cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 gridDim,
				  dim3 blockDim, void **args, size_t sharedMem,
				  cudaStream_t stream);

struct call_config {
	dim3 grid;
	dim3 block;
	size_t shared;
	cudaStream_t stream;
};

/*
 * A stack, not one slot: the arguments of a launch are evaluated after its
 * push, and may themselves launch kernels.
 */
static _Thread_local struct call_config config_stack[CONFIG_DEPTH];
static _Thread_local int config_depth;

unsigned __cudaPushCallConfiguration(dim3 gridDim, dim3 blockDim,
				     size_t sharedMem, struct CUstream_st *stream)
{
	if (config_depth == CONFIG_DEPTH)
		return 1;	/* non-zero: the program skips the launch */
	config_stack[config_depth++] = (struct call_config){
		.grid = gridDim,
		.block = blockDim,
		.shared = sharedMem,
		.stream = stream,
	};
	return 0;
}

cudaError_t __cudaPopCallConfiguration(dim3 *gridDim, dim3 *blockDim,
				       size_t *sharedMem, void *stream)
{
	struct call_config *c;

	if (!config_depth)
		return cudaErrorMissingConfiguration;
	c = &config_stack[--config_depth];
	*gridDim = c->grid;
	*blockDim = c->block;
	*sharedMem = c->shared;
	memcpy(stream, &c->stream, sizeof(c->stream));
	return cudaSuccess;
}

/*
 * A cudaKernel_t of ours is the kernel's host stub itself: nothing to
 * free, valid in every context, and cudaLaunchKernel accepts either.
 */
cudaError_t __cudaGetKernel(cudaKernel_t *kernel, const void *fun)
{
	if (!kernel)
		return cudaErrorInvalidValue;
	*kernel = (cudaKernel_t)fun;
	return pvgpu_kernel_find(fun) ? cudaSuccess : cudaErrorInvalidDeviceFunction;
}

cudaError_t cudaGetKernel(cudaKernel_t *kernelPtr, const void *entryFuncAddr)
{
	return pvgpu_record(__cudaGetKernel(kernelPtr, entryFuncAddr));
}

/* A resolution failure as the runtime reports it for a kernel. */
static cudaError_t kernel_error(int32_t st)
{
	if (st == CUDA_ERROR_NOT_FOUND)
		return cudaErrorInvalidDeviceFunction;	/* not in the image */
	return pvgpu_error_from_status(st);
}

/* Grid and block against the device's limits, as cuLaunchKernel checks. */
static cudaError_t check_dims(struct pvgpu_op *op, dim3 grid, dim3 block,
			      int32_t *deferred)
{
	static const int limit_attrs[] = {
		cudaDevAttrMaxGridDimX, cudaDevAttrMaxGridDimY,
		cudaDevAttrMaxGridDimZ, cudaDevAttrMaxBlockDimX,
		cudaDevAttrMaxBlockDimY, cudaDevAttrMaxBlockDimZ,
		cudaDevAttrMaxThreadsPerBlock,
	};
	const unsigned int dims[] = {
		grid.x, grid.y, grid.z, block.x, block.y, block.z,
		block.x * block.y * block.z,	/* each <= 1024 once checked */
	};
	int32_t v;

	for (size_t i = 0; i < sizeof(dims) / sizeof(dims[0]); i++) {
		if (pvgpu_device_attr(op, limit_attrs[i], &v, deferred))
			continue;	/* unknown: the backend checks */
		if (v > 0 && dims[i] > (unsigned int)v)
			return cudaErrorInvalidValue;
	}
	return cudaSuccess;
}

/* Copy each argument to its offset in the kernel's parameter buffer. */
static cudaError_t pack_params(const struct pvgpu_func_state *fs, void **args,
			       uint8_t *buf)
{
	if (fs->nparams && !args)
		return cudaErrorInvalidValue;
	memset(buf, 0, fs->param_bytes);
	for (uint32_t i = 0; i < fs->nparams; i++) {
		if (!args[i])
			return cudaErrorInvalidValue;
		memcpy(buf + fs->param_offset[i], args[i], fs->param_size[i]);
	}
	return cudaSuccess;
}

static cudaError_t launch(const void *func, dim3 grid, dim3 block, void **args,
			  size_t shared, cudaStream_t stream)
{
	struct pvgpu_launch_kernel_req req = {
		.grid_x = grid.x, .grid_y = grid.y, .grid_z = grid.z,
		.block_x = block.x, .block_y = block.y, .block_z = block.z,
		.shared_bytes = (uint32_t)shared,
	};
	uint8_t stack_buf[PARAMS_ON_STACK], *buf = stack_buf;
	struct pvgpu_func_state *fs;
	struct pvgpu_kernel *k;
	struct pvgpu_op op;
	int32_t st, deferred = 0;
	cudaError_t err;
	int device;

	err = pvgpu_init();
	if (err)
		return err;
	k = pvgpu_kernel_find(func);
	if (!k)
		return cudaErrorInvalidDeviceFunction;
	/*
	 * What the H100's driver says of a shape it cannot run (checked with
	 * CUDA 13.0: a 2048-thread block is cudaErrorInvalidValue, from
	 * cuLaunchKernel; the runtime documents InvalidConfiguration).
	 */
	if (!grid.x || !grid.y || !grid.z || !block.x || !block.y || !block.z ||
	    block.x > 1024 || block.y > 1024 || block.z > 1024)
		return cudaErrorInvalidValue;
	if (shared > UINT32_MAX)
		return cudaErrorInvalidValue;
	err = pvgpu_stream_resolve(stream, &device, &req.stream);
	if (err)
		return err;
	err = pvgpu_op_begin(&op, device, 1);
	if (err)
		return err;
	err = check_dims(&op, grid, block, &deferred);
	if (err)
		goto out;
	st = pvgpu_kernel_resolve(&op, k, &fs, &deferred);
	if (st) {
		err = kernel_error(st);
		goto out;
	}
	if (fs->max_threads > 0 &&
	    block.x * block.y * block.z > (unsigned int)fs->max_threads) {
		err = cudaErrorInvalidValue;	/* __launch_bounds__: as the H100 says */
		goto out;
	}
	if (fs->max_dyn_shared >= 0 && shared > (size_t)fs->max_dyn_shared) {
		err = cudaErrorInvalidValue;
		goto out;
	}
	if (fs->param_bytes > sizeof(stack_buf)) {
		buf = malloc(fs->param_bytes);
		if (!buf) {
			err = cudaErrorMemoryAllocation;
			goto out;
		}
	}
	err = pack_params(fs, args, buf);
	if (err)
		goto out;
	req.func = fs->func;
	req.params = buf;
	req.params_len = fs->param_bytes;
	err = pvgpu_error_from_status(pvgpu_call_launch_kernel(op.client, &req));
out:
	pvgpu_op_end(&op);
	if (buf != stack_buf)
		free(buf);
	/* An earlier asynchronous failure surfaces here, after our own. */
	if (!err && deferred)
		err = pvgpu_error_from_status(deferred);
	return err;
}

cudaError_t cudaLaunchKernel(const void *func, dim3 gridDim, dim3 blockDim,
			     void **args, size_t sharedMem, cudaStream_t stream)
{
	return pvgpu_record(launch(func, gridDim, blockDim, args, sharedMem,
				   stream));
}

/* The per-thread default stream is the legacy stream here for now. */
cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 gridDim,
				  dim3 blockDim, void **args, size_t sharedMem,
				  cudaStream_t stream)
{
	return cudaLaunchKernel(func, gridDim, blockDim, args, sharedMem, stream);
}

cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 gridDim,
			       dim3 blockDim, void **args, size_t sharedMem,
			       cudaStream_t stream)
{
	return cudaLaunchKernel((const void *)kernel, gridDim, blockDim, args,
				sharedMem, stream);
}

cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 gridDim,
				    dim3 blockDim, void **args,
				    size_t sharedMem, cudaStream_t stream)
{
	return cudaLaunchKernel((const void *)kernel, gridDim, blockDim, args,
				sharedMem, stream);
}

/*
 * cudaLaunchKernelEx (a template over this): launch attributes change how
 * a kernel is scheduled (clusters, priorities, programmatic completion),
 * which the wire does not carry yet: any but "ignore" is refused rather
 * than silently dropped.
 */
cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t *config,
				const void *func, void **args)
{
	if (!config || (config->numAttrs && !config->attrs))
		return pvgpu_record(cudaErrorInvalidValue);
	for (unsigned int i = 0; i < config->numAttrs; i++)
		if (config->attrs[i].id != cudaLaunchAttributeIgnore)
			return pvgpu_record(cudaErrorNotSupported);
	return cudaLaunchKernel(func, config->gridDim, config->blockDim, args,
				config->dynamicSmemBytes, config->stream);
}
