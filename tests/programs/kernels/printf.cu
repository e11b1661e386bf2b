/*
 * printf: what a kernel prints (device printf, a failed assert) belongs to
 * the program (DESIGN §3): it appears in the program's own stdout/stderr,
 * at the synchronisation after the launch (not at a query), between the
 * host lines around it, never in pvgpud's log and never in another
 * session's output.
 *
 * PVGPU_TEST_TAG (a number, default 7) goes into every device line, so a
 * test running two of these at once can tell whose output is whose.  One
 * thread prints, so the order is the same on every device.
 */
#include <assert.h>

#include "../check.h"

extern "C" __global__ void say(int tag, int lines)
{
    if (blockIdx.x == 0 && threadIdx.x == 0)
        for (int i = 0; i < lines; i++)
            printf("device: tag %d line %d of %d\n", tag, i + 1, lines);
}

extern "C" __global__ void expect_index(const int *v, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        assert(v[i] == i);
}

int main(void)
{
    const char *t = getenv("PVGPU_TEST_TAG");
    int tag = t ? atoi(t) : 7;
    const int n = 64;
    int h[n], *d;

    test_begin("printf");
    require_device();

    say<<<1, 1>>>(tag, 3);
    CHECK(cudaGetLastError());
    printf("host: launched\n");
    CHECK(cudaDeviceSynchronize());
    printf("host: synchronized\n");

    /*
     * A query is not where CUDA writes device output: with the kernel
     * seen done through its event, its lines still wait for the next
     * synchronize.
     */
    cudaEvent_t ev;
    CHECK(cudaEventCreate(&ev));
    say<<<1, 1>>>(tag, 2);
    CHECK(cudaEventRecord(ev, 0));
    while (cudaEventQuery(ev) == cudaErrorNotReady)
        ;
    CHECK(cudaEventQuery(ev));
    CHECK(cudaStreamQuery(0));
    printf("host: event done\n");
    CHECK(cudaDeviceSynchronize());
    printf("host: synchronized again\n");
    CHECK(cudaEventDestroy(ev));

    /* Many lines in one go, then on a stream of its own. */
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    say<<<2, 32, 0, s>>>(tag, 200);
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaStreamDestroy(s));
    printf("host: stream synchronized\n");

    /* A copy back waits for the kernel before it: its output comes first. */
    for (int i = 0; i < n; i++)
        h[i] = i;
    CHECK(cudaMalloc(&d, sizeof(h)));
    CHECK(cudaMemcpy(d, h, sizeof(h), cudaMemcpyHostToDevice));
    say<<<1, 1>>>(tag, 1);
    expect_index<<<2, 32>>>(d, n);
    CHECK(cudaMemcpy(h, d, sizeof(h), cudaMemcpyDeviceToHost));
    printf("host: copied back\n");

    /* One element wrong: one failed assert, a sticky cudaErrorAssert. */
    h[37] = -1;
    CHECK(cudaMemcpy(d, h, sizeof(h), cudaMemcpyHostToDevice));
    expect_index<<<2, 32>>>(d, n);
    cudaError_t err = cudaDeviceSynchronize();
    printf("assert: %s\n", cudaGetErrorName(err));
    EXPECT(err == cudaErrorAssert);
    test_pass();
}
