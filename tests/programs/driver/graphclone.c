/*
 * What three of NVIDIA's samples do with graphs.  simpleCudaGraphs: a
 * graph with copies from and into malloc'd host memory, a kernel and a
 * host node summing the result, cloned (cuGraphClone) and the clone
 * launched, after the original is gone too; the same captured, the host
 * function by cuLaunchHostFunc.  graphConditionalNodes: work
 * captured (cuStreamBeginCaptureToGraph) into a conditional node's body
 * graph and into a graph after one of its nodes; cuStreamEndCapture gives
 * that graph back.  graphMemoryFootprint and graphMemoryNodes: memory an
 * allocation node made, freed with cuMemFree and cuMemFreeAsync outside
 * any graph, the graph launched again and the memory freed the other way.
 * argv[1]: vecadd.fatbin.
 */
#include "drv.h"

#define N 1024

static float *hout;
static double sum;
static int calls;

static void CUDA_CB host_sum(void *data)
{
	sum = 0;
	for (int i = 0; i < N; i++)
		sum += hout[i];
	calls += data == &calls;
}

static void fill(float *h, float base)
{
	for (int i = 0; i < N; i++)
		h[i] = base + (float)i;
}

static double expect(float base)
{
	double s = 0;

	for (int i = 0; i < N; i++)
		s += base + 1.0 + i;
	return s;
}

