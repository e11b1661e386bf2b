/*
 * memory: synchronous copies in every direction, from 1 byte to 64 MiB
 * (odd sizes included, so block splitting and tails are exercised), from
 * pageable and pinned host memory, at offsets inside an allocation, plus an
 * 8-bit memset of each size. Every buffer that comes back is compared with
 * what was sent and its checksum printed.
 */
#include "check.h"

static const size_t sizes[] = {
    1, 2, 3, 7, 64, 1000, 4095, 4096, 4097, 65535, 65536, 1 * MiB - 1, 1 * MiB + 1,
    3 * MiB + 5, 16 * MiB, 64 * MiB - 1, 64 * MiB,
};
#define NSIZES (sizeof sizes / sizeof sizes[0])
#define MAX_SIZE (64 * MiB)

/* Host buffers of one kind: pageable (malloc) or pinned (cudaMallocHost). */
struct host_bufs {
    const char *kind;
    unsigned char *src, *dst;
};

static void round_trip(const struct host_bufs *h, unsigned char *d1, unsigned char *d2,
                       size_t n, uint32_t seed)
{
    fill_pattern(h->src, n, seed);
    memset(h->dst, 0, n);

    /* H2D, D2D, D2H: what comes back must be what went out. */
    CHECK(cudaMemcpy(d1, h->src, n, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(d2, d1, n, cudaMemcpyDeviceToDevice));
    CHECK(cudaMemcpy(h->dst, d2, n, cudaMemcpyDeviceToHost));
    if (memcmp(h->src, h->dst, n) != 0)
        fail("%s %zu bytes: data differs after H2D/D2D/D2H", h->kind, n);
    printf("%s %zu: copy ok, checksum %016llx\n", h->kind, n,
           (unsigned long long)checksum(h->dst, n));

    /* 8-bit memset over the same bytes; the byte depends on the size so a
     * stale result from an earlier round cannot pass. */
    unsigned char value = (unsigned char)(0x40 + n % 97);
    CHECK(cudaMemset(d2, value, n));
    CHECK(cudaMemcpy(h->dst, d2, n, cudaMemcpyDeviceToHost));
    size_t bad = first_not(h->dst, n, value);
    if (bad != n)
        fail("%s %zu bytes: memset 0x%02x, byte %zu is 0x%02x", h->kind, n, value, bad,
             h->dst[bad]);
    printf("%s %zu: memset 0x%02x ok, checksum %016llx\n", h->kind, n, value,
           (unsigned long long)checksum(h->dst, n));

    /* d1 was not touched by the memset of d2. */
    CHECK(cudaMemcpy(h->dst, d1, n, cudaMemcpyDeviceToHost));
    if (memcmp(h->src, h->dst, n) != 0)
        fail("%s %zu bytes: memset of one allocation changed another", h->kind, n);
}

/* Copies at offsets inside an allocation: device pointers are not only the
 * ones cudaMalloc returned. */
static void offsets(unsigned char *d, unsigned char *hsrc, unsigned char *hdst)
{
    const size_t n = 1 * MiB;
    fill_pattern(hsrc, n, 77);
    CHECK(cudaMemset(d, 0xEE, n));
    /* Write [3, 3+1000) and [4096+1, 4096+1+65536). */
    CHECK(cudaMemcpy(d + 3, hsrc + 3, 1000, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(d + 4097, hsrc + 4097, 65536, cudaMemcpyHostToDevice));
    /* Copy a middle piece device to device onto the end of the buffer. */
    CHECK(cudaMemcpy(d + n - 500, d + 4097 + 100, 500, cudaMemcpyDeviceToDevice));
    CHECK(cudaMemcpy(hdst, d, n, cudaMemcpyDeviceToHost));

    for (size_t i = 0; i < n; i++) {
        unsigned char want = 0xEE;
        if (i >= 3 && i < 1003)
            want = hsrc[i];
        else if (i >= 4097 && i < 4097 + 65536)
            want = hsrc[i];
        else if (i >= n - 500)
            want = hsrc[4097 + 100 + (i - (n - 500))];
        if (hdst[i] != want)
            fail("offsets: byte %zu is 0x%02x, expected 0x%02x", i, hdst[i], want);
    }
    /* A D2H copy from an offset, into an offset. */
    memset(hdst, 0, 2000);
    CHECK(cudaMemcpy(hdst + 1, d + 5, 998, cudaMemcpyDeviceToHost));
    EXPECT(hdst[0] == 0 && hdst[999] == 0);
    EXPECT(memcmp(hdst + 1, hsrc + 5, 998) == 0);
    printf("offsets: ok, checksum %016llx\n", (unsigned long long)checksum(hdst, 2000));
}

/* cudaMemcpyDefault works out the direction from the pointers (unified
 * addressing), and cudaMemcpyHostToHost copies host memory. */
static void other_kinds(unsigned char *d, unsigned char *hsrc, unsigned char *hdst)
{
    const size_t n = 100000;
    fill_pattern(hsrc, n, 99);
    memset(hdst, 0, n);
    CHECK(cudaMemcpy(d, hsrc, n, cudaMemcpyDefault));
    CHECK(cudaMemcpy(d + n, d, n, cudaMemcpyDefault));
    CHECK(cudaMemcpy(hdst, d + n, n, cudaMemcpyDefault));
    if (memcmp(hsrc, hdst, n) != 0)
        fail("cudaMemcpyDefault: data differs");
    printf("cudaMemcpyDefault: ok\n");

    memset(hdst, 0, n);
    CHECK(cudaMemcpy(hdst, hsrc, n, cudaMemcpyHostToHost));
    if (memcmp(hsrc, hdst, n) != 0)
        fail("cudaMemcpyHostToHost: data differs");
    printf("cudaMemcpyHostToHost: ok\n");

    /* Zero-byte copies and memsets are no-ops that succeed. */
    CHECK(cudaMemcpy(d, hsrc, 0, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(hdst, d, 0, cudaMemcpyDeviceToHost));
    CHECK(cudaMemset(d, 0, 0));
    printf("zero-byte copy and memset: ok\n");
}

int main(void)
{
    test_begin("memory");
    require_device();
    CHECK(cudaSetDevice(0));

    unsigned char *d1 = NULL, *d2 = NULL;
    CHECK(cudaMalloc((void **)&d1, MAX_SIZE));
    CHECK(cudaMalloc((void **)&d2, MAX_SIZE));
    EXPECT(d1 != NULL && d2 != NULL && d1 != d2);

    struct host_bufs pageable = {"pageable", NULL, NULL};
    pageable.src = (unsigned char *)malloc(MAX_SIZE);
    pageable.dst = (unsigned char *)malloc(MAX_SIZE);
    EXPECT(pageable.src != NULL && pageable.dst != NULL);

    /* Pinned memory both ways the runtime offers it. */
    struct host_bufs pinned = {"pinned", NULL, NULL};
    CHECK(cudaMallocHost((void **)&pinned.src, MAX_SIZE));
    CHECK(cudaHostAlloc((void **)&pinned.dst, MAX_SIZE, cudaHostAllocDefault));
    EXPECT(pinned.src != NULL && pinned.dst != NULL);

    for (size_t i = 0; i < NSIZES; i++) {
        round_trip(&pageable, d1, d2, sizes[i], (uint32_t)(2 * i));
        round_trip(&pinned, d1, d2, sizes[i], (uint32_t)(2 * i + 1));
    }

    /* Mixed: pageable source, pinned destination and back. */
    {
        const size_t n = 5 * MiB + 3;
        fill_pattern(pageable.src, n, 1234);
        CHECK(cudaMemcpy(d1, pageable.src, n, cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(pinned.dst, d1, n, cudaMemcpyDeviceToHost));
        if (memcmp(pageable.src, pinned.dst, n) != 0)
            fail("pageable to pinned through the device: data differs");
        printf("pageable -> device -> pinned: ok\n");
    }

    offsets(d1, pageable.src, pageable.dst);
    other_kinds(d1, pinned.src, pinned.dst);

    /* A portable pinned allocation, and many small allocations at once. */
    {
        unsigned char *hp = NULL;
        CHECK(cudaHostAlloc((void **)&hp, 4096, cudaHostAllocPortable));
        fill_pattern(hp, 4096, 5);
        enum { N = 64 };
        unsigned char *small[N];
        for (int i = 0; i < N; i++) {
            CHECK(cudaMalloc((void **)&small[i], (size_t)(i + 1) * 16));
            CHECK(cudaMemcpy(small[i], hp + i, (size_t)(i + 1) * 16, cudaMemcpyHostToDevice));
        }
        for (int i = 0; i < N; i++) {
            unsigned char back[N * 16];
            CHECK(cudaMemcpy(back, small[i], (size_t)(i + 1) * 16, cudaMemcpyDeviceToHost));
            if (memcmp(back, hp + i, (size_t)(i + 1) * 16) != 0)
                fail("small allocation %d: data differs", i);
        }
        /* Free in a different order than allocated. */
        for (int i = 0; i < N; i += 2)
            CHECK(cudaFree(small[i]));
        for (int i = 1; i < N; i += 2)
            CHECK(cudaFree(small[i]));
        CHECK(cudaFreeHost(hp));
        printf("64 small allocations: ok\n");
    }

    CHECK(cudaFree(d1));
    CHECK(cudaFree(d2));
    CHECK(cudaFree(NULL)); /* documented as a no-op */
    CHECK(cudaFreeHost(pinned.src));
    CHECK(cudaFreeHost(pinned.dst));

    /* After a reset the device is usable again from scratch. */
    CHECK(cudaDeviceReset());
    {
        unsigned char *d = NULL;
        const size_t n = 12345;
        CHECK(cudaMalloc((void **)&d, n));
        fill_pattern(pageable.src, n, 4321);
        CHECK(cudaMemcpy(d, pageable.src, n, cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(pageable.dst, d, n, cudaMemcpyDeviceToHost));
        if (memcmp(pageable.src, pageable.dst, n) != 0)
            fail("after cudaDeviceReset: data differs");
        CHECK(cudaFree(d));
        printf("after cudaDeviceReset: ok\n");
    }

    free(pageable.src);
    free(pageable.dst);
    CHECK(cudaDeviceSynchronize());
    EXPECT(cudaGetLastError() == cudaSuccess);
    test_pass();
}
