/*
 * devices: what the program sees of its GPUs. Count, properties, attributes
 * (checked against the properties they mirror), versions, device selection
 * and the errors for a device that does not exist.
 *
 * With no usable device it prints the error of cudaGetDeviceCount and fails;
 * the integration tests rely on that to check an unreachable backend.
 */
#include "check.h"

static void print_uuid(const cudaUUID_t *u)
{
    const unsigned char *b = (const unsigned char *)u->bytes;
    printf("  uuid: GPU-");
    for (int i = 0; i < 16; i++) {
        printf("%02x", b[i]);
        if (i == 3 || i == 5 || i == 7 || i == 9)
            printf("-");
    }
    printf("\n");
}

static void print_properties(int dev, const cudaDeviceProp *p)
{
    printf("device %d\n", dev);
    printf("  name: %s\n", p->name);
    print_uuid(&p->uuid);
    printf("  compute capability: %d.%d\n", p->major, p->minor);
    printf("  multiprocessors: %d\n", p->multiProcessorCount);
    printf("  total global memory: %zu\n", p->totalGlobalMem);
    printf("  shared memory per block: %zu\n", p->sharedMemPerBlock);
    printf("  shared memory per block opt-in: %zu\n", p->sharedMemPerBlockOptin);
    printf("  shared memory per multiprocessor: %zu\n", p->sharedMemPerMultiprocessor);
    printf("  reserved shared memory per block: %zu\n", p->reservedSharedMemPerBlock);
    printf("  registers per block: %d\n", p->regsPerBlock);
    printf("  registers per multiprocessor: %d\n", p->regsPerMultiprocessor);
    printf("  warp size: %d\n", p->warpSize);
    printf("  memory pitch: %zu\n", p->memPitch);
    printf("  max threads per block: %d\n", p->maxThreadsPerBlock);
    printf("  max block dims: %d x %d x %d\n", p->maxThreadsDim[0], p->maxThreadsDim[1],
           p->maxThreadsDim[2]);
    printf("  max grid dims: %d x %d x %d\n", p->maxGridSize[0], p->maxGridSize[1],
           p->maxGridSize[2]);
    printf("  total constant memory: %zu\n", p->totalConstMem);
    printf("  texture alignment: %zu\n", p->textureAlignment);
    printf("  texture pitch alignment: %zu\n", p->texturePitchAlignment);
    printf("  surface alignment: %zu\n", p->surfaceAlignment);
    printf("  integrated: %d\n", p->integrated);
    printf("  can map host memory: %d\n", p->canMapHostMemory);
    printf("  concurrent kernels: %d\n", p->concurrentKernels);
    printf("  ECC enabled: %d\n", p->ECCEnabled);
    printf("  PCI domain/bus/device: %04x:%02x:%02x\n", p->pciDomainID, p->pciBusID,
           p->pciDeviceID);
    printf("  async engines: %d\n", p->asyncEngineCount);
    printf("  unified addressing: %d\n", p->unifiedAddressing);
    printf("  memory bus width: %d\n", p->memoryBusWidth);
    printf("  L2 cache size: %d\n", p->l2CacheSize);
    printf("  persisting L2 cache max size: %d\n", p->persistingL2CacheMaxSize);
    printf("  max threads per multiprocessor: %d\n", p->maxThreadsPerMultiProcessor);
    printf("  max blocks per multiprocessor: %d\n", p->maxBlocksPerMultiProcessor);
    printf("  stream priorities supported: %d\n", p->streamPrioritiesSupported);
    printf("  global L1 cache supported: %d\n", p->globalL1CacheSupported);
    printf("  local L1 cache supported: %d\n", p->localL1CacheSupported);
    printf("  managed memory: %d\n", p->managedMemory);
    printf("  multi-GPU board: %d\n", p->isMultiGpuBoard);
    printf("  compute preemption: %d\n", p->computePreemptionSupported);
    printf("  cooperative launch: %d\n", p->cooperativeLaunch);
    printf("  host register supported: %d\n", p->hostRegisterSupported);
    printf("  memory pools supported: %d\n", p->memoryPoolsSupported);
    printf("  cluster launch: %d\n", p->clusterLaunch);
    printf("  access policy max window size: %d\n", p->accessPolicyMaxWindowSize);
}

