/*
 * modcache.h - module images kept by content, per VM.
 *
 * A worker that receives an image hashes it itself (SHA-256) and stores it
 * under that hash in its VM's directory of a cache private to pvgpud
 * (ROOT/vm-NAME/HASH; ROOT/local for callers of no VM, without a policy);
 * a later session of the same VM that asks for the hash loads it from
 * there without uploading it again.  Because the key is always computed
 * here, a guest cannot plant an image under another image's name; because
 * each VM looks only in its own directory, a VM never learns what another
 * loaded, nor gets another's image.  Identical images of two VMs are two
 * files.
 *
 * Bounds: a VM's directory holds at most its module_cache bytes (policy)
 * and PVGPU_MODCACHE_VM_ENTRIES images, the whole cache at most
 * --module-cache-max bytes; an entry costs its size in whole 4 KiB blocks.
 * Before an image is stored, the least recently used entries (by mtime,
 * which a lookup that finds an entry sets to now) are evicted until it
 * fits under both, first the VM's own, then anyone's; an image that alone
 * is over either bound is not stored (its load works all the same).
 * Workers of several sessions do this at once without a lock: an entry is
 * written under a name of its worker's own and linked into place (never
 * replacing one), and a file another worker evicted meanwhile is a miss.
 * Only a file being written is over the bounds, for as long as it takes.
 */
#ifndef PVGPU_MODCACHE_H
#define PVGPU_MODCACHE_H

#include <stddef.h>
#include <stdint.h>

#define PVGPU_HASH_SIZE 32

#define PVGPU_MODCACHE_PER_VM		(256ull << 20)	/* module_cache default */
#define PVGPU_MODCACHE_MAX		(4ull << 30)	/* --module-cache-max default */
#define PVGPU_MODCACHE_VM_ENTRIES	1024	/* images per VM: bounds a scan */
#define PVGPU_MODCACHE_BLOCK		4096u
#define PVGPU_MODCACHE_ROOT_MAX		3584	/* bytes of the root's path */
#define PVGPU_MODCACHE_DIR_LEN		256
#define PVGPU_MODCACHE_PATH_LEN		4096
/* A file still being written after this long was left by a dead worker. */
#define PVGPU_MODCACHE_STALE_NS		(3600 * 1000000000ll)

/* One VM's part of the cache, as a worker uses it. */
struct pvgpu_modcache {
	const char *root;		/* pvgpud --module-cache */
	char vm[PVGPU_MODCACHE_DIR_LEN];	/* pvgpu_modcache_vm_dir() */
	uint64_t vm_max;		/* the VM's bytes; 0: it keeps none */
	uint64_t max;			/* the whole cache's bytes */
};

/*
 * Create dir (0700) if needed and check it is ours, and remove entries of
 * the layout before directories per VM; -1 with err set.
 */
int pvgpu_modcache_init(const char *dir, char *err, size_t errlen);

/* SHA-256 through the system's libcrypto; -1 if it is not available. */
int pvgpu_sha256(const void *data, size_t len, uint8_t out[PVGPU_HASH_SIZE]);

/* The directory under the root of the VM called name (NULL: no VM). */
void pvgpu_modcache_vm_dir(const char *name, char *out, size_t len);

/*
 * Store an image under its hash in c's VM directory, evicting what it
 * must (an existing entry is kept, and counts as used now).  0 stored, 1
 * not stored because it alone is over a bound, -1 failed.
 */
int pvgpu_modcache_put(const struct pvgpu_modcache *c,
		       const uint8_t hash[PVGPU_HASH_SIZE],
		       const void *image, size_t len);

/*
 * A malloc'd copy (NUL-padded) of the image with that hash in c's VM
 * directory, checked against the hash; NULL when there is none.
 */
void *pvgpu_modcache_get(const struct pvgpu_modcache *c,
			 const uint8_t hash[PVGPU_HASH_SIZE], size_t *len);

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
