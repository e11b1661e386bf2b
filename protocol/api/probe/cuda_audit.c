/*
 * cuda_audit.c - a fact-finding tool for the GPU machine, not part of
 * pvgpu: an LD_AUDIT module that logs how a program reaches NVIDIA's
 * libcuda.so.1 — every symbol bound or dlsym'd from it (and by whom), every
 * cuGetProcAddress request (name, version, flags) and every export table
 * asked for by UUID — so that pvgpu's libcuda.so.1 can answer the same.
 *
 *   LD_AUDIT=./cuda_audit.so CUDA_AUDIT_LOG=/tmp/log ./program
 */
#define _GNU_SOURCE
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
	return r;
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
	return sym->st_value;
}
