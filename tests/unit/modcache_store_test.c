/*
 * modcache_store_test.c - the module cache's directories and bounds
 * (host-backend/session/modcache.c): a VM finds only what it stored, its
 * bytes and the cache's stay within their bounds, the least recently used
 * going first (a lookup counts as a use), an image over a bound is not
 * kept, and a damaged entry is a miss, never wrong code.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "modcache.h"

#include "unit_check.h"

#define BLOCK PVGPU_MODCACHE_BLOCK

static char root[64];

static void vm_cache(struct pvgpu_modcache *c, const char *vm, uint64_t vm_max,
		     uint64_t max)
{
	c->root = root;
	pvgpu_modcache_vm_dir(vm, c->vm, sizeof(c->vm));
	c->vm_max = vm_max;
	c->max = max;
}

/* An image of len bytes told apart by tag, and its hash. */
static uint8_t *image(int tag, size_t len, uint8_t hash[PVGPU_HASH_SIZE])
{
	uint8_t *p = malloc(len);

	memset(p, 'a' + tag % 26, len);
	p[0] = (uint8_t)tag;
	pvgpu_sha256(p, len, hash);
	return p;
}

static int put(const struct pvgpu_modcache *c, int tag, size_t len,
	       uint8_t hash[PVGPU_HASH_SIZE])
{
	uint8_t *p = image(tag, len, hash);
	int rc = pvgpu_modcache_put(c, hash, p, len);

	free(p);
	return rc;
}

static int has(const struct pvgpu_modcache *c, const uint8_t hash[PVGPU_HASH_SIZE])
{
	size_t len;
	void *p = pvgpu_modcache_get(c, hash, &len);

	free(p);
	return p != NULL;
}

static void entry_path(const struct pvgpu_modcache *c,
		       const uint8_t hash[PVGPU_HASH_SIZE], char *path)
{
	int n = sprintf(path, "%s/%s/", root, c->vm);

	for (int i = 0; i < PVGPU_HASH_SIZE; i++)
		n += sprintf(path + n, "%02x", hash[i]);
}

/* Make an entry look last used `ago` seconds before now. */
static void age(const struct pvgpu_modcache *c,
		const uint8_t hash[PVGPU_HASH_SIZE], int ago)
{
	char path[PVGPU_MODCACHE_PATH_LEN];
	struct timespec t[2];

	entry_path(c, hash, path);
	clock_gettime(CLOCK_REALTIME, &t[0]);
	t[0].tv_sec -= ago;
	t[1] = t[0];
	utimensat(AT_FDCWD, path, t, 0);
}

static void names(void)
{
	char dir[PVGPU_MODCACHE_DIR_LEN];

	pvgpu_modcache_vm_dir("alice", dir, sizeof(dir));
	CHECK(!strcmp(dir, "vm-alice"));
	pvgpu_modcache_vm_dir("..", dir, sizeof(dir));
	CHECK(!strcmp(dir, "vm-.."));
	pvgpu_modcache_vm_dir("a/b", dir, sizeof(dir));
	CHECK(!strcmp(dir, "vm-a%2Fb"));
	pvgpu_modcache_vm_dir(NULL, dir, sizeof(dir));
	CHECK(!strcmp(dir, "local"));
}

static void per_vm(void)
{
	struct pvgpu_modcache alice, bob;
	uint8_t a[PVGPU_HASH_SIZE], b[PVGPU_HASH_SIZE], h[PVGPU_HASH_SIZE];

	vm_cache(&alice, "alice", 1 << 20, 1 << 30);
	vm_cache(&bob, "bob", 1 << 20, 1 << 30);
	CHECK(put(&alice, 1, 100, a) == 0);
	CHECK(has(&alice, a));
	CHECK(!has(&bob, a));
	CHECK(put(&bob, 1, 100, b) == 0);	/* its own copy */
	CHECK(has(&bob, b));
	CHECK(put(&alice, 1, 100, h) == 0);	/* again: kept as it was */
	CHECK(has(&alice, h));
}

