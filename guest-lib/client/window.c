/*
 * window.c - see window.h.
 *
 * The arena allocator is first-fit over a sorted array of blocks: pinned
 * allocations are few and long-lived, so simplicity wins over speed here.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "debug.h"
#include "guest_window.h"
#include "pvgpu_ioctl.h"
#include "size.h"
#include "trace.h"
#include "wait.h"

#define ARENA_ALIGN		4096u	/* page-aligned, like cudaMallocHost */
#define STALL_TIMEOUT_NS	(30ull * 1000000000u)

struct pvgpu_window_block {
	uint64_t offset, size;
	int used;
};

/*
 * Parts of a staging block smaller than this are not handed to a helper:
 * a hand-off costs more.
 */
#define PART_MIN		(256u * 1024)
/*
 * How long an idle helper spins for the next job before it sleeps: the
 * blocks of one big copy come back to back, and a wake-up through the
 * kernel (tens of microseconds, more on a busy host) is a large share of
 * one 4 MiB block's memcpy: it was one reason pageable copies varied
 * from run to run.
 */
#define HELPER_SPIN_NS		(200u * 1000)

struct pvgpu_copy_helper {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	/* The job: written by the caller before it bumps `seq`. */
	void *dst;
	const void *src;
	size_t len;
	unsigned int seq;		/* jobs posted; atomics only */
	unsigned int sleeping;		/* the helper waits on `wake`; atomics */
	int quit;			/* under lock */
	int done;			/* spun on by the caller, atomics only */
};

static void *copy_helper_main(void *arg)
{
	struct pvgpu_copy_helper *h = arg;
	unsigned int seen = 0;

	for (;;) {
		struct pvgpu_poll poll = { 0 };
		int quit = 0;

		while (__atomic_load_n(&h->seq, __ATOMIC_ACQUIRE) == seen &&
		       pvgpu_poll_again(&poll, HELPER_SPIN_NS))
			;
		if (__atomic_load_n(&h->seq, __ATOMIC_ACQUIRE) == seen) {
			pthread_mutex_lock(&h->lock);
			__atomic_store_n(&h->sleeping, 1, __ATOMIC_SEQ_CST);
			while (__atomic_load_n(&h->seq, __ATOMIC_SEQ_CST) == seen &&
			       !h->quit)
				pthread_cond_wait(&h->wake, &h->lock);
			__atomic_store_n(&h->sleeping, 0, __ATOMIC_RELAXED);
			quit = h->quit;
			pthread_mutex_unlock(&h->lock);
		}
		if (quit)
			break;
		seen = __atomic_load_n(&h->seq, __ATOMIC_ACQUIRE);
		pvgpu_copy_stream(h->dst, h->src, h->len);
		__atomic_store_n(&h->done, 1, __ATOMIC_RELEASE);
	}
	return NULL;
}

static struct pvgpu_copy_helper *copy_helper_start(void)
{
	struct pvgpu_copy_helper *h = calloc(1, sizeof(*h));

	if (!h)
		return NULL;
	pthread_mutex_init(&h->lock, NULL);
	pthread_cond_init(&h->wake, NULL);
	if (pthread_create(&h->thread, NULL, copy_helper_main, h)) {
		pthread_cond_destroy(&h->wake);
		pthread_mutex_destroy(&h->lock);
		free(h);
		return NULL;
	}
	return h;
}

static void copy_helper_stop(struct pvgpu_copy_helper *h)
{
	pthread_mutex_lock(&h->lock);
	h->quit = 1;
	pthread_cond_signal(&h->wake);
	pthread_mutex_unlock(&h->lock);
	pthread_join(h->thread, NULL);
	pthread_cond_destroy(&h->wake);
	pthread_mutex_destroy(&h->lock);
	free(h);
}

/* Hand one part to a helper; it may be spinning for it or asleep. */
static void copy_helper_post(struct pvgpu_copy_helper *h, void *dst,
			     const void *src, size_t len)
{
	h->dst = dst;
	h->src = src;
	h->len = len;
	__atomic_store_n(&h->done, 0, __ATOMIC_RELAXED);
	__atomic_add_fetch(&h->seq, 1, __ATOMIC_SEQ_CST);
	/* Either it sees the new seq before sleeping, or we see it asleep. */
	if (__atomic_load_n(&h->sleeping, __ATOMIC_SEQ_CST)) {
		pthread_mutex_lock(&h->lock);
		pthread_cond_signal(&h->wake);
		pthread_mutex_unlock(&h->lock);
	}
}

