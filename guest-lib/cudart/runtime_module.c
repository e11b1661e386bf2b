/*
 * runtime_module.c - the registration calls nvcc puts into every program,
 * and the lazy loading of what they register (DESIGN §3).
 *
 * Each translation unit nvcc compiles registers its fat binary, its
 * kernels and its device variables from a constructor, before main and
 * perhaps before any backend can be reached, so registration does no I/O
 * and cannot fail: it only fills the registry (runtime_module.h).  The
 * image goes to a backend the first time a kernel or variable of it is
 * used in a device context there: module_load uploads it once, and the
 * hash the backend computes lets any further context on that backend
 * (another GPU, or one after cudaDeviceReset) name it with module_lookup
 * instead of uploading it again.
 */
#include <stdlib.h>
#include <string.h>

#include <cuda.h>

#include "debug.h"
#include "pvgpu_generic.h"
#include "pvgpu_guest.h"
#include "pvgpu_proto.h"
#include "runtime_module.h"

/* Not in the public headers (crt/host_runtime.h declares them for nvcc). */
void **__cudaRegisterFatBinary(void *fatCubin);
void __cudaRegisterFatBinaryEnd(void **fatCubinHandle);
void __cudaUnregisterFatBinary(void **fatCubinHandle);
char __cudaInitModule(void **fatCubinHandle);
void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun,
			    char *deviceFun, const char *deviceName,
			    int thread_limit, uint3 *tid, uint3 *bid,
			    dim3 *bDim, dim3 *gDim, int *wSize);
void __cudaRegisterVar(void **fatCubinHandle, char *hostVar,
		       char *deviceAddress, const char *deviceName, int ext,
		       size_t size, int constant, int global);
void __cudaRegisterManagedVar(void **fatCubinHandle, void **hostVarPtrAddress,
			      char *deviceAddress, const char *deviceName,
			      int ext, size_t size, int constant, int global);

/* fatbinary_section.h: the wrapper nvcc emits around each fatbinary. */
#define FATBINC_MAGIC		0x466243b1u
#define FATBINC_VERSION		1
#define FATBINC_LINK_VERSION	2

struct fatbin_wrapper {
	int magic;
	int version;
	const unsigned long long *data;
	void *filename_or_fatbins;
};

/* The fatbinary's own header; its size is header_size + fat_size. */
#define FATBIN_MAGIC		0xba55ed50u
#define FATBIN_HEADER_SIZE	16
/* The backend takes no bigger image (host-backend/modules.c). */
#define MAX_IMAGE		(512ull << 20)

/* A module in one device context. */
struct mod_state {
	uint32_t gen;
	uint64_t module;	/* 0 with gen current: load failed, with error */
	int32_t error;
};

struct pvgpu_fatbin {
	void *wrapper;			/* first: *handle is what nvcc gave us */
	struct pvgpu_fatbin *next;	/* registry.bins */
	const void *image;		/* NULL: not a fatbinary we understand */
	size_t size;
	struct pvgpu_kernel *kernels;
	struct pvgpu_var *vars;
	struct mod_state *st;		/* [ndevices], NULL until first use */
	/* Under registry.lock: */
	int hash_known;
	uint8_t hash[32];
};

/* Open addressing on the host address, for the launch path's lookups. */
struct slot {
	const void *key;
	void *obj;
};

struct table {
	struct slot *v;
	size_t cap;			/* a power of two, or 0 */
	size_t n;
};

static struct {
	pthread_mutex_t lock;
	struct pvgpu_fatbin *bins;
	struct table kernels;
	struct table vars;
} registry = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
};

/* Handed out when even the registry entry cannot be had: ignored later. */
static struct pvgpu_fatbin dead_bin;

static size_t slot_of(const struct table *t, const void *key)
{
	uint64_t h = (uint64_t)(uintptr_t)key;

	/* Stubs and shadows are aligned and close together: mix the bits. */
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdull;
	h ^= h >> 33;
	return (size_t)h & (t->cap - 1);
}

