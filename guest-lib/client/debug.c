/* debug.c - the PVGPU_DEBUG switch: see debug.h. */
#include <stdarg.h>
#include <stdio.h>

#include "debug.h"

/* Set before any thread of ours runs and read only after: no lock. */
static int debug_on;

void pvgpu_debug_enable(int on)
{
	__atomic_store_n(&debug_on, on, __ATOMIC_RELAXED);
}

void pvgpu_debug(const char *fmt, ...)
{
	char line[512];
	va_list ap;

	if (!__atomic_load_n(&debug_on, __ATOMIC_RELAXED))
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	/* One write, so lines from several threads do not interleave. */
	fprintf(stderr, "pvgpu: %s\n", line);
}
