/*
 * log.h - one line per event on stderr, for a person to read:
 *   2026-11-22T11:30:00Z pvgpud[123] info: session 4 start: uid=1000 ...
 */
#ifndef PVGPU_LOG_H
#define PVGPU_LOG_H

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

#define log_error(...) pvgpu_log(LOG_ERROR, __VA_ARGS__)
#define log_warn(...)  pvgpu_log(LOG_WARN, __VA_ARGS__)
#define log_info(...)  pvgpu_log(LOG_INFO, __VA_ARGS__)
#define log_debug(...) pvgpu_log(LOG_DEBUG, __VA_ARGS__)

#endif /* PVGPU_LOG_H */
