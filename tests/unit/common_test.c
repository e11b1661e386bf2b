/*
 * common_test.c - the parsers every part shares (common/): sizes, URIs,
 * HOST:PORT with IPv6, vsock addresses, the spin-then-block wait, the
 * streaming copy of the staging slots, and the escape of outside text.
 */
#include <stdio.h>
#include <string.h>

#include "addr.h"
#include "log.h"
#include "relax.h"
#include "size.h"
#include "wait.h"

#include "unit_check.h"

static void test_size(void)
{
	static const struct { const char *s; uint64_t v; } good[] = {
		{ "0", 0 }, { "4096", 4096 }, { "256K", 256 << 10 },
		{ "1M", 1 << 20 }, { "1m", 1 << 20 }, { "2G", 2ull << 30 },
		{ "1T", 1ull << 40 }, { "4KiB", 4096 }, { "64MB", 64 << 20 },
		{ "16777215T", 16777215ull << 40 },
	};
	static const char *const bad[] = {
		"", "-1", " 1", "+1", "1X", "1KK", "K", "1.5M", "16777216T",
		"18446744073709551616", "1M ",
	};
	uint64_t v;

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		CHECK(!pvgpu_parse_size(good[i].s, &v) && v == good[i].v);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		CHECK(pvgpu_parse_size(bad[i], &v) == -1);
	CHECK(pvgpu_parse_size(NULL, &v) == -1);
}

static void test_duration(void)
{
	static const struct { const char *s; int units; uint64_t ms; } good[] = {
		{ "0", 0, 0 }, { "300", 0, 300000 }, { "1.5", 0, 1500 },
		{ "0.25", 0, 250 }, { "86400", 0, 86400000 }, { "10s", 1, 10000 },
		{ "500ms", 1, 500 }, { "2m", 1, 120000 }, { "1.5s", 1, 1500 },
		{ "0.000", 0, 0 }, { "0ms", 1, 0 }, { "1.2345ms", 1, 1 },
	};
	static const char *const bad[] = {
		"", "-1", "+1", " 1", "1 ", "0x10", "1e-9", "1e3", "inf", "nan",
		".5", "1.", "1.5.2", "10s", "1h", "soon",
	};
	uint64_t ms;

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		CHECK(!pvgpu_parse_duration(good[i].s, good[i].units, 0,
					    86400000, &ms) && ms == good[i].ms);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		CHECK(pvgpu_parse_duration(bad[i], 0, 0, 86400000, &ms) ==
		      PVGPU_DURATION_BAD);
	CHECK(pvgpu_parse_duration("10h", 1, 0, 86400000, &ms) == PVGPU_DURATION_BAD);
	/* Nonzero under the resolution, or rounding to nothing: refused. */
	CHECK(pvgpu_parse_duration("0.1", 0, 250, 86400000, &ms) ==
	      PVGPU_DURATION_SHORT);
	CHECK(pvgpu_parse_duration("0.000000001", 0, 250, 86400000, &ms) ==
	      PVGPU_DURATION_SHORT);
	CHECK(pvgpu_parse_duration("0.4ms", 1, 0, 86400000, &ms) ==
	      PVGPU_DURATION_SHORT);
	CHECK(pvgpu_parse_duration("0.0000000001", 0, 0, 86400000, &ms) ==
	      PVGPU_DURATION_SHORT);
	CHECK(!pvgpu_parse_duration("0.25", 0, 250, 86400000, &ms) && ms == 250);
	CHECK(pvgpu_parse_duration("86401", 0, 0, 86400000, &ms) ==
	      PVGPU_DURATION_LONG);
	CHECK(pvgpu_parse_duration("99999999999", 0, 0, 86400000, &ms) ==
	      PVGPU_DURATION_LONG);
	CHECK(pvgpu_parse_duration(NULL, 0, 0, 1, &ms) == PVGPU_DURATION_BAD);
}

static void test_uri(void)
{
	char scheme[8];
	const char *rest;

	CHECK(!pvgpu_uri_split("tcp://[::1]:7100", scheme, sizeof(scheme), &rest));
	CHECK(!strcmp(scheme, "tcp") && !strcmp(rest, "[::1]:7100"));
	CHECK(pvgpu_uri_split("/run/pvgpu.sock", scheme, sizeof(scheme), &rest));
	CHECK(pvgpu_uri_split("://x", scheme, sizeof(scheme), &rest));
	CHECK(pvgpu_uri_split("verylongscheme://x", scheme, sizeof(scheme), &rest));
}

