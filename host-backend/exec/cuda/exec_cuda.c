/*
 * exec_cuda.c - the "cuda" executor: the real GPU through the CUDA driver
 * API.
 *
 * libcuda.so.1 is opened at run time so that pvgpud builds and starts on
 * machines without an NVIDIA driver; <cuda.h> is used for types and enums
 * only.  Entry points come from cuGetProcAddress, each asked for the ABI
 * version whose signature this file was written against (some base names
 * change signature between versions: cuCtxSynchronize takes a context from
 * 13.0 on), with dlsym of the exported versioned names as a fallback.
 *
 * One worker process serves one session, so each device's primary context
 * is private to the session.  Every handle passed in is checked against
 * tables kept here before the driver sees it: the driver dereferences its
 * handles, and a stale or forged one must fail, not crash the worker.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <limits.h>

#include <cuda.h>

#include "executor.h"
#include "log.h"
#include "pvgpu_generic.h"

#define CUDA_LIB		"libcuda.so.1"
#define CUDA_MAX_PARAMS		32768	/* parameter space is under 32 KiB */
#define CUDA_STACK_PARAMS	64

_Static_assert(sizeof(void (*)(void)) == sizeof(void *),
	       "function pointers must fit in a void * (POSIX dlsym)");

/* The driver entry points this executor calls, with this file's ABI. */
struct cuda_api {
	CUresult (CUDAAPI *get_error_name)(CUresult, const char **);
	CUresult (CUDAAPI *get_error_string)(CUresult, const char **);
	CUresult (CUDAAPI *init)(unsigned int);
	CUresult (CUDAAPI *driver_get_version)(int *);
	CUresult (CUDAAPI *device_get)(CUdevice *, int);
	CUresult (CUDAAPI *device_get_count)(int *);
	CUresult (CUDAAPI *device_get_attribute)(int *, CUdevice_attribute,
						 CUdevice);
	CUresult (CUDAAPI *device_get_name)(char *, int, CUdevice);
	CUresult (CUDAAPI *device_get_uuid)(CUuuid *, CUdevice);
	CUresult (CUDAAPI *device_total_mem)(size_t *, CUdevice);
	CUresult (CUDAAPI *primary_ctx_retain)(CUcontext *, CUdevice);
	CUresult (CUDAAPI *primary_ctx_release)(CUdevice);
	CUresult (CUDAAPI *ctx_set_current)(CUcontext);
	/* Only to measure what a context takes (object_bytes). */
	CUresult (CUDAAPI *ctx_create)(CUcontext *, unsigned int, CUdevice);
	CUresult (CUDAAPI *ctx_destroy)(CUcontext);
	CUresult (CUDAAPI *ctx_synchronize)(void);
	CUresult (CUDAAPI *mem_alloc)(CUdeviceptr *, size_t);
	CUresult (CUDAAPI *mem_free)(CUdeviceptr);
	CUresult (CUDAAPI *mem_get_info)(size_t *, size_t *);
	CUresult (CUDAAPI *mem_host_alloc)(void **, size_t, unsigned int);
	CUresult (CUDAAPI *mem_free_host)(void *);
	CUresult (CUDAAPI *mem_host_register)(void *, size_t, unsigned int);
	CUresult (CUDAAPI *mem_host_unregister)(void *);
	CUresult (CUDAAPI *memcpy_htod)(CUdeviceptr, const void *, size_t);
	CUresult (CUDAAPI *memcpy_dtoh)(void *, CUdeviceptr, size_t);
	CUresult (CUDAAPI *memcpy_htod_async)(CUdeviceptr, const void *, size_t,
					      CUstream);
	CUresult (CUDAAPI *memcpy_dtoh_async)(void *, CUdeviceptr, size_t,
					      CUstream);
	CUresult (CUDAAPI *memcpy_dtod_async)(CUdeviceptr, CUdeviceptr, size_t,
					      CUstream);
	CUresult (CUDAAPI *memset_d8_async)(CUdeviceptr, unsigned char, size_t,
					    CUstream);
	CUresult (CUDAAPI *memset_d16_async)(CUdeviceptr, unsigned short,
					     size_t, CUstream);
	CUresult (CUDAAPI *memset_d32_async)(CUdeviceptr, unsigned int, size_t,
					     CUstream);
	CUresult (CUDAAPI *stream_create_with_priority)(CUstream *,
							unsigned int, int);
	CUresult (CUDAAPI *stream_destroy)(CUstream);
	CUresult (CUDAAPI *stream_synchronize)(CUstream);
	CUresult (CUDAAPI *event_destroy)(CUevent);
	CUresult (CUDAAPI *module_load_data)(CUmodule *, const void *);
	CUresult (CUDAAPI *module_unload)(CUmodule);
	CUresult (CUDAAPI *module_function_count)(unsigned int *, CUmodule);
	CUresult (CUDAAPI *module_enum_functions)(CUfunction *, unsigned int, CUmodule);
	CUresult (CUDAAPI *func_get_name)(const char **, CUfunction);
	CUresult (CUDAAPI *module_get_function)(CUfunction *, CUmodule,
						const char *);
	CUresult (CUDAAPI *module_get_global)(CUdeviceptr *, size_t *, CUmodule,
					      const char *);
	CUresult (CUDAAPI *func_get_param_info)(CUfunction, size_t, size_t *,
						size_t *);
	CUresult (CUDAAPI *func_get_attribute)(int *, CUfunction_attribute,
					       CUfunction);
	CUresult (CUDAAPI *func_set_attribute)(CUfunction, CUfunction_attribute,
					       int);
	CUresult (CUDAAPI *launch_kernel)(CUfunction, unsigned int,
					  unsigned int, unsigned int,
					  unsigned int, unsigned int,
					  unsigned int, unsigned int, CUstream,
					  void **, void **);
	CUresult (CUDAAPI *launch_kernel_ex)(const CUlaunchConfig *, CUfunction,
					     void **, void **);
	CUresult (CUDAAPI *array_create)(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *);
	CUresult (CUDAAPI *array_destroy)(CUarray);
	CUresult (CUDAAPI *memcpy_3d_async)(const CUDA_MEMCPY3D *, CUstream);
	CUresult (CUDAAPI *tex_create)(CUtexObject *, const CUDA_RESOURCE_DESC *,
				       const CUDA_TEXTURE_DESC *,
				       const CUDA_RESOURCE_VIEW_DESC *);
	CUresult (CUDAAPI *tex_destroy)(CUtexObject);
	CUresult (CUDAAPI *surf_create)(CUsurfObject *, const CUDA_RESOURCE_DESC *);
	CUresult (CUDAAPI *surf_destroy)(CUsurfObject);
	CUresult (CUDAAPI *tensor_map_tiled)(CUtensorMap *, CUtensorMapDataType, cuuint32_t,
					     void *, const cuuint64_t *, const cuuint64_t *,
					     const cuuint32_t *, const cuuint32_t *,
					     CUtensorMapInterleave, CUtensorMapSwizzle,
					     CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
	CUresult (CUDAAPI *tensor_map_im2col)(CUtensorMap *, CUtensorMapDataType, cuuint32_t,
					      void *, const cuuint64_t *, const cuuint64_t *,
					      const int *, const int *, cuuint32_t, cuuint32_t,
					      const cuuint32_t *, CUtensorMapInterleave,
					      CUtensorMapSwizzle, CUtensorMapL2promotion,
					      CUtensorMapFloatOOBfill);
	CUresult (CUDAAPI *available_dynamic_smem)(size_t *, CUfunction, int, int);
	CUresult (CUDAAPI *max_active_clusters)(int *, CUfunction, const CUlaunchConfig *);
	CUresult (CUDAAPI *occupancy_max_blocks)(int *, CUfunction, int, size_t,
						 unsigned int);
	CUresult (CUDAAPI *device_can_access_peer)(int *, CUdevice, CUdevice);
	CUresult (CUDAAPI *device_get_p2p_attribute)(int *,
						     CUdevice_P2PAttribute,
						     CUdevice, CUdevice);
	CUresult (CUDAAPI *ctx_enable_peer_access)(CUcontext, unsigned int);
	CUresult (CUDAAPI *ctx_disable_peer_access)(CUcontext);
	CUresult (CUDAAPI *memcpy_peer)(CUdeviceptr, CUcontext, CUdeviceptr,
					CUcontext, size_t);
	CUresult (CUDAAPI *memcpy_peer_async)(CUdeviceptr, CUcontext,
					      CUdeviceptr, CUcontext, size_t,
					      CUstream);	CUresult (CUDAAPI *graph_add_kernel_node)(CUgraphNode *, CUgraph,
						  const CUgraphNode *, size_t,
						  const CUDA_KERNEL_NODE_PARAMS *);
	CUresult (CUDAAPI *graph_add_memcpy_node)(CUgraphNode *, CUgraph,
						  const CUgraphNode *, size_t,
						  const CUDA_MEMCPY3D *, CUcontext);
	CUresult (CUDAAPI *graph_add_memset_node)(CUgraphNode *, CUgraph,
						  const CUgraphNode *, size_t,
						  const CUDA_MEMSET_NODE_PARAMS *,
						  CUcontext);
	CUresult (CUDAAPI *graph_add_empty_node)(CUgraphNode *, CUgraph,
						 const CUgraphNode *, size_t);
	CUresult (CUDAAPI *graph_kernel_node_set)(CUgraphNode,
						  const CUDA_KERNEL_NODE_PARAMS *);
	CUresult (CUDAAPI *graph_exec_kernel_node_set)(CUgraphExec, CUgraphNode,
						       const CUDA_KERNEL_NODE_PARAMS *);
	CUresult (CUDAAPI *graph_add_deps)(CUgraph, const CUgraphNode *,
					   const CUgraphNode *,
					   const CUgraphEdgeData *, size_t);
	CUresult (CUDAAPI *graph_destroy_node)(CUgraphNode);
	CUresult (CUDAAPI *graph_get_nodes)(CUgraph, CUgraphNode *, size_t *);
	CUresult (CUDAAPI *graph_node_get_type)(CUgraphNode, CUgraphNodeType *);
	CUresult (CUDAAPI *graph_exec_update)(CUgraphExec, CUgraph,
					      CUgraphExecUpdateResultInfo *);
	CUresult (CUDAAPI *stream_capture_info)(CUstream, CUstreamCaptureStatus *,
						cuuint64_t *, CUgraph *,
						const CUgraphNode **,
						const CUgraphEdgeData **, size_t *);
	CUresult (CUDAAPI *stream_capture_deps)(CUstream, CUgraphNode *,
						const CUgraphEdgeData *, size_t,
						unsigned int);
	CUresult (CUDAAPI *graph_add_mem_alloc_node)(CUgraphNode *, CUgraph,
						     const CUgraphNode *, size_t,
						     CUDA_MEM_ALLOC_NODE_PARAMS *);
	CUresult (CUDAAPI *graph_add_mem_free_node)(CUgraphNode *, CUgraph,
						    const CUgraphNode *, size_t,
						    CUdeviceptr);
	CUresult (CUDAAPI *mem_alloc_async)(CUdeviceptr *, size_t, CUstream);
	CUresult (CUDAAPI *mem_free_async)(CUdeviceptr, CUstream);
	CUresult (CUDAAPI *graph_cond_handle_create)(CUgraphConditionalHandle *, CUgraph,
						     CUcontext, unsigned int, unsigned int);
	CUresult (CUDAAPI *graph_add_node)(CUgraphNode *, CUgraph, const CUgraphNode *,
					   const CUgraphEdgeData *, size_t,
					   CUgraphNodeParams *);
	CUresult (CUDAAPI *stream_capture_to_graph)(CUstream, CUgraph,
						    const CUgraphNode *,
						    const CUgraphEdgeData *,
						    size_t, CUstreamCaptureMode);
	CUresult (CUDAAPI *graph_node_find_in_clone)(CUgraphNode *, CUgraphNode,
						     CUgraph);
	CUresult (CUDAAPI *graph_memcpy_node_set)(CUgraphNode,
						  const CUDA_MEMCPY3D *);
	/* Runs of identical launches (launch_run). */
	CUresult (CUDAAPI *graph_create)(CUgraph *, unsigned int);
	CUresult (CUDAAPI *graph_destroy)(CUgraph);
	CUresult (CUDAAPI *graph_instantiate)(CUgraphExec *, CUgraph,
					      unsigned long long);
	CUresult (CUDAAPI *graph_launch)(CUgraphExec, CUstream);
	CUresult (CUDAAPI *graph_exec_destroy)(CUgraphExec);
};

struct cuda_sym {
	const char *name;	/* base name, for cuGetProcAddress */
	int version;		/* ABI version matching struct cuda_api */
	const char *exported[2]; /* dlsym fallbacks, best first */
	size_t offset;
	bool optional;		/* the executor copes without it */
};

#define SYM(field, base, ver, ex1, ex2, opt) \
	{ base, ver, { ex1, ex2 }, offsetof(struct cuda_api, field), opt }

/* Versions are those of cudaTypedefs.h's PFN_<name>_v<version>. */
static const struct cuda_sym cuda_syms[] = {
	SYM(get_error_name, "cuGetErrorName", 6000, "cuGetErrorName", NULL, true),
	SYM(get_error_string, "cuGetErrorString", 6000, "cuGetErrorString", NULL, true),
	SYM(init, "cuInit", 2000, "cuInit", NULL, false),
	SYM(driver_get_version, "cuDriverGetVersion", 2020, "cuDriverGetVersion", NULL, false),
	SYM(device_get, "cuDeviceGet", 2000, "cuDeviceGet", NULL, false),
	SYM(device_get_count, "cuDeviceGetCount", 2000, "cuDeviceGetCount", NULL, false),
	SYM(device_get_attribute, "cuDeviceGetAttribute", 2000, "cuDeviceGetAttribute", NULL, false),
	SYM(device_get_name, "cuDeviceGetName", 2000, "cuDeviceGetName", NULL, false),
	SYM(device_get_uuid, "cuDeviceGetUuid", 11040, "cuDeviceGetUuid_v2", "cuDeviceGetUuid", false),
	SYM(device_total_mem, "cuDeviceTotalMem", 3020, "cuDeviceTotalMem_v2", NULL, false),
	SYM(primary_ctx_retain, "cuDevicePrimaryCtxRetain", 7000, "cuDevicePrimaryCtxRetain", NULL, false),
	SYM(primary_ctx_release, "cuDevicePrimaryCtxRelease", 11000, "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRelease", false),
	SYM(ctx_set_current, "cuCtxSetCurrent", 4000, "cuCtxSetCurrent", NULL, false),
	SYM(ctx_create, "cuCtxCreate", 3020, "cuCtxCreate_v2", NULL, true),
	SYM(ctx_destroy, "cuCtxDestroy", 4000, "cuCtxDestroy_v2", NULL, true),
	/* 2000, not 13000: the 13.0 cuCtxSynchronize takes a CUcontext */
	SYM(ctx_synchronize, "cuCtxSynchronize", 2000, "cuCtxSynchronize", NULL, false),
	SYM(mem_alloc, "cuMemAlloc", 3020, "cuMemAlloc_v2", NULL, false),
	SYM(mem_free, "cuMemFree", 3020, "cuMemFree_v2", NULL, false),
	SYM(mem_get_info, "cuMemGetInfo", 3020, "cuMemGetInfo_v2", NULL, false),
	SYM(mem_host_alloc, "cuMemHostAlloc", 2020, "cuMemHostAlloc", NULL, false),
	SYM(mem_free_host, "cuMemFreeHost", 2000, "cuMemFreeHost", NULL, false),
	SYM(mem_host_register, "cuMemHostRegister", 6050, "cuMemHostRegister_v2", "cuMemHostRegister", false),
	SYM(mem_host_unregister, "cuMemHostUnregister", 4000, "cuMemHostUnregister", NULL, false),
	SYM(memcpy_htod, "cuMemcpyHtoD", 3020, "cuMemcpyHtoD_v2", NULL, true),
	SYM(memcpy_dtoh, "cuMemcpyDtoH", 3020, "cuMemcpyDtoH_v2", NULL, true),
	SYM(memcpy_htod_async, "cuMemcpyHtoDAsync", 3020, "cuMemcpyHtoDAsync_v2", NULL, false),
	SYM(memcpy_dtoh_async, "cuMemcpyDtoHAsync", 3020, "cuMemcpyDtoHAsync_v2", NULL, false),
	SYM(memcpy_dtod_async, "cuMemcpyDtoDAsync", 3020, "cuMemcpyDtoDAsync_v2", NULL, false),
	SYM(memset_d8_async, "cuMemsetD8Async", 3020, "cuMemsetD8Async", NULL, false),
	SYM(memset_d16_async, "cuMemsetD16Async", 3020, "cuMemsetD16Async", NULL, false),
	SYM(memset_d32_async, "cuMemsetD32Async", 3020, "cuMemsetD32Async", NULL, false),
	SYM(stream_create_with_priority, "cuStreamCreateWithPriority", 5050, "cuStreamCreateWithPriority", NULL, false),
	SYM(stream_destroy, "cuStreamDestroy", 4000, "cuStreamDestroy_v2", NULL, false),
	SYM(stream_synchronize, "cuStreamSynchronize", 2000, "cuStreamSynchronize", NULL, false),
	SYM(event_destroy, "cuEventDestroy", 4000, "cuEventDestroy_v2", NULL, false),
	SYM(module_load_data, "cuModuleLoadData", 2000, "cuModuleLoadData", NULL, false),
	SYM(module_unload, "cuModuleUnload", 2000, "cuModuleUnload", NULL, false),
	SYM(module_get_function, "cuModuleGetFunction", 2000, "cuModuleGetFunction", NULL, false),
	SYM(module_function_count, "cuModuleGetFunctionCount", 12040, "cuModuleGetFunctionCount", NULL, true),
	SYM(module_enum_functions, "cuModuleEnumerateFunctions", 12040, "cuModuleEnumerateFunctions", NULL, true),
	SYM(func_get_name, "cuFuncGetName", 12030, "cuFuncGetName", NULL, true),
	SYM(module_get_global, "cuModuleGetGlobal", 3020, "cuModuleGetGlobal_v2", NULL, false),
	SYM(func_get_param_info, "cuFuncGetParamInfo", 12040, "cuFuncGetParamInfo", NULL, true),
	SYM(func_get_attribute, "cuFuncGetAttribute", 2020, "cuFuncGetAttribute", NULL, false),
	SYM(func_set_attribute, "cuFuncSetAttribute", 9000, "cuFuncSetAttribute", NULL, false),
	SYM(launch_kernel, "cuLaunchKernel", 4000, "cuLaunchKernel", NULL, false),
	SYM(launch_kernel_ex, "cuLaunchKernelEx", 11060, "cuLaunchKernelEx", NULL, true),
	SYM(graph_create, "cuGraphCreate", 10000, "cuGraphCreate", NULL, true),
	SYM(graph_destroy, "cuGraphDestroy", 10000, "cuGraphDestroy", NULL, true),
	SYM(graph_instantiate, "cuGraphInstantiateWithFlags", 11040,
	    "cuGraphInstantiateWithFlags", NULL, true),
	SYM(graph_launch, "cuGraphLaunch", 10000, "cuGraphLaunch", NULL, true),
	SYM(graph_exec_destroy, "cuGraphExecDestroy", 10000, "cuGraphExecDestroy", NULL, true),
	SYM(array_create, "cuArray3DCreate", 3020, "cuArray3DCreate_v2", NULL, true),
	SYM(array_destroy, "cuArrayDestroy", 2000, "cuArrayDestroy", NULL, true),
	SYM(memcpy_3d_async, "cuMemcpy3DAsync", 3020, "cuMemcpy3DAsync_v2", NULL, true),
	SYM(tex_create, "cuTexObjectCreate", 5000, "cuTexObjectCreate", NULL, true),
	SYM(tex_destroy, "cuTexObjectDestroy", 5000, "cuTexObjectDestroy", NULL, true),
	SYM(surf_create, "cuSurfObjectCreate", 5000, "cuSurfObjectCreate", NULL, true),
	SYM(surf_destroy, "cuSurfObjectDestroy", 5000, "cuSurfObjectDestroy", NULL, true),
	SYM(tensor_map_tiled, "cuTensorMapEncodeTiled", 12000, "cuTensorMapEncodeTiled", NULL, true),
	SYM(tensor_map_im2col, "cuTensorMapEncodeIm2col", 12000, "cuTensorMapEncodeIm2col", NULL, true),
	SYM(max_active_clusters, "cuOccupancyMaxActiveClusters", 11070,
	    "cuOccupancyMaxActiveClusters", NULL, true),
	SYM(available_dynamic_smem, "cuOccupancyAvailableDynamicSMemPerBlock", 10020,
	    "cuOccupancyAvailableDynamicSMemPerBlock", NULL, true),
	SYM(occupancy_max_blocks, "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", 7000,
	    "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", NULL, false),
	SYM(device_can_access_peer, "cuDeviceCanAccessPeer", 4000, "cuDeviceCanAccessPeer", NULL, false),
	SYM(device_get_p2p_attribute, "cuDeviceGetP2PAttribute", 8000, "cuDeviceGetP2PAttribute", NULL, false),
	SYM(ctx_enable_peer_access, "cuCtxEnablePeerAccess", 4000, "cuCtxEnablePeerAccess", NULL, false),
	SYM(ctx_disable_peer_access, "cuCtxDisablePeerAccess", 4000, "cuCtxDisablePeerAccess", NULL, false),
	SYM(memcpy_peer, "cuMemcpyPeer", 4000, "cuMemcpyPeer", NULL, false),
	SYM(memcpy_peer_async, "cuMemcpyPeerAsync", 4000, "cuMemcpyPeerAsync", NULL, false),
	SYM(graph_add_kernel_node, "cuGraphAddKernelNode", 12000, "cuGraphAddKernelNode_v2", NULL, true),
	SYM(graph_add_memcpy_node, "cuGraphAddMemcpyNode", 10000, "cuGraphAddMemcpyNode", NULL, true),
	SYM(graph_add_memset_node, "cuGraphAddMemsetNode", 10000, "cuGraphAddMemsetNode", NULL, true),
	SYM(graph_add_empty_node, "cuGraphAddEmptyNode", 10000, "cuGraphAddEmptyNode", NULL, true),
	SYM(graph_kernel_node_set, "cuGraphKernelNodeSetParams", 12000, "cuGraphKernelNodeSetParams_v2", NULL, true),
	SYM(graph_exec_kernel_node_set, "cuGraphExecKernelNodeSetParams", 12000, "cuGraphExecKernelNodeSetParams_v2", NULL, true),
	SYM(graph_add_deps, "cuGraphAddDependencies", 12030, "cuGraphAddDependencies_v2", NULL, true),
	SYM(graph_destroy_node, "cuGraphDestroyNode", 10000, "cuGraphDestroyNode", NULL, true),
	SYM(graph_get_nodes, "cuGraphGetNodes", 10000, "cuGraphGetNodes", NULL, true),
	SYM(graph_node_get_type, "cuGraphNodeGetType", 10000, "cuGraphNodeGetType", NULL, true),
	SYM(graph_exec_update, "cuGraphExecUpdate", 12000, "cuGraphExecUpdate_v2", NULL, true),
	SYM(stream_capture_info, "cuStreamGetCaptureInfo", 12030, "cuStreamGetCaptureInfo_v3", NULL, true),
	SYM(stream_capture_deps, "cuStreamUpdateCaptureDependencies", 12030, "cuStreamUpdateCaptureDependencies_v2", NULL, true),
	SYM(graph_add_mem_alloc_node, "cuGraphAddMemAllocNode", 11040, "cuGraphAddMemAllocNode", NULL, true),
	SYM(graph_add_mem_free_node, "cuGraphAddMemFreeNode", 11040, "cuGraphAddMemFreeNode", NULL, true),
	SYM(mem_alloc_async, "cuMemAllocAsync", 11020, "cuMemAllocAsync", NULL, true),
	SYM(mem_free_async, "cuMemFreeAsync", 11020, "cuMemFreeAsync", NULL, true),
	SYM(graph_cond_handle_create, "cuGraphConditionalHandleCreate", 12030, "cuGraphConditionalHandleCreate", NULL, true),
	SYM(graph_add_node, "cuGraphAddNode", 12030, "cuGraphAddNode_v2", NULL, true),
	SYM(stream_capture_to_graph, "cuStreamBeginCaptureToGraph", 12030, "cuStreamBeginCaptureToGraph", NULL, true),
	SYM(graph_node_find_in_clone, "cuGraphNodeFindInClone", 10000, "cuGraphNodeFindInClone", NULL, true),
	SYM(graph_memcpy_node_set, "cuGraphMemcpyNodeSetParams", 10000, "cuGraphMemcpyNodeSetParams", NULL, true),
};

typedef CUresult (CUDAAPI *get_proc_address_fn)(const char *, void **, int,
						cuuint64_t,
						CUdriverProcAddressQueryResult *);

enum cuda_kind {
	CUDA_STREAM = 1,
	CUDA_EVENT,
	CUDA_MODULE,
	CUDA_FUNCTION,
	CUDA_ARRAY,
};

/* A driver handle this session owns. */
struct cuda_handle {
	uint64_t handle;
	enum cuda_kind kind;
	uint64_t ctx;			/* context it was made in */
	uint64_t module;		/* for a function: its module */
};

/*
 * Executable graphs kept for runs of identical launches: a program's
 * loops launch a few kernels over and over; each graph is
 * PVGPU_LAUNCH_RUN kernel nodes in a chain.
 */
#define CUDA_RUN_GRAPHS		8

/* A retained primary context. */
struct cuda_ctx {
	CUcontext ctx;
	CUdevice dev;
	unsigned int refs;		/* ctx_create calls not yet destroyed */
};

/* A texture or surface object, by the driver's value (kept apart from the
 * handles: its values are small integers, not pointers). */
struct cuda_obj {
	uint64_t obj;
	uint64_t ctx;
	bool surf;
};

struct cuda_host {
	void *p;
	uint64_t ctx;
	bool registered;		/* host_register, not host_alloc */
};

#define CUDA_MAX_VMM_EXPORTS	256
struct pvgpu_exec {
	void *lib;
	struct cuda_api api;
	int driver_version;
	bool probe;			/* the supervisor's probe: object_bytes */

