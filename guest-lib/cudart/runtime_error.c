/*
 * runtime_error.c - error names and descriptions, the per-thread last
 * error API, and how a backend status becomes a cudaError_t.
 */
#include <stddef.h>

#include <cuda.h>

#include "runtime.h"

struct error_desc {
	cudaError_t code;
	const char *name;	/* exactly the enum identifier */
	const char *text;
};

#define E(id, text) { id, #id, text }

/* Every cudaError_t of CUDA 13.0's driver_types.h, in header order. */
static const struct error_desc error_table[] = {
	E(cudaSuccess, "no error"),
	E(cudaErrorInvalidValue, "invalid argument"),
	E(cudaErrorMemoryAllocation, "out of memory"),
	E(cudaErrorInitializationError, "initialization error"),
	E(cudaErrorCudartUnloading, "driver shutting down"),
	E(cudaErrorProfilerDisabled, "profiler disabled while using external profiling tool"),
	E(cudaErrorProfilerNotInitialized, "profiler not initialized: call cudaProfilerInitialize()"),
	E(cudaErrorProfilerAlreadyStarted, "profiler already started"),
	E(cudaErrorProfilerAlreadyStopped, "profiler already stopped"),
	E(cudaErrorInvalidConfiguration, "invalid configuration argument"),
	E(cudaErrorInvalidPitchValue, "invalid pitch argument"),
	E(cudaErrorInvalidSymbol, "invalid device symbol"),
	E(cudaErrorInvalidHostPointer, "invalid host pointer"),
	E(cudaErrorInvalidDevicePointer, "invalid device pointer"),
	E(cudaErrorInvalidTexture, "invalid texture reference"),
	E(cudaErrorInvalidTextureBinding, "texture is not bound to a pointer"),
	E(cudaErrorInvalidChannelDescriptor, "invalid channel descriptor"),
	E(cudaErrorInvalidMemcpyDirection, "invalid copy direction for memcpy"),
	E(cudaErrorAddressOfConstant, "invalid address of constant"),
	E(cudaErrorTextureFetchFailed, "fetch from texture failed"),
	E(cudaErrorTextureNotBound, "cannot fetch from a texture that is not bound"),
	E(cudaErrorSynchronizationError, "incorrect use of __syncthreads()"),
	E(cudaErrorInvalidFilterSetting, "linear filtering not supported for non-float type"),
	E(cudaErrorInvalidNormSetting, "read as normalized float not supported for 32-bit non-float type"),
	E(cudaErrorMixedDeviceExecution, "device emulation mode and device execution mode cannot be mixed"),
	E(cudaErrorNotYetImplemented, "feature not yet implemented"),
	E(cudaErrorMemoryValueTooLarge, "memory size or pointer value too large to fit in 32 bit"),
	E(cudaErrorStubLibrary, "CUDA driver is a stub library"),
	E(cudaErrorInsufficientDriver, "CUDA driver version is insufficient for CUDA runtime version"),
	E(cudaErrorCallRequiresNewerDriver, "API call is not supported in the installed CUDA driver"),
	E(cudaErrorInvalidSurface, "invalid surface reference"),
	E(cudaErrorDuplicateVariableName, "duplicate global variable looked up by string name"),
	E(cudaErrorDuplicateTextureName, "duplicate texture looked up by string name"),
	E(cudaErrorDuplicateSurfaceName, "duplicate surface looked up by string name"),
	E(cudaErrorDevicesUnavailable, "CUDA-capable device(s) is/are busy or unavailable"),
	E(cudaErrorIncompatibleDriverContext, "incompatible driver context"),
	E(cudaErrorMissingConfiguration, "__global__ function call is not configured"),
	E(cudaErrorPriorLaunchFailure, "unspecified launch failure in prior launch"),
	E(cudaErrorLaunchMaxDepthExceeded, "launch would exceed maximum depth of nested launches"),
	E(cudaErrorLaunchFileScopedTex, "launch failed because a kernel uses file-scoped textures"),
	E(cudaErrorLaunchFileScopedSurf, "launch failed because a kernel uses file-scoped surfaces"),
	E(cudaErrorSyncDepthExceeded, "cudaDeviceSynchronize failed because the depth limit was exceeded"),
	E(cudaErrorLaunchPendingCountExceeded, "launch failed because the pending launch count was exceeded"),
	E(cudaErrorInvalidDeviceFunction, "invalid device function"),
	E(cudaErrorNoDevice, "no CUDA-capable device is detected"),
	E(cudaErrorInvalidDevice, "invalid device ordinal"),
	E(cudaErrorDeviceNotLicensed, "device doesn't have valid Grid license"),
	E(cudaErrorSoftwareValidityNotEstablished, "integrity checks failed"),
	E(cudaErrorStartupFailure, "startup failure in cuda runtime"),
	E(cudaErrorInvalidKernelImage, "device kernel image is invalid"),
	E(cudaErrorDeviceUninitialized, "invalid device context"),
	E(cudaErrorMapBufferObjectFailed, "mapping of buffer object failed"),
	E(cudaErrorUnmapBufferObjectFailed, "unmapping of buffer object failed"),
	E(cudaErrorArrayIsMapped, "array is mapped"),
	E(cudaErrorAlreadyMapped, "resource already mapped"),
	E(cudaErrorNoKernelImageForDevice, "no kernel image is available for execution on the device"),
	E(cudaErrorAlreadyAcquired, "resource already acquired"),
	E(cudaErrorNotMapped, "resource not mapped"),
	E(cudaErrorNotMappedAsArray, "resource not mapped as array"),
	E(cudaErrorNotMappedAsPointer, "resource not mapped as pointer"),
	E(cudaErrorECCUncorrectable, "uncorrectable ECC error encountered"),
	E(cudaErrorUnsupportedLimit, "limit is not supported on this architecture"),
	E(cudaErrorDeviceAlreadyInUse, "exclusive-thread device already in use by a different thread"),
	E(cudaErrorPeerAccessUnsupported, "peer access is not supported between these two devices"),
	E(cudaErrorInvalidPtx, "a PTX JIT compilation failed"),
	E(cudaErrorInvalidGraphicsContext, "invalid OpenGL or DirectX context"),
	E(cudaErrorNvlinkUncorrectable, "uncorrectable NVLink error detected during the execution"),
	E(cudaErrorJitCompilerNotFound, "PTX JIT compiler library not found"),
	E(cudaErrorUnsupportedPtxVersion, "the provided PTX was compiled with an unsupported toolchain"),
	E(cudaErrorJitCompilationDisabled, "PTX JIT compilation was disabled"),
	E(cudaErrorUnsupportedExecAffinity, "the provided execution affinity is not supported"),
	E(cudaErrorUnsupportedDevSideSync, "the kernel uses device-side synchronization, which is not supported here"),
	E(cudaErrorContained, "an exception was contained and the device must be reset"),
	E(cudaErrorInvalidSource, "device kernel image is invalid"),
	E(cudaErrorFileNotFound, "file not found"),
	E(cudaErrorSharedObjectSymbolNotFound, "shared object symbol not found"),
	E(cudaErrorSharedObjectInitFailed, "shared object initialization failed"),
	E(cudaErrorOperatingSystem, "OS call failed or operation not supported on this OS"),
	E(cudaErrorInvalidResourceHandle, "invalid resource handle"),
	E(cudaErrorIllegalState, "the operation cannot be performed in the present state"),
	E(cudaErrorLossyQuery, "attempted introspection would be semantically lossy"),
	E(cudaErrorSymbolNotFound, "named symbol not found"),
	E(cudaErrorNotReady, "device not ready"),
	E(cudaErrorIllegalAddress, "an illegal memory access was encountered"),
	E(cudaErrorLaunchOutOfResources, "too many resources requested for launch"),
	E(cudaErrorLaunchTimeout, "the launch timed out and was terminated"),
	E(cudaErrorLaunchIncompatibleTexturing, "launch uses incompatible texturing mode"),
	E(cudaErrorPeerAccessAlreadyEnabled, "peer access is already enabled"),
	E(cudaErrorPeerAccessNotEnabled, "peer access has not been enabled"),
	E(cudaErrorSetOnActiveProcess, "cannot set while device is active in this process"),
	E(cudaErrorContextIsDestroyed, "context is destroyed"),
	E(cudaErrorAssert, "device-side assert triggered"),
	E(cudaErrorTooManyPeers, "peer mapping resources exhausted"),
	E(cudaErrorHostMemoryAlreadyRegistered, "part or all of the requested memory range is already mapped"),
	E(cudaErrorHostMemoryNotRegistered, "pointer does not correspond to a registered memory region"),
	E(cudaErrorHardwareStackError, "hardware stack error"),
	E(cudaErrorIllegalInstruction, "an illegal instruction was encountered"),
	E(cudaErrorMisalignedAddress, "misaligned address"),
	E(cudaErrorInvalidAddressSpace, "operation not supported on global/shared address space"),
	E(cudaErrorInvalidPc, "invalid program counter"),
	E(cudaErrorLaunchFailure, "unspecified launch failure"),
	E(cudaErrorCooperativeLaunchTooLarge, "too many blocks in cooperative launch"),
	E(cudaErrorTensorMemoryLeak, "tensor memory not completely freed"),
	E(cudaErrorNotPermitted, "operation not permitted"),
	E(cudaErrorNotSupported, "operation not supported"),
	E(cudaErrorSystemNotReady, "system not yet initialized"),
	E(cudaErrorSystemDriverMismatch, "system has unsupported display driver / cuda driver combination"),
	E(cudaErrorCompatNotSupportedOnDevice, "forward compatibility was attempted on non supported HW"),
	E(cudaErrorMpsConnectionFailed, "MPS client failed to connect to the MPS control daemon or the MPS server"),
	E(cudaErrorMpsRpcFailure, "the remote procedural call between the MPS server and the MPS client failed"),
	E(cudaErrorMpsServerNotReady, "MPS server is not ready to accept new MPS client requests"),
	E(cudaErrorMpsMaxClientsReached, "the hardware resources required to create MPS client have been exhausted"),
	E(cudaErrorMpsMaxConnectionsReached, "the hardware resources required to support device connections have been exhausted"),
	E(cudaErrorMpsClientTerminated, "the MPS client has been terminated by the server"),
	E(cudaErrorCdpNotSupported, "the module uses CUDA Dynamic Parallelism, which is not supported here"),
	E(cudaErrorCdpVersionMismatch, "CUDA Dynamic Parallelism is used across incompatible binaries"),
	E(cudaErrorStreamCaptureUnsupported, "operation not permitted when stream is capturing"),
	E(cudaErrorStreamCaptureInvalidated, "operation failed due to a previous error during capture"),
	E(cudaErrorStreamCaptureMerge, "operation would result in a merge of separate capture sequences"),
	E(cudaErrorStreamCaptureUnmatched, "capture was not ended in the same stream as it began"),
	E(cudaErrorStreamCaptureUnjoined, "capturing stream has unjoined work"),
	E(cudaErrorStreamCaptureIsolation, "dependency created on uncaptured work in another stream"),
	E(cudaErrorStreamCaptureImplicit, "operation would make the legacy stream depend on a capturing blocking stream"),
	E(cudaErrorCapturedEvent, "operation not permitted on an event last recorded in a capturing stream"),
	E(cudaErrorStreamCaptureWrongThread, "attempt to terminate a thread-local capture sequence from another thread"),
	E(cudaErrorTimeout, "wait operation timed out"),
	E(cudaErrorGraphExecUpdateFailure, "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update"),
	E(cudaErrorExternalDevice, "an async error has occurred in a device outside of CUDA"),
	E(cudaErrorInvalidClusterSize, "a kernel launch error has occurred due to cluster misconfiguration"),
	E(cudaErrorFunctionNotLoaded, "the function handle is not loaded"),
	E(cudaErrorInvalidResourceType, "one or more resources passed in are not valid resource types for the operation"),
	E(cudaErrorInvalidResourceConfiguration, "one or more resources are insufficient or non-applicable for the operation"),
	E(cudaErrorUnknown, "unknown error"),
};

