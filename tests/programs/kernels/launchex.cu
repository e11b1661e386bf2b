/*
 * launchex: launches with attributes (cudaLaunchKernelEx over the driver's
 * cuLaunchKernelEx) and cooperative launches. What a user checks: the
 * kernel sees the cluster shape it was launched with, a grid-wide barrier
 * works in a cooperative launch (the whole grid meets), a cooperative grid larger
 * than the device can hold at once is refused, a priority launch runs, and
 * clusters that do not tile the grid are refused.
 *
 * Written for NVIDIA's runtime over libcuda.so.1 (pvgpu's shim does not
 * carry launch attributes): tests/integration/test_driver_api.py runs it
 * against the sim, tests/gpu/test_gpu_driver_api.py on the GPU.
 */
#include "../check.h"

/* out[block] = blocks in its cluster * 100 + its rank in the cluster (the
 * sm_90 special registers; cooperative_groups would say the same). */
extern "C" __global__ void cluster_ids(int *out)
{
    unsigned int n, rank;
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    if (threadIdx.x == 0)
        out[blockIdx.x] = (int)n * 100 + (int)rank;
}

/* Every block waits here until all of the grid has arrived: it returns only
 * when the whole grid is resident at once, which is what a cooperative
 * launch promises (grid.sync() without cooperative_groups). */
__device__ void grid_barrier(unsigned int *count)
{
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(count, 1u);
        while (*(volatile unsigned int *)count < gridDim.x)
            ;
        __threadfence();
    }
    __syncthreads();
}

/* *out = sum of in[0..n): every thread sums a grid-strided slice into
 * partial[], the grid meets at the barrier, thread 0 adds the slices. */
extern "C" __global__ void coop_sum(const int *in, int *partial, int *out,
                                    unsigned int *count, int n)
{
    int tid = blockIdx.x * blockDim.x + threadIdx.x;
    int nt = gridDim.x * blockDim.x;
    int s = 0;

    for (int i = tid; i < n; i += nt)
        s += in[i];
    partial[tid] = s;
    grid_barrier(count);
    if (tid == 0) {
        int t = 0;
        for (int i = 0; i < nt; i++)
            t += ((volatile int *)partial)[i];
        *out = t;
    }
}

/* v[i] = i * 7 */
extern "C" __global__ void times7(int *v, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        v[i] = i * 7;
}

enum { BLOCKS = 8, THREADS = 128, N = 10000 };

static void check_sum(int *d_in, int *d_partial, int *d_out,
                      unsigned int *d_count, const char *how, bool ex)
{
    int n = N, out = 0;
    unsigned int count = 0;
    void *args[] = { &d_in, &d_partial, &d_out, &d_count, &n };

    CHECK(cudaMemset(d_out, 0, sizeof(int)));
    CHECK(cudaMemset(d_count, 0, sizeof(unsigned int)));
    if (ex) {
        cudaLaunchAttribute a[1] = {};
        a[0].id = cudaLaunchAttributeCooperative;
        a[0].val.cooperative = 1;
        cudaLaunchConfig_t c = {};
        c.gridDim = dim3(BLOCKS);
        c.blockDim = dim3(THREADS);
        c.attrs = a;
        c.numAttrs = 1;
        CHECK(cudaLaunchKernelEx(&c, coop_sum, (const int *)d_in, d_partial,
                                 d_out, d_count, n));
    } else {
        CHECK(cudaLaunchCooperativeKernel((const void *)coop_sum, dim3(BLOCKS),
                                          dim3(THREADS), args, 0, 0));
    }
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(&out, d_out, sizeof(int), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(&count, d_count, sizeof(count), cudaMemcpyDeviceToHost));
    printf("%s: sum %d, blocks met %u\n", how, out, count);
    EXPECT(out == N * (N - 1) / 2 && count == BLOCKS);
}

