/*
 * launchruns: the same launch over and over, as loops of small in-place
 * operations make it, mixed with the work a program puts between such
 * runs; every launch must run exactly once, in the order it was made.
 * Through pvgpu a run of identical launches may reach the GPU as one
 * graph (host-backend/session/runs.c): a launch lost, run twice or moved
 * past a memset, an event, another stream's work or a capture shows up
 * here as a wrong count.
 */
#include "../check.h"

extern "C" __global__ void increment(unsigned int *counter)
{
    if (threadIdx.x == 0 && blockIdx.x == 0)
        *counter += 1;
}

static unsigned int *slots;     /* device counters */

static unsigned int read_slot(int i)
{
    unsigned int v = 0;
    CHECK(cudaMemcpy(&v, slots + i, sizeof(v), cudaMemcpyDeviceToHost));
    return v;
}

static void expect_slot(const char *what, int i, unsigned int want)
{
    unsigned int got = read_slot(i);
    printf("%s: %u\n", what, got);
    EXPECT(got == want);
}

int main(void)
{
    test_begin("launchruns");
    require_device();
    CHECK(cudaSetDevice(0));
    CHECK(cudaMalloc((void **)&slots, 8 * sizeof(unsigned int)));
    CHECK(cudaMemset(slots, 0, 8 * sizeof(unsigned int)));

    /* One long run, then a memset between two runs on the same stream. */
    for (int i = 0; i < 1000; i++)
        increment<<<1, 32>>>(slots + 0);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    expect_slot("1000 launches", 0, 1000);
    for (int i = 0; i < 1000; i++)
        increment<<<1, 32>>>(slots + 0);
    CHECK(cudaMemsetAsync(slots + 0, 0, sizeof(unsigned int)));
    for (int i = 0; i < 100; i++)
        increment<<<1, 32>>>(slots + 0);
    CHECK(cudaDeviceSynchronize());
    expect_slot("1000, a memset, 100", 0, 100);

    /* Alternating arguments, alternating shapes: no two alike in a row. */
    for (int i = 0; i < 500; i++) {
        increment<<<1, 32>>>(slots + 1);
        increment<<<1, 32>>>(slots + 2);
    }
    for (int i = 0; i < 300; i++) {
        increment<<<1, 32>>>(slots + 3);
        increment<<<2, 32>>>(slots + 3);
    }
    CHECK(cudaDeviceSynchronize());
    expect_slot("alternating, first counter", 1, 500);
    expect_slot("alternating, second counter", 2, 500);
    expect_slot("alternating shapes", 3, 600);

    /* Runs on two streams, then one waits for the other's event. */
    cudaStream_t s1, s2;
    cudaEvent_t done;
    CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    for (int i = 0; i < 640; i++)
        increment<<<1, 32, 0, s1>>>(slots + 4);
    CHECK(cudaEventRecord(done, s1));
    CHECK(cudaStreamWaitEvent(s2, done, 0));
    CHECK(cudaMemsetAsync(slots + 4, 0, sizeof(unsigned int), s2));
    for (int i = 0; i < 70; i++)
        increment<<<1, 32, 0, s2>>>(slots + 4);
    for (int i = 0; i < 640; i++)
        increment<<<1, 32, 0, s1>>>(slots + 5);
    CHECK(cudaStreamSynchronize(s1));
    CHECK(cudaStreamSynchronize(s2));
    expect_slot("s1's 640, then s2's memset and 70", 4, 70);
    expect_slot("s1's second 640", 5, 640);

    /* A captured run is the graph's, launched three times. */
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CHECK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < 100; i++)
        increment<<<1, 32, 0, s1>>>(slots + 6);
    CHECK(cudaStreamEndCapture(s1, &graph));
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    expect_slot("captured, not yet launched", 6, 0);
    for (int i = 0; i < 3; i++)
        CHECK(cudaGraphLaunch(exec, s1));
    CHECK(cudaStreamSynchronize(s1));
    expect_slot("captured 100, launched 3 times", 6, 300);

    /* The function's attributes changed between runs. */
    for (int round = 0; round < 4; round++) {
        CHECK(cudaFuncSetAttribute(increment,
                                   cudaFuncAttributePreferredSharedMemoryCarveout,
                                   round * 25));
        for (int i = 0; i < 200; i++)
            increment<<<1, 32>>>(slots + 7);
    }
    CHECK(cudaDeviceSynchronize());
    expect_slot("4 runs of 200, attributes set between", 7, 800);

    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaGraphDestroy(graph));
    CHECK(cudaEventDestroy(done));
    CHECK(cudaStreamDestroy(s1));
    CHECK(cudaStreamDestroy(s2));
    CHECK(cudaFree(slots));
    test_pass();
}
