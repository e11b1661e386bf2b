/* size.c - see size.h. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "size.h"

int pvgpu_parse_size(const char *s, uint64_t *out)
{
	unsigned long long v;
	unsigned int shift = 0;
	char *end;

	/* strtoull takes "-1" as a huge number and skips blanks: refuse both. */
	if (!s || *s < '0' || *s > '9')
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return -1;
	switch (*end) {
	case 'K': case 'k': shift = 10; end++; break;
	case 'M': case 'm': shift = 20; end++; break;
	case 'G': case 'g': shift = 30; end++; break;
	case 'T': case 't': shift = 40; end++; break;
	}
	if (shift && *end == 'i')
		end++;
	if (*end == 'B' || *end == 'b')
		end++;
	if (*end || (shift && v > (UINT64_MAX >> shift)))
		return -1;
	*out = (uint64_t)v << shift;
	return 0;
}

int pvgpu_parse_duration(const char *s, int units, uint64_t min_ms,
			 uint64_t max_ms, uint64_t *ms)
{
	uint64_t whole = 0, frac = 0, scale = 1, unit_us = 1000000, us;
	int digits = 0, nonzero = 0;

	if (!s || *s < '0' || *s > '9')
		return PVGPU_DURATION_BAD;
	/* Integers throughout: strtod would take 0x10, 1e-9, inf and nan. */
	for (; *s >= '0' && *s <= '9'; s++) {
		if ((whole || *s != '0') && ++digits > 7)
			return PVGPU_DURATION_LONG;
		whole = whole * 10 + (uint64_t)(*s - '0');
		nonzero |= *s != '0';
	}
	if (*s == '.') {
		if (s[1] < '0' || s[1] > '9')
			return PVGPU_DURATION_BAD;
		/* Digits past the ninth are below any clock here: read, not kept. */
		for (s++, digits = 0; *s >= '0' && *s <= '9'; s++) {
			nonzero |= *s != '0';
			if (++digits <= 9) {
				frac = frac * 10 + (uint64_t)(*s - '0');
				scale *= 10;
			}
		}
	}
	if (units && !strcmp(s, "ms"))
		unit_us = 1000;
	else if (units && !strcmp(s, "m"))
		unit_us = 60000000;
	else if (*s && !(units && !strcmp(s, "s")))
		return PVGPU_DURATION_BAD;
	us = whole * unit_us + frac * unit_us / scale;
	/* Nothing nonzero may round to 0, which means "none". */
	if (nonzero && us < (min_ms ? min_ms : 1) * 1000)
		return PVGPU_DURATION_SHORT;
	if ((us + 500) / 1000 > max_ms)
		return PVGPU_DURATION_LONG;
	*ms = (us + 500) / 1000;
	return 0;
}