int main(void)
{
    test_begin("launchex");
    require_device();
    CHECK(cudaSetDevice(0));

    /* Clusters of 2 and of 4 blocks over a grid of 8. */
    int *d_ids;
    CHECK(cudaMalloc(&d_ids, BLOCKS * sizeof(int)));
    for (unsigned cx = 2; cx <= 4; cx += 2) {
        cudaLaunchAttribute a[2] = {};
        a[0].id = cudaLaunchAttributeClusterDimension;
        a[0].val.clusterDim.x = cx;
        a[0].val.clusterDim.y = 1;
        a[0].val.clusterDim.z = 1;
        a[1].id = cudaLaunchAttributeIgnore;
        cudaLaunchConfig_t c = {};
        c.gridDim = dim3(BLOCKS);
        c.blockDim = dim3(32);
        c.attrs = a;
        c.numAttrs = 2;
        CHECK(cudaMemset(d_ids, 0xff, BLOCKS * sizeof(int)));
        CHECK(cudaLaunchKernelEx(&c, cluster_ids, d_ids));
        CHECK(cudaDeviceSynchronize());
        int ids[BLOCKS];
        CHECK(cudaMemcpy(ids, d_ids, sizeof(ids), cudaMemcpyDeviceToHost));
        printf("clusters of %u:", cx);
        for (int b = 0; b < BLOCKS; b++)
            printf(" %d", ids[b]);
        printf("\n");
        for (int b = 0; b < BLOCKS; b++)
            EXPECT(ids[b] == (int)cx * 100 + b % (int)cx);
    }

    /* Clusters that do not tile the grid: refused at the launch. */
    {
        cudaLaunchAttribute a[1] = {};
        a[0].id = cudaLaunchAttributeClusterDimension;
        a[0].val.clusterDim.x = 2;
        a[0].val.clusterDim.y = 1;
        a[0].val.clusterDim.z = 1;
        cudaLaunchConfig_t c = {};
        c.gridDim = dim3(3);
        c.blockDim = dim3(32);
        c.attrs = a;
        c.numAttrs = 1;
        cudaError_t e = cudaLaunchKernelEx(&c, cluster_ids, d_ids);
        printf("3 blocks in clusters of 2 refused: %s\n", e != cudaSuccess ? "yes" : "no");
        EXPECT(e == cudaErrorInvalidClusterSize || e == cudaErrorInvalidValue);
        (void)cudaGetLastError();
        CHECK(cudaDeviceSynchronize());
    }

    /* Cooperative: the grid meets at grid.sync(). */
    int *h_in = (int *)malloc(N * sizeof(int));
    EXPECT(h_in);
    for (int i = 0; i < N; i++)
        h_in[i] = i;
    int *d_in, *d_partial, *d_out;
    unsigned int *d_count;
    CHECK(cudaMalloc(&d_in, N * sizeof(int)));
    CHECK(cudaMalloc(&d_partial, BLOCKS * THREADS * sizeof(int)));
    CHECK(cudaMalloc(&d_out, sizeof(int)));
    CHECK(cudaMalloc(&d_count, sizeof(unsigned int)));
    CHECK(cudaMemcpy(d_in, h_in, N * sizeof(int), cudaMemcpyHostToDevice));
    int coop = 0;
    CHECK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, 0));
    printf("cooperative launch: %s\n", coop ? "yes" : "no");
    EXPECT(coop);
    check_sum(d_in, d_partial, d_out, d_count, "cudaLaunchCooperativeKernel", false);
    check_sum(d_in, d_partial, d_out, d_count, "cudaLaunchKernelEx cooperative", true);

    /* One block more than can be resident at once: refused. */
    int per_sm = 0, sms = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, coop_sum, THREADS, 0));
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    EXPECT(per_sm > 0 && sms > 0);
    {
        int n = N;
        void *args[] = { &d_in, &d_partial, &d_out, &d_count, &n };
        EXPECT_ERROR("cooperative grid too large",
                     cudaLaunchCooperativeKernel((const void *)coop_sum,
                                                 dim3(per_sm * sms + 1),
                                                 dim3(THREADS), args, 0, 0),
                     cudaErrorCooperativeLaunchTooLarge);
        CHECK(cudaDeviceSynchronize());
    }

    /* A launch at the greatest priority, on a stream of the lowest. */
    int lo = 0, hi = 0;
    CHECK(cudaDeviceGetStreamPriorityRange(&lo, &hi));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, lo));
    {
        int *d_v, n = 1000;
        CHECK(cudaMalloc(&d_v, n * sizeof(int)));
        cudaLaunchAttribute a[1] = {};
        a[0].id = cudaLaunchAttributePriority;
        a[0].val.priority = hi;
        cudaLaunchConfig_t c = {};
        c.gridDim = dim3((n + 255) / 256);
        c.blockDim = dim3(256);
        c.stream = s;
        c.attrs = a;
        c.numAttrs = 1;
        CHECK(cudaLaunchKernelEx(&c, times7, d_v, n));
        CHECK(cudaStreamSynchronize(s));
        int *h = (int *)malloc(n * sizeof(int));
        EXPECT(h);
        CHECK(cudaMemcpy(h, d_v, n * sizeof(int), cudaMemcpyDeviceToHost));
        for (int i = 0; i < n; i++)
            if (h[i] != i * 7)
                fail("priority launch: v[%d] = %d", i, h[i]);
        printf("priority launch: ok\n");
        free(h);
        CHECK(cudaFree(d_v));
    }
    CHECK(cudaStreamDestroy(s));

    CHECK(cudaFree(d_in));
    CHECK(cudaFree(d_partial));
    CHECK(cudaFree(d_out));
    CHECK(cudaFree(d_count));
    CHECK(cudaFree(d_ids));
    free(h_in);
    test_pass();
}
