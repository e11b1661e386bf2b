/*
 * sim_module_test.c - the sim executor's modules and kernels: parsing of
 * fatbinaries, cubins and PTX (sim_module.c), globals, launch checks, CPU
 * twins, faults, and hostile images.
 *
 *   sim_module_test [IMAGE...]
 *
 * With no argument it checks a PTX module written out below, fatbinaries
 * wrapped around it here, and malformed images.  Each IMAGE argument is a
 * build of tests/sim-twins/kernels.cu (cubin, fatbinary or PTX; the pytest
 * test_sim_module.py makes them with nvcc) and gets the same checks plus
 * truncation and corruption.  Launches that need CPU twins run when
 * PVGPU_SIM_TWINS names tests/sim-twins/example_twins.c built as a .so.
 *
 * Exit status 0 when every check passes; prints "N passed, M failed".
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>

#include "exec_sim.h"
#include "pvgpu_generic.h"

static int passed, failed;
static const char *what = "";		/* the image under test, for messages */

#define CHECK(cond) do {						\
	if (cond) {							\
		passed++;						\
	} else {							\
		failed++;						\
		fprintf(stderr, "%s:%d: [%s] check failed: %s\n",	\
			__FILE__, __LINE__, what, #cond);		\
	}								\
} while (0)

#define CHECK_RC(expr, want) do {					\
	int32_t rc_ = (expr);						\
	if (rc_ == (int32_t)(want)) {					\
		passed++;						\
	} else {							\
		failed++;						\
		fprintf(stderr, "%s:%d: [%s] %s returned %d, expected %s (%d)\n", \
			__FILE__, __LINE__, what, #expr, rc_, #want,	\
			(int)(want));					\
	}								\
} while (0)

static const struct pvgpu_executor_ops *sim;

/* cuFuncGetAttribute / cuFuncSetAttribute as the worker calls them: the
 * executor's generic driver call, arguments in annotations.py's order. */
static int32_t func_get_attr(struct pvgpu_exec *ex, uint64_t fn, int32_t attr,
			     int32_t *v)
{
	uint64_t a[PVGPU_GENERIC_MAX_ARGS] = { v != NULL, (uint64_t)(int64_t)attr, fn };
	int32_t rc = sim->driver_call(ex, pvgpu_generic_find(PVGPU_GENERIC_cuFuncGetAttribute), a);

	if (v)
		*v = (int32_t)a[0];
	return rc;
}

static int32_t func_set_attr(struct pvgpu_exec *ex, uint64_t fn, int32_t attr,
			     int32_t v)
{
	uint64_t a[PVGPU_GENERIC_MAX_ARGS] = { fn, (uint64_t)(int64_t)attr,
					       (uint64_t)(int64_t)v };

	return sim->driver_call(ex, pvgpu_generic_find(PVGPU_GENERIC_cuFuncSetAttribute), a);
}
static int have_twins;

/* ------------------------------------------------------------------ */
/* what kernels.cu holds, as nvcc lays it out */

struct want_kernel {
	const char *name;
	uint32_t nparams;
	uint32_t off[5], size[5];
	int32_t max_threads;
};

static const struct want_kernel want_kernels[] = {
	{ "vecadd", 4, { 0, 8, 16, 24 }, { 8, 8, 8, 4 }, 1024 },
	{ "scale", 2, { 0, 8 }, { 8, 4 }, 1024 },
	{ "count", 0, { 0 }, { 0 }, 1024 },
	{ "reduce_sum", 3, { 0, 8, 16 }, { 8, 8, 4 }, 1024 },
	{ "poke", 1, { 0 }, { 8 }, 1024 },
	/* (char, struct { int; double; }, long long *) */
	{ "_Z5mixedc4PairPx", 3, { 0, 8, 24 }, { 1, 16, 8 }, 1024 },
	/* __launch_bounds__(128) (int4, short, double, float2, char *) */
	{ "_Z7bounded4int4sd6float2Pc", 5, { 0, 16, 24, 32, 40 },
	  { 16, 2, 8, 8, 8 }, 128 },
	/* (struct { char x[4000]; }, int *) */
	{ "_Z3big3BigPi", 2, { 0, 4000 }, { 4000, 8 }, 1024 },
};

static const float gtable_init[4] = { 1.0f, 2.0f, 3.0f, 4.0f };
static const double nsvar_init[3] = { 1.5, 2.5, 3.5 };

/*
 * The same module as PTX, written by hand in a different style from
 * nvcc's (comments, hex floats, a device function with .ptr parameters,
 * an extern shared array, a debug section) to exercise the PTX parser.
 */
