/*
 * cuda_hostreg.c - registered host memory that a kernel can reach.
 *
 * cuMemHostRegister pins memory the program already has, anywhere in its
 * address space, and cuMemHostGetDevicePointer then gives the GPU's
 * address for it (NPP does this).  Only the shared window (shm://, the VM
 * window device) is memory the backend sees.  So, where the window has
 * room, registration moves the pages into it: it copies the range (whole
 * pages) into a window allocation, then maps that allocation's pages over
 * the program's with mremap(old_size 0), which makes a second mapping of
 * the same shared pages.  The program keeps its addresses and its data;
 * the window (and the backend, which pins it) sees every byte it writes.
 * Unregistering copies the bytes back into private pages at the same
 * addresses and frees the window's part.
 *
 * Limits, each falling back to the registration being remembered only
 * (copies stay pageable, no device pointer): no window, a window mapped
 * from the channel (Xen grants), a range larger than HOSTREG_MAX or than
 * the window's free room, pages already moved for another registration,
 * pages that are not private anonymous read-write memory (a file's pages
 * must stay the file's; the heap and anonymous mappings move), pages near
 * the calling thread's stack pointer (NPP registers a buffer on its
 * stack): whatever this thread writes there between the copy and the
 * remap (a call's return address, a signal's frame) would be lost.
 * Between the copy and the remap another thread's write to the range
 * would be lost: registering memory that is being written at that moment
 * is not something a correct program does.  After fork() the pages are
 * shared with the child, not copied on write.
 */
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cuda_internal.h"	/* cuda.h, as the driver is built */
#include "guest_window.h"

#define HOSTREG_MAX	(256ull << 20)

/*
 * Whole pages are copied, the program's neighbours of the registered bytes
 * too, which a sanitizer may hold poisoned (a heap's red zones): copied
 * word by word, through volatile, so that no memcpy (intercepted) is made
 * of it.
 */
__attribute__((no_sanitize_address))
static void copy_pages(void *dst, const void *src, size_t len)
{
	volatile uint64_t *d = dst;
	const volatile uint64_t *s = src;

	for (size_t i = 0; i < len / sizeof(uint64_t); i++)
		d[i] = s[i];
}

/* Registrations moved into a window now: copies look for them only then. */
static unsigned int aliases;

/* Is any page of [start, +len) moved for a registration already? */
static int pages_taken(uintptr_t start, size_t len)
{
	int taken = 0;

	pthread_mutex_lock(&cu.table_lock);
	for (size_t i = 0; i < cu.nhosts && !taken; i++) {
		const struct cu_host *o = &cu.hosts[i];

		taken = o->alias && o->alias_start < start + len &&
			start < o->alias_start + o->alias_len;
	}
	pthread_mutex_unlock(&cu.table_lock);
	return taken;
}

/*
 * Does [start, end) come near the stack this thread is running on: from
 * 64 KiB below the stack pointer (the frames of memcpy and mremap, or a
 * signal's) to two pages above it (this function's own frame)?
 */
static int near_stack(uintptr_t start, uintptr_t end, long page)
{
	/* The frame, not a local's address: a sanitizer may keep locals
	 * on a stack of its own. */
	uintptr_t sp = (uintptr_t)__builtin_frame_address(0) & ~((uintptr_t)page - 1);

	return start < sp + 2 * (uintptr_t)page && end + (64u << 10) > sp;
}

/* Are all of [start, end) private anonymous read-write pages? */
static int private_anonymous(uintptr_t start, uintptr_t end)
{
	FILE *f = fopen("/proc/self/maps", "re");
	uintptr_t covered = start;
	char line[512];

	if (!f)
		return 0;
	while (covered < end && fgets(line, sizeof(line), f)) {
		unsigned long lo, hi, ino;
		char perms[8];

		if (sscanf(line, "%lx-%lx %7s %*s %*s %lu", &lo, &hi, perms, &ino) != 4)
			break;
		if (hi <= covered)
			continue;
		if (lo > covered || ino || strncmp(perms, "rw", 2) || perms[3] != 'p')
			break;
		covered = hi;
	}
	fclose(f);
	return covered >= end;
}

int cu_hostreg_alias(struct cu_host *h, struct cu_ctx *ctx)
{
	long page = sysconf(_SC_PAGESIZE);
	struct pvgpu_client *c = cu.devices[ctx->device].be->client;
	struct pvgpu_window_map *win = c ? pvgpu_client_window(c) : NULL;
	uintptr_t start, end;
	uint8_t *w;
	void *m;

	if (!win || win->borrowed || page <= 0)
		return -1;
	start = (uintptr_t)h->ptr & ~((uintptr_t)page - 1);
	end = ((uintptr_t)h->ptr + h->size + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
	if (end <= start || end - start > HOSTREG_MAX || pages_taken(start, end - start) ||
	    near_stack(start, end, page) || !private_anonymous(start, end))
		return -1;
	w = pvgpu_window_alloc(win, end - start);
	if (!w)
		return -1;
	copy_pages(w, (void *)start, end - start);
	m = mremap(w, 0, end - start, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)start);
	if (m != (void *)start) {
		pvgpu_window_free(win, w);
		return -1;
	}
	h->win = win;
	h->client = c;
	h->alias = w;
	h->alias_start = start;
	h->alias_len = end - start;
	cu_window_pin(ctx, win, w, h->alias_len);
	__atomic_add_fetch(&aliases, 1, __ATOMIC_RELAXED);
	return 0;
}

void cu_hostreg_unalias(struct cu_host *h)
{
	void *tmp, *m;

	if (!h->alias || near_stack(h->alias_start, h->alias_start + h->alias_len,
				    sysconf(_SC_PAGESIZE)))
		return;		/* the program keeps the window's pages */
	/* Private pages with the bytes, moved over the window's mapping. */
	tmp = mmap(NULL, h->alias_len, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (tmp == MAP_FAILED)
		return;		/* the program keeps the window's pages */
	copy_pages(tmp, (void *)h->alias_start, h->alias_len);
	m = mremap(tmp, h->alias_len, h->alias_len, MREMAP_MAYMOVE | MREMAP_FIXED,
		   (void *)h->alias_start);
	if (m != (void *)h->alias_start) {
		munmap(tmp, h->alias_len);
		return;
	}
	cu_window_unpin(h->client, h->win, h->alias, h->alias_len);
	pvgpu_window_free(h->win, h->alias);
	h->alias = NULL;
	__atomic_sub_fetch(&aliases, 1, __ATOMIC_RELAXED);
}

void *cu_host_window_ptr(const struct cu_host *h, const void *p)
{
	if (!h->win)
		return NULL;
	if (!h->registered)
		return (void *)p;
	if (!h->alias || (uintptr_t)p - h->alias_start >= h->alias_len)
		return NULL;
	return h->alias + ((uintptr_t)p - h->alias_start);
}

int cu_window_offset(struct pvgpu_window_map *win, const void *p, uint64_t n,
		     uint64_t *off)
{
	struct cu_host h;
	const uint8_t *w;

	if (pvgpu_window_holds(win, p, n, off))
		return 1;
	if (!__atomic_load_n(&aliases, __ATOMIC_RELAXED) || !cu_host_find(p, &h) ||
	    h.win != win || !h.alias)
		return 0;
	w = cu_host_window_ptr(&h, p);
	return w && (uintptr_t)p + n <= h.alias_start + h.alias_len &&
	       pvgpu_window_holds(win, w, n, off);
}
