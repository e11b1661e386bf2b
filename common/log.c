/*
 * log.c - the daemon's log.  The level and prefix are per process (the
 * supervisor and each worker set their own after fork); a log line is
 * written with a single write(2) so lines from many workers never interleave.
 * The escape of outside text (log.h) lives here, beside its first user.
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

/*
 * How many bytes of valid UTF-8 start at p (n bytes left), 0 for none;
 * *hide is set for a character a terminal or a reader could be fooled by
 * (C1 controls, U+2028/U+2029, the bidirectional controls).
 */
static size_t utf8_char(const unsigned char *p, size_t n, int *hide)
{
	unsigned char lo = 0x80, hi = 0xbf;
	size_t len;

	*hide = 0;
	if (p[0] >= 0xc2 && p[0] <= 0xdf)
		len = 2;
	else if (p[0] >= 0xe0 && p[0] <= 0xef)
		len = 3;
	else if (p[0] >= 0xf0 && p[0] <= 0xf4)
		len = 4;
	else
		return 0;
	if (n < len)
		return 0;
	/* The second byte's range rules out overlong forms, surrogates and > U+10FFFF. */
	if (p[0] == 0xe0)
		lo = 0xa0;
	else if (p[0] == 0xed)
		hi = 0x9f;
	else if (p[0] == 0xf0)
		lo = 0x90;
	else if (p[0] == 0xf4)
		hi = 0x8f;
	if (p[1] < lo || p[1] > hi)
		return 0;
	for (size_t i = 2; i < len; i++)
		if (p[i] < 0x80 || p[i] > 0xbf)
			return 0;
	if (p[0] == 0xc2 && p[1] <= 0x9f)
		*hide = 1;			/* U+0080..U+009F */
	else if (p[0] == 0xe2 && p[1] == 0x80 && p[2] >= 0xa8 && p[2] <= 0xae)
		*hide = 1;			/* U+2028..U+202E */
	else if (p[0] == 0xe2 && p[1] == 0x81 && p[2] >= 0xa6 && p[2] <= 0xa9)
		*hide = 1;			/* U+2066..U+2069 */
	return len;
}

char *pvgpu_escape(char *out, size_t size, const void *in, size_t len,
		   unsigned int flags)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *p = in;
	size_t o = 0, i = 0, cut = 0;	/* cut: where "..." would still fit */

	if (!size)
		return out;
	if (!p) {
		p = (const unsigned char *)"(null)";
		len = PVGPU_ESC_STR;
	}
	if (len == PVGPU_ESC_STR)
		len = strlen((const char *)p);
	while (i < len) {
		char buf[40];
		size_t n = 0, take = 1;
		int hide = 0;

		if (p[i] >= 0x20 && p[i] < 0x7f) {
			if (p[i] == '\\' &&
			    !(flags & (PVGPU_ESC_KEEP_BACKSLASH | PVGPU_ESC_LABEL)))
				buf[n++] = '\\';
			buf[n++] = (char)p[i];
		} else if (p[i] >= 0x80 &&
			   (take = utf8_char(p + i, len - i, &hide)) && !hide) {
			memcpy(buf, p + i, take);
			n = take;
		} else {
			take = take ? take : 1;
			for (size_t k = 0; k < take; k++) {
				buf[n++] = '\\';
				buf[n++] = 'x';
				buf[n++] = hex[p[i + k] >> 4];
				buf[n++] = hex[p[i + k] & 15];
			}
		}
		if (flags & PVGPU_ESC_LABEL) {
			/* What is in buf is the value; say it in the exposition format. */
			char lab[sizeof(buf)];
			size_t m = 0;

			for (size_t k = 0; k < n; k++) {
				if (buf[k] == '\\' || buf[k] == '"')
					lab[m++] = '\\';
				lab[m++] = buf[k];
			}
			memcpy(buf, lab, m);
			n = m;
		}
		if (o + n >= size) {
			o = cut;
			if (o + 3 < size) {
				memcpy(out + o, "...", 3);
				o += 3;
			}
			break;
		}
		memcpy(out + o, buf, n);
		o += n;
		i += take;
		if (o + 3 < size)
			cut = o;
	}
	out[o] = '\0';
	return out;
}

int pvgpu_log_enabled(enum pvgpu_log_level level)
{
	return level <= log_level;
}

void pvgpu_log(enum pvgpu_log_level level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	pvgpu_vlog(level, fmt, ap);
	va_end(ap);
}

void pvgpu_vlog(enum pvgpu_log_level level, const char *fmt, va_list ap)
{
	char line[1024], msg[1024];
	struct timespec now;
	struct tm tm;
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
	vsnprintf(msg, sizeof(msg), fmt, ap);
	/*
	 * Whatever a caller quoted unescaped, the line stays one line: a
	 * newline or an ESC left in the message shows as \xNN.  Backslashes
	 * stay, so text escaped before (log_esc) reads as it was written.
	 */
	pvgpu_escape(line + n, sizeof(line) - (size_t)n - 1, msg, PVGPU_ESC_STR,
		     PVGPU_ESC_KEEP_BACKSLASH);
	n = (int)strlen(line);
	line[n++] = '\n';
	if (write(log_fd, line, (size_t)n) < 0) {
		/* Nowhere left to complain to. */
	}
}