static const char ptx_module[] =
	"//\n// hand-written for sim_module_test.c\n//\n"
	".version 9.0\n"
	".target sm_90\n"
	".address_size 64\n"
	"\n"
	"/* variables */\n"
	".global .align 4 .u32 gcounter;\n"
	".global .align 4 .f32 gtable[4] = {0f3F800000, 0f40000000, 3.0, 4};\n"
	".const .align 4 .b8 cscale[64];\n"
	".const .align 4 .s32 cinit = 42;\n"
	".global .align 8 .f64 _ZN2ns5nsvarE[3] = "
	"{0d3FF8000000000000, 2.5, 0d400C000000000000};\n"
	".extern .global .align 4 .u32 elsewhere;\n"
	".extern .shared .align 16 .b8 dyn[];\n"
	".global .texref tex;\n"
	"\n"
	".func (.param .b32 rv) helper(.param .u64 .ptr .global .align 4 p, "
	".param .b32 x)\n"
	"{\n\t.reg .b32 %r<2>;\n\tst.param.b32 [rv], %r1;\n\tret;\n}\n"
	"\n"
	".visible .entry vecadd(.param .u64 .ptr .global .align 16 a,\n"
	"\t.param .u64 b, .param .u64 c, .param .u32 n)\n"
	"{\n\tret;\n}\n"
	".visible .entry scale(.param .u64 x, .param .s32 n) { ret; }\n"
	".visible .entry count() { ret; }\n"
	".visible .entry reduce_sum(.param .u64 in, .param .u64 out,\n"
	"\t.param .u32 n)\n"
	"{\n"
	"\t.reg .b32 %r<4>;\n"
	"\t.loc 1 2 0\n"
	"\t.shared .align 4 .b8 buf[1024];\n"
	"\tst.shared.u32 [buf], %r1;\n"
	"\t{ // a nested block\n\t.reg .b32 t;\n\t}\n"
	"\tret;\n"
	"}\n"
	".visible .entry poke(.param .u64 p) { ret; }\n"
	".visible .entry _Z5mixedc4PairPx(.param .u8 c,\n"
	"\t.param .align 8 .b8 s[16], .param .u64 out) { ret; }\n"
	".visible .entry _Z7bounded4int4sd6float2Pc(\n"
	"\t.param .align 16 .b8 v[16], .param .u16 s, .param .f64 d,\n"
	"\t.param .align 8 .b8 f[8], .param .u64 p)\n"
	".maxntid 128, 1, 1\n"
	"{\n\tret;\n}\n"
	".visible .entry _Z3big3BigPi(.param .align 1 .b8 b[4000],\n"
	"\t.param .u64 o) { ret; }\n"
	".section .debug_str { .b8 65, 66, 0 }\n";

/* ------------------------------------------------------------------ */
/* helpers */

static struct pvgpu_exec *open_ctx(uint64_t *ctx)
{
	char err[256] = "";
	struct pvgpu_exec *ex = sim->open(NULL, err, sizeof(err));

	if (!ex) {
		fprintf(stderr, "sim open failed: %s\n", err);
		return NULL;
	}
	if (sim->ctx_create(ex, 0, ctx) || sim->ctx_set(ex, *ctx)) {
		sim->close(ex);
		return NULL;
	}
	return ex;
}

static void put_le(unsigned char *b, uint64_t v, int n)
{
	int i;

	for (i = 0; i < n; i++)
		b[i] = (unsigned char)(v >> (8 * i));
}

/* A fatbinary of one uncompressed entry. */
static unsigned char *make_fatbin(uint16_t kind, uint32_t arch,
				  const void *code, size_t len, size_t *out)
{
	size_t padded = (len + 7) & ~(size_t)7;
	size_t total = 16 + 64 + padded;
	unsigned char *b = calloc(1, total), *e;

	if (!b)
		return NULL;
	put_le(b, 0xba55ed50u, 4);
	put_le(b + 4, 1, 2);
	put_le(b + 6, 16, 2);
	put_le(b + 8, total - 16, 8);
	e = b + 16;
	put_le(e + 0x00, kind, 2);
	put_le(e + 0x02, 0x101, 2);
	put_le(e + 0x04, 64, 4);
	put_le(e + 0x08, padded, 8);
	put_le(e + 0x1c, arch, 4);
	put_le(e + 0x28, 0x11, 8);
	memcpy(e + 64, code, len);
	*out = total;
	return b;
}

static int read_file(const char *path, unsigned char **buf, size_t *len)
{
	FILE *f = fopen(path, "rb");
	long n;

	if (!f)
		return -1;
	if (fseek(f, 0, SEEK_END) || (n = ftell(f)) < 0 ||
	    fseek(f, 0, SEEK_SET)) {
		fclose(f);
		return -1;
	}
	*buf = malloc(n ? (size_t)n : 1);
	if (!*buf || fread(*buf, 1, (size_t)n, f) != (size_t)n) {
		free(*buf);
		fclose(f);
		return -1;
	}
	fclose(f);
	*len = (size_t)n;
	return 0;
}

static uint64_t function(struct pvgpu_exec *ex, uint64_t m, const char *name)
{
	uint64_t fn = 0;

	CHECK_RC(sim->module_symbol(ex, m, PVGPU_SYM_FUNCTION, name, &fn, NULL),
		 CUDA_SUCCESS);
	return fn;
}

static int32_t launch(struct pvgpu_exec *ex, uint64_t fn, uint32_t grid,
		      uint32_t block, uint32_t shared, const void *params,
		      uint32_t params_size)
{
	struct pvgpu_launch l = {
		.func = fn,
		.grid = { grid, 1, 1 },
		.block = { block, 1, 1 },
		.shared_bytes = shared,
		.params = params,
		.params_size = params_size,
	};

	return sim->launch(ex, &l);
}

/* ------------------------------------------------------------------ */
/* checks on a loaded kernels.cu module */

