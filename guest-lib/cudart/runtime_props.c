/*
 * runtime_props.c - cudaGetDeviceProperties and cudaDeviceGetAttribute.
 *
 * A device's attributes come over the wire once, in one
 * device_get_attributes call carrying every id the CUDA 13 cudaDeviceProp
 * needs, and are cached per device: attributes do not change while a
 * process runs.  cudaDeviceAttr and CUdevice_attribute share their values.
 */
#include <stddef.h>
#include <string.h>

#include "pvgpu_guest.h"
#include "pvgpu_proto.h"
#include "runtime.h"

enum field_type {
	FIELD_NONE,		/* cached only: no cudaDeviceProp field */
	FIELD_INT,		/* int or unsigned int */
	FIELD_SIZE,		/* size_t */
};

struct prop_attr {
	int attr;
	enum field_type type;
	size_t offset;
};

#define P_INT(attr, field) \
	{ attr, FIELD_INT, offsetof(struct cudaDeviceProp, field) }
#define P_SIZE(attr, field) \
	{ attr, FIELD_SIZE, offsetof(struct cudaDeviceProp, field) }
#define P_NONE(attr) \
	{ attr, FIELD_NONE, 0 }

/* CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS: the runtime enum has no name. */
#define ATTR_UNIFIED_FUNCTION_POINTERS	129

