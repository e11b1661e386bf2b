/* modcache.c - see modcache.h. */
#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "modcache.h"
#include "wire.h"

#define FATBIN_MAGIC	0xBA55ED50u
#define MAX_IMAGE	(512ull << 20)

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

/* A path into out (PVGPU_MODCACHE_PATH_LEN bytes): 0, or -1 if too long. */
__attribute__((format(printf, 2, 3)))
static int path_of(char *out, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(out, PVGPU_MODCACHE_PATH_LEN, fmt, ap);
	va_end(ap);
	return n < 0 || n >= PVGPU_MODCACHE_PATH_LEN ? -1 : 0;
}

/*
 * What an entry costs its VM and the cache: its size in whole 4 KiB
 * blocks, so that many small images pay for the blocks they take on disk.
 */
static uint64_t cost_of(uint64_t size)
{
	return (size + PVGPU_MODCACHE_BLOCK - 1) & ~(uint64_t)(PVGPU_MODCACHE_BLOCK - 1);
}

void pvgpu_modcache_vm_dir(const char *name, char *out, size_t len)
{
	static const char ok[] = "abcdefghijklmnopqrstuvwxyz"
				 "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-";
	size_t n;

	if (!name) {
		snprintf(out, len, "local");
		return;
	}
	/* "vm-" keeps "." and ".." names; %XX keeps any byte else apart. */
	n = (size_t)snprintf(out, len, "vm-");
	for (; *name && n + 4 < len; name++)
		n += (size_t)snprintf(out + n, len - n,
				      strchr(ok, *name) ? "%c" : "%%%02X",
				      (unsigned char)*name);
}

static void hash_name(const uint8_t hash[PVGPU_HASH_SIZE], char *name)
{
	for (int i = 0; i < PVGPU_HASH_SIZE; i++)
		sprintf(name + 2 * i, "%02x", hash[i]);
}

/* An entry's name: its hash in hex, or that and ".PID.tmp" while written. */
static int entry_name(const char *s, int *tmp)
{
	size_t i;

	for (i = 0; i < 2 * PVGPU_HASH_SIZE; i++)
		if (!isxdigit((unsigned char)s[i]) || isupper((unsigned char)s[i]))
			return 0;
	*tmp = s[i] != '\0';
	if (!*tmp)
		return 1;
	if (s[i++] != '.')
		return 0;
	for (size_t pid = i; isdigit((unsigned char)s[i]); i++)
		if (i - pid == 10)
			return 0;	/* longer than a pid */
	return isdigit((unsigned char)s[i - 1]) && !strcmp(s + i, ".tmp");
}

/*
 * Entries of the layout before the cache had a directory per VM lie in the
 * root: no session looks there any more, so they only hold disk.
 */
static void drop_flat_entries(const char *root)
{
	struct dirent *de;
	DIR *d = opendir(root);
	int tmp;

	if (!d)
		return;
	while ((de = readdir(d)))
		if (entry_name(de->d_name, &tmp))
			unlinkat(dirfd(d), de->d_name, 0);
	closedir(d);
}

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
	if (strlen(dir) > PVGPU_MODCACHE_ROOT_MAX) {
		snprintf(err, errlen, "module cache %.64s...: a path of at most %d bytes",
			 dir, PVGPU_MODCACHE_ROOT_MAX);
		return -1;
	}
	drop_flat_entries(dir);
	return 0;
err_errno:
	snprintf(err, errlen, "module cache %s: %s", dir, strerror(errno));
	return -1;
}

/* What a scan saw of one entry. */
struct seen {
	int64_t mtime_ns;
	uint64_t cost;
	uint32_t dir;			/* index into the scan's dirs */
	int tmp;
	char name[2 * PVGPU_HASH_SIZE + 24];
};

struct scan {
	char (*dirs)[PVGPU_MODCACHE_DIR_LEN];
	uint32_t ndirs, dircap;
	struct seen *v;
	size_t n, cap;
	uint64_t total;			/* cost of all of them */
};

static void scan_free(struct scan *s)
{
	free(s->dirs);
	free(s->v);
}

/*
 * Add the entries of root/sub to s.  An entry that vanishes meanwhile (a
 * worker of another session evicted it) is simply not there.
 */
static int scan_dir(struct scan *s, const char *root, const char *sub)
{
	char path[PVGPU_MODCACHE_PATH_LEN];
	struct dirent *de;
	DIR *d;

	if (s->ndirs == s->dircap) {
		uint32_t cap = s->dircap ? 2 * s->dircap : 8;
		void *v = realloc(s->dirs, cap * sizeof(s->dirs[0]));

		if (!v)
			return -1;
		s->dirs = v;
		s->dircap = cap;
	}
	if (strlen(sub) >= sizeof(s->dirs[0]) || path_of(path, "%s/%s", root, sub))
		return 0;
	strcpy(s->dirs[s->ndirs], sub);
	d = opendir(path);
	if (!d)
		return errno == ENOENT ? 0 : -1;
	while ((de = readdir(d))) {
		struct stat st;
		struct seen *e;
		int tmp;

		if (!entry_name(de->d_name, &tmp) ||
		    fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) ||
		    !S_ISREG(st.st_mode))
			continue;
		if (s->n == s->cap) {
			size_t cap = s->cap ? 2 * s->cap : 64;
			void *v = realloc(s->v, cap * sizeof(s->v[0]));

			if (!v) {
				closedir(d);
				return -1;
			}
			s->v = v;
			s->cap = cap;
		}
		e = &s->v[s->n++];
		e->mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 +
			      st.st_mtim.tv_nsec;
		e->cost = cost_of((uint64_t)st.st_size);
		e->dir = s->ndirs;
		e->tmp = tmp;
		strcpy(e->name, de->d_name);	/* entry_name: it fits */
		s->total += e->cost;
	}
	closedir(d);
	s->ndirs++;
	return 0;
}

