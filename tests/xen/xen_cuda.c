/*
 * xen_cuda.c - driver-API checks a domU runs through pvgpu's libcuda.so.1
 * over vchan:// (tests/xen/test_xen_pvgpud.py).
 *
 *   xen-cuda quota      the device memory cuMemGetInfo reports (the VM's
 *                       quota), then 1 MiB allocations until one fails
 *   xen-cuda quota hold the same, then holds the allocations until its
 *                       stdin ends (dom0 looks at both VMs' usage meanwhile)
 *   xen-cuda copyloop   4 MiB host-to-device copies, checked, forever
 *                       (dom0 destroys the domain meanwhile)
 *   xen-cuda once N     one session: 1 MiB there and back through the
 *                       window, checked; prints "session N ok"
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>

#define MiB (1ull << 20)

static int check(CUresult r, const char *what)
{
	if (r != CUDA_SUCCESS) {
		printf("xen-cuda: %s failed: %d\n", what, (int)r);
		fflush(stdout);
		exit(1);
	}
	return 0;
}

static int quota(int hold)
{
	size_t free_b = 0, total_b = 0;
	CUdeviceptr p;
	CUresult r = CUDA_SUCCESS;
	int n = 0;

	check(cuMemGetInfo(&free_b, &total_b), "cuMemGetInfo");
	printf("xen-cuda: total %zu MiB\n", (size_t)(total_b / MiB));
	while (n < 4096 && (r = cuMemAlloc(&p, MiB)) == CUDA_SUCCESS)
		n++;
	printf("xen-cuda: allocated %d MiB, then %s\n", n,
	       r == CUDA_ERROR_OUT_OF_MEMORY ? "out of memory" : "another error");
	fflush(stdout);
	if (hold) {
		while (getchar() != EOF)
			;
		/* Still ours after the wait: the session lived through it. */
		check(cuMemGetInfo(&free_b, &total_b), "cuMemGetInfo after holding");
		printf("xen-cuda: held %d MiB, %zu MiB free\n", n,
		       (size_t)(free_b / MiB));
	}
	return r == CUDA_ERROR_OUT_OF_MEMORY ? 0 : 1;
}

static int copyloop(void)
{
	size_t len = 4 * MiB;
	unsigned char *h = malloc(len), *back = malloc(len);
	CUdeviceptr d;

	if (!h || !back)
		return 1;
	check(cuMemAlloc(&d, len), "cuMemAlloc");
	for (size_t i = 0; i < len; i++)
		h[i] = (unsigned char)(i * 7);
	for (unsigned long k = 0;; k++) {
		check(cuMemcpyHtoD(d, h, len), "cuMemcpyHtoD");
		if (k == 0) {
			check(cuMemcpyDtoH(back, d, len), "cuMemcpyDtoH");
			printf("xen-cuda: copying (%s)\n",
			       memcmp(h, back, len) ? "WRONG" : "data ok");
			fflush(stdout);
		}
	}
	return 0;
}

static int once(const char *tag)
{
	size_t len = MiB;
	unsigned char *h = malloc(len), *back = malloc(len);
	CUdeviceptr d;
	int ok;

	if (!h || !back)
		return 1;
	for (size_t i = 0; i < len; i++)
		h[i] = (unsigned char)(i * 13 + (unsigned char)tag[0]);
	check(cuMemAlloc(&d, len), "cuMemAlloc");
	check(cuMemcpyHtoD(d, h, len), "cuMemcpyHtoD");
	check(cuMemcpyDtoH(back, d, len), "cuMemcpyDtoH");
	check(cuMemFree(d), "cuMemFree");
	ok = !memcmp(h, back, len);
	printf("xen-cuda: session %s %s\n", tag, ok ? "ok" : "WRONG DATA");
	free(h);
	free(back);
	return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
	CUdevice dev;
	CUcontext ctx;

	if (argc < 2 || argc > 3 ||
	    (argc == 3 && strcmp(argv[1], "once") && strcmp(argv[2], "hold")) ||
	    (argc == 2 && !strcmp(argv[1], "once"))) {
		fprintf(stderr, "usage: xen-cuda quota [hold] | copyloop | once N\n");
		return 2;
	}
	check(cuInit(0), "cuInit");
	check(cuDeviceGet(&dev, 0), "cuDeviceGet");
	check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
	check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
	if (!strcmp(argv[1], "quota"))
		return quota(argc == 3);
	if (!strcmp(argv[1], "copyloop"))
		return copyloop();
	if (!strcmp(argv[1], "once"))
		return once(argv[2]);
	return 2;
}
