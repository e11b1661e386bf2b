/*
 * meminfo: cudaMemGetInfo moves with this program's allocations. The
 * figures themselves differ between runs (and through pvgpu they are a
 * quota), so only the relations are printed, as yes/no.
 *
 * Other users of the same GPU (or quota) allocating at the same time would
 * disturb the figures: run this program on its own.
 */
#include "check.h"

static const char *yes(int b) { return b ? "yes" : "no"; }

int main(void)
{
    test_begin("meminfo");
    require_device();
    CHECK(cudaSetDevice(0));

    size_t free0 = 0, total0 = 0;
    CHECK(cudaMemGetInfo(&free0, &total0));
    printf("total > 0: %s\n", yes(total0 > 0));
    printf("free <= total: %s\n", yes(free0 <= total0));

    cudaDeviceProp prop;
    CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("total <= device memory: %s\n", yes(total0 <= prop.totalGlobalMem));

    /* Large sizes only: the driver serves small allocations from chunks it
     * keeps, so they need not move the free figure at all. */
    const size_t sizes[] = {256 * MiB, 64 * MiB + 1, 128 * MiB};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t n = sizes[i];
        size_t before = 0, during = 0, after = 0, total = 0;
        CHECK(cudaMemGetInfo(&before, &total));
        void *d = NULL;
        CHECK(cudaMalloc(&d, n));
        CHECK(cudaMemGetInfo(&during, &total));
        CHECK(cudaFree(d));
        CHECK(cudaMemGetInfo(&after, &total));

        int dropped = during + n <= before;
        int back = after >= during + n;
        printf("cudaMalloc(%zu): total unchanged: %s, free dropped by at least %zu: %s, "
               "free back after cudaFree: %s\n",
               n, yes(total == total0), n, yes(dropped), yes(back));
        if (total != total0 || !dropped || !back)
            fail("cudaMemGetInfo did not follow cudaMalloc/cudaFree of %zu bytes", n);
    }

    /* Several allocations held at once add up. */
    {
        enum { N = 8 };
        const size_t n = 32 * MiB;
        void *d[N];
        size_t before = 0, during = 0, after = 0, total = 0;
        CHECK(cudaMemGetInfo(&before, &total));
        for (int i = 0; i < N; i++)
            CHECK(cudaMalloc(&d[i], n));
        CHECK(cudaMemGetInfo(&during, &total));
        for (int i = 0; i < N; i++)
            CHECK(cudaFree(d[i]));
        CHECK(cudaMemGetInfo(&after, &total));
        int dropped = during + N * n <= before;
        int back = after >= during + N * n;
        printf("%d x cudaMalloc(%zu): free dropped by at least the sum: %s, "
               "free back after cudaFree: %s\n",
               N, n, yes(dropped), yes(back));
        if (!dropped || !back)
            fail("cudaMemGetInfo did not follow %d allocations", N);
    }

    /* Pinned host memory is not device memory. */
    {
        size_t before = 0, during = 0, total = 0;
        CHECK(cudaMemGetInfo(&before, &total));
        void *h = NULL;
        CHECK(cudaMallocHost(&h, 64 * MiB));
        CHECK(cudaMemGetInfo(&during, &total));
        CHECK(cudaFreeHost(h));
        /* Allow the driver some bookkeeping, but not the 64 MiB. */
        int unchanged = during + 16 * MiB >= before;
        printf("cudaMallocHost leaves device memory alone: %s\n", yes(unchanged));
        if (!unchanged)
            fail("cudaMallocHost took device memory");
    }

    EXPECT(cudaGetLastError() == cudaSuccess);
    test_pass();
}