/* An attribute and the property field that must hold the same value. */
struct attr_check {
    enum cudaDeviceAttr attr;
    const char *name;
    long long prop_value;
};

static void check_attributes(int dev, const cudaDeviceProp *p)
{
    const struct attr_check checks[] = {
        {cudaDevAttrMaxThreadsPerBlock, "MaxThreadsPerBlock", p->maxThreadsPerBlock},
        {cudaDevAttrMaxBlockDimX, "MaxBlockDimX", p->maxThreadsDim[0]},
        {cudaDevAttrMaxBlockDimY, "MaxBlockDimY", p->maxThreadsDim[1]},
        {cudaDevAttrMaxBlockDimZ, "MaxBlockDimZ", p->maxThreadsDim[2]},
        {cudaDevAttrMaxGridDimX, "MaxGridDimX", p->maxGridSize[0]},
        {cudaDevAttrMaxGridDimY, "MaxGridDimY", p->maxGridSize[1]},
        {cudaDevAttrMaxGridDimZ, "MaxGridDimZ", p->maxGridSize[2]},
        {cudaDevAttrMaxSharedMemoryPerBlock, "MaxSharedMemoryPerBlock",
         (long long)p->sharedMemPerBlock},
        {cudaDevAttrTotalConstantMemory, "TotalConstantMemory", (long long)p->totalConstMem},
        {cudaDevAttrWarpSize, "WarpSize", p->warpSize},
        {cudaDevAttrMaxPitch, "MaxPitch", (long long)p->memPitch},
        {cudaDevAttrMaxRegistersPerBlock, "MaxRegistersPerBlock", p->regsPerBlock},
        {cudaDevAttrTextureAlignment, "TextureAlignment", (long long)p->textureAlignment},
        {cudaDevAttrMultiProcessorCount, "MultiProcessorCount", p->multiProcessorCount},
        {cudaDevAttrIntegrated, "Integrated", p->integrated},
        {cudaDevAttrCanMapHostMemory, "CanMapHostMemory", p->canMapHostMemory},
        {cudaDevAttrConcurrentKernels, "ConcurrentKernels", p->concurrentKernels},
        {cudaDevAttrEccEnabled, "EccEnabled", p->ECCEnabled},
        {cudaDevAttrPciBusId, "PciBusId", p->pciBusID},
        {cudaDevAttrPciDeviceId, "PciDeviceId", p->pciDeviceID},
        {cudaDevAttrPciDomainId, "PciDomainId", p->pciDomainID},
        {cudaDevAttrGlobalMemoryBusWidth, "GlobalMemoryBusWidth", p->memoryBusWidth},
        {cudaDevAttrL2CacheSize, "L2CacheSize", p->l2CacheSize},
        {cudaDevAttrMaxThreadsPerMultiProcessor, "MaxThreadsPerMultiProcessor",
         p->maxThreadsPerMultiProcessor},
        {cudaDevAttrAsyncEngineCount, "AsyncEngineCount", p->asyncEngineCount},
        {cudaDevAttrUnifiedAddressing, "UnifiedAddressing", p->unifiedAddressing},
        {cudaDevAttrComputeCapabilityMajor, "ComputeCapabilityMajor", p->major},
        {cudaDevAttrComputeCapabilityMinor, "ComputeCapabilityMinor", p->minor},
        {cudaDevAttrStreamPrioritiesSupported, "StreamPrioritiesSupported",
         p->streamPrioritiesSupported},
        {cudaDevAttrMaxSharedMemoryPerMultiprocessor, "MaxSharedMemoryPerMultiprocessor",
         (long long)p->sharedMemPerMultiprocessor},
        {cudaDevAttrMaxRegistersPerMultiprocessor, "MaxRegistersPerMultiprocessor",
         p->regsPerMultiprocessor},
        {cudaDevAttrManagedMemory, "ManagedMemory", p->managedMemory},
        {cudaDevAttrComputePreemptionSupported, "ComputePreemptionSupported",
         p->computePreemptionSupported},
        {cudaDevAttrCooperativeLaunch, "CooperativeLaunch", p->cooperativeLaunch},
        {cudaDevAttrMaxSharedMemoryPerBlockOptin, "MaxSharedMemoryPerBlockOptin",
         (long long)p->sharedMemPerBlockOptin},
        {cudaDevAttrMaxBlocksPerMultiprocessor, "MaxBlocksPerMultiprocessor",
         p->maxBlocksPerMultiProcessor},
        {cudaDevAttrMaxPersistingL2CacheSize, "MaxPersistingL2CacheSize",
         p->persistingL2CacheMaxSize},
        {cudaDevAttrMemoryPoolsSupported, "MemoryPoolsSupported", p->memoryPoolsSupported},
        {cudaDevAttrClusterLaunch, "ClusterLaunch", p->clusterLaunch},
    };
    for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++) {
        int v = -1;
        CHECK(cudaDeviceGetAttribute(&v, checks[i].attr, dev));
        printf("  attribute %s: %d\n", checks[i].name, v);
        if ((long long)v != checks[i].prop_value)
            fail("device %d: attribute %s is %d but the property says %lld", dev,
                 checks[i].name, v, checks[i].prop_value);
    }

    /* Attributes with no property field: printed, only checked for success. */
    const struct {
        enum cudaDeviceAttr attr;
        const char *name;
    } others[] = {
        {cudaDevAttrClockRate, "ClockRate"},
        {cudaDevAttrMemoryClockRate, "MemoryClockRate"},
        {cudaDevAttrComputeMode, "ComputeMode"},
        {cudaDevAttrGpuOverlap, "GpuOverlap"},
        {cudaDevAttrKernelExecTimeout, "KernelExecTimeout"},
    };
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
        int v = -1;
        CHECK(cudaDeviceGetAttribute(&v, others[i].attr, dev));
        printf("  attribute %s: %d\n", others[i].name, v);
    }
}

