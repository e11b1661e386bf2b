/*
 * bench_twins.c - CPU twins of the benchmarks' kernels (bench/pvgpu-*), so that
 * the benchmarks run end to end against `pvgpud --executor sim` (make demo,
 * the bench CI test).  Built alone into libbench-twins.so.  The benchmarks'
 * kernels are C++ functions, so the twins go by their mangled names.  The
 * sim's timings say nothing about a GPU; the twins only make the results
 * right.
 */
#include <math.h>
#include <stdint.h>

#include "sim_twins.h"
#include "twin_util.h"

/* pvgpu-latency.cu: __global__ void empty_kernel(void) {} */
static void empty_kernel_twin(const struct pvgpu_sim_launch *l)
{
	(void)l;
}

/* pvgpu-latency.cu: count_kernel(unsigned int *counter): thread 0 of block 0
 * does atomicAdd(counter, 1). */
static void count_kernel_twin(const struct pvgpu_sim_launch *l)
{
	uint64_t c = pvgpu_sim_arg_ptr(l, 0);

	if (l->faulted(l) || !twin_has_threads(l))
		return;
	uint32_t *hc = twin_map(l, c, 1, 4);
	if (hc)
		*hc += 1;
}

/* pvgpu-synth.cu: fma_kernel(float *buf, int n, int iters, float a, float b):
 * buf[i] = fmaf(...fmaf(buf[i], a, b)..., a, b), iters times, for i < n. */
static void fma_kernel_twin(const struct pvgpu_sim_launch *l)
{
	uint64_t buf = pvgpu_sim_arg_ptr(l, 0);
	int32_t n, iters;
	float a, b;

	if (ARG(l, 1, n) || ARG(l, 2, iters) || ARG(l, 3, a) || ARG(l, 4, b) ||
	    l->faulted(l))
		return;
	uint64_t cnt = twin_count_1d(l, n);
	float *hb = twin_map(l, buf, cnt, 4);
	if (!hb)
		return;
	for (uint64_t i = 0; i < cnt; i++) {
		float x = hb[i];
		for (int32_t k = 0; k < iters; k++)
			x = fmaf(x, a, b);
		hb[i] = x;
	}
}

const uint32_t pvgpu_sim_twin_abi = PVGPU_SIM_TWIN_ABI;

const struct pvgpu_sim_twin pvgpu_sim_twins[] = {
	{ "_Z12empty_kernelv", empty_kernel_twin },
	{ "_Z12count_kernelPj", count_kernel_twin },
	{ "_Z10fma_kernelPfiiff", fma_kernel_twin },
	{ NULL, NULL },
};
