/*
 * Graph memory, as NVIDIA's graphMemoryNodes and graphMemoryFootprint use
 * it: an allocation node, a kernel writing into its memory, a copy of it
 * into malloc'd host memory and a free node, launched twice with
 * CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH; the same captured with
 * cuMemAllocAsync / cuMemFreeAsync; the device's graph memory attributes
 * and a trim.  argv[1]: vecadd.fatbin.
 */
#include "drv.h"

#define N 1024

int main(int argc, char **argv)
{
	float *out = malloc(N * sizeof(float)), ones[N];
	CUDA_MEM_ALLOC_NODE_PARAMS ap;
	CUdeviceptr a, b, mem, got;
	CUgraphNode al, k, cp, fr;
	CUgraphExec x;
	CUgraph g;
	CUfunction vec_add;
	CUmodule mod;
	CUstream s;
	CUcontext ctx;
	cuuint64_t used = 0, zero = 0;
	size_t count;
	int n = N;
	void *args[] = { &a, &b, &mem, &n };

	drv_begin("driver/graphmem");
	if (argc < 2 || !out) {
		printf("FAIL: usage: graphmem vecadd.fatbin\n");
		return 1;
	}
	ctx = drv_context();
	DRV(cuModuleLoad(&mod, argv[1]));
	DRV(cuModuleGetFunction(&vec_add, mod, "vec_add"));
	DRV(cuMemAlloc(&a, N * sizeof(float)));
	DRV(cuMemAlloc(&b, N * sizeof(float)));
	for (int i = 0; i < N; i++)
		ones[i] = (float)i;
	DRV(cuMemcpyHtoD(a, ones, sizeof(ones)));
	DRV(cuMemsetD32(b, 0x40000000, N));	/* 2.0f */
	DRV(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

	memset(&ap, 0, sizeof(ap));
	ap.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	ap.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	ap.poolProps.location.id = 0;
	ap.bytesize = N * sizeof(float);
	DRV(cuGraphCreate(&g, 0));
	DRV(cuGraphAddMemAllocNode(&al, g, NULL, 0, &ap));
	mem = ap.dptr;
	printf("allocation node address: %d\n", mem != 0);
	CUDA_KERNEL_NODE_PARAMS kp = {
		.func = vec_add, .gridDimX = N / 256, .gridDimY = 1, .gridDimZ = 1,
		.blockDimX = 256, .blockDimY = 1, .blockDimZ = 1, .kernelParams = args,
	};
	DRV(cuGraphAddKernelNode(&k, g, &al, 1, &kp));
	CUDA_MEMCPY3D c = {
		.srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = mem,
		.dstMemoryType = CU_MEMORYTYPE_HOST, .dstHost = out,
		.WidthInBytes = N * sizeof(float), .Height = 1, .Depth = 1,
	};
	DRV(cuGraphAddMemcpyNode(&cp, g, &k, 1, &c, ctx));
	DRV(cuGraphAddMemFreeNode(&fr, g, &cp, 1, mem));
	memset(&ap, 0, sizeof(ap));
	DRV(cuGraphMemAllocNodeGetParams(al, &ap));
	DRV(cuGraphMemFreeNodeGetParams(fr, &got));
	printf("params: bytes %zu, same address %d %d\n", ap.bytesize, ap.dptr == mem,
	       got == mem);
	DRV(cuGraphInstantiate(&x, g, CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH));
	for (int round = 0; round < 2; round++) {
		memset(out, 0, N * sizeof(float));
		DRV(cuGraphLaunch(x, s));
		DRV(cuStreamSynchronize(s));
		printf("explicit launch %d: %.1f %.1f\n", round + 1, out[0], out[N - 1]);
		DRV_EXPECT(out[1] == 3.0f);
	}
	DRV(cuDeviceGetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH, &used));
	printf("graph memory reserved at its high: %d\n", used >= N * sizeof(float));
	DRV(cuDeviceSetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &zero));
	DRV(cuGraphExecDestroy(x));
	DRV(cuGraphDestroy(g));

	/* Captured. */
	DRV(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
	DRV(cuMemAllocAsync(&mem, N * sizeof(float), s));
	DRV(cuLaunchKernel(vec_add, N / 256, 1, 1, 256, 1, 1, 0, s, args, NULL));
	DRV(cuMemcpyDtoHAsync(out, mem, N * sizeof(float), s));
	DRV(cuMemFreeAsync(mem, s));
	DRV(cuStreamEndCapture(s, &g));
	DRV(cuGraphGetNodes(g, NULL, &count));
	printf("captured nodes: %zu\n", count);
	DRV(cuGraphInstantiate(&x, g, 0));
	memset(out, 0, N * sizeof(float));
	DRV(cuGraphLaunch(x, s));
	DRV(cuStreamSynchronize(s));
	printf("captured launch: %.1f %.1f\n", out[0], out[N - 1]);
	DRV_EXPECT(out[1] == 3.0f);
	DRV(cuGraphExecDestroy(x));
	DRV(cuGraphDestroy(g));
	DRV(cuDeviceGraphMemTrim(0));
	DRV(cuStreamDestroy(s));
	drv_pass();
}
