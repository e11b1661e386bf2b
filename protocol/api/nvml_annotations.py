"""What nvml.h cannot say about pvgpu's libnvidia-ml.so.1 surface.

Every nvml* function of nvml.h (and every name NVIDIA's driver-580
libnvidia-ml.so.1 exports, protocol/api/libnvidia-ml580.nm when present) is
exported by build/lib/libnvidia-ml.so.1 as one of three kinds:

forwarded  hand-written in guest-lib/nvml/*.c, asking the backend over the
           protocol (at nvmlInit, or on each call for what changes)
local      hand-written in guest-lib/nvml/*.c, answered in the guest from
           what nvmlInit fetched
(neither)  generated: returns NVML_ERROR_NOT_SUPPORTED and, with
           PVGPU_DEBUG set, says so naming the function

As for libcuda.so.1, the linker keeps the lists honest: a name listed here
without a definition fails the link (-z defs), and a definition of a name
not listed collides with its generated stub.
"""

FORWARDED = """
nvmlInit nvmlInit_v2 nvmlInitWithFlags
nvmlDeviceGetMemoryInfo nvmlDeviceGetMemoryInfo_v2
nvmlDeviceGetUtilizationRates
nvmlDeviceGetComputeRunningProcesses nvmlDeviceGetComputeRunningProcesses_v2
nvmlDeviceGetComputeRunningProcesses_v3
"""

LOCAL = """
nvmlShutdown nvmlErrorString
nvmlSystemGetDriverVersion nvmlSystemGetNVMLVersion
nvmlSystemGetCudaDriverVersion nvmlSystemGetCudaDriverVersion_v2
nvmlDeviceGetCount nvmlDeviceGetCount_v2
nvmlDeviceGetHandleByIndex nvmlDeviceGetHandleByIndex_v2
nvmlDeviceGetHandleByUUID
nvmlDeviceGetHandleByPciBusId nvmlDeviceGetHandleByPciBusId_v2
nvmlDeviceGetName nvmlDeviceGetUUID nvmlDeviceGetIndex nvmlDeviceGetMinorNumber
nvmlDeviceGetCudaComputeCapability nvmlDeviceGetArchitecture
nvmlDeviceGetComputeMode nvmlDeviceGetMultiGpuBoard nvmlDeviceGetBoardId
nvmlDeviceGetMemoryBusWidth nvmlDeviceGetMaxClockInfo
nvmlDeviceGetPciInfo nvmlDeviceGetPciInfo_v2 nvmlDeviceGetPciInfo_v3
nvmlDeviceGetPciInfoExt
nvmlDeviceGetGraphicsRunningProcesses nvmlDeviceGetGraphicsRunningProcesses_v2
nvmlDeviceGetGraphicsRunningProcesses_v3
"""


def names(block):
    return block.split()
