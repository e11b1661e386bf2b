/*
 * devglobal: __device__ variables. An initialised `__device__ int x = 42`
 * starts at 42 (read by cudaMemcpyFromSymbol and by a kernel); kernels
 * write globals that the host reads back; the host writes one that a
 * kernel then reads; cudaGetSymbolAddress gives memory a kernel can be
 * handed as a plain pointer.
 */
#include "../check.h"

#define NRES 128

__device__ int x = 42;
__device__ int results[NRES];
__device__ unsigned long long stamp;

extern "C" __global__ void read_x(int *out)
{
    *out = x;
}

extern "C" __global__ void bump_x(int by)
{
    if (threadIdx.x == 0 && blockIdx.x == 0)
        x += by;
}

/* results[t] = base + t * t; stamp = base * 1000003 + blockDim.x */
extern "C" __global__ void write_results(int base)
{
    int t = threadIdx.x;
    if (t < NRES)
        results[t] = base + t * t;
    if (t == 0)
        stamp = (unsigned long long)base * 1000003ull + blockDim.x;
}

/* p[i] *= 2: for a global's address handed in as a pointer. */
extern "C" __global__ void twice(int *p, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        p[i] *= 2;
}

int main(void)
{
    test_begin("devglobal");
    require_device();
    CHECK(cudaSetDevice(0));

    int hx = 0;
    CHECK(cudaMemcpyFromSymbol(&hx, x, sizeof(hx)));
    printf("initial x: %d\n", hx);
    EXPECT(hx == 42);

    int *dout, out = 0;
    CHECK(cudaMalloc((void **)&dout, sizeof(int)));
    read_x<<<1, 1>>>(dout);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(&out, dout, sizeof(int), cudaMemcpyDeviceToHost));
    printf("kernel reads x: %d\n", out);
    EXPECT(out == 42);

    bump_x<<<1, 32>>>(8);
    bump_x<<<1, 32>>>(-1);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpyFromSymbol(&hx, x, sizeof(hx)));
    printf("x after two kernels: %d\n", hx);
    EXPECT(hx == 49);

    hx = 7;
    CHECK(cudaMemcpyToSymbol(x, &hx, sizeof(hx)));
    read_x<<<1, 1>>>(dout);
    CHECK(cudaMemcpy(&out, dout, sizeof(int), cudaMemcpyDeviceToHost));
    printf("kernel reads x after cudaMemcpyToSymbol: %d\n", out);
    EXPECT(out == 7);

    int res[NRES];
    unsigned long long hstamp = 0;
    write_results<<<1, NRES>>>(1000);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpyFromSymbol(res, results, sizeof(res)));
    CHECK(cudaMemcpyFromSymbol(&hstamp, stamp, sizeof(hstamp)));
    for (int t = 0; t < NRES; t++)
        if (res[t] != 1000 + t * t)
            fail("results[%d] = %d, expected %d", t, res[t], 1000 + t * t);
    printf("results written by a kernel: ok, checksum %016llx\n",
           (unsigned long long)checksum(res, sizeof(res)));
    printf("stamp: %llu\n", hstamp);
    EXPECT(hstamp == 1000ull * 1000003ull + NRES);

    void *addr = NULL;
    size_t size = 0;
    CHECK(cudaGetSymbolAddress(&addr, results));
    CHECK(cudaGetSymbolSize(&size, results));
    printf("cudaGetSymbolSize(results): %zu\n", size);
    EXPECT(addr != NULL && size == sizeof(res));
    twice<<<1, NRES>>>((int *)addr, NRES);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(res, addr, sizeof(res), cudaMemcpyDeviceToHost));
    for (int t = 0; t < NRES; t++)
        if (res[t] != 2 * (1000 + t * t))
            fail("twice: results[%d] = %d", t, res[t]);
    printf("kernel through cudaGetSymbolAddress: ok\n");

    CHECK(cudaFree(dout));
    CHECK(cudaDeviceSynchronize());
    test_pass();
}
