/*
 * streams4: copies and kernels overlapped on 4 streams. Each stream owns a
 * slice of the data and runs copy in -> kernel -> kernel -> copy out, many
 * chunks deep, so that one stream's copies can overlap another's kernels;
 * a final cross-stream step uses events. Every byte is verified; nothing
 * timing-related is printed.
 */
#include "../check.h"

#define NSTREAMS 4
#define CHUNK (1 << 18)             /* ints per chunk */
#define CHUNKS_PER_STREAM 8
#define TOTAL (NSTREAMS * CHUNKS_PER_STREAM * CHUNK)

/* p[i] = p[i] * 3 + k, repeated `reps` times (some work to overlap with). */
extern "C" __global__ void mul3_add(int *p, int n, int k, int reps)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        unsigned int v = (unsigned int)p[i];
        for (int r = 0; r < reps; r++)
            v = v * 3u + (unsigned int)k;   /* wraps, as on the host */
        p[i] = (int)v;
    }
}

/* dst[i] = a[i] - b[i], wrapping */
extern "C" __global__ void subtract(const int *a, const int *b, int *dst, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        dst[i] = (int)((unsigned int)a[i] - (unsigned int)b[i]);
}

static int expect_value(int x, int k, int reps)
{
    unsigned int v = (unsigned int)x;
    for (int r = 0; r < reps; r++)
        v = v * 3u + (unsigned int)k;
    return (int)v;
}

int main(void)
{
    test_begin("streams4");
    require_device();
    CHECK(cudaSetDevice(0));

    int *hin, *hout, *din, *dwork;
    CHECK(cudaMallocHost((void **)&hin, (size_t)TOTAL * sizeof(int)));
    CHECK(cudaMallocHost((void **)&hout, (size_t)TOTAL * sizeof(int)));
    CHECK(cudaMalloc((void **)&din, (size_t)TOTAL * sizeof(int)));
    CHECK(cudaMalloc((void **)&dwork, (size_t)TOTAL * sizeof(int)));
    for (int i = 0; i < TOTAL; i++)
        hin[i] = (int)((unsigned)i * 2654435761u >> 8);
    memset(hout, 0, (size_t)TOTAL * sizeof(int));

    cudaStream_t s[NSTREAMS];
    cudaEvent_t done[NSTREAMS];
    for (int i = 0; i < NSTREAMS; i++) {
        CHECK(cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking));
        CHECK(cudaEventCreateWithFlags(&done[i], cudaEventDisableTiming));
    }

    /* Chunks round-robin over the streams, queued breadth first. */
    for (int c = 0; c < CHUNKS_PER_STREAM; c++)
        for (int i = 0; i < NSTREAMS; i++) {
            size_t off = ((size_t)c * NSTREAMS + i) * CHUNK;
            int k = i + 1;
            CHECK(cudaMemcpyAsync(din + off, hin + off, CHUNK * sizeof(int),
                                  cudaMemcpyHostToDevice, s[i]));
            CHECK(cudaMemcpyAsync(dwork + off, din + off, CHUNK * sizeof(int),
                                  cudaMemcpyDeviceToDevice, s[i]));
            mul3_add<<<CHUNK / 256, 256, 0, s[i]>>>(dwork + off, CHUNK, k, 20);
            mul3_add<<<CHUNK / 256, 256, 0, s[i]>>>(dwork + off, CHUNK, -k, 5);
            CHECK(cudaMemcpyAsync(hout + off, dwork + off, CHUNK * sizeof(int),
                                  cudaMemcpyDeviceToHost, s[i]));
        }
    CHECK(cudaGetLastError());
    for (int i = 0; i < NSTREAMS; i++)
        CHECK(cudaEventRecord(done[i], s[i]));
    for (int i = 0; i < NSTREAMS; i++)
        CHECK(cudaEventSynchronize(done[i]));

    for (int c = 0; c < CHUNKS_PER_STREAM; c++)
        for (int i = 0; i < NSTREAMS; i++) {
            size_t off = ((size_t)c * NSTREAMS + i) * CHUNK;
            int k = i + 1;
            for (int j = 0; j < CHUNK; j++) {
                int want = expect_value(expect_value(hin[off + j], k, 20), -k, 5);
                if (hout[off + j] != want)
                    fail("stream %d chunk %d: element %d is %d, expected %d",
                         i, c, j, hout[off + j], want);
            }
        }
    printf("%d streams x %d chunks of copy/kernel/kernel/copy: ok, checksum %016llx\n",
           NSTREAMS, CHUNKS_PER_STREAM,
           (unsigned long long)checksum(hout, (size_t)TOTAL * sizeof(int)));

    /* Across streams: stream (i+1) waits for stream i's event, then
     * subtracts stream i's input slice from its result slice. */
    int *ddiff;
    CHECK(cudaMalloc((void **)&ddiff, (size_t)NSTREAMS * CHUNK * sizeof(int)));
    for (int i = 0; i < NSTREAMS; i++) {
        /* Stream i rewrites its first chunk's input. */
        CHECK(cudaMemsetAsync(din + (size_t)i * CHUNK, 0, CHUNK * sizeof(int), s[i]));
        mul3_add<<<CHUNK / 256, 256, 0, s[i]>>>(din + (size_t)i * CHUNK, CHUNK, i, 1);
        CHECK(cudaEventRecord(done[i], s[i]));
    }
    for (int i = 0; i < NSTREAMS; i++) {
        cudaStream_t next = s[(i + 1) % NSTREAMS];
        CHECK(cudaStreamWaitEvent(next, done[i], 0));
        subtract<<<CHUNK / 256, 256, 0, next>>>(dwork + (size_t)i * CHUNK,
                                               din + (size_t)i * CHUNK,
                                               ddiff + (size_t)i * CHUNK, CHUNK);
        CHECK(cudaMemcpyAsync(hout + (size_t)i * CHUNK, ddiff + (size_t)i * CHUNK,
                              CHUNK * sizeof(int), cudaMemcpyDeviceToHost, next));
    }
    CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < NSTREAMS; i++)
        for (int j = 0; j < CHUNK; j++) {
            size_t off = (size_t)i * CHUNK + j;
            int k = i + 1;
            int before = expect_value(expect_value(hin[off], k, 20), -k, 5);
            int want = (int)((unsigned)before - (unsigned)i);
            if (hout[off] != want)
                fail("event-ordered subtract: stream %d element %d is %d, expected %d",
                     i, j, hout[off], want);
        }
    printf("event-ordered kernels across streams: ok\n");

    for (int i = 0; i < NSTREAMS; i++) {
        CHECK(cudaStreamDestroy(s[i]));
        CHECK(cudaEventDestroy(done[i]));
    }
    CHECK(cudaFree(ddiff));
    CHECK(cudaFree(din));
    CHECK(cudaFree(dwork));
    CHECK(cudaFreeHost(hin));
    CHECK(cudaFreeHost(hout));
    test_pass();
}
