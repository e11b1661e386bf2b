/*
 * cuda_tex.c - texture and surface objects (ops.spec tex_* and surf_*).
 *
 * The object a program gets is the host driver's own value: a kernel takes
 * it as a plain parameter and the GPU reads it.  The guest keeps the
 * descriptors each was made from (the queries are answered here) and knows
 * which values are its own; the worker checks the same again.  Mipmapped
 * arrays and resource views are not supported.
 */
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "pvgpu_generic.h"
#include "cuda_surface.h"
#include "debug.h"
#include "pvgpu_guest.h"

static CUresult obj_add(uint64_t value, int surf, struct cu_ctx *ctx,
			const CUDA_RESOURCE_DESC *res, const CUDA_TEXTURE_DESC *tex)
{
	struct cu_texobj *o;
	CUresult r = CUDA_SUCCESS;

	pthread_mutex_lock(&cu.table_lock);
	/* The host hands out live values only: a record of this one in the
	 * same context is of an object its context's reset took. */
	for (size_t i = 0; i < cu.ntexobjs; i++)
		if (cu.texobjs[i].value == value && cu.texobjs[i].surf == surf &&
		    cu.texobjs[i].ctx == ctx)
			cu.texobjs[i--] = cu.texobjs[--cu.ntexobjs];
	if (cu.ntexobjs == cu.texobjs_cap) {
		size_t cap = cu.texobjs_cap ? cu.texobjs_cap * 2 : 16;

		o = realloc(cu.texobjs, cap * sizeof(*o));
		if (!o) {
			r = CUDA_ERROR_OUT_OF_MEMORY;
			goto out;
		}
		cu.texobjs = o;
		cu.texobjs_cap = cap;
	}
	o = &cu.texobjs[cu.ntexobjs++];
	memset(o, 0, sizeof(*o));
	o->value = value;
	o->surf = surf;
	o->ctx = ctx;
	o->res = *res;
	if (tex)
		o->tex = *tex;
out:
	pthread_mutex_unlock(&cu.table_lock);
	return r;
}

/* Index of the object (the current context's first), or -1; table_lock held. */
static long obj_index(uint64_t value, int surf)
{
	struct cu_ctx *cur = cu_current();
	long any = -1;

	for (size_t i = 0; i < cu.ntexobjs; i++) {
		if (cu.texobjs[i].value != value || cu.texobjs[i].surf != surf)
			continue;
		if (cu.texobjs[i].ctx == cur)
			return (long)i;
		if (any < 0)
			any = (long)i;
	}
	return any;
}

