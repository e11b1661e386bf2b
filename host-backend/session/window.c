/*
 * window.c - a shared window between the guest library and this worker
 * (common/window.h): attach, zero-copy DMA to and from it, and pageable
 * copies staged through its ring of slots.
 *
 * Everything in the window is the guest's to scribble on.  The layout is
 * read once and kept here; every offset is checked against our copy; the
 * ring counters are validated on every read, and a wait for the guest is
 * bounded and gives up when the guest's socket goes away.
 */
#include <cuda.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "pvgpu_dispatch.h"
#include "registry.h"
#include "trace.h"
#include "wait.h"
#include "watchdog.h"
#include "worker.h"

#define MAX_SLOTS		PVGPU_WINDOW_MAX_SLOTS
#define MIN_SLOT		(64u * 1024)
#define MAX_SLOT		(64u * 1024 * 1024)
#define GUEST_TIMEOUT_NS	(30ull * 1000000000u)

static void drop_slot_events(struct pvgpu_worker *w);

void pvgpu_window_detach(struct pvgpu_worker *w)
{
	struct pvgpu_window *win = &w->win;

	if (!win->base)
		return;
	drop_slot_events(w);
	if (w->ex) {
		if (win->staging_ctx)
			w->ex_ops->host_release(w->ex, win->base +
						win->staging_offset, true);
		for (unsigned int i = 0; i < win->npins; i++)
			if (win->pins[i].ctx)
				w->ex_ops->host_release(w->ex, win->base +
							win->pins[i].offset,
							true);
	}
	if (!win->borrowed)
		munmap(win->base, win->size);
	memset(win, 0, sizeof(*win));
}

void pvgpu_window_forget_ctx(struct pvgpu_worker *w, uint64_t ctx)
{
	struct pvgpu_window *win = &w->win;

	/* Before the context goes: its events go with it. */
	if (win->slot_ev_ctx == ctx)
		drop_slot_events(w);
	/* The executor unpinned what was pinned in that context. */
	if (win->staging_ctx == ctx)
		win->staging_ctx = 0;
	for (unsigned int i = 0; i < win->npins; i++)
		if (win->pins[i].ctx == ctx)
			win->pins[i].ctx = 0;
}

/*
 * In a VM: the window the guest names by id is its ivshmem BAR2, whose host
 * file the registry gave for this session's VM.  The guest can only name
 * its own VM's window: any other id, or a size other than the one
 * registered (the size of the device the guest sees), is refused.
 */
static int open_vm_window(struct pvgpu_worker *w,
			  const struct pvgpu_window_attach_req *req)
{
	const struct pvgpu_vm_window *vw = &w->peer.vm.window;
	char err[512];
	int fd;

	if (!vw->path[0]) {
		wlog_info(w, "window_attach: window 0x%016llx named, but %s has no registered window",
			  (unsigned long long)req->window_id,
			  w->peer.vm.name[0] ? w->peer.vm.name : "this caller");
		return -1;
	}
	if (req->window_id != vw->id || req->size != vw->size) {
		wlog_warn(w, "window_attach: the guest names window 0x%016llx of %llu bytes, vm %s has 0x%016llx of %llu bytes: refused",
			  (unsigned long long)req->window_id,
			  (unsigned long long)req->size, w->peer.vm.name,
			  (unsigned long long)vw->id,
			  (unsigned long long)vw->size);
		return -1;
	}
	fd = pvgpu_vm_window_open(vw, err, sizeof(err));
	if (fd < 0)
		wlog_warn(w, "window_attach: vm %s: %s", w->peer.vm.name, err);
	return fd;
}

/*
 * A memfd the guest passed stays the guest's: it could truncate the file
 * under our mapping, and our next touch past the new end would kill this
 * worker with SIGBUS.  So the file must be sealed against shrinking
 * (F_SEAL_SHRINK, which the guest library adds when it makes the window;
 * a seal can never be taken off) and hold at least what we map.  A guest
 * library from before the seal is refused here and goes on over the
 * socket alone, as after any refused window.  The window device's host
 * file (open_vm_window) is not sealed and need not be: the guest sees a
 * BAR of fixed size and cannot resize the file behind it; nor can a Xen
 * guest take back pages that the channel has mapped (borrowed windows).
 */