static void check_layouts(struct pvgpu_exec *ex, uint64_t m)
{
	struct pvgpu_param_info layout[8];
	uint64_t fn, fn2;
	uint32_t count, j;
	int32_t v;
	size_t i;

	for (i = 0; i < sizeof(want_kernels) / sizeof(want_kernels[0]); i++) {
		const struct want_kernel *w = &want_kernels[i];

		fn = function(ex, m, w->name);
		/* One handle per kernel. */
		CHECK_RC(sim->module_symbol(ex, m, PVGPU_SYM_FUNCTION,
					w->name, &fn2, NULL),
			 CUDA_SUCCESS);
		CHECK(fn == fn2);
		count = 99;
		CHECK_RC(sim->function_params(ex, fn, layout, 8, &count),
			 CUDA_SUCCESS);
		CHECK(count == w->nparams);
		for (j = 0; j < w->nparams && j < count; j++) {
			if (layout[j].offset != w->off[j] ||
			    layout[j].size != w->size[j])
				fprintf(stderr, "[%s] %s param %u: (%u, %u), "
					"expected (%u, %u)\n", what, w->name,
					j, layout[j].offset, layout[j].size,
					w->off[j], w->size[j]);
			CHECK(layout[j].offset == w->off[j]);
			CHECK(layout[j].size == w->size[j]);
		}
		/* Counting only. */
		CHECK_RC(sim->function_params(ex, fn, NULL, 0, &count),
			 CUDA_SUCCESS);
		CHECK(count == w->nparams);
		CHECK_RC(func_get_attr(ex, fn,
			 CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, &v),
			 CUDA_SUCCESS);
		CHECK(v == w->max_threads);
		CHECK_RC(func_get_attr(ex, fn,
			 CU_FUNC_ATTRIBUTE_NUM_REGS, &v), CUDA_SUCCESS);
		CHECK(v > 0 && v <= 255);
		CHECK_RC(func_get_attr(ex, fn,
			 CU_FUNC_ATTRIBUTE_BINARY_VERSION, &v), CUDA_SUCCESS);
		CHECK(v == 90);
		CHECK_RC(func_get_attr(ex, fn,
			 CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, &v),
			 CUDA_SUCCESS);
		CHECK(v > 0 && v <= 49152);
		CHECK_RC(func_get_attr(ex, fn, 9999, &v),
			 CUDA_ERROR_INVALID_VALUE);
	}
	fn = function(ex, m, "reduce_sum");
	CHECK_RC(func_get_attr(ex, fn,
		 CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, &v), CUDA_SUCCESS);
	CHECK(v == 1024);
	CHECK_RC(sim->module_symbol(ex, m, PVGPU_SYM_FUNCTION,
				"no_such_kernel", &fn, NULL),
		 CUDA_ERROR_NOT_FOUND);
	/* A device function is not a kernel. */
	CHECK_RC(sim->module_symbol(ex, m, PVGPU_SYM_FUNCTION,
				"helper", &fn, NULL),
		 CUDA_ERROR_NOT_FOUND);
}

static void check_globals(struct pvgpu_exec *ex, uint64_t m)
{
	uint64_t d = 0, sz = 0, d2 = 0;
	float ft[4];
	double dv[3];
	int32_t iv = -1;
	unsigned char zero[64], got[64];

	memset(zero, 0, sizeof(zero));
	CHECK_RC(sim->module_symbol(ex, m, PVGPU_SYM_GLOBAL, "gtable", &d, &sz),
		 CUDA_SUCCESS);
	CHECK(sz == 16);
	CHECK_RC(pvgpu_exec_dtoh(sim, ex, ft, d, 16, true, 0), CUDA_SUCCESS);
	CHECK(!memcmp(ft, gtable_init, 16));
	/* Module memory is not cuMemFree's to give back. */
	CHECK_RC(sim->mem_free(ex, d), CUDA_ERROR_INVALID_VALUE);
	/* Bounded like any allocation. */
	CHECK_RC(pvgpu_exec_dtoh(sim, ex, ft, d, 17, true, 0),
		 CUDA_ERROR_INVALID_VALUE);

	CHECK_RC(sim->module_symbol(ex, m, PVGPU_SYM_GLOBAL,
				"_ZN2ns5nsvarE", &d, &sz),
		 CUDA_SUCCESS);
	CHECK(sz == 24);
	CHECK_RC(pvgpu_exec_dtoh(sim, ex, dv, d, 24, true, 0), CUDA_SUCCESS);
	CHECK(!memcmp(dv, nsvar_init, 24));

	CHECK_RC(sim->module_symbol(ex, m, PVGPU_SYM_GLOBAL, "cinit", &d, &sz),
		 CUDA_SUCCESS);
	CHECK(sz == 4);
	CHECK_RC(pvgpu_exec_dtoh(sim, ex, &iv, d, 4, true, 0), CUDA_SUCCESS);
	CHECK(iv == 42);

	CHECK_RC(sim->module_symbol(ex, m, PVGPU_SYM_GLOBAL, "cscale", &d, &sz),
		 CUDA_SUCCESS);
	CHECK(sz == 64);
	CHECK_RC(pvgpu_exec_dtoh(sim, ex, got, d, 64, true, 0), CUDA_SUCCESS);
	CHECK(!memcmp(got, zero, 64));

	CHECK_RC(sim->module_symbol(ex, m, PVGPU_SYM_GLOBAL, "gcounter", &d, &sz),
		 CUDA_SUCCESS);
	CHECK(sz == 4);
	CHECK_RC(pvgpu_exec_dtoh(sim, ex, &iv, d, 4, true, 0), CUDA_SUCCESS);
	CHECK(iv == 0);
	/* Either output may be left out. */
	CHECK_RC(sim->module_symbol(ex, m, PVGPU_SYM_GLOBAL,
				"gcounter", &d2, NULL),
		 CUDA_SUCCESS);
	CHECK(d2 == d);
	CHECK_RC(sim->module_symbol(ex, m, PVGPU_SYM_GLOBAL,
				"gcounter", NULL, &sz),
		 CUDA_SUCCESS);

	CHECK_RC(sim->module_symbol(ex, m, PVGPU_SYM_GLOBAL,
				"no_such_var", &d, &sz),
		 CUDA_ERROR_NOT_FOUND);
	CHECK_RC(sim->module_symbol(ex, m, PVGPU_SYM_GLOBAL,
				"elsewhere", &d, &sz),
		 CUDA_ERROR_NOT_FOUND);
	CHECK_RC(sim->module_symbol(ex, m + 1, PVGPU_SYM_GLOBAL,
				"gcounter", &d, &sz),
		 CUDA_ERROR_INVALID_HANDLE);
}