static const struct prop_attr prop_attrs[] = {
	P_SIZE(cudaDevAttrMaxSharedMemoryPerBlock, sharedMemPerBlock),
	P_INT(cudaDevAttrMaxRegistersPerBlock, regsPerBlock),
	P_INT(cudaDevAttrWarpSize, warpSize),
	P_SIZE(cudaDevAttrMaxPitch, memPitch),
	P_INT(cudaDevAttrMaxThreadsPerBlock, maxThreadsPerBlock),
	P_INT(cudaDevAttrMaxBlockDimX, maxThreadsDim[0]),
	P_INT(cudaDevAttrMaxBlockDimY, maxThreadsDim[1]),
	P_INT(cudaDevAttrMaxBlockDimZ, maxThreadsDim[2]),
	P_INT(cudaDevAttrMaxGridDimX, maxGridSize[0]),
	P_INT(cudaDevAttrMaxGridDimY, maxGridSize[1]),
	P_INT(cudaDevAttrMaxGridDimZ, maxGridSize[2]),
	P_SIZE(cudaDevAttrTotalConstantMemory, totalConstMem),
	P_INT(cudaDevAttrComputeCapabilityMajor, major),
	P_INT(cudaDevAttrComputeCapabilityMinor, minor),
	P_SIZE(cudaDevAttrTextureAlignment, textureAlignment),
	P_SIZE(cudaDevAttrTexturePitchAlignment, texturePitchAlignment),
	P_INT(cudaDevAttrMultiProcessorCount, multiProcessorCount),
	P_INT(cudaDevAttrIntegrated, integrated),
	P_INT(cudaDevAttrCanMapHostMemory, canMapHostMemory),
	P_INT(cudaDevAttrMaxTexture1DWidth, maxTexture1D),
	P_INT(cudaDevAttrMaxTexture1DMipmappedWidth, maxTexture1DMipmap),
	P_INT(cudaDevAttrMaxTexture2DWidth, maxTexture2D[0]),
	P_INT(cudaDevAttrMaxTexture2DHeight, maxTexture2D[1]),
	P_INT(cudaDevAttrMaxTexture2DMipmappedWidth, maxTexture2DMipmap[0]),
	P_INT(cudaDevAttrMaxTexture2DMipmappedHeight, maxTexture2DMipmap[1]),
	P_INT(cudaDevAttrMaxTexture2DLinearWidth, maxTexture2DLinear[0]),
	P_INT(cudaDevAttrMaxTexture2DLinearHeight, maxTexture2DLinear[1]),
	P_INT(cudaDevAttrMaxTexture2DLinearPitch, maxTexture2DLinear[2]),
	P_INT(cudaDevAttrMaxTexture2DGatherWidth, maxTexture2DGather[0]),
	P_INT(cudaDevAttrMaxTexture2DGatherHeight, maxTexture2DGather[1]),
	P_INT(cudaDevAttrMaxTexture3DWidth, maxTexture3D[0]),
	P_INT(cudaDevAttrMaxTexture3DHeight, maxTexture3D[1]),
	P_INT(cudaDevAttrMaxTexture3DDepth, maxTexture3D[2]),
	P_INT(cudaDevAttrMaxTexture3DWidthAlt, maxTexture3DAlt[0]),
	P_INT(cudaDevAttrMaxTexture3DHeightAlt, maxTexture3DAlt[1]),
	P_INT(cudaDevAttrMaxTexture3DDepthAlt, maxTexture3DAlt[2]),
	P_INT(cudaDevAttrMaxTextureCubemapWidth, maxTextureCubemap),
	P_INT(cudaDevAttrMaxTexture1DLayeredWidth, maxTexture1DLayered[0]),
	P_INT(cudaDevAttrMaxTexture1DLayeredLayers, maxTexture1DLayered[1]),
	P_INT(cudaDevAttrMaxTexture2DLayeredWidth, maxTexture2DLayered[0]),
	P_INT(cudaDevAttrMaxTexture2DLayeredHeight, maxTexture2DLayered[1]),
	P_INT(cudaDevAttrMaxTexture2DLayeredLayers, maxTexture2DLayered[2]),
	P_INT(cudaDevAttrMaxTextureCubemapLayeredWidth, maxTextureCubemapLayered[0]),
	P_INT(cudaDevAttrMaxTextureCubemapLayeredLayers, maxTextureCubemapLayered[1]),
	P_INT(cudaDevAttrMaxSurface1DWidth, maxSurface1D),
	P_INT(cudaDevAttrMaxSurface2DWidth, maxSurface2D[0]),
	P_INT(cudaDevAttrMaxSurface2DHeight, maxSurface2D[1]),
	P_INT(cudaDevAttrMaxSurface3DWidth, maxSurface3D[0]),
	P_INT(cudaDevAttrMaxSurface3DHeight, maxSurface3D[1]),
	P_INT(cudaDevAttrMaxSurface3DDepth, maxSurface3D[2]),
	P_INT(cudaDevAttrMaxSurface1DLayeredWidth, maxSurface1DLayered[0]),
	P_INT(cudaDevAttrMaxSurface1DLayeredLayers, maxSurface1DLayered[1]),
	P_INT(cudaDevAttrMaxSurface2DLayeredWidth, maxSurface2DLayered[0]),
	P_INT(cudaDevAttrMaxSurface2DLayeredHeight, maxSurface2DLayered[1]),
	P_INT(cudaDevAttrMaxSurface2DLayeredLayers, maxSurface2DLayered[2]),
	P_INT(cudaDevAttrMaxSurfaceCubemapWidth, maxSurfaceCubemap),
	P_INT(cudaDevAttrMaxSurfaceCubemapLayeredWidth, maxSurfaceCubemapLayered[0]),
	P_INT(cudaDevAttrMaxSurfaceCubemapLayeredLayers, maxSurfaceCubemapLayered[1]),
	P_SIZE(cudaDevAttrSurfaceAlignment, surfaceAlignment),
	P_INT(cudaDevAttrConcurrentKernels, concurrentKernels),
	P_INT(cudaDevAttrEccEnabled, ECCEnabled),
	P_INT(cudaDevAttrPciBusId, pciBusID),
	P_INT(cudaDevAttrPciDeviceId, pciDeviceID),
	P_INT(cudaDevAttrPciDomainId, pciDomainID),
	P_INT(cudaDevAttrTccDriver, tccDriver),
	P_INT(cudaDevAttrAsyncEngineCount, asyncEngineCount),
	P_INT(cudaDevAttrUnifiedAddressing, unifiedAddressing),
	P_INT(cudaDevAttrGlobalMemoryBusWidth, memoryBusWidth),
	P_INT(cudaDevAttrL2CacheSize, l2CacheSize),
	P_INT(cudaDevAttrMaxPersistingL2CacheSize, persistingL2CacheMaxSize),
	P_INT(cudaDevAttrMaxThreadsPerMultiProcessor, maxThreadsPerMultiProcessor),
	P_INT(cudaDevAttrStreamPrioritiesSupported, streamPrioritiesSupported),
	P_INT(cudaDevAttrGlobalL1CacheSupported, globalL1CacheSupported),
	P_INT(cudaDevAttrLocalL1CacheSupported, localL1CacheSupported),
	P_SIZE(cudaDevAttrMaxSharedMemoryPerMultiprocessor, sharedMemPerMultiprocessor),
	P_INT(cudaDevAttrMaxRegistersPerMultiprocessor, regsPerMultiprocessor),
	P_INT(cudaDevAttrManagedMemory, managedMemory),
	P_INT(cudaDevAttrIsMultiGpuBoard, isMultiGpuBoard),
	P_INT(cudaDevAttrMultiGpuBoardGroupID, multiGpuBoardGroupID),
	P_INT(cudaDevAttrHostNativeAtomicSupported, hostNativeAtomicSupported),
	P_INT(cudaDevAttrPageableMemoryAccess, pageableMemoryAccess),
	P_INT(cudaDevAttrConcurrentManagedAccess, concurrentManagedAccess),
	P_INT(cudaDevAttrComputePreemptionSupported, computePreemptionSupported),
	P_INT(cudaDevAttrCanUseHostPointerForRegisteredMem, canUseHostPointerForRegisteredMem),
	P_INT(cudaDevAttrCooperativeLaunch, cooperativeLaunch),
	P_SIZE(cudaDevAttrMaxSharedMemoryPerBlockOptin, sharedMemPerBlockOptin),
	P_INT(cudaDevAttrPageableMemoryAccessUsesHostPageTables, pageableMemoryAccessUsesHostPageTables),
	P_INT(cudaDevAttrDirectManagedMemAccessFromHost, directManagedMemAccessFromHost),
	P_INT(cudaDevAttrMaxBlocksPerMultiprocessor, maxBlocksPerMultiProcessor),
	P_INT(cudaDevAttrMaxAccessPolicyWindowSize, accessPolicyMaxWindowSize),
	P_SIZE(cudaDevAttrReservedSharedMemoryPerBlock, reservedSharedMemPerBlock),
	P_INT(cudaDevAttrHostRegisterSupported, hostRegisterSupported),
	P_INT(cudaDevAttrSparseCudaArraySupported, sparseCudaArraySupported),
	P_INT(cudaDevAttrHostRegisterReadOnlySupported, hostRegisterReadOnlySupported),
	P_INT(cudaDevAttrTimelineSemaphoreInteropSupported, timelineSemaphoreInteropSupported),
	P_INT(cudaDevAttrMemoryPoolsSupported, memoryPoolsSupported),
	P_INT(cudaDevAttrGPUDirectRDMASupported, gpuDirectRDMASupported),
	P_INT(cudaDevAttrGPUDirectRDMAFlushWritesOptions, gpuDirectRDMAFlushWritesOptions),
	P_INT(cudaDevAttrGPUDirectRDMAWritesOrdering, gpuDirectRDMAWritesOrdering),
	P_INT(cudaDevAttrMemoryPoolSupportedHandleTypes, memoryPoolSupportedHandleTypes),
	P_INT(cudaDevAttrDeferredMappingCudaArraySupported, deferredMappingCudaArraySupported),
	P_INT(cudaDevAttrIpcEventSupport, ipcEventSupported),
	P_INT(cudaDevAttrClusterLaunch, clusterLaunch),
	P_INT(ATTR_UNIFIED_FUNCTION_POINTERS, unifiedFunctionPointers),
	P_INT(cudaDevAttrNumaConfig, deviceNumaConfig),
	P_INT(cudaDevAttrNumaId, deviceNumaId),
	P_INT(cudaDevAttrMpsEnabled, mpsEnabled),
	P_INT(cudaDevAttrHostNumaId, hostNumaId),
	P_INT(cudaDevAttrGpuPciDeviceId, gpuPciDeviceID),
	P_INT(cudaDevAttrGpuPciSubsystemId, gpuPciSubsystemID),
	P_INT(cudaDevAttrHostNumaMultinodeIpcSupported, hostNumaMultinodeIpcSupported),
	/* Often asked for, and no longer in cudaDeviceProp: same trip. */
	P_NONE(cudaDevAttrClockRate),
	P_NONE(cudaDevAttrGpuOverlap),
	P_NONE(cudaDevAttrKernelExecTimeout),
	P_NONE(cudaDevAttrComputeMode),
	P_NONE(cudaDevAttrMemoryClockRate),
};

