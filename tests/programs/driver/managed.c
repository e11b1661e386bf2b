/*
 * Managed memory and host memory that kernels reach by its host pointer,
 * as NVIDIA's UnifiedMemoryPerf, UnifiedMemoryStreams, systemWideAtomics
 * and p2pBandwidthLatencyTest use them: cuMemAllocManaged written by the
 * CPU, incremented by a kernel, read back by the CPU straight from memory;
 * prefetches, advice and range attributes; stream attachment; copies and
 * memsets in and out of managed memory; and a kernel spinning on a flag in
 * cuMemHostAlloc'd memory (by its host pointer) until another thread of
 * the program sets it, while the program polls for the kernel's answer
 * there without calling CUDA.  Through pvgpu managed memory needs a shared window
 * (shm://, the VM window device); over a plain socket the device says it
 * has none and cuMemAllocManaged is CUDA_ERROR_NOT_SUPPORTED.
 * argv[1]: vecadd.fatbin (managed_kernels.fatbin is beside it).
 */
#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include "drv.h"

#define N	(1 << 16)
#define BLOCK	256
#define TIMEOUT_NS	(20ull * 1000000000u)

static void *set_flag_later(void *arg)
{
	volatile int *flag = arg;
	struct timespec d = { 0, 200 * 1000 * 1000 };

	nanosleep(&d, NULL);
	__atomic_store_n((int *)flag, 1, __ATOMIC_RELEASE);
	return NULL;
}

static int all_equal(const int *p, int add)
{
	for (int i = 0; i < N; i++)
		if (p[i] != i + add) {
			printf("element %d is %d, expected %d\n", i, p[i], i + add);
			return 0;
		}
	return 1;
}

