/*
 * Helpers shared by the driver-API test programs (tests/programs/driver/):
 * C programs that call libcuda.so.1 directly, as NVIDIA's driver-API
 * samples (matrixMulDrv, vectorAddMMAP, ptxjit) and the libraries do.
 * Like the runtime programs (check.h), each prints a transcript that must
 * be the same natively and through pvgpu: no pointers, no timings.  The
 * last line is "PASS" (exit 0) or "FAIL: reason" (exit 1).  argv[1], where
 * a program needs one, is a kernel image (vecadd.fatbin).
 */
#ifndef PVGPU_DRV_H
#define PVGPU_DRV_H

#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline void drv_begin(const char *name)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("program: %s\n", name);
}

static inline void drv_pass(void)
{
	printf("PASS\n");
	exit(0);
}

static inline void drv_fail(const char *what, CUresult r)
{
	const char *n = NULL;

	cuGetErrorName(r, &n);
	printf("FAIL: %s -> %d (%s)\n", what, (int)r, n ? n : "?");
	exit(1);
}

#define DRV(call)                                      \
	do {                                           \
		CUresult drv_r_ = (call);              \
		if (drv_r_ != CUDA_SUCCESS)            \
			drv_fail(#call, drv_r_);       \
	} while (0)

#define DRV_EXPECT(cond)                                          \
	do {                                                      \
		if (!(cond)) {                                    \
			printf("FAIL: %s (line %d)\n", #cond, __LINE__); \
			exit(1);                                  \
		}                                                 \
	} while (0)

/* A context on device 0, made current. */
static inline CUcontext drv_context(void)
{
	CUdevice dev;
	CUcontext ctx;

	DRV(cuInit(0));
	DRV(cuDeviceGet(&dev, 0));
	DRV(cuDevicePrimaryCtxRetain(&ctx, dev));
	DRV(cuCtxSetCurrent(ctx));
	return ctx;
}

/* The whole file at path, or exit. */
static inline void *drv_read(const char *path, size_t *size)
{
	FILE *f = fopen(path, "rb");
	long n;
	void *p;

	if (!f || fseek(f, 0, SEEK_END) || (n = ftell(f)) <= 0 || fseek(f, 0, SEEK_SET)) {
		printf("FAIL: cannot read %s\n", path);
		exit(1);
	}
	p = malloc((size_t)n + 1);
	if (!p || fread(p, 1, (size_t)n, f) != (size_t)n) {
		printf("FAIL: cannot read %s\n", path);
		exit(1);
	}
	((char *)p)[n] = 0;
	fclose(f);
	*size = (size_t)n;
	return p;
}

#endif