static void vm_bound(void)
{
	struct pvgpu_modcache c;
	uint8_t h[5][PVGPU_HASH_SIZE];

	vm_cache(&c, "bounded", 3 * BLOCK, 1 << 30);
	/* Whole blocks: each of these costs one. */
	for (int i = 0; i < 3; i++) {
		CHECK(put(&c, 10 + i, BLOCK - 100, h[i]) == 0);
		age(&c, h[i], 100 - i);
	}
	/* The oldest goes for the fourth ... */
	CHECK(put(&c, 13, BLOCK, h[3]) == 0);
	CHECK(!has(&c, h[0]) && has(&c, h[1]) && has(&c, h[2]) && has(&c, h[3]));
	/* ... unless used since: a lookup makes it the newest. */
	age(&c, h[1], 50);
	age(&c, h[2], 40);
	age(&c, h[3], 30);
	CHECK(has(&c, h[1]));
	CHECK(put(&c, 14, 2 * BLOCK, h[4]) == 0);
	CHECK(has(&c, h[1]) && !has(&c, h[2]) && !has(&c, h[3]) && has(&c, h[4]));
	/* Alone over the bound: not kept, and nothing evicted for it. */
	CHECK(put(&c, 15, 3 * BLOCK + 1, h[0]) == 1);
	CHECK(!has(&c, h[0]) && has(&c, h[1]) && has(&c, h[4]));
	/* A VM that keeps nothing. */
	vm_cache(&c, "none", 0, 1 << 30);
	CHECK(put(&c, 16, 10, h[0]) == 1);
	CHECK(!has(&c, h[0]));
}

static void global_bound(void)
{
	struct pvgpu_modcache x, y;
	uint8_t hx[2][PVGPU_HASH_SIZE], hy[2][PVGPU_HASH_SIZE];
	char path[PVGPU_MODCACHE_PATH_LEN];

	/* A cache of its own, so that the other cases' entries do not count. */
	snprintf(root + strlen(root), sizeof(root) - strlen(root), "/g");
	mkdir(root, 0700);
	vm_cache(&x, "x", 1 << 20, 3 * BLOCK);
	vm_cache(&y, "y", 1 << 20, 3 * BLOCK);
	CHECK(put(&x, 20, BLOCK, hx[0]) == 0);
	age(&x, hx[0], 100);
	CHECK(put(&y, 21, BLOCK, hy[0]) == 0);
	age(&y, hy[0], 90);
	CHECK(put(&x, 22, BLOCK, hx[1]) == 0);
	age(&x, hx[1], 80);
	/* The oldest anywhere goes: x's first. */
	CHECK(put(&y, 23, BLOCK, hy[1]) == 0);
	CHECK(!has(&x, hx[0]) && has(&y, hy[0]) && has(&x, hx[1]) && has(&y, hy[1]));
	CHECK(put(&y, 24, 3 * BLOCK + 1, hy[0]) == 1);

	/* A damaged entry is a miss. */
	entry_path(&x, hx[1], path);
	{
		int fd = open(path, O_WRONLY);

		CHECK(fd >= 0 && pwrite(fd, "!", 1, 7) == 1);
		close(fd);
	}
	CHECK(!has(&x, hx[1]));
	root[strlen(root) - 2] = '\0';
}

/* What the cache held before it had a directory per VM goes at start. */
static void old_layout(void)
{
	static const char flat[] =
		"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
	char path[PVGPU_MODCACHE_PATH_LEN], other[PVGPU_MODCACHE_PATH_LEN];
	char err[256];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", root, flat);
	snprintf(other, sizeof(other), "%s/notes.txt", root);
	fd = open(path, O_WRONLY | O_CREAT, 0600);
	close(fd);
	fd = open(other, O_WRONLY | O_CREAT, 0600);
	close(fd);
	CHECK(pvgpu_modcache_init(root, err, sizeof(err)) == 0);
	CHECK(access(path, F_OK) != 0);
	CHECK(access(other, F_OK) == 0);	/* not ours: left */
}

int main(void)
{
	char cmd[128];
	char err[256];
	uint8_t h[PVGPU_HASH_SIZE];

	if (pvgpu_sha256("", 0, h)) {
		printf("no libcrypto: 0 passed, 1 failed\n");
		return 1;
	}
	snprintf(root, sizeof(root), "/tmp/pvgpu-modcache-XXXXXX");
	if (!mkdtemp(root))
		return 1;
	CHECK(pvgpu_modcache_init(root, err, sizeof(err)) == 0);
	names();
	per_vm();
	vm_bound();
	global_bound();
	old_layout();
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	CHECK(system(cmd) == 0);
	return UNIT_REPORT();
}
