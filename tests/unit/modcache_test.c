/*
 * modcache_test.c - which module images may print (pvgpu_image_may_print,
 * host-backend/session/modcache.c): the worker looks for device output
 * only after kernels of those, so a wrong "quiet" loses a kernel's printf
 * while a wrong "may print" only costs a system call.  Anything it cannot
 * read (compressed entries, damaged tables) counts as printing, unless a
 * readable cubin for the device is what the driver runs instead.  And
 * which images may be given to a driver at all (pvgpu_image_check).
 */
#include <stdint.h>
#include <string.h>

#include "modcache.h"
#include "wire.h"

#include "unit_check.h"

#define ENTRY_HDR 64u

static uint8_t img[8192];

struct entry {
	uint16_t kind;		/* 1 PTX, 2 ELF */
	uint32_t arch;
	uint64_t flags;
	const void *payload;
	size_t len;
};

/* A fatbinary of these entries; its length. */
static size_t fatbin_of(const struct entry *v, int n)
{
	size_t off = 16;

	memset(img, 0, sizeof(img));
	pvgpu_put_u32(img, 0xBA55ED50u);
	pvgpu_put_u16(img + 4, 1);
	pvgpu_put_u16(img + 6, 16);
	for (int i = 0; i < n; i++) {
		size_t padded = (v[i].len + 7) & ~(size_t)7;

		pvgpu_put_u16(img + off, v[i].kind);
		pvgpu_put_u32(img + off + 4, ENTRY_HDR);
		pvgpu_put_u64(img + off + 8, padded);
		pvgpu_put_u32(img + off + 28, v[i].arch);
		pvgpu_put_u64(img + off + 40, v[i].flags);
		memcpy(img + off + ENTRY_HDR, v[i].payload, v[i].len);
		off += ENTRY_HDR + padded;
	}
	pvgpu_put_u64(img + 8, off - 16);
	return off;
}

static size_t fatbin(uint16_t kind, uint64_t flags, const void *payload,
		     size_t len)
{
	const struct entry e = { kind, 90, flags, payload, len };

	return fatbin_of(&e, 1);
}

/* A little-endian ELF's first bytes, then a string table. */
static size_t elf_of(uint8_t *p, const char *strtab, size_t len)
{
	memset(p, 0, 64);
	memcpy(p, "\177ELF\2\1\1", 7);
	memcpy(p + 64, strtab, len);
	return 64 + len;
}
#define elf(p, strtab) elf_of(p, strtab, sizeof(strtab))

/* On an H100 (9.0). */
static int may_print(const uint8_t *p, size_t len)
{
	return pvgpu_image_may_print(p, len, 90);
}

