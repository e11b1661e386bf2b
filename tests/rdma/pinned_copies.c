/*
 * pinned_copies.c - zero-copy of pinned memory over verbs:// (tests/rdma):
 * an 8 MiB cuMemHostAlloc buffer copied to the device and back ROUNDS
 * times, a new pattern each round, every byte checked.  Before the first
 * round and after the last it lists this process's memory registrations
 * (`rdma resource show mr`): the pinned buffer is registered once, when
 * it is allocated, never per copy.
 *
 * It also prints the rate of its copies each way ("rate: h2d X MB/s d2h
 * Y MB/s", 1 MB = 1e6 bytes): copies of memory registered once, moved in
 * place, as pvgpu-bandwidth's "pinned" ones over libcuda.so.1 are too.
 *
 *   pinned-copies [ROUNDS]      prints "PASS" last when every byte matched
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>

#define SIZE	(8u << 20)

static void check(CUresult r, const char *what)
{
	if (r != CUDA_SUCCESS) {
		printf("pinned-copies: %s failed: %d\n", what, (int)r);
		exit(1);
	}
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void show_mrs(const char *when)
{
	char cmd[128];

	printf("mrs %s:\n", when);
	fflush(stdout);
	snprintf(cmd, sizeof(cmd), "rdma resource show mr | grep 'pid %d ' | sed 's/^/mr: /'",
		 (int)getpid());
	if (system(cmd) < 0)
		printf("pinned-copies: cannot run rdma\n");
	fflush(stdout);
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 20;
	unsigned char *src, *dst;
	CUdeviceptr d;
	CUcontext ctx;
	CUdevice dev;
	double h2d = 0, d2h = 0, t;

	check(cuInit(0), "cuInit");
	check(cuDeviceGet(&dev, 0), "cuDeviceGet");
	check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
	check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
	check(cuMemHostAlloc((void **)&src, SIZE, 0), "cuMemHostAlloc");
	check(cuMemHostAlloc((void **)&dst, SIZE, 0), "cuMemHostAlloc");
	check(cuMemAlloc(&d, SIZE), "cuMemAlloc");
	show_mrs("before");
	for (int r = 0; r < rounds; r++) {
		for (unsigned int i = 0; i < SIZE; i++)
			src[i] = (unsigned char)(i * 7 + r * 13 + (i >> 12));
		memset(dst, 0, SIZE);
		t = now_s();
		check(cuMemcpyHtoD(d, src, SIZE), "cuMemcpyHtoD");
		h2d += now_s() - t;
		t = now_s();
		check(cuMemcpyDtoH(dst, d, SIZE), "cuMemcpyDtoH");
		d2h += now_s() - t;
		if (memcmp(src, dst, SIZE)) {
			printf("pinned-copies: round %d: bytes differ\n", r);
			return 1;
		}
	}
	show_mrs("after");
	printf("rounds: %d of %u bytes\n", rounds, SIZE);
	if (rounds > 0 && h2d > 0 && d2h > 0)
		printf("rate: h2d %.1f MB/s d2h %.1f MB/s\n",
		       (double)SIZE * rounds / h2d / 1e6, (double)SIZE * rounds / d2h / 1e6);
	check(cuMemFreeHost(src), "cuMemFreeHost");
	check(cuMemFreeHost(dst), "cuMemFreeHost");
	check(cuMemFree(d), "cuMemFree");
	printf("PASS\n");
	return 0;
}
