/*
 * cuda_audit.c - a fact-finding tool for the GPU machine, not part of
 * pvgpu: an LD_AUDIT module that logs how a program reaches NVIDIA's
 * libcuda.so.1 — every symbol bound or dlsym'd from it (and by whom), every
 * cuGetProcAddress request (name, version, flags) and every export table
 * asked for by UUID — so that pvgpu's libcuda.so.1 can answer the same.
 *
 *   LD_AUDIT=./cuda_audit.so CUDA_AUDIT_LOG=/tmp/log ./program
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h>

static uintptr_t cuda_cookie;
static FILE *logf_;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

typedef CUresult (*gpa_fn)(const char *, void **, int, cuuint64_t,
			   CUdriverProcAddressQueryResult *);
typedef CUresult (*gpa1_fn)(const char *, void **, int, cuuint64_t);
typedef CUresult (*get_table_fn)(const void **, const CUuuid *);
static gpa_fn real_gpa;
static gpa1_fn real_gpa1;
static get_table_fn real_get_table;

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&mu);
	if (!logf_) {
		const char *p = getenv("CUDA_AUDIT_LOG");

		logf_ = p ? fopen(p, "a") : NULL;
		if (!logf_)
			logf_ = stderr;
	}
	va_start(ap, fmt);
	vfprintf(logf_, fmt, ap);
	va_end(ap);
	fflush(logf_);
	pthread_mutex_unlock(&mu);
}

static void *trace_wrap(const char *sym, void *real);

/*
 * With CUDA_AUDIT_TRACE, a table's function slots are traced too: the table
 * is copied and each word that dladdr() places inside libcuda.so.1 becomes a
 * traced wrapper named TABLE.SLOT (not the runtime-interface and integrity
 * tables, whose addresses the integrity check hashes).  Tables with a size word (the first word
 * below 4096) are that long; the others are taken as 8 words.
 */
static const void *wrap_table(const char *hex, const void *table)
{
	const uint64_t *w = table;
	size_t n = w[0] < 4096 && w[0] % 8 == 0 ? w[0] / 8 : 8;
	uint64_t *copy;
	char name[64];
	Dl_info di;

	/* The integrity check hashes these two tables' addresses. */
	if (!getenv("CUDA_AUDIT_TRACE") || n < 2 || n > 512 ||
	    !strncmp(hex, "6bd5fb6c", 8) || !strncmp(hex, "d4082055", 8))
		return table;
	copy = malloc(n * 8);
	if (!copy)
		return table;
	for (size_t i = 0; i < n; i++) {
		copy[i] = w[i];
		if (w[i] && dladdr((void *)w[i], &di) && di.dli_fname &&
		    strstr(di.dli_fname, "libcuda.so")) {
			snprintf(name, sizeof(name), "%.8s.%zu", hex, i);
			copy[i] = (uint64_t)trace_wrap(strdup(name), (void *)w[i]);
		}
	}
	return copy;
}

static CUresult audit_get_table(const void **table, const CUuuid *id)
{
	const unsigned char *b = (const unsigned char *)id->bytes;
	CUresult r = real_get_table(table, id);
	char hex[33];
	int i;

	for (i = 0; i < 16; i++)
		snprintf(hex + 2 * i, 3, "%02x", b[i]);
	say("export-table %s -> %d first-word %llu\n", hex, r,
	    r == CUDA_SUCCESS && *table ?
	    (unsigned long long)*(const uint64_t *)*table : 0ULL);
	if (r == CUDA_SUCCESS && *table)
		*table = wrap_table(hex, *table);
	return r;
}

/*
 * CUDA_AUDIT_TRACE=1: every entry point handed out by cuGetProcAddress is
 * replaced by a generic wrapper that logs the call's result (and, for a few
 * queries, the value returned), so that a library's start-up can be compared
 * call by call over two drivers.  The wrapper forwards twelve integer
 * arguments: enough for every driver function that takes no floating-point
 * value (x86-64: extra arguments are ignored by the callee).
 */
typedef uint64_t (*any_fn)(uint64_t, uint64_t, uint64_t, uint64_t, uint64_t,
			   uint64_t, uint64_t, uint64_t, uint64_t, uint64_t,
			   uint64_t, uint64_t);
