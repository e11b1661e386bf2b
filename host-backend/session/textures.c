/*
 * textures.c - texture and surface objects, backend side (ops.spec
 * tex_* and surf_*).
 *
 * A kernel takes a CUtexObject / CUsurfObject as a plain parameter and the
 * GPU reads it, so the guest gets the driver's own value, not a handle of
 * the session's.  The worker records each object it made (H_TEX, H_SURF:
 * exec_handle is the value, in its context), so that a session destroys
 * only its own: a value it did not get here is refused.  They go with
 * their context (ctx_destroy releases the handles; the executor destroys
 * the objects).  Every field of the descriptor is checked here before the
 * executor sees it.
 */
#include <cuda.h>

#include "log.h"
#include "pvgpu_dispatch.h"
#include "pvgpu_generic.h"
#include "worker.h"

#define TEX_FLAGS	(CU_TRSF_READ_AS_INTEGER | CU_TRSF_NORMALIZED_COORDINATES | \
			 CU_TRSF_SRGB | CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION | \
			 CU_TRSF_SEAMLESS_CUBEMAP)
#define TEX_MAX_DIM	(1ull << 31)	/* past every sm_90 texture limit */
#define TEX_MAX_PITCH	(1ull << 40)

/* The current context's handle, or why there is none to work in. */
static int32_t current_ctx(struct pvgpu_worker *w, struct pvgpu_handle **ctx)
{
	if (!w->ex)
		return CUDA_ERROR_NOT_INITIALIZED;
	*ctx = pvgpu_handle_get(&w->handles, w->cur_ctx, H_CTX);
	return *ctx ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

/* Record obj as the session's; on failure the executor's object goes
 * (destroy: the generic call that destroys it). */
static int32_t record(struct pvgpu_worker *w, enum pvgpu_handle_kind kind,
		      uint64_t obj, int32_t device, uint32_t destroy,
		      uint64_t *out)
{
	if (!obj)
		return CUDA_ERROR_UNKNOWN;
	if (!pvgpu_handle_add(&w->handles, kind, obj, w->cur_ctx, device)) {
		pvgpu_generic_destroy(w, destroy, obj);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*out = obj;
	return CUDA_SUCCESS;
}

/* The resource: the session's array, or a range of its device memory. */
static int32_t tex_resource(struct pvgpu_worker *w,
			    const struct pvgpu_tex_create_req *r,
			    struct pvgpu_tex_desc *d)
{
	struct pvgpu_handle *a;
	uint64_t elem, row, span;

	if (r->res_flags)
		return CUDA_ERROR_INVALID_VALUE;
	switch (r->res_type) {
	case CU_RESOURCE_TYPE_ARRAY:
		if (r->format || r->channels || r->width || r->height ||
		    r->pitch || r->size)
			return CUDA_ERROR_INVALID_VALUE;
		a = pvgpu_lookup_array(w, r->handle, NULL);
		if (!a)
			return CUDA_ERROR_INVALID_HANDLE;
		d->array = a->exec_handle;
		return CUDA_SUCCESS;
	case CU_RESOURCE_TYPE_LINEAR:
	case CU_RESOURCE_TYPE_PITCH2D:
		break;
	case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
		wlog_debug(w, "texture on a mipmapped array is not supported");
		return CUDA_ERROR_NOT_SUPPORTED;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
	elem = (uint64_t)pvgpu_format_bytes(r->format) * r->channels;
	if (!elem || (r->channels != 1 && r->channels != 2 && r->channels != 4))
		return CUDA_ERROR_INVALID_VALUE;
	if (r->res_type == CU_RESOURCE_TYPE_LINEAR) {
		if (r->width || r->height || r->pitch || !r->size ||
		    r->size % elem)
			return CUDA_ERROR_INVALID_VALUE;
		span = r->size;
	} else {
		if (r->size || !r->width || !r->height ||
		    r->width > TEX_MAX_DIM || r->height > TEX_MAX_DIM ||
		    r->pitch > TEX_MAX_PITCH)
			return CUDA_ERROR_INVALID_VALUE;
		row = r->width * elem;
		if (r->pitch < row ||
		    __builtin_mul_overflow(r->height - 1, r->pitch, &span) ||
		    __builtin_add_overflow(span, row, &span))
			return CUDA_ERROR_INVALID_VALUE;
	}
	/*
	 * The texture starts in one of the session's allocations; it may run
	 * past its end, as NVIDIA's driver allows (NVIDIA's convolutionFFT2D
	 * sample does).  What lies there is this worker's own address space
	 * or nothing: the GPU gives each process (each session) its own, so a
	 * fetch there reads the session's own memory or faults its context.
	 */
	if (!span || !pvgpu_alloc_range(&w->allocs, r->handle, 1))
		return CUDA_ERROR_INVALID_VALUE;
	d->dptr = r->handle;
	d->format = r->format;
	d->channels = r->channels;
	d->width = r->width;
	d->height = r->height;
	d->pitch = r->pitch;
	d->size = r->size;
	return CUDA_SUCCESS;
}

/*
 * The texture descriptor: every enum in range, no unknown flag.  The
 * anisotropy and the mipmap levels are the driver's to clamp, as it does
 * for every program: no value of them is refused here.
 */
static int32_t tex_sampling(const struct pvgpu_tex_create_req *r,
			    struct pvgpu_tex_desc *d)
{
	const uint32_t addr[3] = { r->address0, r->address1, r->address2 };

	for (int i = 0; i < 3; i++) {
		if (addr[i] > CU_TR_ADDRESS_MODE_BORDER)
			return CUDA_ERROR_INVALID_VALUE;
		d->address[i] = addr[i];
	}
	if (r->filter > CU_TR_FILTER_MODE_LINEAR ||
	    r->mip_filter > CU_TR_FILTER_MODE_LINEAR ||
	    (r->flags & ~TEX_FLAGS))
		return CUDA_ERROR_INVALID_VALUE;
	d->filter = r->filter;
	d->flags = r->flags;
	d->max_aniso = r->max_aniso;
	d->mip_filter = r->mip_filter;
	d->mip_bias = r->mip_bias;
	d->mip_min = r->mip_min;
	d->mip_max = r->mip_max;
	d->border[0] = r->border0;
	d->border[1] = r->border1;
	d->border[2] = r->border2;
	d->border[3] = r->border3;
	return CUDA_SUCCESS;
}

int32_t pvgpu_handle_tex_create(struct pvgpu_worker *w,
				const struct pvgpu_tex_create_req *req,
				struct pvgpu_tex_create_rep *rep)
{
	struct pvgpu_tex_desc d = { .res_type = req->res_type };
	struct pvgpu_handle *ctx;
	uint64_t obj = 0;
	int32_t st;

	st = current_ctx(w, &ctx);
	if (st)
		return st;
	if (!w->ex_ops->tex_create || !w->ex_ops->driver_call)
		return CUDA_ERROR_NOT_SUPPORTED;
	st = pvgpu_room_for_handle(w);
	if (!st)
		st = tex_resource(w, req, &d);
	if (!st)
		st = tex_sampling(req, &d);
	if (!st)
		st = w->ex_ops->tex_create(w->ex, &d, false, &obj);
	if (st)
		return st;
	return record(w, H_TEX, obj, ctx->device, PVGPU_GENERIC_cuTexObjectDestroy,
		      &rep->obj);
}

int32_t pvgpu_handle_surf_create(struct pvgpu_worker *w,
				 const struct pvgpu_surf_create_req *req,
				 struct pvgpu_surf_create_rep *rep)
{
	struct pvgpu_handle *ctx, *a;
	uint32_t flags = 0;
	uint64_t obj = 0;
	int32_t st;

	st = current_ctx(w, &ctx);
	if (st)
		return st;
	if (!w->ex_ops->tex_create || !w->ex_ops->driver_call)
		return CUDA_ERROR_NOT_SUPPORTED;
	a = pvgpu_lookup_array(w, req->array, &flags);
	if (!a)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!(flags & CUDA_ARRAY3D_SURFACE_LDST))	/* as the driver */
		return CUDA_ERROR_INVALID_VALUE;
	st = pvgpu_room_for_handle(w);
	if (st)
		return st;
	st = w->ex_ops->tex_create(w->ex, &(struct pvgpu_tex_desc){
					.res_type = CU_RESOURCE_TYPE_ARRAY,
					.array = a->exec_handle,
				   }, true, &obj);
	if (st)
		return st;
	return record(w, H_SURF, obj, ctx->device, PVGPU_GENERIC_cuSurfObjectDestroy,
		      &rep->obj);
}
