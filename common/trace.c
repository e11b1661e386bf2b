/* trace.c - see trace.h; empty unless built with -DPVGPU_TRACE. */
#include "trace.h"

#ifdef PVGPU_TRACE
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "clock.h"

#define TRACE_MAX	(1u << 20)

static struct mark {
	uint64_t id, ns;
	uint32_t point;
} marks[TRACE_MAX];
static unsigned int nmarks;
static int registered;

void pvgpu_trace_mark(uint64_t id, unsigned int point)
{
	if (!registered) {
		registered = 1;
		atexit(pvgpu_trace_dump);
	}
	if (nmarks < TRACE_MAX)
		marks[nmarks++] = (struct mark){ id, pvgpu_now_ns(), point };
}

void pvgpu_trace_dump(void)
{
	char path[64];
	FILE *f;

	if (!nmarks)
		return;
	snprintf(path, sizeof(path), "/tmp/pvgpu-trace-%d.txt", (int)getpid());
	f = fopen(path, "w");
	if (!f)
		return;
	for (unsigned int i = 0; i < nmarks; i++)
		fprintf(f, "%llu %u %llu\n", (unsigned long long)marks[i].id,
			marks[i].point, (unsigned long long)marks[i].ns);
	fclose(f);
	nmarks = 0;
}
#else
typedef int pvgpu_trace_unused;
#endif
