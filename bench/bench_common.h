/*
 * bench_common.h - helpers shared by the pvgpu benchmarks (pvgpu-bandwidth,
 * pvgpu-latency, pvgpu-synth).
 *
 * Each benchmark is a single .cu file that includes this header exactly
 * once, so the functions here are ordinary external functions rather than
 * static ones: nvcc's front end warns about unused static functions, and
 * every program is one translation unit, so nothing is defined twice.
 *
 * What lives here:
 *   - messages and exit codes (0 ok, 1 runtime failure, 2 bad usage);
 *   - CUDA error checking, with one clear line when there is no GPU/driver;
 *   - a byte pattern derived from (size, iteration) and its verification;
 *   - size parsing and printing ("64M", "1 KiB");
 *   - which libcuda.so.1 this process really loaded (NVIDIA's driver or
 *     pvgpu's front-end), under NVIDIA's runtime linked in;
 *   - a small JSON writer and reader (children report to --compare in JSON);
 *   - --compare: run this same executable natively and through pvgpu,
 *     chosen only by the libcuda.so.1 on LD_LIBRARY_PATH, and print one
 *     comparison table;
 *     --pairs N runs N children of each kind in the order ABBA... and
 *     compares their medians.
 */
#ifndef PVGPU_BENCH_COMMON_H
#define PVGPU_BENCH_COMMON_H

#include <cuda_runtime.h>

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "size.h"
#include <fcntl.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------ */
/* Messages and exit codes                                             */
/* ------------------------------------------------------------------ */

enum { EXIT_OK = 0, EXIT_RUNTIME = 1, EXIT_USAGE = 2 };

/* Set by main(): the program's name, used as the prefix of every message. */
const char *g_prog = "pvgpu-bench";

/*
 * In --compare, the parent starts each child with PVGPU_BENCH_ROLE=native or
 * =pvgpu so that a child's error line says which run failed; the parent then
 * exits without adding a second line.
 */
void msg_prefix(FILE *f)
{
	const char *role = getenv("PVGPU_BENCH_ROLE");

	if (role && *role)
		fprintf(f, "%s [%s]: ", g_prog, role);
	else
		fprintf(f, "%s: ", g_prog);
}

/* One line on stderr, exit 1. */
__attribute__((format(printf, 1, 2), noreturn))
void die(const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	msg_prefix(stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(EXIT_RUNTIME);
}

/* One line on stderr, exit 2. */
__attribute__((format(printf, 1, 2), noreturn))
void usage_error(const char *fmt, ...)
{
	va_list ap;

	msg_prefix(stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, " (try --help)\n");
	exit(EXIT_USAGE);
}

void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p)
		die("out of host memory (%zu bytes)", n);
	return p;
}

char *xstrdup(const char *s)
{
	char *p = strdup(s);

	if (!p)
		die("out of host memory");
	return p;
}

/* ------------------------------------------------------------------ */
/* CUDA errors                                                         */
/* ------------------------------------------------------------------ */

/*
 * Any CUDA failure is fatal for a benchmark: report it on one line and exit
 * 1.  The errors that mean "there is no usable GPU here" get a wording a user
 * recognises at once (e.g. running natively on a machine without a driver).
 */
void cuda_check(cudaError_t e, const char *what)
{
	if (e == cudaSuccess)
		return;
	switch (e) {
	case cudaErrorInsufficientDriver:
	case cudaErrorNoDevice:
	case cudaErrorSystemDriverMismatch:
	case cudaErrorCompatNotSupportedOnDevice:
	case cudaErrorDevicesUnavailable:
		die("no usable GPU: %s (%s) from %s", cudaGetErrorName(e),
		    cudaGetErrorString(e), what);
	default:
		die("%s failed: %s (%s)", what, cudaGetErrorName(e),
		    cudaGetErrorString(e));
	}
}

#define CK(call) cuda_check((call), #call)

/* ------------------------------------------------------------------ */
/* Time                                                                */
/* ------------------------------------------------------------------ */

double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/*
 * When this process started (CLOCK_MONOTONIC, which every process on the
 * machine shares): a --compare child reports it, with the time it reported,
 * so the order the children really ran in can be checked from outside.
 */
double g_start_s;

__attribute__((constructor)) void record_start_time(void)
{
	g_start_s = now_s();
}

int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* Nearest-rank percentile (0 < p <= 100) of v[0..n); sorts v in place. */
double percentile(double *v, size_t n, double p)
{
	size_t rank;

	if (n == 0)
		return NAN;
	qsort(v, n, sizeof(*v), cmp_double);
	rank = (size_t)ceil(p / 100.0 * (double)n);
	if (rank < 1)
		rank = 1;
	if (rank > n)
		rank = n;
	return v[rank - 1];
}

/* ------------------------------------------------------------------ */
/* Data pattern and verification                                       */
/* ------------------------------------------------------------------ */

/* splitmix64: a tiny, well-mixed, portable 64-bit generator step. */
uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ULL;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

/* The tag of a pattern: derived from the transfer size and an iteration. */
uint64_t pattern_tag(uint64_t size, uint64_t iter)
{
	return mix64(size * 0x100000001b3ULL ^ mix64(iter));
}

/*
 * Word i of the pattern with tag `tag`.  Cheap (two multiplies), so filling
 * and checking 256 MiB takes a fraction of a second, always outside timing.
 */
uint64_t pattern_word(uint64_t tag, uint64_t i)
{
	uint64_t x = (i + 1) * 0xd1342543de82ef95ULL ^ tag;

	return x ^ (x >> 29) ^ (x << 17);
}

/* Fill buf[0..len) with the pattern; byte k is byte (k % 8) of word k / 8. */
void pattern_fill(void *buf, size_t len, uint64_t tag)
{
	unsigned char *p = (unsigned char *)buf;
	size_t words = len / 8, i;
	uint64_t w;

	for (i = 0; i < words; i++) {
		w = pattern_word(tag, i);
		memcpy(p + 8 * i, &w, 8);
	}
	if (len % 8) {
		w = pattern_word(tag, words);
		memcpy(p + 8 * words, &w, len % 8);	/* little endian */
	}
}

/* Offset of the first byte that differs from the pattern, or -1 if none. */
long long pattern_check(const void *buf, size_t len, uint64_t tag)
{
	const unsigned char *p = (const unsigned char *)buf;
	size_t words = len / 8, i, k;
	uint64_t w, got;

	for (i = 0; i < words; i++) {
		w = pattern_word(tag, i);
		memcpy(&got, p + 8 * i, 8);
		if (got != w)
			for (k = 0; k < 8; k++)
				if (((got >> (8 * k)) & 0xff) != ((w >> (8 * k)) & 0xff))
					return (long long)(8 * i + k);
	}
	if (len % 8) {
		w = pattern_word(tag, words);
		for (k = 0; k < len % 8; k++)
			if (p[8 * words + k] != ((w >> (8 * k)) & 0xff))
				return (long long)(8 * words + k);
	}
	return -1;
}

