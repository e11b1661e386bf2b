/*
 * modules.c - the backend's half of modules and kernels (DESIGN §3).
 *
 * A guest uploads each fatbinary once per process (module_load), or names
 * one the backend already holds (module_lookup); functions are resolved by
 * name together with their parameter layout, and launches arrive batched.
 * Globals of a module become ranges the session owns, so copies to and from
 * symbols pass the same range checks as any other device memory.
 */
#include <cuda.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "modcache.h"
#include "pvgpu_dispatch.h"
#include "worker.h"

#define MAX_IMAGE	(512ull << 20)
#define MAX_PARAMS	1024

/* The device's compute capability as a fatbinary names it (90), 0 unknown. */
static uint32_t device_arch(struct pvgpu_worker *w, int32_t device)
{
	int32_t major = 0, minor = 0;

	if (!w->ex_ops->device_attribute ||
	    w->ex_ops->device_attribute(w->ex, device,
					CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, &major) ||
	    w->ex_ops->device_attribute(w->ex, device,
					CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, &minor) ||
	    major <= 0 || minor < 0 || minor > 9)
		return 0;
	return (uint32_t)(major * 10 + minor);
}

/*
 * Load an image into the current context.  The module's device memory is
 * charged to the VM's quota at its image size: the driver does not say
 * what a module takes, and the image bounds its code and initialised data
 * (policy.h says what this misses).
 */