/*
 * The streaming copy (relax.h), split between this thread and up to
 * nhelpers helpers (parts of at least PART_MIN bytes, cache-line aligned).
 */
static void block_copy(struct pvgpu_window_map *w, void *dst, const void *src,
		       size_t len)
{
	unsigned int parts = (unsigned int)(len / PART_MIN), used;
	size_t part, off;

	if (parts > w->nhelpers + 1)
		parts = w->nhelpers + 1;
	if (parts < 2) {
		pvgpu_copy_stream(dst, src, len);
		return;
	}
	used = parts - 1;
	part = (len / parts) & ~(size_t)63;
	off = 0;
	for (unsigned int i = 0; i < used; i++, off += part)
		copy_helper_post(w->helpers[i], (uint8_t *)dst + off,
				 (const uint8_t *)src + off, part);
	/* Ours is the last part, the remainder included. */
	pvgpu_copy_stream((uint8_t *)dst + off, (const uint8_t *)src + off,
			  len - off);
	for (unsigned int i = 0; i < used; i++)
		while (!__atomic_load_n(&w->helpers[i]->done, __ATOMIC_ACQUIRE))
			pvgpu_cpu_relax();
}

static void helpers_start(struct pvgpu_window_map *w, unsigned int threads)
{
	if (threads > PVGPU_WINDOW_MAX_COPY_THREADS)
		threads = PVGPU_WINDOW_MAX_COPY_THREADS;
	w->nhelpers = 0;
	while (w->nhelpers + 1 < threads) {
		struct pvgpu_copy_helper *h = copy_helper_start();

		if (!h)
			break;
		w->helpers[w->nhelpers++] = h;
	}
}

static void helpers_stop(struct pvgpu_window_map *w)
{
	for (unsigned int i = 0; i < w->nhelpers; i++)
		copy_helper_stop(w->helpers[i]);
	w->nhelpers = 0;
}

/* Where pinned allocations start: the first page past the staging ring. */
static uint64_t arena_start(uint64_t staging_offset, uint32_t slot_size,
			    uint32_t nslots)
{
	uint64_t ring_end = staging_offset + (uint64_t)slot_size * nslots;

	return (ring_end + ARENA_ALIGN - 1) & ~(uint64_t)(ARENA_ALIGN - 1);
}

/*
 * The map of a window mapped at base with layout hdr (a checked copy, not
 * the shared header itself): the whole arena free, the copy helper
 * started.  NULL when out of memory (the caller still owns base and dev_fd).
 */
static struct pvgpu_window_map *map_new(uint8_t *base, uint64_t size,
					int dev_fd,
					const struct pvgpu_window_header *hdr,
					unsigned int copy_threads)
{
	struct pvgpu_window_map *w = calloc(1, sizeof(*w));
	uint64_t arena = arena_start(hdr->staging_offset, hdr->slot_size,
				     hdr->nslots);

	if (!w)
		return NULL;
	w->blocks = malloc(16 * sizeof(*w->blocks));
	if (!w->blocks) {
		free(w);
		return NULL;
	}
	w->cap = 16;
	w->base = base;
	w->size = size;
	w->window_id = hdr->window_id;
	w->dev_fd = dev_fd;
	w->hdr = (struct pvgpu_window_header *)base;
	w->staging_offset = hdr->staging_offset;
	w->slot_size = hdr->slot_size;
	w->nslots = hdr->nslots;
	w->blocks[0] = (struct pvgpu_window_block){ arena, size - arena, 0 };
	w->nblocks = 1;
	pthread_mutex_init(&w->lock, NULL);
	helpers_start(w, copy_threads);
	return w;
}

/*
 * Map a window where processes rarely have anything (from 32 TiB up:
 * above ASan's shadow, far below the kernel's mmap area), so that the
 * backend's worker, which maps it at our address for managed memory
 * (window_attach's guest_base), finds that address free in its own
 * process too, whatever its libraries and the CUDA driver took; anywhere
 * when none of those places is free (or the address space is smaller).
 */
#define WINDOW_HINT_BASE	0x200000000000ull
#define WINDOW_HINT_STEP	0x004000000000ull	/* 256 GiB */
#define WINDOW_HINT_TRIES	16

