/* modcache.c - see modcache.h. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "modcache.h"
#include "wire.h"

#define FATBIN_MAGIC	0xBA55ED50u
#define MAX_IMAGE	(512ull << 20)

int pvgpu_modcache_init(const char *dir, char *err, size_t errlen)
{
	struct stat st;

	if (mkdir(dir, 0700) && errno != EEXIST)
		goto err_errno;
	if (stat(dir, &st))
		goto err_errno;
	if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
	    (st.st_mode & 0077)) {
		snprintf(err, errlen,
			 "module cache %s must be a directory owned by us with mode 0700",
			 dir);
		return -1;
	}
	return 0;
err_errno:
	snprintf(err, errlen, "module cache %s: %s", dir, strerror(errno));
	return -1;
}

/*
 * The hash comes from the system's OpenSSL, loaded when first needed, so
 * the backend needs no development headers for it and builds everywhere.
 */
int pvgpu_sha256(const void *data, size_t len, uint8_t out[PVGPU_HASH_SIZE])
{
	typedef unsigned char *(*sha256_fn)(const unsigned char *, size_t,
					    unsigned char *);
	static const char *const names[] = { "libcrypto.so.3", "libcrypto.so" };
	sha256_fn sha256 = NULL;

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && !sha256; i++) {
		void *lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);

		if (lib)
			*(void **)&sha256 = dlsym(lib, "SHA256");
	}
	if (!sha256)
		return -1;
	sha256(data, len, out);
	return 0;
}

static void entry_path(const char *dir, const uint8_t hash[PVGPU_HASH_SIZE],
		       char *path, size_t len)
{
	int n = snprintf(path, len, "%s/", dir);

	for (int i = 0; i < PVGPU_HASH_SIZE && n > 0 && (size_t)n + 3 < len; i++)
		n += snprintf(path + n, len - (size_t)n, "%02x", hash[i]);
}

int pvgpu_modcache_put(const char *dir, const uint8_t hash[PVGPU_HASH_SIZE],
		       const void *image, size_t len)
{
	char path[4200], tmp[4300];
	const uint8_t *p = image;
	int fd;

	entry_path(dir, hash, path, sizeof(path));
	if (access(path, F_OK) == 0)
		return 0;
	snprintf(tmp, sizeof(tmp), "%s.%d.tmp", path, (int)getpid());
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return -1;
	while (len) {
		ssize_t n = write(fd, p, len);

		if (n <= 0) {
			close(fd);
			unlink(tmp);
			return -1;
		}
		p += n;
		len -= (size_t)n;
	}
	close(fd);
	/* rename is atomic: a reader sees the whole image or none. */
	if (rename(tmp, path)) {
		unlink(tmp);
		return -1;
	}
	return 0;
}

void *pvgpu_modcache_get(const char *dir, const uint8_t hash[PVGPU_HASH_SIZE],
			 size_t *len)
{
	char path[4200];
	struct stat st;
	uint8_t *buf;
	size_t off = 0;
	int fd;

	entry_path(dir, hash, path, sizeof(path));
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) || st.st_size <= 0 || (uint64_t)st.st_size > MAX_IMAGE)
		goto err_close;
	buf = malloc((size_t)st.st_size + 1);
	if (!buf)
		goto err_close;
	while (off < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + off, (size_t)st.st_size - off);

		if (n <= 0)
			goto err_free;
		off += (size_t)n;
	}
	close(fd);
	buf[off] = '\0';
	*len = off;
	return buf;

err_free:
	free(buf);
err_close:
	close(fd);
	return NULL;
}

static int elf_check(const uint8_t *p, size_t len)
{
	uint64_t shoff, phoff;
	uint16_t shentsize, shnum, phentsize, phnum;

	/* 64-bit little-endian ELF, and its tables inside the image. */
	if (len < 64 || p[4] != 2 || p[5] != 1)
		return -1;
	phoff = pvgpu_get_u64(p + 32);
	shoff = pvgpu_get_u64(p + 40);
	phentsize = pvgpu_get_u16(p + 54);
	phnum = pvgpu_get_u16(p + 56);
	shentsize = pvgpu_get_u16(p + 58);
	shnum = pvgpu_get_u16(p + 60);
	if (shoff > len || (uint64_t)shentsize * shnum > len - shoff)
		return -1;
	if (phoff > len || (uint64_t)phentsize * phnum > len - phoff)
		return -1;
	return 0;
}

/*
 * A fatbinary's header: the magic u32, a version u16, its own size u16 (16
 * or more), then the size u64 of the entries that follow it.
 */
#define FATBIN_HEADER_MIN	16u

/*
 * The fatbinary header at p, with len bytes from p on: 0 where there is
 * none (no whole header with the magic), -1 where it or its entries run
 * past len, else 1 with its size in *header and its entries' in *entries.
 */
