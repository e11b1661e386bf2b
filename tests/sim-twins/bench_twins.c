/*
 * bench_twins.c - CPU twins of the benchmarks' kernels (bench/pvgpu-*), so that
 * the benchmarks run end to end against `pvgpud --executor sim` (make demo,
 * the bench CI test).  Built alone into libbench-twins.so.  The benchmarks'
 * kernels are C++ functions, so the twins go by their mangled names.  The
 * sim's timings say nothing about a GPU; the twins only make the results
 * right (all but pvgpu-fair's, below).
 */
/* clock_nanosleep and flock, for the fairness twin (-std=c11 hides them). */
#define _DEFAULT_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/file.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

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

/*
 * pvgpu-fair.cu: fair_kernel(float *out, int iters, float x0): every thread
 * runs four FMA chains from x0, x0+.25, x0+.5, x0+.75 and writes their sum
 * to out[its global index].  The chains are the same in every thread, so
 * the twin computes them once.  pvgpu-fair measures GPU time, so unlike the
 * other twins this one also takes about the time the launch would take on
 * the GPU: the grid's FMAs at FAIR_SIM_FMA_PER_NS (about an H100 PCIe's
 * FP32 rate), spent sleeping, so that sessions of several VMs contend for
 * the sim device the way they would for a GPU, not for the CPU.  With
 * PVGPU_SIM_SERIAL=FILE the launches of all workers also take turns on an
 * flock of FILE while they "run": a device that runs one kernel at a time,
 * as a GPU without MPS does, so that idle time between kernels shows.
 */
#define FAIR_SIM_FMA_PER_NS	25600.0

static int serial_fd = -2;		/* -2: not looked at yet; -1: none */

static void serial_lock(int op)
{
	if (serial_fd == -2) {
		const char *path = getenv("PVGPU_SIM_SERIAL");

		serial_fd = path && *path ? open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600) : -1;
	}
	if (serial_fd >= 0)
		while (flock(serial_fd, op) && errno == EINTR)
			;
}

static void fair_kernel_twin(const struct pvgpu_sim_launch *l)
{
	/*
	 * The chains depend on (x0, iters) alone, and fmaf can be slow on a
	 * CPU: computed once per worker for the values of the last launch.
	 */
	static int32_t memo_iters = -1;
	static float memo_x0, memo_sum;
	uint64_t out = pvgpu_sim_arg_ptr(l, 0);
	struct timespec until;
	int32_t iters;
	float x0;

	if (ARG(l, 1, iters) || ARG(l, 2, x0) || l->faulted(l))
		return;
	uint64_t n = twin_has_threads(l) ? pvgpu_sim_nblocks(l) * pvgpu_sim_nthreads(l) : 0;
	float *ho = twin_map(l, out, n, 4);
	if (!ho)
		return;
	if (iters != memo_iters || memcmp(&x0, &memo_x0, sizeof(x0))) {
		float x = x0, y = x0 + 0.25f, z = x0 + 0.5f, v = x0 + 0.75f;
		for (int32_t k = 0; k < iters; k++) {
			x = fmaf(x, 0.999f, 0.001f);
			y = fmaf(y, 0.999f, 0.001f);
			z = fmaf(z, 0.999f, 0.001f);
			v = fmaf(v, 0.999f, 0.001f);
		}
		memo_sum = x + y + z + v;
		memo_x0 = x0;
		memo_iters = iters;
	}
	/* The time the grid's FMAs take on the modelled device, at most 10 s. */
	double ns = (double)n * (iters > 0 ? iters : 0) * 4.0 / FAIR_SIM_FMA_PER_NS;
	if (ns > 10e9)
		ns = 10e9;
	serial_lock(LOCK_EX);
	clock_gettime(CLOCK_MONOTONIC, &until);
	for (uint64_t i = 0; i < n; i++)
		ho[i] = memo_sum;
	until.tv_sec += (time_t)(ns / 1e9);
	until.tv_nsec += (long)(ns - (double)(time_t)(ns / 1e9) * 1e9);
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) == EINTR)
		;
	serial_lock(LOCK_UN);
}

const uint32_t pvgpu_sim_twin_abi = PVGPU_SIM_TWIN_ABI;

const struct pvgpu_sim_twin pvgpu_sim_twins[] = {
	{ "_Z12empty_kernelv", empty_kernel_twin },
	{ "_Z12count_kernelPj", count_kernel_twin },
	{ "_Z10fma_kernelPfiiff", fma_kernel_twin },
	{ "_Z11fair_kernelPfif", fair_kernel_twin },
	{ NULL, NULL },
};