/* Offset of the first differing byte of a and b, or -1 if equal. */
long long first_difference(const void *a, const void *b, size_t len)
{
	const unsigned char *x = (const unsigned char *)a;
	const unsigned char *y = (const unsigned char *)b;
	size_t i;

	if (memcmp(a, b, len) == 0)
		return -1;
	for (i = 0; i < len; i++)
		if (x[i] != y[i])
			return (long long)i;
	return -1;
}

/* ------------------------------------------------------------------ */
/* Sizes                                                               */
/* ------------------------------------------------------------------ */

/*
 * Sizes are read by common/size.c ("4096", "4K", "4KiB", "64M", "1G"), as
 * everywhere else in pvgpu; bench.mk compiles it with each benchmark.
 */
#define parse_size pvgpu_parse_size

/* "64 B", "1 KiB", "256 MiB", "1.5 MiB"; returns buf. */
char *fmt_size(uint64_t n, char *buf, size_t bufsz)
{
	static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	double v = (double)n;
	int u = 0;

	while (v >= 1024.0 && u < 4) {
		v /= 1024.0;
		u++;
	}
	if (v == floor(v))
		snprintf(buf, bufsz, "%.0f %s", v, unit[u]);
	else
		snprintf(buf, bufsz, "%.2f %s", v, unit[u]);
	return buf;
}

/* Parse a non-negative integer option value; usage error if it isn't one. */
long long parse_count(const char *opt, const char *s, long long min,
		      long long max)
{
	char *end;
	long long v;

	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno || end == s || *end || v < min || v > max)
		usage_error("%s wants an integer from %lld to %lld, not '%s'",
			    opt, min, max, s);
	return v;
}

double parse_real(const char *opt, const char *s, double min, double max)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= min && v <= max))
		usage_error("%s wants a number from %g to %g, not '%s'", opt,
			    min, max, s);
	return v;
}

/* ------------------------------------------------------------------ */
/* Which CUDA driver did the dynamic loader give us?                   */
/* ------------------------------------------------------------------ */

/*
 * The benchmarks are built with nvcc's default static runtime, so the one
 * library that decides where the work goes is libcuda.so.1, which that
 * runtime dlopens: NVIDIA's driver natively, pvgpu's front-end through
 * pvgpu.  One binary serves both sides of --compare.
 */
struct lib_info {
	/* "" when NVIDIA's runtime is linked into this executable; else the
	 * shared libcudart that defines cudaMalloc (a hand-made build). */
	char runtime[PATH_MAX];
	/* The libcuda.so.1 in use, as the loader found it ("" before the
	 * runtime has loaded it, i.e. before the first CUDA call). */
	char driver[PATH_MAX];
	/* 1 if that libcuda.so.1 is pvgpu's front-end: it exports the wire
	 * counters (pvgpu_wire_stats), which NVIDIA's driver does not. */
	int driver_pvgpu;
};

void lib_identify_driver(struct lib_info *li);

/*
 * Ask the loader, not the environment: dladdr() names the object that
 * defines cudaMalloc (a shared libcudart.so.13 is asked by its soname, so
 * that a PLT stub in this executable does not answer for it).  If that is
 * the object this very function lives in, the runtime is linked in.  No CUDA
 * API function is called.
 */
void lib_identify(struct lib_info *li)
{
	void *h = dlopen("libcudart.so.13", RTLD_NOW | RTLD_NOLOAD);
	void *sym = h ? dlsym(h, "cudaMalloc") : NULL;
	Dl_info info, self;

	if (!sym)
		sym = (void *)(cudaError_t (*)(void **, size_t))cudaMalloc;
	memset(&info, 0, sizeof(info));
	memset(&self, 0, sizeof(self));
	li->runtime[0] = '\0';
	if (dladdr(sym, &info) && dladdr((void *)lib_identify, &self) &&
	    info.dli_fbase != self.dli_fbase && info.dli_fname &&
	    *info.dli_fname && !realpath(info.dli_fname, li->runtime))
		snprintf(li->runtime, sizeof(li->runtime), "%s",
			 info.dli_fname);
	if (h)
		dlclose(h);
	lib_identify_driver(li);
}

/*
 * The libcuda.so.1 in use, once the runtime has loaded it (after the first
 * CUDA call); "" before.
 */
void lib_identify_driver(struct lib_info *li)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	void *sym;
	Dl_info info;

	li->driver[0] = '\0';
	sym = h ? dlsym(h, "cuInit") : NULL;
	memset(&info, 0, sizeof(info));
	if (sym && dladdr(sym, &info) && info.dli_fname)
		snprintf(li->driver, sizeof(li->driver), "%s", info.dli_fname);
	li->driver_pvgpu = h && dlsym(h, "pvgpu_wire_stats") != NULL;
	if (h)
		dlclose(h);
}

/*
 * Where pvgpu's libcuda.so.1 is a sanitizer build, ASan is preloaded and
 * LeakSanitizer checks this whole process at exit, NVIDIA's runtime linked
 * in here too: it keeps destroyed events and its own tables to the end of
 * the process, which are neither this program's leaks nor pvgpu's.  LSan
 * asks the program for suppressions through this hook (bench.mk exports
 * it); its internal functions are all named libcudart_static_<hash>.
 */
extern "C" const char *__lsan_default_suppressions(void)
{
	return "leak:libcudart_static_\n";
}

/* What the table says of the runtime: NVIDIA's, linked in or shared. */
const char *runtime_words(const char *runtime)
{
	return runtime && *runtime ? runtime : "NVIDIA's, linked in";
}

/* What the table says of a driver: whose it is. */
const char *driver_words(int pvgpu)
{
	return pvgpu ? "pvgpu's front-end" : "NVIDIA's";
}

/* ------------------------------------------------------------------ */
/* The device                                                          */
/* ------------------------------------------------------------------ */

struct dev_info {
	int index;
	char name[256];
	int runtime_version;
	int driver_version;
};

/* Select the device and create its context; dies with one line if none. */
void device_open(int dev, struct dev_info *di)
{
	struct cudaDeviceProp prop;
	int count = 0;

	memset(di, 0, sizeof(*di));
	di->index = dev;
	CK(cudaGetDeviceCount(&count));
	if (count == 0)
		die("no usable GPU: cudaGetDeviceCount reports 0 devices");
	if (dev >= count)
		die("--device %d: only %d device(s) present", dev, count);
	CK(cudaSetDevice(dev));
	CK(cudaFree(0));	/* creates the context now, not inside a timing */
	/* Names and versions are informational: not worth failing over. */
	if (cudaGetDeviceProperties(&prop, dev) == cudaSuccess)
		snprintf(di->name, sizeof(di->name), "%s", prop.name);
	else
		snprintf(di->name, sizeof(di->name), "(unknown)");
	if (cudaRuntimeGetVersion(&di->runtime_version) != cudaSuccess)
		di->runtime_version = 0;
	if (cudaDriverGetVersion(&di->driver_version) != cudaSuccess)
		di->driver_version = 0;
	(void)cudaGetLastError();	/* clear a non-sticky error, if any */
}

/* ------------------------------------------------------------------ */
/* JSON writer (stdout)                                                */
/* ------------------------------------------------------------------ */

