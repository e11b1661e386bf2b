/*
 * Graph copy nodes with ordinary host memory, as NVIDIA's simpleCudaGraphs,
 * jacobiCudaGraphs and conjugateGradientCudaGraphs use them: an explicit
 * graph (host -> device copy, vec_add, device -> host copy, all malloc'd
 * host memory) launched twice with the input changed in between; the
 * same captured from a stream (cuMemcpyHtoDAsync / cuMemcpyDtoHAsync, the
 * result into a variable on the stack), with the capture queried as
 * libraries query it; the executable graph updated from a fresh capture
 * and launched after that graph is destroyed.  argv[1]: vecadd.fatbin.
 */
#include "drv.h"

#define N 1024

static CUfunction vec_add;
static CUdeviceptr a, b, c;
static int n = N;

static void fill(float *h, float base)
{
	for (int i = 0; i < N; i++)
		h[i] = base + (float)i;
}

/* src -> a; c = a + b; c[last] -> *last and c -> dst, captured on s. */
static CUgraph capture(CUstream s, float *src, float *dst, float *last)
{
	void *args[] = { &a, &b, &c, &n };
	CUstreamCaptureStatus st;
	const CUgraphNode *deps;
	const CUgraphEdgeData *edges;
	CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
	cuuint64_t id = 0;
	CUgraph g = NULL, got = NULL;
	CUdeviceptr tmp;
	CUgraphNodeType t;
	size_t nd = 0;

	DRV(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
	DRV(cuMemcpyHtoDAsync(a, src, N * sizeof(float), s));
	DRV(cuStreamGetCaptureInfo(s, &st, &id, &g, &deps, &edges, &nd));
	DRV(cuGraphNodeGetType(deps[0], &t));
	printf("capture: active %d, id %d, graph %d, deps %zu, type %d\n",
	       st == CU_STREAM_CAPTURE_STATUS_ACTIVE, id != 0, g != NULL, nd, (int)t);
	/* What a library does to allocate while another thread captures. */
	DRV(cuThreadExchangeStreamCaptureMode(&mode));
	DRV(cuMemAlloc(&tmp, 4096));
	DRV(cuMemFree(tmp));
	DRV(cuThreadExchangeStreamCaptureMode(&mode));
	printf("capture mode restored: %d\n", mode == CU_STREAM_CAPTURE_MODE_RELAXED);
	DRV(cuLaunchKernel(vec_add, N / 256, 1, 1, 256, 1, 1, 0, s, args, NULL));
	DRV(cuMemcpyDtoHAsync(last, c + (N - 1) * sizeof(float), sizeof(float), s));
	DRV(cuMemcpyDtoHAsync(dst, c, N * sizeof(float), s));
	DRV(cuStreamEndCapture(s, &got));
	printf("end capture gives the queried graph: %d\n", got == g);
	return got;
}

int main(int argc, char **argv)
{
	float *in = malloc(N * sizeof(float)), *out = malloc(N * sizeof(float));
	float ones[N], last = 0;
	void *args[] = { &a, &b, &c, &n };
	CUgraphNode up, k, down;
	CUgraphExecUpdateResultInfo info;
	CUgraphExec x;
	CUgraph g, g2;
	CUmodule mod;
	CUstream s;
	size_t count;

	drv_begin("driver/graphcopy");
	if (argc < 2 || !in || !out) {
		printf("FAIL: usage: graphcopy vecadd.fatbin\n");
		return 1;
	}
	drv_context();
	DRV(cuModuleLoad(&mod, argv[1]));
	DRV(cuModuleGetFunction(&vec_add, mod, "vec_add"));
	DRV(cuMemAlloc(&a, N * sizeof(float)));
	DRV(cuMemAlloc(&b, N * sizeof(float)));
	DRV(cuMemAlloc(&c, N * sizeof(float)));
	for (int i = 0; i < N; i++)
		ones[i] = 1.0f;
	DRV(cuMemcpyHtoD(b, ones, sizeof(ones)));
	DRV(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

	/* Explicit nodes. */
	CUDA_MEMCPY3D cin = {
		.srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = in,
		.dstMemoryType = CU_MEMORYTYPE_DEVICE, .dstDevice = a,
		.WidthInBytes = N * sizeof(float), .Height = 1, .Depth = 1,
	};
	CUDA_MEMCPY3D cout = {
		.srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = c,
		.dstMemoryType = CU_MEMORYTYPE_HOST, .dstHost = out,
		.WidthInBytes = N * sizeof(float), .Height = 1, .Depth = 1,
	};
	CUDA_KERNEL_NODE_PARAMS kp = {
		.func = vec_add, .gridDimX = N / 256, .gridDimY = 1, .gridDimZ = 1,
		.blockDimX = 256, .blockDimY = 1, .blockDimZ = 1,
		.kernelParams = args,
	};
	CUcontext ctx;

	DRV(cuCtxGetCurrent(&ctx));
	DRV(cuGraphCreate(&g, 0));
	DRV(cuGraphAddMemcpyNode(&up, g, NULL, 0, &cin, ctx));
	DRV(cuGraphAddKernelNode(&k, g, &up, 1, &kp));
	DRV(cuGraphAddMemcpyNode(&down, g, &k, 1, &cout, ctx));
	DRV(cuGraphInstantiate(&x, g, 0));
	for (int round = 0; round < 2; round++) {
		fill(in, round ? 100.0f : 10.0f);
		memset(out, 0, N * sizeof(float));
		DRV(cuGraphLaunch(x, s));
		DRV(cuStreamSynchronize(s));
		printf("explicit launch %d: %.1f %.1f\n", round + 1, out[0], out[N - 1]);
		DRV_EXPECT(out[0] == (round ? 101.0f : 11.0f));
	}
	DRV(cuGraphExecDestroy(x));
	DRV(cuGraphDestroy(g));

	/* Captured. */
	g = capture(s, in, out, &last);
	DRV(cuGraphGetNodes(g, NULL, &count));
	printf("captured nodes: %zu\n", count);
	DRV(cuGraphInstantiate(&x, g, 0));
	for (int round = 0; round < 2; round++) {
		fill(in, round ? 40.0f : 20.0f);
		DRV(cuGraphLaunch(x, s));
		DRV(cuStreamSynchronize(s));
		printf("captured launch %d: %.1f %.1f last %.1f\n", round + 1, out[0],
		       out[N - 1], last);
		DRV_EXPECT(out[0] == (round ? 41.0f : 21.0f) && last == out[N - 1]);
	}

	/* Updated from a new capture, as jacobiCudaGraphs does each step. */
	g2 = capture(s, in, out, &last);
	memset(&info, 0, sizeof(info));
	DRV(cuGraphExecUpdate(x, g2, &info));
	printf("update result: %d\n", (int)info.result);
	DRV(cuGraphDestroy(g2));
	DRV(cuGraphDestroy(g));
	fill(in, 300.0f);
	memset(out, 0, N * sizeof(float));
	DRV(cuGraphLaunch(x, s));
	DRV(cuCtxSynchronize());
	printf("updated launch: %.1f %.1f last %.1f\n", out[0], out[N - 1], last);
	DRV_EXPECT(out[0] == 301.0f && last == out[N - 1]);
	DRV(cuGraphExecDestroy(x));
	DRV(cuStreamDestroy(s));
	drv_pass();
}
