/*
 * cuda_module.c - modules, libraries (lazy loading: an image is uploaded
 * into a context the first time a kernel of it is needed there), kernels
 * and functions with the parameter layout the backend reports, and
 * launches (kernelParams or the packed `extra` buffer), batched as the
 * protocol's async launch_kernel.
 */
#include <elf.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
#include "pvgpu_generic.h"
#include "cuda_surface.h"
#include "debug.h"
#include "pvgpu_guest.h"

#define FATBINC_MAGIC	0x466243b1u
#define FATBIN_MAGIC	0xba55ed50u
#define MAX_IMAGE	(1ull << 31)
#define MAX_PARAMS	CU_MAX_PARAMS

static pthread_mutex_t mod_lock = PTHREAD_MUTEX_INITIALIZER;
/*
 * Every library ever loaded, under mod_lock.  A library is never freed, so
 * that a stale handle still finds its magic; and NVIDIA's runtime, as
 * with its own driver, drops its last pointer to the libraries it loaded
 * at exit without unloading them: ours stay held here, as the driver's
 * stay held by the driver, not lost.
 */
static struct cu_library *libraries;

struct fatbinc_wrapper {
	uint32_t magic;
	uint32_t version;
	const void *data;
	void *unused;
};

/* An image's start and length: fatbin (wrapped or not), ELF cubin or PTX. */
int cu_image_span(const void *img, const void **start, size_t *size)
{
	const uint8_t *p = img;
	uint32_t magic;

	if (!img)
		return -1;
	memcpy(&magic, p, 4);
	if (magic == FATBINC_MAGIC) {
		const struct fatbinc_wrapper *w = img;

		if (!w->data)
			return -1;
		p = w->data;
		memcpy(&magic, p, 4);
	}
	if (magic == FATBIN_MAGIC) {
		uint16_t hsize;
		uint64_t fsize;

		memcpy(&hsize, p + 6, 2);
		memcpy(&fsize, p + 8, 8);
		if (hsize < 16 || fsize > MAX_IMAGE)
			return -1;
		*start = p;
		*size = hsize + (size_t)fsize;
		return 0;
	}
	if (!memcmp(p, ELFMAG, SELFMAG) && p[EI_CLASS] == ELFCLASS64) {
		Elf64_Ehdr eh;
		uint64_t end;

		memcpy(&eh, p, sizeof(eh));
		end = eh.e_shoff + (uint64_t)eh.e_shnum * eh.e_shentsize;
		if (eh.e_phoff + (uint64_t)eh.e_phnum * eh.e_phentsize > end)
			end = eh.e_phoff + (uint64_t)eh.e_phnum * eh.e_phentsize;
		for (unsigned i = 0; i < eh.e_shnum; i++) {
			Elf64_Shdr sh;

			memcpy(&sh, p + eh.e_shoff + (uint64_t)i * eh.e_shentsize, sizeof(sh));
			if (sh.sh_type != SHT_NOBITS && sh.sh_offset + sh.sh_size > end)
				end = sh.sh_offset + sh.sh_size;
		}
		if (end > MAX_IMAGE)
			return -1;
		*start = p;
		*size = end;
		return 0;
	}
	*start = p;
	*size = strnlen((const char *)p, MAX_IMAGE) + 1;	/* PTX */
	return 0;
}

static struct cu_module *module_new(struct cu_ctx *ctx, uint64_t remote)
{
	struct cu_module *m = calloc(1, sizeof(*m));

	if (!m)
		return NULL;
	m->magic = CU_MAGIC_MOD;
	m->alive = 1;
	m->ctx = ctx;
	m->remote = remote;
	return m;
}