static int window_fd_ok(struct pvgpu_worker *w, int fd, uint64_t size)
{
	int seals = fcntl(fd, F_GET_SEALS);
	struct stat st;

	if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
		wlog_warn(w, "window_attach: the guest's window file is not sealed against shrinking (F_SEAL_SHRINK%s): refused",
			  seals < 0 ? "; not a memfd made with MFD_ALLOW_SEALING" : "");
		return -1;
	}
	if (fstat(fd, &st))
		st.st_size = 0;
	if ((uint64_t)st.st_size < size) {
		wlog_warn(w, "window_attach: %llu bytes named, the guest's memfd holds %lld: refused",
			  (unsigned long long)size, (long long)st.st_size);
		return -1;
	}
	return 0;
}

/*
 * Map the window's file where the guest has it mapped (guest_base, when
 * page-aligned, above the lowest 16 MiB, which stay unmapped so that a
 * stray small pointer in the worker still faults, and free in this
 * process: MAP_FIXED_NOREPLACE never takes a mapping of ours away), so
 * that an address in the window means the same bytes to the guest, to us
 * and to the GPU (managed.c); else anywhere.  *same says which.
 */
#define LOW_FLOOR	(16ull << 20)

static void *map_window(struct pvgpu_worker *w, int fd, uint64_t size,
			uint64_t guest_base, int *same)
{
	void *want = (void *)(uintptr_t)guest_base, *base = MAP_FAILED;

	*same = 0;
	if (guest_base >= LOW_FLOOR && !(guest_base & 4095) &&
	    guest_base <= UINTPTR_MAX - size) {
		base = mmap(want, size, PROT_READ | PROT_WRITE,
			    MAP_SHARED | MAP_FIXED_NOREPLACE, fd, 0);
		/* A kernel without MAP_FIXED_NOREPLACE takes it as a hint. */
		if (base != MAP_FAILED && base != want) {
			munmap(base, size);
			base = MAP_FAILED;
			errno = EEXIST;
		}
		if (base == MAP_FAILED)
			wlog_debug(w, "window: the guest's address 0x%llx is not free here (%s): no managed memory for this session",
				   (unsigned long long)guest_base, strerror(errno));
		else
			*same = 1;
	} else if (guest_base) {
		wlog_debug(w, "window: the guest's address 0x%llx is not one to map at: no managed memory for this session",
			   (unsigned long long)guest_base);
	}
	if (base == MAP_FAILED)
		base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	return base;
}

int32_t pvgpu_handle_window_attach(struct pvgpu_worker *w,
				   const struct pvgpu_window_attach_req *req,
				   struct pvgpu_window_attach_rep *rep)
{
	struct pvgpu_window *win = &w->win;
	struct pvgpu_window_header hdr;
	int fd = w->conn->ops->take_fd ? w->conn->ops->take_fd(w->conn) : -1;
	void *chan_base = NULL;
	uint64_t chan_size = 0, staging_end;
	int borrowed = 0, same = 0, own = fd >= 0;
	struct stat st;
	void *base;