static void *table_get(const struct table *t, const void *key)
{
	if (!t->cap || !key)
		return NULL;
	for (size_t i = slot_of(t, key);; i = (i + 1) & (t->cap - 1)) {
		if (!t->v[i].obj)
			return NULL;
		if (t->v[i].key == key)
			return t->v[i].obj;
	}
}

static void table_put_slot(struct table *t, const void *key, void *obj)
{
	size_t i = slot_of(t, key);

	while (t->v[i].obj)
		i = (i + 1) & (t->cap - 1);
	t->v[i] = (struct slot){ key, obj };
	t->n++;
}

/* -1 when out of memory; an existing key keeps its first entry. */
static int table_put(struct table *t, const void *key, void *obj)
{
	if (table_get(t, key))
		return 0;
	if ((t->n + 1) * 2 > t->cap) {
		struct table bigger = { .cap = t->cap ? t->cap * 2 : 64 };

		bigger.v = calloc(bigger.cap, sizeof(*bigger.v));
		if (!bigger.v)
			return -1;
		for (size_t i = 0; i < t->cap; i++)
			if (t->v[i].obj)
				table_put_slot(&bigger, t->v[i].key, t->v[i].obj);
		free(t->v);
		*t = bigger;
	}
	table_put_slot(t, key, obj);
	return 0;
}

/* After a fatbin went away: rebuild both tables from what is left. */
static void tables_rebuild(void)
{
	free(registry.kernels.v);
	free(registry.vars.v);
	memset(&registry.kernels, 0, sizeof(registry.kernels));
	memset(&registry.vars, 0, sizeof(registry.vars));
	for (struct pvgpu_fatbin *b = registry.bins; b; b = b->next) {
		for (struct pvgpu_kernel *k = b->kernels; k; k = k->next)
			(void)table_put(&registry.kernels, k->host_fun, k);
		for (struct pvgpu_var *v = b->vars; v; v = v->next)
			if (!v->managed)
				(void)table_put(&registry.vars, v->host, v);
	}
}

struct pvgpu_kernel *pvgpu_kernel_find(const void *host_fun)
{
	struct pvgpu_kernel *k;

	pthread_mutex_lock(&registry.lock);
	k = table_get(&registry.kernels, host_fun);
	pthread_mutex_unlock(&registry.lock);
	return k;
}

struct pvgpu_var *pvgpu_var_find(const void *host_var)
{
	struct pvgpu_var *v;

	pthread_mutex_lock(&registry.lock);
	v = table_get(&registry.vars, host_var);
	pthread_mutex_unlock(&registry.lock);
	return v;
}

/* Where the fatbinary lies and how long it is; 0 if it is not one. */
static int find_image(const void *fatCubin, const void **image, size_t *size)
{
	const struct fatbin_wrapper *w = fatCubin;
	const uint8_t *p = fatCubin;
	uint32_t magic;
	uint16_t header_size;
	uint64_t fat_size;

	if (!fatCubin)
		return -1;
	memcpy(&magic, p, sizeof(magic));
	if (magic == FATBINC_MAGIC) {
		if ((w->version != FATBINC_VERSION &&
		     w->version != FATBINC_LINK_VERSION) || !w->data)
			return -1;
		p = (const uint8_t *)w->data;
		memcpy(&magic, p, sizeof(magic));
	}
	if (magic != FATBIN_MAGIC)
		return -1;
	memcpy(&header_size, p + 6, sizeof(header_size));
	memcpy(&fat_size, p + 8, sizeof(fat_size));
	if (header_size < FATBIN_HEADER_SIZE || fat_size > MAX_IMAGE)
		return -1;
	*image = p;
	*size = header_size + (size_t)fat_size;
	return 0;
}

void **__cudaRegisterFatBinary(void *fatCubin)
{
	struct pvgpu_fatbin *b = calloc(1, sizeof(*b));

	/* Never fail here: the program has not even reached main. */
	if (!b)
		return &dead_bin.wrapper;
	b->wrapper = fatCubin;
	if (find_image(fatCubin, &b->image, &b->size))
		b->image = NULL;	/* its kernels fail to launch, cleanly */
	pthread_mutex_lock(&registry.lock);
	b->next = registry.bins;
	registry.bins = b;
	pthread_mutex_unlock(&registry.lock);
	return &b->wrapper;
}

