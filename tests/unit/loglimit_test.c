/*
 * loglimit_test.c - the per-session bound on log lines (session/loglimit.h):
 * the first lines of a kind are written, the rest counted and summed up
 * in one line per kind, at the end and once a minute; lines the level
 * would not write are not counted; kinds past the table share a count.
 */
#include <stdio.h>
#include <string.h>

#include "loglimit.h"

#include "unit_check.h"
#include "unit_log.h"

static void log_kind_a(struct pvgpu_log_limit *lim, int i)
{
	pvgpu_session_log(lim, LOG_WARN, "kind a %d", i);
}

static void log_kind_b(struct pvgpu_log_limit *lim, int i)
{
	pvgpu_session_log(lim, LOG_INFO, "kind b %d", i);
}

int main(void)
{
	static const char *const many[] = {
#define K(n) "other kind " #n " %d"
		K(0), K(1), K(2), K(3), K(4), K(5), K(6), K(7), K(8), K(9),
		K(10), K(11), K(12), K(13), K(14), K(15), K(16), K(17), K(18),
		K(19), K(20), K(21), K(22), K(23), K(24), K(25), K(26), K(27),
		K(28), K(29), K(30), K(31), K(32), K(33), K(34), K(35), K(36),
		K(37), K(38), K(39), K(40), K(41), K(42), K(43), K(44), K(45),
		K(46), K(47), K(48), K(49), K(50), K(51),
#undef K
	};
	struct pvgpu_log_limit lim;
	static char text[1 << 20];

	CHECK(unit_log_open() == 0);
	pvgpu_log_set_level("info");
	pvgpu_log_limit_init(&lim);

	/* 25 of one kind, 3 of another: 10 and 3 written. */
	for (int i = 0; i < 25; i++)
		log_kind_a(&lim, i);
	for (int i = 0; i < 3; i++)
		log_kind_b(&lim, i);
	CHECK(unit_log_lines(text, sizeof(text)) == 13);
	CHECK(strstr(text, "kind a 9\n") && !strstr(text, "kind a 10\n"));
	/* Debug lines at info are not written, so not counted either. */
	for (int i = 0; i < 50; i++)
		pvgpu_session_log(&lim, LOG_DEBUG, "quiet %d", i);
	CHECK(unit_log_lines(text, sizeof(text)) == 0);

	/* A minute on, the next line not written says how many were not. */
	lim.last_summary_ns -= PVGPU_LOG_SUMMARY_NS;
	log_kind_a(&lim, 25);
	CHECK(unit_log_lines(text, sizeof(text)) == 1);
	CHECK(strstr(text, "warn: 16 more lines like \"kind a %d\" not logged"));
	/* Counted afresh; the end sums up what is left, kinds with none silent. */
	for (int i = 0; i < 5; i++)
		log_kind_a(&lim, i);
	pvgpu_log_limit_summary(&lim);
	CHECK(unit_log_lines(text, sizeof(text)) == 1);
	CHECK(strstr(text, "5 more lines like \"kind a %d\""));
	CHECK(!strstr(text, "quiet"));

	/* Past the table's kinds, the rest share one count. */
	for (size_t k = 0; k < sizeof(many) / sizeof(many[0]); k++)
		for (int i = 0; i < PVGPU_LOG_BURST + 1; i++)
			pvgpu_session_log(&lim, LOG_INFO, many[k], i);
	CHECK(unit_log_lines(text, sizeof(text)) ==
	      (PVGPU_LOG_KINDS - 2) * PVGPU_LOG_BURST + PVGPU_LOG_BURST);
	pvgpu_log_limit_summary(&lim);
	CHECK(unit_log_lines(text, sizeof(text)) == PVGPU_LOG_KINDS - 2 + 1);
	CHECK(strstr(text, "more lines like \"other kind 45 %d\""));
	CHECK(!strstr(text, "more lines like \"other kind 46 %d\""));
	CHECK(strstr(text, "more lines of other kinds not logged"));

	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
