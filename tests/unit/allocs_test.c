/*
 * allocs_test.c - the worker's table of a session's allocations
 * (host-backend/session/handles.c): a range check stays inside one
 * allocation, except across cuMemMap mappings that follow each other
 * without a gap (XLA maps its pool piece by piece), as NVIDIA's driver
 * allows; two allocations side by side stay two.  And the handle table:
 * a session holds at most its bound of live handles, a freed one makes
 * room again, and a stale id never names the handle that reused its place.
 */
#include <stdint.h>

#include "handles.h"

#include "unit_check.h"

static void add(struct pvgpu_allocs *t, uint64_t base, uint64_t size, uint64_t module)
{
	CHECK(pvgpu_alloc_add(t, &(struct pvgpu_alloc){ .base = base, .size = size,
						      .module = module }) == 0);
}

static void handle_bound(void)
{
	_Atomic uint32_t max = 3;
	struct pvgpu_handles t = { .max = &max };
	uint64_t a, b, c, d;

	a = pvgpu_handle_add(&t, H_EVENT, 1, 0, 0);
	b = pvgpu_handle_add(&t, H_STREAM, 2, 0, 0);
	c = pvgpu_handle_add(&t, H_EVENT, 3, 0, 0);
	CHECK(a && b && c && t.live == 3 && !t.refused);
	CHECK(pvgpu_handle_add(&t, H_EVENT, 4, 0, 0) == 0 && t.refused == 1);
	CHECK(pvgpu_handles_room(&t, 1) == -1 && t.refused == 2);
	pvgpu_handle_del(&t, b);
	CHECK(t.live == 2 && pvgpu_handles_room(&t, 1) == 0);
	CHECK(pvgpu_handles_room(&t, 2) == -1);
	d = pvgpu_handle_add(&t, H_STREAM, 5, 0, 0);
	CHECK(d && d != b && !pvgpu_handle_get(&t, b, H_STREAM));
	CHECK(pvgpu_handle_get(&t, d, H_STREAM)->exec_handle == 5);
	/* A reload that lowers the bound holds for what is made next. */
	max = 2;
	pvgpu_handle_del(&t, a);
	CHECK(pvgpu_handle_add(&t, H_EVENT, 6, 0, 0) == 0);
	pvgpu_handle_del(&t, c);
	CHECK(pvgpu_handle_add(&t, H_EVENT, 6, 0, 0) != 0 && t.live == 2);
	pvgpu_handles_free(&t);
}

int main(void)
{
	struct pvgpu_allocs t = { 0 };

	handle_bound();

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
