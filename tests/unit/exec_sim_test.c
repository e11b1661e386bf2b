/*
 * exec_sim_test.c - unit tests for the "sim" executor (and a smoke test of
 * executor lookup and of the "cuda" executor's failure path).
 *
 * Exit status 0 when every check passes; prints "N passed, M failed".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>

#include "exec_sim.h"
#include "pvgpu_generic.h"

static int passed, failed;

#define CHECK(cond) do {						\
	if (cond) {							\
		passed++;						\
	} else {							\
		failed++;						\
		fprintf(stderr, "%s:%d: check failed: %s\n",		\
			__FILE__, __LINE__, #cond);			\
	}								\
} while (0)

#define CHECK_RC(expr, want) do {					\
	int32_t rc_ = (expr);						\
	if (rc_ == (int32_t)(want)) {					\
		passed++;						\
	} else {							\
		failed++;						\
		fprintf(stderr, "%s:%d: %s returned %d, expected %s (%d)\n", \
			__FILE__, __LINE__, #expr, rc_, #want, (int)(want)); \
	}								\
} while (0)

static const struct pvgpu_executor_ops *sim;

/* cuEventElapsedTime as the worker calls it: the generic driver call, its
 * float result the bits of the first slot. */
static int32_t elapsed(struct pvgpu_exec *ex, uint64_t start, uint64_t end,
		       float *ms)
{
	uint64_t a[PVGPU_GENERIC_MAX_ARGS] = { ms != NULL, start, end };
	int32_t rc = sim->driver_call(ex, pvgpu_generic_find(PVGPU_GENERIC_cuEventElapsedTime_v2), a);

	if (ms)
		memcpy(ms, &a[0], sizeof(*ms));
	return rc;
}

/* cuStreamWaitEvent as the guest's call reaches the executor. */
static int32_t wait_event(struct pvgpu_exec *ex, uint64_t stream,
			  uint64_t event, uint32_t flags)
{
	uint64_t a[PVGPU_GENERIC_MAX_ARGS] = { stream, event, flags };

	return sim->driver_call(ex, pvgpu_generic_find(PVGPU_GENERIC_cuStreamWaitEvent), a);
}

static struct pvgpu_exec *open_sim(const char *devices, const char *mb,
				   const struct pvgpu_exec_config *cfg)
{
	char err[256] = "";
	struct pvgpu_exec *ex;

	if (devices)
		setenv("PVGPU_SIM_DEVICES", devices, 1);
	else
		unsetenv("PVGPU_SIM_DEVICES");
	if (mb)
		setenv("PVGPU_SIM_MEMORY_MB", mb, 1);
	else
		unsetenv("PVGPU_SIM_MEMORY_MB");
	ex = sim->open(cfg, err, sizeof(err));
	if (!ex)
		fprintf(stderr, "sim open failed: %s\n", err);
	return ex;
}

/* A session with one context on device 0, made current. */
static struct pvgpu_exec *open_with_ctx(const char *mb, uint64_t *ctx)
{
	struct pvgpu_exec *ex = open_sim(NULL, mb, NULL);

	if (!ex)
		return NULL;
	if (sim->ctx_create(ex, 0, ctx) || sim->ctx_set(ex, *ctx)) {
		sim->close(ex);
		return NULL;
	}
	return ex;
}

static void test_lookup(void)
{
	char dir[4096], err[512] = "";
	const struct pvgpu_executor_ops *plugin;

	/* build/tests/unit/exec_sim_test -> build/lib/pvgpud/exec-sim.so */
	ssize_t n = readlink("/proc/self/exe", dir, sizeof(dir) - 32);

	CHECK(n > 0);
	if (n <= 0)
		return;
	dir[n] = '\0';
	strcpy(strrchr(dir, '/'), "/../../lib/pvgpud");
	CHECK(pvgpu_executor_find("cuda", dir, err, sizeof(err)) == &pvgpu_exec_cuda);
	plugin = pvgpu_executor_find("sim", dir, err, sizeof(err));
	CHECK(plugin && !strcmp(plugin->name, "sim") && plugin != &pvgpu_exec_sim);
	CHECK(pvgpu_executor_find("nope", dir, err, sizeof(err)) == NULL);
	CHECK(strstr(err, "no executor \"nope\"") != NULL);
	CHECK(pvgpu_executor_find("../x", dir, err, sizeof(err)) == NULL);
}

/* Without a GPU, open must fail with one line; with one, it must work. */
static void test_cuda_open(void)
{
	char err[256] = "";
	struct pvgpu_exec *ex = pvgpu_exec_cuda.open(NULL, err, sizeof(err));
	int32_t n = 0;

	if (!ex) {
		CHECK(err[0] != '\0');
		CHECK(strchr(err, '\n') == NULL);
		printf("cuda executor unavailable: %s\n", err);
		return;
	}
	CHECK_RC(pvgpu_exec_cuda.driver_info(ex, NULL, &n), CUDA_SUCCESS);
	CHECK(n >= 1);
	pvgpu_exec_cuda.close(ex);
}