	if (fd >= 0 && req->window_id) {
		wlog_info(w, "window_attach: a file descriptor and a window id; refused");
		close(fd);
		return CUDA_ERROR_INVALID_VALUE;
	}
	/* No descriptor, no id: the window the channel itself mapped (Xen). */
	if (fd < 0 && !req->window_id && w->conn->ops->window &&
	    !w->conn->ops->window(w->conn, &chan_base, &chan_size))
		borrowed = 1;
	if (fd < 0 && !req->window_id && !borrowed) {
		wlog_info(w, "window_attach without a file descriptor");
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (borrowed) {
		if (win->base || req->size < PVGPU_WINDOW_HDR_SIZE ||
		    req->size != chan_size) {
			wlog_info(w, "window_attach: %llu bytes named, the channel's window has %llu: refused",
				  (unsigned long long)req->size,
				  (unsigned long long)chan_size);
			return CUDA_ERROR_INVALID_VALUE;
		}
		base = chan_base;
	} else {
		if (fd < 0) {
			fd = open_vm_window(w, req);
			if (fd < 0)
				return CUDA_ERROR_INVALID_VALUE;
		} else if (!win->base && window_fd_ok(w, fd, req->size)) {
			close(fd);
			return CUDA_ERROR_INVALID_VALUE;
		}
		if (win->base || req->size < PVGPU_WINDOW_HDR_SIZE ||
		    fstat(fd, &st) || (uint64_t)st.st_size < req->size ||
		    req->size > SIZE_MAX) {
			close(fd);
			return CUDA_ERROR_INVALID_VALUE;
		}
		base = map_window(w, fd, req->size, req->guest_base, &same);
		close(fd);
		if (base == MAP_FAILED) {
			wlog_warn(w, "cannot map a %llu-byte window: %s",
				  (unsigned long long)req->size, strerror(errno));
			return CUDA_ERROR_INVALID_VALUE;
		}
	}
	/* One snapshot of the header; only this copy is trusted from now on. */
	memcpy(&hdr, base, sizeof(hdr));
	staging_end = hdr.staging_offset +
		      (uint64_t)hdr.slot_size * hdr.nslots;
	if (hdr.magic != PVGPU_WINDOW_MAGIC || hdr.layout != PVGPU_WINDOW_LAYOUT ||
	    hdr.size != req->size || hdr.window_id != req->window_id ||
	    hdr.nslots < 2 || hdr.nslots > MAX_SLOTS ||
	    hdr.slot_size < MIN_SLOT || hdr.slot_size > MAX_SLOT ||
	    hdr.staging_offset < PVGPU_WINDOW_HDR_SIZE ||
	    hdr.staging_offset > req->size || staging_end > req->size) {
		wlog_warn(w, "window header is not a valid pvgpu layout %u window of %llu bytes: refused",
			  PVGPU_WINDOW_LAYOUT, (unsigned long long)req->size);
		if (!borrowed)
			munmap(base, req->size);
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (req->ring_size || req->ring_offset) {
		const char *why = "the ring feature was not agreed";
		struct pvgpu_ring_waiter waiter;
		uint64_t cap = 0;

		if (w->features & PVGPU_FEATURE_RING)
			cap = pvgpu_ring_check_region(req->ring_offset, req->ring_size,
						      req->size, staging_end, &why);
		if (!cap) {
			wlog_warn(w, "window_attach: control ring at %llu, %llu bytes: %s; refused",
				  (unsigned long long)req->ring_offset,
				  (unsigned long long)req->ring_size, why);
			if (!borrowed)
				munmap(base, req->size);
			return CUDA_ERROR_INVALID_VALUE;
		}
		pvgpu_worker_ring_waiter(w, &waiter);
		pvgpu_ring_attach(&w->ring, (uint8_t *)base + req->ring_offset,
				  cap, PVGPU_RING_WORKER, &waiter);
		if (w->features & PVGPU_FEATURE_SIGNAL)
			w->signal.word = pvgpu_ring_signal_word((uint8_t *)base +
								req->ring_offset);
		w->ring_pending = 1;
		rep->ring = 1;
		wlog_debug(w, "control ring: %llu KiB each way", (unsigned long long)(cap >> 10));
	}
	win->base = base;
	win->own = own;
	win->borrowed = borrowed;
	win->same_address = same;
	rep->same_address = (uint32_t)same;
	win->size = req->size;
	win->hdr = base;
	win->staging_offset = hdr.staging_offset;
	win->slot_size = hdr.slot_size;
	win->nslots = hdr.nslots;
	pvgpu_window_store(&win->hdr->h2d_done, 0);
	pvgpu_window_store(&win->hdr->d2h_ready, 0);
	rep->window_id = hdr.window_id;
	wlog_debug(w, "window attached: %llu MiB, %u staging slots of %u KiB",
		   (unsigned long long)(req->size >> 20), hdr.nslots,
		   hdr.slot_size >> 10);
	return CUDA_SUCCESS;
}

/*
 * A window copy needs the window and a context.  Memory the guest pinned
 * (window_register) DMAs at full speed; any other part of the window still
 * copies correctly, through the driver's own staging.
 */
static int32_t window_ready(struct pvgpu_worker *w)
{
	if (!w->win.base)
		return CUDA_ERROR_INVALID_VALUE;
	if (!w->cur_ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	return CUDA_SUCCESS;
}

/* The staging slots are pinned once per context, on first use. */
static int32_t staging_pinned(struct pvgpu_worker *w)
{
	struct pvgpu_window *win = &w->win;
	int32_t st;

	if (win->staging_ctx)
		return CUDA_SUCCESS;
	st = w->ex_ops->host_register(w->ex, win->base + win->staging_offset,
				      (uint64_t)win->slot_size * win->nslots);
	if (st) {
		wlog_warn(w, "cannot pin the window's staging slots: CUresult %d", st);
		return st;
	}
	win->staging_ctx = w->cur_ctx;
	return CUDA_SUCCESS;
}

int32_t pvgpu_window_pin(struct pvgpu_worker *w, uint64_t offset,
			 uint64_t size, struct pvgpu_window_pin **pin)
{
	struct pvgpu_window *win = &w->win;
	uint64_t staging_end = win->staging_offset +
			       (uint64_t)win->slot_size * win->nslots;
	int32_t st = window_ready(w);

	if (st)
		return st;
	/* Page-aligned, inside the arena, and overlapping no other pin. */
	if (size == 0 || (offset | size) & 4095 ||
	    offset < staging_end || offset > win->size ||
	    size > win->size - offset)
		return CUDA_ERROR_INVALID_VALUE;
	for (unsigned int i = 0; i < win->npins; i++) {
		const struct pvgpu_window_pin *p = &win->pins[i];

		if (offset < p->offset + p->size && p->offset < offset + size)
			return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
	}
	if (win->npins == PVGPU_WINDOW_PINS)
		return CUDA_ERROR_OUT_OF_MEMORY;
	st = w->ex_ops->host_register(w->ex, win->base + offset, size);
	if (st)
		return st;
	*pin = &win->pins[win->npins++];
	**pin = (struct pvgpu_window_pin){ offset, size, w->cur_ctx, 0, 0 };
	return CUDA_SUCCESS;
}

int32_t pvgpu_handle_window_register(struct pvgpu_worker *w,
				     const struct pvgpu_window_register_req *req)
{
	struct pvgpu_window_pin *pin;
	struct pvgpu_handle *ctx;
	int32_t st = pvgpu_window_pin(w, req->offset, req->size, &pin);

	/* At the guest's address, its pointer is the GPU's too: kernels
	 * given it (cuMemHostAlloc'd flags, buffers) and copies reach it. */
	ctx = st ? NULL : pvgpu_handle_get(&w->handles, w->cur_ctx, H_CTX);
	if (ctx && w->win.same_address)
		pvgpu_window_pin_same(w, pin, PVGPU_ALLOC_HOSTMAP, ctx->device);
	return st;
}

int32_t pvgpu_handle_window_unregister(struct pvgpu_worker *w,
				       const struct pvgpu_window_unregister_req *req)
{
	struct pvgpu_window *win = &w->win;

	for (unsigned int i = 0; i < win->npins; i++) {
		struct pvgpu_window_pin *p = &win->pins[i];
		int32_t st = CUDA_SUCCESS;

		if (p->offset != req->offset)
			continue;
		if (p->dptr) {
			struct pvgpu_alloc *a = pvgpu_alloc_find(&w->allocs, p->dptr);

			/* Managed memory's bytes were the VM's (managed.c). */
			if (a && a->module == PVGPU_ALLOC_MANAGED)
				atomic_fetch_sub(&w->slot->mem_used[a->device], a->size);
			if (a && (a->module == PVGPU_ALLOC_HOSTMAP ||
				  a->module == PVGPU_ALLOC_MANAGED))
				pvgpu_alloc_del(&w->allocs, a);
		}
		if (p->ctx)
			st = w->ex_ops->host_release(w->ex, win->base + p->offset,
						     true);
		*p = win->pins[--win->npins];
		return st;
	}
	return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
}

void *pvgpu_window_host(struct pvgpu_worker *w, uint64_t offset,
			uint64_t size)
{
	const struct pvgpu_window *win = &w->win;
	uint64_t arena = win->staging_offset +
			 (uint64_t)win->slot_size * win->nslots;

	if (!win->base || !size || offset < arena || offset > win->size ||
	    size > win->size - offset)
		return NULL;
	return win->base + offset;
}

static int32_t check_copy(struct pvgpu_worker *w, uint64_t dptr,
			  uint64_t offset, uint64_t size, uint64_t stream_id,
			  uint64_t *stream)
{
	struct pvgpu_window *win = &w->win;
	int32_t st;

	if (!w->ex)
		return CUDA_ERROR_NOT_INITIALIZED;
	st = window_ready(w);
	if (st)
		return st;
	/* The header page is not data: keep the guest's copies off it. */
	if (offset < PVGPU_WINDOW_HDR_SIZE || offset > win->size ||
	    size > win->size - offset)
		return CUDA_ERROR_INVALID_VALUE;
	/* size 0: the staged copies check their device range themselves. */
	if (size && !pvgpu_alloc_range(&w->allocs, dptr, size))
		return CUDA_ERROR_INVALID_VALUE;
	return pvgpu_lookup_stream(w, stream_id, stream);
}

/*
 * The end of a synchronous copy on a stream of the guest's: look at the
 * stream for a short while first (a copy of up to a MiB or so ends within
 * tens of microseconds), then wait as the context's flags say.  A blocking
 * wait's wake-up would cost more than the copy itself.
 */
#define COPY_SPIN_NS	(100u * 1000)

static int32_t copy_done(struct pvgpu_worker *w, uint64_t stream)
{
	struct pvgpu_poll poll = { 0 };
	int32_t st;

	while ((st = pvgpu_exec_stream_query(w->ex_ops, w->ex, stream)) == CUDA_ERROR_NOT_READY &&
	       pvgpu_poll_again(&poll, COPY_SPIN_NS))
		;
	return st == CUDA_ERROR_NOT_READY ?
	       w->ex_ops->synchronize(w->ex, false, stream) : st;
}

/*
 * Straight between the window and the device: one message, one DMA from
 * (or into) the guest's own pinned pages, nothing staged.  A synchronous
 * copy on the default stream is the program's own synchronous driver call
 * where the executor has it.
 */
static int32_t htod_window(struct pvgpu_worker *w, uint64_t dst,
			   uint64_t offset, uint64_t size, uint64_t stream_id,
			   int sync)
{
	uint64_t stream;
	int32_t st;

	if (size == 0)
		return CUDA_SUCCESS;
	st = check_copy(w, dst, offset, size, stream_id, &stream);
	if (st)
		return st;
	if (sync && pvgpu_signal_wanted(w)) {
		st = pvgpu_exec_htod(w->ex_ops, w->ex, dst, w->win.base + offset,
				     size, true, stream);
		if (!st && !pvgpu_signal_queue(w, stream))
			st = copy_done(w, stream);
	} else if (sync && !stream) {
		st = pvgpu_exec_htod(w->ex_ops, w->ex, dst, w->win.base + offset,
				     size, false, 0);
	} else {
		st = pvgpu_exec_htod(w->ex_ops, w->ex, dst, w->win.base + offset,
				     size, true, stream);
		if (!st && sync)
			st = copy_done(w, stream);
	}
	if (!st)
		atomic_fetch_add(&w->slot->bytes_h2d, size);
	return st;
}

static int32_t dtoh_window(struct pvgpu_worker *w, uint64_t src,
			   uint64_t offset, uint64_t size, uint64_t stream_id,
			   int sync)
{
	uint64_t stream;
	int32_t st;

	if (size == 0)
		return CUDA_SUCCESS;
	st = check_copy(w, src, offset, size, stream_id, &stream);
	if (st)
		return st;
	if (sync && pvgpu_signal_wanted(w)) {
		st = pvgpu_exec_dtoh(w->ex_ops, w->ex, w->win.base + offset, src,
				     size, true, stream);
		if (!st && !pvgpu_signal_queue(w, stream))
			st = copy_done(w, stream);
	} else if (sync && !stream) {
		st = pvgpu_exec_dtoh(w->ex_ops, w->ex, w->win.base + offset, src,
				     size, false, 0);
	} else {
		st = pvgpu_exec_dtoh(w->ex_ops, w->ex, w->win.base + offset, src,
				     size, true, stream);
		if (!st && sync)
			st = copy_done(w, stream);
	}
	if (!st)
		atomic_fetch_add(&w->slot->bytes_d2h, size);
	return st;
}

int32_t pvgpu_handle_memcpy_htod_window(struct pvgpu_worker *w,
					const struct pvgpu_memcpy_htod_window_req *req)
{
	return htod_window(w, req->dst, req->offset, req->size, req->stream, 1);
}

int32_t pvgpu_handle_memcpy_htod_window_async(struct pvgpu_worker *w,
					      const struct pvgpu_memcpy_htod_window_async_req *req)
{
	return htod_window(w, req->dst, req->offset, req->size, req->stream, 0);
}

int32_t pvgpu_handle_memcpy_dtoh_window(struct pvgpu_worker *w,
					const struct pvgpu_memcpy_dtoh_window_req *req)
{
	return dtoh_window(w, req->src, req->offset, req->size, req->stream, 1);
}

int32_t pvgpu_handle_memcpy_dtoh_window_async(struct pvgpu_worker *w,
					      const struct pvgpu_memcpy_dtoh_window_async_req *req)
{
	return dtoh_window(w, req->src, req->offset, req->size, req->stream, 0);
}

/* --- staged copies ---------------------------------------------------------- */

struct guest_wait {
	struct pvgpu_worker *w;
	const struct pvgpu_window_counter *counter;
	uint64_t seen, now;
};

static int guest_moved(void *arg)
{
	struct guest_wait *gw = arg;

	gw->now = pvgpu_window_load(gw->counter);
	return gw->now != gw->seen;
}

static int guest_gone(void *arg)
{
	struct guest_wait *gw = arg;

	return gw->w->conn->ops->hung_up(gw->w->conn);
}

/*
 * Wait until the guest moves `counter` past `seen`: spin briefly (the guest
 * is usually mid-memcpy), then yield, then sleep.  Returns the new value,
 * or `seen` when the guest hung up or made no progress for too long.
 */
static uint64_t wait_guest_for(struct pvgpu_worker *w,
			       const struct pvgpu_window_counter *counter,
			       uint64_t seen)
{
	struct guest_wait gw = { w, counter, seen, seen };

	switch (pvgpu_spin_wait(guest_moved, guest_gone, &gw,
				GUEST_TIMEOUT_NS)) {
	case PVGPU_WAIT_READY:
		return gw.now;
	case PVGPU_WAIT_STOPPED:
		wlog_info(w, "guest went away during a staged copy");
		w->fatal = 1;
		return seen;
	case PVGPU_WAIT_TIMEOUT:
		break;
	}
	wlog_warn(w, "guest made no progress on a staged copy for %d s: giving up",
		  (int)(GUEST_TIMEOUT_NS / 1000000000u));
	return seen;
}

/* The same, off the watchdog's clock: a slow guest is not a hung call. */
static uint64_t wait_guest(struct pvgpu_worker *w,
			   const struct pvgpu_window_counter *counter,
			   uint64_t seen)
{
	uint64_t v = pvgpu_window_load(counter), paused;

	if (v != seen)
		return v;
	paused = pvgpu_watchdog_pause(w->slot);
	v = wait_guest_for(w, counter, seen);
	pvgpu_watchdog_resume(w->slot, paused);
	return v;
}

static int32_t create_slot_events(struct pvgpu_worker *w, uint64_t *ev)
{
	for (uint32_t i = 0; i < w->win.nslots; i++) {
		int32_t st = pvgpu_exec_event_create(w->ex_ops, w->ex, CU_EVENT_DISABLE_TIMING,
						     &ev[i]);

		if (st) {
			while (i--)
				pvgpu_exec_event_destroy(w->ex_ops, w->ex, ev[i]);
			return st;
		}
	}
	return CUDA_SUCCESS;
}

/*
 * The staging slots' events, made once per context at its first staged
 * copy (a create and a destroy per slot and copy cost the driver more
 * than a small block's DMA), and dropped with the window, the context, or
 * a copy given up half-way.
 */
static void drop_slot_events(struct pvgpu_worker *w)
{
	struct pvgpu_window *win = &w->win;

	if (win->slot_ev_ctx && w->ex)
		for (uint32_t i = 0; i < win->nslots; i++)
			pvgpu_exec_event_destroy(w->ex_ops, w->ex, win->slot_ev[i]);
	win->slot_ev_ctx = 0;
}

static int32_t slot_events(struct pvgpu_worker *w, const uint64_t **ev)
{
	struct pvgpu_window *win = &w->win;
	int32_t st;

	if (win->slot_ev_ctx != w->cur_ctx) {
		drop_slot_events(w);
		st = create_slot_events(w, win->slot_ev);
		if (st)
			return st;
		win->slot_ev_ctx = w->cur_ctx;
	}
	*ev = win->slot_ev;
	return CUDA_SUCCESS;
}

/*
 * A staged copy given up half-way leaves the staging ring out of step:
 * stop using the window.  Where the control ring lives in it too, the
 * session cannot go on without it: it ends.
 */
static void staging_abandoned(struct pvgpu_worker *w)
{
	if (w->ring_on || w->ring_pending) {
		wlog_warn(w, "staged copy abandoned with the control ring in the window; ending session");
		w->fatal = 1;
		return;
	}
	pvgpu_window_detach(w);
}

static uint8_t *slot_ptr(struct pvgpu_window *win, uint64_t seq)
{
	return win->base + win->staging_offset +
	       (seq % win->nslots) * (uint64_t)win->slot_size;
}

/*
 * What a staged copy of size bytes at dptr checks before the guest touches
 * the ring (refused here, it sees the reply and stops): the copy, that
 * dptr..+size is the session's, pinned staging, the slots' events (*ev);
 * then how many blocks it takes.
 */
static int32_t staged_begin(struct pvgpu_worker *w, uint64_t dptr,
			    uint64_t size, uint64_t stream_id,
			    uint64_t *stream, const uint64_t **ev,
			    uint64_t *blocks)
{
	int32_t st = check_copy(w, dptr, PVGPU_WINDOW_HDR_SIZE, 0, stream_id,
				stream);

	if (!st && !pvgpu_alloc_range(&w->allocs, dptr, size))
		st = CUDA_ERROR_INVALID_VALUE;
	if (!st)
		st = staging_pinned(w);
	if (!st)
		st = slot_events(w, ev);
	if (!st)
		*blocks = (size + w->win.slot_size - 1) / w->win.slot_size;
	return st;
}

/*
 * Start the DMA of block k (from seq0) of a copy of size bytes at dptr,
 * between its slot and the device, and record the slot's event after it.
 * Once the copy has failed (err) nothing more starts, and a slot bound for
 * the guest is zeroed: never hand it stale bytes.
 */
static int32_t issue_block(struct pvgpu_worker *w, const uint64_t *ev,
			   uint64_t seq0, uint64_t k, uint64_t dptr,
			   uint64_t size, uint64_t stream, int to_host,
			   int32_t err)
{
	struct pvgpu_window *win = &w->win;
	uint64_t off = k * win->slot_size;
	uint64_t len = size - off < win->slot_size ? size - off : win->slot_size;
	uint8_t *p = slot_ptr(win, seq0 + k);

	if (!err)
		err = to_host ?
		      pvgpu_exec_dtoh(w->ex_ops, w->ex, p, dptr + off, len, true,
				      stream) :
		      pvgpu_exec_htod(w->ex_ops, w->ex, dptr + off, p, len, true,
				      stream);
	if (!err)
		err = pvgpu_exec_event_record(w->ex_ops, w->ex, ev[(seq0 + k) % win->nslots],
					      stream);
	pvgpu_trace_mark(w->req_id, PVGPU_TR_BLOCK(PVGPU_TR_W_ISSUE, k));
	if (err && to_host)
		memset(p, 0, len);
	return err;
}

/*
 * Block *k (from seq0) is through the DMA once its slot's event is: count
 * it, and say so to the guest in counter.  With `wait` 0, only a look: 0
 * while the DMA is still going.  An error before leaves the event alone.
 */
static int retire_block(struct pvgpu_worker *w, const uint64_t *ev,
			uint64_t seq0, uint64_t *k,
			struct pvgpu_window_counter *counter, int32_t *err,
			int wait)
{
	if (!*err) {
		uint64_t e = ev[(seq0 + *k) % w->win.nslots];
		int32_t st = wait ? pvgpu_exec_event_synchronize(w->ex_ops, w->ex, e) :
				    pvgpu_exec_event_query(w->ex_ops, w->ex, e);

		if (st == CUDA_ERROR_NOT_READY && !wait)
			return 0;
		*err = st;
	}
	pvgpu_trace_mark(w->req_id, PVGPU_TR_BLOCK(PVGPU_TR_W_RETIRE, *k));
	++*k;
	pvgpu_window_store(counter, seq0 + *k);
	return 1;
}

/*
 * A staged copy's end: with all of its blocks through, the ring moves on
 * past them (*seq) and the bytes count (*bytes); abandoned half-way, the
 * ring is out of step and is used no more.
 */
static int32_t staged_end(struct pvgpu_worker *w, uint64_t through,
			  uint64_t blocks, int32_t err, uint64_t *seq,
			  _Atomic uint64_t *bytes, uint64_t size)
{
	if (through < blocks) {
		w->ex_ops->synchronize(w->ex, true, 0);
		drop_slot_events(w);
		staging_abandoned(w);
		return err ? err : CUDA_ERROR_TIMEOUT;
	}
	*seq += blocks;
	atomic_fetch_add(bytes, size);
	return err;
}

/*
 * Host to device: block k (of `blocks`) is in slot (h2d_seq + k) % nslots
 * once the guest's h2d_filled passes h2d_seq + k.  We DMA each filled block
 * and tell the guest it may reuse a slot by moving h2d_done past it.
 */
static int32_t htod_staged(struct pvgpu_worker *w,
			   const struct pvgpu_memcpy_htod_staged_req *req)
{
	struct pvgpu_window *win = &w->win;
	const uint64_t *ev;
	uint64_t stream, blocks, filled, issued = 0, done = 0;
	uint64_t seq0 = win->h2d_seq;
	int32_t st, err = 0;

	if (req->size == 0)
		return CUDA_SUCCESS;
	st = staged_begin(w, req->dst, req->size, req->stream, &stream, &ev,
			  &blocks);
	if (st)
		return st;
	filled = 0;
	while (done < blocks && !w->fatal) {
		uint64_t v = pvgpu_window_load(&win->hdr->h2d_filled) - seq0;

		if (v > blocks || v < filled || v - done > win->nslots) {
			wlog_warn(w, "guest's h2d ring counter is impossible (%llu filled of %llu blocks, %llu done): copy failed",
				  (unsigned long long)v, (unsigned long long)blocks,
				  (unsigned long long)done);
			err = CUDA_ERROR_INVALID_VALUE;
			break;
		}
		filled = v;
		if (issued < filled) {
			err = issue_block(w, ev, seq0, issued++, req->dst, req->size,
					  stream, 0, err);
			continue;
		}
		if (done < issued) {
			/*
			 * Nothing new to start: retire the oldest block, but
			 * while the guest has more to fill only look, so that
			 * the next block's DMA is queued the moment it is
			 * filled, not when this one ends (the guest's
			 * streaming copy-in outruns the DMA).
			 */
			if (!retire_block(w, ev, seq0, &done, &win->hdr->h2d_done,
					  &err, filled == blocks))
				pvgpu_cpu_relax();
			continue;
		}
		if (wait_guest(w, &win->hdr->h2d_filled, seq0 + filled) == seq0 + filled) {
			err = err ? err : CUDA_ERROR_TIMEOUT;
			break;
		}
	}
	return staged_end(w, done, blocks, err, &win->h2d_seq,
			  &w->slot->bytes_h2d, req->size);
}

/*
 * Device to host: we DMA block k into slot (d2h_seq + k) % nslots once the
 * guest has taken what was there, and move d2h_ready past it when the DMA
 * is complete; the guest copies it out and moves d2h_taken.
 */
static int32_t dtoh_staged(struct pvgpu_worker *w,
			   const struct pvgpu_memcpy_dtoh_staged_req *req)
{
	struct pvgpu_window *win = &w->win;
	const uint64_t *ev;
	uint64_t stream, blocks, taken = 0, issued = 0, ready = 0;
	uint64_t seq0 = win->d2h_seq;
	int32_t st, err = 0;

	if (req->size == 0)
		return CUDA_SUCCESS;
	st = staged_begin(w, req->src, req->size, req->stream, &stream, &ev,
			  &blocks);
	if (st)
		return st;
	while (ready < blocks && !w->fatal) {
		uint64_t v = pvgpu_window_load(&win->hdr->d2h_taken) - seq0;

		if (v > ready || v < taken) {
			wlog_warn(w, "guest's d2h ring counter is impossible: copy failed");
			err = CUDA_ERROR_INVALID_VALUE;
			break;
		}
		taken = v;
		if (issued < blocks && issued - taken < win->nslots) {
			err = issue_block(w, ev, seq0, issued++, req->src, req->size,
					  stream, 1, err);
			continue;
		}
		if (ready < issued) {
			retire_block(w, ev, seq0, &ready, &win->hdr->d2h_ready,
				     &err, 1);
			continue;
		}
		if (wait_guest(w, &win->hdr->d2h_taken, seq0 + taken) == seq0 + taken) {
			err = err ? err : CUDA_ERROR_TIMEOUT;
			break;
		}
	}
	return staged_end(w, ready, blocks, err, &win->d2h_seq,
			  &w->slot->bytes_d2h, req->size);
}

int32_t pvgpu_handle_memcpy_htod_staged(struct pvgpu_worker *w,
					const struct pvgpu_memcpy_htod_staged_req *req,
					struct pvgpu_memcpy_htod_staged_rep *rep)
{
	int32_t st = htod_staged(w, req);

	rep->ring_seq = w->win.h2d_seq;
	return st;
}

int32_t pvgpu_handle_memcpy_dtoh_staged(struct pvgpu_worker *w,
					const struct pvgpu_memcpy_dtoh_staged_req *req,
					struct pvgpu_memcpy_dtoh_staged_rep *rep)
{
	int32_t st = dtoh_staged(w, req);

	rep->ring_seq = w->win.d2h_seq;
	return st;
}