#undef E

static const struct error_desc *error_lookup(int code)
{
	size_t lo = 0, hi = sizeof(error_table) / sizeof(error_table[0]);

	/* The table is in ascending code order, as the header is. */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if ((int)error_table[mid].code == code)
			return &error_table[mid];
		if ((int)error_table[mid].code < code)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

int pvgpu_error_known(int err)
{
	return error_lookup(err) != NULL;
}

/*
 * Where the driver and the runtime name the same failure, CUDA gives both
 * the same number; the pairs the runtime renames are checked here, so the
 * identity mapping below cannot silently drift.
 */
_Static_assert((int)CUDA_ERROR_INVALID_HANDLE == (int)cudaErrorInvalidResourceHandle, "");
_Static_assert((int)CUDA_ERROR_OUT_OF_MEMORY == (int)cudaErrorMemoryAllocation, "");
_Static_assert((int)CUDA_ERROR_NOT_INITIALIZED == (int)cudaErrorInitializationError, "");
_Static_assert((int)CUDA_ERROR_DEINITIALIZED == (int)cudaErrorCudartUnloading, "");
_Static_assert((int)CUDA_ERROR_NO_DEVICE == (int)cudaErrorNoDevice, "");
_Static_assert((int)CUDA_ERROR_INVALID_DEVICE == (int)cudaErrorInvalidDevice, "");
_Static_assert((int)CUDA_ERROR_NOT_READY == (int)cudaErrorNotReady, "");
_Static_assert((int)CUDA_ERROR_DEVICE_UNAVAILABLE == (int)cudaErrorDevicesUnavailable, "");
_Static_assert((int)CUDA_ERROR_INVALID_IMAGE == (int)cudaErrorInvalidKernelImage, "");
_Static_assert((int)CUDA_ERROR_INVALID_CONTEXT == (int)cudaErrorDeviceUninitialized, "");
_Static_assert((int)CUDA_ERROR_NO_BINARY_FOR_GPU == (int)cudaErrorNoKernelImageForDevice, "");
_Static_assert((int)CUDA_ERROR_CONTEXT_ALREADY_IN_USE == (int)cudaErrorDeviceAlreadyInUse, "");
_Static_assert((int)CUDA_ERROR_NOT_FOUND == (int)cudaErrorSymbolNotFound, "");
_Static_assert((int)CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE == (int)cudaErrorSetOnActiveProcess, "");
_Static_assert((int)CUDA_ERROR_LAUNCH_FAILED == (int)cudaErrorLaunchFailure, "");
_Static_assert((int)CUDA_ERROR_ILLEGAL_ADDRESS == (int)cudaErrorIllegalAddress, "");
_Static_assert((int)CUDA_ERROR_NOT_SUPPORTED == (int)cudaErrorNotSupported, "");

/*
 * The faults after which CUDA refuses every further call in the context
 * ("sticky" errors): the device-side exceptions, a watchdog timeout, an
 * uncorrectable ECC error.
 */
int pvgpu_error_is_sticky(cudaError_t err)
{
	switch (err) {
	case cudaErrorIllegalAddress:
	case cudaErrorLaunchTimeout:
	case cudaErrorAssert:
	case cudaErrorHardwareStackError:
	case cudaErrorIllegalInstruction:
	case cudaErrorMisalignedAddress:
	case cudaErrorInvalidAddressSpace:
	case cudaErrorInvalidPc:
	case cudaErrorLaunchFailure:
	case cudaErrorECCUncorrectable:
	case cudaErrorContained:
		return 1;
	default:
		return 0;
	}
}

static cudaError_t status_to_error(int32_t status)
{
	if (status == 0)
		return cudaSuccess;
	if (status == PVGPU_CLIENT_EENCODE)
		return cudaErrorInvalidValue;	/* e.g. a string too long */
	if (status < 0)
		return cudaErrorDevicesUnavailable;	/* the connection */
	/* Driver-only results with no runtime counterpart. */
	if (status == CUDA_ERROR_CONTEXT_ALREADY_CURRENT ||
	    status == CUDA_ERROR_KEY_ROTATION || !pvgpu_error_known(status))
		return cudaErrorUnknown;
	return (cudaError_t)status;
}

cudaError_t pvgpu_error_from_status(int32_t status)
{
	cudaError_t err = status_to_error(status);

	if (pvgpu_error_is_sticky(err))
		pvgpu_mark_sticky(err);
	return err;
}

const char *cudaGetErrorName(cudaError_t error)
{
	const struct error_desc *d = error_lookup((int)error);

	return d ? d->name : "unrecognized error code";
}

const char *cudaGetErrorString(cudaError_t error)
{
	const struct error_desc *d = error_lookup((int)error);

	return d ? d->text : "unrecognized error code";
}

cudaError_t cudaGetLastError(void)
{
	return pvgpu_last_error(1);
}

cudaError_t cudaPeekAtLastError(void)
{
	return pvgpu_last_error(0);
}