/* Launch checks that come before any twin runs. */
static void check_launch_limits(struct pvgpu_exec *ex, uint64_t m)
{
	uint64_t vecadd = function(ex, m, "vecadd");
	uint64_t bounded = function(ex, m, "_Z7bounded4int4sd6float2Pc");
	uint64_t mixed = function(ex, m, "_Z5mixedc4PairPx");
	uint64_t reduce = function(ex, m, "reduce_sum");
	unsigned char p[64];
	struct pvgpu_launch l;
	int32_t v;

	/* vecadd with n = 0 touches no memory. */
	memset(p, 0, sizeof(p));
	CHECK_RC(launch(ex, vecadd, 1, 1025, 0, p, 28),
		 CUDA_ERROR_INVALID_VALUE);
	CHECK_RC(launch(ex, vecadd, 0, 32, 0, p, 28), CUDA_ERROR_INVALID_VALUE);
	CHECK_RC(launch(ex, vecadd, 1, 0, 0, p, 28), CUDA_ERROR_INVALID_VALUE);
	CHECK_RC(launch(ex, vecadd, 1, 32, 0, p, 27), CUDA_ERROR_INVALID_VALUE);
	CHECK_RC(launch(ex, vecadd, 1, 32, 0, NULL, 28),
		 CUDA_ERROR_INVALID_VALUE);
	CHECK_RC(launch(ex, vecadd, 1, 32, 49153, p, 28),
		 CUDA_ERROR_INVALID_VALUE);
	CHECK_RC(launch(ex, vecadd + 1000, 1, 32, 0, p, 28),
		 CUDA_ERROR_INVALID_HANDLE);
	memset(&l, 0, sizeof(l));
	l.func = vecadd;
	l.params = p;
	l.params_size = 28;
	l.grid[0] = l.grid[1] = l.grid[2] = 1;
	l.block[0] = 16;
	l.block[1] = 1;
	l.block[2] = 65;
	CHECK_RC(sim->launch(ex, &l), CUDA_ERROR_INVALID_VALUE);
	l.block[2] = 64;
	l.block[1] = 2;			/* 16 * 2 * 64 = 2048 threads */
	CHECK_RC(sim->launch(ex, &l), CUDA_ERROR_INVALID_VALUE);
	l.block[0] = l.block[1] = l.block[2] = 1;
	l.grid[1] = 65536;
	CHECK_RC(sim->launch(ex, &l), CUDA_ERROR_INVALID_VALUE);
	l.grid[1] = 1;
	l.grid[0] = 0x80000000u;
	CHECK_RC(sim->launch(ex, &l), CUDA_ERROR_INVALID_VALUE);
	l.grid[0] = 1;
	l.stream = 12345;
	CHECK_RC(sim->launch(ex, &l), CUDA_ERROR_INVALID_HANDLE);

	/* More threads than __launch_bounds__(128). */
	CHECK_RC(launch(ex, bounded, 1, 129, 0, p, 48),
		 CUDA_ERROR_INVALID_VALUE);

	/* Opting in to more dynamic shared memory, up to 227 KiB. */
	CHECK_RC(func_set_attr(ex, vecadd,
		 CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 232449),
		 CUDA_ERROR_INVALID_VALUE);
	CHECK_RC(func_set_attr(ex, reduce,
		 CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 232448),
		 CUDA_ERROR_INVALID_VALUE);	/* + 1 KiB static */
	CHECK_RC(func_set_attr(ex, vecadd,
		 CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 100000),
		 CUDA_SUCCESS);
	CHECK_RC(func_get_attr(ex, vecadd,
		 CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, &v),
		 CUDA_SUCCESS);
	CHECK(v == 100000);
	CHECK_RC(launch(ex, vecadd, 1, 32, 100001, p, 28),
		 CUDA_ERROR_INVALID_VALUE);
	CHECK_RC(launch(ex, vecadd, 1, 32, 100000, p, 28),
		 have_twins ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND);
	CHECK_RC(func_set_attr(ex, vecadd,
		 CU_FUNC_ATTRIBUTE_NUM_REGS, 10), CUDA_ERROR_INVALID_VALUE);
	CHECK_RC(func_set_attr(ex, vecadd,
		 CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 50),
		 CUDA_SUCCESS);

	/* No CPU twin: a clear error, and the context lives on. */
	CHECK_RC(launch(ex, mixed, 1, 1, 0, p, 32), CUDA_ERROR_NOT_FOUND);
	CHECK_RC(launch(ex, mixed, 1, 1, 0, p, 32), CUDA_ERROR_NOT_FOUND);
	CHECK_RC(sim->synchronize(ex, true, 0), CUDA_SUCCESS);
}