int main(int argc, char **argv)
{
	float *hin = malloc(N * sizeof(float)), *res = malloc(N * sizeof(float));
	CUdeviceptr a, b, c;
	int n = N;
	void *args[] = { &a, &b, &c, &n };
	CUgraphNode up, k, down, h, found, first;
	CUgraphNodeType t;
	CUgraph g, clone, g2, got;
	CUgraphExec x;
	CUfunction vec_add;
	CUmodule mod;
	CUstream s;
	CUcontext ctx;
	size_t count;

	drv_begin("driver/graphclone");
	hout = malloc(N * sizeof(float));
	if (argc < 2 || !hin || !hout || !res) {
		printf("FAIL: usage: graphclone vecadd.fatbin\n");
		return 1;
	}
	ctx = drv_context();
	DRV(cuModuleLoad(&mod, argv[1]));
	DRV(cuModuleGetFunction(&vec_add, mod, "vec_add"));
	DRV(cuMemAlloc(&a, N * sizeof(float)));
	DRV(cuMemAlloc(&b, N * sizeof(float)));
	DRV(cuMemAlloc(&c, N * sizeof(float)));
	DRV(cuMemsetD32(b, 0x3f800000, N));	/* 1.0f */
	DRV(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

	/* hin -> a; c = a + b; c -> hout; host node sums hout. */
	DRV(cuGraphCreate(&g, 0));
	CUDA_MEMCPY3D cin = {
		.srcMemoryType = CU_MEMORYTYPE_HOST, .srcHost = hin,
		.dstMemoryType = CU_MEMORYTYPE_DEVICE, .dstDevice = a,
		.WidthInBytes = N * sizeof(float), .Height = 1, .Depth = 1,
	};
	DRV(cuGraphAddMemcpyNode(&up, g, NULL, 0, &cin, ctx));
	CUDA_KERNEL_NODE_PARAMS kp = {
		.func = vec_add, .gridDimX = N / 256, .gridDimY = 1, .gridDimZ = 1,
		.blockDimX = 256, .blockDimY = 1, .blockDimZ = 1, .kernelParams = args,
	};
	DRV(cuGraphAddKernelNode(&k, g, &up, 1, &kp));
	CUDA_MEMCPY3D cout = {
		.srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = c,
		.dstMemoryType = CU_MEMORYTYPE_HOST, .dstHost = hout,
		.WidthInBytes = N * sizeof(float), .Height = 1, .Depth = 1,
	};
	DRV(cuGraphAddMemcpyNode(&down, g, &k, 1, &cout, ctx));
	CUDA_HOST_NODE_PARAMS hp = { .fn = host_sum, .userData = &calls };
	DRV(cuGraphAddHostNode(&h, g, &down, 1, &hp));

	DRV(cuGraphClone(&clone, g));
	DRV(cuGraphNodeFindInClone(&found, h, clone));
	DRV(cuGraphNodeGetType(found, &t));
	printf("clone's host node: %d, its own: %d\n", t == CU_GRAPH_NODE_TYPE_HOST,
	       found != h);
	DRV_EXPECT(t == CU_GRAPH_NODE_TYPE_HOST && found != h);
	DRV(cuGraphDestroy(g));
	DRV(cuGraphInstantiate(&x, clone, 0));
	for (int round = 0; round < 2; round++) {
		fill(hin, 10.0f * (float)(round + 1));
		DRV(cuGraphLaunch(x, s));
		DRV(cuStreamSynchronize(s));
		printf("clone launch %d: %.1f %.1f, host sum %.1f\n", round + 1,
		       hout[0], hout[N - 1], sum);
		DRV_EXPECT(hout[1] == 10.0f * (float)(round + 1) + 2.0f);
		DRV_EXPECT(sum == expect(10.0f * (float)(round + 1)));
	}
	DRV_EXPECT(calls == 2);
	DRV(cuGraphExecDestroy(x));
	DRV(cuGraphDestroy(clone));

	/* Captured, cuLaunchHostFunc last (simpleCudaGraphs' second half). */
	DRV(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
	DRV(cuMemcpyHtoDAsync(a, hin, N * sizeof(float), s));
	DRV(cuLaunchKernel(vec_add, N / 256, 1, 1, 256, 1, 1, 0, s, args, NULL));
	DRV(cuMemcpyDtoHAsync(hout, c, N * sizeof(float), s));
	DRV(cuLaunchHostFunc(s, host_sum, &calls));
	DRV_EXPECT(calls == 2);			/* not run at capture */
	DRV(cuStreamEndCapture(s, &g));
	DRV(cuGraphClone(&clone, g));
	DRV(cuGraphInstantiate(&x, clone, 0));
	fill(hin, 40.0f);
	DRV(cuGraphLaunch(x, s));
	DRV(cuStreamSynchronize(s));
	printf("captured host function: calls %d, host sum %.1f\n", calls, sum);
	DRV_EXPECT(calls == 3 && sum == expect(40.0f));
	DRV(cuGraphExecDestroy(x));
	DRV(cuGraphDestroy(clone));
	DRV(cuGraphDestroy(g));

	/* Captured into a graph after its node, and into a body graph. */
	fill(hin, 0.0f);
	DRV(cuMemcpyHtoD(a, hin, N * sizeof(float)));
	DRV(cuMemsetD32(c, 0, N));
	DRV(cuGraphCreate(&g2, 0));
	DRV(cuGraphAddEmptyNode(&first, g2, NULL, 0));
	DRV(cuStreamBeginCaptureToGraph(s, g2, &first, NULL, 1,
					CU_STREAM_CAPTURE_MODE_GLOBAL));
	DRV(cuLaunchKernel(vec_add, N / 256, 1, 1, 256, 1, 1, 0, s, args, NULL));
	DRV(cuStreamEndCapture(s, &got));
	DRV(cuGraphGetNodes(g2, NULL, &count));
	printf("captured into the graph: same graph %d, nodes %zu\n", got == g2, count);
	DRV_EXPECT(got == g2 && count == 2);
	DRV(cuGraphInstantiate(&x, g2, 0));
	DRV(cuGraphLaunch(x, s));
	DRV(cuStreamSynchronize(s));
	DRV(cuMemcpyDtoH(res, c, N * sizeof(float)));
	printf("its launch: %.1f %.1f\n", res[0], res[N - 1]);
	DRV_EXPECT(res[1] == 2.0f);
	DRV(cuGraphExecDestroy(x));
	DRV(cuGraphDestroy(g2));

	CUgraphConditionalHandle cond;
	CUgraphNodeParams cp = { .type = CU_GRAPH_NODE_TYPE_CONDITIONAL };
	CUgraphNode cn;
	CUstreamCaptureStatus cs;

	DRV(cuGraphCreate(&g, 0));
	DRV(cuGraphConditionalHandleCreate(&cond, g, ctx, 1,
					   CU_GRAPH_COND_ASSIGN_DEFAULT));
	cp.conditional.handle = cond;
	cp.conditional.type = CU_GRAPH_COND_TYPE_IF;
	cp.conditional.size = 1;
	cp.conditional.ctx = ctx;
	DRV(cuGraphAddNode(&cn, g, NULL, NULL, 0, &cp));
	DRV(cuStreamBeginCaptureToGraph(s, cp.conditional.phGraph_out[0], NULL, NULL,
					0, CU_STREAM_CAPTURE_MODE_GLOBAL));
	DRV(cuLaunchKernel(vec_add, N / 256, 1, 1, 256, 1, 1, 0, s, args, NULL));
	/* As graphConditionalNodes ends it: without asking for the graph. */
	DRV(cuStreamEndCapture(s, NULL));
	DRV(cuStreamIsCapturing(s, &cs));
	DRV(cuGraphGetNodes(cp.conditional.phGraph_out[0], NULL, &count));
	printf("captured into a body graph: nodes %zu, over %d\n", count,
	       cs == CU_STREAM_CAPTURE_STATUS_NONE);
	DRV_EXPECT(count == 1 && cs == CU_STREAM_CAPTURE_STATUS_NONE);
	DRV(cuGraphDestroy(g));

	/* Graph memory freed outside any graph. */
	for (int how = 0; how < 2; how++) {
		CUDA_MEM_ALLOC_NODE_PARAMS ap;
		CUgraphNode al;
		CUdeviceptr mem;
		CUresult again;

		memset(&ap, 0, sizeof(ap));
		ap.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
		ap.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		ap.poolProps.location.id = 0;
		ap.bytesize = N * sizeof(float);
		DRV(cuGraphCreate(&g, 0));
		DRV(cuGraphAddMemAllocNode(&al, g, NULL, 0, &ap));
		mem = ap.dptr;
		DRV(cuGraphInstantiate(&x, g, 0));
		DRV(cuGraphLaunch(x, s));
		DRV(cuStreamSynchronize(s));
		DRV(cuMemsetD32(mem, 0x40400000, N));	/* 3.0f */
		DRV(cuMemcpyDtoH(res, mem, N * sizeof(float)));
		DRV_EXPECT(res[N - 1] == 3.0f);
		if (how)
			DRV(cuMemFreeAsync(mem, s));
		else
			DRV(cuMemFree(mem));
		DRV(cuStreamSynchronize(s));
		/* As graphMemoryNodes: launched again, the graph maps it again
		 * at the same address, to be freed the other way. */
		DRV(cuGraphLaunch(x, s));
		DRV(cuStreamSynchronize(s));
		DRV(cuMemsetD32(mem, 0x40800000, N));	/* 4.0f */
		DRV(cuMemcpyDtoH(res, mem, N * sizeof(float)));
		DRV_EXPECT(res[0] == 4.0f);
		if (how)
			DRV(cuMemFree(mem));
		else
			DRV(cuMemFreeAsync(mem, s));
		DRV(cuStreamSynchronize(s));
		printf("graph memory mapped again by a launch: %g\n", res[0]);
		again = cuMemFree(mem);
		printf("graph memory freed by %s, again: %d\n",
		       how ? "cuMemFreeAsync" : "cuMemFree", again != CUDA_SUCCESS);
		DRV_EXPECT(again != CUDA_SUCCESS);
		DRV(cuGraphExecDestroy(x));
		DRV(cuGraphDestroy(g));
	}
	DRV(cuStreamDestroy(s));
	drv_pass();
}