static struct pvgpu_fatbin *bin_of(void **handle)
{
	struct pvgpu_fatbin *b = (struct pvgpu_fatbin *)handle;

	return !handle || b == &dead_bin ? NULL : b;
}

void __cudaRegisterFatBinaryEnd(void **fatCubinHandle)
{
	/* Modules load lazily, on first use in a context. */
	(void)fatCubinHandle;
}

void __cudaRegisterFunction(void **fatCubinHandle, const char *hostFun,
			    char *deviceFun, const char *deviceName,
			    int thread_limit, uint3 *tid, uint3 *bid,
			    dim3 *bDim, dim3 *gDim, int *wSize)
{
	struct pvgpu_fatbin *b = bin_of(fatCubinHandle);
	struct pvgpu_kernel *k;

	(void)thread_limit, (void)tid, (void)bid, (void)bDim, (void)gDim,
	(void)wSize;
	if (!deviceName)
		deviceName = deviceFun;
	if (!b || !hostFun || !deviceName)
		return;
	k = calloc(1, sizeof(*k));
	if (!k)
		return;
	k->name = strdup(deviceName);
	if (!k->name) {
		free(k);
		return;
	}
	k->bin = b;
	k->host_fun = hostFun;
	pthread_mutex_lock(&registry.lock);
	k->next = b->kernels;
	b->kernels = k;
	(void)table_put(&registry.kernels, hostFun, k);
	pthread_mutex_unlock(&registry.lock);
}

static void register_var(void **handle, const void *host, const char *name,
			 size_t size, int constant, int managed)
{
	struct pvgpu_fatbin *b = bin_of(handle);
	struct pvgpu_var *v;

	if (!b || !host || !name)
		return;
	v = calloc(1, sizeof(*v));
	if (!v)
		return;
	v->name = strdup(name);
	if (!v->name) {
		free(v);
		return;
	}
	v->bin = b;
	v->host = host;
	v->size = size;
	v->constant = constant;
	v->managed = managed;
	pthread_mutex_lock(&registry.lock);
	v->next = b->vars;
	b->vars = v;
	if (!managed)
		(void)table_put(&registry.vars, host, v);
	pthread_mutex_unlock(&registry.lock);
}

void __cudaRegisterVar(void **fatCubinHandle, char *hostVar,
		       char *deviceAddress, const char *deviceName, int ext,
		       size_t size, int constant, int global)
{
	(void)deviceAddress, (void)ext, (void)global;
	register_var(fatCubinHandle, hostVar, deviceName, size, constant, 0);
}

/*
 * __managed__ variables need memory that host and device share, which a
 * remote GPU cannot give: the variable is registered (so the program
 * loads) but its host pointer stays NULL, and it is no symbol for the
 * cudaMemcpy*Symbol calls.
 */
void __cudaRegisterManagedVar(void **fatCubinHandle, void **hostVarPtrAddress,
			      char *deviceAddress, const char *deviceName,
			      int ext, size_t size, int constant, int global)
{
	(void)deviceAddress, (void)ext, (void)global;
	register_var(fatCubinHandle, hostVarPtrAddress, deviceName, size,
		     constant, 1);
}

/* nvcc calls it before the first host access to a __managed__ variable. */
char __cudaInitModule(void **fatCubinHandle)
{
	(void)fatCubinHandle;
	return 1;
}

/*
 * Unload the fatbin's module from every context it was loaded in, where
 * the backend can be had without waiting: at exit another thread may be
 * stuck in a call, and the backend frees everything at session end anyway.
 */