static int32_t load_image(struct pvgpu_worker *w, const uint8_t *image,
			  size_t len, struct pvgpu_link *jit, uint64_t *id)
{
	struct pvgpu_handle *ctx, *h;
	uint64_t module;
	int32_t st;

	if (!w->ex)
		return CUDA_ERROR_NOT_INITIALIZED;
	ctx = pvgpu_handle_get(&w->handles, w->cur_ctx, H_CTX);
	if (!ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	st = pvgpu_room_for_handle(w);
	if (st)
		return st;
	if (pvgpu_accounting_charge(w->acct, w->slot, len)) {
		wlog_debug(w, "module of %zu bytes: over the quota of vm %s", len,
			   w->acct->vms[atomic_load(&w->slot->vm)].name);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	st = jit ? w->ex_ops->link(w->ex, jit, &module) :
		   w->ex_ops->module_load(w->ex, image, len, &module);
	if (st)
		goto err_uncharge;
	*id = pvgpu_handle_add(&w->handles, H_MODULE, module, w->cur_ctx,
			       ctx->device);
	if (!*id) {
		w->ex_ops->module_unload(w->ex, module);
		st = CUDA_ERROR_OUT_OF_MEMORY;
		goto err_uncharge;
	}
	h = pvgpu_handle_get(&w->handles, *id, H_MODULE);
	h->charged = len;
	if (!pvgpu_image_may_print(image, len, device_arch(w, ctx->device)))
		h->flags |= PVGPU_H_QUIET;
	pvgpu_accounting_commit(w->slot, ctx->device, len);
	return CUDA_SUCCESS;

err_uncharge:
	pvgpu_accounting_uncharge(w->slot, len);
	return st;
}

void pvgpu_module_uncharge(struct pvgpu_worker *w, struct pvgpu_handle *h)
{
	atomic_fetch_sub(&w->slot->mem_used[h->device], h->charged);
	h->charged = 0;
}

/*
 * The session's VM's part of the module cache (modcache.h), its bound as
 * the policy says now; -1 without a cache.
 */
static int cache_of(struct pvgpu_worker *w, struct pvgpu_modcache *c)
{
	int32_t vm = atomic_load(&w->slot->vm);

	if (!w->cfg->module_cache)
		return -1;
	c->root = w->cfg->module_cache;
	c->max = w->cfg->module_cache_max;
	c->vm_max = vm >= 0 ? atomic_load(&w->acct->vms[vm].modcache_max) :
			      PVGPU_MODCACHE_PER_VM;
	pvgpu_modcache_vm_dir(vm >= 0 ? w->acct->vms[vm].name : NULL, c->vm,
			      sizeof(c->vm));
	return 0;
}

static void cache_put(struct pvgpu_worker *w, const uint8_t *hash,
		      const uint8_t *image, size_t len)
{
	struct pvgpu_modcache c;

	if (cache_of(w, &c))
		return;
	switch (pvgpu_modcache_put(&c, hash, image, len)) {
	case 0:
		break;
	case 1:
		wlog_debug(w, "module of %zu bytes not kept: over module_cache (%llu) or --module-cache-max (%llu)",
			   len, (unsigned long long)c.vm_max,
			   (unsigned long long)c.max);
		break;
	default:
		wlog_warn(w, "cannot store a module in %s/%s: %s", c.root,
			  c.vm, strerror(errno));
	}
}

int32_t pvgpu_handle_module_load(struct pvgpu_worker *w,
				 const struct pvgpu_module_load_req *req,
				 struct pvgpu_module_load_rep *rep)
{
	uint8_t *image;
	int32_t st;

	if (req->size == 0 || req->size > MAX_IMAGE) {
		pvgpu_copy_refuse_htod(w, req->size);
		return CUDA_ERROR_INVALID_VALUE;
	}
	image = malloc(req->size + 1);
	if (!image) {
		pvgpu_copy_refuse_htod(w, req->size);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (pvgpu_worker_recv_data(w, image, req->size)) {
		free(image);
		return CUDA_ERROR_INVALID_VALUE;	/* session is over anyway */
	}
	image[req->size] = '\0';
	if (pvgpu_image_check(image, req->size)) {
		wlog_info(w, "module_load: image of %llu bytes is not a whole fatbinary, cubin or PTX",
			  (unsigned long long)req->size);
		free(image);
		return CUDA_ERROR_INVALID_IMAGE;
	}
	st = load_image(w, image, req->size, NULL, &rep->module);
	if (st == CUDA_SUCCESS && pvgpu_sha256(image, req->size, rep->hash) == 0) {
		rep->hash_len = PVGPU_HASH_SIZE;
		cache_put(w, rep->hash, image, req->size);
	}
	free(image);
	return st;
}

/*
 * PTX with JIT options (cuModuleLoadDataEx): loaded by the driver's own
 * cuModuleLoadDataEx, never through the module cache, so that its logs
 * are the ones this compilation gave.
 */
int32_t pvgpu_handle_module_load_jit(struct pvgpu_worker *w,
				     const struct pvgpu_module_load_jit_req *req,
				     struct pvgpu_module_load_jit_rep *rep)
{
	struct pvgpu_link *l;
	uint8_t *image;
	int32_t st;

	if (req->size < 2 || req->size > MAX_IMAGE ||
	    pvgpu_link_options(NULL, req->opt_key, req->opt_key_count, req->opt_value,
			       req->opt_value_count)) {
		pvgpu_copy_refuse_upto(w, req->size, MAX_IMAGE);
		return CUDA_ERROR_INVALID_VALUE;
	}
	image = malloc(req->size);
	l = calloc(1, sizeof(*l));
	if (!image || !l) {
		free(image);
		free(l);
		pvgpu_copy_refuse_htod(w, req->size);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (pvgpu_worker_recv_data(w, image, req->size)) {
		st = CUDA_ERROR_INVALID_VALUE;	/* session is over anyway */
		goto out;
	}
	/* PTX text, NUL-terminated where the guest said it ends. */
	if (image[req->size - 1] || strlen((char *)image) != req->size - 1 ||
	    pvgpu_image_check(image, req->size)) {
		st = CUDA_ERROR_INVALID_IMAGE;
		goto out;
	}
	if (!w->ex_ops->link) {
		st = CUDA_ERROR_NOT_SUPPORTED;
		goto out;
	}
	pvgpu_link_options(l, req->opt_key, req->opt_key_count, req->opt_value,
			   req->opt_value_count);
	l->ninputs = 1;
	l->input_type = &(uint32_t){ CU_JIT_INPUT_PTX };
	l->input_size = &req->size;
	l->data = image;
	st = load_image(w, image, req->size, l, &rep->module);
	PVGPU_LINK_RESULTS(rep, l);
out:
	free(l);
	free(image);
	return st;
}

int32_t pvgpu_handle_module_lookup(struct pvgpu_worker *w,
				   const struct pvgpu_module_lookup_req *req,
				   struct pvgpu_module_lookup_rep *rep)
{
	struct pvgpu_modcache c;
	uint8_t *image;
	size_t len;
	int32_t st;

	if (req->hash_len != PVGPU_HASH_SIZE || cache_of(w, &c))
		return CUDA_ERROR_NOT_FOUND;
	image = pvgpu_modcache_get(&c, req->hash, &len);
	if (!image)
		return CUDA_ERROR_NOT_FOUND;
	st = pvgpu_image_check(image, len) ? CUDA_ERROR_INVALID_IMAGE :
		load_image(w, image, len, NULL, &rep->module);
	free(image);
	return st;
}

/* Forget a module's functions and globals (the executor freed them). */
static void forget_module(struct pvgpu_worker *w, uint64_t id)
{
	for (uint32_t i = 0; i < w->handles.n; i++) {
		struct pvgpu_handle *h = &w->handles.v[i];

		if (h->kind == H_FUNC && h->module == id)
			pvgpu_handle_release(&w->handles, h);
	}
	for (size_t i = w->allocs.n; i-- > 0;)
		if (w->allocs.v[i].module == id)
			pvgpu_alloc_del(&w->allocs, &w->allocs.v[i]);
	pvgpu_handle_del(&w->handles, id);
}

static struct pvgpu_handle *lookup_module(struct pvgpu_worker *w, uint64_t id)
{
	struct pvgpu_handle *h = pvgpu_handle_get(&w->handles, id, H_MODULE);

	return h && h->ctx == w->cur_ctx ? h : NULL;
}

int32_t pvgpu_handle_module_unload(struct pvgpu_worker *w,
				   const struct pvgpu_module_unload_req *req)
{
	struct pvgpu_handle *h = lookup_module(w, req->module);
	int32_t st;

	if (!h)
		return CUDA_ERROR_INVALID_HANDLE;
	st = w->ex_ops->module_unload(w->ex, h->exec_handle);
	pvgpu_module_uncharge(w, h);
	forget_module(w, req->module);
	return st;
}

int32_t pvgpu_handle_module_get_function(struct pvgpu_worker *w,
					 const struct pvgpu_module_get_function_req *req,
					 struct pvgpu_module_get_function_rep *rep)
{
	struct pvgpu_handle *mod = lookup_module(w, req->module), *fh;
	struct pvgpu_param_info *layout;
	uint64_t func, id;
	uint32_t count = 0, quiet;
	int32_t st;

	if (!mod)
		return CUDA_ERROR_INVALID_HANDLE;
	quiet = mod->flags & PVGPU_H_QUIET;	/* mod may move: handle_add */
	st = w->ex_ops->module_symbol(w->ex, mod->exec_handle,
				      PVGPU_SYM_FUNCTION, req->name, &func,
				      NULL);
	if (st)
		return st;
	layout = calloc(MAX_PARAMS, sizeof(*layout));
	if (!layout)
		return CUDA_ERROR_OUT_OF_MEMORY;
	st = w->ex_ops->function_params(w->ex, func, layout, MAX_PARAMS, &count);
	if (st == CUDA_SUCCESS && count > MAX_PARAMS)
		st = CUDA_ERROR_NOT_SUPPORTED;	/* more than the wire carries */
	if (st) {
		free(layout);
		return st;
	}
	id = pvgpu_handle_add(&w->handles, H_FUNC, func, w->cur_ctx, 0);
	if (!id) {
		free(layout);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	/* Look it up again: pvgpu_handle_add may have moved the table. */
	fh = pvgpu_handle_get(&w->handles, id, H_FUNC);
	fh->module = req->module;
	fh->flags = quiet;
	fh->data = layout;
	fh->ndata = count;
	for (uint32_t i = 0; i < count; i++) {
		rep->param_offset[i] = layout[i].offset;
		rep->param_size[i] = layout[i].size;
	}
	rep->param_offset_count = rep->param_size_count = count;
	rep->func = id;
	return CUDA_SUCCESS;
}

int32_t pvgpu_handle_module_functions(struct pvgpu_worker *w,
				      const struct pvgpu_module_functions_req *req,
				      struct pvgpu_module_functions_rep *rep)
{
	struct pvgpu_handle *mod = lookup_module(w, req->module);
	size_t len = 0;
	int32_t st;

	if (!mod)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!w->ex_ops->module_function_names)
		return CUDA_ERROR_NOT_SUPPORTED;
	st = w->ex_ops->module_function_names(w->ex, mod->exec_handle, (char *)rep->names,
					      sizeof(rep->names), &len, &rep->count);
	if (st)
		return st;
	if (len > sizeof(rep->names))
		return CUDA_ERROR_UNKNOWN;	/* an executor that overran */
	rep->names_len = (uint32_t)len;
	return CUDA_SUCCESS;
}

int32_t pvgpu_handle_module_get_global(struct pvgpu_worker *w,
				       const struct pvgpu_module_get_global_req *req,
				       struct pvgpu_module_get_global_rep *rep)
{
	struct pvgpu_handle *mod = lookup_module(w, req->module);
	struct pvgpu_alloc a = { 0 };
	int32_t st;

	if (!mod)
		return CUDA_ERROR_INVALID_HANDLE;
	st = w->ex_ops->module_symbol(w->ex, mod->exec_handle, PVGPU_SYM_GLOBAL,
				      req->name, &rep->dptr, &rep->size);
	if (st)
		return st;
	/* Record the global once so copies to the symbol pass range checks. */
	if (rep->size && !pvgpu_alloc_find(&w->allocs, rep->dptr)) {
		a.base = rep->dptr;
		a.size = rep->size;
		a.ctx = w->cur_ctx;
		a.module = req->module;
		a.device = pvgpu_handle_get(&w->handles, w->cur_ctx, H_CTX)->device;
		if (pvgpu_alloc_add(&w->allocs, &a))
			return CUDA_ERROR_OUT_OF_MEMORY;
	}
	return CUDA_SUCCESS;
}

static struct pvgpu_handle *lookup_function(struct pvgpu_worker *w, uint64_t id)
{
	struct pvgpu_handle *h = pvgpu_handle_get(&w->handles, id, H_FUNC);

	return h && h->ctx == w->cur_ctx ? h : NULL;
}

/*
 * The launch attributes the backend carries to the driver, and how many of
 * the wire's three values each uses (ops.spec launch_kernel_ex); 0: not
 * one of them.  Unused values must be zero.
 */
static int attr_values(uint32_t id)
{
	switch (id) {
	case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
	case CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION:
		return 3;
	case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
		return 2;
	case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
	case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
	case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION:
	case CU_LAUNCH_ATTRIBUTE_PRIORITY:
	case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
	case CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
		return 1;
	default:
		return 0;
	}
}

/* The guest's attribute words, checked, into attrs (room for
 * PVGPU_MAX_LAUNCH_ATTRS). */
static int32_t launch_attrs(struct pvgpu_worker *w, const uint32_t *words,
			    uint32_t nwords, struct pvgpu_launch_attr *attrs,
			    uint32_t *nattrs)
{
	if (nwords % 4 || nwords / 4 > PVGPU_MAX_LAUNCH_ATTRS)
		return CUDA_ERROR_INVALID_VALUE;
	for (uint32_t i = 0; i < nwords / 4; i++) {
		const uint32_t *a = words + 4 * i;
		int n = attr_values(a[0]);

		if (!n) {
			wlog_debug(w, "launch attribute %u is not supported",
				   a[0]);
			return CUDA_ERROR_NOT_SUPPORTED;
		}
		for (int v = n; v < 3; v++)
			if (a[1 + v])
				return CUDA_ERROR_INVALID_VALUE;
		attrs[i] = (struct pvgpu_launch_attr){ a[0], { a[1], a[2], a[3] } };
	}
	*nattrs = nwords / 4;
	return CUDA_SUCCESS;
}

int32_t pvgpu_kernel_prepare(struct pvgpu_worker *w, struct pvgpu_launch *l,
			     uint64_t func)
{
	struct pvgpu_handle *f = lookup_function(w, func);
	const struct pvgpu_param_info *layout;
	uint64_t need = 0;

	if (!f)
		return CUDA_ERROR_INVALID_HANDLE;
	/* The buffer must cover every parameter the kernel will read. */
	layout = f->data;
	for (uint32_t i = 0; i < f->ndata; i++) {
		uint64_t end = (uint64_t)layout[i].offset + layout[i].size;

		if (end > need)
			need = end;
	}
	if (l->params_size < need)
		return CUDA_ERROR_INVALID_VALUE;
	l->func = f->exec_handle;
	l->layout = layout;
	l->nparams = f->ndata;
	return CUDA_SUCCESS;
}

int32_t pvgpu_kernel_launch(struct pvgpu_worker *w, struct pvgpu_launch *l,
			    uint64_t func, uint64_t guest_stream, int run)
{
	uint32_t n = run ? PVGPU_LAUNCH_RUN : 1;
	int32_t st = pvgpu_kernel_prepare(w, l, func);
	int quiet;

	if (st)
		return st;
	/* Found: pvgpu_kernel_prepare looked it up. */
	quiet = lookup_function(w, func)->flags & PVGPU_H_QUIET;
	st = pvgpu_lookup_stream(w, guest_stream, &l->stream);
	if (st)
		return st;
	if (run && !w->ex_ops->takes_runs)
		return PVGPU_EXEC_DECLINED;
	l->run = run;
	/* Its VM's turn on this GPU first (gpusched.h). */
	pvgpu_sched_admit(&w->sched, pvgpu_cur_device(w), n);
	st = w->ex_ops->launch(w->ex, l);
	if (!quiet && st != PVGPU_EXEC_DECLINED)
		pvgpu_output_arm(w);	/* it may print (output.c) */
	pvgpu_sched_launched(&w->sched, l->stream, st, n);
	return st;
}

int32_t pvgpu_handle_launch_kernel(struct pvgpu_worker *w,
				   const struct pvgpu_launch_kernel_req *req)
{
	struct pvgpu_launch l = { PVGPU_LAUNCH_SHAPE(req) };

	if (pvgpu_run_take(w, req))
		return CUDA_SUCCESS;	/* launched with its run (runs.c) */
	return pvgpu_kernel_launch(w, &l, req->func, req->stream, 0);
}

int32_t pvgpu_handle_launch_kernel_ex(struct pvgpu_worker *w,
				      const struct pvgpu_launch_kernel_ex_req *req)
{
	struct pvgpu_launch_attr attrs[PVGPU_MAX_LAUNCH_ATTRS];
	struct pvgpu_launch l = { PVGPU_LAUNCH_SHAPE(req), .attrs = attrs };
	int32_t st = launch_attrs(w, req->attrs, req->attrs_count, attrs,
				  &l.nattrs);

	return st ? st : pvgpu_kernel_launch(w, &l, req->func, req->stream, 0);
}

int32_t pvgpu_handle_func_max_clusters(struct pvgpu_worker *w,
				      const struct pvgpu_func_max_clusters_req *req,
				      struct pvgpu_func_max_clusters_rep *rep)
{
	struct pvgpu_handle *f = lookup_function(w, req->func);
	struct pvgpu_launch shape = {
		.grid = { req->grid_x, req->grid_y, req->grid_z },
		.block = { req->block_x, req->block_y, req->block_z },
		.shared_bytes = req->shared_bytes,
	};
	const uint32_t cluster[3] = { req->cluster_x, req->cluster_y,
				      req->cluster_z };

	if (!f)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!w->ex_ops->max_clusters)
		return CUDA_ERROR_NOT_SUPPORTED;
	shape.func = f->exec_handle;
	return w->ex_ops->max_clusters(w->ex, f->exec_handle, &shape, cluster,
				       &rep->clusters);
}