static void test_devices(void)
{
	struct pvgpu_exec *ex = open_sim(NULL, NULL, NULL), *ex2;
	struct pvgpu_exec_device d, d0, d1;
	int32_t n = -1, v = -1;

	CHECK(ex != NULL);
	if (!ex)
		return;
	CHECK_RC(sim->driver_info(ex, &v, NULL), CUDA_SUCCESS);
	CHECK(v == 13000);
	CHECK_RC(sim->driver_info(ex, NULL, &n), CUDA_SUCCESS);
	CHECK(n == 1);
	CHECK_RC(sim->device_info(ex, 0, &d), CUDA_SUCCESS);
	CHECK(!strcmp(d.name, "pvgpu simulated device"));
	CHECK(d.total_mem == 16384ULL << 20);
	CHECK_RC(sim->device_info(ex, 1, &d), CUDA_ERROR_INVALID_DEVICE);
	CHECK_RC(sim->device_info(ex, -1, &d), CUDA_ERROR_INVALID_DEVICE);

	CHECK_RC(sim->device_attribute(ex, 0,
		 CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, &v), CUDA_SUCCESS);
	CHECK(v == 9);
	CHECK_RC(sim->device_attribute(ex, 0,
		 CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, &v), CUDA_SUCCESS);
	CHECK(v == 0);
	CHECK_RC(sim->device_attribute(ex, 0,
		 CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, &v), CUDA_SUCCESS);
	CHECK(v == 132);
	CHECK_RC(sim->device_attribute(ex, 0, CU_DEVICE_ATTRIBUTE_WARP_SIZE, &v),
		 CUDA_SUCCESS);
	CHECK(v == 32);
	CHECK_RC(sim->device_attribute(ex, 0,
		 CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, &v), CUDA_SUCCESS);
	CHECK(v == 2147483647);
	CHECK_RC(sim->device_attribute(ex, 0,
		 CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, &v),
		 CUDA_SUCCESS);
	CHECK(v == 227 * 1024);
	CHECK_RC(sim->device_attribute(ex, 0,
		 CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, &v), CUDA_SUCCESS);
	CHECK(v == 2);
	CHECK_RC(sim->device_attribute(ex, 0, 0, &v), CUDA_ERROR_INVALID_VALUE);
	CHECK_RC(sim->device_attribute(ex, 0, CU_DEVICE_ATTRIBUTE_MAX, &v),
		 CUDA_ERROR_INVALID_VALUE);
	CHECK_RC(sim->device_attribute(ex, 0, 99999, &v),
		 CUDA_ERROR_INVALID_VALUE);
	CHECK_RC(sim->device_attribute(ex, 3, CU_DEVICE_ATTRIBUTE_WARP_SIZE, &v),
		 CUDA_ERROR_INVALID_DEVICE);

	/* Deterministic per index, different between indices. */
	ex2 = open_sim("3", NULL, NULL);
	CHECK(ex2 != NULL);
	if (ex2) {
		CHECK_RC(sim->driver_info(ex2, NULL, &n), CUDA_SUCCESS);
		CHECK(n == 3);
		CHECK_RC(sim->device_info(ex, 0, &d0), CUDA_SUCCESS);
		CHECK_RC(sim->device_info(ex2, 0, &d1), CUDA_SUCCESS);
		CHECK(!memcmp(d0.uuid, d1.uuid, 16));
		CHECK_RC(sim->device_info(ex2, 2, &d1), CUDA_SUCCESS);
		CHECK(memcmp(d0.uuid, d1.uuid, 16) != 0);
		CHECK_RC(sim->device_info(ex2, 3, &d1),
			 CUDA_ERROR_INVALID_DEVICE);
		sim->close(ex2);
	}
	sim->close(ex);
}

static void test_bad_env(void)
{
	char err[256] = "";
	struct pvgpu_exec *ex;

	setenv("PVGPU_SIM_DEVICES", "9", 1);
	ex = sim->open(NULL, err, sizeof(err));
	CHECK(ex == NULL);
	CHECK(strstr(err, "PVGPU_SIM_DEVICES") != NULL);
	setenv("PVGPU_SIM_DEVICES", "1", 1);
	setenv("PVGPU_SIM_MEMORY_MB", "lots", 1);
	err[0] = '\0';
	ex = sim->open(NULL, err, sizeof(err));
	CHECK(ex == NULL);
	CHECK(strstr(err, "PVGPU_SIM_MEMORY_MB") != NULL);
	unsetenv("PVGPU_SIM_DEVICES");
	unsetenv("PVGPU_SIM_MEMORY_MB");
}

static void test_no_context(void)
{
	struct pvgpu_exec *ex = open_sim(NULL, NULL, NULL);
	uint64_t h, ctx, f, t;
	void *p;
	char buf[4];

	CHECK(ex != NULL);
	if (!ex)
		return;
	CHECK_RC(sim->mem_alloc(ex, 16, &h), CUDA_ERROR_INVALID_CONTEXT);
	CHECK_RC(sim->mem_get_info(ex, &f, &t), CUDA_ERROR_INVALID_CONTEXT);
	CHECK_RC(sim->stream_create(ex, 0, 0, &h), CUDA_ERROR_INVALID_CONTEXT);
	CHECK_RC(pvgpu_exec_event_create(sim, ex, 0, &h), CUDA_ERROR_INVALID_CONTEXT);
	CHECK_RC(sim->host_alloc(ex, 64, &p), CUDA_ERROR_INVALID_CONTEXT);
	CHECK_RC(sim->synchronize(ex, true, 0), CUDA_ERROR_INVALID_CONTEXT);
	CHECK_RC(pvgpu_exec_htod(sim, ex, 0x7e0000001000ULL, buf, 4, true, 0),
		 CUDA_ERROR_INVALID_CONTEXT);
	CHECK_RC(sim->ctx_create(ex, 1, &ctx), CUDA_ERROR_INVALID_DEVICE);
	CHECK_RC(sim->ctx_set(ex, 12345), CUDA_ERROR_INVALID_CONTEXT);
	CHECK_RC(sim->ctx_destroy(ex, 12345), CUDA_ERROR_INVALID_CONTEXT);
	CHECK_RC(sim->ctx_create(ex, 0, &ctx), CUDA_SUCCESS);
	/* Created, not yet current. */
	CHECK_RC(sim->mem_alloc(ex, 16, &h), CUDA_ERROR_INVALID_CONTEXT);
	CHECK_RC(sim->ctx_set(ex, ctx), CUDA_SUCCESS);
	CHECK_RC(sim->mem_alloc(ex, 16, &h), CUDA_SUCCESS);
	CHECK_RC(sim->ctx_set(ex, 0), CUDA_SUCCESS);
	CHECK_RC(sim->mem_free(ex, h), CUDA_ERROR_INVALID_CONTEXT);
	sim->close(ex);			/* frees the allocation still held */
}

