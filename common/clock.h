/*
 * clock.h - the one monotonic clock every part reads: deadlines, turn
 * lengths, watchdog timers.  Wall-clock time jumps (NTP, the admin), so
 * nothing that measures an interval may use it.
 */
#ifndef PVGPU_CLOCK_H
#define PVGPU_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t pvgpu_now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/*
 * The same clock as of the last timer tick (a few milliseconds behind at
 * most), for what measures seconds on a hot path: no hardware counter
 * read, a fifth of the cost or less.  Never later than pvgpu_now_ns().
 */
static inline uint64_t pvgpu_now_coarse_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC_COARSE, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

#endif /* PVGPU_CLOCK_H */
