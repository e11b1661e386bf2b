/*
 * cuda_export_tools.c - two of NVIDIA's private export tables, answered
 * over pvgpu's own driver calls: the tools context table (21318c60...,
 * cuBLAS/cuBLASLt use it to ask a context's device and id and to turn
 * "tools" stream handles into public ones) and the cluster table
 * (1734dc26..., cuBLASLt's Hopper GEMMs set and ask a kernel's cluster
 * shape through it), and the tools module table (6e163fbe..., asked by
 * cuFFT, which enumerates each module's kernels through slot 7).  The slot order is the drivers' (DESIGN §7); a slot
 * whose meaning pvgpu does not know answers "not supported", naming the
 * table and the slot in the debug log.
 *
 * pvgpu hands out its own CUstream handles as the tools stream handles, so
 * the public/tools conversions are the identity.
 */
#include <stdint.h>
#include <string.h>

#include "cuda_internal.h"
#include "cuda_surface.h"
#include "debug.h"

#define SIZE_OF(n)	((void *)(uintptr_t)(sizeof(void *) * (n)))

/* ---- tools context ---------------------------------------------------- */

static CUresult tc_stream_sync(CUcontext ctx, CUstream s)
{
	return CU_WITH_CTX(ctx, cuStreamSynchronize(s));
}

static CUresult tc_stream_query(CUcontext ctx, CUstream s)
{
	return CU_WITH_CTX(ctx, cuStreamQuery(s));
}

static CUresult tc_ctx_device(CUcontext c, uint32_t *dev)
{
	struct cu_ctx *ctx = c ? cu_ctx_check(c) : cu_current();

	if (!ctx || !dev)
		return CUDA_ERROR_INVALID_VALUE;
	*dev = (uint32_t)ctx->device;
	return CUDA_SUCCESS;
}

static CUresult tc_stream_id(CUcontext ctx, CUstream s, uint64_t *id)
{
	unsigned long long v = 0;
	CUresult r;

	if (!id)
		return CUDA_ERROR_INVALID_VALUE;
	r = CU_WITH_CTX(ctx, cuStreamGetId(s, &v));
	*id = v;
	return r;
}

static CUresult tc_ctx_sync(CUcontext ctx)
{
	return CU_WITH_CTX(ctx, cuCtxSynchronize());
}

static CUresult tc_set_limit(CUcontext ctx, CUlimit limit, size_t value)
{
	return CU_WITH_CTX(ctx, cuCtxSetLimit(limit, value));
}

static CUresult tc_get_limit(CUcontext ctx, CUlimit limit, size_t *value)
{
	return CU_WITH_CTX(ctx, cuCtxGetLimit(value, limit));
}

static CUresult tc_null_stream(CUcontext ctx, CUstream *s)
{
	(void)ctx;
	if (!s)
		return CUDA_ERROR_INVALID_VALUE;
	*s = NULL;
	return CUDA_SUCCESS;
}

static CUresult tc_is_null_stream(CUcontext ctx, CUstream s, uint8_t *yes)
{
	(void)ctx;
	if (!yes)
		return CUDA_ERROR_INVALID_VALUE;
	*yes = s == NULL || s == CU_STREAM_LEGACY;
	return CUDA_SUCCESS;
}

static CUresult tc_api_version(CUcontext ctx, uint32_t *v)
{
	unsigned int u = 0;
	CUresult r = cuCtxGetApiVersion(ctx, &u);

	if (v)
		*v = u;
	return v ? r : CUDA_ERROR_INVALID_VALUE;
}

static CUresult tc_public_handle(CUstream tools, CUstream *pub)
{
	if (!pub)
		return CUDA_ERROR_INVALID_VALUE;
	*pub = tools;
	return CUDA_SUCCESS;
}

static CUresult tc_tools_handle(CUcontext ctx, CUstream pub, CUstream *tools)
{
	(void)ctx;
	if (!tools)
		return CUDA_ERROR_INVALID_VALUE;
	*tools = pub;
	return CUDA_SUCCESS;
}