#define NSLOTS 1024
static struct { const char *name; any_fn real; } slots[NSLOTS];
static int nslots;

/* A wrapper's number, 1 then five base-4 digits written in decimal, as an
 * index 0..1023. */
static int slot_index(unsigned int v)
{
	int i = 0, scale = 1;

	for (v -= 100000; v; v /= 10, scale *= 4)
		i += (int)(v % 10) * scale;
	return i;
}

/* Reads a word at v if it is mapped (write() to a pipe fails with EFAULT
 * where a load would fault). */
static int peek(uint64_t v, uint64_t *out)
{
	static int fds[2] = { -1, -1 };

	if (v < 0x10000 || v >= 0x800000000000ULL)
		return 0;
	if (fds[0] < 0 && pipe(fds))
		return 0;
	if (write(fds[1], (void *)v, 8) != 8)
		return 0;
	return read(fds[0], out, 8) == 8;
}

/* A table slot's call: its first six arguments, and the word each one
 * points at after the call (an output parameter's value). */
static void say_slot(const char *n, uint64_t r, const uint64_t *args)
{
	char buf[512];
	size_t o = 0;

	for (int i = 0; i < 6; i++) {
		uint64_t w;

		o += (size_t)snprintf(buf + o, sizeof(buf) - o, " %llx",
				      (unsigned long long)args[i]);
		if (peek(args[i], &w))
			o += (size_t)snprintf(buf + o, sizeof(buf) - o, "[%llx]",
					      (unsigned long long)w);
	}
	say("call %s ->%d args%s\n", n, (int)r, buf);
}

static uint64_t traced(unsigned int w, uint64_t a, uint64_t b, uint64_t c, uint64_t d,
		       uint64_t e, uint64_t f, uint64_t g, uint64_t h,
		       uint64_t j, uint64_t k, uint64_t l, uint64_t m)
{
	int i = slot_index(w);
	uint64_t r = slots[i].real(a, b, c, d, e, f, g, h, j, k, l, m);
	const char *n = slots[i].name;

	if (!strcmp(n, "cuDeviceGetAttribute") || !strcmp(n, "cuCtxGetLimit") ||
	    !strcmp(n, "cuFuncGetAttribute") || !strcmp(n, "cuDeviceGetCount") ||
	    !strcmp(n, "cuDriverGetVersion") || !strcmp(n, "cuCtxGetDevice") ||
	    !strcmp(n, "cuDeviceGet") || !strcmp(n, "cuKernelGetAttribute") ||
	    !strcmp(n, "cuOccupancyMaxActiveClusters") ||
	    !strcmp(n, "cuOccupancyAvailableDynamicSMemPerBlock") ||
	    !strcmp(n, "cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags") ||
	    !strcmp(n, "cuOccupancyMaxActiveBlocksPerMultiprocessor"))
		say("call %s(%llu, %llu) -> %d value %d\n", n,
		    (unsigned long long)b, (unsigned long long)c, (int)r,
		    a ? *(int *)a : -1);
	else if (strchr(n, '.'))
		say_slot(n, r, (uint64_t[]){ a, b, c, d, e, f });
	else
		say("call %s -> %d\n", n, (int)r);
	return r;
}

#define W(i) static uint64_t w##i(uint64_t a, uint64_t b, uint64_t c,	\
	uint64_t d, uint64_t e, uint64_t f, uint64_t g, uint64_t h,	\
	uint64_t j, uint64_t k, uint64_t l, uint64_t m)			\
	{ return traced(i, a, b, c, d, e, f, g, h, j, k, l, m); }
#define W4(i) W(i##0) W(i##1) W(i##2) W(i##3)
#define W16(i) W4(i##0) W4(i##1) W4(i##2) W4(i##3)
#define W64(i) W16(i##0) W16(i##1) W16(i##2) W16(i##3)
#define W256(i) W64(i##0) W64(i##1) W64(i##2) W64(i##3)
/* Indexes written in base 4, so that w<digits> is unique per slot. */
W256(10) W256(11) W256(12) W256(13)
#define P(i) (void *)w##i,
#define P4(i) P(i##0) P(i##1) P(i##2) P(i##3)
#define P16(i) P4(i##0) P4(i##1) P4(i##2) P4(i##3)
#define P64(i) P16(i##0) P16(i##1) P16(i##2) P16(i##3)
#define P256(i) P64(i##0) P64(i##1) P64(i##2) P64(i##3)
/* In the order of the names' base-4 digits, so wrappers[k] is w1<k>. */
static void *const wrappers[NSLOTS] = { P256(10) P256(11) P256(12) P256(13) };

