/*
 * vchan_fuzz.c - garbage into the vchan transport's decoders and checks:
 * the setup frame and its reply (vchan_proto.h), the window header check,
 * the ring index check (vchan_io.h) and vchan:// address parsing.  Each
 * input must be refused or accepted consistently, never read past its
 * end, never overflow (run under ASan/UBSan in the sanitizer build).
 *
 *   vchan-fuzz [ITERATIONS [SEED]]   randomized, exit 0 when every
 *                                    invariant held
 * Built with -DPVGPU_LIBFUZZER it is a libFuzzer target instead.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vchan_guest.h"
#include "vchan_io.h"
#include "vchan_proto.h"
#include "window.h"

#define FAIL(...) do { fprintf(stderr, "vchan-fuzz: " __VA_ARGS__); abort(); } while (0)

static uint64_t get64(const uint8_t *p, size_t len, size_t off)
{
	uint64_t v = 0;

	if (off < len)
		memcpy(&v, p + off, len - off < 8 ? len - off : 8);
	return v;
}

static void one(const uint8_t *data, size_t len)
{
	struct pvgpu_vchan_setup s;
	struct pvgpu_window_header hdr;
	int32_t status;
	char path[256];
	unsigned int domid;
	uint8_t *copy;
	int rc;

	/* The setup header: exact length only; accepted means sane. */
	copy = malloc(len ? len : 1);	/* exact size: ASan sees overreads */
	memcpy(copy, data, len);
	rc = pvgpu_vchan_setup_decode_hdr(copy, len, &s);
	if (rc == 0 && (len != PVGPU_VCHAN_SETUP_HDR || s.npages > PVGPU_VCHAN_MAX_PAGES ||
			s.version != PVGPU_VCHAN_VERSION || s.flags))
		FAIL("setup header accepted wrongly\n");
	if (rc && rc != -EPROTO && rc != -E2BIG)
		FAIL("setup header: odd error %d\n", rc);
	rc = pvgpu_vchan_reply_decode(copy, len, &status);
	if (rc == 0 && status > 0)
		FAIL("positive reply status accepted\n");

	/* The window header check, against a mapped size from the input. */
	memset(&hdr, 0, sizeof(hdr));
	memcpy(&hdr, copy, len < sizeof(hdr) ? len : sizeof(hdr));
	{
		uint64_t mapped = get64(copy, len, 200) & ((1ull << 40) - 1);

		if (len > 8 && copy[8] & 1) {	/* often a plausible header */
			hdr.magic = PVGPU_WINDOW_MAGIC;
			hdr.layout = PVGPU_WINDOW_LAYOUT;
			hdr.size = mapped;
		}
		if (pvgpu_vchan_window_check(&hdr, mapped) == 0) {
			__uint128_t end = (__uint128_t)hdr.staging_offset +
					  (__uint128_t)hdr.slot_size * hdr.nslots;
			if (end > mapped || hdr.staging_offset < PVGPU_WINDOW_HDR_SIZE ||
			    hdr.size != mapped)
				FAIL("window accepted past its end\n");
		}
	}

	/* Ring indexes: accepted exactly when prod is at most a ring ahead. */
	{
		uint32_t prod = (uint32_t)get64(copy, len, 0);
		uint32_t cons = (uint32_t)get64(copy, len, 4);
		int order = (int)(int8_t)(len > 12 ? copy[12] : 0);
		int ok = pvgpu_vchan_ring_ok(prod, cons, order);

		if (ok && (order < 10 || order > 20 ||
			   (uint64_t)(uint32_t)(prod - cons) > (1ull << order)))
			FAIL("ring prod %u cons %u order %d accepted\n", prod, cons, order);
	}

	/* Addresses: the input as a string. */
	{
		char *str = malloc(len + 1);

		memcpy(str, copy, len);
		str[len] = '\0';
		rc = pvgpu_vchan_parse(str, &domid, path, sizeof(path),
				       (int)(get64(copy, len, 16) & 0x7fff));
		if (rc == 0 && (path[0] != '/' || strlen(path) >= sizeof(path) ||
				domid >= 0x7ff0))
			FAIL("address %s accepted as %s\n", str, path);
		free(str);
	}
	free(copy);
}

#ifdef PVGPU_LIBFUZZER
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	one(data, size);
	return 0;
}
#else
static uint64_t rng;

static uint32_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)rng;
}

int main(int argc, char **argv)
{
	long iters = argc > 1 ? atol(argv[1]) : 200000;
	uint8_t buf[300];

	rng = argc > 2 ? strtoull(argv[2], NULL, 0) : 0x9e3779b97f4a7c15ull;
	if (!rng)
		rng = 1;
	for (long it = 0; it < iters; it++) {
		size_t len = next() % sizeof(buf);

		for (size_t i = 0; i < len; i++)
			buf[i] = (uint8_t)next();
		/* Bias toward inputs that pass the first checks. */
		switch (next() % 4) {
		case 0:
			if (len >= 16) {
				pvgpu_vchan_setup_encode_hdr(buf, next() % 40000);
				len = 16;
			}
			break;
		case 1: {
			static const char *pre[] = { "0/pvgpu", "7//local/x", "0/", "/", "65535/a#1" };
			const char *p = pre[next() % 5];
			size_t pl = strlen(p);

			if (len > pl)
				memcpy(buf, p, pl);
			break;
		}
		default:
			break;
		}
		one(buf, len);
	}
	printf("vchan-fuzz: %ld inputs, every invariant held\n", iters);
	return 0;
}
#endif
