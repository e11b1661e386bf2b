"""What cuda.h cannot say about pvgpu's libcuda.so.1 surface.

Every cu* function of CUDA 13.0's cuda.h (and every name NVIDIA's driver-580
libcuda.so.1 exports, protocol/api/libcuda580.nm when present) is exported by
build/lib/libcuda.so.1 as one of three kinds:

forwarded  hand-written in guest-lib/cuda/*.c over the protocol's ops
local      hand-written in guest-lib/cuda/*.c, answered in the guest
(neither)  generated: returns CUDA_ERROR_NOT_SUPPORTED and, with
PVGPU_DEBUG set, says so naming the function

The linker keeps the two lists honest: a name listed here without a
definition in guest-lib/cuda/ fails the link (-z defs), and a definition of
a name not listed here collides with its generated stub.
"""

FORWARDED = """
cuInit
cuDeviceTotalMem_v2
cuDevicePrimaryCtxRetain
cuDevicePrimaryCtxReset cuDevicePrimaryCtxReset_v2
cuCtxCreate cuCtxCreate_v2  cuCtxCreate_v4
cuCtxDestroy cuCtxDestroy_v2
cuCtxSynchronize cuCtxSynchronize_v2
cuMemAlloc_v2  cuMemFree_v2
cuMemGetInfo_v2
cuMemAllocHost_v2 cuMemHostAlloc cuMemFreeHost
cuMemcpy cuMemcpy_ptds cuMemcpyAsync cuMemcpyAsync_ptsz
cuMemcpyHtoD_v2 cuMemcpyHtoD_v2_ptds
cuMemcpyDtoH_v2 cuMemcpyDtoH_v2_ptds
cuMemcpyDtoD_v2 cuMemcpyDtoD_v2_ptds
cuMemcpyHtoDAsync_v2 cuMemcpyHtoDAsync_v2_ptsz
cuMemcpyDtoHAsync_v2 cuMemcpyDtoHAsync_v2_ptsz
cuMemcpyDtoDAsync_v2 cuMemcpyDtoDAsync_v2_ptsz
cuMemcpyPeer cuMemcpyPeer_ptds cuMemcpyPeerAsync cuMemcpyPeerAsync_ptsz
cuDeviceCanAccessPeer cuDeviceGetP2PAttribute
cuCtxEnablePeerAccess cuCtxDisablePeerAccess
cuMemsetD8_v2 cuMemsetD8_v2_ptds
cuMemsetD16_v2 cuMemsetD16_v2_ptds
cuMemsetD32_v2 cuMemsetD32_v2_ptds
cuMemcpy2D_v2 cuMemcpy2D_v2_ptds cuMemcpy2DUnaligned_v2 cuMemcpy2DUnaligned_v2_ptds
cuMemcpy2DAsync_v2 cuMemcpy2DAsync_v2_ptsz
cuMemcpy3D_v2 cuMemcpy3D_v2_ptds cuMemcpy3DAsync_v2 cuMemcpy3DAsync_v2_ptsz
cuArrayCreate_v2 cuArray3DCreate_v2
cuTexObjectCreate cuSurfObjectCreate
cuTensorMapEncodeTiled cuTensorMapEncodeIm2col
cuMemcpyHtoA_v2 cuMemcpyHtoA_v2_ptds cuMemcpyHtoAAsync_v2 cuMemcpyHtoAAsync_v2_ptsz
cuMemcpyAtoH_v2 cuMemcpyAtoH_v2_ptds cuMemcpyAtoHAsync_v2 cuMemcpyAtoHAsync_v2_ptsz
cuMemcpyDtoA_v2 cuMemcpyDtoA_v2_ptds cuMemcpyAtoD_v2 cuMemcpyAtoD_v2_ptds
cuMemcpyAtoA_v2 cuMemcpyAtoA_v2_ptds
cuMemsetD8Async cuMemsetD8Async_ptsz
cuMemsetD16Async cuMemsetD16Async_ptsz
cuMemsetD32Async cuMemsetD32Async_ptsz
cuStreamCreate cuStreamCreateWithPriority
cuStreamDestroy cuStreamDestroy_v2
cuStreamSynchronize cuStreamSynchronize_ptsz
cuModuleLoad cuModuleLoadData cuModuleLoadDataEx cuModuleLoadFatBinary cuModuleUnload
cuModuleGetFunction  cuModuleGetGlobal_v2
cuModuleGetFunctionCount cuModuleEnumerateFunctions
cuLibraryLoadData cuLibraryUnload cuLibraryGetKernel cuLibraryGetModule
cuLibraryGetGlobal
cuKernelGetFunction cuKernelGetAttribute cuKernelSetAttribute
cuFuncSetCacheConfig
cuKernelSetCacheConfig
cuLaunchKernel cuLaunchKernel_ptsz cuLaunchKernelEx cuLaunchKernelEx_ptsz
cuLaunchCooperativeKernel cuLaunchCooperativeKernel_ptsz
cuLaunchCooperativeKernelMultiDevice
cuOccupancyMaxActiveClusters
cuOccupancyMaxActiveBlocksPerMultiprocessor
cuMemAllocPitch_v2
cuMemsetD2D8_v2 cuMemsetD2D8_v2_ptds cuMemsetD2D8Async cuMemsetD2D8Async_ptsz
cuMemsetD2D16_v2 cuMemsetD2D16_v2_ptds cuMemsetD2D16Async cuMemsetD2D16Async_ptsz
cuMemsetD2D32_v2 cuMemsetD2D32_v2_ptds cuMemsetD2D32Async cuMemsetD2D32Async_ptsz
cuMemAllocAsync cuMemAllocAsync_ptsz cuMemFreeAsync cuMemFreeAsync_ptsz
cuStreamBeginCaptureToGraph cuStreamBeginCaptureToGraph_ptsz cuGraphNodeFindInClone
cuMemAllocFromPoolAsync cuMemAllocFromPoolAsync_ptsz
cuLinkCreate cuLinkCreate_v2 cuLinkAddData cuLinkAddData_v2 cuLinkAddFile
cuLinkAddFile_v2 cuLinkComplete cuLinkDestroy
cuIpcGetMemHandle cuIpcOpenMemHandle cuIpcOpenMemHandle_v2 cuIpcCloseMemHandle
cuIpcGetEventHandle cuIpcOpenEventHandle
cuMemExportToShareableHandle cuMemImportFromShareableHandle
cuMemPoolExportPointer cuMemPoolImportPointer
cuGraphAddKernelNode cuGraphAddKernelNode_v2 cuGraphAddMemcpyNode cuGraphAddMemsetNode
cuGraphAddEmptyNode cuGraphAddNode cuGraphAddNode_v2
cuGraphAddDependencies cuGraphAddDependencies_v2
cuGraphNodeGetType cuGraphGetNodes
cuGraphKernelNodeGetParams cuGraphKernelNodeGetParams_v2
cuGraphKernelNodeSetParams cuGraphKernelNodeSetParams_v2
cuGraphExecKernelNodeSetParams cuGraphExecKernelNodeSetParams_v2
cuGraphExecUpdate cuGraphExecUpdate_v2 cuGraphAddHostNode
cuStreamGetCaptureInfo cuStreamGetCaptureInfo_ptsz cuStreamGetCaptureInfo_v2
cuStreamGetCaptureInfo_v2_ptsz cuStreamGetCaptureInfo_v3 cuStreamGetCaptureInfo_v3_ptsz
cuStreamUpdateCaptureDependencies cuStreamUpdateCaptureDependencies_ptsz
cuStreamUpdateCaptureDependencies_v2 cuStreamUpdateCaptureDependencies_v2_ptsz
cuGraphAddMemAllocNode cuGraphAddMemFreeNode
cuGraphConditionalHandleCreate
cuMemAllocManaged
"""

