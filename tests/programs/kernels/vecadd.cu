/*
 * vecadd: c = a + b on float vectors of several sizes, some not a multiple
 * of the block size, some on a stream of their own; the last launches go
 * through cudaLaunchKernel with an argument array. Float addition is exact
 * IEEE arithmetic on every device, so results compare bit for bit with the
 * host and the checksums are the same everywhere.
 *
 * Also built PTX-only (-arch=compute_90) as vecadd_ptx: the same transcript,
 * with the kernel JIT-compiled where it runs.
 */
#include "../check.h"

extern "C" __global__ void vec_add(const float *a, const float *b, float *c, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        c[i] = a[i] + b[i];
}

#define BLOCK 256

static void run(int n, cudaStream_t stream, int via_launch_kernel)
{
    size_t bytes = (size_t)n * sizeof(float);
    float *ha = (float *)malloc(bytes), *hb = (float *)malloc(bytes);
    float *hc = (float *)malloc(bytes);
    EXPECT(ha && hb && hc);
    for (int i = 0; i < n; i++) {
        ha[i] = (float)(i % 1000) * 0.5f;
        hb[i] = (float)((n - i) % 777) * 0.25f + 1.0f;
    }
    memset(hc, 0xff, bytes);

    float *da, *db, *dc;
    CHECK(cudaMalloc((void **)&da, bytes));
    CHECK(cudaMalloc((void **)&db, bytes));
    CHECK(cudaMalloc((void **)&dc, bytes));
    CHECK(cudaMemcpyAsync(da, ha, bytes, cudaMemcpyHostToDevice, stream));
    CHECK(cudaMemcpyAsync(db, hb, bytes, cudaMemcpyHostToDevice, stream));
    CHECK(cudaMemsetAsync(dc, 0, bytes, stream));

    int grid = (n + BLOCK - 1) / BLOCK;
    if (via_launch_kernel) {
        void *args[] = { &da, &db, &dc, &n };
        CHECK(cudaLaunchKernel((const void *)vec_add, dim3(grid), dim3(BLOCK),
                               args, 0, stream));
    } else {
        vec_add<<<grid, BLOCK, 0, stream>>>(da, db, dc, n);
        CHECK(cudaGetLastError());
    }
    CHECK(cudaMemcpyAsync(hc, dc, bytes, cudaMemcpyDeviceToHost, stream));
    CHECK(cudaStreamSynchronize(stream));

    for (int i = 0; i < n; i++)
        if (hc[i] != ha[i] + hb[i])
            fail("n=%d: c[%d] = %g, expected %g", n, i, hc[i], ha[i] + hb[i]);
    printf("n=%d grid=%d block=%d%s%s: ok, checksum %016llx\n", n, grid, BLOCK,
           stream ? " (stream)" : "", via_launch_kernel ? " (cudaLaunchKernel)" : "",
           (unsigned long long)checksum(hc, bytes));

    CHECK(cudaFree(da));
    CHECK(cudaFree(db));
    CHECK(cudaFree(dc));
    free(ha);
    free(hb);
    free(hc);
}

int main(void)
{
    test_begin("vecadd");
    require_device();
    CHECK(cudaSetDevice(0));

    static const int sizes[] = { 1, 255, 256, 1000, 4097, 65536, (1 << 20) + 3 };
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
        run(sizes[i], 0, 0);

    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    run(100003, s, 0);
    run(77, s, 1);
    run(300000, 0, 1);
    CHECK(cudaStreamDestroy(s));

    /* The same buffers as input and output: c = c + c, twice. */
    int n = 513;
    float h[513], *d;
    for (int i = 0; i < n; i++)
        h[i] = (float)i;
    CHECK(cudaMalloc((void **)&d, sizeof(h)));
    CHECK(cudaMemcpy(d, h, sizeof(h), cudaMemcpyHostToDevice));
    vec_add<<<(n + 127) / 128, 128>>>(d, d, d, n);
    vec_add<<<(n + 127) / 128, 128>>>(d, d, d, n);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        if (h[i] != (float)(4 * i))
            fail("in place: h[%d] = %g, expected %d", i, h[i], 4 * i);
    printf("in place twice: ok, checksum %016llx\n",
           (unsigned long long)checksum(h, sizeof(h)));
    CHECK(cudaFree(d));

    CHECK(cudaDeviceSynchronize());
    test_pass();
}
