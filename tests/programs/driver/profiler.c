/*
 * cuProfilerStart / cuProfilerStop, as the asyncAPI and matrixMul samples
 * call them (through cudaProfilerStart): with no profiler attached they
 * succeed and change nothing, and the work between them runs.
 */
#include "drv.h"

/* cudaProfiler.h's (the PyPI headers leave that file out). */
CUresult CUDAAPI cuProfilerStart(void);
CUresult CUDAAPI cuProfilerStop(void);

int main(void)
{
	CUdeviceptr d;
	unsigned int v = 0;

	drv_begin("driver/profiler");
	drv_context();
	DRV(cuMemAlloc(&d, 4096));
	DRV(cuProfilerStart());
	printf("start again: %d\n", (int)cuProfilerStart());
	DRV(cuMemsetD32(d, 0xabcd, 1024));
	DRV(cuProfilerStop());
	printf("stop again: %d\n", (int)cuProfilerStop());
	DRV(cuMemcpyDtoH(&v, d + 400, sizeof(v)));
	printf("value between: %#x\n", v);
	DRV_EXPECT(v == 0xabcd);
	DRV(cuMemFree(d));
	drv_pass();
}
