/*
 * threads4: 4 host threads share the device, each with a stream of its own:
 * each allocates, copies in, launches kernels, copies out and verifies, many
 * rounds, all at the same time. Threads print nothing; main prints each
 * thread's outcome in thread order once all have joined.
 */
#include "../check.h"

#include <pthread.h>

#define NTHREADS 4
#define ROUNDS 50
#define N (64 * 1024 + 5)

/* y[i] = a * x[i] + y[i] over ints, wrapping */
extern "C" __global__ void saxpy_int(int a, const int *x, int *y, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = (int)((unsigned int)a * (unsigned int)x[i] + (unsigned int)y[i]);
}

struct worker {
    int id;
    char error[256];
    unsigned long long sum;
};

#define WCHECK(w, call)                                                      \
    do {                                                                     \
        cudaError_t e_ = (call);                                             \
        if (e_ != cudaSuccess) {                                             \
            snprintf((w)->error, sizeof((w)->error), "line %d: %s -> %s",    \
                     __LINE__, #call, cudaGetErrorName(e_));                 \
            return NULL;                                                     \
        }                                                                    \
    } while (0)

static void *work(void *arg)
{
    struct worker *w = (struct worker *)arg;
    cudaStream_t s;
    int *hx, *hy, *dx, *dy;

    WCHECK(w, cudaSetDevice(0));
    WCHECK(w, cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    WCHECK(w, cudaMallocHost((void **)&hx, N * sizeof(int)));
    WCHECK(w, cudaMallocHost((void **)&hy, N * sizeof(int)));
    WCHECK(w, cudaMalloc((void **)&dx, N * sizeof(int)));
    WCHECK(w, cudaMalloc((void **)&dy, N * sizeof(int)));

    for (int r = 0; r < ROUNDS; r++) {
        int a = w->id * 100 + r;
        for (int i = 0; i < N; i++) {
            hx[i] = i ^ (w->id << 20) ^ r;
            hy[i] = i * w->id - r;
        }
        WCHECK(w, cudaMemcpyAsync(dx, hx, N * sizeof(int), cudaMemcpyHostToDevice, s));
        WCHECK(w, cudaMemcpyAsync(dy, hy, N * sizeof(int), cudaMemcpyHostToDevice, s));
        saxpy_int<<<(N + 255) / 256, 256, 0, s>>>(a, dx, dy, N);
        saxpy_int<<<(N + 255) / 256, 256, 0, s>>>(1, dx, dy, N);
        WCHECK(w, cudaGetLastError());
        WCHECK(w, cudaMemcpyAsync(hy, dy, N * sizeof(int), cudaMemcpyDeviceToHost, s));
        WCHECK(w, cudaStreamSynchronize(s));
        for (int i = 0; i < N; i++) {
            unsigned int want = (unsigned int)(a + 1) * (unsigned int)(i ^ (w->id << 20) ^ r) +
                                (unsigned int)(i * w->id - r);
            if ((unsigned int)hy[i] != want) {
                snprintf(w->error, sizeof(w->error), "round %d: y[%d] = %d, expected %d",
                         r, i, hy[i], (int)want);
                return NULL;
            }
        }
        w->sum += checksum(hy, N * sizeof(int)) & 0xffff;
    }

    WCHECK(w, cudaFree(dx));
    WCHECK(w, cudaFree(dy));
    WCHECK(w, cudaFreeHost(hx));
    WCHECK(w, cudaFreeHost(hy));
    WCHECK(w, cudaStreamDestroy(s));
    return NULL;
}

int main(void)
{
    test_begin("threads4");
    require_device();
    CHECK(cudaSetDevice(0));
    CHECK(cudaFree(0)); /* the primary context exists before the threads */

    pthread_t t[NTHREADS];
    struct worker w[NTHREADS];
    memset(w, 0, sizeof(w));
    for (int i = 0; i < NTHREADS; i++) {
        w[i].id = i;
        EXPECT(pthread_create(&t[i], NULL, work, &w[i]) == 0);
    }
    for (int i = 0; i < NTHREADS; i++)
        EXPECT(pthread_join(t[i], NULL) == 0);

    int failed = 0;
    for (int i = 0; i < NTHREADS; i++) {
        if (w[i].error[0]) {
            printf("thread %d: %s\n", i, w[i].error);
            failed = 1;
        } else {
            printf("thread %d: %d rounds ok, sum %llu\n", i, ROUNDS, w[i].sum);
        }
    }
    if (failed)
        fail("a thread failed");
    CHECK(cudaDeviceSynchronize());
    test_pass();
}