static void bin_unload(struct pvgpu_fatbin *b)
{
	struct pvgpu_runtime *rt = &pvgpu_rt;

	if (!b->st)
		return;
	for (int d = 0; d < rt->ndevices; d++) {
		struct pvgpu_device *dev = &rt->devices[d];
		struct pvgpu_backend *be = dev->be;
		struct pvgpu_module_unload_req req = { .module = b->st[d].module };
		struct pvgpu_module_unload_rep rep;
		struct pvgpu_ctx_set_req set = { .ctx = dev->ctx };

		if (pthread_mutex_trylock(&be->lock))
			continue;
		if (be->client && req.module && dev->ctx &&
		    b->st[d].gen == dev->ctx_gen) {
			int32_t st = 0;

			if (be->current_ctx != dev->ctx) {
				st = pvgpu_call_ctx_set(be->client, &set);
				if (!st)
					be->current_ctx = dev->ctx;
			}
			if (!st)
				(void)pvgpu_call_module_unload(be->client, &req, &rep);
		}
		for (struct pvgpu_var *v = b->vars; v; v = v->next)
			if (v->st && v->st[d].gen == dev->ctx_gen && v->st[d].dptr)
				pvgpu_alloc_untrack_global(d, v->st[d].dptr);
		pthread_mutex_unlock(&be->lock);
	}
}

static void kernel_free(struct pvgpu_kernel *k)
{
	if (k->st)
		for (int d = 0; d < pvgpu_rt.ndevices; d++)
			free(k->st[d].param_offset);
	free(k->st);
	free(k->name);
	free(k);
}

void __cudaUnregisterFatBinary(void **fatCubinHandle)
{
	struct pvgpu_fatbin *b = bin_of(fatCubinHandle), **link;
	int found = 0;

	if (!b)
		return;
	pthread_mutex_lock(&registry.lock);
	for (link = &registry.bins; *link; link = &(*link)->next) {
		if (*link == b) {
			*link = b->next;
			found = 1;
			break;
		}
	}
	if (found)
		tables_rebuild();
	pthread_mutex_unlock(&registry.lock);
	if (!found)
		return;
	bin_unload(b);
	while (b->kernels) {
		struct pvgpu_kernel *k = b->kernels;

		b->kernels = k->next;
		kernel_free(k);
	}
	while (b->vars) {
		struct pvgpu_var *v = b->vars;

		b->vars = v->next;
		free(v->st);
		free(v->name);
		free(v);
	}
	free(b->st);
	free(b);
}

/* A per-device slot array, made on first use (ndevices is known by then). */
static void *slots(void **array, size_t elem)
{
	void *p;

	pthread_mutex_lock(&registry.lock);
	if (!*array && pvgpu_rt.ndevices > 0)
		*array = calloc((size_t)pvgpu_rt.ndevices, elem);
	p = *array;
	pthread_mutex_unlock(&registry.lock);
	return p;
}

static int op_device(const struct pvgpu_op *op)
{
	return (int)(op->dev - pvgpu_rt.devices);
}

/* Name an image this backend already holds; 0 and *module if it does. */
static int32_t module_lookup(struct pvgpu_op *op, struct pvgpu_fatbin *b,
			     uint64_t *module, int32_t *deferred)
{
	struct pvgpu_module_lookup_req req = { .hash_len = 32 };
	struct pvgpu_module_lookup_rep rep = { 0 };
	uint8_t hash[32];
	int known;
	int32_t st;

	pthread_mutex_lock(&registry.lock);
	known = b->hash_known;
	memcpy(hash, b->hash, sizeof(hash));
	pthread_mutex_unlock(&registry.lock);
	if (!known)
		return CUDA_ERROR_NOT_FOUND;
	req.hash = hash;
	st = pvgpu_call_module_lookup(op->client, &req, &rep);
	/* A module handle means it loaded: st is an earlier error, then. */
	if (!rep.module)
		return st ? st : CUDA_ERROR_NOT_FOUND;
	if (st && !*deferred)
		*deferred = st;
	*module = rep.module;
	return 0;
}

