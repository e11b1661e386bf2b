/*
 * runtime_func.c - what a program may ask or set about a kernel:
 * attributes, cache preference, name and parameter layout, occupancy.
 * Each works on the kernel's function in the current device's context,
 * resolving it there first (runtime_module.c).
 */
#include <stddef.h>

#include <cuda.h>

#include "pvgpu_generic.h"
#include "pvgpu_guest.h"
#include "pvgpu_proto.h"
#include "runtime_module.h"

/* A kernel operation in progress: its op, its function, and what surfaced. */
struct func_op {
	struct pvgpu_op op;
	struct pvgpu_kernel *k;
	struct pvgpu_func_state *fs;
	int32_t deferred;
};

static cudaError_t func_begin(struct func_op *f, const void *func)
{
	int32_t st;
	cudaError_t err;

	f->deferred = 0;
	err = pvgpu_init();
	if (err)
		return err;
	f->k = pvgpu_kernel_find(func);
	if (!f->k)
		return cudaErrorInvalidDeviceFunction;
	err = pvgpu_op_begin(&f->op, pvgpu_current_device(), 1);
	if (err)
		return err;
	st = pvgpu_kernel_resolve(&f->op, f->k, &f->fs, &f->deferred);
	if (st) {
		pvgpu_op_end(&f->op);
		return st == CUDA_ERROR_NOT_FOUND ? cudaErrorInvalidDeviceFunction
						  : pvgpu_error_from_status(st);
	}
	return cudaSuccess;
}

/* End it; err, else what surfaced on the way. */
static cudaError_t func_end(struct func_op *f, cudaError_t err)
{
	pvgpu_op_end(&f->op);
	if (!err && f->deferred)
		err = pvgpu_error_from_status(f->deferred);
	return err;
}

struct attr_field {
	int attr;		/* CUfunction_attribute */
	int is_size;		/* size_t field, else int */
	size_t offset;
	int optional;		/* newer than some drivers: 0 when unknown */
};

#define F_INT(a, f, o) { a, 0, offsetof(struct cudaFuncAttributes, f), o }
#define F_SIZE(a, f) { a, 1, offsetof(struct cudaFuncAttributes, f), 0 }

static const struct attr_field attr_fields[] = {
	F_SIZE(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, sharedSizeBytes),
	F_SIZE(CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES, constSizeBytes),
	F_SIZE(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, localSizeBytes),
	F_INT(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, maxThreadsPerBlock, 0),
	F_INT(CU_FUNC_ATTRIBUTE_NUM_REGS, numRegs, 0),
	F_INT(CU_FUNC_ATTRIBUTE_PTX_VERSION, ptxVersion, 0),
	F_INT(CU_FUNC_ATTRIBUTE_BINARY_VERSION, binaryVersion, 0),
	F_INT(CU_FUNC_ATTRIBUTE_CACHE_MODE_CA, cacheModeCA, 0),
	F_INT(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, maxDynamicSharedSizeBytes, 0),
	F_INT(CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, preferredShmemCarveout, 1),
	F_INT(CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET, clusterDimMustBeSet, 1),
	F_INT(CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH, requiredClusterWidth, 1),
	F_INT(CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT, requiredClusterHeight, 1),
	F_INT(CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH, requiredClusterDepth, 1),
	F_INT(CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, nonPortableClusterSizeAllowed, 1),
	F_INT(CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE, clusterSchedulingPolicyPreference, 1),
};

#define N_ATTR_FIELDS	(sizeof(attr_fields) / sizeof(attr_fields[0]))

static void set_field(struct cudaFuncAttributes *a, const struct attr_field *f,
		      int32_t v)
{
	char *p = (char *)a + f->offset;

	if (f->is_size)
		*(size_t *)p = (size_t)(uint32_t)v;
	else
		*(int *)p = v;
}

/* Every attribute, one call each the first time; cached after. */
static int32_t load_func_attrs(struct func_op *f)
{
	struct cudaFuncAttributes a = { 0 };

	if (f->fs->attrs_valid)
		return 0;
	for (size_t i = 0; i < N_ATTR_FIELDS; i++) {
		uint64_t arg[3] = { 1, (uint64_t)(int64_t)attr_fields[i].attr,
				    f->fs->func };
		int32_t st = pvgpu_func_call(&f->op, PVGPU_GENERIC_cuFuncGetAttribute,
					     arg, 3);

		if (st && !attr_fields[i].optional)
			return st;
		set_field(&a, &attr_fields[i], st ? 0 : (int32_t)arg[0]);
	}
	f->fs->attrs = a;
	f->fs->attrs_valid = 1;
	return 0;
}

cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *attr,
				  const void *func)
{
	struct func_op f;
	cudaError_t err;
	int32_t st;

	if (!attr)
		return pvgpu_record(cudaErrorInvalidValue);
	err = func_begin(&f, func);
	if (err)
		return pvgpu_record(err);
	st = load_func_attrs(&f);
	if (!st)
		*attr = f.fs->attrs;
	return pvgpu_record(func_end(&f, pvgpu_error_from_status(st)));
}

cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr,
				 int value)
{
	uint64_t a[3] = { 0, (uint64_t)(int64_t)attr, (uint64_t)(int64_t)value };
	struct func_op f;
	cudaError_t err;
	int32_t st;

	/* Only these are settable (driver_types.h). */
	if (attr < cudaFuncAttributeMaxDynamicSharedMemorySize ||
	    attr >= cudaFuncAttributeMax)
		return pvgpu_record(cudaErrorInvalidValue);
	err = func_begin(&f, func);
	if (err)
		return pvgpu_record(err);
	a[0] = f.fs->func;
	st = pvgpu_func_call(&f.op, PVGPU_GENERIC_cuFuncSetAttribute, a, 3);
	err = pvgpu_error_from_status(st);
	if (!err) {
		/* Keep the launch checks and cached attributes in step. */
		if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize)
			f.fs->max_dyn_shared = value;
		for (size_t i = 0; i < N_ATTR_FIELDS; i++)
			if (attr_fields[i].attr == (int)attr)
				set_field(&f.fs->attrs, &attr_fields[i], value);
	}
	return pvgpu_record(func_end(&f, err));
}

/*
 * A preference the driver may ignore, and on Hopper does: kept, not sent.
 * Like NVIDIA's, it needs a registered kernel.
 */
cudaError_t cudaFuncSetCacheConfig(const void *func, enum cudaFuncCache cacheConfig)
{
	struct pvgpu_kernel *k;
	cudaError_t err = pvgpu_init();

	if (err)
		return pvgpu_record(err);
	if ((int)cacheConfig < cudaFuncCachePreferNone ||
	    (int)cacheConfig > cudaFuncCachePreferEqual)
		return pvgpu_record(cudaErrorInvalidValue);
	k = pvgpu_kernel_find(func);
	if (!k)
		return pvgpu_record(cudaErrorInvalidDeviceFunction);
	atomic_store(&k->cache_config, (int)cacheConfig);
	return cudaSuccess;
}

cudaError_t cudaFuncGetName(const char **name, const void *func)
{
	struct pvgpu_kernel *k;

	if (!name)
		return pvgpu_record(cudaErrorInvalidValue);
	k = pvgpu_kernel_find(func);
	if (!k)
		return pvgpu_record(cudaErrorInvalidDeviceFunction);
	*name = k->name;
	return cudaSuccess;
}

cudaError_t cudaFuncGetParamInfo(const void *func, size_t paramIndex,
				 size_t *paramOffset, size_t *paramSize)
{
	struct func_op f;
	cudaError_t err;

	err = func_begin(&f, func);
	if (err)
		return pvgpu_record(err);
	if (paramIndex >= f.fs->nparams) {
		err = cudaErrorInvalidValue;
	} else {
		if (paramOffset)
			*paramOffset = f.fs->param_offset[paramIndex];
		if (paramSize)
			*paramSize = f.fs->param_size[paramIndex];
	}
	return pvgpu_record(func_end(&f, err));
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
	int *numBlocks, const void *func, int blockSize,
	size_t dynamicSMemSize, unsigned int flags)
{
	uint64_t a[5] = { 1, 0, (uint64_t)(int64_t)blockSize, dynamicSMemSize, flags };
	struct func_op f;
	cudaError_t err;

	if (!numBlocks ||
	    (flags & ~(unsigned int)cudaOccupancyDisableCachingOverride))
		return pvgpu_record(cudaErrorInvalidValue);
	err = func_begin(&f, func);
	if (err)
		return pvgpu_record(err);
	a[1] = f.fs->func;
	err = pvgpu_error_from_status(pvgpu_func_call(&f.op,
		PVGPU_GENERIC_cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags, a, 5));
	if (!err)
		*numBlocks = (int)a[0];
	return pvgpu_record(func_end(&f, err));
}

cudaError_t cudaOccupancyAvailableDynamicSMemPerBlock(size_t *dynamicSmemSize,
						     const void *func,
						     int numBlocks, int blockSize)
{
	uint64_t a[4] = { 1, 0, (uint64_t)(int64_t)numBlocks, (uint64_t)(int64_t)blockSize };
	struct func_op f;
	cudaError_t err;

	if (!dynamicSmemSize)
		return pvgpu_record(cudaErrorInvalidValue);
	err = func_begin(&f, func);
	if (err)
		return pvgpu_record(err);
	a[1] = f.fs->func;
	err = pvgpu_error_from_status(pvgpu_func_call(&f.op,
		PVGPU_GENERIC_cuOccupancyAvailableDynamicSMemPerBlock, a, 4));
	if (!err)
		*dynamicSmemSize = (size_t)a[0];
	return pvgpu_record(func_end(&f, err));
}

cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int *numBlocks,
							  const void *func,
							  int blockSize,
							  size_t dynamicSMemSize)
{
	return cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
		numBlocks, func, blockSize, dynamicSMemSize,
		cudaOccupancyDefault);
}