static void *map_shared(int fd, uint64_t size)
{
	for (uint64_t k = 0; k < WINDOW_HINT_TRIES; k++) {
		void *want = (void *)(uintptr_t)(WINDOW_HINT_BASE + k * WINDOW_HINT_STEP);
		void *p = mmap(want, size, PROT_READ | PROT_WRITE,
			       MAP_SHARED | MAP_FIXED_NOREPLACE, fd, 0);

		if (p == want)
			return p;
		if (p != MAP_FAILED) {	/* a kernel that took it as a hint */
			munmap(p, size);
			break;
		}
		if (errno != EEXIST)
			break;
	}
	return mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
}

/*
 * The window of the host's reserved huge pages: the GPU's copies from it
 * see fewer, larger pages (on the H100 machine 64 KiB copies from a 4 KiB
 * page memfd had a p90 of 17 us against 10 from huge pages, the same as
 * cuMemAllocHost's; docs/benchmarks-history.md, 2026-11-25).  *sizep rounds
 * down to whole huge
 * pages.  MAP_FAILED when the host has no such pages free (the mapping
 * reserves them all at once), with *fdp closed.
 */
#define HUGE_PAGE	(2ull << 20)

/*
 * The window's memfd, size bytes, sealed against shrinking: the worker
 * maps all of it for the whole session, and a file that shrank under its
 * mapping would kill it with SIGBUS, so it refuses a window without the
 * seal (host-backend/session/window.c).  -1 with errno set.
 */
static int sealed_memfd(unsigned int flags, uint64_t size)
{
	int fd, err;

	fd = memfd_create("pvgpu-window", MFD_CLOEXEC | MFD_ALLOW_SEALING | flags);
	if (fd < 0)
		return -1;
	if (ftruncate(fd, (off_t)size) || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK)) {
		err = errno;
		close(fd);
		errno = err;
		return -1;
	}
	return fd;
}

static void *map_hugepages(uint64_t *sizep, int *fdp)
{
	uint64_t size = *sizep & ~(HUGE_PAGE - 1);
	void *base;
	int fd;

	fd = sealed_memfd(MFD_HUGETLB, size);
	if (fd < 0) {
		pvgpu_debug("window: no sealed huge-page memfd of %llu MiB (%s): ordinary pages",
			    (unsigned long long)(size >> 20), strerror(errno));
		return MAP_FAILED;
	}
	base = map_shared(fd, size);
	if (base == MAP_FAILED) {
		pvgpu_debug("window: %llu MiB of huge pages not free (%s): ordinary pages",
			    (unsigned long long)(size >> 20), strerror(errno));
		close(fd);
		return MAP_FAILED;
	}
	pvgpu_debug("window: %llu MiB of huge pages", (unsigned long long)(size >> 20));
	*sizep = size;
	*fdp = fd;
	return base;
}

/* v when it is within [min, max], else dflt: a bad setting is no setting. */
static uint64_t in_range(uint64_t v, uint64_t dflt, uint64_t min, uint64_t max)
{
	return v < min || v > max ? dflt : v;
}

struct pvgpu_window_map *pvgpu_window_create(const struct pvgpu_client_config *cfg,
					     int *fdp, char *err, size_t errlen)
{
	uint64_t size = in_range(cfg->window_size, 1ull << 30,
				 64ull << 20, 64ull << 30);
	uint32_t slot = (uint32_t)in_range(cfg->staging_slot, 4u << 20,
					   64u << 10, 64u << 20);
	uint32_t nslots = (uint32_t)in_range(cfg->staging_slots, 8, 2, 64);
	struct pvgpu_window_header *hdr;
	struct pvgpu_window_map *w;
	void *base;
	int fd;

	size &= ~(uint64_t)(ARENA_ALIGN - 1);
	if (arena_start(PVGPU_WINDOW_HDR_SIZE, slot, nslots) + ARENA_ALIGN > size) {
		snprintf(err, errlen, "window of %llu bytes has no room past its staging slots",
			 (unsigned long long)size);
		return NULL;
	}
	base = MAP_FAILED;
	if (cfg->window_hugepages)
		base = map_hugepages(&size, &fd);
	if (base == MAP_FAILED) {
		fd = sealed_memfd(0, size);
		if (fd < 0) {
			snprintf(err, errlen, "memfd for the window: %s", strerror(errno));
			goto err_fd;
		}
		base = map_shared(fd, size);
	}
	if (base == MAP_FAILED) {
		snprintf(err, errlen, "mapping the window: %s", strerror(errno));
		goto err_fd;
	}
	hdr = base;
	hdr->magic = PVGPU_WINDOW_MAGIC;
	hdr->layout = PVGPU_WINDOW_LAYOUT;
	hdr->size = size;
	hdr->window_id = 0;
	hdr->staging_offset = PVGPU_WINDOW_HDR_SIZE;
	hdr->slot_size = slot;
	hdr->nslots = nslots;
	w = map_new(base, size, -1, hdr, cfg->copy_threads);
	if (!w) {
		snprintf(err, errlen, "out of memory");
		munmap(base, size);
		goto err_fd;
	}
	*fdp = fd;
	return w;

err_fd:
	if (fd >= 0)
		close(fd);
	return NULL;
}