static void test_copies(void)
{
	uint64_t ctx, a, b, c;
	struct pvgpu_exec *ex = open_with_ctx(NULL, &ctx);
	unsigned char src[1000], dst[1000];
	size_t i;

	CHECK(ex != NULL);
	if (!ex)
		return;
	for (i = 0; i < sizeof(src); i++)
		src[i] = (unsigned char)(i * 7 + 3);

	CHECK_RC(sim->mem_alloc(ex, 1000, &a), CUDA_SUCCESS);
	CHECK_RC(sim->mem_alloc(ex, 1000, &b), CUDA_SUCCESS);
	CHECK_RC(sim->mem_alloc(ex, 1, &c), CUDA_SUCCESS);
	CHECK(a % 256 == 0 && b % 256 == 0 && c % 256 == 0);
	CHECK(a >= 0x7e0000000000ULL);
	/* An unmapped gap between neighbours. */
	CHECK(b > a + 1000 && c > b + 1000);

	/* Fresh memory reads as zero. */
	memset(dst, 0xaa, sizeof(dst));
	CHECK_RC(pvgpu_exec_dtoh(sim, ex, dst, a, 1000, true, 0), CUDA_SUCCESS);
	for (i = 0; i < 1000 && !dst[i]; i++)
		;
	CHECK(i == 1000);

	CHECK_RC(pvgpu_exec_htod(sim, ex, a, src, 1000, true, 0), CUDA_SUCCESS);
	CHECK_RC(pvgpu_exec_dtod(sim, ex, b, a, 1000, 0), CUDA_SUCCESS);
	memset(dst, 0, sizeof(dst));
	CHECK_RC(pvgpu_exec_dtoh(sim, ex, dst, b, 1000, true, 0), CUDA_SUCCESS);
	CHECK(!memcmp(src, dst, 1000));

	/* Interior ranges, up to the last byte. */
	CHECK_RC(pvgpu_exec_dtoh(sim, ex, dst, a + 500, 500, true, 0), CUDA_SUCCESS);
	CHECK(!memcmp(src + 500, dst, 500));
	CHECK_RC(pvgpu_exec_htod(sim, ex, a + 999, src, 1, true, 0), CUDA_SUCCESS);
	/* Overlapping device-to-device copies behave like memmove. */
	CHECK_RC(pvgpu_exec_htod(sim, ex, a, src, 1000, true, 0), CUDA_SUCCESS);
	CHECK_RC(pvgpu_exec_dtod(sim, ex, a + 10, a, 100, 0), CUDA_SUCCESS);
	CHECK_RC(pvgpu_exec_dtoh(sim, ex, dst, a + 10, 100, true, 0), CUDA_SUCCESS);
	CHECK(!memcmp(src, dst, 100));
	/* Zero-byte copies do nothing and succeed. */
	CHECK_RC(pvgpu_exec_htod(sim, ex, a, src, 0, true, 0), CUDA_SUCCESS);

	/* Out of range: one past the end, before the start, straddling. */
	CHECK_RC(pvgpu_exec_htod(sim, ex, a + 999, src, 2, true, 0),
		 CUDA_ERROR_INVALID_VALUE);
	CHECK_RC(pvgpu_exec_htod(sim, ex, a + 1000, src, 1, true, 0),
		 CUDA_ERROR_INVALID_VALUE);
	CHECK_RC(pvgpu_exec_dtoh(sim, ex, dst, a - 1, 1, true, 0),
		 CUDA_ERROR_INVALID_VALUE);
	CHECK_RC(pvgpu_exec_dtoh(sim, ex, dst, a, 1001, true, 0),
		 CUDA_ERROR_INVALID_VALUE);
	CHECK_RC(pvgpu_exec_dtoh(sim, ex, dst, a + 500, b + 500 - a, true, 0),
		 CUDA_ERROR_INVALID_VALUE);
	CHECK_RC(pvgpu_exec_dtod(sim, ex, b + 1, a, 1000, 0),
		 CUDA_ERROR_INVALID_VALUE);
	CHECK_RC(pvgpu_exec_dtod(sim, ex, b, a + 1, 1000, 0),
		 CUDA_ERROR_INVALID_VALUE);
	CHECK_RC(pvgpu_exec_htod(sim, ex, c, src, 2, true, 0),
		 CUDA_ERROR_INVALID_VALUE);
	CHECK_RC(pvgpu_exec_htod(sim, ex, 0, src, 1, true, 0),
		 CUDA_ERROR_INVALID_VALUE);
	CHECK_RC(pvgpu_exec_htod(sim, ex, a, src, UINT64_MAX, true, 0),
		 CUDA_ERROR_INVALID_VALUE);
	CHECK_RC(pvgpu_exec_htod(sim, ex, UINT64_MAX, src, 2, true, 0),
		 CUDA_ERROR_INVALID_VALUE);
	CHECK_RC(pvgpu_exec_htod(sim, ex, a, NULL, 1, true, 0),
		 CUDA_ERROR_INVALID_VALUE);

	/* Freed memory is gone; freeing twice or mid-block fails. */
	CHECK_RC(sim->mem_free(ex, b + 1), CUDA_ERROR_INVALID_VALUE);
	CHECK_RC(sim->mem_free(ex, b), CUDA_SUCCESS);
	CHECK_RC(sim->mem_free(ex, b), CUDA_ERROR_INVALID_VALUE);
	CHECK_RC(sim->mem_free(ex, 0), CUDA_ERROR_INVALID_VALUE);
	CHECK_RC(pvgpu_exec_dtoh(sim, ex, dst, b, 1, true, 0),
		 CUDA_ERROR_INVALID_VALUE);
	CHECK_RC(pvgpu_exec_dtod(sim, ex, a, b, 10, 0),
		 CUDA_ERROR_INVALID_VALUE);
	CHECK_RC(sim->memset_async(ex, b, 0, 1, 1, 0),
		 CUDA_ERROR_INVALID_VALUE);
	/* Neighbours are untouched by the free. */
	CHECK_RC(pvgpu_exec_dtoh(sim, ex, dst, a, 1, true, 0), CUDA_SUCCESS);
	CHECK_RC(pvgpu_exec_dtoh(sim, ex, dst, c, 1, true, 0), CUDA_SUCCESS);

	CHECK_RC(sim->mem_alloc(ex, 0, &b), CUDA_ERROR_INVALID_VALUE);
	CHECK_RC(sim->mem_free(ex, a), CUDA_SUCCESS);
	CHECK_RC(sim->mem_free(ex, c), CUDA_SUCCESS);
	sim->close(ex);
}

