/*
 * unit_check.h - the C unit tests' one assertion: CHECK(cond) counts a
 * pass or prints the failed condition with its place, and the test's
 * main() ends with UNIT_REPORT() (the line tests/unit/test_unit.py reads).
 */
#ifndef PVGPU_UNIT_CHECK_H
#define PVGPU_UNIT_CHECK_H

#include <stdio.h>

static int passed, failed;

#define CHECK(cond) do {						\
	if (cond) {							\
		passed++;						\
	} else {							\
		failed++;						\
		fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__,	\
			__LINE__, #cond);				\
	}								\
} while (0)

#define UNIT_REPORT() (printf("%d passed, %d failed\n", passed, failed), failed != 0)

#endif /* PVGPU_UNIT_CHECK_H */
