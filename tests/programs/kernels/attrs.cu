/*
 * attrs: function attributes, occupancy, opting in to large dynamic shared
 * memory, and launches the device must refuse. Register counts and the
 * like differ between devices (and the simulated one), so only what every
 * device agrees on is printed: limits the source fixes, and yes/no facts.
 */
#include "../check.h"

/* With a __launch_bounds__ and a static shared array of known size. */
extern "C" __global__ void __launch_bounds__(256) bounded(int *out)
{
    __shared__ int buf[1024];
    int t = threadIdx.x;
    for (int i = t; i < 1024; i += blockDim.x)
        buf[i] = i * 3;
    __syncthreads();
    if (t == 0)
        out[blockIdx.x] = buf[1023] + buf[blockIdx.x % 1024];
}

/* out[i] = i * 2 + 1, no shared memory and no bounds. */
extern "C" __global__ void plain(int *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = i * 2 + 1;
}

/* Reverses n ints through dynamic shared memory (n * 4 bytes of it). */
extern "C" __global__ void dyn_reverse(const int *in, int *out, int n)
{
    extern __shared__ int s[];
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        s[i] = in[i];
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        out[i] = s[n - 1 - i];
}

static void check_plain(int *d, int n, const char *what)
{
    int *h = (int *)malloc(n * sizeof(int));
    EXPECT(h);
    CHECK(cudaMemcpy(h, d, n * sizeof(int), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        if (h[i] != i * 2 + 1)
            fail("%s: out[%d] = %d", what, i, h[i]);
    printf("%s: ok\n", what);
    free(h);
}

/* A refused launch: the error comes back from the launch itself (not from a
 * later synchronize), and it leaves no sticky state behind. */
static void expect_refused(const char *label, cudaError_t got, cudaError_t a,
                           cudaError_t b)
{
    printf("%s: %s\n", label, cudaGetErrorName(got));
    if (got != a && got != b)
        fail("%s -> %s, expected %s or %s", label, cudaGetErrorName(got),
             cudaGetErrorName(a), cudaGetErrorName(b));
    EXPECT(cudaGetLastError() == cudaSuccess);
    CHECK(cudaDeviceSynchronize());
}

int main(void)
{
    test_begin("attrs");
    require_device();
    CHECK(cudaSetDevice(0));

    cudaFuncAttributes fa;
    memset(&fa, 0, sizeof(fa));
    CHECK(cudaFuncGetAttributes(&fa, bounded));
    printf("bounded: maxThreadsPerBlock %d, sharedSizeBytes %zu, numRegs > 0: %s\n",
           fa.maxThreadsPerBlock, fa.sharedSizeBytes, fa.numRegs > 0 ? "yes" : "no");
    EXPECT(fa.maxThreadsPerBlock == 256 && fa.sharedSizeBytes == 4096 && fa.numRegs > 0);

    memset(&fa, 0, sizeof(fa));
    CHECK(cudaFuncGetAttributes(&fa, plain));
    printf("plain: maxThreadsPerBlock %d, sharedSizeBytes %zu, numRegs > 0: %s, "
           "localSizeBytes %zu\n", fa.maxThreadsPerBlock, fa.sharedSizeBytes,
           fa.numRegs > 0 ? "yes" : "no", fa.localSizeBytes);
    EXPECT(fa.maxThreadsPerBlock == 1024 && fa.sharedSizeBytes == 0 && fa.numRegs > 0);

    int blocks = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, plain, 256, 0));
    printf("occupancy of plain at 256 threads > 0: %s\n", blocks > 0 ? "yes" : "no");
    EXPECT(blocks > 0);
    blocks = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, bounded, 256, 0));
    printf("occupancy of bounded at 256 threads > 0: %s\n", blocks > 0 ? "yes" : "no");
    EXPECT(blocks > 0);

    /* cuBLAS asks this in cublasCreate: an SM has at least 64 KiB of
     * shared memory, so two resident blocks get more than 16 KiB each. */
    size_t smem = 0;
    CHECK(cudaOccupancyAvailableDynamicSMemPerBlock(&smem, plain, 2, 256));
    printf("dynamic shared memory for 2 blocks of 256 > 16 KiB: %s\n",
           smem > 16384 ? "yes" : "no");
    EXPECT(smem > 16384);

    CHECK(cudaFuncSetCacheConfig(plain, cudaFuncCachePreferShared));
    CHECK(cudaFuncSetCacheConfig(bounded, cudaFuncCachePreferL1));
    printf("cudaFuncSetCacheConfig: ok\n");

    int n = 5000, *dplain;
    CHECK(cudaMalloc((void **)&dplain, n * sizeof(int)));
    plain<<<(n + 255) / 256, 256>>>(dplain, n);
    CHECK(cudaGetLastError());
    check_plain(dplain, n, "plain launch");

    int *dbounded, hb[4];
    CHECK(cudaMalloc((void **)&dbounded, sizeof(hb)));
    bounded<<<4, 256>>>(dbounded);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(hb, dbounded, sizeof(hb), cudaMemcpyDeviceToHost));
    for (int b = 0; b < 4; b++)
        EXPECT(hb[b] == 1023 * 3 + b * 3);
    printf("bounded launch: ok\n");

    /* 100 KiB of dynamic shared memory: above the 48 KiB default, so the
     * kernel must opt in first. */
    const int dyn_bytes = 100 * 1024, dn = dyn_bytes / (int)sizeof(int);
    CHECK(cudaFuncSetAttribute(dyn_reverse, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               dyn_bytes));
    memset(&fa, 0, sizeof(fa));
    CHECK(cudaFuncGetAttributes(&fa, dyn_reverse));
    printf("dyn_reverse: maxDynamicSharedSizeBytes %d\n", fa.maxDynamicSharedSizeBytes);
    EXPECT(fa.maxDynamicSharedSizeBytes == dyn_bytes);
    int *hin = (int *)malloc(dyn_bytes), *hout = (int *)malloc(dyn_bytes);
    int *din, *dout;
    EXPECT(hin && hout);
    for (int i = 0; i < dn; i++)
        hin[i] = i * 7 - 12345;
    CHECK(cudaMalloc((void **)&din, dyn_bytes));
    CHECK(cudaMalloc((void **)&dout, dyn_bytes));
    CHECK(cudaMemcpy(din, hin, dyn_bytes, cudaMemcpyHostToDevice));
    dyn_reverse<<<1, 256, dyn_bytes>>>(din, dout, dn);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(hout, dout, dyn_bytes, cudaMemcpyDeviceToHost));
    for (int i = 0; i < dn; i++)
        if (hout[i] != hin[dn - 1 - i])
            fail("dyn_reverse: out[%d] = %d, expected %d", i, hout[i], hin[dn - 1 - i]);
    printf("launch with 100 KiB dynamic shared memory: ok\n");

    /* Refused launches: a block beyond 1024 threads, a grid beyond 65535
     * in y.  The runtime documents cudaErrorInvalidConfiguration; CUDA 13.0
     * on an H100 says cudaErrorInvalidValue.  The transcript prints which,
     * and the GPU test compares it with pvgpu's byte for byte. */
    plain<<<1, 2048>>>(dplain, n);
    expect_refused("launch with 2048 threads per block", cudaGetLastError(),
                   cudaErrorInvalidValue, cudaErrorInvalidConfiguration);
    plain<<<dim3(1, 65536), 32>>>(dplain, n);
    expect_refused("launch with gridDim.y 65536", cudaGetLastError(),
                   cudaErrorInvalidValue, cudaErrorInvalidConfiguration);
    plain<<<1, dim3(32, 32, 2)>>>(dplain, n);
    expect_refused("launch with block 32x32x2", cudaGetLastError(),
                   cudaErrorInvalidValue, cudaErrorInvalidConfiguration);
    /* More threads than __launch_bounds__ allows. */
    bounded<<<1, 512>>>(dbounded);
    expect_refused("bounded launch with 512 threads", cudaGetLastError(),
                   cudaErrorInvalidValue, cudaErrorLaunchOutOfResources);

    /* Too much dynamic shared memory: 64 KiB for a kernel that did not opt
     * in, and 100 KiB plus one byte for one that opted in to 100 KiB; 1 MiB
     * is more than any device has. */
    plain<<<1, 32, 64 * 1024>>>(dplain, n);
    expect_refused("64 KiB dynamic shared memory without opting in", cudaGetLastError(),
                   cudaErrorInvalidValue, cudaErrorInvalidConfiguration);
    dyn_reverse<<<1, 256, dyn_bytes + 4>>>(din, dout, dn);
    expect_refused("dynamic shared memory above the opted-in size", cudaGetLastError(),
                   cudaErrorInvalidValue, cudaErrorInvalidConfiguration);
    dyn_reverse<<<1, 256, 1 << 20>>>(din, dout, dn);
    expect_refused("1 MiB dynamic shared memory", cudaGetLastError(),
                   cudaErrorInvalidValue, cudaErrorInvalidConfiguration);
    EXPECT_ERROR("opting in to 1 MiB dynamic shared memory",
                 cudaFuncSetAttribute(dyn_reverse,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, 1 << 20),
                 cudaErrorInvalidValue);

    /* The refusals left the context healthy: the same launches with
     * acceptable configurations work. */
    CHECK(cudaMemset(dplain, 0, n * sizeof(int)));
    plain<<<(n + 1023) / 1024, 1024>>>(dplain, n);
    CHECK(cudaGetLastError());
    check_plain(dplain, n, "plain launch with 1024 threads after the refusals");
    memset(hout, 0, dyn_bytes);
    CHECK(cudaMemset(dout, 0, dyn_bytes));
    dyn_reverse<<<1, 128, dyn_bytes>>>(din, dout, dn);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(hout, dout, dyn_bytes, cudaMemcpyDeviceToHost));
    for (int i = 0; i < dn; i++)
        if (hout[i] != hin[dn - 1 - i])
            fail("dyn_reverse again: out[%d] = %d", i, hout[i]);
    printf("dyn_reverse after the refusals: ok\n");

    CHECK(cudaFree(din));
    CHECK(cudaFree(dout));
    CHECK(cudaFree(dplain));
    CHECK(cudaFree(dbounded));
    free(hin);
    free(hout);
    CHECK(cudaDeviceSynchronize());
    test_pass();
}