void json_str(FILE *f, const char *s)
{
	const unsigned char *p = (const unsigned char *)(s ? s : "");

	fputc('"', f);
	for (; *p; p++) {
		if (*p == '"' || *p == '\\')
			fprintf(f, "\\%c", *p);
		else if (*p == '\n')
			fputs("\\n", f);
		else if (*p < 0x20)
			fprintf(f, "\\u%04x", *p);
		else
			fputc(*p, f);
	}
	fputc('"', f);
}

/* A number, or null where it is not finite (JSON has no NaN). */
void json_num(FILE *f, double v)
{
	if (isfinite(v))
		fprintf(f, "%.10g", v);
	else
		fputs("null", f);
}

/*
 * The fields every run reports, written after the opening brace and
 * followed by a comma: the benchmark, the library really loaded, the device.
 */
void json_run_header(FILE *f, const struct lib_info *li,
		     const struct dev_info *di)
{
	const char *devs = getenv("PVGPU_DEVICES");
	const char *run = getenv("PVGPU_BENCH_RUN");

	fputs("\"benchmark\":", f);
	json_str(f, g_prog);
	/* "runtime": "static" or the shared libcudart's path; "driver_pvgpu"
	 * says which libcuda.so.1 served (older output had "pvgpu_shim"). */
	fputs(",\"schema\":1,\"library\":{\"runtime\":", f);
	json_str(f, li->runtime[0] ? li->runtime : "static");
	fputs(",\"driver\":", f);
	json_str(f, li->driver);
	fprintf(f, ",\"driver_pvgpu\":%s},",
		li->driver_pvgpu ? "true" : "false");
	fputs("\"pvgpu_devices\":", f);
	if (devs)
		json_str(f, devs);
	else
		fputs("null", f);
	if (run && *run) {	/* a child of --compare --pairs N (N > 1) */
		fprintf(f, ",\"compare_run\":%d,\"started_monotonic_s\":",
			atoi(run));
		json_num(f, g_start_s);
		fputs(",\"reported_monotonic_s\":", f);
		json_num(f, now_s());
	}
	if (di) {
		fprintf(f, ",\"device\":{\"index\":%d,\"name\":", di->index);
		json_str(f, di->name);
		fprintf(f, ",\"runtime_version\":%d,\"driver_version\":%d}",
			di->runtime_version, di->driver_version);
	}
	fputc(',', f);
}

/* The two header lines of a plain-table run. */
void table_run_header(const struct lib_info *li, const struct dev_info *di)
{
	/* The runtime is the same on both sides; the driver beneath it
	 * decides where the work went. */
	printf("%s: CUDA runtime: %s\n", g_prog, runtime_words(li->runtime));
	if (li->driver[0])
		printf("%s: CUDA driver %s (%s)\n", g_prog, li->driver,
		       driver_words(li->driver_pvgpu));
	if (di)
		printf("device %d: %s, runtime %d, driver %d\n", di->index,
		       di->name, di->runtime_version, di->driver_version);
}

/* ------------------------------------------------------------------ */
/* JSON reader: enough for the benchmarks' own output and plan files   */
/* ------------------------------------------------------------------ */

enum jtype { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ };

struct jval {
	enum jtype type;
	double num;		/* J_NUM; J_BOOL: 0 or 1 */
	char *str;		/* J_STR */
	int n;			/* J_ARR, J_OBJ: number of items */
	struct jval *items;	/* J_ARR, J_OBJ */
	char **keys;		/* J_OBJ: keys[i] names items[i] */
};

struct jparser {
	const char *p;
	int depth;
};

void jskip(struct jparser *jp)
{
	while (*jp->p == ' ' || *jp->p == '\t' || *jp->p == '\n' ||
	       *jp->p == '\r')
		jp->p++;
}

/* Parses a string at jp->p (which points at the quote); NULL on error. */
char *jparse_string(struct jparser *jp)
{
	size_t cap = 16, len = 0;
	char *out = (char *)xmalloc(cap);

	jp->p++;
	while (*jp->p && *jp->p != '"') {
		char c = *jp->p++;

		if (c == '\\') {
			c = *jp->p++;
			switch (c) {
			case 'n': c = '\n'; break;
			case 't': c = '\t'; break;
			case 'r': c = '\r'; break;
			case 'b': c = '\b'; break;
			case 'f': c = '\f'; break;
			case '"': case '\\': case '/': break;
			case 'u': {
				/* Only what json_str writes: \u00XX. */
				unsigned v;

				if (sscanf(jp->p, "%4x", &v) != 1 || v > 0xff) {
					free(out);
					return NULL;
				}
				jp->p += 4;
				c = (char)v;
				break;
			}
			default:
				free(out);
				return NULL;
			}
		}
		if (len + 2 > cap) {
			cap *= 2;
			out = (char *)realloc(out, cap);
			if (!out)
				die("out of host memory");
		}
		out[len++] = c;
	}
	if (*jp->p != '"') {
		free(out);
		return NULL;
	}
	jp->p++;
	out[len] = '\0';
	return out;
}

int jparse_value(struct jparser *jp, struct jval *v);

/* Array or object body; jp->p points at '[' or '{'. */
int jparse_container(struct jparser *jp, struct jval *v, int is_obj)
{
	int cap = 0;
	char close = is_obj ? '}' : ']';

	v->type = is_obj ? J_OBJ : J_ARR;
	jp->p++;
	jskip(jp);
	if (*jp->p == close) {
		jp->p++;
		return 0;
	}
	for (;;) {
		char *key = NULL;

		jskip(jp);
		if (is_obj) {
			if (*jp->p != '"' || !(key = jparse_string(jp)))
				return -1;
			jskip(jp);
			if (*jp->p++ != ':') {
				free(key);
				return -1;
			}
		}
		if (v->n == cap) {
			cap = cap ? 2 * cap : 8;
			v->items = (struct jval *)realloc(v->items,
						cap * sizeof(*v->items));
			v->keys = (char **)realloc(v->keys,
						   cap * sizeof(*v->keys));
			if (!v->items || !v->keys)
				die("out of host memory");
		}
		memset(&v->items[v->n], 0, sizeof(v->items[0]));
		v->keys[v->n] = key;
		v->n++;
		if (jparse_value(jp, &v->items[v->n - 1]))
			return -1;
		jskip(jp);
		if (*jp->p == ',') {
			jp->p++;
			continue;
		}
		if (*jp->p == close) {
			jp->p++;
			return 0;
		}
		return -1;
	}
}

int jparse_value(struct jparser *jp, struct jval *v)
{
	char *end;

	jskip(jp);
	if (++jp->depth > 64)
		return -1;
	switch (*jp->p) {
	case '{':
	case '[':
		if (jparse_container(jp, v, *jp->p == '{'))
			return -1;
		break;
	case '"':
		v->type = J_STR;
		if (!(v->str = jparse_string(jp)))
			return -1;
		break;
	case 't':
	case 'f':
	case 'n':
		if (!strncmp(jp->p, "true", 4)) {
			v->type = J_BOOL;
			v->num = 1;
			jp->p += 4;
		} else if (!strncmp(jp->p, "false", 5)) {
			v->type = J_BOOL;
			jp->p += 5;
		} else if (!strncmp(jp->p, "null", 4)) {
			v->type = J_NULL;
			jp->p += 4;
		} else {
			return -1;
		}
		break;
	default:
		v->type = J_NUM;
		v->num = strtod(jp->p, &end);
		if (end == jp->p)
			return -1;
		jp->p = end;
		break;
	}
	jp->depth--;
	return 0;
}

