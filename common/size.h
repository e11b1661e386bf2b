/*
 * size.h - the one way pvgpu reads a size: "4096", "256K", "1M", "2G",
 * "1T" (powers of 1024; "Ki"/"KiB"/"KB" spellings are taken too).  pvgpud's
 * flags, the policy and registry files and the guest's environment all
 * say sizes this way, so a user learns it once.  Durations likewise:
 * "300", "1.5", "500ms", "2m".
 */
#ifndef PVGPU_SIZE_H
#define PVGPU_SIZE_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {	/* the benchmarks are CUDA C++ */
#endif

/* 0 and *out, or -1 for anything else (no sign, no overflow, no junk). */
int pvgpu_parse_size(const char *s, uint64_t *out);

/*
 * A duration: decimal digits with an optional fraction ("300", "1.5"),
 * seconds, or with units non-zero followed by ms, s or m.  0 and *ms
 * (rounded to the millisecond), or
 *   PVGPU_DURATION_BAD    not that (hex, exponents, signs, blanks, inf),
 *   PVGPU_DURATION_SHORT  not zero, but under min_ms (or 1 ms): a limit
 *                         finer than what enforces it would silently be
 *                         another, or none at all (0 is "no limit"),
 *   PVGPU_DURATION_LONG   over max_ms (or over 10^7 of its unit).
 */
#define PVGPU_DURATION_BAD	(-1)
#define PVGPU_DURATION_SHORT	(-2)
#define PVGPU_DURATION_LONG	(-3)
int pvgpu_parse_duration(const char *s, int units, uint64_t min_ms,
			 uint64_t max_ms, uint64_t *ms);

#ifdef __cplusplus
}
#endif

#endif /* PVGPU_SIZE_H */
