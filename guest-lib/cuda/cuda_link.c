/*
 * cuda_link.c - JIT linking (cuLinkCreate ... cuLinkComplete, cuLinkDestroy)
 * and cuModuleLoadDataEx with options, JIT-compiled on the backend.
 *
 * The inputs are collected here (cuLinkAddFile reads its file here, in
 * the guest) and cross the wire once, at cuLinkComplete, with the JIT
 * options (link_complete); the image the backend's linker makes comes back
 * (link_fetch) into memory of this state, valid until cuLinkDestroy.  The
 * options' results travel back too: the info and error logs into the
 * program's own buffers (at most 4 KiB of each), their sizes, the wall
 * time, threads per block.  The backend takes only options with scalar
 * values; anything else is CUDA_ERROR_INVALID_VALUE.  cuModuleLoadDataEx
 * of PTX is the driver's own on the backend (module_load_jit), options and
 * logs carried the same way.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"	/* cuda.h, as the driver is built */
#include "cuda_surface.h"
#include "pvgpu_guest.h"
#include "pvgpu_proto.h"

#define CU_MAGIC_LINK	0x706c6e6bu
#define LINK_MAX_OPTS	32
#define LINK_MAX_INPUTS	64

struct cu_link {
	uint32_t magic;
	int alive;
	unsigned int nopts;
	CUjit_option keys[LINK_MAX_OPTS];
	void **values;			/* the program's, written back at completion */
	uint32_t ninputs;
	uint32_t type[LINK_MAX_INPUTS];
	uint64_t size[LINK_MAX_INPUTS];
	uint8_t *data;			/* the inputs, one after another */
	size_t len, cap;
	void *image;			/* the result, until cuLinkDestroy */
};

static struct cu_link *link_check(CUlinkState h)
{
	struct cu_link *l = (struct cu_link *)h;

	return l && l->magic == CU_MAGIC_LINK && l->alive ? l : NULL;
}

CUresult CUDAAPI cuLinkCreate_v2(unsigned int n, CUjit_option *options, void **values,
				 CUlinkState *out)
{
	struct cu_link *l;

	if (!out || (n && (!options || !values)))
		return CUDA_ERROR_INVALID_VALUE;
	if (n > LINK_MAX_OPTS)
		return CUDA_ERROR_INVALID_VALUE;
	if (!cu.initialized)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!cu_current())
		return CUDA_ERROR_INVALID_CONTEXT;
	l = calloc(1, sizeof(*l));
	if (!l)
		return CUDA_ERROR_OUT_OF_MEMORY;
	l->magic = CU_MAGIC_LINK;
	l->alive = 1;
	l->nopts = n;
	if (n)
		memcpy(l->keys, options, n * sizeof(*options));
	l->values = values;
	*out = (CUlinkState)l;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLinkCreate(unsigned int n, CUjit_option *options, void **values,
			      CUlinkState *out)
{
	return cuLinkCreate_v2(n, options, values, out);
}

