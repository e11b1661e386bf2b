/*
 * vmm.c - virtual memory management for a session (cuMemCreate,
 * cuMemAddressReserve, cuMemMap, cuMemSetAccess ... forwarded by the
 * generic driver call, annotations.py ids 204-214), checked here.
 *
 * Physical memory is a handle of the worker's table (H_MEM) charged to the
 * VM's quota from cuMemCreate to cuMemRelease.  A reserved address range
 * is a handle too (H_VARANGE: base in exec_handle, size in charged); a
 * mapping must lie in one, and becomes an allocation of the session
 * (module PVGPU_ALLOC_VMM) so that copies, memsets and stream memory
 * operations may name it, until it is unmapped.  The structures the guest
 * sends are checked before the driver reads them: devices the VM may use,
 * one access descriptor at a time, and never a guest pointer (Windows'
 * handle metadata) passed on.
 */
#include <stdatomic.h>
#include <string.h>

#include <cuda.h>

#include "accounting.h"
#include "log.h"
#include "pvgpu_generic.h"
#include "worker.h"

#define VMM_MAX_RANGES	4096

static int device_ok(struct pvgpu_worker *w, const CUmemLocation *l)
{
	return l->type == CU_MEM_LOCATION_TYPE_DEVICE && l->id >= 0 && l->id < 32 &&
	       pvgpu_vm_may_use(w, l->id);
}

/* The reservation holding all of [ptr, ptr + size), or NULL. */
static struct pvgpu_handle *reservation(struct pvgpu_worker *w, uint64_t ptr, uint64_t size)
{
	for (uint32_t i = 0; i < w->handles.n; i++) {
		struct pvgpu_handle *h = &w->handles.v[i];

		if (h->kind == H_VARANGE && ptr >= h->exec_handle && size &&
		    size <= h->charged && ptr - h->exec_handle <= h->charged - size)
			return h;
	}
	return NULL;
}

static uint32_t count_kind(struct pvgpu_worker *w, enum pvgpu_handle_kind kind)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < w->handles.n; i++)
		n += w->handles.v[i].kind == kind;
	return n;
}

/* Does any mapping of the session overlap [ptr, ptr + size)? */
static int mapped_within(struct pvgpu_worker *w, uint64_t ptr, uint64_t size, int whole)
{
	for (size_t i = 0; i < w->allocs.n; i++) {
		const struct pvgpu_alloc *a = &w->allocs.v[i];

		if (a->base < ptr + size && ptr < a->base + a->size) {
			if (!whole)
				return 1;
			/* Unmapping: every mapping touched must be inside. */
			if (a->module != PVGPU_ALLOC_VMM || a->base < ptr ||
			    a->base + a->size > ptr + size)
				return -1;
		}
	}
	return 0;
}