static void test_memset(void)
{
	uint64_t ctx, a;
	struct pvgpu_exec *ex = open_with_ctx(NULL, &ctx);
	unsigned char buf[64];
	uint16_t h16[8];
	uint32_t h32[8];
	int i, ok;

	CHECK(ex != NULL);
	if (!ex)
		return;
	CHECK_RC(sim->mem_alloc(ex, 64, &a), CUDA_SUCCESS);

	/* 8-bit: only the low byte counts; only `count` bytes change. */
	CHECK_RC(sim->memset_async(ex, a, 0x1ab, 1, 63, 0), CUDA_SUCCESS);
	CHECK_RC(pvgpu_exec_dtoh(sim, ex, buf, a, 64, true, 0), CUDA_SUCCESS);
	for (ok = 1, i = 0; i < 63; i++)
		ok &= buf[i] == 0xab;
	CHECK(ok && buf[63] == 0);

	CHECK_RC(sim->memset_async(ex, a + 2, 0xbeef, 2, 8, 0), CUDA_SUCCESS);
	CHECK_RC(pvgpu_exec_dtoh(sim, ex, h16, a + 2, 16, true, 0), CUDA_SUCCESS);
	for (ok = 1, i = 0; i < 8; i++)
		ok &= h16[i] == 0xbeef;
	CHECK(ok);
	CHECK_RC(pvgpu_exec_dtoh(sim, ex, buf, a, 2, true, 0), CUDA_SUCCESS);
	CHECK(buf[0] == 0xab && buf[1] == 0xab);

	CHECK_RC(sim->memset_async(ex, a + 32, 0xdeadbeef, 4, 8, 0),
		 CUDA_SUCCESS);
	CHECK_RC(pvgpu_exec_dtoh(sim, ex, h32, a + 32, 32, true, 0), CUDA_SUCCESS);
	for (ok = 1, i = 0; i < 8; i++)
		ok &= h32[i] == 0xdeadbeef;
	CHECK(ok);

	/* Misaligned, bad element size, out of range. */
	CHECK_RC(sim->memset_async(ex, a + 1, 0, 2, 1, 0),
		 CUDA_ERROR_INVALID_VALUE);
	CHECK_RC(sim->memset_async(ex, a + 2, 0, 4, 1, 0),
		 CUDA_ERROR_INVALID_VALUE);
	CHECK_RC(sim->memset_async(ex, a, 0, 3, 1, 0),
		 CUDA_ERROR_INVALID_VALUE);
	CHECK_RC(sim->memset_async(ex, a, 0, 4, 17, 0),
		 CUDA_ERROR_INVALID_VALUE);
	CHECK_RC(sim->memset_async(ex, a + 60, 0, 2, 3, 0),
		 CUDA_ERROR_INVALID_VALUE);
	CHECK_RC(sim->memset_async(ex, a, 0, 4, UINT64_MAX / 2, 0),
		 CUDA_ERROR_INVALID_VALUE);
	CHECK_RC(sim->memset_async(ex, a, 0, 4, 16, 0), CUDA_SUCCESS);
	sim->close(ex);
}

/* Other sessions hold `other` bytes; this one reports its own on top. */
struct fake_accounting {
	uint64_t other;
};

static uint64_t fake_used(void *arg, int32_t dev)
{
	struct fake_accounting *fa = arg;

	(void)dev;
	return fa->other;
}

