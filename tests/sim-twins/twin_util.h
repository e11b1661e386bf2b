/*
 * twin_util.h - small helpers shared by the CPU twins in this directory
 * (see tests/sim/sim_twins.h for the rules twins follow).
 */
#ifndef PVGPU_TEST_TWIN_UTIL_H
#define PVGPU_TEST_TWIN_UTIL_H

#include <stdint.h>

#include "sim_twins.h"

/* Scalar parameters; each returns non-zero after faulting the launch. */
#define ARG(l, i, var) pvgpu_sim_arg((l), (i), &(var), (uint32_t)sizeof(var))

/* Total threads along x: gridDim.x * blockDim.x. */
static inline uint64_t twin_span_x(const struct pvgpu_sim_launch *l)
{
	return (uint64_t)l->grid.x * l->block.x;
}

/* Does any thread run at all? */
static inline int twin_has_threads(const struct pvgpu_sim_launch *l)
{
	return pvgpu_sim_nblocks(l) > 0 && pvgpu_sim_nthreads(l) > 0;
}

/*
 * Host view of `count` elements of `elem` bytes at device address addr.
 * count 0 gives a harmless non-NULL pointer (nothing is touched); NULL
 * means the range is not device memory and the launch has faulted.
 */
static inline void *twin_map(const struct pvgpu_sim_launch *l, uint64_t addr,
			     uint64_t count, uint64_t elem)
{
	static char nothing;

	if (count == 0)
		return &nothing;
	return l->dev(l, addr, count * elem);
}

/*
 * Elements an elementwise 1-D kernel `if (i < n) ...` with
 * i = blockIdx.x * blockDim.x + threadIdx.x touches: min(n, span).
 */
static inline uint64_t twin_count_1d(const struct pvgpu_sim_launch *l, int32_t n)
{
	uint64_t span = twin_has_threads(l) ? twin_span_x(l) : 0;

	if (n <= 0)
		return 0;
	return (uint64_t)n < span ? (uint64_t)n : span;
}

/* A __device__ or __constant__ variable of exactly `size` bytes. */
static inline void *twin_global(const struct pvgpu_sim_launch *l,
				const char *name, uint64_t size)
{
	uint64_t have = 0;
	void *p = l->global(l, name, &have);

	if (!p || have != size) {
		l->fault(l, "twin: module variable missing or of another size");
		return NULL;
	}
	return p;
}

#endif
