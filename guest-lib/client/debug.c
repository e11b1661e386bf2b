/* debug.c - the PVGPU_DEBUG switch.  Only failure paths print, so reading
 * the environment each time costs nothing that matters. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "debug.h"

void pvgpu_debug(const char *fmt, ...)
{
	const char *env = getenv("PVGPU_DEBUG");
	char line[512];
	va_list ap;

	if (!env || !*env || !strcmp(env, "0"))
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	/* One write, so lines from several threads do not interleave. */
	fprintf(stderr, "pvgpu: %s\n", line);
}