static CUresult add_bytes(struct cu_link *l, CUjitInputType type, const void *p, size_t n)
{
	if (!n || !p || (unsigned)type > CU_JIT_INPUT_LIBRARY)
		return CUDA_ERROR_INVALID_VALUE;
	if (l->ninputs == LINK_MAX_INPUTS || n > (64u << 20) - l->len)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (l->len + n > l->cap) {
		size_t cap = (l->len + n) * 2;
		uint8_t *d = realloc(l->data, cap);

		if (!d)
			return CUDA_ERROR_OUT_OF_MEMORY;
		l->data = d;
		l->cap = cap;
	}
	memcpy(l->data + l->len, p, n);
	l->len += n;
	l->type[l->ninputs] = type;
	l->size[l->ninputs++] = n;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLinkAddData_v2(CUlinkState h, CUjitInputType type, void *data, size_t size,
				  const char *name, unsigned int n, CUjit_option *options,
				  void **values)
{
	struct cu_link *l = link_check(h);

	(void)name;
	(void)options;
	(void)values;
	if (!l)
		return CUDA_ERROR_INVALID_HANDLE;
	if (n)		/* per-input options: none of the linker's matter here */
		return pvgpu_cuda_unsupported("cuLinkAddData (per-input options)");
	return add_bytes(l, type, data, size);
}

CUresult CUDAAPI cuLinkAddData(CUlinkState h, CUjitInputType type, void *data, size_t size,
			       const char *name, unsigned int n, CUjit_option *options,
			       void **values)
{
	return cuLinkAddData_v2(h, type, data, size, name, n, options, values);
}

/*
 * A whole file read into a NUL-terminated buffer (cuLinkAddFile,
 * cuModuleLoad): *buf to free, *size without the NUL.
 */
CUresult cu_read_file(const char *path, uint8_t **buf, size_t *size)
{
	CUresult r = CUDA_SUCCESS;
	uint8_t *b = NULL;
	FILE *f;
	long n;

	if (!path || !buf || !size)
		return CUDA_ERROR_INVALID_VALUE;
	f = fopen(path, "rb");
	if (!f)
		return CUDA_ERROR_FILE_NOT_FOUND;
	if (fseek(f, 0, SEEK_END) || (n = ftell(f)) <= 0 || fseek(f, 0, SEEK_SET)) {
		r = CUDA_ERROR_INVALID_IMAGE;
		goto out;
	}
	b = malloc((size_t)n + 1);
	if (!b) {
		r = CUDA_ERROR_OUT_OF_MEMORY;
		goto out;
	}
	if (fread(b, 1, (size_t)n, f) != (size_t)n) {
		free(b);
		r = CUDA_ERROR_FILE_NOT_FOUND;
		goto out;
	}
	b[n] = 0;
	*buf = b;
	*size = (size_t)n;
out:
	fclose(f);
	return r;
}

CUresult CUDAAPI cuLinkAddFile_v2(CUlinkState h, CUjitInputType type, const char *path,
				  unsigned int n, CUjit_option *options, void **values)
{
	uint8_t *buf = NULL;
	size_t size = 0;
	CUresult r;

	if (!link_check(h))
		return CUDA_ERROR_INVALID_HANDLE;
	r = cu_read_file(path, &buf, &size);
	if (r)
		return r;
	/* PTX goes to the linker with its terminating NUL, as a string. */
	r = cuLinkAddData_v2(h, type, buf, size + (type == CU_JIT_INPUT_PTX), path, n,
			     options, values);
	free(buf);
	return r;
}

CUresult CUDAAPI cuLinkAddFile(CUlinkState h, CUjitInputType type, const char *path,
			       unsigned int n, CUjit_option *options, void **values)
{
	return cuLinkAddFile_v2(h, type, path, n, options, values);
}

/* Copy what the backend's linker gave into the program's option values. */
struct jit_results {
	uint32_t count;
	const uint64_t *result;
	const char *info_log, *error_log;
};

static void write_back(unsigned int n, const CUjit_option *keys, void **values,
		       const struct jit_results *rep, const uint64_t *sent)
{
	for (unsigned int i = 0; i < n && i < rep->count; i++) {
		const char *log = NULL;
		uint64_t room = 0;

		switch (keys[i]) {
		case CU_JIT_INFO_LOG_BUFFER:
		case CU_JIT_ERROR_LOG_BUFFER:
			log = keys[i] == CU_JIT_INFO_LOG_BUFFER ? rep->info_log : rep->error_log;
			for (unsigned int j = 0; j < n; j++)
				if (keys[j] == keys[i] + 1)	/* ..._SIZE_BYTES */
					room = sent[j];
			if (values[i] && room) {
				size_t k = strlen(log) < room ? strlen(log) : room - 1;

				memcpy(values[i], log, k);
				((char *)values[i])[k] = '\0';
			}
			break;
		case CU_JIT_WALL_TIME:
		case CU_JIT_THREADS_PER_BLOCK:
		case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES:
		case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES:
			memcpy(&values[i], &rep->result[i], sizeof(values[i]));
			break;
		default:
			break;
		}
	}
}

/*
 * The options as they cross: a value that is a pointer of the program's
 * (a log buffer) goes as "wanted or not", the wall time (a result) as 0,
 * the rest as the scalars they are.
 */
static void jit_options(unsigned int n, const CUjit_option *keys, void **values,
			uint32_t *key, uint64_t *value)
{
	for (unsigned int i = 0; i < n; i++) {
		key[i] = keys[i];
		value[i] = keys[i] == CU_JIT_INFO_LOG_BUFFER ||
			   keys[i] == CU_JIT_ERROR_LOG_BUFFER ? values[i] != NULL :
			   keys[i] == CU_JIT_WALL_TIME ? 0 :
			   (uint64_t)(uintptr_t)values[i];
	}
}

/* Link on the backend; the image, malloc'd, in *image. */
static CUresult link_remote(unsigned int nopts, const CUjit_option *keys, void **values,
			    uint32_t ninputs, const uint32_t *type, const uint64_t *size,
			    const uint8_t *data, size_t len, void **image, size_t *image_size)
{
	struct pvgpu_link_complete_req req = { 0 };
	struct pvgpu_link_complete_rep *rep;
	struct pvgpu_link_fetch_req freq = { 0 };
	struct pvgpu_link_fetch_rep frep;
	struct cu_op op;
	CUresult r;
	void *img = NULL;

	if (nopts > LINK_MAX_OPTS || !ninputs || ninputs > LINK_MAX_INPUTS)
		return CUDA_ERROR_INVALID_VALUE;
	rep = calloc(1, sizeof(*rep));
	if (!rep)
		return CUDA_ERROR_OUT_OF_MEMORY;
	req.opt_key_count = req.opt_value_count = nopts;
	jit_options(nopts, keys, values, req.opt_key, req.opt_value);
	req.input_type_count = req.input_size_count = ninputs;
	memcpy(req.input_type, type, ninputs * sizeof(*type));
	memcpy(req.input_size, size, ninputs * sizeof(*size));
	req.size = len;
	r = cu_op_current(&op);
	if (r) {
		free(rep);
		return r;
	}
	r = cu_status(pvgpu_call_link_complete(op.client, &req, rep, data));
	if (!r) {
		img = malloc(rep->image_size ? rep->image_size : 1);
		freq.link = rep->link;
		freq.size = rep->image_size;
		r = img ? cu_status(pvgpu_call_link_fetch(op.client, &freq, &frep, img)) :
			  CUDA_ERROR_OUT_OF_MEMORY;
	}
	cu_op_end(&op);
	write_back(nopts, keys, values, &(struct jit_results){ rep->opt_result_count,
		   rep->opt_result, rep->info_log, rep->error_log }, req.opt_value);
	if (!r) {
		*image = img;
		*image_size = rep->image_size;
	} else {
		free(img);
	}
	free(rep);
	return r;
}

CUresult CUDAAPI cuLinkComplete(CUlinkState h, void **cubin, size_t *size)
{
	struct cu_link *l = link_check(h);
	size_t n = 0;
	void *img = NULL;
	CUresult r;

	if (!l)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!cubin || !size || !l->ninputs)
		return CUDA_ERROR_INVALID_VALUE;
	r = link_remote(l->nopts, l->keys, l->values, l->ninputs, l->type, l->size,
			l->data, l->len, &img, &n);
	if (r)
		return r;
	free(l->image);
	l->image = img;
	*cubin = img;
	*size = n;
	return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLinkDestroy(CUlinkState h)
{
	struct cu_link *l = link_check(h);

	if (!l)
		return CUDA_ERROR_INVALID_HANDLE;
	l->alive = 0;
	free(l->data);
	free(l->image);
	l->data = l->image = NULL;
	/* The struct stays: a stale handle reads as dead, never as freed memory. */
	return CUDA_SUCCESS;
}

/* Is this image PTX text (not an ELF cubin nor a fatbinary)? */
static int is_ptx(const void *image)
{
	const uint8_t *p = image;

	return !(p[0] == 0x7f && p[1] == 'E') &&		/* ELF */
	       !(p[0] == 0x50 && p[1] == 0xed && p[2] == 0x55 && p[3] == 0xba) &&
	       !(p[0] == 0x46 && p[1] == 0x62 && p[2] == 0x43 && p[3] == 0x46) &&
	       !(p[0] == 0x66 && p[1] == 0x62 && p[2] == 0x43 && p[3] == 0x46);
}

CUresult cu_module_load_jit(CUmodule *module, const void *image, unsigned int n,
			    CUjit_option *options, void **values)
{
	struct pvgpu_module_load_jit_req req = { 0 };
	struct pvgpu_module_load_jit_rep *rep;
	struct cu_op op;
	CUresult r;

	if (!module || !image || (n && (!options || !values)))
		return CUDA_ERROR_INVALID_VALUE;
	if (!n || !is_ptx(image))
		return cuModuleLoadData(module, image);
	/* PTX with options: the driver's cuModuleLoadDataEx on the backend,
	 * options and logs both ways. */
	if (n > LINK_MAX_OPTS)
		return CUDA_ERROR_INVALID_VALUE;
	rep = calloc(1, sizeof(*rep));
	if (!rep)
		return CUDA_ERROR_OUT_OF_MEMORY;
	req.size = strlen(image) + 1;
	req.opt_key_count = req.opt_value_count = n;
	jit_options(n, options, values, req.opt_key, req.opt_value);
	r = cu_op_current(&op);
	if (r) {
		free(rep);
		return r;
	}
	r = cu_status(pvgpu_call_module_load_jit(op.client, &req, rep, image));
	cu_op_end(&op);
	write_back(n, options, values, &(struct jit_results){ rep->opt_result_count,
		   rep->opt_result, rep->info_log, rep->error_log }, req.opt_value);
	if (!r)
		r = cu_module_adopt(op.ctx, rep->module, module);
	free(rep);
	return r;
}
