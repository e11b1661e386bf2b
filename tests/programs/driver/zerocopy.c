/*
 * Mapped host memory, as NVIDIA's simpleZeroCopy sample uses it:
 * cuMemHostAlloc(DEVICEMAP), cuMemHostGetDevicePointer, a kernel that
 * reads its inputs from and writes its result to host memory, read by the
 * program straight from that memory after a synchronize.  Through pvgpu
 * this needs a shared window (shm://, the VM window device); over a plain
 * socket cuMemHostGetDevicePointer says CUDA_ERROR_NOT_SUPPORTED.
 * argv[1]: vecadd.fatbin.
 */
#include "drv.h"

#define N 4096

int main(int argc, char **argv)
{
	CUdeviceptr da, db, dc;
	float *a, *b, *c;
	CUmodule mod;
	CUfunction f;
	size_t size;
	void *image;
	int n = N, can = 0;
	void *args[] = { &da, &db, &dc, &n };
	CUdevice dev;
	CUresult r;

	drv_begin("driver/zerocopy");
	if (argc < 2) {
		printf("FAIL: usage: zerocopy vecadd.fatbin\n");
		return 2;
	}
	drv_context();
	DRV(cuCtxGetDevice(&dev));
	DRV(cuDeviceGetAttribute(&can, CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, dev));
	printf("can map host memory: %d\n", can);
	image = drv_read(argv[1], &size);
	DRV(cuModuleLoadData(&mod, image));
	DRV(cuModuleGetFunction(&f, mod, "vec_add"));
	DRV(cuMemHostAlloc((void **)&a, N * sizeof(float), CU_MEMHOSTALLOC_DEVICEMAP));
	DRV(cuMemHostAlloc((void **)&b, N * sizeof(float), CU_MEMHOSTALLOC_DEVICEMAP));
	DRV(cuMemHostAlloc((void **)&c, N * sizeof(float), CU_MEMHOSTALLOC_DEVICEMAP));
	for (int i = 0; i < N; i++) {
		a[i] = (float)i;
		b[i] = 2.0f;
		c[i] = -1.0f;
	}
	CUdeviceptr scratch = 0;

	r = cuMemHostGetDevicePointer(&da, a, 0);
	if (r == CUDA_ERROR_NOT_SUPPORTED) {
		printf("mapped host memory: not supported over this transport\n");
		drv_pass();
	}
	DRV(r);
	DRV(cuMemHostGetDevicePointer(&db, b, 0));
	DRV(cuMemHostGetDevicePointer(&dc, c, 0));
	/* Into a scratch variable: the driver may write it before refusing. */
	printf("flags refused: %d\n", (int)cuMemHostGetDevicePointer(&scratch, c, 1));
	DRV(cuLaunchKernel(f, N / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
	DRV(cuCtxSynchronize());
	printf("written by the kernel into host memory: %.1f %.1f\n", c[10], c[N - 1]);
	DRV_EXPECT(c[10] == 12.0f && c[N - 1] == (float)(N + 1));
	/* A copy into mapped memory by its device address. */
	DRV(cuMemsetD32(dc, 0, N));
	printf("after a memset through the device address: %.1f\n", c[5]);
	DRV_EXPECT(c[5] == 0.0f);
	DRV(cuMemFreeHost(a));
	DRV(cuMemFreeHost(b));
	DRV(cuMemFreeHost(c));
	DRV(cuModuleUnload(mod));
	free(image);
	drv_pass();
}
