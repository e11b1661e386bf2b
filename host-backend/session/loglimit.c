/* loglimit.c - a bound on the log lines of one session (see loglimit.h). */
#include <stdarg.h>
#include <string.h>

#include "clock.h"
#include "loglimit.h"

void pvgpu_log_limit_init(struct pvgpu_log_limit *lim)
{
	memset(lim, 0, sizeof(*lim));
	lim->last_summary_ns = pvgpu_now_coarse_ns();
}

static struct pvgpu_log_kind *kind_of(struct pvgpu_log_limit *lim,
				      const char *fmt)
{
	for (unsigned int i = 0; i < lim->nkinds; i++)
		if (lim->kinds[i].fmt == fmt)
			return &lim->kinds[i];
	if (lim->nkinds == PVGPU_LOG_KINDS)
		return &lim->kinds[PVGPU_LOG_KINDS];
	lim->kinds[lim->nkinds].fmt = fmt;
	return &lim->kinds[lim->nkinds++];
}

void pvgpu_session_log(struct pvgpu_log_limit *lim, enum pvgpu_log_level level,
		       const char *fmt, ...)
{
	struct pvgpu_log_kind *k;
	va_list ap;

	/* A line the level would not write anyway is not a suppressed one. */
	if (!pvgpu_log_enabled(level))
		return;
	k = kind_of(lim, fmt);
	if (!(k->written + k->dropped) || level < k->level)
		k->level = level;
	if (k->written < PVGPU_LOG_BURST) {
		k->written++;
		va_start(ap, fmt);
		pvgpu_vlog(level, fmt, ap);
		va_end(ap);
		return;
	}
	k->dropped++;
	if (pvgpu_now_coarse_ns() - lim->last_summary_ns >= PVGPU_LOG_SUMMARY_NS)
		pvgpu_log_limit_summary(lim);
}

void pvgpu_log_limit_summary(struct pvgpu_log_limit *lim)
{
	for (unsigned int i = 0; i <= PVGPU_LOG_KINDS; i++) {
		struct pvgpu_log_kind *k = &lim->kinds[i];

		if (!k->dropped)
			continue;
		/* The format is pvgpud's own text: it says which line it was. */
		if (k->fmt)
			pvgpu_log(k->level, "%llu more lines like \"%s\" not logged (%d of each kind are, per session)",
				  (unsigned long long)k->dropped, k->fmt,
				  PVGPU_LOG_BURST);
		else
			pvgpu_log(k->level, "%llu more lines of other kinds not logged (%d of each kind are, per session)",
				  (unsigned long long)k->dropped, PVGPU_LOG_BURST);
		k->dropped = 0;
	}
	lim->last_summary_ns = pvgpu_now_coarse_ns();
}