int main(int argc, char **argv)
{
	int managed = 0, concurrent = 0, n = N, v = 0, mtype = 0, *flag, *host;
	unsigned long long timeout = TIMEOUT_NS;
	CUdeviceptr m, d, scratch;
	CUfunction inc, wait;
	CUstream stream;
	CUmodule mod;
	CUdevice dev;
	pthread_t th;
	void *image, *hp = NULL;
	char path[4096];
	size_t size;
	CUresult r;

	drv_begin("driver/managed");
	if (argc < 2) {
		printf("FAIL: usage: managed vecadd.fatbin\n");
		return 2;
	}
	drv_context();
	DRV(cuCtxGetDevice(&dev));
	DRV(cuDeviceGetAttribute(&managed, CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, dev));
	DRV(cuDeviceGetAttribute(&concurrent, CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, dev));
	if (!managed) {
		r = cuMemAllocManaged(&m, 4096, CU_MEM_ATTACH_GLOBAL);
		printf("managed memory: not supported over this transport (%d)\n", (int)r);
		DRV_EXPECT(r == CUDA_ERROR_NOT_SUPPORTED);
		drv_pass();
	}
	printf("managed memory: %d, concurrent access: %d\n", managed, concurrent);

	snprintf(path, sizeof(path), "%s", argv[1]);
	{
		char *slash = strrchr(path, '/');

		snprintf(slash ? slash + 1 : path, sizeof(path) - (size_t)(slash ? slash + 1 - path : 0),
			 "managed_kernels.fatbin");
	}
	image = drv_read(path, &size);
	DRV(cuModuleLoadData(&mod, image));
	DRV(cuModuleGetFunction(&inc, mod, "managed_inc"));
	DRV(cuModuleGetFunction(&wait, mod, "flag_wait"));

	/* Refusals, as the driver's. */
	printf("flags 0: %d, size 0: %d\n", (int)cuMemAllocManaged(&scratch, 4096, 0),
	       (int)cuMemAllocManaged(&scratch, 0, CU_MEM_ATTACH_GLOBAL));

	/* Written by the CPU, incremented by the GPU, read by the CPU. */
	DRV(cuMemAllocManaged(&m, N * sizeof(int), CU_MEM_ATTACH_GLOBAL));
	host = (int *)(uintptr_t)m;
	for (int i = 0; i < N; i++)
		host[i] = i;
	DRV(cuPointerGetAttribute(&v, CU_POINTER_ATTRIBUTE_IS_MANAGED, m));
	DRV(cuPointerGetAttribute(&mtype, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, m));
	DRV(cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, m));
	printf("is managed: %d, memory type: %d, host pointer is the pointer: %d\n",
	       v, mtype, hp == (void *)host);
	void *args[] = { &m, &n };
	DRV(cuLaunchKernel(inc, N / BLOCK, 1, 1, BLOCK, 1, 1, 0, NULL, args, NULL));
	DRV(cuCtxSynchronize());
	printf("incremented by the kernel: %d %d\n", host[10], host[N - 1]);
	DRV_EXPECT(all_equal(host, 1));

	/* Hints: accepted, and what was asked is what the range says. */
	CUmemLocation loc = { CU_MEM_LOCATION_TYPE_DEVICE, dev };
	DRV(cuMemAdvise(m, N * sizeof(int), CU_MEM_ADVISE_SET_READ_MOSTLY, loc));
	DRV(cuMemRangeGetAttribute(&v, sizeof(v), CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, m, N * sizeof(int)));
	printf("read mostly: %d\n", v);
	DRV(cuMemAdvise(m, N * sizeof(int), CU_MEM_ADVISE_UNSET_READ_MOSTLY, loc));
	DRV(cuMemRangeGetAttribute(&v, sizeof(v), CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, m, N * sizeof(int)));
	printf("read mostly after unset: %d\n", v);
	DRV(cuMemAdvise(m, N * sizeof(int), CU_MEM_ADVISE_SET_PREFERRED_LOCATION, loc));
	DRV(cuMemRangeGetAttribute(&v, sizeof(v), CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, m, N * sizeof(int)));
	printf("preferred location is the device: %d\n", v == dev);
	DRV(cuMemPrefetchAsync(m, N * sizeof(int), loc, 0, NULL));
	DRV(cuCtxSynchronize());
	DRV(cuMemRangeGetAttribute(&v, sizeof(v), CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, m, N * sizeof(int)));
	printf("last prefetch is the device: %d\n", v == dev);

	/* Attached to one stream, used there. */
	DRV(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
	DRV(cuStreamAttachMemAsync(stream, m, 0, CU_MEM_ATTACH_SINGLE));
	DRV(cuLaunchKernel(inc, N / BLOCK, 1, 1, BLOCK, 1, 1, 0, stream, args, NULL));
	DRV(cuStreamSynchronize(stream));
	printf("after a launch on its stream: %d\n", host[7]);
	DRV_EXPECT(all_equal(host, 2));

	/* Copies and memsets in and out of managed memory. */
	DRV(cuMemAlloc(&d, N * sizeof(int)));
	DRV(cuMemcpy(d, m, N * sizeof(int)));
	DRV(cuMemsetD32(m, 7, N));
	DRV(cuCtxSynchronize());	/* the driver's may still be running */
	printf("after a memset: %d %d\n", host[0], host[N - 1]);
	DRV_EXPECT(host[0] == 7 && host[N - 1] == 7);
	DRV(cuMemcpyDtoD(m, d, N * sizeof(int)));
	DRV(cuCtxSynchronize());
	printf("copied back from device memory: %d\n", host[100]);
	DRV_EXPECT(all_equal(host, 2));
	DRV(cuMemFree(d));
	DRV(cuMemFree(m));
	printf("freed, its attributes refused: %d\n",
	       (int)cuPointerGetAttribute(&v, CU_POINTER_ATTRIBUTE_IS_MANAGED, m) != 0);

	/* A kernel spinning on host memory by its host pointer. */
	DRV(cuMemHostAlloc((void **)&flag, 2 * sizeof(int), CU_MEMHOSTALLOC_PORTABLE));
	/* Pinned memory is the device's at its own pointer (unified
	 * addressing); a memset there is synchronous. */
	DRV(cuMemsetD32((CUdeviceptr)(uintptr_t)flag, 5, 2));
	printf("memset by its host pointer: %d %d\n", flag[0], flag[1]);
	flag[0] = 0;
	flag[1] = 0;
	void *wargs[] = { &flag, &timeout };
	if (pthread_create(&th, NULL, set_flag_later, flag)) {
		printf("FAIL: pthread_create\n");
		return 1;
	}
	DRV(cuLaunchKernel(wait, 1, 1, 1, 1, 1, 1, 0, stream, wargs, NULL));
	/* The kernel's answer, read in a loop with no CUDA call, as a
	 * program polling a flag a kernel sets does. */
	{
		struct timespec t0, t;

		clock_gettime(CLOCK_MONOTONIC, &t0);
		do
			clock_gettime(CLOCK_MONOTONIC, &t);
		while (!__atomic_load_n(&flag[1], __ATOMIC_ACQUIRE) && t.tv_sec - t0.tv_sec < 30);
	}
	printf("the program saw the kernel's answer before synchronizing: %d\n", flag[1] != 0);
	DRV(cuStreamSynchronize(stream));
	pthread_join(th, NULL);
	printf("the kernel saw the host's flag: %d\n", flag[1] == 2);
	DRV_EXPECT(flag[1] == 2);
	DRV(cuMemFreeHost(flag));
	DRV(cuStreamDestroy(stream));
	DRV(cuModuleUnload(mod));
	free(image);
	drv_pass();
}