/* Kernels through the example twins: results as the GPU would give. */
static void check_twins(struct pvgpu_exec *ex, uint64_t m)
{
	enum { N = 1000 };
	float *a = malloc(N * sizeof(float)), *b = malloc(N * sizeof(float));
	float *c = malloc(N * sizeof(float)), sums[4], two = 2.0f;
	uint64_t da, db, dc, dout, dscale, dcnt;
	unsigned char p[32];
	int32_t n = N, cnt = -1, i, bad = 0;

	CHECK(a && b && c);
	if (!a || !b || !c)
		goto out;
	for (i = 0; i < N; i++) {
		a[i] = (float)i;
		b[i] = (float)(2 * i);
	}
	CHECK_RC(sim->mem_alloc(ex, N * sizeof(float), &da), CUDA_SUCCESS);
	CHECK_RC(sim->mem_alloc(ex, N * sizeof(float), &db), CUDA_SUCCESS);
	CHECK_RC(sim->mem_alloc(ex, N * sizeof(float), &dc), CUDA_SUCCESS);
	CHECK_RC(sim->mem_alloc(ex, 4 * sizeof(float), &dout), CUDA_SUCCESS);
	CHECK_RC(pvgpu_exec_htod(sim, ex, da, a, N * sizeof(float), true, 0),
		 CUDA_SUCCESS);
	CHECK_RC(pvgpu_exec_htod(sim, ex, db, b, N * sizeof(float), true, 0),
		 CUDA_SUCCESS);

	/* vecadd */
	memcpy(p, &da, 8);
	memcpy(p + 8, &db, 8);
	memcpy(p + 16, &dc, 8);
	memcpy(p + 24, &n, 4);
	CHECK_RC(launch(ex, function(ex, m, "vecadd"), 4, 256, 0, p, 28),
		 CUDA_SUCCESS);
	CHECK_RC(pvgpu_exec_dtoh(sim, ex, c, dc, N * sizeof(float), true, 0),
		 CUDA_SUCCESS);
	for (i = 0; i < N; i++)
		bad += c[i] != (float)(3 * i);
	CHECK(bad == 0);

	/* scale: __constant__ set like cudaMemcpyToSymbol */
	CHECK_RC(sim->module_symbol(ex, m, PVGPU_SYM_GLOBAL,
				"cscale", &dscale, NULL),
		 CUDA_SUCCESS);
	CHECK_RC(pvgpu_exec_htod(sim, ex, dscale, &two, 4, true, 0), CUDA_SUCCESS);
	memcpy(p, &da, 8);
	memcpy(p + 8, &n, 4);
	CHECK_RC(launch(ex, function(ex, m, "scale"), 4, 256, 0, p, 12),
		 CUDA_SUCCESS);
	CHECK_RC(pvgpu_exec_dtoh(sim, ex, c, da, N * sizeof(float), true, 0),
		 CUDA_SUCCESS);
	for (i = 0, bad = 0; i < N; i++)
		bad += c[i] != (float)i * 2.0f + 42.0f;
	CHECK(bad == 0);

	/* count: a __device__ variable written by the kernel */
	CHECK_RC(launch(ex, function(ex, m, "count"), 3, 64, 0, NULL, 0),
		 CUDA_SUCCESS);
	CHECK_RC(sim->module_symbol(ex, m, PVGPU_SYM_GLOBAL,
				"gcounter", &dcnt, NULL),
		 CUDA_SUCCESS);
	CHECK_RC(pvgpu_exec_dtoh(sim, ex, &cnt, dcnt, 4, true, 0), CUDA_SUCCESS);
	CHECK(cnt == 192);

	/* reduce_sum: shared memory and barriers (in = 0, 2, 4, ...) */
	memcpy(p, &db, 8);
	memcpy(p + 8, &dout, 8);
	memcpy(p + 16, &n, 4);
	CHECK_RC(launch(ex, function(ex, m, "reduce_sum"), 4, 256, 0, p, 20),
		 CUDA_SUCCESS);
	CHECK_RC(pvgpu_exec_dtoh(sim, ex, sums, dout, sizeof(sums), true, 0),
		 CUDA_SUCCESS);
	for (i = 0, bad = 0; i < 4; i++) {
		double want = 0;
		int j;

		for (j = i * 256; j < (i + 1) * 256 && j < N; j++)
			want += 2.0 * j;
		bad += sums[i] != (float)want;
	}
	CHECK(bad == 0);
out:
	free(a);
	free(b);
	free(c);
}