/* Parse a whole document; NULL if it is not exactly one JSON value. */
/* What a parsed value holds (not v itself: it may be an array element). */
void json_free_items(struct jval *v)
{
	for (int i = 0; i < v->n; i++) {
		json_free_items(&v->items[i]);
		if (v->keys)
			free(v->keys[i]);
	}
	free(v->items);
	free(v->keys);
	free(v->str);
	memset(v, 0, sizeof(*v));
}

/* A tree json_parse returned. */
void json_free(struct jval *v)
{
	if (!v)
		return;
	json_free_items(v);
	free(v);
}

struct jval *json_parse(const char *text)
{
	struct jparser jp;
	struct jval *v = (struct jval *)xmalloc(sizeof(*v));

	memset(v, 0, sizeof(*v));
	jp.p = text;
	jp.depth = 0;
	if (jparse_value(&jp, v))
		return NULL;	/* leaks the partial tree: we exit right after */
	jskip(&jp);
	if (*jp.p)
		return NULL;
	return v;
}

/* Member `key` of object o, or NULL. */
const struct jval *jget(const struct jval *o, const char *key)
{
	int i;

	if (!o || o->type != J_OBJ)
		return NULL;
	for (i = 0; i < o->n; i++)
		if (!strcmp(o->keys[i], key))
			return &o->items[i];
	return NULL;
}

/* Number member, NAN if absent or not a number. */
double jnum(const struct jval *o, const char *key)
{
	const struct jval *v = jget(o, key);

	return v && v->type == J_NUM ? v->num : NAN;
}

/* String member, NULL if absent or not a string. */
const char *jstr(const struct jval *o, const char *key)
{
	const struct jval *v = jget(o, key);

	return v && v->type == J_STR ? v->str : NULL;
}

/* Read a whole file (NUL-terminated); NULL with errno on failure. */
char *read_file(const char *path)
{
	FILE *f = fopen(path, "r");
	size_t cap = 65536, len = 0, got;
	char *buf;

	if (!f)
		return NULL;
	buf = (char *)xmalloc(cap);
	while ((got = fread(buf + len, 1, cap - len - 1, f)) > 0) {
		len += got;
		if (cap - len - 1 == 0) {
			cap *= 2;
			buf = (char *)realloc(buf, cap);
			if (!buf)
				die("out of host memory");
		}
	}
	fclose(f);
	buf[len] = '\0';
	return buf;
}

/* ------------------------------------------------------------------ */
/* Common options                                                      */
/* ------------------------------------------------------------------ */

struct common_opts {
	int json;		/* --json */
	int compare;		/* --compare */
	int pairs;		/* --pairs N; 0 if not given (one pair) */
	int quick;		/* --quick */
	int device;		/* --device N */
	const char *native_libdir;	/* --native-libdir */
	const char *pvgpu_libdir;	/* --pvgpu-libdir */
};

#define COMMON_OPTIONS_HELP \
"  --json               one JSON object on stdout instead of a table\n" \
"  --quick              a short run (CI); explicit options still win\n" \
"  --device N           CUDA device index (default 0)\n" \
"  --compare            run natively and through pvgpu, print both\n" \
"  --pairs N            with --compare: N native and N pvgpu runs (1-50,\n" \
"                       default 1) in the order native, pvgpu, pvgpu,\n" \
"                       native, native, pvgpu...; each figure is the median\n" \
"                       of its side's N runs, shown with their min-max.\n" \
"                       On a shared machine the figures drift between runs\n" \
"                       minutes apart, so one pair measures the drift too\n" \
"  --native-libdir DIR  directory of NVIDIA's libcuda.so.1 for --compare\n" \
"                       (default $PVGPU_NATIVE_LIBDIR, else where the\n" \
"                       system's libcuda.so.1 lives)\n" \
"  --pvgpu-libdir DIR   directory of pvgpu's libcuda.so.1 for --compare\n" \
"                       (default $PVGPU_LIBDIR, else <exe dir>/../lib)\n" \
"  --help               this text\n" \
"Exit status: 0 success, 1 runtime failure (incl. a data mismatch), 2 bad usage.\n"

/* The value after option argv[*i]; a usage error if there is none. */
const char *opt_value(int *i, int argc, char **argv)
{
	if (*i + 1 >= argc)
		usage_error("%s needs a value", argv[*i]);
	return argv[++*i];
}

/* Consumes a common option at argv[*i]; returns 1 if it was one. */
int common_option(int *i, int argc, char **argv, struct common_opts *co)
{
	const char *a = argv[*i];

	if (!strcmp(a, "--json"))
		co->json = 1;
	else if (!strcmp(a, "--compare"))
		co->compare = 1;
	else if (!strcmp(a, "--quick"))
		co->quick = 1;
	else if (!strcmp(a, "--device"))
		co->device = (int)parse_count(a, opt_value(i, argc, argv), 0,
					      1024);
	else if (!strcmp(a, "--pairs"))
		co->pairs = (int)parse_count(a, opt_value(i, argc, argv), 1,
					     50);
	else if (!strcmp(a, "--native-libdir"))
		co->native_libdir = opt_value(i, argc, argv);
	else if (!strcmp(a, "--pvgpu-libdir"))
		co->pvgpu_libdir = opt_value(i, argc, argv);
	else
		return 0;
	return 1;
}

/* After the last option: what the common ones mean together. */
void common_options_done(struct common_opts *co)
{
	if (co->pairs && !co->compare)
		usage_error("--pairs only means something with --compare");
	if (!co->pairs)
		co->pairs = 1;
}

/* ------------------------------------------------------------------ */
/* --compare: run this executable natively and through pvgpu           */
/* ------------------------------------------------------------------ */

/* Absolute path of this executable. */
char *self_exe(void)
{
	char buf[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);

	if (n <= 0)
		die("cannot find this executable: /proc/self/exe: %s",
		    strerror(errno));
	buf[n] = '\0';
	return xstrdup(buf);
}

int file_exists(const char *dir, const char *name)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	return access(path, R_OK) == 0;
}

