/*
 * memset: cudaMemset and cudaMemsetAsync. Only the low byte of the value is
 * used (the value is converted to unsigned char); ranges at odd offsets must
 * leave their neighbours alone; async memsets on a stream and on the default
 * stream are ordered with the copies around them.
 */
#include "check.h"

static unsigned char *host;    /* pinned, for async copies */
static unsigned char *expect;  /* what the device buffer should hold */

static void verify(const unsigned char *d, size_t n, const char *what)
{
    CHECK(cudaMemcpy(host, d, n, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++)
        if (host[i] != expect[i])
            fail("%s: byte %zu is 0x%02x, expected 0x%02x", what, i, host[i], expect[i]);
    printf("%s: ok, checksum %016llx\n", what, (unsigned long long)checksum(host, n));
}

int main(void)
{
    test_begin("memset");
    require_device();
    CHECK(cudaSetDevice(0));

    const size_t n = 8 * MiB + 13;
    unsigned char *d = NULL;
    CHECK(cudaMalloc((void **)&d, n));
    CHECK(cudaMallocHost((void **)&host, n));
    expect = (unsigned char *)malloc(n);
    EXPECT(expect != NULL);

    /* Whole-buffer patterns. 0x1234 and -1 show that only the low byte
     * counts. */
    const int values[] = {0, 0xFF, 0x5A, 0xA5, 0x1234, -1};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        CHECK(cudaMemset(d, values[i], n));
        memset(expect, (unsigned char)values[i], n);
        char what[64];
        snprintf(what, sizeof what, "cudaMemset value %d", values[i]);
        verify(d, n, what);
    }

    /* Ranges at odd offsets over a known background. */
    CHECK(cudaMemset(d, 0x11, n));
    memset(expect, 0x11, n);
    const struct {
        size_t off, len;
        int value;
    } ranges[] = {
        {0, 1, 0x21},     {1, 1, 0x22},          {7, 1000, 0x23},  {4095, 2, 0x24},
        {65537, 4099, 0x25}, {n - 1, 1, 0x26},   {n - 777, 776, 0x27}, {2 * MiB + 1, 3 * MiB, 0x28},
        {100, 0, 0x29}, /* zero bytes: changes nothing */
    };
    for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++) {
        CHECK(cudaMemset(d + ranges[i].off, ranges[i].value, ranges[i].len));
        memset(expect + ranges[i].off, ranges[i].value, ranges[i].len);
    }
    verify(d, n, "cudaMemset ranges");

    /* Async on a stream: memset, then an async copy over part of it, then a
     * memset over part of that; each must see the one before. */
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    fill_pattern(host, n, 3);
    CHECK(cudaMemsetAsync(d, 0x33, n, s));
    memset(expect, 0x33, n);
    CHECK(cudaMemcpyAsync(d + 10, host + 10, MiB, cudaMemcpyHostToDevice, s));
    memcpy(expect + 10, host + 10, MiB);
    CHECK(cudaMemsetAsync(d + 500, 0x44, 1000, s));
    memset(expect + 500, 0x44, 1000);
    CHECK(cudaStreamSynchronize(s));
    verify(d, n, "cudaMemsetAsync on a stream");

    /* Many small async memsets queued back to back. */
    for (size_t i = 0; i < 256; i++) {
        size_t off = i * 4099 % (n - 64);
        CHECK(cudaMemsetAsync(d + off, (int)i, 64, s));
        memset(expect + off, (int)i, 64);
    }
    CHECK(cudaStreamSynchronize(s));
    verify(d, n, "256 queued cudaMemsetAsync");

    /* Async on the default stream; cudaDeviceSynchronize waits for it. */
    CHECK(cudaMemsetAsync(d, 0x55, n / 2, 0));
    memset(expect, 0x55, n / 2);
    CHECK(cudaDeviceSynchronize());
    verify(d, n, "cudaMemsetAsync on the default stream");

    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(d));
    CHECK(cudaFreeHost(host));
    free(expect);
    EXPECT(cudaGetLastError() == cudaSuccess);
    test_pass();
}