/* A kernel that faults poisons its context, and only that. */
static void check_fault(const unsigned char *img, size_t len)
{
	uint64_t ctx, ctx2, m, m2, buf, other, poke;
	struct pvgpu_exec *ex = open_ctx(&ctx);
	unsigned char p[8];
	int32_t one = 0;

	CHECK(ex != NULL);
	if (!ex)
		return;
	CHECK_RC(sim->module_load(ex, img, len, &m), CUDA_SUCCESS);
	CHECK_RC(sim->mem_alloc(ex, 64, &buf), CUDA_SUCCESS);
	poke = function(ex, m, "poke");

	memcpy(p, &buf, 8);
	CHECK_RC(launch(ex, poke, 1, 1, 0, p, 8), CUDA_SUCCESS);
	CHECK_RC(pvgpu_exec_dtoh(sim, ex, &one, buf, 4, true, 0), CUDA_SUCCESS);
	CHECK(one == 1);

	/* Memory of another context is not addressable from this one. */
	CHECK_RC(sim->ctx_create(ex, 0, &ctx2), CUDA_SUCCESS);
	CHECK_RC(sim->ctx_set(ex, ctx2), CUDA_SUCCESS);
	CHECK_RC(sim->mem_alloc(ex, 64, &other), CUDA_SUCCESS);
	CHECK_RC(sim->module_load(ex, img, len, &m2), CUDA_SUCCESS);
	CHECK_RC(sim->ctx_set(ex, ctx), CUDA_SUCCESS);
	/* Handles of another context are not ours either. */
	CHECK_RC(sim->module_symbol(ex, m2, PVGPU_SYM_FUNCTION,
				"poke", &poke, NULL),
		 CUDA_ERROR_INVALID_HANDLE);
	poke = function(ex, m, "poke");
	memcpy(p, &other, 8);
	CHECK_RC(launch(ex, poke, 1, 1, 0, p, 8), CUDA_ERROR_ILLEGAL_ADDRESS);

	/* Sticky: everything in the context now fails the same way. */
	CHECK_RC(sim->mem_alloc(ex, 64, &other), CUDA_ERROR_ILLEGAL_ADDRESS);
	CHECK_RC(pvgpu_exec_dtoh(sim, ex, &one, buf, 4, true, 0),
		 CUDA_ERROR_ILLEGAL_ADDRESS);
	CHECK_RC(sim->synchronize(ex, true, 0), CUDA_ERROR_ILLEGAL_ADDRESS);
	CHECK_RC(launch(ex, poke, 1, 1, 0, p, 8), CUDA_ERROR_ILLEGAL_ADDRESS);
	CHECK_RC(sim->module_load(ex, img, len, &m), CUDA_ERROR_ILLEGAL_ADDRESS);

	/* The other context is fine, and its memory intact. */
	CHECK_RC(sim->ctx_set(ex, ctx2), CUDA_SUCCESS);
	CHECK_RC(sim->synchronize(ex, true, 0), CUDA_SUCCESS);
	poke = function(ex, m2, "poke");
	memcpy(p, &other, 8);
	CHECK_RC(launch(ex, poke, 1, 1, 0, p, 8), CUDA_SUCCESS);
	/* Past the end of an allocation faults too. */
	other += 62;
	memcpy(p, &other, 8);
	CHECK_RC(launch(ex, poke, 1, 1, 0, p, 8), CUDA_ERROR_ILLEGAL_ADDRESS);

	/* Destroying a poisoned context works; a new one is healthy. */
	CHECK_RC(sim->ctx_destroy(ex, ctx), CUDA_SUCCESS);
	CHECK_RC(sim->ctx_destroy(ex, ctx2), CUDA_SUCCESS);
	CHECK_RC(sim->ctx_create(ex, 0, &ctx), CUDA_SUCCESS);
	CHECK_RC(sim->ctx_set(ex, ctx), CUDA_SUCCESS);
	CHECK_RC(sim->module_load(ex, img, len, &m), CUDA_SUCCESS);
	CHECK_RC(sim->mem_alloc(ex, 64, &buf), CUDA_SUCCESS);
	memcpy(p, &buf, 8);
	CHECK_RC(launch(ex, function(ex, m, "poke"), 1, 1, 0, p, 8),
		 CUDA_SUCCESS);
	/* A twin that breaks its own rules faults, as a bad kernel would. */
	memset(p, 0, sizeof(p));
	CHECK_RC(launch(ex, function(ex, m, "reduce_sum"), 1, 128, 0,
			(unsigned char [20]){ 0 }, 20),
		 CUDA_ERROR_ILLEGAL_ADDRESS);
	sim->close(ex);
}