/* Fill in the two library directories for --compare (usage error if none). */
void compare_resolve_libdirs(struct common_opts *co)
{
	static char pvgpu[PATH_MAX];
	/* Where distributions and NVIDIA's installer put the driver. */
	static const char *const guesses[] = {
		"/usr/lib/x86_64-linux-gnu",
		"/usr/lib/aarch64-linux-gnu",
		"/usr/lib64",
		"/usr/lib",
	};
	char a[PATH_MAX], b[PATH_MAX];
	const char *env;
	size_t k;

	if (!co->native_libdir && (env = getenv("PVGPU_NATIVE_LIBDIR")) &&
	    *env)
		co->native_libdir = env;
	for (k = 0; !co->native_libdir && k < sizeof(guesses) / sizeof(*guesses); k++)
		if (file_exists(guesses[k], "libcuda.so.1"))
			co->native_libdir = guesses[k];
	if (!co->native_libdir)
		usage_error("--compare: cannot find the system's libcuda.so.1 "
			    "(NVIDIA's driver); give --native-libdir DIR or "
			    "PVGPU_NATIVE_LIBDIR");

	if (!co->pvgpu_libdir && (env = getenv("PVGPU_LIBDIR")) && *env)
		co->pvgpu_libdir = env;
	if (!co->pvgpu_libdir) {
		char *exe = self_exe();

		*strrchr(exe, '/') = '\0';
		snprintf(pvgpu, sizeof(pvgpu), "%s/../lib", exe);
		free(exe);
		co->pvgpu_libdir = pvgpu;
	}
	if (!file_exists(co->native_libdir, "libcuda.so.1"))
		usage_error("--native-libdir %s has no libcuda.so.1",
			    co->native_libdir);
	if (!file_exists(co->pvgpu_libdir, "libcuda.so.1"))
		usage_error("--pvgpu-libdir %s has no libcuda.so.1 "
			    "(build pvgpu's, or give --pvgpu-libdir)",
			    co->pvgpu_libdir);
	if (realpath(co->native_libdir, a) && realpath(co->pvgpu_libdir, b) &&
	    !strcmp(a, b))
		usage_error("--native-libdir and --pvgpu-libdir are the same "
			    "folder (%s)", a);
}

/* A growable argv for a child. */
struct argvec {
	char **v;
	int n, cap;
};

void argv_free(struct argvec *a)
{
	for (int i = 0; i < a->n; i++)
		free(a->v[i]);
	free(a->v);
	memset(a, 0, sizeof(*a));
}

void argv_push(struct argvec *a, const char *s)
{
	if (a->n + 2 > a->cap) {
		a->cap = a->cap ? 2 * a->cap : 16;
		a->v = (char **)realloc(a->v, a->cap * sizeof(*a->v));
		if (!a->v)
			die("out of host memory");
	}
	a->v[a->n++] = s ? xstrdup(s) : NULL;
	a->v[a->n] = NULL;
}

/*
 * The child's arguments: this program's own, less the options only the
 * parent acts on.  `drop_flags` and `drop_valued` (NULL-terminated) name the
 * benchmark's own parent-only options, without and with a value; the common
 * ones (--compare, --json, --pairs, --native-libdir, --pvgpu-libdir) always
 * go.
 * The caller appends what the child needs (--json is added here).
 */
void child_args(struct argvec *out, int argc, char **argv,
		const char *const *drop_flags, const char *const *drop_valued)
{
	static const char *const common_flags[] = { "--compare", "--json", NULL };
	static const char *const common_valued[] = { "--native-libdir",
						     "--pvgpu-libdir", "--pairs",
						     NULL };
	int i, k, dropped;

	argv_push(out, argv[0]);
	for (i = 1; i < argc; i++) {
		dropped = 0;
		for (k = 0; common_flags[k]; k++)
			dropped |= !strcmp(argv[i], common_flags[k]);
		for (k = 0; drop_flags && drop_flags[k]; k++)
			dropped |= !strcmp(argv[i], drop_flags[k]);
		for (k = 0; !dropped && common_valued[k]; k++)
			if (!strcmp(argv[i], common_valued[k]))
				dropped = 2;
		for (k = 0; !dropped && drop_valued && drop_valued[k]; k++)
			if (!strcmp(argv[i], drop_valued[k]))
				dropped = 2;
		if (dropped == 2)
			i++;	/* its value goes too */
		else if (!dropped)
			argv_push(out, argv[i]);
	}
	argv_push(out, "--json");
}

struct child_run {
	const char *role;	/* "native" or "pvgpu" */
	const char *libdir;
	char *text;		/* its stdout: one JSON object */
	struct jval *json;
	double wall_s;		/* how long the child ran */
	int seq;		/* its place in the order of runs; -1: one pair */
	/* --interleave: its ends of the two turn pipes, and if it starts with the turn */
	int turn_rfd, turn_wfd, turn_first;
	pid_t pid;		/* while it runs */
	int out_fd;		/* its stdout, while it runs */
	double t0;
};

/*
 * Run this executable with `args`, LD_LIBRARY_PATH=libdir (prepended, so it
 * wins for libcuda.so.1 while anything else the user's path provides is
 * still found), and PVGPU_BENCH_ROLE=role.  The child's stderr is ours; its
 * stdout is collected and parsed.  A failing child has already said why on
 * one line (prefixed with its role), so we exit 1 without another line.
 * Finally the child must have loaded the library its role calls for.
 */
void compare_child_start(struct child_run *cr, char **args)
{
	int fd[2];
	pid_t pid;
	char *exe = self_exe();

	cr->t0 = now_s();
	fflush(stdout);
	fflush(stderr);
	if (pipe2(fd, O_CLOEXEC))	/* another child must not hold it */
		die("pipe: %s", strerror(errno));
	pid = fork();
	if (pid < 0)
		die("fork: %s", strerror(errno));
	if (pid == 0) {
		const char *old = getenv("LD_LIBRARY_PATH");
		char *path = (char *)xmalloc(strlen(cr->libdir) +
					     (old ? strlen(old) : 0) + 2);

		strcpy(path, cr->libdir);
		if (old && *old) {
			strcat(path, ":");
			strcat(path, old);
		}
		setenv("LD_LIBRARY_PATH", path, 1);
		setenv("PVGPU_BENCH_ROLE", cr->role, 1);
		if (cr->seq >= 0) {
			char seq[16];

			snprintf(seq, sizeof(seq), "%d", cr->seq);
			setenv("PVGPU_BENCH_RUN", seq, 1);
		} else {
			unsetenv("PVGPU_BENCH_RUN");
		}
		unsetenv("PVGPU_BENCH_TURN");
		if (cr->turn_rfd >= 0) {
			char turn[48];

			/* Its own two ends outlive the exec; the rest close. */
			fcntl(cr->turn_rfd, F_SETFD, 0);
			fcntl(cr->turn_wfd, F_SETFD, 0);
			snprintf(turn, sizeof(turn), "%d,%d,%d", cr->turn_rfd,
				 cr->turn_wfd, cr->turn_first);
			setenv("PVGPU_BENCH_TURN", turn, 1);
		}
		dup2(fd[1], STDOUT_FILENO);
		execv(exe, args);
		fprintf(stderr, "%s: exec %s: %s\n", g_prog, exe,
			strerror(errno));
		_exit(EXIT_RUNTIME);
	}
	close(fd[1]);
	free(exe);
	cr->pid = pid;
	cr->out_fd = fd[0];
}

/* 1 if the file `path` was found in folder `dir` (both resolved). */
int found_in(const char *path, const char *dir)
{
	char d[PATH_MAX], rd[PATH_MAX], rdir[PATH_MAX];
	char *slash;

	if (!path || !*path)
		return 0;
	snprintf(d, sizeof(d), "%s", path);
	slash = strrchr(d, '/');
	if (!slash)
		return 0;
	*slash = '\0';
	return realpath(*d ? d : "/", rd) && realpath(dir, rdir) &&
	       !strcmp(rd, rdir);
}

