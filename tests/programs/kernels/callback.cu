/*
 * callback: host functions in streams. Each round launches kernels on a
 * stream, copies their result to pinned memory asynchronously, then queues
 * a host callback (cudaLaunchHostFunc or cudaStreamAddCallback, alternately)
 * that checks the copied data itself: it must see the kernels' results.
 * Callbacks record the order they ran in; it must be the order they were
 * queued in, per stream. Nothing is printed from a callback (they run on
 * another thread); the transcript is printed after the synchronize.
 */
#include "../check.h"

#include <pthread.h>

#define N 4096
#define ROUNDS 8

/* p[i] = v + i */
extern "C" __global__ void fill(int *p, int n, int v)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        p[i] = v + i;
}

/* p[i] = p[i] * m + a */
extern "C" __global__ void scale_add(int *p, int n, int m, int a)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        p[i] = p[i] * m + a;
}

struct round_state {
    int round;
    const int *host;   /* pinned, written by the copy before the callback */
    int expect_v, expect_m, expect_a;
    int ok;            /* set by the callback */
    cudaError_t status;
};

static pthread_mutex_t order_lock = PTHREAD_MUTEX_INITIALIZER;
static int order[2 * ROUNDS + 4];
static int norder;

static void record(struct round_state *r)
{
    int ok = 1;
    for (int i = 0; i < N; i++)
        if (r->host[i] != (r->expect_v + i) * r->expect_m + r->expect_a) {
            ok = 0;
            break;
        }
    r->ok = ok;
    pthread_mutex_lock(&order_lock);
    if (norder < (int)(sizeof(order) / sizeof(order[0])))
        order[norder] = r->round;
    norder++;
    pthread_mutex_unlock(&order_lock);
}

static void CUDART_CB host_fn(void *arg)
{
    record((struct round_state *)arg);
}

static void CUDART_CB stream_cb(cudaStream_t stream, cudaError_t status, void *arg)
{
    (void)stream;
    struct round_state *r = (struct round_state *)arg;
    r->status = status;
    record(r);
}

int main(void)
{
    test_begin("callback");
    require_device();
    CHECK(cudaSetDevice(0));

    cudaStream_t s;
    CHECK(cudaStreamCreate(&s));
    int *dbuf[ROUNDS], *hbuf[ROUNDS];
    struct round_state st[ROUNDS + 1];
    memset(st, 0, sizeof(st));

    for (int r = 0; r < ROUNDS; r++) {
        CHECK(cudaMalloc((void **)&dbuf[r], N * sizeof(int)));
        CHECK(cudaMallocHost((void **)&hbuf[r], N * sizeof(int)));
        memset(hbuf[r], 0, N * sizeof(int));
    }

    /* Queue everything first, synchronize once. */
    for (int r = 0; r < ROUNDS; r++) {
        st[r].round = r;
        st[r].host = hbuf[r];
        st[r].expect_v = 100 * r;
        st[r].expect_m = r + 2;
        st[r].expect_a = -r;
        st[r].status = cudaErrorUnknown;
        fill<<<(N + 255) / 256, 256, 0, s>>>(dbuf[r], N, st[r].expect_v);
        scale_add<<<(N + 255) / 256, 256, 0, s>>>(dbuf[r], N, st[r].expect_m,
                                                   st[r].expect_a);
        CHECK(cudaGetLastError());
        CHECK(cudaMemcpyAsync(hbuf[r], dbuf[r], N * sizeof(int),
                              cudaMemcpyDeviceToHost, s));
        if (r % 2 == 0)
            CHECK(cudaLaunchHostFunc(s, host_fn, &st[r]));
        else
            CHECK(cudaStreamAddCallback(s, stream_cb, &st[r], 0));
    }
    CHECK(cudaStreamSynchronize(s));

    printf("callbacks run: %d\n", norder);
    EXPECT(norder == ROUNDS);
    printf("order:");
    for (int i = 0; i < norder; i++)
        printf(" %d", order[i]);
    printf("\n");
    for (int r = 0; r < ROUNDS; r++) {
        printf("round %d (%s): data seen by the callback %s", r,
               r % 2 == 0 ? "cudaLaunchHostFunc" : "cudaStreamAddCallback",
               st[r].ok ? "ok" : "WRONG");
        if (r % 2)
            printf(", status %s", cudaGetErrorName(st[r].status));
        printf("\n");
        EXPECT(order[r] == r);
        EXPECT(st[r].ok);
        if (r % 2)
            EXPECT(st[r].status == cudaSuccess);
    }

    /* On the legacy default stream too, and a callback with no work before
     * it: it runs, after everything queued before it. */
    norder = 0;
    struct round_state *last = &st[ROUNDS];
    last->round = 99;
    last->host = hbuf[0];
    last->expect_v = 5;
    last->expect_m = 1;
    last->expect_a = 0;
    fill<<<(N + 255) / 256, 256>>>(dbuf[0], N, 5);
    CHECK(cudaMemcpyAsync(hbuf[0], dbuf[0], N * sizeof(int), cudaMemcpyDeviceToHost, 0));
    CHECK(cudaLaunchHostFunc(0, host_fn, last));
    CHECK(cudaDeviceSynchronize());
    printf("default stream: callbacks run %d, data %s\n", norder, last->ok ? "ok" : "WRONG");
    EXPECT(norder == 1 && order[0] == 99 && last->ok);

    for (int r = 0; r < ROUNDS; r++) {
        CHECK(cudaFree(dbuf[r]));
        CHECK(cudaFreeHost(hbuf[r]));
    }
    CHECK(cudaStreamDestroy(s));
    test_pass();
}
