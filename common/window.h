/*
 * window.h - the layout of a shared window: memory mapped by both the guest
 * library and the session's worker, through which bulk data moves without
 * crossing the control channel (DESIGN §4).
 *
 * A window is a memfd passed over the Unix socket (shm://), or, in a VM, the
 * BAR2 of an ivshmem device that pvgpu.ko maps (/dev/pvgpuN) and whose host
 * file qemu-device created.  Either way it starts with this header; the rest
 * is the guest's: pinned allocations (cudaMallocHost) and a ring of staging
 * slots for pageable copies.
 *
 * The worker reads the layout fields once, at attach time, checks them and
 * keeps its own copy: the guest can rewrite the header whenever it likes, so
 * later reads of it are hints at most.  The ring counters are the only
 * fields read afterwards, and a counter that goes backwards or jumps past
 * what is possible ends the copy with an error for that session.
 */
#ifndef PVGPU_WINDOW_H
#define PVGPU_WINDOW_H

/*
 * pvgpu.ko includes this header too, so that the kernel module and user
 * space cannot disagree about the layout: the kernel has no <stdint.h>,
 * but its <linux/types.h> gives the same fixed-width names.  The fields are
 * little-endian, like everything pvgpu shares with the other side: user
 * space reads them as they are (x86-64 and arm64 are little-endian), the
 * kernel module converts what it reads.
 */
#ifdef __KERNEL__
#include <linux/types.h>
#else
#include <stdint.h>
#endif

#define PVGPU_WINDOW_MAGIC	0x57475650u	/* "PVGW" as bytes */
#define PVGPU_WINDOW_LAYOUT	1
#define PVGPU_WINDOW_HDR_SIZE	4096u		/* one page, before the data */

/* Each counter on its own cache line: the two sides write different ones. */
struct pvgpu_window_counter {
	uint64_t value;			/* only touched with __atomic builtins */
	uint8_t pad[56];
};

struct pvgpu_window_header {
	uint32_t magic;
	uint32_t layout;
	uint64_t size;			/* the whole window, header included */
	uint64_t window_id;		/* who made it names it; 0 for shm:// */
	uint64_t staging_offset;	/* first staging slot, from the start */
	uint32_t slot_size;		/* bytes per slot */
	uint32_t nslots;
	uint8_t reserved[64 - 40];

	/* Host-to-device staging: the guest fills, the worker drains. */
	struct pvgpu_window_counter h2d_filled;	/* written by the guest */
	struct pvgpu_window_counter h2d_done;	/* written by the worker */
	/* Device-to-host staging: the worker fills, the guest drains. */
	struct pvgpu_window_counter d2h_ready;	/* written by the worker */
	struct pvgpu_window_counter d2h_taken;	/* written by the guest */
};

_Static_assert(sizeof(struct pvgpu_window_header) <= PVGPU_WINDOW_HDR_SIZE,
	       "the window header fits its page");

static inline uint64_t pvgpu_window_load(const struct pvgpu_window_counter *c)
{
	return __atomic_load_n(&c->value, __ATOMIC_ACQUIRE);
}

static inline void pvgpu_window_store(struct pvgpu_window_counter *c,
				      uint64_t v)
{
	__atomic_store_n(&c->value, v, __ATOMIC_RELEASE);
}

#endif /* PVGPU_WINDOW_H */