static void test_capacity(void)
{
	struct fake_accounting fa = { .other = 0 };
	struct pvgpu_exec_config cfg = { .device_mem_used = fake_used,
					 .arg = &fa };
	uint64_t ctx, a, b, f, t;
	struct pvgpu_exec *ex = open_with_ctx("4", &ctx);

	CHECK(ex != NULL);
	if (!ex)
		return;
	CHECK_RC(sim->mem_get_info(ex, &f, &t), CUDA_SUCCESS);
	CHECK(t == 4ULL << 20 && f == t);
	CHECK_RC(sim->mem_alloc(ex, 3 << 20, &a), CUDA_SUCCESS);
	CHECK_RC(sim->mem_get_info(ex, &f, &t), CUDA_SUCCESS);
	CHECK(f == 1ULL << 20);
	CHECK_RC(sim->mem_alloc(ex, 2 << 20, &b), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_RC(sim->mem_alloc(ex, 1 << 20, &b), CUDA_SUCCESS);
	CHECK_RC(sim->mem_alloc(ex, 1, &b), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_RC(sim->mem_alloc(ex, UINT64_MAX, &b), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK_RC(sim->mem_free(ex, a), CUDA_SUCCESS);
	CHECK_RC(sim->mem_alloc(ex, 2 << 20, &a), CUDA_SUCCESS);
	sim->close(ex);

	/* The device is shared: other sessions' memory counts too. */
	setenv("PVGPU_SIM_MEMORY_MB", "4", 1);
	ex = open_sim(NULL, "4", &cfg);
	CHECK(ex != NULL);
	if (!ex)
		return;
	CHECK_RC(sim->ctx_create(ex, 0, &ctx), CUDA_SUCCESS);
	CHECK_RC(sim->ctx_set(ex, ctx), CUDA_SUCCESS);
	fa.other = 3 << 20;
	CHECK_RC(sim->mem_get_info(ex, &f, &t), CUDA_SUCCESS);
	CHECK(f == 1ULL << 20);
	CHECK_RC(sim->mem_alloc(ex, 2 << 20, &a), CUDA_ERROR_OUT_OF_MEMORY);
	fa.other = 5 << 20;		/* overcommitted elsewhere */
	CHECK_RC(sim->mem_get_info(ex, &f, &t), CUDA_SUCCESS);
	CHECK(f == 0);
	CHECK_RC(sim->mem_alloc(ex, 1, &a), CUDA_ERROR_OUT_OF_MEMORY);
	fa.other = 0;
	CHECK_RC(sim->mem_alloc(ex, 4 << 20, &a), CUDA_SUCCESS);
	/* The shared count lags behind ours: ours still holds. */
	CHECK_RC(sim->mem_alloc(ex, 1, &b), CUDA_ERROR_OUT_OF_MEMORY);
	sim->close(ex);

	/* A NULL callback means: count only our own. */
	cfg.device_mem_used = NULL;
	ex = open_sim(NULL, "4", &cfg);
	CHECK(ex != NULL);
	if (ex) {
		CHECK_RC(sim->ctx_create(ex, 0, &ctx), CUDA_SUCCESS);
		CHECK_RC(sim->ctx_set(ex, ctx), CUDA_SUCCESS);
		CHECK_RC(sim->mem_alloc(ex, 4 << 20, &a), CUDA_SUCCESS);
		sim->close(ex);
	}
}

static void test_streams(void)
{
	uint64_t ctx, ctx2, s, s2, a, ev;
	struct pvgpu_exec *ex = open_with_ctx(NULL, &ctx);
	char buf[16] = "0123456789abcde";

	CHECK(ex != NULL);
	if (!ex)
		return;
	CHECK_RC(sim->mem_alloc(ex, 16, &a), CUDA_SUCCESS);
	CHECK_RC(sim->stream_create(ex, CU_STREAM_NON_BLOCKING, -1, &s),
		 CUDA_SUCCESS);
	CHECK(s != 0);
	CHECK_RC(sim->stream_create(ex, 0x80, 0, &s2), CUDA_ERROR_INVALID_VALUE);
	CHECK_RC(pvgpu_exec_htod(sim, ex, a, buf, 16, true, s), CUDA_SUCCESS);
	CHECK_RC(pvgpu_exec_stream_query(sim, ex, s), CUDA_SUCCESS);
	CHECK_RC(pvgpu_exec_stream_query(sim, ex, 0), CUDA_SUCCESS);
	CHECK_RC(sim->synchronize(ex, false, s), CUDA_SUCCESS);
	CHECK_RC(sim->synchronize(ex, false, 0), CUDA_SUCCESS);

	/* Handles that were never issued, or are of another kind. */
	CHECK_RC(pvgpu_exec_stream_query(sim, ex, 0xdeadbeef), CUDA_ERROR_INVALID_HANDLE);
	CHECK_RC(pvgpu_exec_stream_query(sim, ex, ctx), CUDA_ERROR_INVALID_HANDLE);
	CHECK_RC(pvgpu_exec_htod(sim, ex, a, buf, 16, true, 12345),
		 CUDA_ERROR_INVALID_HANDLE);
	CHECK_RC(sim->memset_async(ex, a, 0, 1, 1, 12345),
		 CUDA_ERROR_INVALID_HANDLE);
	CHECK_RC(sim->stream_destroy(ex, 0), CUDA_ERROR_INVALID_HANDLE);

	/* A stream of another context is not usable here. */
	CHECK_RC(sim->ctx_create(ex, 0, &ctx2), CUDA_SUCCESS);
	CHECK_RC(sim->ctx_set(ex, ctx2), CUDA_SUCCESS);
	CHECK_RC(pvgpu_exec_stream_query(sim, ex, s), CUDA_ERROR_INVALID_HANDLE);
	/* ... but unified addressing lets it copy into ctx's memory. */
	CHECK_RC(pvgpu_exec_dtoh(sim, ex, buf, a, 16, true, 0), CUDA_SUCCESS);
	CHECK_RC(sim->ctx_set(ex, ctx), CUDA_SUCCESS);

	CHECK_RC(pvgpu_exec_event_create(sim, ex, 0, &ev), CUDA_SUCCESS);
	CHECK_RC(wait_event(ex, s, ev, 0), CUDA_SUCCESS);
	CHECK_RC(wait_event(ex, s, 0, 0), CUDA_ERROR_INVALID_HANDLE);
	CHECK_RC(wait_event(ex, s, s, 0), CUDA_ERROR_INVALID_HANDLE);
	CHECK_RC(wait_event(ex, 777, ev, 0),
		 CUDA_ERROR_INVALID_HANDLE);

	CHECK_RC(sim->stream_destroy(ex, s), CUDA_SUCCESS);
	CHECK_RC(sim->stream_destroy(ex, s), CUDA_ERROR_INVALID_HANDLE);
	CHECK_RC(pvgpu_exec_stream_query(sim, ex, s), CUDA_ERROR_INVALID_HANDLE);
	CHECK_RC(pvgpu_exec_htod(sim, ex, a, buf, 16, true, s),
		 CUDA_ERROR_INVALID_HANDLE);
	sim->close(ex);
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts))
		;
}

static void test_events(void)
{
	uint64_t ctx, s, e1, e2, nt;
	struct pvgpu_exec *ex = open_with_ctx(NULL, &ctx);
	float ms = -1;

	CHECK(ex != NULL);
	if (!ex)
		return;
	CHECK_RC(sim->stream_create(ex, 0, 0, &s), CUDA_SUCCESS);
	CHECK_RC(pvgpu_exec_event_create(sim, ex, CU_EVENT_DEFAULT, &e1), CUDA_SUCCESS);
	CHECK_RC(pvgpu_exec_event_create(sim, ex, CU_EVENT_BLOCKING_SYNC, &e2),
		 CUDA_SUCCESS);
	CHECK_RC(pvgpu_exec_event_create(sim, ex, CU_EVENT_DISABLE_TIMING, &nt),
		 CUDA_SUCCESS);
	CHECK_RC(pvgpu_exec_event_create(sim, ex, 0x40, &nt), CUDA_ERROR_INVALID_VALUE);
	CHECK_RC(pvgpu_exec_event_create(sim, ex, CU_EVENT_INTERPROCESS, &nt),
		 CUDA_ERROR_INVALID_VALUE);

	/* Never recorded: complete for query, invalid for timing. */
	CHECK_RC(pvgpu_exec_event_query(sim, ex, e1), CUDA_SUCCESS);
	CHECK_RC(pvgpu_exec_event_synchronize(sim, ex, e1), CUDA_SUCCESS);
	CHECK_RC(elapsed(ex, e1, e2, &ms), CUDA_ERROR_INVALID_HANDLE);

	CHECK_RC(pvgpu_exec_event_record(sim, ex, e1, 0), CUDA_SUCCESS);
	CHECK_RC(elapsed(ex, e1, e2, &ms), CUDA_ERROR_INVALID_HANDLE);
	sleep_ms(20);
	CHECK_RC(pvgpu_exec_event_record(sim, ex, e2, s), CUDA_SUCCESS);
	CHECK_RC(pvgpu_exec_event_query(sim, ex, e2), CUDA_SUCCESS);
	CHECK_RC(pvgpu_exec_event_synchronize(sim, ex, e2), CUDA_SUCCESS);
	CHECK_RC(elapsed(ex, e1, e2, &ms), CUDA_SUCCESS);
	CHECK(ms >= 19.0f && ms < 2000.0f);
	CHECK_RC(elapsed(ex, e1, e1, &ms), CUDA_SUCCESS);
	CHECK(ms == 0.0f);

	/* Timing disabled: recorded or not, no elapsed time. */
	CHECK_RC(pvgpu_exec_event_create(sim, ex, CU_EVENT_DISABLE_TIMING, &nt),
		 CUDA_SUCCESS);
	CHECK_RC(pvgpu_exec_event_record(sim, ex, nt, 0), CUDA_SUCCESS);
	CHECK_RC(pvgpu_exec_event_query(sim, ex, nt), CUDA_SUCCESS);
	CHECK_RC(elapsed(ex, e1, nt, &ms), CUDA_ERROR_INVALID_HANDLE);
	CHECK_RC(elapsed(ex, nt, e2, &ms), CUDA_ERROR_INVALID_HANDLE);

	/* Bad handles. */
	CHECK_RC(pvgpu_exec_event_record(sim, ex, 4242, 0), CUDA_ERROR_INVALID_HANDLE);
	CHECK_RC(pvgpu_exec_event_record(sim, ex, e1, 4242), CUDA_ERROR_INVALID_HANDLE);
	CHECK_RC(pvgpu_exec_event_record(sim, ex, s, 0), CUDA_ERROR_INVALID_HANDLE);
	CHECK_RC(pvgpu_exec_event_query(sim, ex, 0), CUDA_ERROR_INVALID_HANDLE);
	CHECK_RC(pvgpu_exec_event_synchronize(sim, ex, s), CUDA_ERROR_INVALID_HANDLE);
	CHECK_RC(elapsed(ex, e1, 4242, &ms),
		 CUDA_ERROR_INVALID_HANDLE);
	CHECK_RC(pvgpu_exec_event_destroy(sim, ex, e2), CUDA_SUCCESS);
	CHECK_RC(pvgpu_exec_event_destroy(sim, ex, e2), CUDA_ERROR_INVALID_HANDLE);
	CHECK_RC(pvgpu_exec_event_query(sim, ex, e2), CUDA_ERROR_INVALID_HANDLE);
	CHECK_RC(elapsed(ex, e1, e2, &ms), CUDA_ERROR_INVALID_HANDLE);
	sim->close(ex);
}

static void test_ctx_destroy(void)
{
	uint64_t ctx, ctx2, a, a2, s, ev, f, t;
	struct pvgpu_exec *ex = open_with_ctx("64", &ctx);
	void *pinned;
	char buf[8] = "abcdefg";

	CHECK(ex != NULL);
	if (!ex)
		return;
	CHECK_RC(sim->mem_alloc(ex, 48 << 20, &a), CUDA_SUCCESS);
	CHECK_RC(sim->stream_create(ex, 0, 0, &s), CUDA_SUCCESS);
	CHECK_RC(pvgpu_exec_event_create(sim, ex, 0, &ev), CUDA_SUCCESS);
	CHECK_RC(sim->host_alloc(ex, 1000, &pinned), CUDA_SUCCESS);
	CHECK_RC(sim->mem_get_info(ex, &f, &t), CUDA_SUCCESS);
	CHECK(f == 16ULL << 20);

	CHECK_RC(sim->ctx_create(ex, 0, &ctx2), CUDA_SUCCESS);
	CHECK_RC(sim->ctx_set(ex, ctx2), CUDA_SUCCESS);
	CHECK_RC(sim->mem_alloc(ex, 8, &a2), CUDA_SUCCESS);
	CHECK_RC(sim->mem_alloc(ex, 48 << 20, &f), CUDA_ERROR_OUT_OF_MEMORY);

	/* Destroying a context that is not current leaves the current one. */
	CHECK_RC(sim->ctx_destroy(ex, ctx), CUDA_SUCCESS);
	CHECK_RC(sim->ctx_destroy(ex, ctx), CUDA_ERROR_INVALID_CONTEXT);
	CHECK_RC(sim->ctx_set(ex, ctx), CUDA_ERROR_INVALID_CONTEXT);
	CHECK_RC(sim->mem_get_info(ex, &f, &t), CUDA_SUCCESS);
	CHECK(f == (64ULL << 20) - 8);
	CHECK_RC(sim->mem_alloc(ex, 48 << 20, &f), CUDA_SUCCESS);
	CHECK_RC(pvgpu_exec_htod(sim, ex, a, buf, 8, true, 0),
		 CUDA_ERROR_INVALID_VALUE);
	CHECK_RC(pvgpu_exec_htod(sim, ex, a2, buf, 8, true, 0), CUDA_SUCCESS);
	CHECK_RC(sim->mem_free(ex, a), CUDA_ERROR_INVALID_VALUE);
	CHECK_RC(pvgpu_exec_stream_query(sim, ex, s), CUDA_ERROR_INVALID_HANDLE);
	CHECK_RC(pvgpu_exec_event_query(sim, ex, ev), CUDA_ERROR_INVALID_HANDLE);
	/* Pinned memory died with its context, as with cuCtxDestroy. */
	CHECK_RC(sim->host_release(ex, pinned, false), CUDA_ERROR_INVALID_VALUE);

	/* Destroying the current context leaves none current. */
	CHECK_RC(sim->ctx_destroy(ex, ctx2), CUDA_SUCCESS);
	CHECK_RC(sim->mem_alloc(ex, 8, &a2), CUDA_ERROR_INVALID_CONTEXT);
	CHECK_RC(sim->ctx_create(ex, 0, &ctx), CUDA_SUCCESS);
	CHECK_RC(sim->ctx_set(ex, ctx), CUDA_SUCCESS);
	CHECK_RC(sim->mem_get_info(ex, &f, &t), CUDA_SUCCESS);
	CHECK(f == 64ULL << 20);
	sim->close(ex);
}

static void test_host_memory(void)
{
	uint64_t ctx;
	struct pvgpu_exec *ex = open_with_ctx(NULL, &ctx);
	void *p, *q;
	char *win;

	CHECK(ex != NULL);
	if (!ex)
		return;
	CHECK_RC(sim->host_alloc(ex, 12345, &p), CUDA_SUCCESS);
	CHECK(p && (uintptr_t)p % 4096 == 0);
	if (p)
		memset(p, 1, 12345);
	CHECK_RC(sim->host_alloc(ex, 0, &q), CUDA_ERROR_INVALID_VALUE);
	CHECK_RC(sim->host_alloc(ex, 10, &q), CUDA_SUCCESS);
	CHECK_RC(sim->host_release(ex, p, false), CUDA_SUCCESS);
	CHECK_RC(sim->host_release(ex, p, false), CUDA_ERROR_INVALID_VALUE);
	CHECK_RC(sim->host_release(ex, &ctx, false), CUDA_ERROR_INVALID_VALUE);

	win = malloc(1 << 16);
	CHECK(win != NULL);
	if (win) {
		CHECK_RC(sim->host_register(ex, win, 1 << 16), CUDA_SUCCESS);
		CHECK_RC(sim->host_register(ex, win + 4096, 4096),
			 CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
		CHECK_RC(sim->host_register(ex, win, 0),
			 CUDA_ERROR_INVALID_VALUE);
		CHECK_RC(sim->host_release(ex, win + 4096, true),
			 CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
		CHECK_RC(sim->host_release(ex, win, true), CUDA_SUCCESS);
		CHECK_RC(sim->host_release(ex, win, true),
			 CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
		/* Left registered at close: close must not free it. */
		CHECK_RC(sim->host_register(ex, win, 1 << 16), CUDA_SUCCESS);
	}
	sim->close(ex);			/* frees q */
	free(win);
}

/* Module and kernel calls on handles that are not (sim_module_test.c has the rest). */
static void test_kernels_bad_handles(void)
{
	uint64_t ctx, m = 0, fn = 0, d = 0, sz = 0;
	struct pvgpu_exec *ex = open_with_ctx(NULL, &ctx);
	struct pvgpu_launch l = { .grid = { 1, 1, 1 }, .block = { 1, 1, 1 } };
	char image[16] = "";

	CHECK(ex != NULL);
	if (!ex)
		return;
	CHECK_RC(sim->module_load(ex, image, sizeof(image), &m),
		 CUDA_ERROR_INVALID_IMAGE);
	CHECK_RC(sim->module_symbol(ex, m, PVGPU_SYM_FUNCTION, "k", &fn, NULL),
		 CUDA_ERROR_INVALID_HANDLE);
	CHECK_RC(sim->module_symbol(ex, m, PVGPU_SYM_GLOBAL, "g", &d, &sz),
		 CUDA_ERROR_INVALID_HANDLE);
	CHECK_RC(sim->launch(ex, &l), CUDA_ERROR_INVALID_HANDLE);
	sim->close(ex);
}

/* Thousands of live allocations: lookups stay right (and fast). */
static void test_many_allocations(void)
{
	enum { N = 5000 };
	uint64_t ctx, *ptr;
	struct pvgpu_exec *ex = open_with_ctx(NULL, &ctx);
	uint32_t v, bad = 0;
	clock_t t0;
	int i;

	CHECK(ex != NULL);
	ptr = calloc(N, sizeof(*ptr));
	CHECK(ptr != NULL);
	if (!ex || !ptr)
		goto out;
	t0 = clock();
	for (i = 0; i < N; i++)
		if (sim->mem_alloc(ex, 64 + (uint64_t)(i % 7) * 100, &ptr[i]))
			bad++;
	for (i = 0; i < N; i += 2)
		if (sim->mem_free(ex, ptr[i]))
			bad++;
	for (i = 1; i < N; i += 2) {
		v = (uint32_t)i;
		if (pvgpu_exec_htod(sim, ex, ptr[i] + 60, &v, 4, true, 0))
			bad++;
		if (pvgpu_exec_htod(sim, ex, ptr[i - 1], &v, 4, true, 0) !=
		    CUDA_ERROR_INVALID_VALUE)
			bad++;
	}
	for (i = 1; i < N; i += 2) {
		if (pvgpu_exec_dtoh(sim, ex, &v, ptr[i] + 60, 4, true, 0) ||
		    v != (uint32_t)i)
			bad++;
	}
	CHECK(bad == 0);
	CHECK((double)(clock() - t0) / CLOCKS_PER_SEC < 5.0);
out:
	if (ex)
		sim->close(ex);
	free(ptr);
}

static void test_multi_device(void)
{
	struct pvgpu_exec *ex = open_sim("2", "8", NULL);
	uint64_t c0, c1, a0, a1, f, t;
	char buf[4] = "xyz";

	CHECK(ex != NULL);
	if (!ex)
		return;
	CHECK_RC(sim->ctx_create(ex, 0, &c0), CUDA_SUCCESS);
	CHECK_RC(sim->ctx_create(ex, 1, &c1), CUDA_SUCCESS);
	CHECK(c0 != c1);
	CHECK_RC(sim->ctx_set(ex, c0), CUDA_SUCCESS);
	CHECK_RC(sim->mem_alloc(ex, 6 << 20, &a0), CUDA_SUCCESS);
	CHECK_RC(sim->ctx_set(ex, c1), CUDA_SUCCESS);
	/* Each device has its own capacity. */
	CHECK_RC(sim->mem_get_info(ex, &f, &t), CUDA_SUCCESS);
	CHECK(f == 8ULL << 20);
	CHECK_RC(sim->mem_alloc(ex, 6 << 20, &a1), CUDA_SUCCESS);
	CHECK(a0 != a1);
	CHECK_RC(pvgpu_exec_dtod(sim, ex, a1, a0, 4, 0), CUDA_SUCCESS);
	CHECK_RC(pvgpu_exec_htod(sim, ex, a1, buf, 4, true, 0), CUDA_SUCCESS);
	CHECK_RC(sim->ctx_destroy(ex, c0), CUDA_SUCCESS);
	CHECK_RC(pvgpu_exec_htod(sim, ex, a1, buf, 4, true, 0), CUDA_SUCCESS);
	CHECK_RC(pvgpu_exec_htod(sim, ex, a0, buf, 4, true, 0),
		 CUDA_ERROR_INVALID_VALUE);
	sim->close(ex);
}

int main(void)
{
	sim = &pvgpu_exec_sim;
	test_lookup();
	test_cuda_open();
	test_devices();
	test_bad_env();
	test_no_context();
	test_copies();
	test_memset();
	test_capacity();
	test_streams();
	test_events();
	test_ctx_destroy();
	test_host_memory();
	test_kernels_bad_handles();
	test_many_allocations();
	test_multi_device();

	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