LOCAL = """
cuGetErrorName cuGetErrorString
cuTexObjectGetResourceDesc cuTexObjectGetTextureDesc cuTexObjectGetResourceViewDesc
cuSurfObjectGetResourceDesc
cuDriverGetVersion
cuDeviceGet cuDeviceGetCount cuDeviceGetName cuDeviceGetUuid cuDeviceGetUuid_v2
cuDeviceGetAttribute cuDeviceGetLuid cuDeviceComputeCapability cuDeviceGetProperties
cuDeviceGetPCIBusId cuDeviceGetByPCIBusId
cuDeviceGetDefaultMemPool cuDeviceGetMemPool
cuDevicePrimaryCtxRelease cuDevicePrimaryCtxRelease_v2
cuDevicePrimaryCtxSetFlags cuDevicePrimaryCtxSetFlags_v2
cuDevicePrimaryCtxGetState
cuCtxGetCurrent cuCtxSetCurrent cuCtxPushCurrent cuCtxPushCurrent_v2
cuCtxPopCurrent cuCtxPopCurrent_v2 cuCtxGetDevice cuCtxGetDevice_v2
cuCtxGetFlags cuCtxSetFlags cuCtxGetApiVersion cuCtxGetId
cuCtxGetSharedMemConfig cuCtxSetSharedMemConfig
cuCtxGetExecAffinity
cuFuncGetParamInfo cuKernelGetParamInfo cuFuncGetName cuKernelGetName
cuFuncGetModule cuFuncIsLoaded cuFuncLoad 
cuModuleGetLoadingMode

cuStreamGetFlags cuStreamGetFlags_ptsz cuStreamGetPriority cuStreamGetPriority_ptsz
cuStreamGetCtx cuStreamGetCtx_ptsz cuStreamGetCtx_v2 cuStreamGetCtx_v2_ptsz
cuStreamGetId cuStreamGetId_ptsz cuStreamGetDevice cuStreamGetDevice_ptsz cuStreamGetGreenCtx
cuGraphMemAllocNodeGetParams cuGraphMemFreeNodeGetParams
cuStreamAddCallback cuStreamAddCallback_ptsz cuLaunchHostFunc cuLaunchHostFunc_ptsz
cuPointerGetAttribute cuPointerGetAttributes  cuMemGetAddressRange_v2
cuArrayGetDescriptor_v2 cuArray3DGetDescriptor_v2
cuMemHostRegister cuMemHostRegister_v2 cuMemHostUnregister
cuMemHostGetDevicePointer_v2 cuMemHostGetFlags
cuGetProcAddress cuGetProcAddress_v2 cuGetExportTable

cuThreadExchangeStreamCaptureMode
cuOccupancyMaxPotentialBlockSize cuOccupancyMaxPotentialBlockSizeWithFlags
cuDeviceSetMemPool cuMemPoolCreate cuMemPoolDestroy cuMemPoolSetAttribute
cuMemPoolGetAttribute cuMemPoolTrimTo cuMemPoolSetAccess cuMemPoolGetAccess
cuMemPrefetchAsync cuMemPrefetchAsync_ptsz cuMemPrefetchAsync_v2 cuMemPrefetchAsync_v2_ptsz
cuMemAdvise cuMemAdvise_v2 cuMemRangeGetAttribute cuMemRangeGetAttributes
cuStreamAttachMemAsync cuStreamAttachMemAsync_ptsz
cuMemPoolExportToShareableHandle cuMemPoolImportFromShareableHandle
"""

