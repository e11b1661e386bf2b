/*
 * unit_log.h - for C unit tests that check what was logged: unit_log_open()
 * sends this process's log lines to a memory file, unit_log_lines() reads
 * what came since the last look and empties it.
 */
#ifndef PVGPU_UNIT_LOG_H
#define PVGPU_UNIT_LOG_H

#include <sys/mman.h>
#include <sys/types.h>
#include <unistd.h>

#include "log.h"

static int unit_log_fd = -1;

/* 0, or -1 when no memory file could be had. */
static inline int unit_log_open(void)
{
	unit_log_fd = memfd_create("log", 0);
	if (unit_log_fd < 0)
		return -1;
	pvgpu_log_set_fd(unit_log_fd);
	return 0;
}

/* What was logged since the last look (into text), and how many lines. */
static inline int unit_log_lines(char *text, size_t size)
{
	ssize_t n = pread(unit_log_fd, text, size - 1, 0);
	int count = 0;

	text[n < 0 ? 0 : n] = '\0';
	for (ssize_t i = 0; i < n; i++)
		count += text[i] == '\n';
	if (ftruncate(unit_log_fd, 0) || lseek(unit_log_fd, 0, SEEK_SET) < 0)
		return -1;
	return count;
}

#endif /* PVGPU_UNIT_LOG_H */