/* Upload an image into ctx. */
static CUresult module_load(struct cu_ctx *ctx, const void *image, struct cu_module **out)
{
	struct pvgpu_module_load_req req;
	struct pvgpu_module_load_rep rep = { 0 };
	const void *start;
	struct cu_op op;
	CUresult r;

	if (cu_image_span(image, &start, &req.size))
		return CUDA_ERROR_INVALID_IMAGE;
	r = cu_op_begin(&op, ctx);
	if (r)
		return r;
	r = cu_status(pvgpu_call_module_load(op.client, &req, &rep, start));
	cu_op_end(&op);
	if (r)
		return r;
	*out = module_new(ctx, rep.module);
	return *out ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult cu_module_adopt(struct cu_ctx *ctx, uint64_t remote, CUmodule *out)
{
	struct cu_module *m = module_new(ctx, remote);

	if (!m)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*out = (CUmodule)m;
	return CUDA_SUCCESS;
}

static struct cu_module *mod_check(CUmodule h)
{
	struct cu_module *m = (struct cu_module *)h;

	return m && m->magic == CU_MAGIC_MOD && m->alive ? m : NULL;
}

static struct cu_func *func_check(CUfunction h)
{
	struct cu_func *f = (struct cu_func *)h;

	return f && f->magic == CU_MAGIC_FUNC ? f : NULL;
}

CUresult cu_module_remote(CUmodule h, struct cu_ctx **ctx, uint64_t *remote)
{
	struct cu_module *m = mod_check(h);

	if (!m)
		return CUDA_ERROR_INVALID_HANDLE;
	*ctx = m->ctx;
	*remote = m->remote;
	return CUDA_SUCCESS;
}

static struct cu_library *lib_check(CUlibrary h)
{
	struct cu_library *l = (struct cu_library *)h;

	return l && l->magic == CU_MAGIC_LIB && l->alive ? l : NULL;
}

CUresult CUDAAPI cuModuleLoadData(CUmodule *module, const void *image)
{
	struct cu_ctx *ctx = cu_current();
	struct cu_module *m;
	CUresult r;

	if (!module || !image)
		return CUDA_ERROR_INVALID_VALUE;
	if (!ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	r = module_load(ctx, image, &m);
	if (!r)
		*module = (CUmodule)m;
	return r;
}

/* The file is read in the guest; only its image crosses (Triton loads its
 * cubins this way). */
CUresult CUDAAPI cuModuleLoad(CUmodule *module, const char *fname)
{
	uint8_t *image = NULL;
	size_t size = 0;
	CUresult r;

	if (!module || !fname)
		return CUDA_ERROR_INVALID_VALUE;
	r = cu_read_file(fname, &image, &size);
	if (r)
		return r;
	r = cuModuleLoadData(module, image);
	free(image);
	return r;
}

CUresult CUDAAPI cuModuleLoadDataEx(CUmodule *module, const void *image, unsigned int n,
				    CUjit_option *options, void **values)
{
	return cu_module_load_jit(module, image, n, options, values);
}

CUresult CUDAAPI cuModuleLoadFatBinary(CUmodule *module, const void *fatCubin)
{
	return cuModuleLoadData(module, fatCubin);
}

CUresult CUDAAPI cuModuleUnload(CUmodule h)
{
	struct cu_module *m = mod_check(h);
	struct pvgpu_module_unload_req req;
	struct pvgpu_module_unload_rep rep;
	struct cu_op op;
	CUresult r;

	if (!m)
		return CUDA_ERROR_INVALID_HANDLE;
	req.module = m->remote;
	m->alive = 0;
	r = cu_op_begin(&op, m->ctx);
	if (r)
		return r;
	r = cu_status(pvgpu_call_module_unload(op.client, &req, &rep));
	cu_op_end(&op);
	return r;
}

CUresult CUDAAPI cuModuleGetLoadingMode(CUmoduleLoadingMode *mode)
{
	if (!mode)
		return CUDA_ERROR_INVALID_VALUE;
	*mode = CU_MODULE_EAGER_LOADING;
	return CUDA_SUCCESS;
}

/* Find or resolve a function of a module by name. */
static CUresult module_function(struct cu_module *m, const char *name, struct cu_func **out)
{
	struct pvgpu_module_get_function_req *req;
	struct pvgpu_module_get_function_rep *rep;
	struct cu_func *f;
	struct cu_op op;
	size_t len = strlen(name);
	CUresult r;

	pthread_mutex_lock(&mod_lock);
	for (f = m->funcs; f; f = f->next)
		if (!strcmp(f->name, name))
			break;
	pthread_mutex_unlock(&mod_lock);
	if (f) {
		*out = f;
		return CUDA_SUCCESS;
	}
	if (len > 4096)
		return CUDA_ERROR_NOT_FOUND;
	req = calloc(1, sizeof(*req));
	rep = calloc(1, sizeof(*rep));
	f = calloc(1, sizeof(*f));
	if (!req || !rep || !f) {
		free(req);
		free(rep);
		free(f);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	req->module = m->remote;
	memcpy(req->name, name, len + 1);
	req->name_len = (uint32_t)len;
	r = cu_op_begin(&op, m->ctx);
	if (!r) {
		r = cu_status(pvgpu_call_module_get_function(op.client, req, rep));
		cu_op_end(&op);
	}
	if (!r && rep->param_offset_count != rep->param_size_count)
		r = CUDA_ERROR_INVALID_IMAGE;
	if (!r) {
		uint32_t n = rep->param_offset_count;

		f->magic = CU_MAGIC_FUNC;
		f->mod = m;
		f->name = strdup(name);
		f->remote = rep->func;
		f->nparams = n;
		f->param_offset = calloc(n ? n : 1, sizeof(uint32_t));
		f->param_size = calloc(n ? n : 1, sizeof(uint32_t));
		if (!f->name || !f->param_offset || !f->param_size) {
			r = CUDA_ERROR_OUT_OF_MEMORY;
		} else {
			for (uint32_t i = 0; i < n; i++) {
				uint64_t end = (uint64_t)rep->param_offset[i] + rep->param_size[i];

				f->param_offset[i] = rep->param_offset[i];
				f->param_size[i] = rep->param_size[i];
				if (end > MAX_PARAMS)
					r = CUDA_ERROR_INVALID_IMAGE;
				else if (end > f->params_bytes)
					f->params_bytes = (uint32_t)end;
			}
		}
	}
	free(req);
	free(rep);
	if (r) {
		if (f->name)
			free(f->name);
		free(f->param_offset);
		free(f->param_size);
		free(f);
		return r;
	}
	{
		/* A kernel's __launch_bounds__, checked at every launch. */
		uint64_t a[3] = { 1, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f->remote };

		f->max_dyn_smem = -1;
		if (!cu_op_begin(&op, m->ctx)) {
			if (!cu_generic_op(&op, PVGPU_GENERIC_cuFuncGetAttribute, a, 3))
				f->max_threads = (int32_t)a[0];
			a[0] = 1;
			a[1] = CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
			a[2] = f->remote;
			if (!cu_generic_op(&op, PVGPU_GENERIC_cuFuncGetAttribute, a, 3))
				f->max_dyn_smem = (int32_t)a[0];
			cu_op_end(&op);
		}
	}
	pthread_mutex_lock(&mod_lock);
	f->next = m->funcs;
	m->funcs = f;
	pthread_mutex_unlock(&mod_lock);
	*out = f;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
	struct cu_module *m = mod_check(hmod);
	struct cu_func *f;
	CUresult r;

	if (!hfunc || !name)
		return CUDA_ERROR_INVALID_VALUE;
	if (!m)
		return CUDA_ERROR_INVALID_HANDLE;
	r = module_function(m, name, &f);
	if (!r)
		*hfunc = (CUfunction)f;
	return r;
}

/*
 * The module's kernels: names from the backend, handles as
 * cuModuleGetFunction gives them.  Up to max handles into fs (NULL: none);
 * *count gets how many the module has.
 */
CUresult cu_module_functions(CUmodule hmod, CUfunction *fs, unsigned int max,
			     unsigned int *count)
{
	struct pvgpu_module_functions_req req = { 0 };
	struct pvgpu_module_functions_rep *rep;
	struct cu_module *m = mod_check(hmod);
	unsigned int n = 0;
	struct cu_op op;
	CUresult r;

	if (!m)
		return CUDA_ERROR_INVALID_HANDLE;
	rep = calloc(1, sizeof(*rep));
	if (!rep)
		return CUDA_ERROR_OUT_OF_MEMORY;
	req.module = m->remote;
	r = cu_op_begin(&op, m->ctx);
	if (!r) {
		r = cu_status(pvgpu_call_module_functions(op.client, &req, rep));
		cu_op_end(&op);
	}
	/* names: NUL-terminated, one after another (the decoder bounded the
	 * length; a name cut short at the end is not taken) */
	for (size_t at = 0; !r && fs && n < max && at < rep->names_len; n++) {
		const char *name = (const char *)rep->names + at;
		size_t l = strnlen(name, rep->names_len - at);
		struct cu_func *f;

		if (l == rep->names_len - at)
			break;
		r = module_function(m, name, &f);
		if (!r)
			fs[n] = (CUfunction)f;
		at += l + 1;
	}
	if (!r && count)
		*count = rep->count;
	if (!r && fs && n < max && n < rep->count)
		r = CUDA_ERROR_NOT_SUPPORTED;	/* more names than a reply carries */
	free(rep);
	return r;
}

CUresult CUDAAPI cuModuleGetFunctionCount(unsigned int *count, CUmodule hmod)
{
	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	return cu_module_functions(hmod, NULL, 0, count);
}

CUresult CUDAAPI cuModuleEnumerateFunctions(CUfunction *fs, unsigned int n, CUmodule hmod)
{
	if (!fs)
		return CUDA_ERROR_INVALID_VALUE;
	return cu_module_functions(hmod, fs, n, NULL);
}

static CUresult module_global(struct cu_module *m, const char *name,
			      CUdeviceptr *dptr, size_t *bytes)
{
	struct pvgpu_module_get_global_req *req = calloc(1, sizeof(*req));
	struct pvgpu_module_get_global_rep rep = { 0 };
	size_t len = strlen(name);
	struct cu_op op;
	CUresult r;

	if (!req)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (len > 4096) {
		free(req);
		return CUDA_ERROR_NOT_FOUND;
	}
	req->module = m->remote;
	memcpy(req->name, name, len + 1);
	req->name_len = (uint32_t)len;
	r = cu_op_begin(&op, m->ctx);
	if (!r) {
		r = cu_status(pvgpu_call_module_get_global(op.client, req, &rep));
		cu_op_end(&op);
	}
	free(req);
	if (r)
		return r;
	{
		struct cu_alloc a;

		if (!cu_alloc_find(rep.dptr, &a))
			cu_alloc_add(rep.dptr, rep.size, m->ctx->device);
	}
	if (dptr)
		*dptr = rep.dptr;
	if (bytes)
		*bytes = rep.size;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleGetGlobal_v2(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod,
				      const char *name)
{
	struct cu_module *m = mod_check(hmod);

	if (!name)
		return CUDA_ERROR_INVALID_VALUE;
	if (!m)
		return CUDA_ERROR_INVALID_HANDLE;
	return module_global(m, name, dptr, bytes);
}

/* ---- libraries and kernels ---------------------------------------------- */

CUresult cu_library_load(const void *image, CUlibrary *out)
{
	struct cu_library *l;
	const void *start;
	size_t size;

	if (cu_image_span(image, &start, &size))
		return CUDA_ERROR_INVALID_IMAGE;
	l = calloc(1, sizeof(*l));
	if (!l)
		return CUDA_ERROR_OUT_OF_MEMORY;
	l->image = malloc(size);
	if (!l->image) {
		free(l);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	memcpy(l->image, start, size);
	l->size = size;
	l->magic = CU_MAGIC_LIB;
	l->alive = 1;
	pthread_mutex_lock(&mod_lock);
	l->next = libraries;
	libraries = l;
	pthread_mutex_unlock(&mod_lock);
	*out = (CUlibrary)l;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLibraryLoadData(CUlibrary *library, const void *code,
				   CUjit_option *jitOptions, void **jitOptionsValues,
				   unsigned int numJitOptions, CUlibraryOption *libraryOptions,
				   void **libraryOptionValues, unsigned int numLibraryOptions)
{
	(void)jitOptions;
	(void)jitOptionsValues;
	(void)numJitOptions;
	(void)libraryOptions;
	(void)libraryOptionValues;
	(void)numLibraryOptions;
	if (!library || !code)
		return CUDA_ERROR_INVALID_VALUE;
	return cu_library_load(code, library);
}

/* The library's module in the context current for its device (lazily). */
static CUresult library_module(struct cu_library *l, int device, struct cu_module **out)
{
	struct cu_ctx *ctx = cu_current();
	struct cu_module *m;
	CUresult r;

	if (!cu.initialized || cu.init_error)
		return cu.initialized ? cu.init_error : CUDA_ERROR_NOT_INITIALIZED;
	if (device < 0)
		device = ctx ? ctx->device : 0;
	if (device >= cu.ndevices)
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&mod_lock);
	m = l->mods[device];
	pthread_mutex_unlock(&mod_lock);
	if (m) {
		*out = m;
		return CUDA_SUCCESS;
	}
	if (!ctx || ctx->device != device)
		ctx = cu_primary(device);
	r = module_load(ctx, l->image, &m);
	if (r)
		return r;
	m->lib = l;
	pthread_mutex_lock(&mod_lock);
	if (l->mods[device]) {
		/* Another thread won; keep one. */
		free(m);
		m = l->mods[device];
	} else {
		l->mods[device] = m;
	}
	pthread_mutex_unlock(&mod_lock);
	*out = m;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLibraryUnload(CUlibrary h)
{
	struct cu_library *l = lib_check(h);

	if (!l)
		return CUDA_ERROR_INVALID_HANDLE;
	for (int d = 0; d < CU_MAX_DEVICES; d++)
		if (l->mods[d])
			cuModuleUnload((CUmodule)l->mods[d]);
	l->alive = 0;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLibraryGetModule(CUmodule *pmod, CUlibrary h)
{
	struct cu_library *l = lib_check(h);
	struct cu_module *m;
	CUresult r;

	if (!pmod)
		return CUDA_ERROR_INVALID_VALUE;
	if (!l)
		return CUDA_ERROR_INVALID_HANDLE;
	r = library_module(l, -1, &m);
	if (!r)
		*pmod = (CUmodule)m;
	return r;
}

CUresult CUDAAPI cuLibraryGetKernel(CUkernel *pKernel, CUlibrary h, const char *name)
{
	struct cu_library *l = lib_check(h);
	struct cu_func *k;

	if (!pKernel || !name)
		return CUDA_ERROR_INVALID_VALUE;
	if (!l)
		return CUDA_ERROR_INVALID_HANDLE;
	pthread_mutex_lock(&mod_lock);
	for (k = l->kernels; k; k = k->next)
		if (!strcmp(k->name, name))
			break;
	if (!k) {
		k = calloc(1, sizeof(*k));
		if (k)
			k->name = strdup(name);
		if (!k || !k->name) {
			free(k);
			pthread_mutex_unlock(&mod_lock);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		k->magic = CU_MAGIC_FUNC;
		k->lib = l;
		k->next = l->kernels;
		l->kernels = k;
	}
	pthread_mutex_unlock(&mod_lock);
	*pKernel = (CUkernel)k;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLibraryGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUlibrary h,
				    const char *name)
{
	struct cu_library *l = lib_check(h);
	struct cu_module *m;
	CUresult r;

	if (!name)
		return CUDA_ERROR_INVALID_VALUE;
	if (!l)
		return CUDA_ERROR_INVALID_HANDLE;
	r = library_module(l, -1, &m);
	return r ? r : module_global(m, name, dptr, bytes);
}

/* A CUfunction, or a CUkernel standing for one: the function to run. */
static CUresult func_resolve(CUfunction h, int device, struct cu_func **out)
{
	struct cu_func *f = func_check(h);
	struct cu_module *m;
	CUresult r;

	if (!f)
		return CUDA_ERROR_INVALID_HANDLE;
	if (f->mod) {
		*out = f;
		return CUDA_SUCCESS;
	}
	if (!f->lib)
		return CUDA_ERROR_INVALID_HANDLE;
	r = library_module(f->lib, device, &m);
	return r ? r : module_function(m, f->name, out);
}

CUresult cu_func_remote(CUfunction h, struct cu_ctx **ctx, uint64_t *remote)
{
	struct cu_func *f;
	CUresult r = func_resolve(h, -1, &f);

	if (r)
		return r;
	*ctx = f->mod->ctx;
	*remote = f->remote;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
	struct cu_func *f;
	CUresult r;

	if (!pFunc)
		return CUDA_ERROR_INVALID_VALUE;
	r = func_resolve((CUfunction)kernel, -1, &f);
	if (!r)
		*pFunc = (CUfunction)f;
	return r;
}

CUresult CUDAAPI cuFuncGetParamInfo(CUfunction func, size_t index, size_t *offset, size_t *size)
{
	struct cu_func *f;
	CUresult r = func_resolve(func, -1, &f);

	if (r)
		return r;
	if (index >= f->nparams)
		return CUDA_ERROR_INVALID_VALUE;
	if (offset)
		*offset = f->param_offset[index];
	if (size)
		*size = f->param_size[index];
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuKernelGetParamInfo(CUkernel kernel, size_t index, size_t *offset, size_t *size)
{
	return cuFuncGetParamInfo((CUfunction)kernel, index, offset, size);
}

CUresult CUDAAPI cuFuncGetName(const char **name, CUfunction h)
{
	struct cu_func *f = func_check(h);

	if (!name)
		return CUDA_ERROR_INVALID_VALUE;
	if (!f)
		return CUDA_ERROR_INVALID_HANDLE;
	*name = f->name;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuKernelGetName(const char **name, CUkernel h)
{
	return cuFuncGetName(name, (CUfunction)h);
}

CUresult CUDAAPI cuFuncGetModule(CUmodule *hmod, CUfunction h)
{
	struct cu_func *f = func_check(h);

	if (!hmod)
		return CUDA_ERROR_INVALID_VALUE;
	if (!f || !f->mod)
		return CUDA_ERROR_INVALID_HANDLE;
	*hmod = (CUmodule)f->mod;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuFuncIsLoaded(CUfunctionLoadingState *state, CUfunction h)
{
	if (!state)
		return CUDA_ERROR_INVALID_VALUE;
	if (!func_check(h))
		return CUDA_ERROR_INVALID_HANDLE;
	*state = CU_FUNCTION_LOADING_STATE_LOADED;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuFuncLoad(CUfunction h)
{
	struct cu_func *f;

	return func_resolve(h, -1, &f);
}

/* ---- occupancy: asked of the backend once per question ------------------ */

enum { ASK_BLOCKS = 1, ASK_CLUSTERS, ASK_DYNAMIC_SMEM };

static void answers_lock(struct cu_func *f)
{
	while (__atomic_test_and_set(&f->answers_busy, __ATOMIC_ACQUIRE))
		;
}

static void answers_unlock(struct cu_func *f)
{
	__atomic_clear(&f->answers_busy, __ATOMIC_RELEASE);
}

static int answer_find(struct cu_func *f, const uint64_t key[6], int64_t *value)
{
	int found = 0;

	answers_lock(f);
	for (size_t i = 0; i < sizeof(f->answers) / sizeof(f->answers[0]) && !found; i++)
		if (!memcmp(f->answers[i].key, key, sizeof(f->answers[i].key))) {
			*value = f->answers[i].value;
			found = 1;
		}
	answers_unlock(f);
	return found;
}

static void answer_keep(struct cu_func *f, const uint64_t key[6], int64_t value)
{
	struct cu_answer *a;

	answers_lock(f);
	a = &f->answers[f->next_answer++ % (sizeof(f->answers) / sizeof(f->answers[0]))];
	memcpy(a->key, key, sizeof(a->key));
	a->value = value;
	answers_unlock(f);
}

/* A set attribute (dynamic shared memory, carveout) changes the answers. */
static void answers_forget(struct cu_func *f)
{
	answers_lock(f);
	memset(f->answers, 0, sizeof(f->answers));
	answers_unlock(f);
}

_Static_assert(CU_FUNC_ATTRIBUTE_MAX <= 32, "attr_known holds one bit per attribute");

static CUresult func_attr(struct cu_func *f, int attr, int *get, int set)
{
	struct cu_op op;
	CUresult r;

	if (get && attr >= 0 && attr < CU_FUNC_ATTRIBUTE_MAX &&
	    (__atomic_load_n(&f->attr_known, __ATOMIC_ACQUIRE) & (1u << attr))) {
		*get = __atomic_load_n(&f->attr[attr], __ATOMIC_RELAXED);
		return CUDA_SUCCESS;
	}
	r = cu_op_begin(&op, f->mod->ctx);
	if (r)
		return r;
	if (get) {
		uint64_t a[3] = { 1, (uint64_t)(int64_t)attr, f->remote };
		int32_t value;

		r = cu_status(cu_generic_op(&op, PVGPU_GENERIC_cuFuncGetAttribute, a, 3));
		if (!r) {
			value = (int32_t)a[0];
			*get = value;
			if (attr >= 0 && attr < CU_FUNC_ATTRIBUTE_MAX) {
				__atomic_store_n(&f->attr[attr], value, __ATOMIC_RELAXED);
				__atomic_fetch_or(&f->attr_known, 1u << attr, __ATOMIC_RELEASE);
			}
		}
	} else {
		uint64_t a[3] = { f->remote, (uint64_t)(int64_t)attr,
				  (uint64_t)(int64_t)set };

		__atomic_store_n(&f->attr_known, 0, __ATOMIC_RELEASE);
		answers_forget(f);
		r = cu_status(cu_generic_op(&op, PVGPU_GENERIC_cuFuncSetAttribute, a, 3));
		if (!r && attr == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
			f->max_dyn_smem = set;
		__atomic_store_n(&f->attr_known, 0, __ATOMIC_RELEASE);
		answers_forget(f);
	}
	cu_op_end(&op);
	return r;
}

CUresult CUDAAPI cuFuncGetAttribute(int *pi, CUfunction_attribute attrib, CUfunction h)
{
	struct cu_func *f;
	CUresult r;

	if (!pi)
		return CUDA_ERROR_INVALID_VALUE;
	r = func_resolve(h, -1, &f);
	return r ? r : func_attr(f, attrib, pi, 0);
}

CUresult CUDAAPI cuFuncSetAttribute(CUfunction h, CUfunction_attribute attrib, int value)
{
	struct cu_func *f;
	CUresult r = func_resolve(h, -1, &f);

	return r ? r : func_attr(f, attrib, NULL, value);
}

CUresult CUDAAPI cuKernelGetAttribute(int *pi, CUfunction_attribute attrib, CUkernel k, CUdevice dev)
{
	struct cu_func *f;
	CUresult r;

	if (!pi)
		return CUDA_ERROR_INVALID_VALUE;
	r = func_resolve((CUfunction)k, dev, &f);
	return r ? r : func_attr(f, attrib, pi, 0);
}

CUresult CUDAAPI cuKernelSetAttribute(CUfunction_attribute attrib, int val, CUkernel k, CUdevice dev)
{
	struct cu_func *f;
	CUresult r = func_resolve((CUfunction)k, dev, &f);

	return r ? r : func_attr(f, attrib, NULL, val);
}

CUresult CUDAAPI cuFuncSetCacheConfig(CUfunction h, CUfunc_cache config)
{
	(void)config;
	return func_check(h) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult CUDAAPI cuKernelSetCacheConfig(CUkernel k, CUfunc_cache config, CUdevice dev)
{
	(void)config;
	(void)dev;
	return func_check((CUfunction)k) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/*
 * One occupancy question about h: key[0] says which (ASK_*), the rest its
 * arguments; cl the cluster query's launch as the wire carries it.
 */
static CUresult func_ask(CUfunction h, const uint64_t key[6], const uint32_t *cl,
			 int64_t *value)
{
	struct cu_func *f;
	struct cu_op op;
	CUresult r = func_resolve(h, -1, &f);

	if (r)
		return r;
	if (answer_find(f, key, value))
		return CUDA_SUCCESS;
	r = cu_op_begin(&op, f->mod->ctx);
	if (r)
		return r;
	if (key[0] == ASK_BLOCKS) {
		uint64_t a[5] = { 1, f->remote, (uint64_t)(int64_t)(int32_t)key[1],
				  key[2], (uint32_t)key[3] };

		r = cu_status(cu_generic_op(&op,
			PVGPU_GENERIC_cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags,
			a, 5));
		*value = r ? 0 : (int32_t)a[0];
	} else if (key[0] == ASK_CLUSTERS) {
		struct pvgpu_func_max_clusters_req req = {
			.func = f->remote,
			.grid_x = cl[0], .grid_y = cl[1], .grid_z = cl[2],
			.block_x = cl[3], .block_y = cl[4], .block_z = cl[5],
			.shared_bytes = cl[6],
			.cluster_x = cl[7], .cluster_y = cl[8], .cluster_z = cl[9] };
		struct pvgpu_func_max_clusters_rep rep = { 0 };

		r = cu_status(pvgpu_call_func_max_clusters(op.client, &req, &rep));
		*value = rep.clusters;
	} else {
		uint64_t a[4] = { 1, f->remote, (uint64_t)(int64_t)(int32_t)key[1],
				  (uint64_t)(int64_t)(int32_t)key[2] };

		r = cu_status(cu_generic_op(&op,
			PVGPU_GENERIC_cuOccupancyAvailableDynamicSMemPerBlock, a, 4));
		*value = r ? 0 : (int64_t)a[0];
	}
	cu_op_end(&op);
	if (!r)
		answer_keep(f, key, *value);
	return r;
}

CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *num, CUfunction h,
								      int blockSize, size_t smem,
								      unsigned int flags)
{
	uint64_t key[6] = { ASK_BLOCKS, (uint32_t)blockSize, smem, flags };
	int64_t v;
	CUresult r;

	if (!num)
		return CUDA_ERROR_INVALID_VALUE;
	r = func_ask(h, key, NULL, &v);
	if (!r)
		*num = (int)v;
	return r;
}

CUresult CUDAAPI cuOccupancyMaxActiveClusters(int *num, CUfunction h, const CUlaunchConfig *c)
{
	uint32_t cl[10] = { 0 };
	uint64_t key[6] = { ASK_CLUSTERS };
	int64_t v;
	CUresult r;

	if (!num || !c)
		return CUDA_ERROR_INVALID_VALUE;
	cl[0] = c->gridDimX;
	cl[1] = c->gridDimY;
	cl[2] = c->gridDimZ;
	cl[3] = c->blockDimX;
	cl[4] = c->blockDimY;
	cl[5] = c->blockDimZ;
	cl[6] = c->sharedMemBytes;
	for (unsigned int i = 0; c->attrs && i < c->numAttrs; i++)
		if (c->attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
			cl[7] = c->attrs[i].value.clusterDim.x;
			cl[8] = c->attrs[i].value.clusterDim.y;
			cl[9] = c->attrs[i].value.clusterDim.z;
		}
	/* The ten words, two to a key word: the whole launch shape. */
	for (int i = 0; i < 10; i += 2)
		key[1 + i / 2] = (uint64_t)cl[i] << 32 | cl[i + 1];
	r = func_ask(h, key, cl, &v);
	if (!r)
		*num = (int)v;
	return r;
}

CUresult CUDAAPI cuOccupancyAvailableDynamicSMemPerBlock(size_t *bytes, CUfunction h,
							 int numBlocks, int blockSize)
{
	uint64_t key[6] = { ASK_DYNAMIC_SMEM, (uint32_t)numBlocks, (uint32_t)blockSize };
	int64_t v;
	CUresult r;

	if (!bytes)
		return CUDA_ERROR_INVALID_VALUE;
	r = func_ask(h, key, NULL, &v);
	if (!r)
		*bytes = (size_t)v;
	return r;
}

CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessor(int *num, CUfunction h,
							     int blockSize, size_t smem)
{
	return cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(num, h, blockSize, smem, 0);
}

/* ---- launch -------------------------------------------------------------- */

/* Words of launch attributes on the wire (ops.spec launch_kernel_ex). */
#define MAX_ATTR_WORDS	64

struct launch_attrs {
	uint32_t w[MAX_ATTR_WORDS];
	uint32_t n;
};

/*
 * cuLaunchKernelEx's attributes as the wire carries them: four words each,
 * {id, v0, v1, v2}; "ignore" entries left out.  One the backend cannot
 * apply (events, access policy windows, graph-only ones) is refused, never
 * dropped: the launch would not be the one asked for.
 */
static CUresult encode_attrs(const CUlaunchConfig *c, struct launch_attrs *la)
{
	la->n = 0;
	if (c->numAttrs && !c->attrs)
		return CUDA_ERROR_INVALID_VALUE;
	for (unsigned int i = 0; i < c->numAttrs; i++) {
		const CUlaunchAttribute *a = &c->attrs[i];
		const CUlaunchAttributeValue *v = &a->value;
		uint32_t x = 0, y = 0, z = 0;

		switch (a->id) {
		case CU_LAUNCH_ATTRIBUTE_IGNORE:
			continue;
		case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
			x = v->clusterDim.x;
			y = v->clusterDim.y;
			z = v->clusterDim.z;
			break;
		case CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION:
			x = v->preferredClusterDim.x;
			y = v->preferredClusterDim.y;
			z = v->preferredClusterDim.z;
			break;
		case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
			x = v->memSyncDomainMap.default_;
			y = v->memSyncDomainMap.remote;
			break;
		case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
			x = (uint32_t)v->cooperative;
			break;
		case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
			x = (uint32_t)v->clusterSchedulingPolicyPreference;
			break;
		case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION:
			x = (uint32_t)v->programmaticStreamSerializationAllowed;
			break;
		case CU_LAUNCH_ATTRIBUTE_PRIORITY:
			x = (uint32_t)v->priority;
			break;
		case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
			x = (uint32_t)v->memSyncDomain;
			break;
		case CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
			x = v->sharedMemCarveout;
			break;
		default:
			pvgpu_debug("cuLaunchKernelEx: launch attribute %d is not "
				    "supported", (int)a->id);
			return CUDA_ERROR_NOT_SUPPORTED;
		}
		if (la->n + 4 > MAX_ATTR_WORDS)
			return CUDA_ERROR_INVALID_VALUE;
		la->w[la->n++] = (uint32_t)a->id;
		la->w[la->n++] = x;
		la->w[la->n++] = y;
		la->w[la->n++] = z;
	}
	return CUDA_SUCCESS;
}

/* The launch as launch_kernel_ex, with its attributes. */
static int32_t send_launch_ex(struct pvgpu_client *c,
			      const struct pvgpu_launch_kernel_req *q,
			      const struct launch_attrs *la)
{
	struct pvgpu_launch_kernel_ex_req x = {
		.func = q->func, .grid_x = q->grid_x, .grid_y = q->grid_y,
		.grid_z = q->grid_z, .block_x = q->block_x,
		.block_y = q->block_y, .block_z = q->block_z,
		.shared_bytes = q->shared_bytes, .stream = q->stream,
		.attrs_count = la->n, .params = q->params,
		.params_len = q->params_len,
	};

	memcpy(x.attrs, la->w, la->n * sizeof(*la->w));
	return pvgpu_call_launch_kernel_ex(c, &x);
}

/*
 * What the driver refuses at the launch itself rather than at the next
 * synchronisation, where a queued launch's error would come: clusters that
 * do not tile the grid, and a cooperative grid larger than what the device
 * holds at once (one round trip, for cooperative launches only).
 */
static CUresult check_attrs(const struct launch_attrs *la, CUfunction h,
			    const struct cu_ctx *ctx, const unsigned grid[3],
			    unsigned threads, unsigned smem)
{
	for (uint32_t i = 0; la && i + 4 <= la->n; i += 4) {
		const uint32_t *v = &la->w[i + 1];
		uint64_t blocks;
		int per_sm = 0;
		CUresult r;

		switch (la->w[i]) {
		case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
			if (!v[0] || !v[1] || !v[2] || grid[0] % v[0] ||
			    grid[1] % v[1] || grid[2] % v[2])
				return CUDA_ERROR_INVALID_CLUSTER_SIZE;
			break;
		case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
			if (!v[0])
				break;
			r = cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
				&per_sm, h, (int)threads, smem, 0);
			if (r)
				return r;
			blocks = (uint64_t)grid[0] * grid[1] * grid[2];
			if (blocks > (uint64_t)per_sm *
			    (uint64_t)cu.devices[ctx->device].attr[CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT])
				return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
			break;
		}
	}
	return CUDA_SUCCESS;
}

CUresult cu_kernel_pack(CUfunction h, struct cu_ctx *ctx, const unsigned grid[3],
			const unsigned block[3], unsigned smem, void **params,
			void **extra, uint8_t *buf, struct cu_kernel_args *out)
{
	const int32_t *a = cu.devices[ctx->device].attr;
	unsigned gx = grid[0], gy = grid[1], gz = grid[2];
	unsigned bx = block[0], by = block[1], bz = block[2];
	struct cu_func *f;
	CUresult r;

	r = func_resolve(h, ctx->device, &f);
	if (r)
		return r;
	if (!gx || !gy || !gz || !bx || !by || !bz ||
	    (uint64_t)bx * by * bz > (uint64_t)a[CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK] ||
	    bx > (unsigned)a[CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X] ||
	    by > (unsigned)a[CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y] ||
	    bz > (unsigned)a[CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z] ||
	    gx > (unsigned)a[CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X] ||
	    gy > (unsigned)a[CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y] ||
	    gz > (unsigned)a[CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z])
		return CUDA_ERROR_INVALID_VALUE;
	if (f->max_threads > 0 && (uint64_t)bx * by * bz > (uint64_t)f->max_threads)
		return CUDA_ERROR_INVALID_VALUE;
	if (f->max_dyn_smem >= 0 && smem > (unsigned)f->max_dyn_smem)
		return CUDA_ERROR_INVALID_VALUE;
	if (smem > (unsigned)a[CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN])
		return CUDA_ERROR_INVALID_VALUE;
	out->params = NULL;
	out->params_len = 0;
	if (params) {
		memset(buf, 0, f->params_bytes);
		for (uint32_t i = 0; i < f->nparams; i++) {
			if (!params[i])
				return CUDA_ERROR_INVALID_VALUE;
			memcpy(buf + f->param_offset[i], params[i], f->param_size[i]);
		}
		out->params = buf;
		out->params_len = f->params_bytes;
	} else if (extra) {
		const void *p = NULL;
		size_t n = 0;

		for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
			if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
				p = extra[i + 1];
			else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[i + 1])
				n = *(size_t *)extra[i + 1];
			else
				return CUDA_ERROR_INVALID_VALUE;
		}
		if ((!p && n) || n > MAX_PARAMS)
			return CUDA_ERROR_INVALID_VALUE;
		out->params = p;
		out->params_len = (uint32_t)n;
	} else if (f->nparams) {
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (f->mod->ctx->device != ctx->device)
		return CUDA_ERROR_INVALID_HANDLE;
	out->func = f->remote;
	return CUDA_SUCCESS;
}

static CUresult launch(CUfunction h, unsigned gx, unsigned gy, unsigned gz,
		       unsigned bx, unsigned by, unsigned bz, unsigned smem,
		       CUstream s, void **params, void **extra,
		       const struct launch_attrs *la)
{
	const unsigned grid[3] = { gx, gy, gz }, block[3] = { bx, by, bz };
	struct pvgpu_launch_kernel_req req = {
		.grid_x = gx, .grid_y = gy, .grid_z = gz,
		.block_x = bx, .block_y = by, .block_z = bz,
		.shared_bytes = smem,
	};
	struct cu_kernel_args k;
	uint8_t buf[MAX_PARAMS];
	struct cu_ctx *ctx;
	struct cu_op op;
	CUresult r;

	r = cu_stream_resolve(s, &ctx, &req.stream);
	if (r)
		return r;
	r = cu_kernel_pack(h, ctx, grid, block, smem, params, extra, buf, &k);
	if (r)
		return r;
	r = check_attrs(la, h, ctx, grid, bx * by * bz, smem);
	if (r)
		return r;
	req.func = k.func;
	req.params = k.params;
	req.params_len = k.params_len;
	r = cu_op_begin(&op, ctx);
	if (r)
		return r;
	if (la && la->n)
		r = cu_status(send_launch_ex(op.client, &req, la));
	else
		r = cu_status(pvgpu_call_launch_kernel(op.client, &req));
	if (!r && cu_params_reach_window(op.client, k.params, k.params_len))
		r = cu_status(pvgpu_client_flush(op.client));
	cu_op_end(&op);
	return r;
}

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
				unsigned int bx, unsigned int by, unsigned int bz,
				unsigned int smem, CUstream s, void **params, void **extra)
{
	return launch(f, gx, gy, gz, bx, by, bz, smem, s, params, extra, NULL);
}

CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
				     unsigned int bx, unsigned int by, unsigned int bz,
				     unsigned int smem, CUstream s, void **params, void **extra)
{
	return launch(f, gx, gy, gz, bx, by, bz, smem, s ? s : CU_STREAM_PER_THREAD,
		      params, extra, NULL);
}

CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig *c, CUfunction f, void **params, void **extra)
{
	struct launch_attrs la;
	CUresult r;

	if (!c)
		return CUDA_ERROR_INVALID_VALUE;
	r = encode_attrs(c, &la);
	if (r)
		return r;
	return launch(f, c->gridDimX, c->gridDimY, c->gridDimZ, c->blockDimX, c->blockDimY,
		      c->blockDimZ, c->sharedMemBytes, c->hStream, params, extra, &la);
}

CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig *c, CUfunction f, void **params, void **extra)
{
	CUlaunchConfig copy;

	if (!c)
		return CUDA_ERROR_INVALID_VALUE;
	copy = *c;
	if (!copy.hStream)
		copy.hStream = CU_STREAM_PER_THREAD;
	return cuLaunchKernelEx(&copy, f, params, extra);
}

/* A cooperative launch is a launch with the cooperative attribute. */
static CUresult launch_cooperative(CUfunction f, unsigned int gx, unsigned int gy,
				   unsigned int gz, unsigned int bx, unsigned int by,
				   unsigned int bz, unsigned int smem, CUstream s,
				   void **params)
{
	struct launch_attrs la = { { CU_LAUNCH_ATTRIBUTE_COOPERATIVE, 1, 0, 0 }, 4 };

	return launch(f, gx, gy, gz, bx, by, bz, smem, s, params, NULL, &la);
}

CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy,
					   unsigned int gz, unsigned int bx, unsigned int by,
					   unsigned int bz, unsigned int smem, CUstream s,
					   void **params)
{
	return launch_cooperative(f, gx, gy, gz, bx, by, bz, smem, s, params);
}

CUresult CUDAAPI cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx,
						unsigned int gy, unsigned int gz,
						unsigned int bx, unsigned int by,
						unsigned int bz, unsigned int smem,
						CUstream s, void **params)
{
	return launch_cooperative(f, gx, gy, gz, bx, by, bz, smem,
				  s ? s : CU_STREAM_PER_THREAD, params);
}

/*
 * Deprecated and gone from CUDA 13's cuda.h, still exported by driver 580:
 * one device is a cooperative launch on its stream (the pre- and
 * post-launch synchronisation flags then order nothing but that stream);
 * several devices are not supported.
 */
CUresult CUDAAPI cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *list,
						      unsigned int n, unsigned int flags);
CUresult CUDAAPI cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS *list,
						      unsigned int n, unsigned int flags)
{
	(void)flags;
	if (!list || !n)
		return CUDA_ERROR_INVALID_VALUE;
	if (n > 1)
		return (CUresult)pvgpu_cuda_unsupported(
			"cuLaunchCooperativeKernelMultiDevice (more than one device)");
	return launch_cooperative(list->function, list->gridDimX, list->gridDimY,
				  list->gridDimZ, list->blockDimX, list->blockDimY,
				  list->blockDimZ, list->sharedMemBytes, list->hStream,
				  list->kernelParams);
}