#define N_PROP_ATTRS	(sizeof(prop_attrs) / sizeof(prop_attrs[0]))

_Static_assert(N_PROP_ATTRS <= sizeof(((struct pvgpu_device_get_attributes_req *)0)->attrs) /
	       sizeof(int32_t), "device_get_attributes carries at most 256 ids");

/* One attribute over the wire; cached when the backend answers. */
static int32_t fetch_attr(struct pvgpu_op *op, int attr, int32_t *value)
{
	struct pvgpu_device_get_attributes_req req = {
		.device = op->dev->remote,
		.attrs_count = 1,
	};
	struct pvgpu_device_get_attributes_rep rep = { 0 };
	int32_t st;

	req.attrs[0] = attr;
	st = pvgpu_call_device_get_attributes(op->client, &req, &rep);
	if (!st && rep.values_count != 1)
		st = PVGPU_CLIENT_EPROTO;
	if (st)
		return st;
	op->dev->attr_value[attr] = rep.values[0];
	op->dev->attr_known[attr] = 1;
	*value = rep.values[0];
	return 0;
}

/*
 * Every attribute of prop_attrs in one call.  Should a backend refuse the
 * set (a driver that lacks one id), ask one at a time so the others still
 * arrive; the missing ones stay unknown.
 */
static int32_t load_attrs(struct pvgpu_op *op)
{
	struct pvgpu_device *dev = op->dev;
	struct pvgpu_device_get_attributes_req req = {
		.device = dev->remote,
		.attrs_count = N_PROP_ATTRS,
	};
	struct pvgpu_device_get_attributes_rep rep = { 0 };
	int32_t st, value;

	if (dev->attrs_loaded)
		return 0;
	for (size_t i = 0; i < N_PROP_ATTRS; i++)
		req.attrs[i] = prop_attrs[i].attr;
	st = pvgpu_call_device_get_attributes(op->client, &req, &rep);
	if (rep.values_count == N_PROP_ATTRS) {
		/* Answered (st may still carry an earlier async error). */
		for (size_t i = 0; i < N_PROP_ATTRS; i++) {
			dev->attr_value[prop_attrs[i].attr] = rep.values[i];
			dev->attr_known[prop_attrs[i].attr] = 1;
		}
	} else if (!st) {
		return PVGPU_CLIENT_EPROTO;
	} else if (st > 0) {
		for (size_t i = 0; i < N_PROP_ATTRS; i++)
			if (fetch_attr(op, prop_attrs[i].attr, &value) < 0)
				return PVGPU_CLIENT_EIO;
		st = 0;
	} else {
		return st;
	}
	dev->attrs_loaded = 1;
	return st;
}