static void test_host_port(void)
{
	char host[64], port[8];

	CHECK(!pvgpu_host_port("[::1]:7100", host, sizeof(host), port, sizeof(port)));
	CHECK(!strcmp(host, "::1") && !strcmp(port, "7100"));
	CHECK(!pvgpu_host_port("127.0.0.1:80", host, sizeof(host), port, sizeof(port)));
	CHECK(!strcmp(host, "127.0.0.1") && !strcmp(port, "80"));
	CHECK(!pvgpu_host_port("gpu-1.example:7100", host, sizeof(host), port,
			       sizeof(port)));
	CHECK(!strcmp(host, "gpu-1.example"));
	CHECK(pvgpu_host_port("::1:7100", host, sizeof(host), port, sizeof(port)) == 0);
	CHECK(pvgpu_host_port("[::1]7100", host, sizeof(host), port, sizeof(port)));
	CHECK(pvgpu_host_port("[::1]:", host, sizeof(host), port, sizeof(port)));
	CHECK(pvgpu_host_port("[]:1", host, sizeof(host), port, sizeof(port)));
	CHECK(pvgpu_host_port(":1", host, sizeof(host), port, sizeof(port)));
	CHECK(pvgpu_host_port("host", host, sizeof(host), port, sizeof(port)));
	CHECK(pvgpu_host_port("h:123456789", host, sizeof(host), port, sizeof(port)));
	/* Ports are decimal, 1..65535: getaddrinfo would take 99999 as 34463. */
	CHECK(!pvgpu_host_port("h:65535", host, sizeof(host), port, sizeof(port)));
	CHECK(pvgpu_host_port("h:65536", host, sizeof(host), port, sizeof(port)));
	CHECK(pvgpu_host_port("h:99999", host, sizeof(host), port, sizeof(port)));
	CHECK(pvgpu_host_port("h:0", host, sizeof(host), port, sizeof(port)));
	CHECK(pvgpu_host_port("h:http", host, sizeof(host), port, sizeof(port)));
	CHECK(pvgpu_host_port("h:+80", host, sizeof(host), port, sizeof(port)));
	CHECK(pvgpu_host_port("[::1]:0x10", host, sizeof(host), port, sizeof(port)));
	/* Listening, port 0 is any free one; the rest is as strict. */
	CHECK(!pvgpu_listen_host_port("h:0", host, sizeof(host), port, sizeof(port)));
	CHECK(!strcmp(host, "h") && !strcmp(port, "0"));
	CHECK(!pvgpu_listen_host_port("[::1]:0", host, sizeof(host), port, sizeof(port)));
	CHECK(pvgpu_listen_host_port("h:65536", host, sizeof(host), port, sizeof(port)));
	CHECK(pvgpu_listen_host_port("h:-1", host, sizeof(host), port, sizeof(port)));
	CHECK(pvgpu_listen_host_port("h:", host, sizeof(host), port, sizeof(port)));
}

static void test_vsock(void)
{
	unsigned int cid, port;

	CHECK(!pvgpu_vsock_addr("2:7100", 0, &cid, &port) && cid == 2 && port == 7100);
	CHECK(!pvgpu_vsock_addr("any:7100", 1, &cid, &port) &&
	      cid == PVGPU_VSOCK_CID_ANY && port == 7100);
	CHECK(pvgpu_vsock_addr("any:7100", 0, &cid, &port));
	CHECK(pvgpu_vsock_addr("2:", 0, &cid, &port));
	CHECK(pvgpu_vsock_addr("2:x", 0, &cid, &port));
	CHECK(pvgpu_vsock_addr("2:4294967296", 0, &cid, &port));
	CHECK(pvgpu_vsock_addr(":1", 0, &cid, &port));
	CHECK(pvgpu_vsock_addr("-1:1", 0, &cid, &port));
}

static int count_ready(void *arg)
{
	return ++*(int *)arg > 10000;
}

static int never(void *arg)
{
	(void)arg;
	return 0;
}

static int always(void *arg)
{
	(void)arg;
	return 1;
}

/*
 * The ready and stopped cases have a minute: 10000 looks that nap between
 * them once the spin is spent took over a second on a loaded machine.
 */
static void test_wait(void)
{
	int n = 0;

	CHECK(pvgpu_spin_wait(count_ready, never, &n, 60000000000ull) ==
	      PVGPU_WAIT_READY);
	CHECK(pvgpu_spin_wait(never, always, NULL, 60000000000ull) ==
	      PVGPU_WAIT_STOPPED);
	CHECK(pvgpu_spin_wait(never, never, NULL, 1000000u) ==
	      PVGPU_WAIT_TIMEOUT);
}

/*
 * pvgpu_copy_stream: every byte of [dst, dst+len) is src's, and not one
 * byte either side is touched, for destinations and sources at every
 * alignment within a line and lengths around its head, its 64-byte loop
 * and its tail.
 */
