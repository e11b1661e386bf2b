/*
 * fault: a kernel writes through a wild pointer. As on any GPU, the launch
 * itself is accepted; the fault surfaces at the next synchronize as
 * cudaErrorIllegalAddress, and the context is unusable from then on: every
 * later call that touches the device keeps returning the same error. The
 * program exits 0 after printing that transcript; what follows (another
 * process, another session) must be unaffected, which the test harness
 * checks by running something else next.
 */
#include "../check.h"

extern "C" __global__ void wild_write(int *p, int v)
{
    p[threadIdx.x] = v;
}

/* A call that must report the sticky illegal-address error. */
#define EXPECT_ILLEGAL(label, call) \
    EXPECT_STICKY(label, call, cudaErrorIllegalAddress)
#define EXPECT_STICKY(label, call, expected)                                 \
    do {                                                                     \
        cudaError_t e_ = (call);                                             \
        printf("%s: %s\n", (label), cudaGetErrorName(e_));                   \
        if (e_ != (expected))                                                \
            fail("line %d: %s -> %s, expected %s", __LINE__, #call,          \
                 cudaGetErrorName(e_), cudaGetErrorName(expected));          \
    } while (0)

int main(void)
{
    test_begin("fault");
    require_device();
    CHECK(cudaSetDevice(0));

    /* A healthy start: memory works. */
    int *d, h = 0;
    CHECK(cudaMalloc((void **)&d, sizeof(int)));
    CHECK(cudaMemset(d, 0, sizeof(int)));
    CHECK(cudaDeviceSynchronize());
    printf("before the fault: ok\n");

    /* Far from any allocation. */
    int *wild = (int *)(uintptr_t)0x10;
    wild_write<<<1, 32>>>(wild, 7);
    EXPECT_ILLEGAL("cudaDeviceSynchronize after the faulting kernel",
                   cudaDeviceSynchronize());
    EXPECT_ILLEGAL("cudaDeviceSynchronize again", cudaDeviceSynchronize());
    EXPECT_ILLEGAL("cudaMemcpy", cudaMemcpy(&h, d, sizeof(int), cudaMemcpyDeviceToHost));
    int *d2 = NULL;
    EXPECT_ILLEGAL("cudaMalloc", cudaMalloc((void **)&d2, 64));
    EXPECT_ILLEGAL("cudaGetLastError", cudaGetLastError());
    EXPECT_ILLEGAL("cudaDeviceSynchronize at the end", cudaDeviceSynchronize());

    printf("PASS\n");
    fflush(stdout);
    return 0;
}