static CUresult tc_tools_handle_ex(CUcontext ctx, CUstream pub, CUstream *tools,
				   uint8_t per_thread)
{
	(void)ctx;
	if (!tools)
		return CUDA_ERROR_INVALID_VALUE;
	*tools = !pub && per_thread ? CU_STREAM_PER_THREAD : pub;
	return CUDA_SUCCESS;
}

static CUresult tc_stream_ctx(CUstream s, CUcontext *ctx)
{
	return cuStreamGetCtx(s, ctx);
}

static CUresult tc_stream_non_blocking(CUstream s, uint8_t *yes)
{
	unsigned int flags = 0;
	CUresult r;

	if (!yes)
		return CUDA_ERROR_INVALID_VALUE;
	r = cuStreamGetFlags(s, &flags);
	*yes = !r && (flags & CU_STREAM_NON_BLOCKING);
	return r;
}

static CUresult tc_priority_range(CUcontext ctx, int32_t *least, int32_t *greatest)
{
	return CU_WITH_CTX(ctx, cuCtxGetStreamPriorityRange(least, greatest));
}

static CUresult tc_stream_priority(CUstream s, int32_t *requested, int32_t *clamped,
				   int32_t *internal)
{
	int p = 0;
	CUresult r = cuStreamGetPriority(s, &p);

	if (requested)
		*requested = p;
	if (clamped)
		*clamped = p;
	if (internal)
		*internal = p;
	return r;
}

static CUresult tc_parent_ctx(CUcontext ctx, CUcontext *parent)
{
	(void)ctx;
	if (!parent)
		return CUDA_ERROR_INVALID_VALUE;
	*parent = NULL;		/* pvgpu makes no dummy contexts */
	return CUDA_SUCCESS;
}

static CUresult tc_capturing_graph(CUstream s, CUgraph *graph)
{
	CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;

	if (!graph)
		return CUDA_ERROR_INVALID_VALUE;
	return cuStreamGetCaptureInfo_v3(s, &st, NULL, graph, NULL, NULL, NULL);
}

static CUresult tc_unknown(void)
{
	return pvgpu_cuda_unsupported("tools context table: a slot pvgpu does not answer");
}

/* The driver-580 table is 93 words long; callers index past the slots
 * known here, so it is as long. */
#define TOOLS_CONTEXT_SLOTS	93
void *pvgpu_tools_context[TOOLS_CONTEXT_SLOTS] = {
	[0] = SIZE_OF(TOOLS_CONTEXT_SLOTS),
	[1] = (void *)tc_stream_sync,
	[2] = (void *)tc_stream_query,
	[3] = (void *)tc_ctx_device,
	[4] = (void *)cuCtxGetId,
	[5] = (void *)tc_stream_id,
	[6] = (void *)tc_ctx_sync,
	[9] = (void *)tc_set_limit,
	[10] = (void *)tc_get_limit,
	[11] = (void *)tc_null_stream,
	[12] = (void *)tc_is_null_stream,
	[13] = (void *)tc_api_version,
	[16] = (void *)tc_public_handle,
	[17] = (void *)tc_tools_handle,
	[20] = (void *)tc_stream_ctx,
	[32] = (void *)tc_stream_non_blocking,
	[36] = (void *)tc_priority_range,
	[37] = (void *)tc_stream_priority,
	[39] = (void *)tc_stream_id,
	[40] = (void *)tc_parent_ctx,
	[51] = (void *)tc_tools_handle_ex,
	[53] = (void *)tc_capturing_graph,
};

/* ---- clusters --------------------------------------------------------- */

static CUresult cl_set_dim(CUfunction f, int x, int y, int z)
{
	CUresult r = cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH, x);

	if (!r)
		r = cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT, y);
	if (!r)
		r = cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH, z);
	return r;
}

static CUresult cl_set_policy(CUfunction f, int policy)
{
	return cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE,
				  policy);
}

static CUresult cl_set_non_portable(CUfunction f, int enable)
{
	return cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED,
				  enable);
}

static CUresult cl_get_dim(CUfunction f, int *x, int *y, int *z)
{
	CUresult r = cuFuncGetAttribute(x, CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH, f);

	if (!r)
		r = cuFuncGetAttribute(y, CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT, f);
	if (!r)
		r = cuFuncGetAttribute(z, CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH, f);
	return r;
}

