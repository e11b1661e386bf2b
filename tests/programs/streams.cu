/*
 * streams: asynchronous copies and memsets on several streams (blocking,
 * non-blocking, with priorities), ordered across streams by events and
 * cudaStreamWaitEvent, the legacy default stream's implicit ordering, long
 * queues of small operations, and the query/synchronize calls. Timings are
 * checked (elapsed >= 0) but never printed: they differ from run to run.
 */
#include "check.h"

#define NSTREAMS 4
#define CHUNK (4 * MiB + 21)
#define TOTAL (NSTREAMS * CHUNK)

static unsigned char *hin, *hout; /* pinned */
static unsigned char *dA, *dB, *dC;

static void compare(const unsigned char *got, const unsigned char *want, size_t n,
                    const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (got[i] != want[i])
            fail("%s: byte %zu is 0x%02x, expected 0x%02x", what, i, got[i], want[i]);
    printf("%s: ok, checksum %016llx\n", what, (unsigned long long)checksum(got, n));
}

int main(void)
{
    test_begin("streams");
    require_device();
    CHECK(cudaSetDevice(0));

    CHECK(cudaMallocHost((void **)&hin, TOTAL));
    CHECK(cudaHostAlloc((void **)&hout, TOTAL, cudaHostAllocDefault));
    CHECK(cudaMalloc((void **)&dA, TOTAL));
    CHECK(cudaMalloc((void **)&dB, TOTAL));
    CHECK(cudaMalloc((void **)&dC, TOTAL));

    /* One stream of each kind. Priorities outside the device's range are
     * clamped, so 100 and -100 are valid. */
    cudaStream_t s[NSTREAMS];
    CHECK(cudaStreamCreate(&s[0]));
    CHECK(cudaStreamCreateWithFlags(&s[1], cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithPriority(&s[2], cudaStreamDefault, -100));
    CHECK(cudaStreamCreateWithPriority(&s[3], cudaStreamNonBlocking, 100));
    printf("created %d streams\n", NSTREAMS);

    cudaEvent_t ev[NSTREAMS];
    CHECK(cudaEventCreate(&ev[0]));
    CHECK(cudaEventCreateWithFlags(&ev[1], cudaEventDisableTiming));
    CHECK(cudaEventCreateWithFlags(&ev[2], cudaEventBlockingSync));
    CHECK(cudaEventCreateWithFlags(&ev[3], cudaEventBlockingSync | cudaEventDisableTiming));

    /* 1. Each stream moves its chunk host -> dA -> dB (after clearing dB)
     * and records an event; the NEXT stream waits for that event and copies
     * the chunk back. Only the event orders the two halves. */
    fill_pattern(hin, TOTAL, 1);
    memset(hout, 0, TOTAL);
    for (int i = 0; i < NSTREAMS; i++) {
        size_t off = (size_t)i * CHUNK;
        CHECK(cudaMemcpyAsync(dA + off, hin + off, CHUNK, cudaMemcpyHostToDevice, s[i]));
        CHECK(cudaMemsetAsync(dB + off, 0, CHUNK, s[i]));
        CHECK(cudaMemcpyAsync(dB + off, dA + off, CHUNK, cudaMemcpyDeviceToDevice, s[i]));
        CHECK(cudaEventRecord(ev[i], s[i]));
    }
    for (int i = 0; i < NSTREAMS; i++) {
        size_t off = (size_t)i * CHUNK;
        cudaStream_t other = s[(i + 1) % NSTREAMS];
        CHECK(cudaStreamWaitEvent(other, ev[i], 0));
        CHECK(cudaMemcpyAsync(hout + off, dB + off, CHUNK, cudaMemcpyDeviceToHost, other));
    }
    for (int i = 0; i < NSTREAMS; i++)
        CHECK(cudaStreamSynchronize(s[i]));
    compare(hout, hin, TOTAL, "events across streams");

    /* Once synchronized, everything reports complete. */
    for (int i = 0; i < NSTREAMS; i++) {
        CHECK(cudaStreamQuery(s[i]));
        CHECK(cudaEventQuery(ev[i]));
        CHECK(cudaEventSynchronize(ev[i]));
    }
    printf("query after synchronize: cudaSuccess\n");

    /* 2. Timing events on one stream. */
    {
        cudaEvent_t start, stop;
        CHECK(cudaEventCreate(&start));
        CHECK(cudaEventCreateWithFlags(&stop, cudaEventDefault));
        CHECK(cudaEventRecord(start, s[0]));
        CHECK(cudaMemcpyAsync(dC, hin, TOTAL, cudaMemcpyHostToDevice, s[0]));
        CHECK(cudaEventRecord(stop, s[0]));
        CHECK(cudaEventSynchronize(stop));
        CHECK(cudaEventQuery(start));
        float ms = -1.0f;
        CHECK(cudaEventElapsedTime(&ms, start, stop));
        if (!(ms >= 0.0f))
            fail("cudaEventElapsedTime gave a negative time");
        printf("elapsed time between events: >= 0\n");
        CHECK(cudaEventDestroy(start));
        CHECK(cudaEventDestroy(stop));
    }

    /* 3. The legacy default stream waits for work already queued on
     * blocking streams, and blocking streams wait for it. */
    {
        fill_pattern(hin, TOTAL, 2);
        memset(hout, 0, TOTAL);
        CHECK(cudaMemcpyAsync(dC, hin, TOTAL, cudaMemcpyHostToDevice, s[0]));
        CHECK(cudaMemcpyAsync(dA, dC, TOTAL, cudaMemcpyDeviceToDevice, 0));
        CHECK(cudaMemcpyAsync(hout, dA, TOTAL, cudaMemcpyDeviceToHost, s[2]));
        CHECK(cudaStreamSynchronize(s[2]));
        compare(hout, hin, TOTAL, "legacy default stream ordering");
    }

    /* 4. An event recorded on the default stream, waited on by a
     * non-blocking stream. */
    {
        fill_pattern(hin, CHUNK, 3);
        memset(hout, 0, CHUNK);
        CHECK(cudaMemcpyAsync(dB, hin, CHUNK, cudaMemcpyHostToDevice, 0));
        CHECK(cudaEventRecord(ev[1], 0));
        CHECK(cudaStreamWaitEvent(s[3], ev[1], 0));
        CHECK(cudaMemcpyAsync(hout, dB, CHUNK, cudaMemcpyDeviceToHost, s[3]));
        CHECK(cudaStreamSynchronize(s[3]));
        compare(hout, hin, CHUNK, "default-stream event waited on by a non-blocking stream");
    }

    /* 5. A long queue of small operations on one stream: 1000 copies of
     * 1000 bytes and 100 memsets, then one copy back. */
    {
        const size_t n = 1000 * 1000;
        fill_pattern(hin, n, 4);
        memset(hout, 0, n);
        /* hin must not change until the copies have run: build the
         * expected bytes elsewhere. */
        unsigned char *want = (unsigned char *)malloc(n);
        EXPECT(want != NULL);
        memcpy(want, hin, n);
        for (size_t i = 0; i < 1000; i++)
            CHECK(cudaMemcpyAsync(dA + i * 1000, hin + i * 1000, 1000, cudaMemcpyHostToDevice,
                                  s[1]));
        for (size_t i = 0; i < 100; i++) {
            CHECK(cudaMemsetAsync(dA + i * 9000 + 17, (int)(i & 0xFF), 33, s[1]));
            memset(want + i * 9000 + 17, (int)(i & 0xFF), 33);
        }
        CHECK(cudaMemcpyAsync(hout, dA, n, cudaMemcpyDeviceToHost, s[1]));
        CHECK(cudaStreamSynchronize(s[1]));
        compare(hout, want, n, "1100 queued operations");
        free(want);
    }

    /* 6. Async copies from and to pageable memory are allowed too. */
    {
        const size_t n = 3 * MiB + 7;
        unsigned char *src = (unsigned char *)malloc(n);
        unsigned char *dst = (unsigned char *)calloc(1, n);
        EXPECT(src != NULL && dst != NULL);
        fill_pattern(src, n, 5);
        CHECK(cudaMemcpyAsync(dC, src, n, cudaMemcpyHostToDevice, s[2]));
        CHECK(cudaMemcpyAsync(dst, dC, n, cudaMemcpyDeviceToHost, s[2]));
        CHECK(cudaStreamSynchronize(s[2]));
        compare(dst, src, n, "async copies with pageable memory");
        free(src);
        free(dst);
    }

    /* 7. Streams destroyed with work still queued: the work completes. */
    {
        cudaStream_t t;
        CHECK(cudaStreamCreateWithFlags(&t, cudaStreamNonBlocking));
        fill_pattern(hin, CHUNK, 6);
        CHECK(cudaMemcpyAsync(dB, hin, CHUNK, cudaMemcpyHostToDevice, t));
        CHECK(cudaMemsetAsync(dB, 0x7E, 100, t));
        CHECK(cudaStreamDestroy(t));
        CHECK(cudaDeviceSynchronize());
        memset(hin, 0x7E, 100); /* only now: the copy read hin */
        CHECK(cudaMemcpy(hout, dB, CHUNK, cudaMemcpyDeviceToHost));
        compare(hout, hin, CHUNK, "work on a destroyed stream");
    }

    CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < NSTREAMS; i++) {
        CHECK(cudaEventDestroy(ev[i]));
        CHECK(cudaStreamDestroy(s[i]));
    }
    CHECK(cudaFree(dA));
    CHECK(cudaFree(dB));
    CHECK(cudaFree(dC));
    CHECK(cudaFreeHost(hin));
    CHECK(cudaFreeHost(hout));
    EXPECT(cudaGetLastError() == cudaSuccess);
    test_pass();
}
