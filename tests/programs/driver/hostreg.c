/*
 * Registered host memory a kernel reaches, as NVIDIA's NPP does it:
 * memory the program already had (the heap, not page-aligned) registered
 * with cuMemHostRegister(DEVICEMAP), cuMemHostGetDevicePointer, a kernel
 * that reads and writes it there, the program's own writes seen by the
 * device, and the bytes still the program's after cuMemHostUnregister.
 * Through pvgpu this needs a shared window (shm://, the VM window device).
 * argv[1]: vecadd.fatbin.
 */
#include <stdlib.h>

#include "drv.h"

#define N 4096

int main(int argc, char **argv)
{
	CUdeviceptr da, db, dc;
	float *a, *b, *c, first = 0.0f;
	char *raw;
	CUmodule mod;
	CUfunction f;
	size_t size;
	void *image;
	int n = N;
	void *args[] = { &da, &db, &dc, &n };
	CUresult r;

	drv_begin("driver/hostreg");
	if (argc < 2) {
		printf("FAIL: usage: hostreg vecadd.fatbin\n");
		return 2;
	}
	drv_context();
	image = drv_read(argv[1], &size);
	DRV(cuModuleLoadData(&mod, image));
	DRV(cuModuleGetFunction(&f, mod, "vec_add"));
	if (posix_memalign((void **)&a, 4096, N * sizeof(float)) ||
	    posix_memalign((void **)&b, 4096, N * sizeof(float)))
		return 2;
	raw = malloc(N * sizeof(float) + 64);	/* c: not on a page boundary */
	if (!raw)
		return 2;
	c = (float *)(raw + 16);
	for (int i = 0; i < N; i++) {
		a[i] = (float)i;
		b[i] = 2.0f;
		c[i] = -1.0f;
	}
	DRV(cuMemHostRegister(a, N * sizeof(float), CU_MEMHOSTREGISTER_DEVICEMAP));
	DRV(cuMemHostRegister(b, N * sizeof(float), CU_MEMHOSTREGISTER_DEVICEMAP));
	DRV(cuMemHostRegister(c, N * sizeof(float), CU_MEMHOSTREGISTER_DEVICEMAP));
	printf("kept by registration: %.1f %.1f %.1f\n", a[10], b[N - 1], c[3]);
	DRV_EXPECT(a[10] == 10.0f && b[N - 1] == 2.0f && c[3] == -1.0f);
	printf("registered twice: %d\n", (int)cuMemHostRegister(a, 64, 0));
	r = cuMemHostGetDevicePointer(&da, a, 0);
	if (r == CUDA_ERROR_NOT_SUPPORTED) {
		printf("mapped host memory: not supported over this transport\n");
		drv_pass();
	}
	DRV(r);
	DRV(cuMemHostGetDevicePointer(&db, b, 0));
	DRV(cuMemHostGetDevicePointer(&dc, c, 0));
	/* The program writes after registering; the device reads it. */
	a[0] = 100.0f;
	DRV(cuMemcpyDtoH(&first, da, sizeof(first)));
	printf("the program's write, read by the device: %.1f\n", first);
	DRV_EXPECT(first == 100.0f);
	DRV(cuLaunchKernel(f, N / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
	DRV(cuCtxSynchronize());
	printf("written by the kernel into registered memory: %.1f %.1f %.1f\n",
	       c[0], c[10], c[N - 1]);
	DRV_EXPECT(c[0] == 102.0f && c[10] == 12.0f && c[N - 1] == (float)(N + 1));
	/* Copies between registered memory and device memory, interior and
	 * unaligned (through pvgpu: from the window, zero-copy). */
	CUdeviceptr tmp;

	DRV(cuMemAlloc(&tmp, N * sizeof(float)));
	DRV(cuMemcpyHtoD(tmp, a + 3, 1000 * sizeof(float)));
	DRV(cuMemcpyDtoH(b + 5, tmp, 1000 * sizeof(float)));
	printf("copied through the device: %.1f %.1f %.1f\n", b[4], b[5], b[1004]);
	DRV_EXPECT(b[4] == 2.0f && b[5] == 3.0f && b[1004] == 1002.0f);
	DRV(cuMemFree(tmp));
	DRV(cuMemHostUnregister(a));
	DRV(cuMemHostUnregister(b));
	DRV(cuMemHostUnregister(c));
	printf("unregistered twice: %d\n", (int)cuMemHostUnregister(c));
	c[1] = 7.0f;
	printf("the program's again: %.1f %.1f %.1f\n", a[0], c[1], c[10]);
	DRV_EXPECT(a[0] == 100.0f && c[1] == 7.0f && c[10] == 12.0f);
	free(a);
	free(b);
	free(raw);
	/* A buffer on this thread's stack (NPP registers one): its bytes
	 * and the stack around it stay intact. */
	volatile float st[64];

	for (int i = 0; i < 64; i++)
		st[i] = (float)i;
	DRV(cuMemHostRegister((void *)st, sizeof(st), CU_MEMHOSTREGISTER_DEVICEMAP));
	st[1] = 50.0f;
	DRV(cuMemHostUnregister((void *)st));
	printf("stack buffer kept: %.1f %.1f\n", st[1], st[63]);
	DRV_EXPECT(st[1] == 50.0f && st[63] == 63.0f);
	DRV(cuModuleUnload(mod));
	free(image);
	drv_pass();
}
