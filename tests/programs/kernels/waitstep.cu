/*
 * waitstep: the loop of a training or simulation step -- a kernel of a
 * couple of milliseconds, then a synchronous call that waits for it (a
 * copy of its result into pinned memory, or a synchronize), then the next
 * kernel.  The GPU idles from the end of one kernel to the start of the
 * next: the copy, the call's return and the next launch.  Each kernel
 * stamps its start and end with the GPU's clock (%globaltimer), so the
 * idle gaps are the GPU's own measure; their medians go to stderr (never
 * stdout: the transcript must be the same on every run and device):
 *
 *   waitstep: copy: median gap X us; synchronize: median gap Y us (N steps each)
 *
 * Through pvgpu a gap grows by whatever the worker does between the word
 * and the next launch: asleep when the device finished, it had to be woken
 * by that launch (tests/gpu/test_gpu_settle.py, BENCHMARKS.md).
 */
#include "../check.h"

#include <algorithm>
#include <vector>

#define STEPS 150
#define HOLD_NS 2000000ull		/* each kernel: 2 ms */
#define COPY_BYTES (1u << 20)
#define WORDS (COPY_BYTES / 4)

__device__ static unsigned long long gpu_now(void)
{
    unsigned long long t;

    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/*
 * One thread: hold the GPU for ns, mark the first and last of the buffer's
 * words, stamp [start, end].
 */
extern "C" __global__ void hold(unsigned long long *stamps, unsigned int *buf,
                                unsigned int words, unsigned int step,
                                unsigned long long ns)
{
    unsigned long long t0 = gpu_now(), t;

    do
        t = gpu_now();
    while (t - t0 < ns);
    buf[0] = step;
    buf[words - 1] = ~step;
    stamps[0] = t0;
    stamps[1] = gpu_now();
}

/* Median idle time between kernel i's end and kernel i+1's start, in us. */
static double median_gap_us(const unsigned long long *s, int n)
{
    std::vector<double> gap;

    for (int i = 0; i + 1 < n; i++)
        gap.push_back((double)(s[2 * (i + 1)] - s[2 * i + 1]) / 1e3);
    std::sort(gap.begin(), gap.end());
    return gap[gap.size() / 2];
}

int main(void)
{
    test_begin("waitstep");
    require_device();
    CHECK(cudaSetDevice(0));

    unsigned long long *dstamps;
    unsigned int *dbuf, *hbuf;
    static unsigned long long copy_stamps[2 * STEPS], sync_stamps[2 * STEPS];
    int bad = 0;

    CHECK(cudaMalloc((void **)&dstamps, sizeof(copy_stamps)));
    CHECK(cudaMalloc((void **)&dbuf, COPY_BYTES));
    CHECK(cudaMallocHost((void **)&hbuf, COPY_BYTES));

    /* Warm up: the module loaded, the kernel resolved, the copy path set. */
    hold<<<1, 1>>>(dstamps, dbuf, WORDS, 0, 1000);
    CHECK(cudaMemcpy(hbuf, dbuf, COPY_BYTES, cudaMemcpyDeviceToHost));

    for (unsigned int i = 0; i < STEPS; i++) {
        hold<<<1, 1>>>(dstamps + 2 * i, dbuf, WORDS, i + 1, HOLD_NS);
        CHECK(cudaMemcpy(hbuf, dbuf, COPY_BYTES, cudaMemcpyDeviceToHost));
        if (hbuf[0] != i + 1 || hbuf[WORDS - 1] != ~(i + 1))
            bad++;
    }
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(copy_stamps, dstamps, sizeof(copy_stamps), cudaMemcpyDeviceToHost));
    printf("copy steps: %d, copies without their kernel's result: %d\n", STEPS, bad);
    EXPECT(bad == 0);

    for (unsigned int i = 0; i < STEPS; i++) {
        hold<<<1, 1>>>(dstamps + 2 * i, dbuf, WORDS, i + 1, HOLD_NS);
        CHECK(cudaDeviceSynchronize());
    }
    CHECK(cudaMemcpy(sync_stamps, dstamps, sizeof(sync_stamps), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(hbuf, dbuf, COPY_BYTES, cudaMemcpyDeviceToHost));
    printf("synchronize steps: %d, last mark %s\n", STEPS,
           hbuf[0] == STEPS ? "right" : "wrong");
    EXPECT(hbuf[0] == STEPS);

    for (int i = 0; i < STEPS; i++)
        EXPECT(copy_stamps[2 * i + 1] - copy_stamps[2 * i] >= HOLD_NS &&
               sync_stamps[2 * i + 1] - sync_stamps[2 * i] >= HOLD_NS);
    fprintf(stderr, "waitstep: copy: median gap %.1f us; synchronize: median gap "
            "%.1f us (%d steps each)\n", median_gap_us(copy_stamps, STEPS),
            median_gap_us(sync_stamps, STEPS), STEPS);

    CHECK(cudaFreeHost(hbuf));
    CHECK(cudaFree(dbuf));
    CHECK(cudaFree(dstamps));
    test_pass();
}