static CUresult cl_get_policy(CUfunction f, int *policy)
{
	return cuFuncGetAttribute(policy, CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE,
				  f);
}

static CUresult cl_get_non_portable(CUfunction f, int *enable)
{
	return cuFuncGetAttribute(enable, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, f);
}

static CUresult cl_launch_supported(CUdevice dev, int *yes)
{
	return cuDeviceGetAttribute(yes, CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH, dev);
}

static CUresult cl_max_active(CUfunction f, int block, size_t smem, int cluster, int *n)
{
	CUlaunchAttribute attr = { .id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION };
	CUlaunchConfig cfg = {
		.gridDimX = (unsigned)cluster, .gridDimY = 1, .gridDimZ = 1,
		.blockDimX = (unsigned)block, .blockDimY = 1, .blockDimZ = 1,
		.sharedMemBytes = (unsigned)smem, .attrs = &attr, .numAttrs = 1,
	};

	if (block <= 0 || cluster <= 0 || smem > UINT32_MAX)
		return CUDA_ERROR_INVALID_VALUE;
	attr.value.clusterDim.x = (unsigned)cluster;
	attr.value.clusterDim.y = 1;
	attr.value.clusterDim.z = 1;
	return cuOccupancyMaxActiveClusters(n, f, &cfg);
}

static CUresult cl_must_be_set(CUfunction f, int *yes)
{
	return cuFuncGetAttribute(yes, CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET, f);
}

static CUresult cl_unknown(void)
{
	return pvgpu_cuda_unsupported("cluster table: a slot pvgpu does not answer");
}

#define CLUSTER_SLOTS	17
void *pvgpu_cluster_table[CLUSTER_SLOTS] = {
	[0] = SIZE_OF(CLUSTER_SLOTS),
	[1] = (void *)cl_set_dim,
	[2] = (void *)cl_set_policy,
	[3] = (void *)cl_set_non_portable,
	[5] = (void *)cl_get_dim,
	[6] = (void *)cl_get_policy,
	[7] = (void *)cl_get_non_portable,
	[8] = (void *)cl_launch_supported,
	[10] = (void *)cl_max_active,
	[12] = (void *)cl_must_be_set,
};

/* ---- tools module --------------------------------------------------- */

static CUresult tm_unknown(void)
{
	return pvgpu_cuda_unsupported("tools module table: a slot pvgpu does not answer");
}

/*
 * Slot 7, as cuFFT calls it after each cuModuleLoadData: the module's
 * kernels, one callback(userdata, CUfunction) each; the driver returns how
 * many (1 for cuFFT's one-kernel modules, measured on the H100), and cuFFT
 * takes the function the callback stored.  A failure returns 0: no kernels.
 */
static int tm_module_functions(CUcontext ctx, CUmodule mod,
			       void (*cb)(void *, CUfunction), void *userdata)
{
	CUfunction fs[64];
	unsigned int n = 0;

	(void)ctx;
	if (!cb || cu_module_functions(mod, fs, 64, &n) || n > 64)
		return 0;
	for (unsigned int i = 0; i < n; i++)
		cb(userdata, fs[i]);
	return (int)n;
}

#define TOOLS_MODULE_SLOTS	99	/* driver 580's length */
void *pvgpu_tools_module[TOOLS_MODULE_SLOTS] = {
	[0] = SIZE_OF(TOOLS_MODULE_SLOTS), [7] = (void *)tm_module_functions,
};

/* Fills the slots nobody has seen called. */
void pvgpu_tools_tables_fill(void)
{
	for (size_t s = 1; s < TOOLS_CONTEXT_SLOTS; s++)
		if (!pvgpu_tools_context[s])
			pvgpu_tools_context[s] = (void *)tc_unknown;
	for (size_t s = 1; s < CLUSTER_SLOTS; s++)
		if (!pvgpu_cluster_table[s])
			pvgpu_cluster_table[s] = (void *)cl_unknown;
	for (size_t s = 1; s < TOOLS_MODULE_SLOTS; s++)
		if (!pvgpu_tools_module[s])
			pvgpu_tools_module[s] = (void *)tm_unknown;
}
