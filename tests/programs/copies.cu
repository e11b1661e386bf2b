/*
 * copies: two copy bugs pvgpu once had, as NVIDIA's samples hit them.
 *
 * - mergeSort: cudaMemcpy device to device between interior pointers of two
 *   allocations, and a zero-length one whose pointers are one past the end
 *   of their allocations (the last, empty, merge segment).
 * - warpAggregatedAtomicsCG: a host-to-device copy from a pageable buffer.
 *   Through pvgpu the guest's addresses and the backend's device addresses
 *   are two address spaces, so a host buffer may sit at an address that is
 *   also inside a device allocation.  Here one is put there on purpose
 *   (natively the driver has that address reserved and the mmap fails, so a
 *   plain buffer is used: the transcript is the same either way; stderr says
 *   which).
 */
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"

#define N (1u << 16)

static void merge_sort_tail(void)
{
    unsigned *h = (unsigned *)malloc(N * sizeof(unsigned));
    unsigned *back = (unsigned *)malloc(N * sizeof(unsigned));
    unsigned *ikey, *okey;
    cudaStream_t s;

    for (unsigned i = 0; i < N; i++)
        h[i] = i * 2654435761u;
    CHECK(cudaMalloc(&ikey, N * sizeof(unsigned)));
    CHECK(cudaMalloc(&okey, N * sizeof(unsigned)));
    CHECK(cudaMemcpy(ikey, h, N * sizeof(unsigned), cudaMemcpyHostToDevice));
    CHECK(cudaMemset(okey, 0, N * sizeof(unsigned)));

    /* The last segment passed through: interior pointers of both. */
    for (unsigned last = 1; last <= 4096; last *= 8)
        CHECK(cudaMemcpy(okey + (N - last), ikey + (N - last),
                         last * sizeof(unsigned), cudaMemcpyDeviceToDevice));
    /* A piece from the middle, to the middle. */
    CHECK(cudaMemcpy(okey + 1000, ikey + 1000, 3000 * sizeof(unsigned),
                     cudaMemcpyDeviceToDevice));
    /* Empty segments: pointers one past the end of their allocations. */
    CHECK(cudaMemcpy(okey + N, ikey + N, 0, cudaMemcpyDeviceToDevice));
    CHECK(cudaMemcpy(okey + N, ikey + N, 0, cudaMemcpyDefault));
    CHECK(cudaMemcpy(okey + N, h, 0, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(back, ikey + N, 0, cudaMemcpyDeviceToHost));
    CHECK(cudaStreamCreate(&s));
    CHECK(cudaMemcpyAsync(okey + N, ikey + N, 0, cudaMemcpyDeviceToDevice, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaMemcpy(back, okey, N * sizeof(unsigned), cudaMemcpyDeviceToHost));
    for (unsigned i = 0; i < N; i++) {
        unsigned want = (i >= N - 4096 || (i >= 1000 && i < 4000)) ? h[i] : 0;
        if (back[i] != want)
            fail("mergeSort tail: element %u is %u, expected %u", i, back[i], want);
    }
    printf("mergeSort tail: ok, checksum %016llx\n",
           (unsigned long long)checksum(back, N * sizeof(unsigned)));
    CHECK(cudaFree(ikey));
    CHECK(cudaFree(okey));
    free(h);
    free(back);
}

/* Host memory at the address of a device allocation, if it can be had. */
static unsigned char *host_at(const void *where, size_t n, size_t *mapped)
{
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t at = ((uintptr_t)where + page - 1) & ~(page - 1);
    void *p;

    *mapped = (n + page - 1) & ~(page - 1);
    p = mmap((void *)at, *mapped, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (p == MAP_FAILED || p != (void *)at) {
        if (p != MAP_FAILED)
            munmap(p, *mapped);
        *mapped = 0;
        return NULL;
    }
    return (unsigned char *)p;
}

static void host_alias(void)
{
    const size_t n = 4 * MiB, part = 1 * MiB;
    unsigned char *d_big, *d_dst, *h, *back;
    size_t mapped;

    CHECK(cudaMalloc(&d_big, 3 * n));
    CHECK(cudaMalloc(&d_dst, n));
    h = host_at(d_big + n, n, &mapped);
    fprintf(stderr, "copies: host buffer %s a device allocation\n",
            h ? "aliases" : "does not alias");
    if (!h)
        h = (unsigned char *)malloc(n);
    back = (unsigned char *)malloc(n);
    fill_pattern(h, n, 1234);

    /* Explicit kinds: the host side is host memory whatever its address. */
    CHECK(cudaMemcpy(d_dst, h, n, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(back, d_dst, n, cudaMemcpyDeviceToHost));
    if (memcmp(h, back, n))
        fail("host alias: H2D/D2H of %zu bytes differs", n);
    /* Small ones (one message) and at offsets. */
    CHECK(cudaMemcpy(d_dst + 7, h + 7, 1000, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(back + 7, d_dst + 7, 1000, cudaMemcpyDeviceToHost));
    if (memcmp(h, back, n))
        fail("host alias: small H2D/D2H differs");
    /* D2H into the aliasing buffer, async on a stream too. */
    memset(back, 0, n);
    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    memcpy(back, h, n);
    memset(h, 0, part);
    CHECK(cudaMemcpyAsync(h, d_dst, part, cudaMemcpyDeviceToHost, s));
    CHECK(cudaMemcpyAsync(d_dst + part, h, part, cudaMemcpyHostToDevice, s));
    CHECK(cudaStreamSynchronize(s));
    CHECK(cudaStreamDestroy(s));
    if (memcmp(h, back, n))
        fail("host alias: async D2H into the buffer differs");
    CHECK(cudaMemcpy(h, d_dst, n, cudaMemcpyDeviceToHost));
    if (memcmp(h, back, part) || memcmp(h + part, back, part) ||
        memcmp(h + 2 * part, back + 2 * part, n - 2 * part))
        fail("host alias: async H2D from the buffer differs");
    printf("host alias: ok, checksum %016llx\n",
           (unsigned long long)checksum(h, n));

    if (mapped)
        munmap(h, mapped);
    else
        free(h);
    free(back);
    CHECK(cudaFree(d_big));
    CHECK(cudaFree(d_dst));
}

int main(void)
{
    test_begin("copies");
    require_device();
    merge_sort_tail();
    host_alias();
    test_pass();
}