/* Every VM's directory under root (the whole cache). */
static int scan_all(struct scan *s, const char *root)
{
	struct dirent *de;
	DIR *d = opendir(root);
	int rc = 0;

	if (!d)
		return -1;
	while (!rc && (de = readdir(d))) {
		struct stat st;

		if (de->d_name[0] == '.' ||
		    strlen(de->d_name) >= PVGPU_MODCACHE_DIR_LEN ||
		    fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) ||
		    !S_ISDIR(st.st_mode))
			continue;
		rc = scan_dir(s, root, de->d_name);
	}
	closedir(d);
	return rc;
}

static int oldest_first(const void *a, const void *b)
{
	const struct seen *x = a, *y = b;

	return (x->mtime_ns > y->mtime_ns) - (x->mtime_ns < y->mtime_ns);
}

/*
 * Evict the least recently used entries of s until `need` more bytes fit
 * under max and, with max_entries, one more entry fits too.  A file being
 * written by another worker is left alone unless it is stale (its worker
 * died); one that is gone already was another's eviction, and counts.
 */
static void evict(struct scan *s, const char *root, uint64_t need, uint64_t max,
		  size_t max_entries, int64_t now_ns)
{
	size_t live = s->n;

	if (s->n > 1)
		qsort(s->v, s->n, sizeof(s->v[0]), oldest_first);
	for (size_t i = 0; i < s->n; i++) {
		char path[PVGPU_MODCACHE_PATH_LEN];
		struct seen *e = &s->v[i];

		if (s->total + need <= max && (!max_entries || live < max_entries))
			return;
		if (e->tmp && now_ns - e->mtime_ns < PVGPU_MODCACHE_STALE_NS)
			continue;
		if (path_of(path, "%s/%s/%s", root, s->dirs[e->dir], e->name) ||
		    (unlink(path) && errno != ENOENT))
			continue;
		s->total -= e->cost;
		live--;
	}
}

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Room for `cost` more bytes in the VM's directory and in the cache. */
static int make_room(const struct pvgpu_modcache *c, uint64_t cost)
{
	struct scan s = { 0 };
	int64_t now = now_ns();
	int rc;

	rc = scan_dir(&s, c->root, c->vm);
	if (!rc)
		evict(&s, c->root, cost, c->vm_max, PVGPU_MODCACHE_VM_ENTRIES, now);
	scan_free(&s);
	if (rc)
		return rc;
	memset(&s, 0, sizeof(s));
	rc = scan_all(&s, c->root);
	if (!rc)
		evict(&s, c->root, cost, c->max, 0, now);
	scan_free(&s);
	return rc;
}

/* Write len bytes at p to fd; 0 or -1. */
static int write_all(int fd, const uint8_t *p, size_t len)
{
	while (len) {
		ssize_t n = write(fd, p, len);

		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

int pvgpu_modcache_put(const struct pvgpu_modcache *c,
		       const uint8_t hash[PVGPU_HASH_SIZE],
		       const void *image, size_t len)
{
	char name[2 * PVGPU_HASH_SIZE + 1], dir[PVGPU_MODCACHE_PATH_LEN];
	char path[PVGPU_MODCACHE_PATH_LEN], tmp[PVGPU_MODCACHE_PATH_LEN];
	uint64_t cost = cost_of(len);
	int fd;

	if (cost > c->vm_max || cost > c->max)
		return 1;
	hash_name(hash, name);
	if (path_of(dir, "%s/%s", c->root, c->vm) ||
	    path_of(path, "%s/%s", dir, name) ||
	    path_of(tmp, "%s.%d.tmp", path, (int)getpid()))
		return -1;
	/* Had already: now used again. */
	if (!utimensat(AT_FDCWD, path, NULL, AT_SYMLINK_NOFOLLOW))
		return 0;
	if (mkdir(dir, 0700) && errno != EEXIST)
		return -1;
	if (make_room(c, cost))
		return -1;
	/* One left by a worker of this pid that died while writing it. */
	unlink(tmp);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -1;
	if (write_all(fd, image, len)) {
		close(fd);
		goto err_unlink;
	}
	close(fd);
	/*
	 * link is atomic and never replaces: a reader sees the whole image or
	 * none, and a worker of the same VM that stored it meanwhile keeps its
	 * copy (the same bytes).
	 */
	if (link(tmp, path) && errno != EEXIST)
		goto err_unlink;
	unlink(tmp);
	return 0;

err_unlink:
	unlink(tmp);
	return -1;
}

void *pvgpu_modcache_get(const struct pvgpu_modcache *c,
			 const uint8_t hash[PVGPU_HASH_SIZE], size_t *len)
{
	char name[2 * PVGPU_HASH_SIZE + 1], path[PVGPU_MODCACHE_PATH_LEN];
	uint8_t check[PVGPU_HASH_SIZE];
	struct stat st;
	uint8_t *buf;
	size_t off = 0;
	int fd;

	hash_name(hash, name);
	if (path_of(path, "%s/%s/%s", c->root, c->vm, name))
		return NULL;
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || st.st_size <= 0 ||
	    (uint64_t)st.st_size > MAX_IMAGE)
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
	/*
	 * What is loaded is what the hash names, whatever befell the file
	 * (a crash of the host while it was written): else it is a miss.
	 */
	if (pvgpu_sha256(buf, off, check) || memcmp(check, hash, PVGPU_HASH_SIZE))
		goto err_free;
	/* Used now: the last to be evicted (mtime is the cache's LRU clock). */
	futimens(fd, NULL);
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