	struct cuda_ctx *ctxs;
	size_t nctxs, ctxs_cap;
	uint64_t cur;			/* current context handle, 0 if none */

	/* Streams, events, modules, functions, sorted by handle. */
	struct cuda_handle *handles;
	size_t nhandles, handles_cap;

	struct cuda_host *hosts;
	size_t nhosts, hosts_cap;

	struct cuda_obj *objs;
	size_t nobjs, objs_cap;

	/* The generic driver call's entry points, looked up on first use;
	 * sets_kernels: it may change how kept run graphs' kernels run.
	 * One entry per id, so that a hot call touches one cache line. */
	struct cuda_generic {
		void *fp;
		bool tried, sets_kernels;
	} generic[PVGPU_GENERIC_MAX_ID + 1];

	/* Physical memory exported (cuda_vmm_export): the driver's
	 * descriptor of each, open for importers until the worker ends. */
	struct { uint64_t mem; int fd; } vmm_fds[CUDA_MAX_VMM_EXPORTS];
	unsigned int nvmm_fds;
	int vmm_import_said;	/* a guest may retry: said once per session */

	/* Runs of identical launches (launch_run). */
	struct cuda_run_graph {
		uint64_t ctx;		/* 0: a free entry */
		CUfunction f;
		CUstream stream;
		uint32_t grid[3], block[3], shared, params_size;
		uint8_t params[PVGPU_RUN_PARAMS_MAX];
		CUgraphExec exec;	/* NULL: seen once, not made yet */
		bool failed;		/* not made: launched one by one */
		uint64_t used;		/* run_clock at its last run */
	} runs[CUDA_RUN_GRAPHS];
	uint64_t run_clock;
};

/* ------------------------------------------------------------------ */
/* helpers */

static void run_graphs_drop(struct pvgpu_exec *ex, uint64_t ctx);

static int grow(void **arr, size_t *cap, size_t need, size_t elem)
{
	size_t ncap;
	void *p;

	if (need <= *cap)
		return 0;
	ncap = *cap ? *cap * 2 : 16;
	while (ncap < need)
		ncap *= 2;
	p = realloc(*arr, ncap * elem);
	if (!p)
		return -1;
	*arr = p;
	*cap = ncap;
	return 0;
}

static void describe_error(struct pvgpu_exec *ex, CUresult rc,
			   const char **name, const char **text)
{
	*name = NULL;
	*text = NULL;
	if (ex->api.get_error_name)
		ex->api.get_error_name(rc, name);
	if (ex->api.get_error_string)
		ex->api.get_error_string(rc, text);
	if (!*name)
		*name = "CUDA error";
	if (!*text)
		*text = "no description";
}

/* Index of the first handle >= h. */
static size_t handle_lower_bound(struct pvgpu_exec *ex, uint64_t h)
{
	size_t lo = 0, hi = ex->nhandles;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (ex->handles[mid].handle < h)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static struct cuda_handle *handle_find(struct pvgpu_exec *ex, uint64_t h,
				       enum cuda_kind kind)
{
	size_t i = handle_lower_bound(ex, h);

	if (h && i < ex->nhandles && ex->handles[i].handle == h &&
	    ex->handles[i].kind == kind)
		return &ex->handles[i];
	return NULL;
}

/* A handle of this kind that belongs to the current context, or NULL. */
static struct cuda_handle *handle_here(struct pvgpu_exec *ex, uint64_t h,
				       enum cuda_kind kind)
{
	struct cuda_handle *e = handle_find(ex, h, kind);

	return e && e->ctx == ex->cur ? e : NULL;
}

static int handle_add(struct pvgpu_exec *ex, uint64_t h, enum cuda_kind kind,
		      uint64_t ctx, uint64_t module)
{
	struct cuda_handle *e;
	size_t i = handle_lower_bound(ex, h);

	/* The driver hands out one CUfunction per (module, name). */
	if (i < ex->nhandles && ex->handles[i].handle == h) {
		e = &ex->handles[i];
		e->kind = kind;
		e->ctx = ctx;
		e->module = module;
		return 0;
	}
	if (grow((void **)&ex->handles, &ex->handles_cap, ex->nhandles + 1,
		 sizeof(*ex->handles)))
		return -1;
	memmove(&ex->handles[i + 1], &ex->handles[i],
		(ex->nhandles - i) * sizeof(*ex->handles));
	e = &ex->handles[i];
	e->handle = h;
	e->kind = kind;
	e->ctx = ctx;
	e->module = module;
	ex->nhandles++;
	return 0;
}

static void handle_remove(struct pvgpu_exec *ex, struct cuda_handle *e)
{
	size_t i = (size_t)(e - ex->handles);

	memmove(e, e + 1, (ex->nhandles - i - 1) * sizeof(*e));
	ex->nhandles--;
}

/* Drop every handle matching ctx (and module, when nonzero). */
static void handle_purge(struct pvgpu_exec *ex, uint64_t ctx, uint64_t module)
{
	size_t i, j;

	for (i = 0, j = 0; i < ex->nhandles; i++) {
		struct cuda_handle *e = &ex->handles[i];
		bool drop = module ? e->module == module : e->ctx == ctx;

		if (!drop)
			ex->handles[j++] = *e;
	}
	ex->nhandles = j;
}

static struct cuda_ctx *ctx_find(struct pvgpu_exec *ex, uint64_t ctx)
{
	size_t i;

	for (i = 0; i < ex->nctxs; i++)
		if ((uint64_t)(uintptr_t)ex->ctxs[i].ctx == ctx)
			return &ex->ctxs[i];
	return NULL;
}

/* A stream argument: 0 (the legacy default stream) or one of ours here. */
static int32_t to_stream(struct pvgpu_exec *ex, uint64_t stream, CUstream *s)
{
	struct cuda_handle *e;

	if (!ex->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!stream) {
		*s = NULL;
		return CUDA_SUCCESS;
	}
	e = handle_here(ex, stream, CUDA_STREAM);
	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	*s = (CUstream)(uintptr_t)stream;
	return CUDA_SUCCESS;
}

static CUevent to_event(uint64_t h)
{
	return (CUevent)(uintptr_t)h;
}

static int32_t to_device(struct pvgpu_exec *ex, int32_t ordinal, CUdevice *d)
{
	if (ordinal < 0)
		return CUDA_ERROR_INVALID_DEVICE;
	return ex->api.device_get(d, ordinal);
}

/* ------------------------------------------------------------------ */
/* open / close */

static int resolve(struct pvgpu_exec *ex, get_proc_address_fn gpa,
		   char *err, size_t errlen)
{
	size_t i, k;

	for (i = 0; i < sizeof(cuda_syms) / sizeof(cuda_syms[0]); i++) {
		const struct cuda_sym *s = &cuda_syms[i];
		void *pfn = NULL;

		if (gpa) {
			CUdriverProcAddressQueryResult st;
			int ver = s->version;

			/* Asking for more than the driver has is an error. */
			if (ex->driver_version && ver > ex->driver_version)
				ver = ex->driver_version;
			if (gpa(s->name, &pfn, ver,
				CU_GET_PROC_ADDRESS_LEGACY_STREAM, &st) ||
			    st != CU_GET_PROC_ADDRESS_SUCCESS)
				pfn = NULL;
		}
		for (k = 0; !pfn && k < 2 && s->exported[k]; k++)
			pfn = dlsym(ex->lib, s->exported[k]);
		if (!pfn && !s->optional) {
			snprintf(err, errlen,
				 "%s has no %s: NVIDIA driver too old "
				 "(driver API %d.%d)", CUDA_LIB, s->name,
				 ex->driver_version / 1000,
				 ex->driver_version % 1000 / 10);
			return -1;
		}
		memcpy((char *)&ex->api + s->offset, &pfn, sizeof(pfn));
	}
	return 0;
}

static struct pvgpu_exec *cuda_open(const struct pvgpu_exec_config *cfg,
				    char *err, size_t errlen)
{
	CUresult (CUDAAPI *init)(unsigned int);
	CUresult (CUDAAPI *get_version)(int *);
	const char *name, *text;
	get_proc_address_fn gpa;
	struct pvgpu_exec *ex;
	void *sym;
	CUresult rc;

	/* The driver does its own accounting: cfg says only if we probe. */

	ex = calloc(1, sizeof(*ex));
	if (!ex) {
		snprintf(err, errlen, "cuda executor: out of host memory");
		return NULL;
	}
	ex->probe = cfg && cfg->probe;
	/* NODELETE: the driver's threads may outlive our dlclose. */
	ex->lib = dlopen(CUDA_LIB, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
	if (!ex->lib) {
		snprintf(err, errlen,
			 "%s not found (%s): no NVIDIA driver on this machine",
			 CUDA_LIB, dlerror());
		goto err_free;
	}

	/* Stable, unversioned entry points, needed before the rest. */
	sym = dlsym(ex->lib, "cuGetErrorName");
	memcpy(&ex->api.get_error_name, &sym, sizeof(sym));
	sym = dlsym(ex->lib, "cuGetErrorString");
	memcpy(&ex->api.get_error_string, &sym, sizeof(sym));
	sym = dlsym(ex->lib, "cuInit");
	memcpy(&init, &sym, sizeof(sym));
	sym = dlsym(ex->lib, "cuDriverGetVersion");
	memcpy(&get_version, &sym, sizeof(sym));
	if (!init || !get_version) {
		snprintf(err, errlen, "%s is not a CUDA driver (no cuInit)",
			 CUDA_LIB);
		goto err_close;
	}

	rc = init(0);
	if (rc != CUDA_SUCCESS) {
		describe_error(ex, rc, &name, &text);
		snprintf(err, errlen, "cuInit failed: %s (%s)", name, text);
		goto err_close;
	}
	rc = get_version(&ex->driver_version);
	if (rc != CUDA_SUCCESS) {
		describe_error(ex, rc, &name, &text);
		snprintf(err, errlen, "cuDriverGetVersion failed: %s (%s)",
			 name, text);
		goto err_close;
	}

	sym = dlsym(ex->lib, "cuGetProcAddress_v2");
	memcpy(&gpa, &sym, sizeof(sym));
	if (resolve(ex, gpa, err, errlen))
		goto err_close;
	return ex;

err_close:
	dlclose(ex->lib);
err_free:
	free(ex);
	return NULL;
}

/* Free what a context holds here, then drop one reference to it. */
/* Destroy the texture and surface objects made in ctx (it is current). */
static void objs_release(struct pvgpu_exec *ex, uint64_t ctx)
{
	size_t i, j;

	for (i = 0, j = 0; i < ex->nobjs; i++) {
		struct cuda_obj *o = &ex->objs[i];

		if (o->ctx != ctx)
			ex->objs[j++] = *o;
		else if (o->surf)
			ex->api.surf_destroy((CUsurfObject)o->obj);
		else
			ex->api.tex_destroy((CUtexObject)o->obj);
	}
	ex->nobjs = j;
}

static void ctx_release(struct pvgpu_exec *ex, struct cuda_ctx *c,
			bool all_refs)
{
	uint64_t h = (uint64_t)(uintptr_t)c->ctx;
	CUdevice dev = c->dev;
	unsigned int refs = all_refs ? c->refs : 1;
	size_t i, j, idx;

	if (c->refs > refs) {
		c->refs -= refs;
		ex->api.primary_ctx_release(dev);
		return;
	}

	run_graphs_drop(ex, h);
	/* Work on it while it is current, then leave no context current. */
	if (ex->api.ctx_set_current(c->ctx) == CUDA_SUCCESS) {
		ex->api.ctx_synchronize();
		for (i = 0, j = 0; i < ex->nhosts; i++) {
			struct cuda_host *hb = &ex->hosts[i];

			if (hb->ctx != h) {
				ex->hosts[j++] = *hb;
				continue;
			}
			if (hb->registered)
				ex->api.mem_host_unregister(hb->p);
			else
				ex->api.mem_free_host(hb->p);
		}
		ex->nhosts = j;
		objs_release(ex, h);
	}
	ex->api.ctx_set_current(NULL);
	handle_purge(ex, h, 0);
	for (i = 0; i < refs; i++)
		ex->api.primary_ctx_release(dev);

	idx = (size_t)(c - ex->ctxs);
	memmove(c, c + 1, (ex->nctxs - idx - 1) * sizeof(*c));
	ex->nctxs--;

	if (ex->cur == h) {
		ex->cur = 0;
	} else if (ex->cur) {
		struct cuda_ctx *cur = ctx_find(ex, ex->cur);

		if (cur)
			ex->api.ctx_set_current(cur->ctx);
	}
}

static void cuda_close(struct pvgpu_exec *ex)
{
	if (!ex)
		return;
	while (ex->nctxs)
		ctx_release(ex, &ex->ctxs[ex->nctxs - 1], true);
	free(ex->ctxs);
	free(ex->handles);
	free(ex->hosts);
	free(ex->objs);
	for (unsigned int i = 0; i < ex->nvmm_fds; i++)
		close(ex->vmm_fds[i].fd);
	dlclose(ex->lib);
	free(ex);
}

/* ------------------------------------------------------------------ */
/* devices */

static int32_t cuda_driver_info(struct pvgpu_exec *ex, int32_t *version,
				int32_t *count)
{
	CUresult rc = CUDA_SUCCESS;
	int v, n;

	if (!ex || (!version && !count))
		return CUDA_ERROR_INVALID_VALUE;
	if (version && !(rc = ex->api.driver_get_version(&v)))
		*version = v;
	if (count && !rc && !(rc = ex->api.device_get_count(&n)))
		*count = n;
	return rc;
}

static int32_t cuda_device_attribute(struct pvgpu_exec *ex, int32_t dev,
				     int32_t attr, int32_t *value)
{
	CUdevice d;
	int v;
	CUresult rc;

	if (!ex || !value)
		return CUDA_ERROR_INVALID_VALUE;
	rc = to_device(ex, dev, &d);
	if (rc)
		return rc;
	rc = ex->api.device_get_attribute(&v, (CUdevice_attribute)attr, d);
	if (rc == CUDA_SUCCESS)
		*value = v;
	return rc;
}

/*
 * What one more context on dev and one more stream take of its memory, as
 * the driver's free figure drops: CUDA_MEASURE_CTXS contexts made beside
 * the primary, one after the other, then CUDA_MEASURE_STREAMS streams in
 * the last (their mean).  The driver takes
 * stream memory 2 MiB at a time, a few streams to a piece, so the mean of
 * few is short by up to a piece: 16 streams of an H200 read 512 KiB each
 * where 2000 take 560 KiB; 128 read within 16 KiB.  Everything made here
 * is destroyed again; another process allocating meanwhile skews a
 * reading, so a drop below zero reads as none.
 */
#define CUDA_MEASURE_STREAMS	128
#define CUDA_MEASURE_CTXS	3	/* median3 below */

/* The middle of three readings: one disturbed by another process is dropped. */
static uint64_t median3(uint64_t a, uint64_t b, uint64_t c)
{
	uint64_t t;

	if (a > b) {
		t = a;
		a = b;
		b = t;
	}
	return c < a ? a : c > b ? b : c;
}

static int32_t object_bytes(struct pvgpu_exec *ex, int32_t dev,
			    uint64_t *ctx_bytes, uint64_t *stream_bytes)
{
	CUstream s[CUDA_MEASURE_STREAMS];
	size_t free[CUDA_MEASURE_CTXS + 1], free_s, total;
	uint64_t delta[CUDA_MEASURE_CTXS];
	CUcontext primary, extra[CUDA_MEASURE_CTXS];
	int n = 0, c = 0;
	CUdevice d;
	CUresult rc;

	if (!ex || !ctx_bytes || !stream_bytes)
		return CUDA_ERROR_INVALID_VALUE;
	if (!ex->api.ctx_create || !ex->api.ctx_destroy)
		return CUDA_ERROR_NOT_SUPPORTED;
	rc = to_device(ex, dev, &d);
	if (rc)
		return rc;
	/* A session's context is the device's primary: measure beside it. */
	rc = ex->api.primary_ctx_retain(&primary, d);
	if (rc)
		return rc;
	rc = ex->api.ctx_set_current(primary);
	if (!rc)
		rc = ex->api.mem_get_info(&free[0], &total);
	if (rc)
		goto err_primary;
	/*
	 * The device's free memory is everyone's: another process allocating
	 * or freeing meanwhile moves one reading (a run on the H200 read
	 * 1011.6 MiB for a context that takes 523.6 MiB), so the context's
	 * figure is the middle of three made one after the other.
	 */
	for (; !rc && c < CUDA_MEASURE_CTXS; c++) {
		rc = ex->api.ctx_create(&extra[c], 0, d);	/* current */
		if (rc)
			break;
		rc = ex->api.mem_get_info(&free[c + 1], &total);
	}
	for (; !rc && n < CUDA_MEASURE_STREAMS; n++)
		rc = ex->api.stream_create_with_priority(&s[n], 0, 0);
	if (rc && n)
		n--;			/* the failed one made nothing */
	if (!rc)
		rc = ex->api.mem_get_info(&free_s, &total);
	while (n > 0)
		ex->api.stream_destroy(s[--n]);
	while (c > 0)
		ex->api.ctx_destroy(extra[--c]);
	if (!rc) {
		for (int i = 0; i < CUDA_MEASURE_CTXS; i++)
			delta[i] = free[i] > free[i + 1] ?
				   free[i] - free[i + 1] : 0;
		*ctx_bytes = median3(delta[0], delta[1], delta[2]);
		*stream_bytes = free[CUDA_MEASURE_CTXS] > free_s ?
				(free[CUDA_MEASURE_CTXS] - free_s) /
				CUDA_MEASURE_STREAMS : 0;
	}
err_primary:
	ex->api.ctx_set_current(NULL);
	ex->api.primary_ctx_release(d);
	return rc;
}

static int32_t cuda_device_info(struct pvgpu_exec *ex, int32_t dev,
				struct pvgpu_exec_device *info)
{
	CUdevice d;
	CUuuid u;
	size_t b;
	CUresult rc;

	if (!ex || !info)
		return CUDA_ERROR_INVALID_VALUE;
	rc = to_device(ex, dev, &d);
	if (!rc)
		rc = ex->api.device_get_name(info->name, (int)sizeof(info->name), d);
	if (!rc)
		rc = ex->api.device_get_uuid(&u, d);
	if (!rc)
		rc = ex->api.device_total_mem(&b, d);
	if (rc)
		return rc;
	info->name[sizeof(info->name) - 1] = '\0';
	memcpy(info->uuid, u.bytes, sizeof(info->uuid));
	info->total_mem = b;
	info->objects_known = ex->probe &&
			      !object_bytes(ex, dev, &info->ctx_bytes,
					    &info->stream_bytes);
	return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* contexts */

static int32_t cuda_ctx_create(struct pvgpu_exec *ex, int32_t dev,
			       uint64_t *ctx)
{
	struct cuda_ctx *c;
	CUcontext pctx;
	CUdevice d;
	CUresult rc;

	if (!ex || !ctx)
		return CUDA_ERROR_INVALID_VALUE;
	rc = to_device(ex, dev, &d);
	if (rc)
		return rc;
	if (grow((void **)&ex->ctxs, &ex->ctxs_cap, ex->nctxs + 1,
		 sizeof(*ex->ctxs)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	rc = ex->api.primary_ctx_retain(&pctx, d);
	if (rc)
		return rc;

	/* Retaining twice gives the same context: count, don't duplicate. */
	c = ctx_find(ex, (uint64_t)(uintptr_t)pctx);
	if (!c) {
		c = &ex->ctxs[ex->nctxs++];
		c->ctx = pctx;
		c->dev = d;
		c->refs = 0;
	}
	c->refs++;
	*ctx = (uint64_t)(uintptr_t)pctx;
	return CUDA_SUCCESS;
}

static int32_t cuda_ctx_destroy(struct pvgpu_exec *ex, uint64_t ctx)
{
	struct cuda_ctx *c;

	if (!ex)
		return CUDA_ERROR_INVALID_VALUE;
	c = ctx ? ctx_find(ex, ctx) : NULL;
	if (!c)
		return CUDA_ERROR_INVALID_CONTEXT;
	ctx_release(ex, c, false);
	return CUDA_SUCCESS;
}

static int32_t cuda_ctx_set(struct pvgpu_exec *ex, uint64_t ctx)
{
	struct cuda_ctx *c = NULL;
	CUresult rc;

	if (!ex)
		return CUDA_ERROR_INVALID_VALUE;
	if (ctx) {
		c = ctx_find(ex, ctx);
		if (!c)
			return CUDA_ERROR_INVALID_CONTEXT;
	}
	rc = ex->api.ctx_set_current(c ? c->ctx : NULL);
	if (rc == CUDA_SUCCESS)
		ex->cur = ctx;
	return rc;
}

static int32_t ctx_synchronize(struct pvgpu_exec *ex)
{
	if (!ex)
		return CUDA_ERROR_INVALID_VALUE;
	if (!ex->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	return ex->api.ctx_synchronize();
}

/* ------------------------------------------------------------------ */
/* memory */

static int32_t cuda_mem_alloc(struct pvgpu_exec *ex, uint64_t size,
			      uint64_t *dptr)
{
	CUdeviceptr p;
	CUresult rc;

	if (!ex || !dptr)
		return CUDA_ERROR_INVALID_VALUE;
	if (!ex->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!size)
		return CUDA_ERROR_INVALID_VALUE;
	if (size > SIZE_MAX)
		return CUDA_ERROR_OUT_OF_MEMORY;
	rc = ex->api.mem_alloc(&p, (size_t)size);
	if (rc == CUDA_SUCCESS)
		*dptr = p;
	return rc;
}

static int32_t cuda_mem_free(struct pvgpu_exec *ex, uint64_t dptr)
{
	if (!ex)
		return CUDA_ERROR_INVALID_VALUE;
	if (!ex->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	return ex->api.mem_free((CUdeviceptr)dptr);
}

static int32_t cuda_mem_get_info(struct pvgpu_exec *ex, uint64_t *free_bytes,
				 uint64_t *total_bytes)
{
	size_t f, t;
	CUresult rc;

	if (!ex || !free_bytes || !total_bytes)
		return CUDA_ERROR_INVALID_VALUE;
	if (!ex->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	rc = ex->api.mem_get_info(&f, &t);
	if (rc == CUDA_SUCCESS) {
		*free_bytes = f;
		*total_bytes = t;
	}
	return rc;
}

static struct cuda_host *host_find(struct pvgpu_exec *ex, const void *p,
				   bool registered)
{
	size_t i;

	for (i = 0; i < ex->nhosts; i++)
		if (ex->hosts[i].p == p && ex->hosts[i].registered == registered)
			return &ex->hosts[i];
	return NULL;
}

static void host_remove(struct pvgpu_exec *ex, struct cuda_host *hb)
{
	size_t i = (size_t)(hb - ex->hosts);

	memmove(hb, hb + 1, (ex->nhosts - i - 1) * sizeof(*hb));
	ex->nhosts--;
}

/*
 * Room for one more pinned host buffer, made before the driver pins it
 * (then the pin never has to be undone for want of room), and the note.
 */
static int32_t host_room(struct pvgpu_exec *ex)
{
	if (!ex->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (grow((void **)&ex->hosts, &ex->hosts_cap, ex->nhosts + 1,
		 sizeof(*ex->hosts)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	return CUDA_SUCCESS;
}

static void host_add(struct pvgpu_exec *ex, void *p, bool registered)
{
	ex->hosts[ex->nhosts++] = (struct cuda_host){
		.p = p, .ctx = ex->cur, .registered = registered };
}

static int32_t cuda_host_alloc(struct pvgpu_exec *ex, size_t size, void **p)
{
	void *mem;
	CUresult rc;

	if (!ex || !p || !size)
		return CUDA_ERROR_INVALID_VALUE;
	rc = host_room(ex);
	if (!rc)
		rc = ex->api.mem_host_alloc(&mem, size, CU_MEMHOSTALLOC_PORTABLE);
	if (rc)
		return rc;
	host_add(ex, mem, false);
	*p = mem;
	return CUDA_SUCCESS;
}

static int32_t cuda_host_register(struct pvgpu_exec *ex, void *p, size_t size)
{
	CUresult rc;

	if (!ex || !p || !size)
		return CUDA_ERROR_INVALID_VALUE;
	rc = host_room(ex);
	/* Mapped too, so that cuMemHostGetDevicePointer can name it (hostmap.c). */
	if (!rc)
		rc = ex->api.mem_host_register(p, size, CU_MEMHOSTREGISTER_PORTABLE |
							   CU_MEMHOSTREGISTER_DEVICEMAP);
	if (rc)
		return rc;
	host_add(ex, p, true);
	return CUDA_SUCCESS;
}

/* host_alloc's memory freed, or (registered) host_register's unpinned. */
static int32_t cuda_host_release(struct pvgpu_exec *ex, void *p,
				 bool registered)
{
	struct cuda_host *hb;
	CUresult rc;

	if (!ex)
		return CUDA_ERROR_INVALID_VALUE;
	hb = host_find(ex, p, registered);
	if (!hb)
		return registered ? CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED :
				    CUDA_ERROR_INVALID_VALUE;
	rc = registered ? ex->api.mem_host_unregister(p) :
			  ex->api.mem_free_host(p);
	if (rc == CUDA_SUCCESS)
		host_remove(ex, hb);
	return rc;
}

/* ------------------------------------------------------------------ */
/* copies and memsets */

/*
 * What a queued copy or memset checks: a session, a stream of its current
 * context (to_stream) and a length the host can address.
 */
static int32_t queued_args(struct pvgpu_exec *ex, uint64_t stream,
			   uint64_t len, CUstream *s)
{
	int32_t rc;

	if (!ex)
		return CUDA_ERROR_INVALID_VALUE;
	rc = to_stream(ex, stream, s);
	if (rc)
		return rc;
	return len > SIZE_MAX ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

/* A host buffer of size bytes to copy from or into: named unless empty. */
static int32_t host_args(const void *host, uint64_t size)
{
	return size && !host ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

/*
 * Where the driver lacks the synchronous entry: the _async one on the NULL
 * stream (queued: what it returned), then a synchronize of that stream.
 */
static int32_t sync_after(struct pvgpu_exec *ex, CUresult queued)
{
	if (queued)
		return queued;
	return ex->api.stream_synchronize(NULL);
}

/* A peer copy's two contexts, ours (cuda_copy checked the current one). */
static int32_t peer_ctxs(struct pvgpu_exec *ex, uint64_t dst_ctx,
			 uint64_t src_ctx, CUcontext *d, CUcontext *s)
{
	struct cuda_ctx *dc, *sc;

	dc = dst_ctx ? ctx_find(ex, dst_ctx) : NULL;
	sc = src_ctx ? ctx_find(ex, src_ctx) : NULL;
	if (!dc || !sc)
		return CUDA_ERROR_INVALID_CONTEXT;
	*d = dc->ctx;
	*s = sc->ctx;
	return CUDA_SUCCESS;
}

static int32_t array_copy(struct pvgpu_exec *ex,
			  const struct pvgpu_array_copy *c)
{
	struct cuda_handle *e;
	CUDA_MEMCPY3D m;
	CUstream s;
	int32_t rc;

	if (!ex || !c)
		return CUDA_ERROR_INVALID_VALUE;
	e = handle_here(ex, c->array, CUDA_ARRAY);
	if (!e || !ex->api.memcpy_3d_async)
		return CUDA_ERROR_INVALID_HANDLE;
	rc = to_stream(ex, c->stream, &s);
	if (rc)
		return rc;
	memset(&m, 0, sizeof(m));
	if (c->to_array) {
		m.srcMemoryType = CU_MEMORYTYPE_DEVICE;
		m.srcDevice = c->dptr;
		m.srcPitch = c->pitch;
		m.srcHeight = c->rows;
		m.dstMemoryType = CU_MEMORYTYPE_ARRAY;
		m.dstArray = (CUarray)(uintptr_t)c->array;
		m.dstXInBytes = c->x;
		m.dstY = c->y;
		m.dstZ = c->z;
	} else {
		m.srcMemoryType = CU_MEMORYTYPE_ARRAY;
		m.srcArray = (CUarray)(uintptr_t)c->array;
		m.srcXInBytes = c->x;
		m.srcY = c->y;
		m.srcZ = c->z;
		m.dstMemoryType = CU_MEMORYTYPE_DEVICE;
		m.dstDevice = c->dptr;
		m.dstPitch = c->pitch;
		m.dstHeight = c->rows;
	}
	m.WidthInBytes = c->width;
	m.Height = c->height;
	m.Depth = c->depth;
	return ex->api.memcpy_3d_async(&m, s);
}

/*
 * Every copy (executor.h).  A queued one checks as a memset (queued_args),
 * a synchronous one a current context; a host end is named unless empty,
 * a peer copy's contexts are ours.  A synchronous copy is the driver's
 * own (on the legacy default stream, as a program's cuMemcpyHtoD/DtoH):
 * one driver call, not an _async and a synchronize, where it has one.
 */
static int32_t cuda_copy(struct pvgpu_exec *ex, const struct pvgpu_exec_copy *c)
{
	CUcontext dc = NULL, sc = NULL;
	CUstream s = NULL;
	size_t n;
	int32_t rc;

	if (!ex || !c)
		return CUDA_ERROR_INVALID_VALUE;
	if (c->kind == PVGPU_COPY_ARRAY)
		return c->array ? array_copy(ex, c->array) :
				  CUDA_ERROR_INVALID_VALUE;
	if (c->queued)
		rc = queued_args(ex, c->stream, c->size, &s);
	else
		rc = c->size > SIZE_MAX ? CUDA_ERROR_INVALID_VALUE :
		     ex->cur ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
	if (!rc && (c->kind == PVGPU_COPY_HTOD || c->kind == PVGPU_COPY_DTOH))
		rc = host_args(c->host, c->size);
	if (!rc && c->kind == PVGPU_COPY_PEER)
		rc = peer_ctxs(ex, c->dst_ctx, c->src_ctx, &dc, &sc);
	if (rc)
		return rc;
	n = (size_t)c->size;
	switch (c->kind) {
	case PVGPU_COPY_HTOD:
		if (c->queued)
			return ex->api.memcpy_htod_async(c->dst, c->host, n, s);
		if (ex->api.memcpy_htod)
			return ex->api.memcpy_htod(c->dst, c->host, n);
		return sync_after(ex, ex->api.memcpy_htod_async(c->dst, c->host,
								n, NULL));
	case PVGPU_COPY_DTOH:
		if (c->queued)
			return ex->api.memcpy_dtoh_async(c->host, c->src, n, s);
		if (ex->api.memcpy_dtoh)
			return ex->api.memcpy_dtoh(c->host, c->src, n);
		return sync_after(ex, ex->api.memcpy_dtoh_async(c->host, c->src,
								n, NULL));
	case PVGPU_COPY_DTOD:
		rc = ex->api.memcpy_dtod_async(c->dst, c->src, n, s);
		return c->queued ? rc : sync_after(ex, rc);
	case PVGPU_COPY_PEER:
		if (c->queued)
			return ex->api.memcpy_peer_async(c->dst, dc, c->src, sc,
							 n, s);
		return ex->api.memcpy_peer(c->dst, dc, c->src, sc, n);
	case PVGPU_COPY_ARRAY:
		break;
	}
	return CUDA_ERROR_INVALID_VALUE;
}

static int32_t cuda_memset_async(struct pvgpu_exec *ex, uint64_t dst,
				 uint32_t value, uint32_t elem_size,
				 uint64_t count, uint64_t stream)
{
	CUstream s;
	int32_t rc = queued_args(ex, stream, count, &s);

	if (rc)
		return rc;
	switch (elem_size) {
	case 1:
		return ex->api.memset_d8_async(dst, (unsigned char)value,
					       (size_t)count, s);
	case 2:
		return ex->api.memset_d16_async(dst, (unsigned short)value,
						(size_t)count, s);
	case 4:
		return ex->api.memset_d32_async(dst, value, (size_t)count, s);
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

/* ------------------------------------------------------------------ */
/* streams */

static int32_t cuda_stream_create(struct pvgpu_exec *ex, uint32_t flags,
				  int32_t priority, uint64_t *stream)
{
	CUstream s;
	CUresult rc;

	if (!ex || !stream)
		return CUDA_ERROR_INVALID_VALUE;
	if (!ex->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	rc = ex->api.stream_create_with_priority(&s, flags, priority);
	if (rc)
		return rc;
	if (handle_add(ex, (uint64_t)(uintptr_t)s, CUDA_STREAM, ex->cur, 0)) {
		ex->api.stream_destroy(s);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*stream = (uint64_t)(uintptr_t)s;
	return CUDA_SUCCESS;
}

static int32_t cuda_stream_destroy(struct pvgpu_exec *ex, uint64_t stream)
{
	struct cuda_handle *e;
	CUresult rc;

	if (!ex)
		return CUDA_ERROR_INVALID_VALUE;
	if (!ex->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	e = handle_here(ex, stream, CUDA_STREAM);
	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	rc = ex->api.stream_destroy((CUstream)(uintptr_t)stream);
	if (rc == CUDA_SUCCESS)
		handle_remove(ex, e);
	return rc;
}

static int32_t stream_synchronize(struct pvgpu_exec *ex, uint64_t stream)
{
	CUstream s;
	int32_t rc;

	if (!ex)
		return CUDA_ERROR_INVALID_VALUE;
	rc = to_stream(ex, stream, &s);
	if (rc)
		return rc;
	return ex->api.stream_synchronize(s);
}

static int32_t cuda_synchronize(struct pvgpu_exec *ex, bool whole_ctx,
				uint64_t stream)
{
	return whole_ctx ? ctx_synchronize(ex) : stream_synchronize(ex, stream);
}

/* ------------------------------------------------------------------ */
/* events */

/* A new event of the current context in the table, or destroyed again. */
static int32_t event_keep(struct pvgpu_exec *ex, CUevent e, uint64_t *event)
{
	if (handle_add(ex, (uint64_t)(uintptr_t)e, CUDA_EVENT, ex->cur, 0)) {
		ex->api.event_destroy(e);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*event = (uint64_t)(uintptr_t)e;
	return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* modules and kernels */

/* A module just loaded in the current context, in the table, or unloaded
 * again. */
static int32_t module_keep(struct pvgpu_exec *ex, CUmodule m, uint64_t *module)
{
	if (handle_add(ex, (uint64_t)(uintptr_t)m, CUDA_MODULE, ex->cur, 0)) {
		ex->api.module_unload(m);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*module = (uint64_t)(uintptr_t)m;
	return CUDA_SUCCESS;
}

static int32_t cuda_module_load(struct pvgpu_exec *ex, const void *image,
				size_t size, uint64_t *module)
{
	CUmodule m;
	CUresult rc;

	if (!ex || !image || !size || !module)
		return CUDA_ERROR_INVALID_VALUE;
	if (!ex->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	/*
	 * The driver takes no length: it trusts the image's own headers.
	 * The worker must have checked those against `size`.
	 */
	rc = ex->api.module_load_data(&m, image);
	return rc ? (int32_t)rc : module_keep(ex, m, module);
}

static int32_t cuda_module_unload(struct pvgpu_exec *ex, uint64_t module)
{
	struct cuda_handle *e;
	CUresult rc;

	if (!ex)
		return CUDA_ERROR_INVALID_VALUE;
	if (!ex->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	e = handle_here(ex, module, CUDA_MODULE);
	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	run_graphs_drop(ex, 0);		/* their functions may be this module's */
	rc = ex->api.module_unload((CUmodule)(uintptr_t)module);
	if (rc)
		return rc;
	handle_remove(ex, e);
	handle_purge(ex, 0, module);	/* its functions died with it */
	return CUDA_SUCCESS;
}

static int32_t module_function(struct pvgpu_exec *ex, uint64_t module,
			       const char *name, uint64_t *func)
{
	CUfunction f;
	CUresult rc;

	if (!func)
		return CUDA_ERROR_INVALID_VALUE;
	rc = ex->api.module_get_function(&f, (CUmodule)(uintptr_t)module, name);
	if (rc)
		return rc;
	if (handle_add(ex, (uint64_t)(uintptr_t)f, CUDA_FUNCTION, ex->cur,
		       module))
		return CUDA_ERROR_OUT_OF_MEMORY;
	*func = (uint64_t)(uintptr_t)f;
	return CUDA_SUCCESS;
}

static int32_t cuda_module_function_names(struct pvgpu_exec *ex, uint64_t module,
					  char *names, size_t cap, size_t *len,
					  uint32_t *count)
{
	CUmodule mod = (CUmodule)(uintptr_t)module;
	struct cuda_handle *e;
	CUfunction *fs;
	unsigned int n = 0;
	size_t used = 0;
	CUresult rc;

	if (!ex || !names || !len || !count)
		return CUDA_ERROR_INVALID_VALUE;
	if (!ex->api.module_function_count || !ex->api.module_enum_functions ||
	    !ex->api.func_get_name)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (!ex->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	e = handle_here(ex, module, CUDA_MODULE);
	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	rc = ex->api.module_function_count(&n, mod);
	if (rc)
		return rc;
	fs = calloc(n ? n : 1, sizeof(*fs));
	if (!fs)
		return CUDA_ERROR_OUT_OF_MEMORY;
	rc = n ? ex->api.module_enum_functions(fs, n, mod) : CUDA_SUCCESS;
	for (unsigned int i = 0; !rc && i < n; i++) {
		const char *name = NULL;
		size_t l;

		rc = ex->api.func_get_name(&name, fs[i]);
		if (rc || !name)
			break;
		l = strlen(name) + 1;
		if (used + l > cap)
			break;		/* the rest do not fit: count says so */
		memcpy(names + used, name, l);
		used += l;
	}
	free(fs);
	if (rc)
		return rc;
	*len = used;
	*count = n;
	return CUDA_SUCCESS;
}

static int32_t module_global(struct pvgpu_exec *ex, uint64_t module,
			     const char *name, uint64_t *dptr, uint64_t *size)
{
	CUdeviceptr p;
	size_t bytes;
	CUresult rc;

	rc = ex->api.module_get_global(&p, &bytes, (CUmodule)(uintptr_t)module,
				       name);
	if (rc)
		return rc;
	if (dptr)
		*dptr = p;
	if (size)
		*size = bytes;
	return CUDA_SUCCESS;
}

static int32_t cuda_module_symbol(struct pvgpu_exec *ex, uint64_t module,
				  enum pvgpu_symbol_kind kind, const char *name,
				  uint64_t *value, uint64_t *size)
{
	if (!ex || !name)
		return CUDA_ERROR_INVALID_VALUE;
	if (!ex->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!handle_here(ex, module, CUDA_MODULE))
		return CUDA_ERROR_INVALID_HANDLE;
	switch (kind) {
	case PVGPU_SYM_FUNCTION:
		return module_function(ex, module, name, value);
	case PVGPU_SYM_GLOBAL:
		return module_global(ex, module, name, value, size);
	}
	return CUDA_ERROR_INVALID_VALUE;
}

static int32_t to_function(struct pvgpu_exec *ex, uint64_t func,
			   CUfunction *f)
{
	struct cuda_handle *e;

	if (!ex->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	e = handle_here(ex, func, CUDA_FUNCTION);
	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	*f = (CUfunction)(uintptr_t)func;
	return CUDA_SUCCESS;
}

static int32_t cuda_function_params(struct pvgpu_exec *ex, uint64_t func,
				    struct pvgpu_param_info *layout,
				    uint32_t max, uint32_t *count)
{
	CUfunction f;
	uint32_t i;
	int32_t rc;

	if (!ex || !count || (max && !layout))
		return CUDA_ERROR_INVALID_VALUE;
	rc = to_function(ex, func, &f);
	if (rc)
		return rc;
	if (!ex->api.func_get_param_info)
		return CUDA_ERROR_NOT_SUPPORTED;

	/* The driver has no count: ask for indices until it says no more. */
	for (i = 0; i < CUDA_MAX_PARAMS; i++) {
		size_t off, sz;
		CUresult r;

		r = ex->api.func_get_param_info(f, i, &off, &sz);
		if (r == CUDA_ERROR_INVALID_VALUE)
			break;
		if (r)
			return r;
		if (i < max) {
			layout[i].offset = (uint32_t)off;
			layout[i].size = (uint32_t)sz;
		}
	}
	*count = i;
	return CUDA_SUCCESS;
}

static int32_t cuda_max_clusters(struct pvgpu_exec *ex, uint64_t func,
				 const struct pvgpu_launch *s,
				 const uint32_t cluster[3], int32_t *clusters)
{
	CUlaunchAttribute attr = { .id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION };
	CUlaunchConfig cfg = {
		.gridDimX = s->grid[0], .gridDimY = s->grid[1],
		.gridDimZ = s->grid[2], .blockDimX = s->block[0],
		.blockDimY = s->block[1], .blockDimZ = s->block[2],
		.sharedMemBytes = s->shared_bytes,
	};
	CUfunction f;
	int32_t rc;
	int n = 0;

	if (!ex || !clusters)
		return CUDA_ERROR_INVALID_VALUE;
	if (!ex->api.max_active_clusters)
		return CUDA_ERROR_NOT_SUPPORTED;
	rc = to_function(ex, func, &f);
	if (rc)
		return rc;
	if (cluster[0] || cluster[1] || cluster[2]) {
		attr.value.clusterDim.x = cluster[0];
		attr.value.clusterDim.y = cluster[1];
		attr.value.clusterDim.z = cluster[2];
		cfg.attrs = &attr;
		cfg.numAttrs = 1;
	}
	rc = ex->api.max_active_clusters(&n, f, &cfg);
	*clusters = n;
	return rc;
}

/* A launch with attributes (the session has checked their IDs and
 * unused values): cuLaunchKernelEx, each one as the driver spells it. */
static int32_t launch_ex(struct pvgpu_exec *ex, const struct pvgpu_launch *l,
			 CUfunction f, CUstream s, void **args)
{
	CUlaunchAttribute attrs[PVGPU_MAX_LAUNCH_ATTRS];
	CUlaunchConfig c = {
		.gridDimX = l->grid[0], .gridDimY = l->grid[1],
		.gridDimZ = l->grid[2], .blockDimX = l->block[0],
		.blockDimY = l->block[1], .blockDimZ = l->block[2],
		.sharedMemBytes = l->shared_bytes, .hStream = s,
		.attrs = attrs, .numAttrs = l->nattrs,
	};

	if (!ex->api.launch_kernel_ex || l->nattrs > PVGPU_MAX_LAUNCH_ATTRS)
		return CUDA_ERROR_NOT_SUPPORTED;
	memset(attrs, 0, sizeof(attrs));
	for (uint32_t i = 0; i < l->nattrs; i++) {
		const uint32_t *v = l->attrs[i].v;
		CUlaunchAttributeValue *a = &attrs[i].value;

		attrs[i].id = (CUlaunchAttributeID)l->attrs[i].id;
		switch (l->attrs[i].id) {
		case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
			a->clusterDim.x = v[0];
			a->clusterDim.y = v[1];
			a->clusterDim.z = v[2];
			break;
		case CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION:
			a->preferredClusterDim.x = v[0];
			a->preferredClusterDim.y = v[1];
			a->preferredClusterDim.z = v[2];
			break;
		case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
			if (v[0] > 255 || v[1] > 255)
				return CUDA_ERROR_INVALID_VALUE;
			a->memSyncDomainMap.default_ = (unsigned char)v[0];
			a->memSyncDomainMap.remote = (unsigned char)v[1];
			break;
		case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
			a->cooperative = (int)v[0];
			break;
		case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
			a->clusterSchedulingPolicyPreference = (CUclusterSchedulingPolicy)v[0];
			break;
		case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION:
			a->programmaticStreamSerializationAllowed = (int)v[0];
			break;
		case CU_LAUNCH_ATTRIBUTE_PRIORITY:
			a->priority = (int)v[0];
			break;
		case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
			a->memSyncDomain = (CUlaunchMemSyncDomain)v[0];
			break;
		case CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
			a->sharedMemCarveout = v[0];
			break;
		default:
			return CUDA_ERROR_NOT_SUPPORTED;
		}
	}
	return ex->api.launch_kernel_ex(&c, f, args, NULL);
}

/*
 * One pointer per parameter, into the packed buffer at its offset: *args
 * is stack_args (CUDA_STACK_PARAMS of them) or, for more, malloc'ed.
 */
static int32_t kernel_args(const struct pvgpu_launch *l, void **stack_args,
			   void ***args)
{
	const char *params = l->params;
	uint32_t i;

	if (l->nparams > CUDA_MAX_PARAMS ||
	    (l->nparams && (!l->layout || !l->params)))
		return CUDA_ERROR_INVALID_VALUE;
	for (i = 0; i < l->nparams; i++) {
		const struct pvgpu_param_info *p = &l->layout[i];

		if (p->offset > l->params_size ||
		    p->size > l->params_size - p->offset)
			return CUDA_ERROR_INVALID_VALUE;
	}
	*args = stack_args;
	if (l->nparams > CUDA_STACK_PARAMS) {
		*args = malloc(l->nparams * sizeof(**args));
		if (!*args)
			return CUDA_ERROR_OUT_OF_MEMORY;
	}
	for (i = 0; i < l->nparams; i++)
		(*args)[i] = (void *)(params + l->layout[i].offset);
	return CUDA_SUCCESS;
}

static int32_t launch_one(struct pvgpu_exec *ex,
			  const struct pvgpu_launch *l)
{
	void *stack_args[CUDA_STACK_PARAMS];
	void **args;
	CUfunction f;
	CUstream s;
	int32_t rc;

	if (!ex || !l)
		return CUDA_ERROR_INVALID_VALUE;
	rc = to_function(ex, l->func, &f);
	if (rc)
		return rc;
	rc = to_stream(ex, l->stream, &s);
	if (rc)
		return rc;
	rc = kernel_args(l, stack_args, &args);
	if (rc)
		return rc;

	if (l->nattrs)
		rc = launch_ex(ex, l, f, s, l->nparams ? args : NULL);
	else
		rc = ex->api.launch_kernel(f, l->grid[0], l->grid[1], l->grid[2],
					   l->block[0], l->block[1], l->block[2],
					   l->shared_bytes, s,
					   l->nparams ? args : NULL, NULL);
	if (args != stack_args)
		free(args);
	return rc;
}

/* ------------------------------------------------------------------ */
/* CUDA arrays */

static int32_t cuda_array_create(struct pvgpu_exec *ex,
				 const struct pvgpu_array_desc *d, uint64_t *array)
{
	CUDA_ARRAY3D_DESCRIPTOR desc;
	CUarray a;
	CUresult rc;

	if (!ex || !d || !array)
		return CUDA_ERROR_INVALID_VALUE;
	if (!ex->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!ex->api.array_create || !ex->api.array_destroy)
		return CUDA_ERROR_NOT_SUPPORTED;
	desc = (CUDA_ARRAY3D_DESCRIPTOR){
		.Width = d->width, .Height = d->height, .Depth = d->depth,
		.Format = (CUarray_format)d->format, .NumChannels = d->channels,
		.Flags = d->flags,
	};
	rc = ex->api.array_create(&a, &desc);
	if (rc)
		return rc;
	if (handle_add(ex, (uint64_t)(uintptr_t)a, CUDA_ARRAY, ex->cur, 0)) {
		ex->api.array_destroy(a);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*array = (uint64_t)(uintptr_t)a;
	return CUDA_SUCCESS;
}

/* ------------------------------------------------------------------ */
/* texture and surface objects */

static struct cuda_obj *obj_find(struct pvgpu_exec *ex, uint64_t obj, bool surf)
{
	for (size_t i = 0; i < ex->nobjs; i++)
		if (ex->objs[i].obj == obj && ex->objs[i].surf == surf &&
		    ex->objs[i].ctx == ex->cur)
			return &ex->objs[i];
	return NULL;
}

/* Keep obj, or destroy it when there is no room to. */
static int32_t obj_keep(struct pvgpu_exec *ex, uint64_t obj, bool surf)
{
	if (grow((void **)&ex->objs, &ex->objs_cap, ex->nobjs + 1,
		 sizeof(*ex->objs))) {
		if (surf)
			ex->api.surf_destroy((CUsurfObject)obj);
		else
			ex->api.tex_destroy((CUtexObject)obj);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	ex->objs[ex->nobjs++] = (struct cuda_obj){ obj, ex->cur, surf };
	return CUDA_SUCCESS;
}

static bool array_ours(struct pvgpu_exec *ex, uint64_t array)
{
	struct cuda_handle *e = handle_find(ex, array, CUDA_ARRAY);

	return e && e->ctx == ex->cur;
}

/* A surface object of an array of the current context. */
static int32_t surf_create(struct pvgpu_exec *ex, uint64_t array,
			   uint64_t *obj)
{
	CUDA_RESOURCE_DESC res;
	CUsurfObject s;
	CUresult rc;

	if (!ex || !obj)
		return CUDA_ERROR_INVALID_VALUE;
	if (!ex->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!ex->api.surf_create || !ex->api.surf_destroy)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (!array_ours(ex, array))
		return CUDA_ERROR_INVALID_HANDLE;
	memset(&res, 0, sizeof(res));
	res.resType = CU_RESOURCE_TYPE_ARRAY;
	res.res.array.hArray = (CUarray)(uintptr_t)array;
	rc = ex->api.surf_create(&s, &res);
	if (rc)
		return rc;
	*obj = (uint64_t)s;
	return obj_keep(ex, *obj, true);
}

static int32_t cuda_tex_create(struct pvgpu_exec *ex,
			       const struct pvgpu_tex_desc *d, bool surface,
			       uint64_t *obj)
{
	CUDA_RESOURCE_DESC res;
	CUDA_TEXTURE_DESC tex;
	CUtexObject t;
	CUresult rc;

	if (!ex || !d || !obj)
		return CUDA_ERROR_INVALID_VALUE;
	if (surface)
		return surf_create(ex, d->array, obj);
	if (!ex->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!ex->api.tex_create || !ex->api.tex_destroy)
		return CUDA_ERROR_NOT_SUPPORTED;
	memset(&res, 0, sizeof(res));
	memset(&tex, 0, sizeof(tex));
	res.resType = (CUresourcetype)d->res_type;
	switch (d->res_type) {
	case CU_RESOURCE_TYPE_ARRAY:
		if (!array_ours(ex, d->array))
			return CUDA_ERROR_INVALID_HANDLE;
		res.res.array.hArray = (CUarray)(uintptr_t)d->array;
		break;
	case CU_RESOURCE_TYPE_LINEAR:
		res.res.linear.devPtr = d->dptr;
		res.res.linear.format = (CUarray_format)d->format;
		res.res.linear.numChannels = d->channels;
		res.res.linear.sizeInBytes = d->size;
		break;
	case CU_RESOURCE_TYPE_PITCH2D:
		res.res.pitch2D.devPtr = d->dptr;
		res.res.pitch2D.format = (CUarray_format)d->format;
		res.res.pitch2D.numChannels = d->channels;
		res.res.pitch2D.width = d->width;
		res.res.pitch2D.height = d->height;
		res.res.pitch2D.pitchInBytes = d->pitch;
		break;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
	for (int i = 0; i < 3; i++)
		tex.addressMode[i] = (CUaddress_mode)d->address[i];
	tex.filterMode = (CUfilter_mode)d->filter;
	tex.flags = d->flags;
	tex.maxAnisotropy = d->max_aniso;
	tex.mipmapFilterMode = (CUfilter_mode)d->mip_filter;
	tex.mipmapLevelBias = d->mip_bias;
	tex.minMipmapLevelClamp = d->mip_min;
	tex.maxMipmapLevelClamp = d->mip_max;
	memcpy(tex.borderColor, d->border, sizeof(tex.borderColor));
	rc = ex->api.tex_create(&t, &res, &tex, NULL);
	if (rc)
		return rc;
	*obj = (uint64_t)t;
	return obj_keep(ex, *obj, false);
}

static int32_t cuda_tensor_map_encode(struct pvgpu_exec *ex,
				      const struct pvgpu_tensor_map *m, uint64_t desc[16])
{
	CUtensorMap map;
	CUresult rc;

	_Static_assert(sizeof(map) == 16 * sizeof(uint64_t), "a TMA descriptor is 128 bytes");
	if (!ex || !m || !desc)
		return CUDA_ERROR_INVALID_VALUE;
	if (!ex->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (m->im2col ? !ex->api.tensor_map_im2col : !ex->api.tensor_map_tiled)
		return CUDA_ERROR_NOT_SUPPORTED;
	memset(&map, 0, sizeof(map));
	if (m->im2col)
		rc = ex->api.tensor_map_im2col(&map, (CUtensorMapDataType)m->dtype, m->rank,
					       (void *)(uintptr_t)m->address, m->dims,
					       m->strides, m->lower, m->upper, m->channels,
					       m->pixels, m->elem_strides,
					       (CUtensorMapInterleave)m->interleave,
					       (CUtensorMapSwizzle)m->swizzle,
					       (CUtensorMapL2promotion)m->l2,
					       (CUtensorMapFloatOOBfill)m->oob);
	else
		rc = ex->api.tensor_map_tiled(&map, (CUtensorMapDataType)m->dtype, m->rank,
					      (void *)(uintptr_t)m->address, m->dims,
					      m->strides, m->box, m->elem_strides,
					      (CUtensorMapInterleave)m->interleave,
					      (CUtensorMapSwizzle)m->swizzle,
					      (CUtensorMapL2promotion)m->l2,
					      (CUtensorMapFloatOOBfill)m->oob);
	if (!rc)
		memcpy(desc, &map, sizeof(map));
	return rc;
}

/* ------------------------------------------------------------------ */
/* peers */

/* cuDeviceGetP2PAttribute, or cuDeviceCanAccessPeer (executor.h). */
static int32_t cuda_peer_attribute(struct pvgpu_exec *ex, int32_t attr,
				   int32_t dev, int32_t peer, int32_t *value)
{
	CUdevice d, p;
	int v = 0;
	CUresult rc;

	if (!ex || !value)
		return CUDA_ERROR_INVALID_VALUE;
	rc = to_device(ex, dev, &d);
	if (!rc)
		rc = to_device(ex, peer, &p);
	if (!rc && attr == PVGPU_PEER_CAN_ACCESS)
		rc = ex->api.device_can_access_peer(&v, d, p);
	else if (!rc)
		rc = ex->api.device_get_p2p_attribute(&v, (CUdevice_P2PAttribute)attr,
						      d, p);
	*value = rc ? 0 : v;
	return rc;
}

/* The current context gains (or loses) access to peer_ctx's memory. */
static int32_t cuda_peer_access(struct pvgpu_exec *ex, uint64_t peer_ctx,
				bool enable, uint32_t flags)
{
	struct cuda_ctx *p;

	if (!ex)
		return CUDA_ERROR_INVALID_VALUE;
	if (!ex->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	p = peer_ctx ? ctx_find(ex, peer_ctx) : NULL;
	if (!p)
		return CUDA_ERROR_INVALID_CONTEXT;
	return enable ? ex->api.ctx_enable_peer_access(p->ctx, flags) :
			ex->api.ctx_disable_peer_access(p->ctx);
}

/* ------------------------------------------------------------------ */
/* explicit graph nodes */

/* l as the driver's kernel node parameters; *args as kernel_args. */
static int32_t kernel_node_params(struct pvgpu_exec *ex,
				  const struct pvgpu_launch *l,
				  void **stack_args, void ***args,
				  CUDA_KERNEL_NODE_PARAMS *p)
{
	CUfunction f;
	int32_t rc = to_function(ex, l->func, &f);

	if (!rc)
		rc = kernel_args(l, stack_args, args);
	if (rc)
		return rc;
	*p = (CUDA_KERNEL_NODE_PARAMS){
		.func = f, .gridDimX = l->grid[0], .gridDimY = l->grid[1],
		.gridDimZ = l->grid[2], .blockDimX = l->block[0],
		.blockDimY = l->block[1], .blockDimZ = l->block[2],
		.sharedMemBytes = l->shared_bytes,
		.kernelParams = l->nparams ? *args : NULL,
	};
	return CUDA_SUCCESS;
}

/*
 * Runs.  PVGPU_LAUNCH_RUN identical launches as one cuGraphLaunch of a
 * graph of that many kernel nodes in a chain: on one stream a graph's
 * nodes run in order after the work before it and before the work after
 * it, which is what that many launches do, for one driver call instead of
 * one each (an empty launch costs the driver 3-4 us of CPU on the H200;
 * a graph's kernels start about 0.5 us apart on the GPU).  A run is made
 * into a graph the second time it is seen (a launch pattern seen once
 * may never come back, and making a graph costs more than a run's
 * launches), kept among CUDA_RUN_GRAPHS by context, stream, function,
 * shape and parameter bytes, the least recently run one making room.
 * Kept graphs are dropped whenever something may change how their kernels
 * run: a module unloaded, a function's attributes set, a context
 * released, a generic call that sets function, kernel, module, library
 * or context state.
 */
static bool run_graph_is(const struct cuda_run_graph *g, uint64_t ctx,
			 CUfunction f, CUstream s, const struct pvgpu_launch *l)
{
	return g->ctx == ctx && g->f == f && g->stream == s &&
	       !memcmp(g->grid, l->grid, sizeof(g->grid)) &&
	       !memcmp(g->block, l->block, sizeof(g->block)) &&
	       g->shared == l->shared_bytes && g->params_size == l->params_size &&
	       !memcmp(g->params, l->params, l->params_size);
}

static void run_graph_drop(struct pvgpu_exec *ex, struct cuda_run_graph *g)
{
	if (g->exec)
		ex->api.graph_exec_destroy(g->exec);
	g->exec = NULL;
	g->ctx = 0;
	g->failed = false;
}

/* The kept graphs of context ctx, or (0) all of them, dropped. */
static void run_graphs_drop(struct pvgpu_exec *ex, uint64_t ctx)
{
	for (unsigned int i = 0; i < CUDA_RUN_GRAPHS; i++)
		if (ex->runs[i].ctx && (!ctx || ex->runs[i].ctx == ctx))
			run_graph_drop(ex, &ex->runs[i]);
}

static int32_t run_graph_make(struct pvgpu_exec *ex, struct cuda_run_graph *g,
			      const struct pvgpu_launch *l)
{
	void *stack_args[CUDA_STACK_PARAMS];
	void **args = stack_args;
	CUDA_KERNEL_NODE_PARAMS p;
	CUgraphNode prev = NULL, node;
	CUgraph graph = NULL;
	int32_t rc = kernel_node_params(ex, l, stack_args, &args, &p);

	if (rc)
		return rc;
	rc = ex->api.graph_create(&graph, 0);
	for (unsigned int i = 0; !rc && i < PVGPU_LAUNCH_RUN; i++) {
		rc = ex->api.graph_add_kernel_node(&node, graph, prev ? &prev : NULL,
						   prev ? 1 : 0, &p);
		prev = node;
	}
	if (!rc)
		rc = ex->api.graph_instantiate(&g->exec, graph, 0);
	if (graph)
		ex->api.graph_destroy(graph);
	if (args != stack_args)
		free(args);
	return rc;
}

static int32_t launch_run(struct pvgpu_exec *ex,
			  const struct pvgpu_launch *l)
{
	struct cuda_run_graph *g = NULL;
	CUfunction f;
	CUstream s;

	if (!ex || !l || l->nattrs || !ex->cur ||
	    l->params_size > PVGPU_RUN_PARAMS_MAX || !ex->api.graph_create ||
	    !ex->api.graph_destroy || !ex->api.graph_instantiate ||
	    !ex->api.graph_launch || !ex->api.graph_exec_destroy ||
	    !ex->api.graph_add_kernel_node || to_function(ex, l->func, &f) ||
	    to_stream(ex, l->stream, &s))
		return PVGPU_EXEC_DECLINED;
	for (unsigned int i = 0; i < CUDA_RUN_GRAPHS && !g; i++)
		if (run_graph_is(&ex->runs[i], ex->cur, f, s, l))
			g = &ex->runs[i];
	if (!g) {
		/* Seen once: remembered in a free entry or the oldest one. */
		g = &ex->runs[0];
		for (unsigned int i = 1; i < CUDA_RUN_GRAPHS && g->ctx; i++)
			if (!ex->runs[i].ctx || ex->runs[i].used < g->used)
				g = &ex->runs[i];
		run_graph_drop(ex, g);
		g->ctx = ex->cur;
		g->f = f;
		g->stream = s;
		memcpy(g->grid, l->grid, sizeof(g->grid));
		memcpy(g->block, l->block, sizeof(g->block));
		g->shared = l->shared_bytes;
		g->params_size = l->params_size;
		memcpy(g->params, l->params, l->params_size);
		g->used = ++ex->run_clock;
		return PVGPU_EXEC_DECLINED;
	}
	g->used = ++ex->run_clock;
	if (g->failed)
		return PVGPU_EXEC_DECLINED;
	if (!g->exec && run_graph_make(ex, g, l)) {
		g->failed = true;
		return PVGPU_EXEC_DECLINED;
	}
	/* Refused (the launches alone say why, one by one): none ran. */
	if (ex->api.graph_launch(g->exec, s)) {
		g->failed = true;
		return PVGPU_EXEC_DECLINED;
	}
	return CUDA_SUCCESS;
}

static int32_t cuda_launch(struct pvgpu_exec *ex,
			   const struct pvgpu_launch *l)
{
	return l && l->run ? launch_run(ex, l) : launch_one(ex, l);
}

/*
 * A generic call that may change how kept run graphs' kernels run:
 * one that sets function, kernel, module, library or context state.
 */
static bool changes_kernels(const char *name)
{
	static const char *const setters[] = {
		"cuFunc", "cuKernel", "cuModule", "cuLibrary", "cuCtx",
		"cuDevicePrimaryCtx",
	};

	if (strstr(name, "Get") || strstr(name, "Synchronize"))
		return false;
	for (size_t i = 0; i < sizeof(setters) / sizeof(setters[0]); i++)
		if (!strncmp(name, setters[i], strlen(setters[i])))
			return true;
	return false;
}

/* A copy node's parameters: one run of bytes, either end host memory. */
static void memcpy_node_params(const struct pvgpu_graph_node *n,
			       CUDA_MEMCPY3D *p)
{
	*p = (CUDA_MEMCPY3D){
		.srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = n->src,
		.dstMemoryType = CU_MEMORYTYPE_DEVICE, .dstDevice = n->dst,
		.WidthInBytes = n->width, .Height = 1, .Depth = 1,
	};
	if (n->host && n->to_host) {
		p->dstMemoryType = CU_MEMORYTYPE_HOST;
		p->dstHost = n->host;
	} else if (n->host) {
		p->srcMemoryType = CU_MEMORYTYPE_HOST;
		p->srcHost = n->host;
	}
}

static int32_t cuda_graph_add_node(struct pvgpu_exec *ex, uint64_t graph,
				   const struct pvgpu_graph_node *n,
				   const uint64_t *deps, uint32_t ndeps,
				   uint64_t *node)
{
	const CUgraphNode *d = (const CUgraphNode *)deps;
	CUgraph g = (CUgraph)(uintptr_t)graph;
	void *stack_args[CUDA_STACK_PARAMS];
	void **args = stack_args;
	struct cuda_ctx *c;
	CUgraphNode out = NULL;
	int32_t rc;

	_Static_assert(sizeof(CUgraphNode) == sizeof(uint64_t),
		       "node handles are 64-bit");
	if (!ex || !n || !node)
		return CUDA_ERROR_INVALID_VALUE;
	c = ex->cur ? ctx_find(ex, ex->cur) : NULL;
	if (!c)
		return CUDA_ERROR_INVALID_CONTEXT;
	switch (n->type) {
	case CU_GRAPH_NODE_TYPE_KERNEL: {
		CUDA_KERNEL_NODE_PARAMS p;

		if (!ex->api.graph_add_kernel_node)
			return CUDA_ERROR_NOT_SUPPORTED;
		rc = kernel_node_params(ex, &n->kernel, stack_args, &args, &p);
		if (rc)
			return rc;
		rc = ex->api.graph_add_kernel_node(&out, g, d, ndeps, &p);
		if (args != stack_args)
			free(args);
		break;
	}
	case CU_GRAPH_NODE_TYPE_MEMSET: {
		CUDA_MEMSET_NODE_PARAMS p = {
			.dst = n->dst, .pitch = n->pitch, .value = n->value,
			.elementSize = n->elem_size, .width = n->width,
			.height = n->height,
		};

		if (!ex->api.graph_add_memset_node)
			return CUDA_ERROR_NOT_SUPPORTED;
		rc = ex->api.graph_add_memset_node(&out, g, d, ndeps, &p, c->ctx);
		break;
	}
	case CU_GRAPH_NODE_TYPE_MEMCPY: {
		CUDA_MEMCPY3D p;

		memcpy_node_params(n, &p);
		if (!ex->api.graph_add_memcpy_node)
			return CUDA_ERROR_NOT_SUPPORTED;
		rc = ex->api.graph_add_memcpy_node(&out, g, d, ndeps, &p, c->ctx);
		break;
	}
	case CU_GRAPH_NODE_TYPE_EMPTY:
		if (!ex->api.graph_add_empty_node)
			return CUDA_ERROR_NOT_SUPPORTED;
		rc = ex->api.graph_add_empty_node(&out, g, d, ndeps);
		break;
	case CU_GRAPH_NODE_TYPE_MEM_ALLOC: {
		CUDA_MEM_ALLOC_NODE_PARAMS p = {
			.poolProps = {
				.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
				.location = { CU_MEM_LOCATION_TYPE_DEVICE, c->dev },
			},
			.bytesize = n->width,
		};

		if (!ex->api.graph_add_mem_alloc_node || !n->alloc)
			return CUDA_ERROR_NOT_SUPPORTED;
		rc = ex->api.graph_add_mem_alloc_node(&out, g, d, ndeps, &p);
		*n->alloc = rc ? 0 : p.dptr;
		break;
	}
	case CU_GRAPH_NODE_TYPE_MEM_FREE:
		if (!ex->api.graph_add_mem_free_node)
			return CUDA_ERROR_NOT_SUPPORTED;
		rc = ex->api.graph_add_mem_free_node(&out, g, d, ndeps, n->dst);
		break;
	case CU_GRAPH_NODE_TYPE_CONDITIONAL: {
		CUgraphNodeParams p = { .type = CU_GRAPH_NODE_TYPE_CONDITIONAL };

		if (!ex->api.graph_add_node || !n->bodies)
			return CUDA_ERROR_NOT_SUPPORTED;
		p.conditional.handle = (CUgraphConditionalHandle)n->cond;
		p.conditional.type = (CUgraphConditionalNodeType)n->cond_type;
		p.conditional.size = n->cond_size;
		p.conditional.ctx = c->ctx;
		rc = ex->api.graph_add_node(&out, g, d, NULL, ndeps, &p);
		for (uint32_t i = 0; !rc && i < n->cond_size; i++)
			n->bodies[i] = p.conditional.phGraph_out ?
				       (uint64_t)(uintptr_t)p.conditional.phGraph_out[i] : 0;
		break;
	}
	default:
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	*node = (uint64_t)(uintptr_t)out;
	return rc;
}

static int32_t cuda_graph_kernel_node_set(struct pvgpu_exec *ex,
					  uint64_t exec, uint64_t node,
					  const struct pvgpu_launch *l)
{
	void *stack_args[CUDA_STACK_PARAMS];
	void **args = stack_args;
	CUDA_KERNEL_NODE_PARAMS p;
	int32_t rc;

	if (!ex || !l)
		return CUDA_ERROR_INVALID_VALUE;
	if (!ex->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (exec ? !ex->api.graph_exec_kernel_node_set :
		   !ex->api.graph_kernel_node_set)
		return CUDA_ERROR_NOT_SUPPORTED;
	rc = kernel_node_params(ex, l, stack_args, &args, &p);
	if (rc)
		return rc;
	if (exec)
		rc = ex->api.graph_exec_kernel_node_set((CUgraphExec)(uintptr_t)exec,
							(CUgraphNode)(uintptr_t)node,
							&p);
	else
		rc = ex->api.graph_kernel_node_set((CUgraphNode)(uintptr_t)node, &p);
	if (args != stack_args)
		free(args);
	return rc;
}

static int32_t cuda_graph_add_deps(struct pvgpu_exec *ex, uint64_t graph,
				   const uint64_t *from, const uint64_t *to,
				   uint32_t n)
{
	if (!ex)
		return CUDA_ERROR_INVALID_VALUE;
	if (!ex->api.graph_add_deps)
		return CUDA_ERROR_NOT_SUPPORTED;
	return ex->api.graph_add_deps((CUgraph)(uintptr_t)graph,
				      (const CUgraphNode *)from,
				      (const CUgraphNode *)to, NULL, n);
}

static int32_t cuda_graph_nodes(struct pvgpu_exec *ex, uint64_t graph,
				uint64_t *nodes, uint32_t *types, uint32_t max,
				uint64_t *count)
{
	CUgraphNode *v = NULL;
	size_t n = 0;
	int32_t rc;

	if (!ex || !count || (max && (!nodes || !types)))
		return CUDA_ERROR_INVALID_VALUE;
	if (!ex->api.graph_get_nodes || !ex->api.graph_node_get_type)
		return CUDA_ERROR_NOT_SUPPORTED;
	rc = ex->api.graph_get_nodes((CUgraph)(uintptr_t)graph, NULL, &n);
	if (rc)
		return rc;
	*count = n;
	if (n > max)
		n = max;
	if (!n)
		return CUDA_SUCCESS;
	v = malloc(n * sizeof(*v));
	if (!v)
		return CUDA_ERROR_OUT_OF_MEMORY;
	/* Asked for n, the driver gives the first n. */
	rc = ex->api.graph_get_nodes((CUgraph)(uintptr_t)graph, v, &n);
	for (size_t i = 0; !rc && i < n; i++) {
		CUgraphNodeType t;

		rc = ex->api.graph_node_get_type(v[i], &t);
		nodes[i] = (uint64_t)(uintptr_t)v[i];
		types[i] = (uint32_t)t;
	}
	free(v);
	return rc;
}

static int32_t cuda_graph_exec_update(struct pvgpu_exec *ex, uint64_t exec,
				      uint64_t graph, uint32_t *result,
				      uint64_t *error_node, uint32_t *error_type)
{
	CUgraphExecUpdateResultInfo info = { 0 };
	CUgraphNodeType t = CU_GRAPH_NODE_TYPE_EMPTY;
	int32_t rc;

	if (!ex || !result || !error_node || !error_type)
		return CUDA_ERROR_INVALID_VALUE;
	if (!ex->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!ex->api.graph_exec_update || !ex->api.graph_node_get_type)
		return CUDA_ERROR_NOT_SUPPORTED;
	rc = ex->api.graph_exec_update((CUgraphExec)(uintptr_t)exec,
				       (CUgraph)(uintptr_t)graph, &info);
	*result = (uint32_t)info.result;
	*error_node = (uint64_t)(uintptr_t)info.errorNode;
	if (info.errorNode)
		ex->api.graph_node_get_type(info.errorNode, &t);
	*error_type = (uint32_t)t;
	return rc;
}

static int32_t cuda_capture_info(struct pvgpu_exec *ex, uint64_t stream,
				 uint32_t *status, uint64_t *id, uint64_t *graph,
				 uint64_t *nodes, uint32_t *types, uint64_t *edges,
				 uint32_t max, uint64_t *count)
{
	CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
	const CUgraphEdgeData *e = NULL;
	const CUgraphNode *d = NULL;
	CUgraph g = NULL;
	cuuint64_t cid = 0;
	size_t n = 0;
	int32_t rc;

	_Static_assert(sizeof(CUgraphEdgeData) == sizeof(uint64_t),
		       "an edge's data is 8 bytes");
	if (!ex || !status || !id || !graph || !count ||
	    (max && (!nodes || !types || !edges)))
		return CUDA_ERROR_INVALID_VALUE;
	if (!ex->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!ex->api.stream_capture_info || !ex->api.graph_node_get_type)
		return CUDA_ERROR_NOT_SUPPORTED;
	rc = ex->api.stream_capture_info((CUstream)(uintptr_t)stream, &cs, &cid,
					 &g, &d, &e, &n);
	if (rc)
		return rc;
	*status = (uint32_t)cs;
	*id = cid;
	*graph = (uint64_t)(uintptr_t)g;
	*count = cs == CU_STREAM_CAPTURE_STATUS_NONE ? 0 : n;
	for (size_t i = 0; i < *count && i < max && !rc; i++) {
		CUgraphNodeType t;

		nodes[i] = (uint64_t)(uintptr_t)d[i];
		edges[i] = 0;
		if (e)
			memcpy(&edges[i], &e[i], sizeof(edges[i]));
		rc = ex->api.graph_node_get_type(d[i], &t);
		types[i] = (uint32_t)t;
	}
	return rc;
}

/* A capture call's dependencies checked (have: the driver has the call)
 * and their edge data copied into *e (NULL: default edges; freed by the
 * caller). */
static int32_t capture_args(struct pvgpu_exec *ex, int have,
			    const uint64_t *nodes, const uint64_t *edges,
			    uint32_t n, CUgraphEdgeData **e)
{
	*e = NULL;
	if (!ex || (n && !nodes))
		return CUDA_ERROR_INVALID_VALUE;
	if (!ex->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!have)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (edges && n) {
		*e = malloc(n * sizeof(**e));
		if (!*e)
			return CUDA_ERROR_OUT_OF_MEMORY;
		memcpy(*e, edges, n * sizeof(**e));
	}
	return CUDA_SUCCESS;
}

static int32_t cuda_capture_to_graph(struct pvgpu_exec *ex, uint64_t stream,
				     uint64_t graph, const uint64_t *nodes,
				     const uint64_t *edges, uint32_t n,
				     uint32_t mode)
{
	CUgraphEdgeData *e;
	int32_t rc = capture_args(ex, ex && ex->api.stream_capture_to_graph,
				  nodes, edges, n, &e);

	if (rc)
		return rc;
	rc = ex->api.stream_capture_to_graph((CUstream)(uintptr_t)stream,
					     (CUgraph)(uintptr_t)graph,
					     (const CUgraphNode *)(uintptr_t)nodes,
					     e, n, (CUstreamCaptureMode)mode);
	free(e);
	return rc;
}

static int32_t cuda_clone_node(struct pvgpu_exec *ex, uint64_t clone,
			       uint64_t node, const struct pvgpu_graph_node *n,
			       uint64_t *out)
{
	CUgraphNode found = NULL;
	CUDA_MEMCPY3D p;
	int32_t rc;

	if (!ex || !out)
		return CUDA_ERROR_INVALID_VALUE;
	if (!ex->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!ex->api.graph_node_find_in_clone ||
	    (n && !ex->api.graph_memcpy_node_set))
		return CUDA_ERROR_NOT_SUPPORTED;
	rc = ex->api.graph_node_find_in_clone(&found, (CUgraphNode)(uintptr_t)node,
					      (CUgraph)(uintptr_t)clone);
	if (!rc && n) {
		memcpy_node_params(n, &p);
		rc = ex->api.graph_memcpy_node_set(found, &p);
	}
	*out = rc ? 0 : (uint64_t)(uintptr_t)found;
	return rc;
}

static int32_t cuda_capture_deps(struct pvgpu_exec *ex, uint64_t stream,
				 const uint64_t *nodes, const uint64_t *edges,
				 uint32_t n, uint32_t flags)
{
	CUgraphEdgeData *e;
	int32_t rc = capture_args(ex, ex && ex->api.stream_capture_deps, nodes,
				  edges, n, &e);

	if (rc)
		return rc;
	rc = ex->api.stream_capture_deps((CUstream)(uintptr_t)stream,
					 (CUgraphNode *)(uintptr_t)nodes, e, n,
					 flags);
	free(e);
	return rc;
}

static int32_t cuda_mem_async(struct pvgpu_exec *ex, uint64_t stream,
			      uint64_t size, uint64_t *dptr)
{
	CUdeviceptr p = 0;
	int32_t rc;

	if (!ex || !dptr)
		return CUDA_ERROR_INVALID_VALUE;
	if (!ex->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!ex->api.mem_alloc_async || !ex->api.mem_free_async)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (!size)
		return ex->api.mem_free_async((CUdeviceptr)*dptr,
					      (CUstream)(uintptr_t)stream);
	rc = ex->api.mem_alloc_async(&p, size, (CUstream)(uintptr_t)stream);
	*dptr = rc ? 0 : (uint64_t)p;
	return rc;
}

static int32_t cuda_cond_handle(struct pvgpu_exec *ex, uint64_t graph,
				uint32_t default_value, uint32_t flags,
				uint64_t *handle)
{
	CUgraphConditionalHandle h = 0;
	struct cuda_ctx *c;
	int32_t rc;

	if (!ex || !handle)
		return CUDA_ERROR_INVALID_VALUE;
	c = ex->cur ? ctx_find(ex, ex->cur) : NULL;
	if (!c)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!ex->api.graph_cond_handle_create)
		return CUDA_ERROR_NOT_SUPPORTED;
	rc = ex->api.graph_cond_handle_create(&h, (CUgraph)(uintptr_t)graph, c->ctx,
					      default_value, flags);
	*handle = h;
	return rc;
}

/*
 * The handle arguments of a generic call against this executor's own
 * records (defence in depth: the worker checked them first): events it
 * made, functions and arrays of the current context, texture and surface
 * objects it made there.  Other kinds the driver checks.
 */
static int32_t generic_handles(struct pvgpu_exec *ex,
			       const struct pvgpu_generic_fn *f, const uint64_t *a)
{
	CUfunction fn;

	for (uint32_t i = 0; i < f->nargs; i++) {
		const struct pvgpu_generic_arg *g = &f->args[i];

		if (g->kind != PVGPU_GA_HIN && g->kind != PVGPU_GA_HDEL)
			continue;
		switch (g->size) {
		case PVGPU_GH_FUNC:
			if (to_function(ex, a[i], &fn))
				return CUDA_ERROR_INVALID_HANDLE;
			break;
		case PVGPU_GH_EVENT:
			if (!handle_find(ex, a[i], CUDA_EVENT))
				return CUDA_ERROR_INVALID_HANDLE;
			break;
		case PVGPU_GH_ARRAY:
			if (!handle_here(ex, a[i], CUDA_ARRAY))
				return CUDA_ERROR_INVALID_HANDLE;
			break;
		case PVGPU_GH_TEX:
		case PVGPU_GH_SURF:
			if (!obj_find(ex, a[i], g->size == PVGPU_GH_SURF))
				return CUDA_ERROR_INVALID_HANDLE;
			break;
		}
	}
	return CUDA_SUCCESS;
}

/* What a destroy took away leaves the records too: an array or an event
 * when the driver destroyed it, an object whatever it said (the session forgets
 * it either way). */
static void generic_destroyed(struct pvgpu_exec *ex,
			      const struct pvgpu_generic_fn *f,
			      const uint64_t *a, int32_t rc)
{
	struct cuda_handle *e;
	struct cuda_obj *o;

	for (uint32_t i = 0; i < f->nargs; i++) {
		const struct pvgpu_generic_arg *g = &f->args[i];

		if (g->kind != PVGPU_GA_HDEL)
			continue;
		if (g->size == PVGPU_GH_ARRAY && !rc &&
		    (e = handle_here(ex, a[i], CUDA_ARRAY)))
			handle_remove(ex, e);
		if ((g->size == PVGPU_GH_TEX || g->size == PVGPU_GH_SURF) &&
		    (o = obj_find(ex, a[i], g->size == PVGPU_GH_SURF)))
			*o = ex->objs[--ex->nobjs];
		if (g->size == PVGPU_GH_EVENT && !rc &&
		    (e = handle_find(ex, a[i], CUDA_EVENT)))
			handle_remove(ex, e);
	}
}

/* Events a call made go in the table (or are destroyed again), as those of
 * IPC do: a later call names only events the table knows. */
static int32_t generic_created(struct pvgpu_exec *ex,
			       const struct pvgpu_generic_fn *f, uint64_t *a)
{
	int32_t rc = CUDA_SUCCESS;

	for (uint32_t i = 0; i < f->nargs; i++) {
		const struct pvgpu_generic_arg *g = &f->args[i];

		if (g->kind == PVGPU_GA_HNEW && g->size == PVGPU_GH_EVENT &&
		    a[i] && event_keep(ex, to_event(a[i]), &a[i]))
			rc = CUDA_ERROR_OUT_OF_MEMORY;
	}
	return rc;
}

/*
 * A device argument of a generic call: the current context's, as the
 * worker checked; the driver gets that context's own device (defence in
 * depth: another index is refused here too).
 */
static int32_t generic_device(struct pvgpu_exec *ex, uint64_t *a)
{
	struct cuda_ctx *c = ctx_find(ex, ex->cur);
	CUdevice d;

	if (!c)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (*a > INT32_MAX || to_device(ex, (int32_t)*a, &d) || d != c->dev)
		return CUDA_ERROR_INVALID_DEVICE;
	*a = (uint64_t)c->dev;
	return CUDA_SUCCESS;
}

/* build/gen/exec_cuda_generic.c */
int32_t pvgpu_cuda_generic_invoke(void *fp, const struct pvgpu_generic_fn *f,
				  uint64_t *a);

/* The stream and device arguments of a generic call, checked and made
 * the driver's. */
static int32_t generic_places(struct pvgpu_exec *ex,
			      const struct pvgpu_generic_fn *f, uint64_t *a)
{
	CUstream st;
	int32_t rc;

	for (uint32_t i = 0; i < f->nargs; i++) {
		if (f->args[i].kind == PVGPU_GA_DEVICE) {
			rc = generic_device(ex, &a[i]);
			if (rc)
				return rc;
		}
		if (f->args[i].kind != PVGPU_GA_STREAM)
			continue;
		rc = to_stream(ex, a[i], &st);
		if (rc)
			return rc;
		a[i] = (uint64_t)(uintptr_t)st;
	}
	return CUDA_SUCCESS;
}

static int32_t cuda_driver_call(struct pvgpu_exec *ex,
				const struct pvgpu_generic_fn *f, uint64_t *a)
{
	struct cuda_generic *g;
	int32_t rc;

	if (!ex || !f || f->id > PVGPU_GENERIC_MAX_ID)
		return CUDA_ERROR_INVALID_VALUE;
	if (!ex->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (PVGPU_GA_HAS(f, PVGPU_GA_BIT(DEVICE) | PVGPU_GA_BIT(STREAM))) {
		rc = generic_places(ex, f, a);
		if (rc)
			return rc;
	}
	g = &ex->generic[f->id];
	if (!g->tried) {
		/* The exported name the annotation gives (e.g. ..._v2). */
		g->fp = dlsym(ex->lib, f->name);
		g->sets_kernels = changes_kernels(f->name);
		g->tried = true;
	}
	if (!g->fp)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (g->sets_kernels)
		run_graphs_drop(ex, 0);
	rc = PVGPU_GA_HAS(f, PVGPU_GA_BIT(HIN) | PVGPU_GA_BIT(HDEL)) ?
	     generic_handles(ex, f, a) : CUDA_SUCCESS;
	if (rc)
		return rc;
	if (f->id == PVGPU_GENERIC_cuMemRelease) {
		uint64_t mem = a[0];
		int32_t rc = pvgpu_cuda_generic_invoke(g->fp, f, a);

		/* An exported descriptor outlives the handle (importers may
		 * still come), but no later handle of that value is it. */
		for (unsigned int i = 0; !rc && i < ex->nvmm_fds; i++)
			if (ex->vmm_fds[i].mem == mem)
				ex->vmm_fds[i].mem = 0;
		return rc;
	}
	rc = pvgpu_cuda_generic_invoke(g->fp, f, a);
	if (PVGPU_GA_HAS(f, PVGPU_GA_BIT(HDEL)))
		generic_destroyed(ex, f, a, rc);
	if (rc || !PVGPU_GA_HAS(f, PVGPU_GA_BIT(HNEW)))
		return rc;
	return generic_created(ex, f, a);
}

/* The driver's JIT options from the checked ones in l: the log buffers are
 * l's own. */
static void jit_options(struct pvgpu_link *l, CUjit_option *keys, void **vals)
{
	for (uint32_t i = 0; i < l->nopts; i++) {
		keys[i] = (CUjit_option)l->opt_key[i];
		vals[i] = keys[i] == CU_JIT_INFO_LOG_BUFFER ? (void *)l->info_log :
			  keys[i] == CU_JIT_ERROR_LOG_BUFFER ? (void *)l->error_log :
			  (void *)(uintptr_t)l->opt_value[i];
	}
}

/* Results: what the driver wrote over the values (a float's bits for the
 * wall time, sizes for the logs). */
static void jit_results(struct pvgpu_link *l, const CUjit_option *keys, void *const *vals)
{
	for (uint32_t i = 0; i < l->nopts; i++) {
		if (keys[i] == CU_JIT_INFO_LOG_BUFFER || keys[i] == CU_JIT_ERROR_LOG_BUFFER)
			l->opt_value[i] = 0;
		else
			l->opt_value[i] = (uint64_t)(uintptr_t)vals[i];
	}
}

/* JIT linking: NVIDIA's linker in the current context, the worker having
 * checked every option (session/link.c); the log buffers are ours. */
static int32_t link_image(struct pvgpu_exec *ex, struct pvgpu_link *l)
{
	CUresult (*create)(unsigned int, CUjit_option *, void **, CUlinkState *);
	CUresult (*add)(CUlinkState, CUjitInputType, void *, size_t, const char *,
			unsigned int, CUjit_option *, void **);
	CUresult (*complete)(CUlinkState, void **, size_t *);
	CUresult (*destroy)(CUlinkState);
	CUjit_option keys[PVGPU_LINK_MAX_OPTS];
	void *vals[PVGPU_LINK_MAX_OPTS];
	CUlinkState state;
	const uint8_t *p;
	void *out = NULL;
	size_t size = 0;
	CUresult r;

	if (!ex || !l || l->nopts > PVGPU_LINK_MAX_OPTS)
		return CUDA_ERROR_INVALID_VALUE;
	if (!ex->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	*(void **)&create = dlsym(ex->lib, "cuLinkCreate_v2");
	*(void **)&add = dlsym(ex->lib, "cuLinkAddData_v2");
	*(void **)&complete = dlsym(ex->lib, "cuLinkComplete");
	*(void **)&destroy = dlsym(ex->lib, "cuLinkDestroy");
	if (!create || !add || !complete || !destroy)
		return CUDA_ERROR_NOT_SUPPORTED;
	jit_options(l, keys, vals);
	r = create(l->nopts, keys, vals, &state);
	if (r)
		return r;
	p = l->data;
	for (uint32_t i = 0; i < l->ninputs && !r; i++) {
		r = add(state, (CUjitInputType)l->input_type[i], (void *)p,
			(size_t)l->input_size[i], "input", 0, NULL, NULL);
		p += l->input_size[i];
	}
	if (!r)
		r = complete(state, &out, &size);
	if (!r) {
		l->image = malloc(size);
		if (l->image)
			memcpy(l->image, out, size);
		l->image_size = l->image ? size : 0;
		r = l->image ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
	}
	jit_results(l, keys, vals);
	destroy(state);
	return r;
}

/* cuModuleLoadDataEx of PTX, with the options as the guest gave them. */
static int32_t load_ptx(struct pvgpu_exec *ex, struct pvgpu_link *l,
			uint64_t *module)
{
	CUresult (*load)(CUmodule *, const void *, unsigned int, CUjit_option *, void **);
	CUjit_option keys[PVGPU_LINK_MAX_OPTS];
	void *vals[PVGPU_LINK_MAX_OPTS];
	CUmodule m;
	CUresult r;

	if (!ex || !l || l->nopts > PVGPU_LINK_MAX_OPTS || l->ninputs != 1 || !module)
		return CUDA_ERROR_INVALID_VALUE;
	if (!ex->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	*(void **)&load = dlsym(ex->lib, "cuModuleLoadDataEx");
	if (!load)
		return CUDA_ERROR_NOT_SUPPORTED;
	jit_options(l, keys, vals);
	r = load(&m, l->data, l->nopts, keys, vals);
	jit_results(l, keys, vals);
	return r ? (int32_t)r : module_keep(ex, m, module);
}

static int32_t cuda_link(struct pvgpu_exec *ex, struct pvgpu_link *l,
			 uint64_t *module)
{
	return module ? load_ptx(ex, l, module) : link_image(ex, l);
}

/* Registered host memory's device address (UVA: usually the same). */
static int32_t cuda_host_device_pointer(struct pvgpu_exec *ex, void *p, uint64_t *dptr)
{
	CUresult (*get)(CUdeviceptr *, void *, unsigned int);
	CUdeviceptr d = 0;
	CUresult r;

	if (!ex || !p || !dptr)
		return CUDA_ERROR_INVALID_VALUE;
	if (!ex->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	*(void **)&get = dlsym(ex->lib, "cuMemHostGetDevicePointer_v2");
	if (!get)
		return CUDA_ERROR_NOT_SUPPORTED;
	r = get(&d, p, 0);
	*dptr = d;
	return r;
}

/* CUDA IPC, through the driver's own calls (session/ipc.c checks). */
static int32_t cuda_ipc_get(struct pvgpu_exec *ex, uint64_t dptr, uint8_t handle[64])
{
	CUresult (*get)(CUipcMemHandle *, CUdeviceptr);
	CUipcMemHandle h;
	CUresult r;

	if (!ex || !ex->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	*(void **)&get = dlsym(ex->lib, "cuIpcGetMemHandle");
	if (!get)
		return CUDA_ERROR_NOT_SUPPORTED;
	r = get(&h, (CUdeviceptr)dptr);
	if (!r)
		memcpy(handle, h.reserved, 64);
	return r;
}

static int32_t cuda_ipc_open(struct pvgpu_exec *ex, const uint8_t handle[64],
			     uint32_t flags, uint64_t *dptr)
{
	CUresult (*open)(CUdeviceptr *, CUipcMemHandle, unsigned int);
	CUipcMemHandle h;
	CUdeviceptr d = 0;
	CUresult r;

	if (!ex || !ex->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	*(void **)&open = dlsym(ex->lib, "cuIpcOpenMemHandle_v2");
	if (!open)
		return CUDA_ERROR_NOT_SUPPORTED;
	memcpy(h.reserved, handle, 64);
	r = open(&d, h, flags);
	*dptr = d;
	return r;
}

static int32_t cuda_ipc_close(struct pvgpu_exec *ex, uint64_t dptr)
{
	CUresult (*close_)(CUdeviceptr);

	if (!ex || !ex->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	*(void **)&close_ = dlsym(ex->lib, "cuIpcCloseMemHandle");
	return close_ ? close_((CUdeviceptr)dptr) : CUDA_ERROR_NOT_SUPPORTED;
}

/* CUDA IPC of events: an event of this executor's, made interprocess. */
static int32_t cuda_ipc_event_get(struct pvgpu_exec *ex, uint64_t event, uint8_t handle[64])
{
	CUresult (*get)(CUipcEventHandle *, CUevent);
	CUipcEventHandle h;
	CUresult r;

	if (!ex)
		return CUDA_ERROR_INVALID_VALUE;
	if (!handle_find(ex, event, CUDA_EVENT))
		return CUDA_ERROR_INVALID_HANDLE;
	*(void **)&get = dlsym(ex->lib, "cuIpcGetEventHandle");
	if (!get)
		return CUDA_ERROR_NOT_SUPPORTED;
	r = get(&h, to_event(event));
	if (!r)
		memcpy(handle, h.reserved, 64);
	return r;
}

static int32_t cuda_ipc_event_open(struct pvgpu_exec *ex, const uint8_t handle[64],
				   uint64_t *event)
{
	CUresult (*open)(CUevent *, CUipcEventHandle);
	CUipcEventHandle h;
	CUevent e = NULL;
	CUresult r;

	if (!ex || !ex->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	*(void **)&open = dlsym(ex->lib, "cuIpcOpenEventHandle");
	if (!open)
		return CUDA_ERROR_NOT_SUPPORTED;
	memcpy(h.reserved, handle, 64);
	r = open(&e, h);
	return r ? (int32_t)r : event_keep(ex, e, event);
}

/*
 * VMM shareable handles between workers: the driver's POSIX file
 * descriptor stays open in the exporting worker (until it ends; one per
 * physical memory, at most CUDA_MAX_VMM_EXPORTS), and the handle names the
 * worker and descriptor; an importing worker (of the same
 * VM: the registry sees to it) takes a copy with pidfd_getfd(2).  That
 * needs ptrace access to the exporter, which Yama's ptrace_scope 1 grants
 * only to ancestors and named tracers: the exporter names pvgpud, so
 * pvgpud's workers (its descendants) may, and no other process.
 */
#define CUDA_VMM_HANDLE	"pvgpu-cuda-vmm"
static int32_t cuda_vmm_export(struct pvgpu_exec *ex, uint64_t mem, uint8_t handle[64])
{
	CUresult (*export_)(void *, CUmemGenericAllocationHandle, CUmemAllocationHandleType,
			    unsigned long long);
	unsigned int i;
	int fd = -1;
	CUresult r;

	if (!ex)
		return CUDA_ERROR_INVALID_VALUE;
	/* Exported before: the same descriptor. */
	for (i = 0; i < ex->nvmm_fds && ex->vmm_fds[i].mem != mem; i++)
		;
	if (i < ex->nvmm_fds) {
		fd = ex->vmm_fds[i].fd;
		goto out;
	}
	if (ex->nvmm_fds == CUDA_MAX_VMM_EXPORTS)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*(void **)&export_ = dlsym(ex->lib, "cuMemExportToShareableHandle");
	if (!export_)
		return CUDA_ERROR_NOT_SUPPORTED;
	r = export_(&fd, (CUmemGenericAllocationHandle)mem,
		    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
	if (r)
		return r;
	ex->vmm_fds[ex->nvmm_fds].mem = mem;
	ex->vmm_fds[ex->nvmm_fds++].fd = fd;
	if (prctl(PR_SET_PTRACER, (unsigned long)getppid(), 0, 0, 0) && errno != EINVAL)
		log_debug("vmm export: PR_SET_PTRACER: %s", strerror(errno));
out:
	memset(handle, 0, 64);
	snprintf((char *)handle, 64, CUDA_VMM_HANDLE " %d %d", (int)getpid(), fd);
	return CUDA_SUCCESS;
}

static int32_t cuda_vmm_import(struct pvgpu_exec *ex, const uint8_t handle[64],
			       uint64_t *mem, uint64_t *size)
{
	CUresult (*import_)(CUmemGenericAllocationHandle *, void *, CUmemAllocationHandleType);
	CUmemGenericAllocationHandle h = 0;
	char text[64];
	int pid, fd, pidfd, copy;
	CUresult r;

	if (!ex || !ex->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	memcpy(text, handle, sizeof(text));
	text[63] = '\0';
	if (sscanf(text, CUDA_VMM_HANDLE " %d %d", &pid, &fd) != 2)
		return CUDA_ERROR_INVALID_VALUE;
	*(void **)&import_ = dlsym(ex->lib, "cuMemImportFromShareableHandle");
	if (!import_)
		return CUDA_ERROR_NOT_SUPPORTED;
	pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	copy = pidfd < 0 ? -1 : (int)syscall(SYS_pidfd_getfd, pidfd, fd, 0);
	if (copy < 0) {
		if (!ex->vmm_import_said)
			log_warn("vmm import: cannot take the exporting worker's descriptor: %s (said once per session)",
				 strerror(errno));
		ex->vmm_import_said = 1;
		if (pidfd >= 0)
			close(pidfd);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	close(pidfd);
	r = import_(&h, (void *)(uintptr_t)copy, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
	close(copy);
	if (r)
		return r;
	*mem = (uint64_t)h;
	*size = 0;	/* the registry's (the exporter's cuMemCreate size) */
	return CUDA_SUCCESS;
}

/* Sharing with other workers, by kind (executor.h share_get/open). */
static int32_t cuda_share_get(struct pvgpu_exec *ex, enum pvgpu_ipc_kind kind,
			     uint64_t value, uint8_t handle[64])
{
	switch (kind) {
	case PVGPU_IPC_MEM:
		return cuda_ipc_get(ex, value, handle);
	case PVGPU_IPC_EVENT:
		return cuda_ipc_event_get(ex, value, handle);
	case PVGPU_IPC_VMM:
		return cuda_vmm_export(ex, value, handle);
	}
	return CUDA_ERROR_INVALID_VALUE;
}

static int32_t cuda_share_open(struct pvgpu_exec *ex, enum pvgpu_ipc_kind kind,
			      const uint8_t handle[64], uint32_t flags,
			      uint64_t *value, uint64_t *size)
{
	switch (kind) {
	case PVGPU_IPC_MEM:
		return cuda_ipc_open(ex, handle, flags, value);
	case PVGPU_IPC_EVENT:
		return cuda_ipc_event_open(ex, handle, value);
	case PVGPU_IPC_VMM:
		return cuda_vmm_import(ex, handle, value, size);
	}
	return CUDA_ERROR_INVALID_VALUE;
}

/* ------------------------------------------------------------------ */
/*
 * Suspend and resume (executor.h checkpoint): NVIDIA's process
 * checkpoint API, called in the supervisor's checkpointer on the worker's
 * pid.  Lock waits (at most the timeout) for a driver call the worker is
 * in to return and then blocks its next ones; Checkpoint copies its GPU
 * memory into its host memory and releases its GPU resources; Restore
 * and Unlock undo both.  The checkpointer initialises the driver itself
 * (Restore needs cuInit in the caller, or persistence mode), with no
 * context of its own.
 */
struct cuda_ckpt_api {
	CUresult (CUDAAPI *init)(unsigned int);
	CUresult (CUDAAPI *get_error_name)(CUresult, const char **);
	CUresult (CUDAAPI *lock)(int, CUcheckpointLockArgs *);
	CUresult (CUDAAPI *checkpoint)(int, CUcheckpointCheckpointArgs *);
	CUresult (CUDAAPI *restore)(int, CUcheckpointRestoreArgs *);
	CUresult (CUDAAPI *unlock)(int, CUcheckpointUnlockArgs *);
	CUresult (CUDAAPI *get_state)(int, CUprocessState *);
};

static int cuda_ckpt_load(struct cuda_ckpt_api *api, char *err, size_t errlen)
{
	void *lib = dlopen(CUDA_LIB, RTLD_NOW | RTLD_LOCAL);
	CUresult rc;

	if (!lib) {
		snprintf(err, errlen, "%s: %s", CUDA_LIB, dlerror());
		return -1;
	}
	*(void **)&api->init = dlsym(lib, "cuInit");
	*(void **)&api->get_error_name = dlsym(lib, "cuGetErrorName");
	*(void **)&api->lock = dlsym(lib, "cuCheckpointProcessLock");
	*(void **)&api->checkpoint = dlsym(lib, "cuCheckpointProcessCheckpoint");
	*(void **)&api->restore = dlsym(lib, "cuCheckpointProcessRestore");
	*(void **)&api->unlock = dlsym(lib, "cuCheckpointProcessUnlock");
	*(void **)&api->get_state = dlsym(lib, "cuCheckpointProcessGetState");
	if (!api->init || !api->get_error_name || !api->lock ||
	    !api->checkpoint || !api->restore || !api->unlock ||
	    !api->get_state) {
		snprintf(err, errlen, "this driver has no process checkpoint API (cuCheckpointProcess*)");
		return -1;
	}
	rc = api->init(0);
	if (rc != CUDA_SUCCESS) {
		snprintf(err, errlen, "cuInit: CUresult %d", (int)rc);
		return -1;
	}
	return 0;
}

static void cuda_ckpt_said(const struct cuda_ckpt_api *api, const char *what,
			   CUresult rc, char *err, size_t errlen)
{
	const char *name = NULL;

	if (api->get_error_name(rc, &name) != CUDA_SUCCESS || !name)
		name = "?";
	snprintf(err, errlen, "%s: %s (%d)", what, name, (int)rc);
}

static int cuda_suspend(pid_t pid, uint64_t timeout_ms,
			void (*touched)(void *), void *arg, char *err,
			size_t errlen)
{
	struct cuda_ckpt_api api;
	CUcheckpointLockArgs lock = {
		.timeoutMs = timeout_ms > UINT_MAX ? UINT_MAX :
			     (unsigned int)(timeout_ms ? timeout_ms : 1),
	};
	CUcheckpointCheckpointArgs ck = { { 0 } };
	CUcheckpointUnlockArgs un = { { 0 } };
	CUresult rc;

	if (cuda_ckpt_load(&api, err, errlen))
		return -1;
	/* At its timeout Lock leaves the process running: as it was. */
	rc = api.lock((int)pid, &lock);
	if (rc != CUDA_SUCCESS) {
		cuda_ckpt_said(&api, "cuCheckpointProcessLock", rc, err, errlen);
		return -1;
	}
	touched(arg);
	rc = api.checkpoint((int)pid, &ck);
	if (rc == CUDA_SUCCESS)
		return 0;
	cuda_ckpt_said(&api, "cuCheckpointProcessCheckpoint", rc, err, errlen);
	/* Its memory still on the GPU: unlocked, it is as it was. */
	return api.unlock((int)pid, &un) == CUDA_SUCCESS ? -1 : -2;
}

static int cuda_resume(pid_t pid, uint64_t timeout_ms,
		       void (*touched)(void *), void *arg, char *err,
		       size_t errlen)
{
	struct cuda_ckpt_api api;
	CUcheckpointRestoreArgs rs;
	CUcheckpointUnlockArgs un = { { 0 } };
	CUprocessState st;
	CUresult rc;

	(void)timeout_ms;	/* the supervisor's deadline bounds Restore */
	memset(&rs, 0, sizeof(rs));
	if (cuda_ckpt_load(&api, err, errlen))
		return -1;
	rc = api.get_state((int)pid, &st);
	if (rc != CUDA_SUCCESS || st != CU_PROCESS_STATE_CHECKPOINTED) {
		if (rc != CUDA_SUCCESS)
			cuda_ckpt_said(&api, "cuCheckpointProcessGetState", rc, err, errlen);
		else
			snprintf(err, errlen, "the worker is in process state %d, not checkpointed",
				 (int)st);
		return -1;
	}
	touched(arg);
	rc = api.restore((int)pid, &rs);
	if (rc != CUDA_SUCCESS) {
		cuda_ckpt_said(&api, "cuCheckpointProcessRestore", rc, err, errlen);
		/* Not enough GPU memory, say: still checkpointed, as it was. */
		return api.get_state((int)pid, &st) == CUDA_SUCCESS &&
		       st == CU_PROCESS_STATE_CHECKPOINTED ? -1 : -2;
	}
	rc = api.unlock((int)pid, &un);
	if (rc != CUDA_SUCCESS) {
		cuda_ckpt_said(&api, "cuCheckpointProcessUnlock", rc, err, errlen);
		return -2;
	}
	return 0;
}

static int cuda_checkpoint(pid_t pid, bool restore, uint64_t timeout_ms,
			   void (*touched)(void *), void *arg, char *err,
			   size_t errlen)
{
	return (restore ? cuda_resume : cuda_suspend)(pid, timeout_ms, touched,
						      arg, err, errlen);
}

const struct pvgpu_executor_ops pvgpu_exec_cuda = {
	.name			= "cuda",
	.takes_runs		= true,
	.open			= cuda_open,
	.close			= cuda_close,
	.driver_info		= cuda_driver_info,
	.device_attribute	= cuda_device_attribute,
	.device_info		= cuda_device_info,
	.ctx_create		= cuda_ctx_create,
	.ctx_destroy		= cuda_ctx_destroy,
	.ctx_set		= cuda_ctx_set,
	.mem_alloc		= cuda_mem_alloc,
	.mem_free		= cuda_mem_free,
	.mem_get_info		= cuda_mem_get_info,
	.host_alloc		= cuda_host_alloc,
	.host_register		= cuda_host_register,
	.host_release		= cuda_host_release,
	.copy			= cuda_copy,
	.memset_async		= cuda_memset_async,
	.stream_create		= cuda_stream_create,
	.stream_destroy		= cuda_stream_destroy,
	.synchronize		= cuda_synchronize,
	.module_load		= cuda_module_load,
	.module_unload		= cuda_module_unload,
	.module_symbol		= cuda_module_symbol,
	.module_function_names	= cuda_module_function_names,
	.function_params	= cuda_function_params,
	.launch			= cuda_launch,
	.max_clusters		= cuda_max_clusters,
	.peer_attribute		= cuda_peer_attribute,
	.peer_access		= cuda_peer_access,
	.array_create		= cuda_array_create,
	.tex_create		= cuda_tex_create,
	.tensor_map_encode	= cuda_tensor_map_encode,
	.driver_call		= cuda_driver_call,
	.link			= cuda_link,
	.host_device_pointer	= cuda_host_device_pointer,
	.share_get		= cuda_share_get,
	.share_open		= cuda_share_open,
	.ipc_close		= cuda_ipc_close,
	.graph_add_node		= cuda_graph_add_node,
	.graph_kernel_node_set	= cuda_graph_kernel_node_set,
	.graph_add_deps		= cuda_graph_add_deps,
	.graph_nodes		= cuda_graph_nodes,
	.graph_exec_update	= cuda_graph_exec_update,
	.capture_info		= cuda_capture_info,
	.capture_deps		= cuda_capture_deps,
	.capture_to_graph	= cuda_capture_to_graph,
	.clone_node		= cuda_clone_node,
	.mem_async		= cuda_mem_async,
	.cond_handle		= cuda_cond_handle,
	.checkpoint		= cuda_checkpoint,
};
