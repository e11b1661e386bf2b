/*
 * graphnodes: a CUDA graph built node by node, as NVIDIA's simpleCudaGraphs
 * does: memset -> kernel -> memcpy, instantiated and launched twice; its
 * executable kernel node updated (the graph keeps its own), the graph's
 * kernel node updated and instantiated again; a host node last, run once a
 * launch; node types and counts, an empty node and an edge added and the
 * node destroyed.  Each launch's
 * result is checked on the host.  The kernels are callback.cu's (the sim
 * has their twins).
 */
#include "../check.h"

#define N 4096

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

static int host[N];
static int host_calls;      /* the host node's function, run after the copy */

static void CUDART_CB count_call(void *data)
{
    host_calls += *(int *)data;
}

/* Every element of q, copied back, is want + i * step. */
static void expect_all(const char *what, const int *q, int want, int step)
{
    CHECK(cudaMemcpy(host, q, sizeof(host), cudaMemcpyDeviceToHost));
    for (int i = 0; i < N; i++)
        if (host[i] != want + i * step)
            fail("%s: element %d is %d, expected %d", what, i, host[i], want + i * step);
    printf("%s: %d %d\n", what, host[0], host[N - 1]);
}

static void launch(cudaGraphExec_t x, cudaStream_t s, int *q)
{
    CHECK(cudaMemset(q, 0, N * sizeof(int)));
    CHECK(cudaGraphLaunch(x, s));
    CHECK(cudaStreamSynchronize(s));
}

int main(void)
{
    test_begin("kernels/graphnodes");
    require_device();
    int *p, *q;
    CHECK(cudaMalloc(&p, N * sizeof(int)));
    CHECK(cudaMalloc(&q, N * sizeof(int)));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    cudaGraph_t g;
    CHECK(cudaGraphCreate(&g, 0));
    cudaGraphNode_t mset, kern, copy;
    cudaMemsetParams mp = {};
    mp.dst = p;
    mp.value = 5;
    mp.elementSize = 4;
    mp.width = N;
    mp.height = 1;
    CHECK(cudaGraphAddMemsetNode(&mset, g, NULL, 0, &mp));

    int n = N, m = 3, a = 1;
    void *args[] = { &p, &n, &m, &a };
    cudaKernelNodeParams kp = {};
    kp.func = (void *)scale_add;
    kp.gridDim = dim3(N / 256);
    kp.blockDim = dim3(256);
    kp.kernelParams = args;
    CHECK(cudaGraphAddKernelNode(&kern, g, &mset, 1, &kp));
    CHECK(cudaGraphAddMemcpyNode1D(&copy, g, &kern, 1, q, p, N * sizeof(int),
                                   cudaMemcpyDeviceToDevice));

    /* Last, as simpleCudaGraphs does: a host node. */
    static int one = 1;
    cudaGraphNode_t hostn;
    cudaHostNodeParams hp = {};
    hp.fn = count_call;
    hp.userData = &one;
    CHECK(cudaGraphAddHostNode(&hostn, g, &copy, 1, &hp));

    cudaGraphNodeType types[4];
    CHECK(cudaGraphNodeGetType(mset, &types[0]));
    CHECK(cudaGraphNodeGetType(kern, &types[1]));
    CHECK(cudaGraphNodeGetType(copy, &types[2]));
    CHECK(cudaGraphNodeGetType(hostn, &types[3]));
    EXPECT(types[0] == cudaGraphNodeTypeMemset && types[1] == cudaGraphNodeTypeKernel &&
           types[2] == cudaGraphNodeTypeMemcpy && types[3] == cudaGraphNodeTypeHost);
    size_t count = 0;
    CHECK(cudaGraphGetNodes(g, NULL, &count));
    printf("nodes: %zu\n", count);
    EXPECT(count == 4);

    cudaGraphExec_t x;
    CHECK(cudaGraphInstantiate(&x, g, 0));
    launch(x, s, q);
    expect_all("first launch", q, 16, 0);          /* 5 * 3 + 1 */
    launch(x, s, q);
    expect_all("second launch", q, 16, 0);

    /* The executable graph's kernel node: 5 * 2 + 7.  Not the graph's. */
    int m2 = 2, a2 = 7;
    void *args2[] = { &p, &n, &m2, &a2 };
    cudaKernelNodeParams kp2 = kp;
    kp2.kernelParams = args2;
    CHECK(cudaGraphExecKernelNodeSetParams(x, kern, &kp2));
    launch(x, s, q);
    expect_all("after exec update", q, 17, 0);
    cudaKernelNodeParams got = {};
    CHECK(cudaGraphKernelNodeGetParams(kern, &got));
    printf("graph's node: grid %u block %u m %d a %d\n", got.gridDim.x, got.blockDim.x,
           *(int *)got.kernelParams[2], *(int *)got.kernelParams[3]);
    EXPECT(got.gridDim.x == N / 256 && got.blockDim.x == 256);
    EXPECT(*(int *)got.kernelParams[2] == 3 && *(int *)got.kernelParams[3] == 1);

    /* The graph's own kernel node, a new instance: fill instead. */
    int v = 100;
    void *args3[] = { &p, &n, &v };
    cudaKernelNodeParams kp3 = kp;
    kp3.func = (void *)fill;
    kp3.kernelParams = args3;
    CHECK(cudaGraphKernelNodeSetParams(kern, &kp3));
    cudaGraphExec_t x2;
    CHECK(cudaGraphInstantiate(&x2, g, 0));
    launch(x2, s, q);
    expect_all("graph's node updated", q, 100, 1);
    launch(x, s, q);
    expect_all("old instance unchanged", q, 17, 0);

    /* An empty node after the copy, an edge, and gone again. */
    cudaGraphNode_t empty;
    CHECK(cudaGraphAddEmptyNode(&empty, g, &copy, 1));
    CHECK(cudaGraphAddDependencies(g, &mset, &empty, NULL, 1));
    CHECK(cudaGraphGetNodes(g, NULL, &count));
    printf("nodes with the empty one: %zu\n", count);
    EXPECT(count == 5);
    CHECK(cudaGraphDestroyNode(empty));
    CHECK(cudaGraphGetNodes(g, NULL, &count));
    printf("nodes after destroying it: %zu\n", count);
    EXPECT(count == 4);
    printf("host node calls: %d\n", host_calls);  /* one a launch */
    EXPECT(host_calls == 5);

    CHECK(cudaGraphExecDestroy(x2));
    CHECK(cudaGraphExecDestroy(x));
    CHECK(cudaGraphDestroy(g));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaFree(p));
    CHECK(cudaFree(q));
    test_pass();
}