/* Map /dev/pvgpuN if it is a window we may use; the map, or NULL with why in err. */
static struct pvgpu_window_map *map_device(const char *path,
					   unsigned int copy_threads,
					   char *err, size_t errlen)
{
	struct pvgpu_window_header hdr;
	struct pvgpu_window_map *w;
	struct pvgpu_info info;
	void *base;
	int fd;

	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return NULL;
	}
	if (flock(fd, LOCK_EX | LOCK_NB)) {
		snprintf(err, errlen, "%s is in use by another process", path);
		goto err_close;
	}
	if (ioctl(fd, PVGPU_IOC_INFO, &info) ||
	    (info.flags & PVGPU_INFO_UNBOUND)) {
		snprintf(err, errlen, "%s: no window behind it", path);
		goto err_close;
	}
	base = map_shared(fd, info.size);
	if (base == MAP_FAILED) {
		snprintf(err, errlen, "mapping %s: %s", path, strerror(errno));
		goto err_close;
	}
	/* The host wrote the layout; take it only if it makes sense. */
	memcpy(&hdr, base, sizeof(hdr));
	if (hdr.magic != PVGPU_WINDOW_MAGIC || hdr.layout != PVGPU_WINDOW_LAYOUT ||
	    hdr.size != info.size || hdr.window_id != info.window_id ||
	    !hdr.window_id || hdr.staging_offset < PVGPU_WINDOW_HDR_SIZE ||
	    hdr.nslots < 2 || hdr.slot_size < (64u << 10) ||
	    arena_start(hdr.staging_offset, hdr.slot_size, hdr.nslots) +
	    ARENA_ALIGN > info.size) {
		snprintf(err, errlen, "%s: the window's header is not a usable layout %u one",
			 path, PVGPU_WINDOW_LAYOUT);
		goto err_unmap;
	}
	w = map_new(base, info.size, fd, &hdr, copy_threads);
	if (!w) {
		snprintf(err, errlen, "out of memory");
		goto err_unmap;
	}
	/* Our counters start again with us; the backend resets its own. */
	pvgpu_window_store(&w->hdr->h2d_filled, 0);
	pvgpu_window_store(&w->hdr->d2h_taken, 0);
	return w;

err_unmap:
	munmap(base, info.size);
err_close:
	close(fd);
	return NULL;
}

struct pvgpu_window_map *pvgpu_window_open_device(const struct pvgpu_client_config *cfg,
						  char *err, size_t errlen)
{
	const char *path = cfg->window_device;

	if (*path)
		return map_device(path, cfg->copy_threads, err, errlen);
	snprintf(err, errlen, "no /dev/pvgpuN device");
	for (int i = 0; i < 16; i++) {
		struct pvgpu_window_map *w;
		char dev[32], why[200];

		snprintf(dev, sizeof(dev), "/dev/pvgpu%d", i);
		if (access(dev, F_OK))
			continue;
		w = map_device(dev, cfg->copy_threads, why, sizeof(why));
		if (w)
			return w;
		snprintf(err, errlen, "%s", why);	/* the last reason */
	}
	return NULL;
}

