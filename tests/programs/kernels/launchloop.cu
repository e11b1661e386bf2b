/*
 * launchloop: 10,000 launches of a tiny kernel, one synchronize at the end;
 * every launch must have run (the counter says 10000). Then 1,000 more
 * through cudaLaunchKernel. Launches are fire-and-forget, so this is cheap
 * only if they are batched. The time of the 10,000-launch loop (launches
 * plus the one synchronize) goes to stderr, never stdout: the transcript
 * must be the same on every run and device.
 */
#include "../check.h"

#include <time.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

#define LAUNCHES 10000

extern "C" __global__ void increment(unsigned int *counter)
{
    if (threadIdx.x == 0 && blockIdx.x == 0)
        *counter += 1;
}

int main(void)
{
    test_begin("launchloop");
    require_device();
    CHECK(cudaSetDevice(0));

    unsigned int *dcounter, counter = 0;
    CHECK(cudaMalloc((void **)&dcounter, sizeof(unsigned int)));
    CHECK(cudaMemset(dcounter, 0, sizeof(unsigned int)));

    /* Warm up: the module is loaded and the kernel resolved by now. */
    increment<<<1, 32>>>(dcounter);
    CHECK(cudaMemset(dcounter, 0, sizeof(unsigned int)));
    CHECK(cudaDeviceSynchronize());

    double t0 = now_ms();
    for (int i = 0; i < LAUNCHES; i++)
        increment<<<1, 32>>>(dcounter);
    double t1 = now_ms();
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    double t2 = now_ms();
    fprintf(stderr, "launchloop: %d launches: %.3f ms to queue, %.3f ms including "
            "the synchronize\n", LAUNCHES, t1 - t0, t2 - t0);
    CHECK(cudaMemcpy(&counter, dcounter, sizeof(counter), cudaMemcpyDeviceToHost));
    printf("launches: %d, counter: %u\n", LAUNCHES, counter);
    EXPECT(counter == LAUNCHES);

    for (int i = 0; i < 1000; i++) {
        void *args[] = { &dcounter };
        CHECK(cudaLaunchKernel((const void *)increment, dim3(1), dim3(1), args, 0, 0));
    }
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaMemcpy(&counter, dcounter, sizeof(counter), cudaMemcpyDeviceToHost));
    printf("after 1000 cudaLaunchKernel: counter %u\n", counter);
    EXPECT(counter == LAUNCHES + 1000);

    CHECK(cudaFree(dcounter));
    test_pass();
}
