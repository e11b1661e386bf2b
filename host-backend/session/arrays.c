/*
 * arrays.c - CUDA arrays, backend side (ops.spec array_*).
 *
 * An array is a handle of the session's context, with its shape kept here
 * so that every copy's box is checked against it, and its bytes charged to
 * the VM's quota like device memory.  Copies move boxes between an array
 * and the session's device memory; host memory reaches an array through
 * device memory the guest allocates for the copy.
 */
#include <cuda.h>
#include <stdlib.h>

#include "log.h"
#include "pvgpu_dispatch.h"
#include "pvgpu_generic.h"
#include "worker.h"

#define ARRAY_MAX_DIM	(1u << 17)	/* past every sm_90 array limit */

/* The flags an array may have (cuArray3DCreate); others NOT_SUPPORTED. */
#define ARRAY_FLAGS	(CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_SURFACE_LDST | \
			 CUDA_ARRAY3D_CUBEMAP | CUDA_ARRAY3D_TEXTURE_GATHER)

struct array_shape {
	uint64_t width, height, depth;	/* elements, rows, slices/layers (>= 1) */
	uint32_t elem;			/* bytes per element */
	uint32_t flags;			/* CUDA_ARRAY3D_* */
};

uint32_t pvgpu_format_bytes(uint32_t format)
{
	switch (format) {
	case CU_AD_FORMAT_UNSIGNED_INT8:
	case CU_AD_FORMAT_SIGNED_INT8:
		return 1;
	case CU_AD_FORMAT_UNSIGNED_INT16:
	case CU_AD_FORMAT_SIGNED_INT16:
	case CU_AD_FORMAT_HALF:
		return 2;
	case CU_AD_FORMAT_UNSIGNED_INT32:
	case CU_AD_FORMAT_SIGNED_INT32:
	case CU_AD_FORMAT_FLOAT:
		return 4;
	default:
		return 0;
	}
}

/*
 * What the flags ask of the shape: depth is the layers of a layered array
 * (1D when height is 0), the 6 faces of a cubemap (6 per layer when
 * layered too, square faces); gather takes a plain 2D array.
 */
static int array_shape_ok(const struct pvgpu_array_create_req *r)
{
	int layered = r->flags & CUDA_ARRAY3D_LAYERED;

	if (r->flags & CUDA_ARRAY3D_CUBEMAP)
		return r->width == r->height && r->depth &&
		       (layered ? r->depth % 6 == 0 : r->depth == 6);
	if (r->flags & CUDA_ARRAY3D_TEXTURE_GATHER)
		return !layered && r->height && !r->depth;
	if (layered)
		return r->depth != 0;
	return !r->depth || r->height;
}

int32_t pvgpu_handle_array_create(struct pvgpu_worker *w,
				  const struct pvgpu_array_create_req *req,
				  struct pvgpu_array_create_rep *rep)
{
	struct pvgpu_array_desc d = {
		.width = req->width, .height = req->height, .depth = req->depth,
		.format = req->format, .channels = req->channels, .flags = req->flags,
	};
	struct pvgpu_handle *ctx, *h;
	struct array_shape *shape;
	uint64_t array, bytes;
	uint32_t fb = pvgpu_format_bytes(req->format);
	int32_t st;