struct pvgpu_window_map *pvgpu_window_from_memory(void *base, uint64_t size,
						  const struct pvgpu_client_config *cfg,
						  char *err, size_t errlen)
{
	struct pvgpu_window_header hdr;
	struct pvgpu_window_map *w;

	/* The transport wrote the layout; take it only if it makes sense. */
	memcpy(&hdr, base, sizeof(hdr));
	if (hdr.magic != PVGPU_WINDOW_MAGIC || hdr.layout != PVGPU_WINDOW_LAYOUT ||
	    hdr.size != size || hdr.window_id != 0 ||
	    hdr.staging_offset < PVGPU_WINDOW_HDR_SIZE ||
	    hdr.nslots < 2 || hdr.slot_size < (64u << 10) ||
	    arena_start(hdr.staging_offset, hdr.slot_size, hdr.nslots) +
	    ARENA_ALIGN > size) {
		snprintf(err, errlen, "the channel's window is not a usable layout %u one",
			 PVGPU_WINDOW_LAYOUT);
		return NULL;
	}
	w = map_new(base, size, -1, &hdr, cfg->copy_threads);
	if (!w) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	w->borrowed = 1;
	return w;
}

void pvgpu_window_destroy(struct pvgpu_window_map *w)
{
	if (!w)
		return;
	helpers_stop(w);
	if (!w->borrowed)
		munmap(w->base, w->size);
	if (w->dev_fd >= 0)
		close(w->dev_fd);	/* and with it the lock */
	pthread_mutex_destroy(&w->lock);
	free(w->blocks);
	free(w);
}

void *pvgpu_window_alloc(struct pvgpu_window_map *w, uint64_t size)
{
	void *p = NULL;

	if (size == 0 || size > w->size)
		return NULL;
	size = (size + ARENA_ALIGN - 1) & ~(uint64_t)(ARENA_ALIGN - 1);
	pthread_mutex_lock(&w->lock);
	for (size_t i = 0; i < w->nblocks; i++) {
		struct pvgpu_window_block *b = &w->blocks[i];

		if (b->used || b->size < size)
			continue;
		if (b->size > size) {
			/* Split: the rest stays free right after. */
			if (w->nblocks == w->cap) {
				struct pvgpu_window_block *v =
					realloc(w->blocks, 2 * w->cap * sizeof(*v));

				if (!v)
					break;
				w->blocks = v;
				w->cap *= 2;
				b = &w->blocks[i];
			}
			memmove(b + 2, b + 1, (w->nblocks - i - 1) * sizeof(*b));
			b[1] = (struct pvgpu_window_block){ b->offset + size,
							     b->size - size, 0 };
			b->size = size;
			w->nblocks++;
		}
		b->used = 1;
		p = w->base + b->offset;
		break;
	}
	pthread_mutex_unlock(&w->lock);
	return p;
}

int pvgpu_window_free(struct pvgpu_window_map *w, void *p)
{
	uint64_t off;
	int rc = -1;

	if ((uint8_t *)p < w->base || (uint8_t *)p >= w->base + w->size)
		return -1;
	off = (uint64_t)((uint8_t *)p - w->base);
	pthread_mutex_lock(&w->lock);
	for (size_t i = 0; i < w->nblocks; i++) {
		struct pvgpu_window_block *b = &w->blocks[i];

		if (b->offset != off || !b->used)
			continue;
		b->used = 0;
		/* Merge with free neighbours so big allocations fit again. */
		if (i + 1 < w->nblocks && !b[1].used) {
			b->size += b[1].size;
			memmove(b + 1, b + 2, (w->nblocks - i - 2) * sizeof(*b));
			w->nblocks--;
		}
		if (i > 0 && !b[-1].used) {
			b[-1].size += b->size;
			memmove(b, b + 1, (w->nblocks - i - 1) * sizeof(*b));
			w->nblocks--;
		}
		rc = 0;
		break;
	}
	pthread_mutex_unlock(&w->lock);
	return rc;
}

int pvgpu_window_holds(const struct pvgpu_window_map *w, const void *p,
		       uint64_t len, uint64_t *offset)
{
	const uint8_t *q = p;
	uint64_t arena;

	if (!w)
		return 0;
	arena = w->staging_offset + (uint64_t)w->slot_size * w->nslots;
	if (q < w->base + arena || q >= w->base + w->size)
		return 0;
	*offset = (uint64_t)(q - w->base);
	return len <= w->size - *offset;
}

struct counter_wait {
	const struct pvgpu_window_counter *counter;
	uint64_t want;
	int (*quiet)(void *);
	void *arg;
};

