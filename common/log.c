/*
 * log.c - the daemon's log.  The level and prefix are per process (the
 * supervisor and each worker set their own after fork); a log line is
 * written with a single write(2) so lines from many workers never interleave.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

static enum pvgpu_log_level log_level = LOG_INFO;
static char log_prefix[64];
static int log_fd = STDERR_FILENO;

static const char *const level_names[] = { "error", "warn", "info", "debug" };

int pvgpu_log_set_level(const char *name)
{
	for (int i = 0; i <= LOG_DEBUG; i++) {
		if (!strcmp(name, level_names[i])) {
			log_level = (enum pvgpu_log_level)i;
			return 0;
		}
	}
	return -1;
}

void pvgpu_log_set_prefix(const char *prefix)
{
	snprintf(log_prefix, sizeof(log_prefix), "%s", prefix);
}

void pvgpu_log_set_fd(int fd)
{
	log_fd = fd >= 0 ? fd : STDERR_FILENO;
}

int pvgpu_log_fd(void)
{
	return log_fd;
}

int pvgpu_log_enabled(enum pvgpu_log_level level)
{
	return level <= log_level;
}

void pvgpu_log(enum pvgpu_log_level level, const char *fmt, ...)
{
	char line[1024];
	struct timespec now;
	struct tm tm;
	va_list ap;
	int n;

	if (!pvgpu_log_enabled(level))
		return;
	clock_gettime(CLOCK_REALTIME, &now);
	gmtime_r(&now.tv_sec, &tm);
	n = snprintf(line, sizeof(line),
		     "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ pvgpud[%d] %s: %s%s",
		     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
		     tm.tm_min, tm.tm_sec, now.tv_nsec / 1000000, (int)getpid(),
		     level_names[level], log_prefix, log_prefix[0] ? ": " : "");
	if (n < 0 || (size_t)n >= sizeof(line))
		n = 0;
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	n = (int)strlen(line);
	line[n++] = '\n';
	if (write(log_fd, line, (size_t)n) < 0) {
		/* Nowhere left to complain to. */
	}
}
