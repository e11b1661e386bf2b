/*
 * peer: two GPUs of one program.  Peer queries, peer copies
 * synchronous and on a stream (cudaMemcpyPeer, cudaMemcpyPeerAsync), plain
 * copies between the GPUs under unified addressing (cudaMemcpyDefault and
 * DeviceToDevice), and, where the GPUs are peers, peer access enabled and a
 * kernel on GPU 1 reading GPU 0's memory directly.  Data is checked byte
 * for byte on the host.  With fewer than two GPUs it says so and passes.
 *
 * `peer bandwidth [MiB]` instead times peer copies of MiB (default 256)
 * between GPU 0 and GPU 1 and prints GB/s (not a transcript: timings vary).
 */
#include <time.h>

#include "check.h"

/* out[i] = peer[i] + local[i], with `peer` in another GPU's memory. */
extern "C" __global__ void peer_add(const unsigned int *peer,
                                    const unsigned int *local,
                                    unsigned int *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = peer[i] + local[i];
}

static void *dev_alloc(int device, size_t bytes)
{
    void *p = NULL;
    CHECK(cudaSetDevice(device));
    CHECK(cudaMalloc(&p, bytes));
    return p;
}

static void expect_same(const void *want, const void *dptr, int device,
                        size_t bytes, const char *what)
{
    unsigned char *got = (unsigned char *)malloc(bytes);
    EXPECT(got);
    CHECK(cudaSetDevice(device));
    CHECK(cudaMemcpy(got, dptr, bytes, cudaMemcpyDeviceToHost));
    if (memcmp(got, want, bytes))
        fail("%s: data differs", what);
    printf("%s: %zu bytes, checksum %016llx\n", what, bytes,
           (unsigned long long)checksum(got, bytes));
    free(got);
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int bandwidth(size_t mib)
{
    size_t bytes = mib << 20;
    const int reps = 20;
    void *d0 = dev_alloc(0, bytes), *d1 = dev_alloc(1, bytes);
    cudaStream_t s;
    int can = 0;

    CHECK(cudaDeviceCanAccessPeer(&can, 1, 0));
    if (can) {
        CHECK(cudaSetDevice(1));
        CHECK(cudaDeviceEnablePeerAccess(0, 0));
        CHECK(cudaSetDevice(0));
        CHECK(cudaDeviceEnablePeerAccess(1, 0));
    }
    CHECK(cudaSetDevice(0));
    CHECK(cudaMemset(d0, 1, bytes));
    CHECK(cudaStreamCreate(&s));
    CHECK(cudaMemcpyPeer(d1, 1, d0, 0, bytes));   /* warm up */
    CHECK(cudaDeviceSynchronize());

    double t0 = now_s();
    for (int i = 0; i < reps; i++)
        CHECK(cudaMemcpyPeer(d1, 1, d0, 0, bytes));
    CHECK(cudaDeviceSynchronize());
    double sync_s = now_s() - t0;

    t0 = now_s();
    for (int i = 0; i < reps; i++)
        CHECK(cudaMemcpyPeerAsync(d1, 1, d0, 0, bytes, s));
    CHECK(cudaStreamSynchronize(s));
    double async_s = now_s() - t0;

    printf("peer access: %d\n", can);
    printf("peer_sync_gbps %.3f\n", (double)bytes * reps / sync_s / 1e9);
    printf("peer_async_gbps %.3f\n", (double)bytes * reps / async_s / 1e9);
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(d0));
    CHECK(cudaSetDevice(1));
    CHECK(cudaFree(d1));
    return 0;
}