/* Everything a good kernels.cu image should give. */
static void check_image(const unsigned char *img, size_t len)
{
	uint64_t ctx, m = 0, fn, d;
	struct pvgpu_exec *ex = open_ctx(&ctx);
	unsigned char p[28] = { 0 };

	CHECK(ex != NULL);
	if (!ex)
		return;
	CHECK_RC(sim->module_load(ex, img, len, &m), CUDA_SUCCESS);
	check_layouts(ex, m);
	check_globals(ex, m);
	check_launch_limits(ex, m);
	if (have_twins)
		check_twins(ex, m);

	/* Unload: its handles and memory go with it. */
	fn = function(ex, m, "vecadd");
	CHECK_RC(sim->module_symbol(ex, m, PVGPU_SYM_GLOBAL, "gtable", &d, NULL),
		 CUDA_SUCCESS);
	CHECK_RC(sim->module_unload(ex, m), CUDA_SUCCESS);
	CHECK_RC(sim->module_unload(ex, m), CUDA_ERROR_INVALID_HANDLE);
	CHECK_RC(launch(ex, fn, 1, 1, 0, p, 28), CUDA_ERROR_INVALID_HANDLE);
	CHECK_RC(sim->function_params(ex, fn, NULL, 0, (uint32_t *)p),
		 CUDA_ERROR_INVALID_HANDLE);
	CHECK_RC(pvgpu_exec_dtoh(sim, ex, p, d, 4, true, 0),
		 CUDA_ERROR_INVALID_VALUE);

	/* Loaded twice: two modules, separate variables. */
	{
		uint64_t m1, m2, d1, d2;
		int32_t v = 7, got = 0;

		CHECK_RC(sim->module_load(ex, img, len, &m1), CUDA_SUCCESS);
		CHECK_RC(sim->module_load(ex, img, len, &m2), CUDA_SUCCESS);
		CHECK(m1 != m2);
		CHECK_RC(sim->module_symbol(ex, m1, PVGPU_SYM_GLOBAL,
					"gcounter", &d1, NULL),
			 CUDA_SUCCESS);
		CHECK_RC(sim->module_symbol(ex, m2, PVGPU_SYM_GLOBAL,
					"gcounter", &d2, NULL),
			 CUDA_SUCCESS);
		CHECK(d1 != d2);
		CHECK_RC(pvgpu_exec_htod(sim, ex, d1, &v, 4, true, 0),
			 CUDA_SUCCESS);
		CHECK_RC(pvgpu_exec_dtoh(sim, ex, &got, d2, 4, true, 0),
			 CUDA_SUCCESS);
		CHECK(got == 0);
	}
	/* Left loaded: destroying the context frees them. */
	CHECK_RC(sim->ctx_destroy(ex, ctx), CUDA_SUCCESS);
	sim->close(ex);

	if (have_twins)
		check_fault(img, len);
}

/* ------------------------------------------------------------------ */
/* hostile images */

