/*
 * log.h - one line per event on stderr, for a person to read:
 *   2026-11-22T11:30:00Z pvgpud[123] info: session 4 start: uid=1000 ...
 *
 * A line is one line whatever it quotes: what comes from outside (a
 * guest's strings, a file's, another node's) is escaped before it is
 * formatted (pvgpu_escape, log_esc), and pvgpu_log itself shows any control
 * character or stray byte left in a message as \xNN.
 */
#ifndef PVGPU_LOG_H
#define PVGPU_LOG_H

#include <stdarg.h>
#include <stddef.h>

enum pvgpu_log_level { LOG_ERROR, LOG_WARN, LOG_INFO, LOG_DEBUG };

/* Returns 0 and sets the level, or -1 for an unknown name. */
int pvgpu_log_set_level(const char *name);
/* A prefix for every line of this process, e.g. "session 4". */
void pvgpu_log_set_prefix(const char *prefix);
int pvgpu_log_enabled(enum pvgpu_log_level level);
/*
 * Where the lines go (default: fd 2).  A worker whose own fd 1 and 2 carry
 * its guest's device output logs through a copy of the daemon's stderr.
 */
void pvgpu_log_set_fd(int fd);
int pvgpu_log_fd(void);

void pvgpu_log(enum pvgpu_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
void pvgpu_vlog(enum pvgpu_log_level level, const char *fmt, va_list ap)
	__attribute__((format(printf, 2, 0)));

/*
 * The one escape for text from outside on its way to a log line, a metrics
 * label or a status line: control characters (newline, CR, ESC, DEL, the
 * C1 controls), Unicode's line and paragraph separators and bidirectional
 * controls, and bytes that are not valid UTF-8 become \xNN, one per byte,
 * and a backslash becomes \\; printable ASCII and other valid UTF-8 stay.
 * So nothing from outside can end a line, move a terminal's cursor or
 * pass for something pvgpud wrote, and the bytes can be read back.
 *
 * len is in's length, or PVGPU_ESC_STR for a NUL-terminated string (NULL
 * shows as "(null)").  out gets at most size bytes with its NUL; what does
 * not fit is cut at a whole character and "..." ends the text.  Returns out.
 */
#define PVGPU_ESC_STR		((size_t)-1)
/*
 * A Prometheus label value: the text as escaped above but with its
 * backslashes as they were (a reader of labels takes names as they are),
 * then \ and " escaped for the exposition format.
 */
#define PVGPU_ESC_LABEL		0x1u
/* Leave backslashes as they are (pvgpu_log's own pass over a message). */
#define PVGPU_ESC_KEEP_BACKSLASH 0x2u
char *pvgpu_escape(char *out, size_t size, const void *in, size_t len,
		   unsigned int flags);

/*
 * log_esc(s): s escaped, for a log call's argument, in a buffer of the
 * enclosing block (at most PVGPU_ESC_MAX - 1 bytes: a log line is no
 * place for more).
 */
#define PVGPU_ESC_MAX		256
#define log_esc(s) \
	pvgpu_escape((char[PVGPU_ESC_MAX]){ 0 }, PVGPU_ESC_MAX, (s), PVGPU_ESC_STR, 0)

#define log_error(...) pvgpu_log(LOG_ERROR, __VA_ARGS__)
#define log_warn(...)  pvgpu_log(LOG_WARN, __VA_ARGS__)
#define log_info(...)  pvgpu_log(LOG_INFO, __VA_ARGS__)
#define log_debug(...) pvgpu_log(LOG_DEBUG, __VA_ARGS__)

#endif /* PVGPU_LOG_H */
