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

int pvgpu_image_check(const uint8_t *p, size_t len)
{
	if (len >= 16 && pvgpu_get_u32(p) == FATBIN_MAGIC) {
		uint16_t header_size = pvgpu_get_u16(p + 6);
		uint64_t fat_size = pvgpu_get_u64(p + 8);

		if (header_size < 16 || header_size > len ||
		    fat_size > len - header_size)
			return -1;
		return 0;
	}
	if (len >= 4 && !memcmp(p, "\177ELF", 4))
		return elf_check(p, len);
	/* PTX: text, NUL-terminated within the image (image[len] is NUL). */
	if (len >= 8 && memmem(p, len, ".version", 8))
		return 0;
	return -1;
}