static uint64_t xorshift(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static bool acceptable(int32_t rc)
{
	return rc == CUDA_SUCCESS || rc == CUDA_ERROR_INVALID_IMAGE ||
	       rc == CUDA_ERROR_INVALID_PTX ||
	       rc == CUDA_ERROR_NO_BINARY_FOR_GPU ||
	       rc == CUDA_ERROR_NOT_SUPPORTED ||
	       rc == CUDA_ERROR_OUT_OF_MEMORY;
}

/* Use what a damaged image yields, so the sanitizers see it touched. */
static void poke_module(struct pvgpu_exec *ex, uint64_t m)
{
	struct pvgpu_param_info layout[8];
	uint64_t fn, d, sz;
	uint32_t count;
	int32_t v;
	size_t i;

	for (i = 0; i < sizeof(want_kernels) / sizeof(want_kernels[0]); i++) {
		if (sim->module_symbol(ex, m, PVGPU_SYM_FUNCTION,
					want_kernels[i].name, &fn, NULL))
			continue;
		sim->function_params(ex, fn, layout, 8, &count);
		func_get_attr(ex, fn,
					CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES,
					&v);
	}
	sim->module_symbol(ex, m, PVGPU_SYM_GLOBAL, "gtable", &d, &sz);
	CHECK_RC(sim->module_unload(ex, m), CUDA_SUCCESS);
}

/*
 * Every truncation, then random damage.  `strict`: the image is a
 * container (fatbinary or cubin) whose every truncation must be refused
 * as CUDA_ERROR_INVALID_IMAGE; PTX text may still parse when cut short.
 */
static void check_hostile(const unsigned char *img, size_t len, bool strict)
{
	uint64_t ctx, m, seed = 0x9e3779b97f4a7c15ULL ^ len;
	struct pvgpu_exec *ex;
	unsigned char *copy = malloc(len ? len : 1);
	size_t cut, step, i;
	int bad = 0, iter;
	int32_t rc;

	/* A small device, so a damaged size cannot ask for the machine. */
	setenv("PVGPU_SIM_MEMORY_MB", "256", 1);
	ex = open_ctx(&ctx);
	unsetenv("PVGPU_SIM_MEMORY_MB");
	CHECK(ex != NULL && copy != NULL);
	if (!ex || !copy)
		goto out;

	step = len / 3000 ? len / 3000 : 1;
	for (cut = 0; cut < len; cut += cut < 512 ? 1 : step) {
		/* A fresh buffer of exactly `cut` bytes, for ASan. */
		unsigned char *t = malloc(cut ? cut : 1);

		if (!t)
			break;
		memcpy(t, img, cut);
		rc = sim->module_load(ex, t, cut, &m);
		free(t);
		if (strict ? rc != CUDA_ERROR_INVALID_IMAGE : !acceptable(rc)) {
			if (bad++ < 5)
				fprintf(stderr, "[%s] cut at %zu: %d\n", what,
					cut, rc);
		}
		if (!rc)
			poke_module(ex, m);
	}
	CHECK(bad == 0);

	bad = 0;
	for (iter = 0; iter < 3000; iter++) {
		int flips = 1 + (int)(xorshift(&seed) % 4);

		memcpy(copy, img, len);
		for (i = 0; i < (size_t)flips; i++) {
			size_t at = (size_t)(xorshift(&seed) % len);
			/* Mostly in the headers, where the offsets live. */
			if (xorshift(&seed) % 2 && len > 256)
				at %= 256;
			copy[at] = (unsigned char)xorshift(&seed);
		}
		rc = sim->module_load(ex, copy, len, &m);
		if (!acceptable(rc) && bad++ < 5)
			fprintf(stderr, "[%s] damaged image: %d\n", what, rc);
		if (!rc)
			poke_module(ex, m);
	}
	CHECK(bad == 0);
	CHECK_RC(sim->synchronize(ex, true, 0), CUDA_SUCCESS);
out:
	if (ex)
		sim->close(ex);
	free(copy);
}

/* Malformed containers built here, needing no compiler. */
static void check_synthetic_bad(void)
{
	static const unsigned char junk[] = "\x01\x02\x03 not an image at all";
	unsigned char elf[128], *fb;
	uint64_t ctx, m;
	struct pvgpu_exec *ex = open_ctx(&ctx);
	size_t len;

	CHECK(ex != NULL);
	if (!ex)
		return;
	what = "synthetic";
	CHECK_RC(sim->module_load(ex, junk, sizeof(junk), &m),
		 CUDA_ERROR_INVALID_IMAGE);
	CHECK_RC(sim->module_load(ex, junk, 0, &m), CUDA_ERROR_INVALID_IMAGE);
	CHECK_RC(sim->module_load(ex, NULL, 10, &m), CUDA_ERROR_INVALID_VALUE);
	CHECK_RC(sim->module_load(ex, junk, sizeof(junk), NULL),
		 CUDA_ERROR_INVALID_VALUE);

	/* ELF magic and nothing sensible behind it. */
	memset(elf, 0xff, sizeof(elf));
	memcpy(elf, "\177ELF\002\001\001\101", 8);
	CHECK_RC(sim->module_load(ex, elf, sizeof(elf), &m),
		 CUDA_ERROR_INVALID_IMAGE);

	/* A fatbinary whose only code is for another GPU. */
	fb = make_fatbin(2, 80, elf, sizeof(elf), &len);
	CHECK(fb != NULL);
	if (fb) {
		CHECK_RC(sim->module_load(ex, fb, len, &m),
			 CUDA_ERROR_NO_BINARY_FOR_GPU);
		free(fb);
	}
	/* An sm_90 entry that is not ELF. */
	fb = make_fatbin(2, 90, elf, sizeof(elf), &len);
	if (fb) {
		memset(fb + 16 + 64, 0, 4);
		CHECK_RC(sim->module_load(ex, fb, len, &m),
			 CUDA_ERROR_INVALID_IMAGE);
		/* Claims more bytes than it has. */
		put_le(fb + 8, len, 8);
		CHECK_RC(sim->module_load(ex, fb, len, &m),
			 CUDA_ERROR_INVALID_IMAGE);
		/* An entry header too small to be one. */
		put_le(fb + 8, len - 16, 8);
		put_le(fb + 16 + 4, 8, 4);
		CHECK_RC(sim->module_load(ex, fb, len, &m),
			 CUDA_ERROR_INVALID_IMAGE);
		/* A payload running past the container. */
		put_le(fb + 16 + 4, 64, 4);
		put_le(fb + 16 + 8, 1ULL << 62, 8);
		CHECK_RC(sim->module_load(ex, fb, len, &m),
			 CUDA_ERROR_INVALID_IMAGE);
		/* Compressed, with a compressed size beyond the payload. */
		put_le(fb + 16 + 8, 128, 8);
		put_le(fb + 16 + 0x28, 0x8011, 8);
		put_le(fb + 16 + 0x10, 4096, 4);
		CHECK_RC(sim->module_load(ex, fb, len, &m),
			 CUDA_ERROR_INVALID_IMAGE);
		free(fb);
	}
	/* PTX for a newer GPU; PTX that does not parse. */
	{
		static const char newer[] =
			".version 9.0\n.target sm_100\n.address_size 64\n";
		static const char broken[] =
			".version 9.0\n.target sm_90\n"
			".visible .entry k(.param .u64 a { ret; }\n";

		CHECK_RC(sim->module_load(ex, newer, sizeof(newer), &m),
			 CUDA_ERROR_NO_BINARY_FOR_GPU);
		CHECK_RC(sim->module_load(ex, broken, sizeof(broken), &m),
			 CUDA_ERROR_INVALID_PTX);
	}
	CHECK_RC(sim->synchronize(ex, true, 0), CUDA_SUCCESS);
	sim->close(ex);
}

int main(int argc, char **argv)
{
	unsigned char *fb;
	size_t len;
	int i;

	sim = &pvgpu_exec_sim;
	have_twins = getenv("PVGPU_SIM_TWINS") && *getenv("PVGPU_SIM_TWINS");

	check_synthetic_bad();

	what = "ptx text";
	check_image((const unsigned char *)ptx_module, sizeof(ptx_module));
	check_hostile((const unsigned char *)ptx_module, sizeof(ptx_module),
		      false);
	fb = make_fatbin(1, 90, ptx_module, sizeof(ptx_module), &len);
	CHECK(fb != NULL);
	if (fb) {
		what = "fatbin of ptx text";
		check_image(fb, len);
		check_hostile(fb, len, true);
		free(fb);
	}

	for (i = 1; i < argc; i++) {
		unsigned char *img;
		bool strict;

		what = argv[i];
		if (read_file(argv[i], &img, &len)) {
			fprintf(stderr, "cannot read %s\n", argv[i]);
			failed++;
			continue;
		}
		strict = len >= 4 && (!memcmp(img, "\177ELF", 4) ||
				      !memcmp(img, "\x50\xed\x55\xba", 4));
		check_image(img, len);
		check_hostile(img, len, strict);
		free(img);
	}

	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