static int32_t module_upload(struct pvgpu_op *op, struct pvgpu_fatbin *b,
			     uint64_t *module, int32_t *deferred)
{
	struct pvgpu_module_load_req req = { .size = b->size };
	struct pvgpu_module_load_rep rep = { 0 };
	int32_t st;

	st = pvgpu_call_module_load(op->client, &req, &rep, b->image);
	if (!rep.module)
		return st ? st : PVGPU_CLIENT_EPROTO;
	if (st && !*deferred)
		*deferred = st;
	/* No hash: the backend keeps no module cache; upload again next time. */
	if (rep.hash_len == sizeof(b->hash)) {
		pthread_mutex_lock(&registry.lock);
		memcpy(b->hash, rep.hash, sizeof(b->hash));
		b->hash_known = 1;
		pthread_mutex_unlock(&registry.lock);
	}
	*module = rep.module;
	return 0;
}

/* The fatbin's module in op's context, loaded on first use. */
static int32_t module_get(struct pvgpu_op *op, struct pvgpu_fatbin *b,
			  uint64_t *module, int32_t *deferred)
{
	struct mod_state *ms;
	uint32_t gen = op->dev->ctx_gen;
	int32_t st;

	if (!b->image)
		return CUDA_ERROR_INVALID_IMAGE;
	ms = slots((void **)&b->st, sizeof(*b->st));
	if (!ms)
		return CUDA_ERROR_OUT_OF_MEMORY;
	ms += op_device(op);
	if (ms->gen == gen) {
		*module = ms->module;
		return ms->module ? 0 : ms->error;
	}
	st = module_lookup(op, b, module, deferred);
	if (st && st != PVGPU_CLIENT_EIO)
		st = module_upload(op, b, module, deferred);
	if (st) {
		/*
		 * An image this device cannot run stays that way: remember it
		 * rather than upload it again on every launch.
		 */
		if (st == CUDA_ERROR_INVALID_IMAGE ||
		    st == CUDA_ERROR_NO_BINARY_FOR_GPU ||
		    st == CUDA_ERROR_INVALID_PTX ||
		    st == CUDA_ERROR_UNSUPPORTED_PTX_VERSION) {
			ms->gen = gen;
			ms->module = 0;
			ms->error = st;
			pvgpu_debug("module of %zu bytes does not load: CUresult %d",
				    b->size, st);
		}
		return st;
	}
	ms->gen = gen;
	ms->module = *module;
	ms->error = 0;
	return 0;
}

int32_t pvgpu_func_call(struct pvgpu_op *op, uint32_t fn, uint64_t *a, uint32_t n)
{
	struct pvgpu_driver_call_req req = { .fn = fn, .args_count = n };
	struct pvgpu_driver_call_rep rep = { 0 };
	int32_t st;

	if (n > PVGPU_GENERIC_MAX_ARGS)
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(req.args, a, n * sizeof(*a));
	st = pvgpu_call_driver_call(op->client, &req, &rep);
	if (!st && rep.results_count != n)
		st = CUDA_ERROR_UNKNOWN;
	if (!st)
		memcpy(a, rep.results, n * sizeof(*a));
	return st;
}

/* One function attribute; -1 when the backend cannot say. */
static int32_t func_attr(struct pvgpu_op *op, uint64_t func, int attr)
{
	uint64_t a[3] = { 1, (uint64_t)(int64_t)attr, func };

	return pvgpu_func_call(op, PVGPU_GENERIC_cuFuncGetAttribute, a, 3) ? -1 :
	       (int32_t)a[0];
}

int32_t pvgpu_kernel_resolve(struct pvgpu_op *op, struct pvgpu_kernel *k,
			     struct pvgpu_func_state **out, int32_t *deferred)
{
	struct pvgpu_module_get_function_req *req;
	struct pvgpu_module_get_function_rep *rep;
	struct pvgpu_func_state *fs;
	uint32_t gen = op->dev->ctx_gen, *layout, end = 0;
	size_t len = strlen(k->name);
	uint64_t module;
	int32_t st;