# Forwarded by the generic driver call (protocol/api/gen_generic.py): one
# line each, no hand-written code.  `ID NAME ARG... [async]`: ID numbers the
# call on the wire (never reused; a _ptsz/_ptds variant or a legacy name
# shares its function's ID); each ARG is the parameter's type as cuda.h
# spells it, in order.  A type ending in `*` is a result the backend writes
# back; CUstream is a stream handle (translated and checked by the worker);
# CUdeviceptr@N is N bytes of device memory, which must lie inside one of
# the session's allocations; const_T* is a structure the call reads (its
# sizeof(T) bytes travel with the call) and out_T* one it writes (they come
# back), in_T* one the call reads where cuda.h does not say const
# (T void: `@N` says how many bytes, as in out_void*@8); CUdevice@ctx is
# a device index that must be the current context's device (a refused
# one is CUDA_ERROR_INVALID_DEVICE; the executor passes its own device of
# that context); a handle kind of the worker's table (CUevent, CUfunction,
# CUmodule, CUarray, CUtexObject, CUsurfObject, CUgraph, CUgraphNode,
# CUgraphExec, CUmemGenericAllocationHandle) is used as given, `KIND*` is
# one the call creates (added to the table and counted against the VM's
# handles before the call) and `KIND!` one it destroys (gone from the
# table, its charge given back): the worker checks each one's kind,
# liveness and, for those bound to a context, that it is the current
# one's, and a wrong one is CUDA_ERROR_INVALID_HANDLE for that call alone;
# void*@dev a device address given as a pointer, which must lie in the
# session's memory; anything else is a scalar passed as is.
# `async`: stream-ordered and without results, queued and batched like a
# launch (its error comes at the next synchronising call).  `hand`: the
# guest entry point is written by hand in guest-lib/cuda/ (to answer in the
# guest when it can), calling the generated wire call by its id.  `quiet`:
# not one of the calls where CUDA writes what kernels printed (the
# programming guide's list: synchronizations, blocking copies, module load
# and unload, context destruction, launches), so its reply does not look
# for that output (two system calls saved on a query).  gen_api.py
# checks every line against cuda.h when libclang is there.
GENERIC = """
1  cuCtxSetLimit                 CUlimit size_t
2  cuCtxGetLimit                 size_t* CUlimit
3  cuCtxGetStreamPriorityRange   int* int*
4  cuCtxGetCacheConfig           CUfunc_cache*
5  cuCtxSetCacheConfig           CUfunc_cache
6  cuCtxResetPersistingL2Cache
7  cuStreamWriteValue32_v2       CUstream CUdeviceptr@4 cuuint32_t unsigned_int  async
7  cuStreamWriteValue32_v2_ptsz  CUstream CUdeviceptr@4 cuuint32_t unsigned_int  async
7  cuStreamWriteValue32          CUstream CUdeviceptr@4 cuuint32_t unsigned_int  async
7  cuStreamWriteValue32_ptsz     CUstream CUdeviceptr@4 cuuint32_t unsigned_int  async
8  cuStreamWriteValue64_v2       CUstream CUdeviceptr@8 cuuint64_t unsigned_int  async
8  cuStreamWriteValue64_v2_ptsz  CUstream CUdeviceptr@8 cuuint64_t unsigned_int  async
8  cuStreamWriteValue64          CUstream CUdeviceptr@8 cuuint64_t unsigned_int  async
8  cuStreamWriteValue64_ptsz     CUstream CUdeviceptr@8 cuuint64_t unsigned_int  async
9  cuStreamWaitValue32_v2        CUstream CUdeviceptr@4 cuuint32_t unsigned_int  async
9  cuStreamWaitValue32_v2_ptsz   CUstream CUdeviceptr@4 cuuint32_t unsigned_int  async
9  cuStreamWaitValue32           CUstream CUdeviceptr@4 cuuint32_t unsigned_int  async
9  cuStreamWaitValue32_ptsz      CUstream CUdeviceptr@4 cuuint32_t unsigned_int  async
10 cuStreamWaitValue64_v2        CUstream CUdeviceptr@8 cuuint64_t unsigned_int  async
10 cuStreamWaitValue64_v2_ptsz   CUstream CUdeviceptr@8 cuuint64_t unsigned_int  async
10 cuStreamWaitValue64           CUstream CUdeviceptr@8 cuuint64_t unsigned_int  async
10 cuStreamWaitValue64_ptsz      CUstream CUdeviceptr@8 cuuint64_t unsigned_int  async
11 cuStreamBeginCapture_v2       CUstream CUstreamCaptureMode
11 cuStreamBeginCapture_v2_ptsz  CUstream CUstreamCaptureMode
12 cuStreamEndCapture            CUstream CUgraph*
12 cuStreamEndCapture_ptsz       CUstream CUgraph*
13 cuStreamIsCapturing           CUstream CUstreamCaptureStatus*  hand
13 cuStreamIsCapturing_ptsz      CUstream CUstreamCaptureStatus*  hand
14 cuGraphInstantiateWithFlags   CUgraphExec* CUgraph unsigned_long_long  hand
15 cuGraphLaunch                 CUgraphExec CUstream  async  hand
15 cuGraphLaunch_ptsz            CUgraphExec CUstream  async  hand
16 cuGraphUpload                 CUgraphExec CUstream  async
16 cuGraphUpload_ptsz            CUgraphExec CUstream  async
17 cuGraphExecDestroy            CUgraphExec!  hand
18 cuGraphDestroy                CUgraph!  hand
19 cuGraphCreate                 CUgraph* unsigned_int
20 cuGraphClone                  CUgraph* CUgraph  hand
200 cuProfilerStart
201 cuProfilerStop
202 cuStreamSetAttribute         CUstream CUstreamAttrID const_CUstreamAttrValue*
202 cuStreamSetAttribute_ptsz    CUstream CUstreamAttrID const_CUstreamAttrValue*
203 cuStreamGetAttribute         CUstream CUstreamAttrID out_CUstreamAttrValue*
203 cuStreamGetAttribute_ptsz    CUstream CUstreamAttrID out_CUstreamAttrValue*
204 cuMemGetAllocationGranularity size_t* const_CUmemAllocationProp* CUmemAllocationGranularity_flags
205 cuMemCreate                  CUmemGenericAllocationHandle* size_t const_CUmemAllocationProp* unsigned_long_long
206 cuMemRelease                 CUmemGenericAllocationHandle!
207 cuMemAddressReserve          CUdeviceptr* size_t size_t CUdeviceptr unsigned_long_long
208 cuMemAddressFree             CUdeviceptr size_t
209 cuMemMap                     CUdeviceptr size_t size_t CUmemGenericAllocationHandle unsigned_long_long  hand
210 cuMemUnmap                   CUdeviceptr size_t  hand
211 cuMemSetAccess               CUdeviceptr size_t const_CUmemAccessDesc* size_t  hand
212 cuMemGetAccess               unsigned_long_long* const_CUmemLocation* CUdeviceptr
213 cuMemRetainAllocationHandle  CUmemGenericAllocationHandle* void*@dev
214 cuMemGetAllocationPropertiesFromHandle out_CUmemAllocationProp* CUmemGenericAllocationHandle
300 cuFuncGetAttribute           int* CUfunction_attribute CUfunction  hand
301 cuFuncSetAttribute           CUfunction CUfunction_attribute int  hand
302 cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags int* CUfunction int size_t unsigned_int  hand
303 cuOccupancyAvailableDynamicSMemPerBlock size_t* CUfunction int int  hand
304 cuArrayDestroy               CUarray!  hand
305 cuTexObjectDestroy           CUtexObject!  hand
306 cuSurfObjectDestroy          CUsurfObject!  hand
307 cuGraphDestroyNode           CUgraphNode!  hand
308 cuEventElapsedTime_v2        float* CUevent CUevent  hand
308 cuEventElapsedTime           float* CUevent CUevent  hand
309 cuDeviceGetGraphMemAttribute CUdevice@ctx CUgraphMem_attribute out_void*@8  hand
310 cuDeviceSetGraphMemAttribute CUdevice@ctx CUgraphMem_attribute in_void*@8  hand
311 cuDeviceGraphMemTrim         CUdevice@ctx  hand
312 cuEventCreate                CUevent* unsigned_int  hand
313 cuEventDestroy_v2            CUevent!  hand
313 cuEventDestroy               CUevent!  hand
314 cuEventRecord                CUevent CUstream  async  hand
314 cuEventRecord_ptsz           CUevent CUstream  async  hand
315 cuEventRecordWithFlags       CUevent CUstream unsigned_int  async  hand
315 cuEventRecordWithFlags_ptsz  CUevent CUstream unsigned_int  async  hand
316 cuEventSynchronize           CUevent  hand
317 cuEventQuery                 CUevent  hand  quiet
318 cuStreamQuery                CUstream  hand  quiet
318 cuStreamQuery_ptsz           CUstream  hand  quiet
319 cuStreamWaitEvent            CUstream CUevent unsigned_int  async  hand
319 cuStreamWaitEvent_ptsz       CUstream CUevent unsigned_int  async  hand
320 cuGraphNodeSetEnabled        CUgraphExec CUgraphNode unsigned_int
321 cuGraphNodeGetEnabled        CUgraphExec CUgraphNode unsigned_int*
"""

