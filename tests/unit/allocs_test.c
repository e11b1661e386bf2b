/*
 * allocs_test.c - the worker's table of a session's allocations
 * (host-backend/session/handles.c): a range check stays inside one
 * allocation, except across cuMemMap mappings that follow each other
 * without a gap (XLA maps its pool piece by piece), as NVIDIA's driver
 * allows; two allocations side by side stay two.
 */
#include <stdint.h>

#include "handles.h"

#include "unit_check.h"

static void add(struct pvgpu_allocs *t, uint64_t base, uint64_t size, uint64_t module)
{
	CHECK(pvgpu_alloc_add(t, &(struct pvgpu_alloc){ .base = base, .size = size,
						      .module = module }) == 0);
}

int main(void)
{
	struct pvgpu_allocs t = { 0 };

	add(&t, 0x10000, 0x1000, 0);			/* two cuMemAlloc, side by side */
	add(&t, 0x11000, 0x1000, 0);
	add(&t, 0x100000, 0x10000, PVGPU_ALLOC_VMM);	/* three mappings, one gap */
	add(&t, 0x110000, 0x10000, PVGPU_ALLOC_VMM);
	add(&t, 0x130000, 0x10000, PVGPU_ALLOC_VMM);
	add(&t, 0x140000, 0x1000, 0);			/* an allocation after a mapping */

	CHECK(pvgpu_alloc_range(&t, 0x10000, 0x1000) == &t.v[0]);
	CHECK(pvgpu_alloc_range(&t, 0x10800, 0x800) == &t.v[0]);
	CHECK(!pvgpu_alloc_range(&t, 0x10800, 0x1000));	/* across two allocations */
	CHECK(!pvgpu_alloc_range(&t, 0x10000, 0));
	CHECK(pvgpu_alloc_range(&t, 0x108000, 0x10000) == &t.v[2]);	/* the seam */
	CHECK(pvgpu_alloc_range(&t, 0x100000, 0x20000) == &t.v[2]);
	CHECK(!pvgpu_alloc_range(&t, 0x108000, 0x20000));	/* into the gap */
	CHECK(!pvgpu_alloc_range(&t, 0x13f000, 0x2000));	/* into an allocation */
	CHECK(!pvgpu_alloc_range(&t, 0x100000, UINT64_MAX));
	CHECK(!pvgpu_alloc_range(&t, 0x120000, 1));		/* in the gap */
	pvgpu_allocs_free(&t);
	return UNIT_REPORT();
}