static void *trace_wrap(const char *sym, void *real)
{
	static int on = -1;
	int i;

	if (on < 0)
		on = getenv("CUDA_AUDIT_TRACE") != NULL;
	if (!on || !real)
		return real;
	pthread_mutex_lock(&mu);
	for (i = 0; i < nslots; i++)
		if (slots[i].real == (any_fn)real)
			break;
	if (i == nslots && nslots < NSLOTS) {
		slots[i].name = strdup(sym);
		slots[i].real = (any_fn)real;
		nslots++;
	}
	pthread_mutex_unlock(&mu);
	return i < NSLOTS ? wrappers[i] : real;
}

static CUresult audit_gpa(const char *sym, void **pfn, int ver,
			  cuuint64_t flags, CUdriverProcAddressQueryResult *st)
{
	CUresult r = real_gpa(sym, pfn, ver, flags, st);

	say("procaddr %s %d %llu -> %d %d\n", sym, ver,
	    (unsigned long long)flags, r, st ? (int)*st : -1);
	if (r != CUDA_SUCCESS || !pfn || !*pfn)
		return r;
	if (!strcmp(sym, "cuGetExportTable")) {
		real_get_table = (get_table_fn)*pfn;
		*pfn = (void *)audit_get_table;
	} else if (*pfn == (void *)real_gpa) {
		*pfn = (void *)audit_gpa;	/* keep seeing its requests */
	} else {
		*pfn = trace_wrap(sym, *pfn);
	}
	return r;
}

static CUresult audit_gpa1(const char *sym, void **pfn, int ver,
			   cuuint64_t flags)
{
	CUresult r = real_gpa1(sym, pfn, ver, flags);

	say("procaddr-v1 %s %d %llu -> %d\n", sym, ver,
	    (unsigned long long)flags, r);
	if (r == CUDA_SUCCESS && pfn && *pfn && !strcmp(sym, "cuGetExportTable")) {
		real_get_table = (get_table_fn)*pfn;
		*pfn = (void *)audit_get_table;
	}
	return r;
}

unsigned int la_version(unsigned int v)
{
	(void)v;
	return LAV_CURRENT;
}

unsigned int la_objopen(struct link_map *map, Lmid_t lmid, uintptr_t *cookie)
{
	(void)lmid;
	if (strstr(map->l_name, "libcuda.so")) {
		cuda_cookie = (uintptr_t)cookie;
		say("open %s\n", map->l_name);
		return LA_FLG_BINDTO | LA_FLG_BINDFROM;
	}
	return LA_FLG_BINDFROM;
}

uintptr_t la_symbind64(Elf64_Sym *sym, unsigned int ndx, uintptr_t *refcook,
		       uintptr_t *defcook, unsigned int *flags,
		       const char *symname)
{
	struct link_map *from = (struct link_map *)*refcook;

	(void)ndx;
	(void)flags;
	if ((uintptr_t)defcook != cuda_cookie)
		return sym->st_value;
	say("bind %s from %s\n", symname, from && from->l_name ? from->l_name : "?");
	if (!strcmp(symname, "cuGetProcAddress_v2")) {
		real_gpa = (gpa_fn)sym->st_value;
		return (uintptr_t)audit_gpa;
	}
	if (!strcmp(symname, "cuGetProcAddress")) {
		real_gpa1 = (gpa1_fn)sym->st_value;
		return (uintptr_t)audit_gpa1;
	}
	if (!strcmp(symname, "cuGetExportTable")) {
		real_get_table = (get_table_fn)sym->st_value;
		return (uintptr_t)audit_get_table;
	}
	return (uintptr_t)trace_wrap(symname, (void *)sym->st_value);
}
