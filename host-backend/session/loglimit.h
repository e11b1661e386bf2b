/*
 * loglimit.h - a bound on the log lines one session's requests can cause.
 *
 * What a guest can make happen again and again (an unknown opcode, a
 * malformed or refused request, a call that fails) is logged through
 * pvgpu_session_log(), per session: the first PVGPU_LOG_BURST lines of
 * each kind are written (a kind is a call site: its format string), the
 * rest only counted, and one line per kind says how many were not
 * written: when the session ends, and at most once a minute while they
 * keep coming.  A session that floods pvgpud with bad requests costs the
 * log a few dozen lines, not several bytes of log per byte it sends.
 *
 * It lives in the worker (struct pvgpu_worker's loglim): each session is
 * a process of its own, and one session's flood must not silence another.
 */
#ifndef PVGPU_LOGLIMIT_H
#define PVGPU_LOGLIMIT_H

#include <stdint.h>

#include "log.h"

#define PVGPU_LOG_BURST		10	/* lines of one kind written */
#define PVGPU_LOG_KINDS		48	/* kinds told apart; later ones share a count */
#define PVGPU_LOG_SUMMARY_NS	(60 * 1000000000ull)

struct pvgpu_log_limit {
	struct pvgpu_log_kind {
		const char *fmt;		/* NULL: the shared count */
		enum pvgpu_log_level level;	/* the most severe seen */
		uint32_t written;
		uint64_t dropped;		/* since the last summary */
	} kinds[PVGPU_LOG_KINDS + 1];
	unsigned int nkinds;
	uint64_t last_summary_ns;
};

void pvgpu_log_limit_init(struct pvgpu_log_limit *lim);
/* log_*() for what a request caused: written, or counted once over the limit. */
void pvgpu_session_log(struct pvgpu_log_limit *lim, enum pvgpu_log_level level,
		       const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* A line for each kind with lines not written since the last summary. */
void pvgpu_log_limit_summary(struct pvgpu_log_limit *lim);

#define wlog_error(w, ...)	pvgpu_session_log(&(w)->loglim, LOG_ERROR, __VA_ARGS__)
#define wlog_warn(w, ...)	pvgpu_session_log(&(w)->loglim, LOG_WARN, __VA_ARGS__)
#define wlog_info(w, ...)	pvgpu_session_log(&(w)->loglim, LOG_INFO, __VA_ARGS__)
#define wlog_debug(w, ...)	pvgpu_session_log(&(w)->loglim, LOG_DEBUG, __VA_ARGS__)

#endif /* PVGPU_LOGLIMIT_H */
