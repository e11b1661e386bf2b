/* saylimit.c - lines a caller can cause, a second apart (see saylimit.h). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "clock.h"
#include "log.h"
#include "saylimit.h"

static void vsay(struct pvgpu_saylimit *sl, const char *fmt, va_list ap)
{
	uint64_t now = pvgpu_now_ns();
	char line[400];

	if (now < sl->next_ns) {
		sl->unsaid++;
		return;
	}
	vsnprintf(line, sizeof(line), fmt, ap);
	if (sl->unsaid)
		log_warn("%s (and %lu more like it since the last such line)",
			 line, sl->unsaid);
	else
		log_warn("%s", line);
	sl->unsaid = 0;
	sl->next_ns = now + 1000000000ull;
}

void pvgpu_say(struct pvgpu_saylimit *sl, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsay(sl, fmt, ap);
	va_end(ap);
}

/*
 * source's entry: its own, else one that holds nothing back (its last
 * line a second ago or more, nothing unsaid since), else the shared one.
 */
static struct pvgpu_saylimit *limit_of(struct pvgpu_saysources *t,
				       const char *source)
{
	struct pvgpu_saysource *idle = NULL;
	uint64_t now = pvgpu_now_ns();

	for (unsigned int i = 0; i < PVGPU_SAY_SOURCES; i++) {
		struct pvgpu_saysource *s = &t->v[i];

		if (!strncmp(s->key, source, sizeof(s->key) - 1))
			return &s->sl;
		if (!idle && now >= s->sl.next_ns && !s->sl.unsaid)
			idle = s;
	}
	if (!idle)
		return &t->rest;
	snprintf(idle->key, sizeof(idle->key), "%s", source);
	idle->sl = (struct pvgpu_saylimit){ 0 };
	return &idle->sl;
}

void pvgpu_say_from(struct pvgpu_saysources *t, const char *source,
		    const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsay(limit_of(t, source), fmt, ap);
	va_end(ap);
}
