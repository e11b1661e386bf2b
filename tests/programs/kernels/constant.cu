/*
 * constant: __constant__ memory set with cudaMemcpyToSymbol (whole, at an
 * offset, and asynchronously on a stream) and read by a kernel;
 * cudaMemcpyFromSymbol round trips; cudaGetSymbolAddress and
 * cudaGetSymbolSize, and a plain copy from that address.
 */
#include "../check.h"

#define NTABLE 64

__constant__ int table[NTABLE];
__constant__ int bias;

/* out[i] = table[in[i] % NTABLE] * 3 + bias */
extern "C" __global__ void lookup(const int *in, int *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        out[i] = table[in[i] % NTABLE] * 3 + bias;
}

static int htable[NTABLE];
static int hbias;

static void check_lookup(const char *what, const int *din, int *dout, const int *hin,
                         int n, cudaStream_t stream)
{
    int *hout = (int *)malloc(n * sizeof(int));
    EXPECT(hout);
    lookup<<<(n + 127) / 128, 128, 0, stream>>>(din, dout, n);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpyAsync(hout, dout, n * sizeof(int), cudaMemcpyDeviceToHost, stream));
    CHECK(cudaStreamSynchronize(stream));
    for (int i = 0; i < n; i++) {
        int want = htable[hin[i] % NTABLE] * 3 + hbias;
        if (hout[i] != want)
            fail("%s: out[%d] = %d, expected %d", what, i, hout[i], want);
    }
    printf("%s: ok, checksum %016llx\n", what,
           (unsigned long long)checksum(hout, n * sizeof(int)));
    free(hout);
}

int main(void)
{
    test_begin("constant");
    require_device();
    CHECK(cudaSetDevice(0));

    size_t size = 0;
    CHECK(cudaGetSymbolSize(&size, table));
    printf("cudaGetSymbolSize(table): %zu\n", size);
    EXPECT(size == sizeof(htable));
    CHECK(cudaGetSymbolSize(&size, bias));
    printf("cudaGetSymbolSize(bias): %zu\n", size);
    EXPECT(size == sizeof(int));

    void *addr = NULL;
    CHECK(cudaGetSymbolAddress(&addr, table));
    printf("cudaGetSymbolAddress(table): %s\n", addr ? "non-null" : "null");
    EXPECT(addr != NULL);

    const int n = 10007;
    int *hin = (int *)malloc(n * sizeof(int));
    EXPECT(hin);
    for (int i = 0; i < n; i++)
        hin[i] = (i * 31 + 7) % 1000;
    int *din, *dout;
    CHECK(cudaMalloc((void **)&din, n * sizeof(int)));
    CHECK(cudaMalloc((void **)&dout, n * sizeof(int)));
    CHECK(cudaMemcpy(din, hin, n * sizeof(int), cudaMemcpyHostToDevice));

    /* 1. The whole table and the bias. */
    for (int i = 0; i < NTABLE; i++)
        htable[i] = i * i - 100;
    hbias = 5;
    CHECK(cudaMemcpyToSymbol(table, htable, sizeof(htable)));
    CHECK(cudaMemcpyToSymbol(bias, &hbias, sizeof(hbias)));
    check_lookup("whole table", din, dout, hin, n, 0);

    /* 2. Round trip: what was written reads back. */
    int back[NTABLE];
    memset(back, 0, sizeof(back));
    CHECK(cudaMemcpyFromSymbol(back, table, sizeof(back)));
    EXPECT(memcmp(back, htable, sizeof(back)) == 0);
    int b = 0;
    CHECK(cudaMemcpyFromSymbol(&b, bias, sizeof(b)));
    EXPECT(b == hbias);
    printf("cudaMemcpyFromSymbol round trip: ok\n");

    /* 3. Part of the table, at an offset; then part of it read back at an
     * offset. */
    int part[16];
    for (int i = 0; i < 16; i++)
        part[i] = htable[8 + i] = 1000 + i;
    CHECK(cudaMemcpyToSymbol(table, part, sizeof(part), 8 * sizeof(int)));
    check_lookup("table[8..24) replaced", din, dout, hin, n, 0);
    int part_back[4];
    CHECK(cudaMemcpyFromSymbol(part_back, table, sizeof(part_back), 10 * sizeof(int)));
    for (int i = 0; i < 4; i++)
        EXPECT(part_back[i] == 1002 + i);
    printf("cudaMemcpyFromSymbol at an offset: ok\n");

    /* 4. The symbol's address is ordinary device memory to cudaMemcpy. */
    CHECK(cudaGetSymbolAddress(&addr, table));
    memset(back, 0, sizeof(back));
    CHECK(cudaMemcpy(back, addr, sizeof(back), cudaMemcpyDeviceToHost));
    EXPECT(memcmp(back, htable, sizeof(back)) == 0);
    printf("cudaMemcpy from cudaGetSymbolAddress: ok\n");

    /* 5. Async forms on a stream, ordered with the kernel that reads. */
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    int *pinned;
    CHECK(cudaMallocHost((void **)&pinned, sizeof(htable) + sizeof(int)));
    for (int i = 0; i < NTABLE; i++)
        pinned[i] = htable[i] = 7 * i - 3;
    pinned[NTABLE] = hbias = -11;
    CHECK(cudaMemcpyToSymbolAsync(table, pinned, sizeof(htable), 0,
                                  cudaMemcpyHostToDevice, s));
    CHECK(cudaMemcpyToSymbolAsync(bias, pinned + NTABLE, sizeof(int), 0,
                                  cudaMemcpyHostToDevice, s));
    check_lookup("async update on a stream", din, dout, hin, n, s);
    memset(pinned, 0, sizeof(htable) + sizeof(int));
    CHECK(cudaMemcpyFromSymbolAsync(pinned, table, sizeof(htable), 0,
                                    cudaMemcpyDeviceToHost, s));
    CHECK(cudaMemcpyFromSymbolAsync(pinned + NTABLE, bias, sizeof(int), 0,
                                    cudaMemcpyDeviceToHost, s));
    CHECK(cudaStreamSynchronize(s));
    EXPECT(memcmp(pinned, htable, sizeof(htable)) == 0 && pinned[NTABLE] == hbias);
    printf("cudaMemcpyFromSymbolAsync: ok\n");

    /* 6. Device to symbol, from device memory. */
    for (int i = 0; i < NTABLE; i++)
        htable[i] = 50 - i;
    int *dtab;
    CHECK(cudaMalloc((void **)&dtab, sizeof(htable)));
    CHECK(cudaMemcpy(dtab, htable, sizeof(htable), cudaMemcpyHostToDevice));
    CHECK(cudaMemcpyToSymbol(table, dtab, sizeof(htable), 0, cudaMemcpyDeviceToDevice));
    check_lookup("table from device memory", din, dout, hin, n, 0);

    /* 7. Past the end of the symbol: refused. */
    EXPECT_ERROR("cudaMemcpyToSymbol past the end",
                 cudaMemcpyToSymbol(table, htable, sizeof(htable), 4),
                 cudaErrorInvalidValue);

    CHECK(cudaFree(dtab));
    CHECK(cudaFreeHost(pinned));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(din));
    CHECK(cudaFree(dout));
    free(hin);
    CHECK(cudaDeviceSynchronize());
    test_pass();
}
