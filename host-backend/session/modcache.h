/*
 * modcache.h - module images kept by content, shared by every session.
 *
 * A worker that receives an image hashes it itself (SHA-256) and stores it
 * under that hash in a directory private to pvgpud; a later session that
 * asks for the same hash loads it from there without uploading it again.
 * Because the key is always computed here, a guest cannot plant an image
 * under another image's name.
 */
#ifndef PVGPU_MODCACHE_H
#define PVGPU_MODCACHE_H

#include <stddef.h>
#include <stdint.h>

#define PVGPU_HASH_SIZE 32

/* Create dir (0700) if needed and check it is ours; -1 with err set. */
int pvgpu_modcache_init(const char *dir, char *err, size_t errlen);

/* SHA-256 through the system's libcrypto; -1 if it is not available. */
int pvgpu_sha256(const void *data, size_t len, uint8_t out[PVGPU_HASH_SIZE]);

/* Store an image under its hash (atomically; an existing entry is kept). */
int pvgpu_modcache_put(const char *dir, const uint8_t hash[PVGPU_HASH_SIZE],
		       const void *image, size_t len);

/* A malloc'd copy of the image with that hash (NUL-padded), or NULL. */
void *pvgpu_modcache_get(const char *dir, const uint8_t hash[PVGPU_HASH_SIZE],
			 size_t *len);

/*
 * Check that an untrusted image is a whole fatbinary, cubin ELF or PTX text
 * of exactly len bytes before a driver parses it (the driver's loader takes
 * no length).  image must have a NUL byte at image[len].
 */
int pvgpu_image_check(const uint8_t *image, size_t len);

/*
 * Whether a kernel of this (checked) image may print on a device of
 * compute capability arch (90: 9.0; 0: unknown): 0 only when no cubin or
 * PTX text in it names device printf or assert, and what cannot be read
 * (a compressed entry) is not what the driver would run there.  The
 * worker looks for device output only after kernels that may print.
 */
int pvgpu_image_may_print(const uint8_t *image, size_t len, uint32_t arch);

#endif /* PVGPU_MODCACHE_H */