int main(int argc, char **argv)
{
    test_begin("peer");
    int count = require_device();
    if (count < 2) {
        printf("fewer than 2 devices: nothing to test\n");
        test_pass();
    }
    if (argc > 1 && !strcmp(argv[1], "bandwidth"))
        return bandwidth(argc > 2 ? (size_t)atol(argv[2]) : 256);
    printf("devices: >= 2\n");

    /* Queries. */
    int can01 = -1, can10 = -1, self = -1, attr = -1;
    CHECK(cudaDeviceCanAccessPeer(&can01, 0, 1));
    CHECK(cudaDeviceCanAccessPeer(&can10, 1, 0));
    CHECK(cudaDeviceCanAccessPeer(&self, 0, 0));
    printf("can access peer 0->1: %d, 1->0: %d, 0->0: %d\n", can01, can10, self);
    EXPECT(self == 0);
    CHECK(cudaDeviceGetP2PAttribute(&attr, cudaDevP2PAttrAccessSupported, 0, 1));
    printf("p2p attribute access supported 0->1: %d\n", attr);
    EXPECT(attr == can01);
    EXPECT_ERROR("p2p attribute of a device with itself",
                 cudaDeviceGetP2PAttribute(&attr, cudaDevP2PAttrAccessSupported, 0, 0),
                 cudaErrorInvalidDevice);
    EXPECT_ERROR("can access peer of device 99",
                 cudaDeviceCanAccessPeer(&attr, 0, 99), cudaErrorInvalidDevice);

    /* Copies: sizes that are not a multiple of anything. */
    const int n = (1 << 20) + 13;
    size_t bytes = (size_t)n * sizeof(unsigned int);
    unsigned int *h0 = (unsigned int *)malloc(bytes);
    unsigned int *h1 = (unsigned int *)malloc(bytes);
    EXPECT(h0 && h1);
    fill_pattern(h0, bytes, 1);
    fill_pattern(h1, bytes, 2);
    unsigned int *a0 = (unsigned int *)dev_alloc(0, bytes);
    unsigned int *b0 = (unsigned int *)dev_alloc(0, bytes);
    unsigned int *a1 = (unsigned int *)dev_alloc(1, bytes);
    unsigned int *b1 = (unsigned int *)dev_alloc(1, bytes);
    CHECK(cudaSetDevice(0));
    CHECK(cudaMemcpy(a0, h0, bytes, cudaMemcpyHostToDevice));
    CHECK(cudaSetDevice(1));
    CHECK(cudaMemcpy(b1, h1, bytes, cudaMemcpyHostToDevice));

    CHECK(cudaSetDevice(0));
    CHECK(cudaMemcpyPeer(a1, 1, a0, 0, bytes));
    expect_same(h0, a1, 1, bytes, "cudaMemcpyPeer 0->1");

    cudaStream_t s1;
    CHECK(cudaSetDevice(1));
    CHECK(cudaStreamCreate(&s1));
    CHECK(cudaMemcpyPeerAsync(b0, 0, b1, 1, bytes, s1));
    CHECK(cudaStreamSynchronize(s1));
    expect_same(h1, b0, 0, bytes, "cudaMemcpyPeerAsync 1->0");

    /* A part in the middle, then the rest, on the stream. */
    CHECK(cudaMemcpyPeerAsync(b0 + 7, 0, a1 + 7, 1, 4096, s1));
    CHECK(cudaStreamSynchronize(s1));
    memcpy(h1 + 7, h0 + 7, 4096);
    expect_same(h1, b0, 0, bytes, "cudaMemcpyPeerAsync 1->0, 4096 bytes at 28");

    /* Plain copies between the GPUs: unified addressing says where. */
    CHECK(cudaSetDevice(0));
    CHECK(cudaMemcpy(b1, a0, bytes, cudaMemcpyDefault));
    expect_same(h0, b1, 1, bytes, "cudaMemcpyDefault 0->1");
    CHECK(cudaMemcpy(b0, b1, bytes / 2, cudaMemcpyDeviceToDevice));
    CHECK(cudaDeviceSynchronize());
    CHECK(cudaSetDevice(1));
    CHECK(cudaDeviceSynchronize());
    memcpy(h1, h0, bytes / 2);
    expect_same(h1, b0, 0, bytes, "cudaMemcpyDeviceToDevice 1->0, half");

    CHECK(cudaMemcpyPeer(a0, 0, a1, 1, 0));
    EXPECT_ERROR("cudaMemcpyPeer to device 99",
                 cudaMemcpyPeer(a0, 99, a1, 1, 16), cudaErrorInvalidDevice);

    /* Peer access. */
    CHECK(cudaSetDevice(1));
    EXPECT_ERROR("enable peer access to itself",
                 cudaDeviceEnablePeerAccess(1, 0), cudaErrorPeerAccessUnsupported);
    EXPECT_ERROR("disable peer access to itself",
                 cudaDeviceDisablePeerAccess(1), cudaErrorPeerAccessNotEnabled);
    if (!can10) {
        EXPECT_ERROR("enable peer access 1->0",
                     cudaDeviceEnablePeerAccess(0, 0),
                     cudaErrorPeerAccessUnsupported);
    } else {
        CHECK(cudaDeviceEnablePeerAccess(0, 0));
        printf("enable peer access 1->0: cudaSuccess\n");
        EXPECT_ERROR("enable peer access 1->0 again",
                     cudaDeviceEnablePeerAccess(0, 0),
                     cudaErrorPeerAccessAlreadyEnabled);
        /* A kernel on GPU 1 reads GPU 0's memory. */
        unsigned int *want = (unsigned int *)malloc(bytes);
        EXPECT(want);
        CHECK(cudaMemcpy(h1, b1, bytes, cudaMemcpyDeviceToHost));
        for (int i = 0; i < n; i++)
            want[i] = h0[i] + h1[i];
        peer_add<<<(n + 255) / 256, 256>>>(a0, b1, a1, n);
        CHECK(cudaGetLastError());
        CHECK(cudaDeviceSynchronize());
        expect_same(want, a1, 1, bytes, "peer_add on GPU 1 over GPU 0's memory");
        free(want);
        CHECK(cudaDeviceDisablePeerAccess(0));
        printf("disable peer access 1->0: cudaSuccess\n");
        EXPECT_ERROR("disable peer access 1->0 again",
                     cudaDeviceDisablePeerAccess(0),
                     cudaErrorPeerAccessNotEnabled);
    }

    CHECK(cudaStreamDestroy(s1));
    CHECK(cudaFree(a1));
    CHECK(cudaFree(b1));
    CHECK(cudaSetDevice(0));
    CHECK(cudaFree(a0));
    CHECK(cudaFree(b0));
    free(h0);
    free(h1);
    test_pass();
}