static int32_t load_props(struct pvgpu_op *op)
{
	struct pvgpu_device *dev = op->dev;
	struct cudaDeviceProp *p = &dev->props;
	struct pvgpu_device_get_name_req name_req = { .device = dev->remote };
	struct pvgpu_device_get_name_rep name_rep = { 0 };
	struct pvgpu_device_get_uuid_req uuid_req = { .device = dev->remote };
	struct pvgpu_device_get_uuid_rep uuid_rep = { 0 };
	struct pvgpu_device_total_mem_req mem_req = { .device = dev->remote };
	struct pvgpu_device_total_mem_rep mem_rep = { 0 };
	int32_t st;

	if (dev->props_valid)
		return 0;
	st = load_attrs(op);
	if (!st)
		st = pvgpu_call_device_get_name(op->client, &name_req, &name_rep);
	if (!st)
		st = pvgpu_call_device_get_uuid(op->client, &uuid_req, &uuid_rep);
	if (!st)
		st = pvgpu_call_device_total_mem(op->client, &mem_req, &mem_rep);
	if (st)
		return st;

	memset(p, 0, sizeof(*p));
	/* name_rep.name is NUL-terminated and at most 256 bytes long. */
	memcpy(p->name, name_rep.name,
	       name_rep.name_len < sizeof(p->name) ? name_rep.name_len : sizeof(p->name) - 1);
	memcpy(p->uuid.bytes, uuid_rep.uuid,
	       uuid_rep.uuid_len < sizeof(p->uuid.bytes) ? uuid_rep.uuid_len : sizeof(p->uuid.bytes));
	p->totalGlobalMem = (size_t)mem_rep.bytes;
	for (size_t i = 0; i < N_PROP_ATTRS; i++) {
		const struct prop_attr *pa = &prop_attrs[i];
		char *field = (char *)p + pa->offset;
		int32_t v = dev->attr_value[pa->attr];

		if (pa->type == FIELD_INT) {
			memcpy(field, &v, sizeof(v));
		} else if (pa->type == FIELD_SIZE) {
			size_t s = (size_t)(uint32_t)v;

			memcpy(field, &s, sizeof(s));
		}
	}
	dev->props_valid = 1;
	return 0;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *prop, int device)
{
	struct pvgpu_op op;
	cudaError_t err;
	int32_t st;

	if (!prop)
		return pvgpu_record(cudaErrorInvalidValue);
	err = pvgpu_op_begin(&op, device, 0);
	if (err)
		return pvgpu_record(err);
	st = load_props(&op);
	if (!st)
		*prop = op.dev->props;
	pvgpu_op_end(&op);
	return pvgpu_record(pvgpu_error_from_status(st));
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device)
{
	struct pvgpu_op op;
	cudaError_t err;
	int32_t st, v = 0;

	if (!value)
		return pvgpu_record(cudaErrorInvalidValue);
	err = pvgpu_op_begin(&op, device, 0);
	if (err)
		return pvgpu_record(err);
	if ((int)attr <= 0 || (int)attr >= PVGPU_ATTR_SLOTS) {
		pvgpu_op_end(&op);
		return pvgpu_record(cudaErrorInvalidValue);
	}
	st = load_attrs(&op);
	if (!st) {
		if (op.dev->attr_known[attr])
			v = op.dev->attr_value[attr];
		else
			st = fetch_attr(&op, (int)attr, &v);
	}
	if (!st)
		*value = v;
	pvgpu_op_end(&op);
	return pvgpu_record(pvgpu_error_from_status(st));
}

int32_t pvgpu_device_attr(struct pvgpu_op *op, int attr, int32_t *value,
			  int32_t *deferred)
{
	int32_t st;

	if (attr <= 0 || attr >= PVGPU_ATTR_SLOTS)
		return (int32_t)cudaErrorInvalidValue;	/* CUDA_ERROR_INVALID_VALUE too */
	st = load_attrs(op);
	if (op->dev->attr_known[attr]) {
		/* Answered: st can only be an earlier async error surfacing. */
		if (st && !*deferred)
			*deferred = st;
		*value = op->dev->attr_value[attr];
		return 0;
	}
	if (st)
		return st;
	return fetch_attr(op, attr, value);
}