/*
 * A run's JSON says which driver served: "driver_pvgpu" (and, in output
 * written before the runtime was linked in, "pvgpu_shim": a run through
 * pvgpu's own runtime).
 */
int lib_served_by_pvgpu(const struct jval *lib)
{
	const struct jval *v = jget(lib, "driver_pvgpu");

	if (!v)
		v = jget(lib, "pvgpu_shim");
	return v && v->type == J_BOOL && v->num != 0;
}

/*
 * Without a GPU (CI), the "native" side is a second folder whose
 * libcuda.so.1 is pvgpu's, to the same simulated device:
 * PVGPU_BENCH_NATIVE_IS_PVGPU=1 says so, and nothing else may.
 */
int native_is_pvgpu(void)
{
	const char *v = getenv("PVGPU_BENCH_NATIVE_IS_PVGPU");

	return v && !strcmp(v, "1");
}

/*
 * Each side must have loaded the libcuda.so.1 its role calls for, or the
 * comparison compares nothing: pvgpu's front-end from --pvgpu-libdir for
 * the pvgpu run, NVIDIA's driver for the native one.
 */
void compare_check_driver(const struct child_run *cr)
{
	const struct jval *lib = jget(cr->json, "library");
	const char *drv = jstr(lib, "driver");
	int pv = lib_served_by_pvgpu(lib);

	if (!drv || !*drv)
		drv = "(none)";
	if (!strcmp(cr->role, "pvgpu") && !(pv && found_in(drv, cr->libdir)))
		die("the pvgpu run loaded libcuda.so.1 %s (%s), not the one "
		    "in --pvgpu-libdir %s", drv, driver_words(pv), cr->libdir);
	if (!strcmp(cr->role, "native") && pv && !native_is_pvgpu())
		die("the native run loaded pvgpu's libcuda.so.1 %s, not "
		    "NVIDIA's: check --native-libdir (%s)", drv, cr->libdir);
	if (!strcmp(cr->role, "native") && pv && !found_in(drv, cr->libdir))
		die("the native run loaded pvgpu's libcuda.so.1 %s, not the "
		    "one in --native-libdir %s", drv, cr->libdir);
}

/* Read what a started child reports, wait for it, check what it loaded. */
void compare_child_finish(struct child_run *cr)
{
	int status;
	size_t cap = 65536, len = 0;
	ssize_t got;

	cr->text = (char *)xmalloc(cap);
	while ((got = read(cr->out_fd, cr->text + len, cap - len - 1)) != 0) {
		if (got < 0) {
			if (errno == EINTR)
				continue;
			die("reading the %s run's output: %s", cr->role,
			    strerror(errno));
		}
		len += (size_t)got;
		if (cap - len - 1 == 0) {
			cap *= 2;
			cr->text = (char *)realloc(cr->text, cap);
			if (!cr->text)
				die("out of host memory");
		}
	}
	cr->text[len] = '\0';
	close(cr->out_fd);
	while (waitpid(cr->pid, &status, 0) < 0)
		if (errno != EINTR)
			die("waitpid: %s", strerror(errno));
	cr->wall_s = now_s() - cr->t0;
	if (WIFSIGNALED(status))
		die("the %s run (LD_LIBRARY_PATH=%s) was killed by signal %d",
		    cr->role, cr->libdir, WTERMSIG(status));
	if (WEXITSTATUS(status) != 0)
		exit(EXIT_RUNTIME);	/* the child printed its line */
	/* Trim the trailing newline so the text embeds cleanly. */
	while (len > 0 && (cr->text[len - 1] == '\n' || cr->text[len - 1] == ' '))
		cr->text[--len] = '\0';
	cr->json = json_parse(cr->text);
	if (!cr->json || cr->json->type != J_OBJ)
		die("the %s run printed something that is not one JSON object",
		    cr->role);
	compare_check_driver(cr);
}

void compare_run_child(struct child_run *cr, char **args)
{
	cr->turn_rfd = cr->turn_wfd = -1;
	compare_child_start(cr, args);
	compare_child_finish(cr);
}

/*
 * A run's driver as its JSON names it: both runs carry the same runtime,
 * so only the libcuda.so.1 beneath tells them apart.
 */
void print_library(const struct jval *lib)
{
	const char *drv = jstr(lib, "driver");

	printf("libcuda.so.1 %s (%s)", drv && *drv ? drv : "?",
	       driver_words(lib_served_by_pvgpu(lib)));
}

/* A metric the comparison shows for every result key both runs have. */
struct cmp_field {
	const char *field;	/* member of each result object */
	const char *label;	/* e.g. "MB/s" */
	int lower_is_better;	/* times: also print the overhead in % */
	int in_table;		/* 0: only in --json's "comparison" */
};

/* The i-th result of a run whose "key" is `key`, or NULL. */
const struct jval *find_result(const struct jval *run, const char *key)
{
	const struct jval *res = jget(run, "results");
	int i;

	if (!res || res->type != J_ARR)
		return NULL;
	for (i = 0; i < res->n; i++) {
		const char *k = jstr(&res->items[i], "key");

		if (k && !strcmp(k, key))
			return &res->items[i];
	}
	return NULL;
}

/*
 * All the children of one --compare: `pairs` of each role, kept in the order
 * each role's children ran.
 */
struct compare_runs {
	int pairs;
	int interleave;		/* --interleave N: the pairs ran by turns of N */
	struct child_run *nat;	/* [pairs] */
	struct child_run *pv;	/* [pairs] */
};

/*
 * Run `pairs` native and `pairs` pvgpu children alternately, ABBA: native,
 * pvgpu, pvgpu, native, native, pvgpu...  A steady drift of the machine
 * (clocks, a neighbour's load) then weighs on both sides alike, where
 * one native run followed by one pvgpu run would count it as pvgpu's.  The
 * first native child gets `first_native_args` (pvgpu-synth: it calibrates and
 * writes the plan), every other child `args`.  With one pair the children
 * are started exactly as they always were.
 */
void compare_run_all(struct compare_runs *cs, const struct common_opts *co,
		     char **first_native_args, char **args)
{
	int pairs = co->pairs > 0 ? co->pairs : 1;
	int k, done_nat = 0, done_pv = 0;

	cs->pairs = pairs;
	cs->interleave = 0;
	cs->nat = (struct child_run *)xmalloc(pairs * sizeof(*cs->nat));
	cs->pv = (struct child_run *)xmalloc(pairs * sizeof(*cs->pv));
	memset(cs->nat, 0, pairs * sizeof(*cs->nat));
	memset(cs->pv, 0, pairs * sizeof(*cs->pv));
	for (k = 0; k < 2 * pairs; k++) {
		/* Pair p runs native first when p is even, pvgpu first when odd. */
		int native = (k / 2) % 2 == k % 2;
		struct child_run *cr = native ? &cs->nat[done_nat] : &cs->pv[done_pv];

		cr->role = native ? "native" : "pvgpu";
		cr->libdir = native ? co->native_libdir : co->pvgpu_libdir;
		cr->seq = pairs > 1 ? k : -1;
		compare_run_child(cr, native && done_nat == 0 ? first_native_args
							     : args);
		if (native)
			done_nat++;
		else
			done_pv++;
	}
}

