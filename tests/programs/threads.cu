/*
 * threads: four host threads using the runtime at once, each with its own
 * stream, device and pinned buffers, doing many copies and memsets and
 * checking every byte. The last-error state is per thread: an error in one
 * thread is not seen by the others.
 *
 * Threads print nothing themselves (their order would vary); main prints
 * each thread's result after joining them, in thread order.
 */
#include "check.h"

#include <pthread.h>

#define NTHREADS 4
#define ROUNDS 50
#define BUF (1 * MiB + 333)

struct worker {
    int id;
    char error[256]; /* empty when the thread passed */
    uint64_t sum;    /* checksum over every buffer that came back */
    unsigned long bytes_checked;
};

/* A failed check inside a thread: record it and leave the thread. */
#define T_CHECK(w, call)                                                      \
    do {                                                                      \
        cudaError_t t_err_ = (call);                                          \
        if (t_err_ != cudaSuccess) {                                          \
            snprintf((w)->error, sizeof (w)->error, "line %d: %s -> %s",      \
                     __LINE__, #call, cudaGetErrorName(t_err_));              \
            return NULL;                                                      \
        }                                                                     \
    } while (0)

#define T_EXPECT(w, cond)                                                     \
    do {                                                                      \
        if (!(cond)) {                                                        \
            snprintf((w)->error, sizeof (w)->error, "line %d: expected %s",   \
                     __LINE__, #cond);                                        \
            return NULL;                                                      \
        }                                                                     \
    } while (0)

static void *run(void *arg)
{
    struct worker *w = (struct worker *)arg;
    T_CHECK(w, cudaSetDevice(0));

    /* Thread 0 makes an error of its own; the others must not see it. */
    if (w->id == 0) {
        void *p = NULL;
        cudaError_t e = cudaMalloc(&p, (size_t)1 << 62);
        T_EXPECT(w, e == cudaErrorMemoryAllocation);
        T_EXPECT(w, cudaPeekAtLastError() == cudaErrorMemoryAllocation);
    }

    cudaStream_t s;
    T_CHECK(w, cudaStreamCreateWithFlags(&s, w->id % 2 ? cudaStreamNonBlocking
                                                       : cudaStreamDefault));
    unsigned char *h_src = NULL, *h_dst = NULL, *d = NULL;
    T_CHECK(w, cudaMallocHost((void **)&h_src, BUF));
    T_CHECK(w, cudaHostAlloc((void **)&h_dst, BUF, cudaHostAllocPortable));
    unsigned char *pageable = (unsigned char *)malloc(BUF);
    T_EXPECT(w, pageable != NULL);

    uint64_t sum = 0;
    for (int r = 0; r < ROUNDS; r++) {
        /* A fresh allocation every few rounds: alloc/free race the others. */
        if (r % 10 == 0) {
            if (d)
                T_CHECK(w, cudaFree(d));
            T_CHECK(w, cudaMalloc((void **)&d, BUF));
        }
        size_t n = BUF - (size_t)r * 997; /* a different odd size each round */
        uint32_t seed = (uint32_t)(w->id * 1000 + r);
        fill_pattern(h_src, n, seed);
        memset(h_dst, 0, n);

        /* async H2D, an async memset over a slice, async D2H */
        size_t off = (size_t)r * 131, len = 4096 + (size_t)r;
        unsigned char value = (unsigned char)(w->id * 16 + r);
        T_CHECK(w, cudaMemcpyAsync(d, h_src, n, cudaMemcpyHostToDevice, s));
        T_CHECK(w, cudaMemsetAsync(d + off, value, len, s));
        T_CHECK(w, cudaMemcpyAsync(h_dst, d, n, cudaMemcpyDeviceToHost, s));
        T_CHECK(w, cudaStreamSynchronize(s));
        T_CHECK(w, cudaStreamQuery(s));

        for (size_t i = 0; i < n; i++) {
            unsigned char want = (i >= off && i < off + len) ? value : h_src[i];
            if (h_dst[i] != want) {
                snprintf(w->error, sizeof w->error,
                         "round %d: byte %zu is 0x%02x, expected 0x%02x", r, i, h_dst[i],
                         want);
                return NULL;
            }
        }
        sum ^= checksum(h_dst, n) + (uint64_t)r;

        /* and a synchronous pageable round trip */
        T_CHECK(w, cudaMemcpy(pageable, d, n, cudaMemcpyDeviceToHost));
        T_EXPECT(w, memcmp(pageable, h_dst, n) == 0);
        w->bytes_checked += 2 * n;
    }
    w->sum = sum;

    T_CHECK(w, cudaFree(d));
    T_CHECK(w, cudaStreamDestroy(s));
    T_CHECK(w, cudaFreeHost(h_src));
    T_CHECK(w, cudaFreeHost(h_dst));
    free(pageable);

    if (w->id == 0) {
        /* Still there after all the successful calls; cleared once read. */
        T_EXPECT(w, cudaGetLastError() == cudaErrorMemoryAllocation);
        T_EXPECT(w, cudaGetLastError() == cudaSuccess);
    } else {
        T_EXPECT(w, cudaPeekAtLastError() == cudaSuccess);
    }
    return NULL;
}

int main(void)
{
    test_begin("threads");
    require_device();
    CHECK(cudaSetDevice(0));

    struct worker workers[NTHREADS];
    pthread_t tids[NTHREADS];
    memset(workers, 0, sizeof workers);
    for (int i = 0; i < NTHREADS; i++) {
        workers[i].id = i;
        if (pthread_create(&tids[i], NULL, run, &workers[i]) != 0)
            fail("pthread_create failed");
    }
    for (int i = 0; i < NTHREADS; i++)
        pthread_join(tids[i], NULL);

    int failed = 0;
    for (int i = 0; i < NTHREADS; i++) {
        if (workers[i].error[0]) {
            printf("thread %d: %s\n", i, workers[i].error);
            failed = 1;
        } else {
            printf("thread %d: %d rounds ok, %lu bytes checked, checksum %016llx\n", i,
                   ROUNDS, workers[i].bytes_checked, (unsigned long long)workers[i].sum);
        }
    }
    if (failed)
        fail("a thread failed");

    /* The main thread saw none of thread 0's error. */
    EXPECT(cudaGetLastError() == cudaSuccess);
    CHECK(cudaDeviceSynchronize());
    test_pass();
}