	fs = slots((void **)&k->st, sizeof(*k->st));
	if (!fs)
		return CUDA_ERROR_OUT_OF_MEMORY;
	fs += op_device(op);
	*out = fs;
	if (fs->gen == gen)
		return 0;
	if (len >= sizeof(req->name))
		return CUDA_ERROR_NOT_FOUND;	/* no kernel has such a name */
	st = module_get(op, k->bin, &module, deferred);
	if (st)
		return st;
	/* 12 KiB of request and reply: not for the stack of any thread. */
	req = calloc(1, sizeof(*req));
	rep = calloc(1, sizeof(*rep));
	if (!req || !rep) {
		st = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	req->module = module;
	memcpy(req->name, k->name, len + 1);
	req->name_len = (uint32_t)len;
	st = pvgpu_call_module_get_function(op->client, req, rep);
	if (!rep->func) {
		if (!st)
			st = PVGPU_CLIENT_EPROTO;
		goto out;
	}
	if (st && !*deferred)
		*deferred = st;
	st = 0;
	/* The layout decides what we copy where: believe none of it blindly. */
	if (rep->param_offset_count != rep->param_size_count) {
		st = PVGPU_CLIENT_EPROTO;
		goto out;
	}
	for (uint32_t i = 0; i < rep->param_offset_count; i++) {
		uint64_t e = (uint64_t)rep->param_offset[i] + rep->param_size[i];

		if (e > PVGPU_MAX_PARAM_BYTES) {
			st = PVGPU_CLIENT_EPROTO;
			goto out;
		}
		if (e > end)
			end = (uint32_t)e;
	}
	layout = malloc(2 * sizeof(uint32_t) * (rep->param_offset_count + 1));
	if (!layout) {
		st = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	free(fs->param_offset);		/* from an older context, if any */
	memset(fs, 0, sizeof(*fs));
	fs->nparams = rep->param_offset_count;
	fs->param_offset = layout;
	fs->param_size = layout + fs->nparams + 1;
	memcpy(fs->param_offset, rep->param_offset, fs->nparams * sizeof(uint32_t));
	memcpy(fs->param_size, rep->param_size, fs->nparams * sizeof(uint32_t));
	fs->param_bytes = end;
	fs->func = rep->func;
	/*
	 * What a launch is checked against before it is queued, so that it
	 * fails at once, as on a local GPU, rather than at the next sync.
	 */
	fs->max_threads = func_attr(op, fs->func,
				    CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
	fs->max_dyn_shared = func_attr(op, fs->func,
				       CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
	fs->gen = gen;
out:
	free(req);
	free(rep);
	return st;
}

int32_t pvgpu_var_resolve(struct pvgpu_op *op, struct pvgpu_var *v,
			  struct pvgpu_var_state **out, int32_t *deferred)
{
	struct pvgpu_module_get_global_req *req;
	struct pvgpu_module_get_global_rep rep = { 0 };
	struct pvgpu_var_state *vs;
	uint32_t gen = op->dev->ctx_gen;
	size_t len = strlen(v->name);
	uint64_t module;
	int32_t st;

	vs = slots((void **)&v->st, sizeof(*v->st));
	if (!vs)
		return CUDA_ERROR_OUT_OF_MEMORY;
	vs += op_device(op);
	*out = vs;
	if (vs->gen == gen)
		return 0;
	if (len >= sizeof(req->name))
		return CUDA_ERROR_NOT_FOUND;
	st = module_get(op, v->bin, &module, deferred);
	if (st)
		return st;
	req = calloc(1, sizeof(*req));
	if (!req)
		return CUDA_ERROR_OUT_OF_MEMORY;
	req->module = module;
	memcpy(req->name, v->name, len + 1);
	req->name_len = (uint32_t)len;
	st = pvgpu_call_module_get_global(op->client, req, &rep);
	free(req);
	if (!rep.dptr)
		return st ? st : PVGPU_CLIENT_EPROTO;
	if (st && !*deferred)
		*deferred = st;
	/*
	 * In the allocation map, copies to the variable's address (from
	 * cudaGetSymbolAddress too) find their direction; it may be there
	 * already when another context on this device had it.
	 */
	(void)pvgpu_alloc_track_global(op_device(op), rep.dptr, rep.size);
	vs->dptr = rep.dptr;
	vs->size = rep.size;
	vs->gen = gen;
	return 0;
}
