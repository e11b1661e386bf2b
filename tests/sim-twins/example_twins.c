/*
 * example_twins.c - CPU twins of the kernels in kernels.cu, for the sim
 * executor (see tests/sim/sim_twins.h).  Built as a shared object and
 * named in PVGPU_SIM_TWINS by the tests; also the example to copy when
 * writing twins for a new test program.
 */
#include <stdint.h>
#include <stdlib.h>

#include "sim_twins.h"

/* c[i] = a[i] + b[i] for i < n, one thread per element. */
static void vecadd(const struct pvgpu_sim_launch *l)
{
	uint64_t nthreads = pvgpu_sim_nblocks(l) * pvgpu_sim_nthreads(l);
	const float *a, *b;
	float *c;
	int32_t n;
	uint64_t i, m;

	if (pvgpu_sim_arg(l, 3, &n, sizeof(n)))
		return;
	/* Threads past n touch nothing, so neither does the twin. */
	m = n > 0 ? (uint64_t)n : 0;
	if (m > nthreads)
		m = nthreads;
	a = l->dev(l, pvgpu_sim_arg_ptr(l, 0), m * sizeof(float));
	b = l->dev(l, pvgpu_sim_arg_ptr(l, 1), m * sizeof(float));
	c = l->dev(l, pvgpu_sim_arg_ptr(l, 2), m * sizeof(float));
	if (!a || !b || !c)
		return;
	for (i = 0; i < m; i++)
		c[i] = a[i] + b[i];
}

/* x[i] = x[i] * cscale[0] + cinit, from __constant__ memory. */
static void scale(const struct pvgpu_sim_launch *l)
{
	uint64_t nthreads = pvgpu_sim_nblocks(l) * pvgpu_sim_nthreads(l);
	const float *cscale = l->global(l, "cscale", NULL);
	const int32_t *cinit = l->global(l, "cinit", NULL);
	int32_t n;
	uint64_t i, m;
	float *x;

	if (!cscale || !cinit) {
		l->fault(l, "scale: module lacks cscale/cinit");
		return;
	}
	if (pvgpu_sim_arg(l, 1, &n, sizeof(n)))
		return;
	m = n > 0 ? (uint64_t)n : 0;
	if (m > nthreads)
		m = nthreads;
	x = l->dev(l, pvgpu_sim_arg_ptr(l, 0), m * sizeof(float));
	if (!x)
		return;
	for (i = 0; i < m; i++)
		x[i] = x[i] * cscale[0] + (float)*cinit;
}

/* atomicAdd(&gcounter, 1) in every thread. */
static void count(const struct pvgpu_sim_launch *l)
{
	int32_t *g = l->global(l, "gcounter", NULL);

	if (!g) {
		l->fault(l, "count: module lacks gcounter");
		return;
	}
	*g += (int32_t)(pvgpu_sim_nblocks(l) * pvgpu_sim_nthreads(l));
}

/*
 * The shared-memory tree reduction, block by block; each phase between
 * two __syncthreads() is one loop over the block's threads.
 */
static void reduce_sum(const struct pvgpu_sim_launch *l)
{
	uint32_t nt = pvgpu_sim_nthreads(l), t, s;
	uint64_t in_addr = pvgpu_sim_arg_ptr(l, 0);
	uint64_t out_addr = pvgpu_sim_arg_ptr(l, 1);
	uint64_t b;
	int32_t n;

	if (pvgpu_sim_arg(l, 2, &n, sizeof(n)))
		return;
	if (l->block.x != 256 || nt != 256) {
		l->fault(l, "reduce_sum: blockDim must be (256, 1, 1)");
		return;
	}
	for (b = 0; b < pvgpu_sim_nblocks(l); b++) {
		float *buf = l->shared(l, 256 * sizeof(float));
		float *out;

		if (!buf)
			return;
		/* phase 1: each thread loads one element */
		for (t = 0; t < nt; t++) {
			uint64_t i = b * l->block.x + t;
			const float *in;

			buf[t] = 0.0f;
			if (i >= (uint64_t)(n > 0 ? n : 0))
				continue;
			in = l->dev(l, in_addr + i * sizeof(float),
				    sizeof(float));
			if (!in)
				return;
			buf[t] = *in;
		}
		/* phases 2..: halve the active threads each time */
		for (s = l->block.x / 2; s > 0; s /= 2)
			for (t = 0; t < s; t++)
				buf[t] += buf[t + s];
		out = l->dev(l, out_addr + b * sizeof(float), sizeof(float));
		if (!out)
			return;
		*out = buf[0];
	}
}

/* *p = 1 from every thread. */
static void poke(const struct pvgpu_sim_launch *l)
{
	int32_t *p = l->dev(l, pvgpu_sim_arg_ptr(l, 0), sizeof(*p));

	if (p)
		*p = 1;
}

const uint32_t pvgpu_sim_twin_abi = PVGPU_SIM_TWIN_ABI;

const struct pvgpu_sim_twin pvgpu_sim_twins[] = {
	{ "vecadd", vecadd },
	{ "scale", scale },
	{ "count", count },
	{ "reduce_sum", reduce_sum },
	{ "poke", poke },
	{ NULL, NULL },
};