int main(void)
{
	static const char ptx_quiet[] =
		".version 8.8\n.target sm_90\n.visible .entry add() { ret; }\n";
	static const char ptx_print[] =
		".version 8.8\n.extern .func (.param .b32 r) vprintf (.param .b64 a, .param .b64 b);\n";
	uint8_t cubin[256];
	size_t n, len;

	/* Plain cubins and PTX text. */
	n = elf(cubin, "_Z3addPfS_S_i\0.nv.info");
	CHECK(may_print(cubin, n) == 0);
	n = elf(cubin, "_Z5helloi\0vprintf");
	CHECK(may_print(cubin, n) == 1);
	n = elf(cubin, "_Z5checkPi\0__assertfail");
	CHECK(may_print(cubin, n) == 1);
	CHECK(may_print((const uint8_t *)ptx_quiet, sizeof(ptx_quiet) - 1) == 0);
	CHECK(may_print((const uint8_t *)ptx_print, sizeof(ptx_print) - 1) == 1);

	/* Fatbinaries: what each entry holds decides. */
	n = elf(cubin, "_Z3addPfS_S_i");
	len = fatbin(2, 0x11, cubin, n);
	CHECK(may_print(img, len) == 0);
	len = fatbin(1, 0x11, ptx_quiet, sizeof(ptx_quiet));	/* NUL-padded */
	CHECK(may_print(img, len) == 0);
	len = fatbin(1, 0x11, ptx_print, sizeof(ptx_print));
	CHECK(may_print(img, len) == 1);
	n = elf(cubin, "_Z5helloi\0vprintf");
	len = fatbin(2, 0x11, cubin, n);
	CHECK(may_print(img, len) == 1);

	/* Unreadable: compressed, not an ELF, binary "PTX", bad sizes. */
	n = elf(cubin, "_Z3addPfS_S_i");
	len = fatbin(2, 0x2011, cubin, n);
	CHECK(may_print(img, len) == 1);
	{
		static const char zstd[] = "\x28\xb5\x2f\xfd compressed";
		static const char binary[] = ".version\0\x13\x37 binary";

		len = fatbin(2, 0x11, zstd, sizeof(zstd));
		CHECK(may_print(img, len) == 1);
		len = fatbin(1, 0x11, binary, sizeof(binary));
		CHECK(may_print(img, len) == 1);
	}
	len = fatbin(2, 0x11, cubin, n);
	pvgpu_put_u64(img + 16 + 8, 1u << 20);		/* payload past the end */
	CHECK(may_print(img, len) == 1);
	len = fatbin(2, 0x11, cubin, n);
	pvgpu_put_u32(img + 16 + 4, 8);			/* header too short */
	CHECK(may_print(img, len) == 1);
	len = fatbin(2, 0x11, cubin, n);
	img[len] = 0x42;				/* something after it */
	CHECK(may_print(img, len + 8) == 1);
	CHECK(may_print(img, len) == 0);	/* without it */

	/*
	 * nvcc's default: an sm_90 cubin and compressed PTX.  On a 9.0 device
	 * the driver runs the cubin, whatever the PTX holds; elsewhere the
	 * PTX would be compiled, and it cannot be read.
	 */
	{
		static const uint8_t zstd[] = "\x28\xb5\x2f\xfd\x60\x7e\x02";
		uint8_t quiet[128];
		size_t q = elf(quiet, "_Z3addPfS_S_i");
		struct entry v[2] = {
			{ 2, 90, 0x11, quiet, q },
			{ 1, 90, 0x8011, zstd, sizeof(zstd) },
		};

		len = fatbin_of(v, 2);
		CHECK(may_print(img, len) == 0);
		CHECK(pvgpu_image_may_print(img, len, 100) == 1);
		CHECK(pvgpu_image_may_print(img, len, 0) == 1);
		CHECK(pvgpu_image_may_print(img, len, 89) == 1);
		v[0].arch = 80;		/* sm_80 cubins do not run on 9.0 */
		len = fatbin_of(v, 2);
		CHECK(may_print(img, len) == 1);
		v[0].arch = 90;
		len = fatbin_of(&v[1], 1);	/* the PTX alone */
		CHECK(may_print(img, len) == 1);
	}

	/* Two fatbinaries back to back: the second one prints. */
	n = elf(cubin, "_Z3addPfS_S_i");
	len = fatbin(2, 0x11, cubin, n);
	memcpy(img + len, img, len);
	CHECK(may_print(img, 2 * len) == 0);
	memcpy(img + len + 16 + ENTRY_HDR + 64, "vprintf", 7);
	CHECK(may_print(img, 2 * len) == 1);

	/*
	 * What a driver may be given (pvgpu_image_check): a fatbinary whose
	 * header and entries lie inside the image, an ELF, PTX text.
	 */
	n = elf(cubin, "_Z3addPfS_S_i");
	len = fatbin(2, 0x11, cubin, n);
	CHECK(pvgpu_image_check(img, len) == 0);
	CHECK(pvgpu_image_check(img, len - 1) == -1);	/* entries past the end */
	CHECK(pvgpu_image_check(img, 15) == -1);	/* no whole header */
	pvgpu_put_u16(img + 6, 8);			/* header too short */
	CHECK(pvgpu_image_check(img, len) == -1);
	pvgpu_put_u16(img + 6, 0xffff);			/* header past the end */
	CHECK(pvgpu_image_check(img, len) == -1);
	CHECK(may_print(img, len) == 1);
	pvgpu_put_u16(img + 6, 16);
	pvgpu_put_u64(img + 8, UINT64_MAX);		/* entries' size wraps */
	CHECK(pvgpu_image_check(img, len) == -1);
	CHECK(may_print(img, len) == 1);
	CHECK(pvgpu_image_check(cubin, n) == 0);
	CHECK(pvgpu_image_check((const uint8_t *)ptx_quiet,
				sizeof(ptx_quiet) - 1) == 0);
	CHECK(pvgpu_image_check((const uint8_t *)"garbage", 7) == -1);
	return UNIT_REPORT();
}