	if (!w->ex)
		return CUDA_ERROR_NOT_INITIALIZED;
	ctx = pvgpu_handle_get(&w->handles, w->cur_ctx, H_CTX);
	if (!ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!w->ex_ops->array_create)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (!fb) {
		wlog_debug(w, "array format %#x is not supported", req->format);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	if (req->flags & ~ARRAY_FLAGS) {
		wlog_debug(w, "array flags %#x are not supported", req->flags);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	if ((req->channels != 1 && req->channels != 2 && req->channels != 4) ||
	    !req->width || req->width > ARRAY_MAX_DIM ||
	    req->height > ARRAY_MAX_DIM || req->depth > ARRAY_MAX_DIM ||
	    !array_shape_ok(req))
		return CUDA_ERROR_INVALID_VALUE;
	st = pvgpu_room_for_handle(w);
	if (st)
		return st;
	shape = malloc(sizeof(*shape));
	if (!shape)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*shape = (struct array_shape){
		.width = req->width, .height = req->height ? req->height : 1,
		.depth = req->depth ? req->depth : 1, .elem = fb * req->channels,
		.flags = req->flags,
	};
	bytes = shape->width * shape->height * shape->depth * shape->elem;
	if (pvgpu_accounting_charge(w->acct, w->slot, bytes)) {
		free(shape);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	st = w->ex_ops->array_create(w->ex, &d, &array);
	if (st)
		goto err_uncharge;
	rep->array = pvgpu_handle_add(&w->handles, H_ARRAY, array, w->cur_ctx,
				      ctx->device);
	if (!rep->array) {
		pvgpu_generic_destroy(w, PVGPU_GENERIC_cuArrayDestroy, array);
		st = CUDA_ERROR_OUT_OF_MEMORY;
		goto err_uncharge;
	}
	h = pvgpu_handle_get(&w->handles, rep->array, H_ARRAY);
	h->data = shape;
	h->ndata = 1;
	h->charged = bytes;
	pvgpu_accounting_commit(w->slot, ctx->device, bytes);
	return CUDA_SUCCESS;

err_uncharge:
	pvgpu_accounting_uncharge(w->slot, bytes);
	free(shape);
	return st;
}

/* The session's array in the current context, or NULL. */
static struct pvgpu_handle *lookup_array(struct pvgpu_worker *w, uint64_t id)
{
	struct pvgpu_handle *h = pvgpu_handle_get(&w->handles, id, H_ARRAY);

	return h && h->ctx == w->cur_ctx ? h : NULL;
}

struct pvgpu_handle *pvgpu_lookup_array(struct pvgpu_worker *w, uint64_t id,
					uint32_t *flags)
{
	struct pvgpu_handle *h = lookup_array(w, id);

	if (h && flags)
		*flags = ((const struct array_shape *)h->data)->flags;
	return h;
}

int32_t pvgpu_handle_array_copy(struct pvgpu_worker *w,
				const struct pvgpu_array_copy_req *req)
{
	struct pvgpu_handle *h = lookup_array(w, req->array);
	const struct array_shape *a;
	struct pvgpu_array_copy c;
	uint64_t span, last;
	int32_t st;

	if (!h)
		return CUDA_ERROR_INVALID_HANDLE;
	a = h->data;
	/* The box inside the array, in whole elements. */
	if (!req->width || !req->height || !req->depth)
		return CUDA_SUCCESS;
	if (req->x % a->elem || req->width % a->elem ||
	    req->x > a->width * a->elem || req->width > a->width * a->elem - req->x ||
	    req->y > a->height || req->height > a->height - req->y ||
	    req->z > a->depth || req->depth > a->depth - req->z)
		return CUDA_ERROR_INVALID_VALUE;
	/* The device side: every row inside one of the session's allocations. */
	if (req->pitch < req->width || (req->depth > 1 && req->rows < req->height) ||
	    req->pitch > (1ull << 40) || req->rows > ARRAY_MAX_DIM)
		return CUDA_ERROR_INVALID_VALUE;
	if (__builtin_mul_overflow(req->depth - 1, req->rows, &last) ||
	    __builtin_mul_overflow(last, req->pitch, &last) ||
	    __builtin_add_overflow(last, (req->height - 1) * req->pitch, &last) ||
	    __builtin_add_overflow(last, req->width, &span) ||
	    !pvgpu_alloc_range(&w->allocs, req->dptr, span))
		return CUDA_ERROR_INVALID_VALUE;
	c = (struct pvgpu_array_copy){
		.array = h->exec_handle, .x = req->x, .y = req->y, .z = req->z,
		.width = req->width, .height = req->height, .depth = req->depth,
		.dptr = req->dptr, .pitch = req->pitch, .rows = req->rows,
		.to_array = req->to_array != 0,
	};
	st = pvgpu_lookup_stream(w, req->stream, &c.stream);
	if (st)
		return st;
	return w->ex_ops->copy(w->ex, &(struct pvgpu_exec_copy){
					.kind = PVGPU_COPY_ARRAY, .array = &c,
				});
}