/* A copy of the object's record; CUDA_ERROR_INVALID_HANDLE if not ours. */
static CUresult obj_get(uint64_t value, int surf, struct cu_texobj *out)
{
	long i;

	pthread_mutex_lock(&cu.table_lock);
	i = obj_index(value, surf);
	if (i >= 0)
		*out = cu.texobjs[i];
	pthread_mutex_unlock(&cu.table_lock);
	return i >= 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static void obj_remove(uint64_t value, int surf)
{
	long i;

	pthread_mutex_lock(&cu.table_lock);
	i = obj_index(value, surf);
	if (i >= 0)
		cu.texobjs[i] = cu.texobjs[--cu.ntexobjs];
	pthread_mutex_unlock(&cu.table_lock);
}

/* The array of a resource, in the context of op; NULL: not one. */
static struct cu_array *res_array(const CUDA_RESOURCE_DESC *res,
				  const struct cu_op *op)
{
	struct cu_array *a = cu_array_get(res->res.array.hArray);

	return a && a->ctx == op->ctx ? a : NULL;
}

/* What the resource descriptor says, into the request. */
static CUresult tex_resource(const CUDA_RESOURCE_DESC *res, const struct cu_op *op,
			     struct pvgpu_tex_create_req *q)
{
	struct cu_array *a;

	if (res->flags)
		return CUDA_ERROR_INVALID_VALUE;
	q->res_type = (uint32_t)res->resType;
	switch (res->resType) {
	case CU_RESOURCE_TYPE_ARRAY:
		a = res_array(res, op);
		if (!a)
			return CUDA_ERROR_INVALID_HANDLE;
		q->handle = a->remote;
		return CUDA_SUCCESS;
	case CU_RESOURCE_TYPE_LINEAR:
		q->handle = res->res.linear.devPtr;
		q->format = (uint32_t)res->res.linear.format;
		q->channels = res->res.linear.numChannels;
		q->size = res->res.linear.sizeInBytes;
		return CUDA_SUCCESS;
	case CU_RESOURCE_TYPE_PITCH2D:
		q->handle = res->res.pitch2D.devPtr;
		q->format = (uint32_t)res->res.pitch2D.format;
		q->channels = res->res.pitch2D.numChannels;
		q->width = res->res.pitch2D.width;
		q->height = res->res.pitch2D.height;
		q->pitch = res->res.pitch2D.pitchInBytes;
		return CUDA_SUCCESS;
	case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
		pvgpu_cuda_unsupported("cuTexObjectCreate on a mipmapped array");
		return CUDA_ERROR_NOT_SUPPORTED;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

static void tex_sampling(const CUDA_TEXTURE_DESC *t, struct pvgpu_tex_create_req *q)
{
	q->address0 = (uint32_t)t->addressMode[0];
	q->address1 = (uint32_t)t->addressMode[1];
	q->address2 = (uint32_t)t->addressMode[2];
	q->filter = (uint32_t)t->filterMode;
	q->flags = t->flags;
	q->max_aniso = t->maxAnisotropy;
	q->mip_filter = (uint32_t)t->mipmapFilterMode;
	q->mip_bias = t->mipmapLevelBias;
	q->mip_min = t->minMipmapLevelClamp;
	q->mip_max = t->maxMipmapLevelClamp;
	q->border0 = t->borderColor[0];
	q->border1 = t->borderColor[1];
	q->border2 = t->borderColor[2];
	q->border3 = t->borderColor[3];
}

static int reserved_zero(const int *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (v[i])
			return 0;
	return 1;
}

/* The backend's object destroyed by the generic call. */
static int32_t obj_destroy_wire(struct cu_op *op, uint64_t value, int surf)
{
	uint64_t a[1] = { value };

	return cu_generic_op(op, surf ? PVGPU_GENERIC_cuSurfObjectDestroy :
				 PVGPU_GENERIC_cuTexObjectDestroy, a, 1);
}

CUresult CUDAAPI cuTexObjectCreate(CUtexObject *out, const CUDA_RESOURCE_DESC *res,
				   const CUDA_TEXTURE_DESC *tex,
				   const CUDA_RESOURCE_VIEW_DESC *view)
{
	struct pvgpu_tex_create_req q = { 0 };
	struct pvgpu_tex_create_rep rep = { 0 };
	struct cu_op op;
	CUresult r;

	if (!out || !res || !tex)
		return CUDA_ERROR_INVALID_VALUE;
	if (!reserved_zero(tex->reserved, sizeof(tex->reserved) / sizeof(tex->reserved[0])))
		return CUDA_ERROR_INVALID_VALUE;
	if (view) {
		pvgpu_cuda_unsupported("cuTexObjectCreate with a resource view");
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	r = cu_op_current(&op);
	if (r)
		return r;
	r = tex_resource(res, &op, &q);
	if (!r) {
		tex_sampling(tex, &q);
		r = cu_status(pvgpu_call_tex_create(op.client, &q, &rep));
	}
	if (!r) {
		r = obj_add(rep.obj, 0, op.ctx, res, tex);
		if (r)
			(void)obj_destroy_wire(&op, rep.obj, 0);
	}
	cu_op_end(&op);
	if (!r)
		*out = (CUtexObject)rep.obj;
	return r;
}

/* Destroy one of ours in the context it was made in. */
static CUresult obj_destroy(uint64_t value, int surf)
{
	struct cu_texobj o;
	struct cu_op op;
	CUresult r;

	r = obj_get(value, surf, &o);
	if (r)
		return r;
	r = cu_op_begin(&op, o.ctx);
	if (r)
		return r;
	r = cu_status(obj_destroy_wire(&op, value, surf));
	cu_op_end(&op);
	if (!r)
		obj_remove(value, surf);
	return r;
}

CUresult CUDAAPI cuTexObjectDestroy(CUtexObject obj)
{
	return obj_destroy(obj, 0);
}

CUresult CUDAAPI cuTexObjectGetResourceDesc(CUDA_RESOURCE_DESC *res, CUtexObject obj)
{
	struct cu_texobj o;
	CUresult r;

	if (!res)
		return CUDA_ERROR_INVALID_VALUE;
	r = obj_get(obj, 0, &o);
	if (!r)
		*res = o.res;
	return r;
}

CUresult CUDAAPI cuTexObjectGetTextureDesc(CUDA_TEXTURE_DESC *tex, CUtexObject obj)
{
	struct cu_texobj o;
	CUresult r;

	if (!tex)
		return CUDA_ERROR_INVALID_VALUE;
	r = obj_get(obj, 0, &o);
	if (!r)
		*tex = o.tex;
	return r;
}

/* No object here has a resource view: as the driver says of those. */
CUresult CUDAAPI cuTexObjectGetResourceViewDesc(CUDA_RESOURCE_VIEW_DESC *view,
						CUtexObject obj)
{
	struct cu_texobj o;
	CUresult r;

	if (!view)
		return CUDA_ERROR_INVALID_VALUE;
	r = obj_get(obj, 0, &o);
	return r ? r : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuSurfObjectCreate(CUsurfObject *out, const CUDA_RESOURCE_DESC *res)
{
	struct pvgpu_surf_create_req q = { 0 };
	struct pvgpu_surf_create_rep rep = { 0 };
	struct cu_array *a;
	struct cu_op op;
	CUresult r;

	if (!out || !res)
		return CUDA_ERROR_INVALID_VALUE;
	if (res->flags || res->resType != CU_RESOURCE_TYPE_ARRAY)
		return CUDA_ERROR_INVALID_VALUE;
	r = cu_op_current(&op);
	if (r)
		return r;
	a = res_array(res, &op);
	if (!a) {
		r = CUDA_ERROR_INVALID_HANDLE;
	} else {
		q.array = a->remote;
		r = cu_status(pvgpu_call_surf_create(op.client, &q, &rep));
	}
	if (!r) {
		r = obj_add(rep.obj, 1, op.ctx, res, NULL);
		if (r)
			(void)obj_destroy_wire(&op, rep.obj, 1);
	}
	cu_op_end(&op);
	if (!r)
		*out = (CUsurfObject)rep.obj;
	return r;
}

CUresult CUDAAPI cuSurfObjectDestroy(CUsurfObject obj)
{
	return obj_destroy(obj, 1);
}

CUresult CUDAAPI cuSurfObjectGetResourceDesc(CUDA_RESOURCE_DESC *res, CUsurfObject obj)
{
	struct cu_texobj o;
	CUresult r;

	if (!res)
		return CUDA_ERROR_INVALID_VALUE;
	r = obj_get(obj, 1, &o);
	if (!r)
		*res = o.res;
	return r;
}