/*
 * --interleave (pvgpu-latency): each pair's native and pvgpu children run
 * at the same time and take turns on the GPU, a block of iterations each,
 * handing a token to each other through two pipes (bench_turn_*() below).
 * What the machine does from one second to the next (the host moving
 * vCPUs, the GPU's own latency moving by a microsecond) then falls on both
 * sides alike, where even ABBA runs seconds apart measure some of it.  The
 * native child holds the first turn in even pairs, the pvgpu child in odd
 * ones.
 */
void compare_run_interleaved(struct compare_runs *cs, const struct common_opts *co,
			     char **args, int every)
{
	int pairs = co->pairs > 0 ? co->pairs : 1;

	cs->pairs = pairs;
	cs->interleave = every;
	cs->nat = (struct child_run *)xmalloc(pairs * sizeof(*cs->nat));
	cs->pv = (struct child_run *)xmalloc(pairs * sizeof(*cs->pv));
	memset(cs->nat, 0, pairs * sizeof(*cs->nat));
	memset(cs->pv, 0, pairs * sizeof(*cs->pv));
	for (int p = 0; p < pairs; p++) {
		struct child_run *nat = &cs->nat[p], *pv = &cs->pv[p];
		int to_pv[2], to_nat[2];

		if (pipe2(to_pv, O_CLOEXEC) || pipe2(to_nat, O_CLOEXEC))
			die("pipe: %s", strerror(errno));
		nat->role = "native";
		nat->libdir = co->native_libdir;
		nat->seq = 2 * p;
		nat->turn_rfd = to_nat[0];
		nat->turn_wfd = to_pv[1];
		nat->turn_first = p % 2 == 0;
		pv->role = "pvgpu";
		pv->libdir = co->pvgpu_libdir;
		pv->seq = 2 * p + 1;
		pv->turn_rfd = to_pv[0];
		pv->turn_wfd = to_nat[1];
		pv->turn_first = p % 2 == 1;
		compare_child_start(nat, args);
		compare_child_start(pv, args);
		close(to_pv[0]);
		close(to_pv[1]);
		close(to_nat[0]);
		close(to_nat[1]);
		compare_child_finish(nat);
		compare_child_finish(pv);
	}
}

/*
 * The child's side of --interleave: PVGPU_BENCH_TURN="rfd,wfd,first".
 * bench_turn_wait() blocks until this child holds the GPU,
 * bench_turn_pass() hands it over; without the variable both do nothing.
 * A peer that is gone (end of file, a broken pipe) ends the turns: the
 * child goes on alone.  Each turn held is recorded for the JSON report.
 */
#define BENCH_MAX_TURNS	4096

struct bench_turns {
	int rfd, wfd, held;
	int n;				/* turns held so far */
	double start[BENCH_MAX_TURNS], end[BENCH_MAX_TURNS];
};
struct bench_turns g_turns = { -1, -1, 0, 0, { 0 }, { 0 } };

int bench_turns_on(void)
{
	return g_turns.rfd >= 0;
}

void bench_turns_open(void)
{
	const char *v = getenv("PVGPU_BENCH_TURN");
	int r, w, first;

	if (!v || sscanf(v, "%d,%d,%d", &r, &w, &first) != 3 || r < 0 || w < 0)
		return;
	signal(SIGPIPE, SIG_IGN);
	g_turns.rfd = r;
	g_turns.wfd = w;
	g_turns.held = 0;
	if (first) {
		g_turns.held = 1;
		g_turns.start[g_turns.n] = now_s();
	}
}

void bench_turns_end(void)
{
	if (g_turns.rfd >= 0) {
		close(g_turns.rfd);
		close(g_turns.wfd);
	}
	g_turns.rfd = g_turns.wfd = -1;
	g_turns.held = 0;
}

void bench_turn_wait(void)
{
	char b;
	ssize_t n;

	if (g_turns.rfd < 0 || g_turns.held)
		return;
	while ((n = read(g_turns.rfd, &b, 1)) < 0 && errno == EINTR)
		;
	if (n != 1) {
		bench_turns_end();	/* the other run is over */
		return;
	}
	g_turns.held = 1;
	if (g_turns.n < BENCH_MAX_TURNS)
		g_turns.start[g_turns.n] = now_s();
}

void bench_turn_pass(void)
{
	if (g_turns.rfd < 0 || !g_turns.held)
		return;
	if (g_turns.n < BENCH_MAX_TURNS)
		g_turns.end[g_turns.n++] = now_s();
	g_turns.held = 0;
	if (write(g_turns.wfd, "t", 1) != 1)
		bench_turns_end();
}

/*
 * Before timed iteration i of a loop (every `every`th, not the first):
 * hand the GPU to the other run and wait for it back.  1 if it did: the
 * caller then runs a few untimed operations to bring its path back to
 * speed (the other run had the GPU; through pvgpu, the worker may have
 * gone to sleep).  0 without --interleave.
 */
int bench_turn_point(long long i, long long every)
{
	if (g_turns.rfd < 0 || every <= 0 || i <= 0 || i % every)
		return 0;
	bench_turn_pass();
	bench_turn_wait();
	return 1;
}

/*
 * After the options: --interleave (every > 0) means something with
 * --compare, or in a child of one (which has its turn pipes).
 */
void interleave_option_done(int every, const struct common_opts *co)
{
	if (every && !co->compare && !getenv("PVGPU_BENCH_TURN"))
		usage_error("--interleave only means something with --compare");
}

/* The turns this child held, a JSON member and its comma: "turns":[[start,end],...], */
void json_turns(FILE *f)
{
	fputs("\"turns\":[", f);
	for (int i = 0; i < g_turns.n; i++)	/* to the nanosecond: turns can be short */
		fprintf(f, "%s[%.9f,%.9f]", i ? "," : "", g_turns.start[i],
			g_turns.end[i]);
	fputs("],", f);
}

/* What compare_run_all kept of its children. */
void compare_runs_free(struct compare_runs *cs)
{
	for (int k = 0; k < cs->pairs; k++) {
		struct child_run *side[2] = { &cs->nat[k], &cs->pv[k] };

		for (int s = 0; s < 2; s++) {
			json_free(side[s]->json);
			free(side[s]->text);
		}
	}
	free(cs->nat);
	free(cs->pv);
	memset(cs, 0, sizeof(*cs));
}

/*
 * The median over `n` runs of `field` in the result `key` (NAN if no run has
 * it as a number); the least and greatest go to *lo and *hi if not NULL.
 * With an even n the median is the mean of the middle two.
 */
double compare_stat(const struct child_run *runs, int n, const char *key,
		    const char *field, double *lo, double *hi)
{
	double *v = (double *)xmalloc(n * sizeof(*v)), med = NAN;
	int i, m = 0;

	for (i = 0; i < n; i++) {
		double x = jnum(find_result(runs[i].json, key), field);

		if (isfinite(x))
			v[m++] = x;
	}
	if (m) {
		qsort(v, m, sizeof(*v), cmp_double);
		med = m % 2 ? v[m / 2] : (v[m / 2 - 1] + v[m / 2]) / 2;
	}
	if (lo)
		*lo = m ? v[0] : NAN;
	if (hi)
		*hi = m ? v[m - 1] : NAN;
	free(v);
	return med;
}