static void test_copy_stream(void)
{
	static const size_t lens[] = {
		0, 1, 15, 16, 17, 63, 64, 255, 256, 257, 271, 272, 273, 319,
		320, 321, 4095, 4096, 65537,
	};
	enum { PAD = 64, MAXLEN = 65537 + 64 };
	static unsigned char src[MAXLEN + 2 * PAD], dst[MAXLEN + 2 * PAD];
	int bad = 0;

	for (size_t i = 0; i < sizeof(src); i++)
		src[i] = (unsigned char)(i * 131 + 7);
	for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++)
		for (size_t doff = 0; doff < 20; doff += 3)
			for (size_t soff = 0; soff < 20; soff += 5) {
				size_t len = lens[l];

				memset(dst, 0xee, sizeof(dst));
				pvgpu_copy_stream(dst + PAD + doff, src + PAD + soff, len);
				for (size_t i = 0; i < PAD + doff; i++)
					bad += dst[i] != 0xee;
				bad += memcmp(dst + PAD + doff, src + PAD + soff, len) != 0;
				for (size_t i = PAD + doff + len; i < sizeof(dst); i++)
					bad += dst[i] != 0xee;
			}
	CHECK(bad == 0);
}

static int escaped_is(const char *in, size_t len, unsigned int flags,
		      size_t size, const char *want)
{
	char out[256];

	pvgpu_escape(out, size, in, len, flags);
	if (strcmp(out, want))
		fprintf(stderr, "escape: got \"%s\", want \"%s\"\n", out, want);
	return !strcmp(out, want);
}

static void test_escape(void)
{
	const size_t all = 256;

	/* What may stay, stays: printable ASCII and valid UTF-8. */
	CHECK(escaped_is("vecadd 1.0 (pytest)", PVGPU_ESC_STR, 0, all,
			 "vecadd 1.0 (pytest)"));
	CHECK(escaped_is("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", PVGPU_ESC_STR,
			 0, all, "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"));
	/* Controls, DEL and a backslash. */
	CHECK(escaped_is("a\nb\rc\x1b[2Jd\x7f\\e\t", PVGPU_ESC_STR, 0, all,
			 "a\\x0ab\\x0dc\\x1b[2Jd\\x7f\\\\e\\x09"));
	/* A NUL in the middle of counted bytes. */
	CHECK(escaped_is("a\0b", 3, 0, all, "a\\x00b"));
	/* Not UTF-8: a lone continuation, an overlong '/', a surrogate, a cut sequence, 0xff. */
	CHECK(escaped_is("\x80|\xc0\xaf|\xed\xa0\x80|\xe2\x82|\xff", PVGPU_ESC_STR, 0,
			 all, "\\x80|\\xc0\\xaf|\\xed\\xa0\\x80|\\xe2\\x82|\\xff"));
	/* Valid, but a C1 CSI, a line separator and a right-to-left override. */
	CHECK(escaped_is("\xc2\x9b|\xe2\x80\xa8|\xe2\x80\xae", PVGPU_ESC_STR, 0, all,
			 "\\xc2\\x9b|\\xe2\\x80\\xa8|\\xe2\\x80\\xae"));
	/* The log's own pass leaves backslashes alone. */
	CHECK(escaped_is("a\\x0a\n", PVGPU_ESC_STR, PVGPU_ESC_KEEP_BACKSLASH, all,
			 "a\\x0a\\x0a"));
	/* A Prometheus label value: controls shown, then \ and " escaped. */
	CHECK(escaped_is("a\"b\\c\nd", PVGPU_ESC_STR, PVGPU_ESC_LABEL, all,
			 "a\\\"b\\\\c\\\\x0ad"));
	/* Cut at a whole character, then "..."; exactly full needs no dots. */
	CHECK(escaped_is("abcdefgh", PVGPU_ESC_STR, 0, 9, "abcdefgh"));
	CHECK(escaped_is("abcdefghi", PVGPU_ESC_STR, 0, 9, "abcde..."));
	CHECK(escaped_is("abcd\nefgh", PVGPU_ESC_STR, 0, 10, "abcd..."));
	CHECK(escaped_is("ab\xe2\x82\xac\xe2\x82\xacx", PVGPU_ESC_STR, 0, 9,
			 "ab\xe2\x82\xac..."));
	CHECK(escaped_is("abc", PVGPU_ESC_STR, 0, 3, ""));
	CHECK(escaped_is(NULL, 0, 0, all, "(null)"));
	CHECK(!strcmp(log_esc("x\ny"), "x\\x0ay"));
}

int main(void)
{
	test_escape();
	test_size();
	test_duration();
	test_uri();
	test_host_port();
	test_vsock();
	test_wait();
	test_copy_stream();
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