int main(void)
{
    test_begin("devices");

    int driver = 0, runtime = 0;
    CHECK(cudaRuntimeGetVersion(&runtime));
    printf("runtime version: %d\n", runtime);
    EXPECT(runtime == CUDART_VERSION);

    /* Before any device call, and also when there is no device (the driver
     * version is 0 then): only print it once we know there is a device. */
    cudaError_t derr = cudaDriverGetVersion(&driver);

    int count = require_device();
    CHECK(derr);
    printf("driver version: %d\n", driver);
    EXPECT(driver >= 13000);
    printf("device count: %d\n", count);

    for (int dev = 0; dev < count; dev++) {
        cudaDeviceProp prop;
        memset(&prop, 0, sizeof prop);
        CHECK(cudaGetDeviceProperties(&prop, dev));
        EXPECT(prop.name[0] != '\0');
        EXPECT(prop.totalGlobalMem > 0);
        EXPECT(prop.multiProcessorCount > 0);
        EXPECT(prop.warpSize > 0);
        print_properties(dev, &prop);
        check_attributes(dev, &prop);

        CHECK(cudaSetDevice(dev));
        int current = -1;
        CHECK(cudaGetDevice(&current));
        EXPECT(current == dev);
        CHECK(cudaDeviceSynchronize());
    }

    /* The device that does not exist. */
    CHECK(cudaSetDevice(0));
    cudaDeviceProp prop;
    int v = 0;
    EXPECT_ERROR("cudaSetDevice(count)", cudaSetDevice(count), cudaErrorInvalidDevice);
    EXPECT_ERROR("cudaSetDevice(-1)", cudaSetDevice(-1), cudaErrorInvalidDevice);
    EXPECT_ERROR("cudaGetDeviceProperties(count)", cudaGetDeviceProperties(&prop, count),
                 cudaErrorInvalidDevice);
    EXPECT_ERROR("cudaDeviceGetAttribute(WarpSize, count)",
                 cudaDeviceGetAttribute(&v, cudaDevAttrWarpSize, count),
                 cudaErrorInvalidDevice);
    int current = -1;
    CHECK(cudaGetDevice(&current));
    printf("current device after failed selections: %d\n", current);
    EXPECT(current == 0);

    CHECK(cudaDeviceReset());
    EXPECT(cudaGetLastError() == cudaSuccess);
    test_pass();
}