/* The children of one role as a JSON array of their own objects. */
void compare_json_runs(const struct child_run *runs, int n)
{
	int i;

	printf("[");
	for (i = 0; i < n; i++)
		printf("%s%s", i ? "," : "", runs[i].text);
	printf("]");
}

/*
 * Compare JSON: {"benchmark":..., "mode":"compare", "native":{...},
 * "pvgpu":{...}, "comparison":[{key, field, native, pvgpu, ratio}...]
 * written WITHOUT the closing brace, so a benchmark can add its own members.
 * "native" and "pvgpu" are the first child of each role.  With --pairs N
 * (N > 1) it also has "pairs":N, "native_runs" and "pvgpu_runs" (every
 * child, in the order each role's ran), the comparison's values are the
 * medians over each role's children, and each entry adds their min and max.
 */
void compare_json(const struct cmp_field *fields, int nfields,
		  const struct compare_runs *cs)
{
	const struct child_run *nat = &cs->nat[0], *pv = &cs->pv[0];
	const struct jval *res = jget(nat->json, "results");
	int i, f, first = 1;

	printf("{\"benchmark\":");
	json_str(stdout, g_prog);
	printf(",\"schema\":1,\"mode\":\"compare\",\"native_libdir\":");
	json_str(stdout, nat->libdir);
	printf(",\"pvgpu_libdir\":");
	json_str(stdout, pv->libdir);
	printf(",\"native\":%s,\"pvgpu\":%s,", nat->text, pv->text);
	if (cs->interleave)
		printf("\"interleave\":%d,", cs->interleave);
	if (cs->pairs > 1) {
		printf("\"pairs\":%d,\"order\":\"%s\","
		       "\"native_runs\":", cs->pairs, cs->interleave ?
		       "each pair at once, by turns" : "native,pvgpu,pvgpu,native,...");
		compare_json_runs(cs->nat, cs->pairs);
		printf(",\"pvgpu_runs\":");
		compare_json_runs(cs->pv, cs->pairs);
		printf(",");
	}
	printf("\"comparison\":[");
	for (i = 0; res && res->type == J_ARR && i < res->n; i++) {
		const char *key = jstr(&res->items[i], "key");
		const struct jval *other = key ? find_result(pv->json, key) : NULL;

		for (f = 0; other && f < nfields; f++) {
			double alo, ahi, blo, bhi;
			double a = compare_stat(cs->nat, cs->pairs, key,
						fields[f].field, &alo, &ahi);
			double b = compare_stat(cs->pv, cs->pairs, key,
						fields[f].field, &blo, &bhi);

			if (isnan(a) && isnan(b))
				continue;
			printf("%s{\"key\":", first ? "" : ",");
			json_str(stdout, key);
			printf(",\"field\":");
			json_str(stdout, fields[f].field);
			printf(",\"native\":");
			json_num(stdout, a);
			printf(",\"pvgpu\":");
			json_num(stdout, b);
			printf(",\"ratio\":");
			json_num(stdout, b / a);
			if (cs->pairs > 1) {
				printf(",\"native_min\":");
				json_num(stdout, alo);
				printf(",\"native_max\":");
				json_num(stdout, ahi);
				printf(",\"pvgpu_min\":");
				json_num(stdout, blo);
				printf(",\"pvgpu_max\":");
				json_num(stdout, bhi);
			}
			printf("}");
			first = 0;
		}
	}
	printf("]");
}

/* "lo..hi" of a spread, in a column of its own: 4 digits, whole numbers
 * from 10000 up (MB/s, launches/s) rather than an exponent. */
void print_spread(double lo, double hi)
{
	char buf[64];

	snprintf(buf, sizeof(buf), fabs(lo) >= 1e4 && fabs(lo) < 1e10 &&
		 fabs(hi) >= 1e4 && fabs(hi) < 1e10 ? "%.0f..%.0f" : "%.4g..%.4g",
		 lo, hi);
	printf(" %21s", buf);
}

/*
 * The comparison as a table: one row per (result, field).  With --pairs N
 * (N > 1) the header says the figures are medians, and each row adds the
 * min..max of each role's N runs.
 */
void compare_table(const struct cmp_field *fields, int nfields,
		   const struct compare_runs *cs)
{
	const struct child_run *nat = &cs->nat[0], *pv = &cs->pv[0];
	const struct jval *res = jget(nat->json, "results");
	int i, f, keyw = 4;

	if (cs->interleave)
		printf("%s --compare: %d pair%s of runs, each pair at once, "
		       "taking turns on the GPU every %d iterations%s\n", g_prog,
		       cs->pairs, cs->pairs > 1 ? "s" : "", cs->interleave,
		       cs->pairs > 1 ? "; medians of each side's runs" : "");
	else if (cs->pairs > 1)
		printf("%s --compare: medians of %d alternating runs each "
		       "(native, pvgpu, pvgpu, native, native, pvgpu, ...)\n",
		       g_prog, cs->pairs);
	else
		printf("%s --compare\n", g_prog);
	printf("  native: ");
	print_library(jget(nat->json, "library"));
	printf("\n  pvgpu:  ");
	print_library(jget(pv->json, "library"));
	printf(" (PVGPU_DEVICES=%s)\n",
	       jstr(pv->json, "pvgpu_devices") ? jstr(pv->json, "pvgpu_devices")
					       : "(unset)");
	printf("  device: %s\n", jstr(jget(nat->json, "device"), "name") ?
	       jstr(jget(nat->json, "device"), "name") : "?");
	for (i = 0; res && res->type == J_ARR && i < res->n; i++) {
		const char *key = jstr(&res->items[i], "key");

		if (key && (int)strlen(key) > keyw)
			keyw = (int)strlen(key);
	}
	printf("\n%-*s  %-12s %14s %14s %13s", keyw, "test", "metric",
	       "native", "pvgpu", "pvgpu/native");
	if (cs->pairs > 1)
		printf(" %21s %21s", "native min..max", "pvgpu min..max");
	printf("\n");
	for (i = 0; res && res->type == J_ARR && i < res->n; i++) {
		const char *key = jstr(&res->items[i], "key");
		const struct jval *other = key ? find_result(pv->json, key) : NULL;

		for (f = 0; key && f < nfields; f++) {
			double alo, ahi, blo = NAN, bhi = NAN;
			double a = compare_stat(cs->nat, cs->pairs, key,
						fields[f].field, &alo, &ahi);
			double b = other ? compare_stat(cs->pv, cs->pairs, key,
							fields[f].field, &blo,
							&bhi)
					 : NAN;

			if (!fields[f].in_table || (isnan(a) && isnan(b)))
				continue;
			printf("%-*s  %-12s %14.6g %14.6g %13.3f", keyw, key,
			       fields[f].label, a, b, b / a);
			if (cs->pairs > 1) {
				print_spread(alo, ahi);
				print_spread(blo, bhi);
			}
			if (fields[f].lower_is_better && a > 0 && isfinite(b))
				printf("  (%+.1f%%)", (b / a - 1.0) * 100.0);
			printf("\n");
		}
	}
}

#endif /* PVGPU_BENCH_COMMON_H */