int32_t pvgpu_vmm_before(struct pvgpu_worker *w, const struct pvgpu_generic_fn *f,
			 uint64_t *a, const uint64_t *ids, struct pvgpu_vmm_call *c)
{
	CUmemAllocationProp *prop;
	struct pvgpu_handle *h;

	memset(c, 0, sizeof(*c));
	switch (f->id) {
	case PVGPU_GENERIC_cuMemGetAllocationGranularity:
	case PVGPU_GENERIC_cuMemCreate:
		prop = (CUmemAllocationProp *)(uintptr_t)a[f->id == PVGPU_GENERIC_cuMemCreate ? 2 : 1];
		if (!prop)
			return CUDA_SUCCESS;		/* the driver says INVALID_VALUE */
		if (!device_ok(w, &prop->location))
			return CUDA_ERROR_INVALID_DEVICE;
		prop->win32HandleMetaData = NULL;	/* a guest pointer */
		if (f->id == PVGPU_GENERIC_cuMemGetAllocationGranularity)
			return CUDA_SUCCESS;
		if (!a[1])
			return CUDA_ERROR_INVALID_VALUE;
		if (pvgpu_accounting_charge(w->acct, w->slot, a[1])) {
			wlog_debug(w, "cuMemCreate of %llu bytes: over the VM's quota",
				   (unsigned long long)a[1]);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		c->charge = a[1];
		c->device = prop->location.id;
		return CUDA_SUCCESS;
	case PVGPU_GENERIC_cuMemRelease:
		h = pvgpu_handle_get(&w->handles, ids[0], H_MEM);
		if (h && h->module != PVGPU_MEM_IMPORTED) {
			c->uncharge = h->charged;
			c->device = h->device;
		}
		return CUDA_SUCCESS;
	case PVGPU_GENERIC_cuMemAddressReserve:
		/* Its handle must fit before the driver reserves anything. */
		if (count_kind(w, H_VARANGE) >= VMM_MAX_RANGES ||
		    pvgpu_handles_room(&w->handles, 1))
			return CUDA_ERROR_OUT_OF_MEMORY;
		return a[1] ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	case PVGPU_GENERIC_cuMemAddressFree:
		h = reservation(w, a[0], a[1]);
		if (!h || h->exec_handle != a[0] || h->charged != a[1])
			return CUDA_ERROR_INVALID_VALUE;
		if (mapped_within(w, a[0], a[1], 0))
			return CUDA_ERROR_INVALID_VALUE;	/* unmap first */
		return CUDA_SUCCESS;
	case PVGPU_GENERIC_cuMemMap:
		h = pvgpu_handle_get(&w->handles, ids[3], H_MEM);
		if (!reservation(w, a[0], a[1]) || mapped_within(w, a[0], a[1], 0) || !h ||
		    a[2] > h->charged || a[1] > h->charged - a[2])
			return CUDA_ERROR_INVALID_VALUE;
		c->device = h->device;
		return CUDA_SUCCESS;
	case PVGPU_GENERIC_cuMemUnmap:
		if (!reservation(w, a[0], a[1]) || mapped_within(w, a[0], a[1], 1) < 0)
			return CUDA_ERROR_INVALID_VALUE;
		return CUDA_SUCCESS;
	case PVGPU_GENERIC_cuMemSetAccess: {
		const CUmemAccessDesc *d = (const CUmemAccessDesc *)(uintptr_t)a[2];

		/* One descriptor is what the guest sent: never let the driver
		 * read more. */
		if (a[3] != 1 || !d || !device_ok(w, &d->location) ||
		    !reservation(w, a[0], a[1]))
			return CUDA_ERROR_INVALID_VALUE;
		return CUDA_SUCCESS;
	}
	case PVGPU_GENERIC_cuMemGetAccess: {
		const CUmemLocation *l = (const CUmemLocation *)(uintptr_t)a[1];

		if (l && !device_ok(w, l))
			return CUDA_ERROR_INVALID_DEVICE;
		return CUDA_SUCCESS;
	}
	default:
		return CUDA_SUCCESS;
	}
}

int32_t pvgpu_vmm_after(struct pvgpu_worker *w, const struct pvgpu_generic_fn *f,
			const uint64_t *a, const uint64_t *in, const uint64_t *out,
			const struct pvgpu_vmm_call *c, int32_t st)
{
	struct pvgpu_handle *h;
	uint64_t id;

	(void)in;
	switch (f->id) {
	case PVGPU_GENERIC_cuMemCreate:
		if (st || !out || !(h = pvgpu_handle_get(&w->handles, out[0], H_MEM))) {
			if (c->charge)
				pvgpu_accounting_uncharge(w->slot, c->charge);
			return st;
		}
		pvgpu_accounting_commit(w->slot, c->device, c->charge);
		h->charged = c->charge;
		h->device = c->device;
		return st;
	case PVGPU_GENERIC_cuMemRelease:
		if (!st && c->uncharge)
			atomic_fetch_sub(&w->slot->mem_used[c->device], c->uncharge);
		return st;
	case PVGPU_GENERIC_cuMemAddressReserve:
		if (st || !a[0])
			return st;
		id = pvgpu_handle_add(&w->handles, H_VARANGE, a[0], w->cur_ctx, 0);
		if (!id)
			return CUDA_ERROR_OUT_OF_MEMORY;
		pvgpu_handle_get(&w->handles, id, H_VARANGE)->charged = in[1];
		return st;
	case PVGPU_GENERIC_cuMemAddressFree:
		if (!st && (h = reservation(w, a[0], a[1])))
			pvgpu_handle_release(&w->handles, h);
		return st;
	case PVGPU_GENERIC_cuMemMap:
		if (!st && pvgpu_alloc_add(&w->allocs, &(struct pvgpu_alloc){
			.base = a[0], .size = a[1], .ctx = w->cur_ctx,
			.module = PVGPU_ALLOC_VMM, .device = c->device }))
			return CUDA_ERROR_OUT_OF_MEMORY;
		return st;
	case PVGPU_GENERIC_cuMemUnmap:
		for (size_t i = w->allocs.n; !st && i-- > 0;) {
			struct pvgpu_alloc *m = &w->allocs.v[i];

			if (m->module == PVGPU_ALLOC_VMM && m->base >= a[0] &&
			    m->base + m->size <= a[0] + a[1])
				pvgpu_alloc_del(&w->allocs, m);
		}
		return st;
	default:
		return st;
	}
}