# Exported names whose driver-580 entry is a newer function's (by
# cuGetProcAddress: "cuGraphInstantiate" at 12000+ answers the address
# exported as cuGraphInstantiate_v2, with cuGraphInstantiateWithFlags's
# signature) while cuda.h declares them with the legacy one: `ALIAS TARGET`.
GENERIC_ALIASES = """
cuGraphInstantiate_v2 cuGraphInstantiateWithFlags
"""


def generic_aliases():
    w = GENERIC_ALIASES.split()
    return list(zip(w[0::2], w[1::2]))


# The words after a GENERIC line's types (`async` aside) that say how it
# is served: see the comment above GENERIC.
GENERIC_TAGS = ('hand', 'quiet')


def generic():
    """[(id, name, [arg types], async)] from GENERIC."""
    out = []
    for line in GENERIC.strip().splitlines():
        w = line.split()
        while w[-1] in GENERIC_TAGS:
            w = w[:-1]
        is_async = w[-1] == 'async'
        if is_async:
            w = w[:-1]
        out.append((int(w[0]), w[1], [t.replace('_', ' ') if t.startswith('unsigned_') else t
                                      for t in w[2:]], is_async))
    return out


def generic_tagged(tag):
    """GENERIC names whose line carries tag (one of GENERIC_TAGS)."""
    assert tag in GENERIC_TAGS
    return {line.split()[1] for line in GENERIC.strip().splitlines()
            if tag in line.split()[2:]}


def generic_hand():
    """GENERIC names whose guest entry point is hand-written."""
    return generic_tagged('hand')


def generic_quiet():
    """GENERIC names where the driver writes no device printf."""
    return generic_tagged('quiet')


def names(block):
    return block.split()