static int counter_passed(void *arg)
{
	struct counter_wait *cw = arg;

	return pvgpu_window_load(cw->counter) >= cw->want;
}

static int channel_spoke(void *arg)
{
	struct counter_wait *cw = arg;

	return !cw->quiet(cw->arg);
}

/*
 * Spin, then yield, then nap, until `counter` passes `want`; give up when
 * quiet() says something arrived on the channel (a refusal, or the
 * backend is gone) or nothing moved for too long.
 */
static int wait_counter(const struct pvgpu_window_counter *counter,
			uint64_t want, int (*quiet)(void *), void *arg)
{
	struct counter_wait cw = { counter, want, quiet, arg };

	if (pvgpu_spin_wait(counter_passed, channel_spoke, &cw,
			    STALL_TIMEOUT_NS) == PVGPU_WAIT_READY)
		return 0;
	/*
	 * Something arrived (the reply, or a hang-up), or too long.  The
	 * backend stores the counter before it replies, so a reply that came
	 * after our last look may have come with what we wait for: look once
	 * more before giving up, or the bytes of a copy that succeeded would
	 * never be taken.
	 */
	return counter_passed(&cw) ? 0 : -1;
}

static uint8_t *slot_ptr(struct pvgpu_window_map *w, uint64_t seq)
{
	return w->base + w->staging_offset +
	       (seq % w->nslots) * (uint64_t)w->slot_size;
}

/*
 * Both ways with streaming stores: nothing here reads the bytes again, and
 * without a read of each line before its store the copy outruns the DMA
 * (4 MiB in ~75 us on the H200 machine against ~160 with memcpy; pageable
 * 16 MiB in 34.8-35.5 GB/s against 26.9-28.1, docs/benchmarks-history.md,
 * 2026-11-28, afternoon).  Out of the
 * window the bytes land in the program's memory as a large memcpy leaves
 * them (glibc streams past a share of the last-level cache too).
 */
int pvgpu_window_stage_in(struct pvgpu_window_map *w, uint64_t id,
			  const void *src, uint64_t size,
			  int (*quiet)(void *), void *arg)
{
	uint64_t blocks = (size + w->slot_size - 1) / w->slot_size;
	uint64_t seq0 = w->h2d_seq;

	for (uint64_t k = 0; k < blocks; k++) {
		uint64_t off = k * w->slot_size;
		uint64_t len = size - off < w->slot_size ? size - off : w->slot_size;

		/* Slot k is free once block k - nslots has been DMA'd. */
		if (k >= w->nslots &&
		    wait_counter(&w->hdr->h2d_done, seq0 + k - w->nslots + 1,
				 quiet, arg))
			return -1;
		block_copy(w, slot_ptr(w, seq0 + k), (const uint8_t *)src + off, len);
		pvgpu_trace_mark(id, PVGPU_TR_BLOCK(PVGPU_TR_G_BLOCK, k));
		pvgpu_window_store(&w->hdr->h2d_filled, seq0 + k + 1);
	}
	return 0;
}

int pvgpu_window_stage_out(struct pvgpu_window_map *w, uint64_t id, void *dst,
			   uint64_t size, int (*quiet)(void *), void *arg)
{
	uint64_t blocks = (size + w->slot_size - 1) / w->slot_size;
	uint64_t seq0 = w->d2h_seq;

	for (uint64_t k = 0; k < blocks; k++) {
		uint64_t off = k * w->slot_size;
		uint64_t len = size - off < w->slot_size ? size - off : w->slot_size;

		if (wait_counter(&w->hdr->d2h_ready, seq0 + k + 1, quiet, arg))
			return -1;
		block_copy(w, (uint8_t *)dst + off, slot_ptr(w, seq0 + k), len);
		pvgpu_trace_mark(id, PVGPU_TR_BLOCK(PVGPU_TR_G_BLOCK, k));
		pvgpu_window_store(&w->hdr->d2h_taken, seq0 + k + 1);
	}
	return 0;
}

void pvgpu_window_ring_sync(struct pvgpu_window_map *w, int h2d, uint64_t seq)
{
	if (h2d) {
		w->h2d_seq = seq;
		pvgpu_window_store(&w->hdr->h2d_filled, seq);
	} else {
		w->d2h_seq = seq;
		pvgpu_window_store(&w->hdr->d2h_taken, seq);
	}
}