static int fatbin_header(const uint8_t *p, size_t len, size_t *header,
			 size_t *entries)
{
	uint16_t header_size;
	uint64_t fat_size;

	if (len < FATBIN_HEADER_MIN || pvgpu_get_u32(p) != FATBIN_MAGIC)
		return 0;
	header_size = pvgpu_get_u16(p + 6);
	fat_size = pvgpu_get_u64(p + 8);
	if (header_size < FATBIN_HEADER_MIN || header_size > len ||
	    fat_size > len - header_size)
		return -1;
	*header = header_size;
	*entries = (size_t)fat_size;
	return 1;
}

int pvgpu_image_check(const uint8_t *p, size_t len)
{
	size_t header, entries;
	int fat = fatbin_header(p, len, &header, &entries);

	if (fat)
		return fat < 0 ? -1 : 0;
	if (len >= 4 && !memcmp(p, "\177ELF", 4))
		return elf_check(p, len);
	/* PTX: text, NUL-terminated within the image (image[len] is NUL). */
	if (len >= 8 && memmem(p, len, ".version", 8))
		return 0;
	return -1;
}

/*
 * What device output needs from a kernel: vprintf for printf, __assertfail
 * (or __assert_fail) for assert.  Looked for as "printf" and "assert", so
 * that anything of the kind counts.
 */
static int names_output(const uint8_t *p, size_t len)
{
	return memmem(p, len, "printf", 6) || memmem(p, len, "assert", 6);
}

/*
 * A fatbinary entry: kind u16, u16, header size u32, payload size u64,
 * ..., the architecture u32 at 28 (90: sm_90), flags u64 at 40 (0x2000,
 * 0x8000: compressed); its payload follows its header.
 */
#define FATBIN_ENTRY_MIN	16u
#define FATBIN_ENTRY_ARCH	28u
#define FATBIN_ENTRY_FLAGS	40u
#define FATBIN_COMPRESSED	(0x2000u | 0x8000u)
#define FATBIN_KIND_PTX		1u
#define FATBIN_KIND_ELF		2u

/* Only NUL bytes (padding). */
static int all_zero(const uint8_t *p, size_t len)
{
	return len == 0 || (!p[0] && !memcmp(p, p + 1, len - 1));
}

/* Whether an entry's payload can be read as it is: an ELF, or PTX text
 * (perhaps NUL-padded); a compressed one cannot. */
static int entry_readable(uint16_t kind, uint64_t flags, const uint8_t *p,
			  uint64_t size)
{
	uint64_t i;

	if (flags & FATBIN_COMPRESSED)
		return 0;
	if (kind == FATBIN_KIND_ELF)
		return size >= 4 && !memcmp(p, "\177ELF", 4);
	if (kind != FATBIN_KIND_PTX || !size)
		return 0;
	for (i = 0; i < size && p[i]; i++)
		if (p[i] >= 0x7f || (p[i] < 0x20 && !strchr("\t\n\r", p[i])))
			return 0;
	return all_zero(p + i, size - i);
}

/*
 * A fatbinary may print when an entry it holds names printf or assert,
 * or when it holds an entry that cannot be read (nvcc compresses the PTX
 * by default) and no readable cubin the driver would run on a device of
 * compute capability arch (same major, not newer) instead.
 */
static int fatbin_may_print(const uint8_t *p, size_t len, uint32_t arch)
{
	int unreadable = 0, runs = 0, fat;
	size_t off = 0, header, entries;

	/* One or more fatbinaries back to back, each a list of entries. */
	while ((fat = fatbin_header(p + off, len - off, &header, &entries))) {
		size_t e, end;

		if (fat < 0)
			return 1;
		e = off + header;
		end = e + entries;
		while (e < end) {
			uint16_t kind;
			uint32_t hdr, a;
			uint64_t size, flags;

			if (end - e < FATBIN_ENTRY_MIN)
				return 1;
			kind = pvgpu_get_u16(p + e);
			hdr = pvgpu_get_u32(p + e + 4);
			size = pvgpu_get_u64(p + e + 8);
			if (hdr < FATBIN_ENTRY_MIN || hdr > end - e ||
			    size > end - e - hdr)
				return 1;
			a = hdr >= FATBIN_ENTRY_ARCH + 4 ?
			    pvgpu_get_u32(p + e + FATBIN_ENTRY_ARCH) : 0;
			flags = hdr >= FATBIN_ENTRY_FLAGS + 8 ?
				pvgpu_get_u64(p + e + FATBIN_ENTRY_FLAGS) : 0;
			if (!entry_readable(kind, flags, p + e + hdr, size))
				unreadable = 1;
			else if (names_output(p + e + hdr, size))
				return 1;
			else if (kind == FATBIN_KIND_ELF && arch &&
				 a / 10 == arch / 10 && a <= arch)
				runs = 1;
			e += hdr + size;
		}
		off = end;
		while (off < len && off % 8 && !p[off])
			off++;
	}
	if (!all_zero(p + off, len - off))
		return 1;
	return unreadable && !runs;
}

int pvgpu_image_may_print(const uint8_t *p, size_t len, uint32_t arch)
{
	size_t header, entries;

	if (fatbin_header(p, len, &header, &entries))
		return fatbin_may_print(p, len, arch);
	/* A cubin, or PTX text. */
	return names_output(p, len);
}
