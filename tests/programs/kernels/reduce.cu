/*
 * reduce: sums and maxima of integer arrays by shared-memory tree reduction
 * with __syncthreads, in two passes (many blocks write partial results, one
 * block reduces the partials). block_reduce_sum uses dynamic shared memory,
 * block_reduce_max a static __shared__ array. Integer data, so every result is
 * exact and compared with the host's.
 */
#include "../check.h"

#include <limits.h>

#define BLOCK 256

/* out[blockIdx.x] = sum of in[i] for the i this block's threads stride over.
 * blockDim.x must be a power of two; dynamic shared memory of blockDim.x
 * ints. */
extern "C" __global__ void block_reduce_sum(const int *in, int *out, int n)
{
    extern __shared__ int sdata[];
    unsigned int t = threadIdx.x;
    int acc = 0;
    for (int i = blockIdx.x * blockDim.x + t; i < n; i += gridDim.x * blockDim.x)
        acc += in[i];
    sdata[t] = acc;
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (t < s)
            sdata[t] += sdata[t + s];
        __syncthreads();
    }
    if (t == 0)
        out[blockIdx.x] = sdata[0];
}

/* The same shape with a max and a static shared array; BLOCK threads. */
extern "C" __global__ void block_reduce_max(const int *in, int *out, int n)
{
    __shared__ int smax[BLOCK];
    unsigned int t = threadIdx.x;
    int acc = INT_MIN;
    for (int i = blockIdx.x * blockDim.x + t; i < n; i += gridDim.x * blockDim.x)
        acc = max(acc, in[i]);
    smax[t] = acc;
    __syncthreads();
    for (unsigned int s = BLOCK / 2; s > 0; s >>= 1) {
        if (t < s)
            smax[t] = max(smax[t], smax[t + s]);
        __syncthreads();
    }
    if (t == 0)
        out[blockIdx.x] = smax[0];
}

static void run(int n, int grid1)
{
    int *h = (int *)malloc((size_t)n * sizeof(int));
    EXPECT(h);
    long long want_sum = 0;
    int want_max = INT_MIN;
    for (int i = 0; i < n; i++) {
        h[i] = (int)(((unsigned)i * 7919u + (unsigned)n) % 2001u) - 1000;
        want_sum += h[i];
        if (h[i] > want_max)
            want_max = h[i];
    }

    int *din, *dpart, *dres;
    CHECK(cudaMalloc((void **)&din, (size_t)n * sizeof(int)));
    CHECK(cudaMalloc((void **)&dpart, (size_t)grid1 * sizeof(int)));
    CHECK(cudaMalloc((void **)&dres, 2 * sizeof(int)));
    CHECK(cudaMemcpy(din, h, (size_t)n * sizeof(int), cudaMemcpyHostToDevice));

    /* Sum: pass 1 over the data, pass 2 over the partials. */
    block_reduce_sum<<<grid1, BLOCK, BLOCK * sizeof(int)>>>(din, dpart, n);
    block_reduce_sum<<<1, BLOCK, BLOCK * sizeof(int)>>>(dpart, dres, grid1);
    /* Max: the same; its shared array is BLOCK wide, so BLOCK threads. */
    block_reduce_max<<<grid1, BLOCK>>>(din, dpart, n);
    block_reduce_max<<<1, BLOCK>>>(dpart, dres + 1, grid1);
    CHECK(cudaGetLastError());

    int res[2];
    CHECK(cudaMemcpy(res, dres, sizeof(res), cudaMemcpyDeviceToHost));
    if (res[0] != (int)want_sum)
        fail("n=%d: sum %d, expected %lld", n, res[0], want_sum);
    if (res[1] != want_max)
        fail("n=%d: max %d, expected %d", n, res[1], want_max);
    printf("n=%d blocks=%d: sum %d, max %d: ok\n", n, grid1, res[0], res[1]);

    CHECK(cudaFree(din));
    CHECK(cudaFree(dpart));
    CHECK(cudaFree(dres));
    free(h);
}

int main(void)
{
    test_begin("reduce");
    require_device();
    CHECK(cudaSetDevice(0));

    run(1, 1);
    run(255, 1);
    run(1000, 4);
    run(65536, 64);
    run((1 << 20) + 17, 128);
    run(3 << 20, 256);

    /* The smallest power-of-two blocks work too (sum only: its shared
     * memory follows the block size). */
    static const int blocks[] = { 1, 2, 32, 1024 };
    for (size_t b = 0; b < sizeof(blocks) / sizeof(blocks[0]); b++) {
        int bs = blocks[b], n = 5000;
        int *h = (int *)malloc(n * sizeof(int)), *din, *dout, got;
        long long want = 0;
        EXPECT(h);
        for (int i = 0; i < n; i++)
            want += h[i] = i % 97 - 48;
        CHECK(cudaMalloc((void **)&din, n * sizeof(int)));
        CHECK(cudaMalloc((void **)&dout, sizeof(int)));
        CHECK(cudaMemcpy(din, h, n * sizeof(int), cudaMemcpyHostToDevice));
        block_reduce_sum<<<1, bs, bs * sizeof(int)>>>(din, dout, n);
        CHECK(cudaGetLastError());
        CHECK(cudaMemcpy(&got, dout, sizeof(int), cudaMemcpyDeviceToHost));
        if (got != (int)want)
            fail("block %d: sum %d, expected %lld", bs, got, want);
        printf("one block of %d: sum %d: ok\n", bs, got);
        CHECK(cudaFree(din));
        CHECK(cudaFree(dout));
        free(h);
    }

    CHECK(cudaDeviceSynchronize());
    test_pass();
}
