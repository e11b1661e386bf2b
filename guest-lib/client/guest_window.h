/*
 * window.h - the guest's side of a shared window (common/window.h):
 * making one, allocating pinned memory inside it, and moving pageable data
 * through its staging ring while the backend DMAs the other end.
 */
#ifndef PVGPU_GUEST_WINDOW_H
#define PVGPU_GUEST_WINDOW_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "client.h"
#include "window.h"

struct pvgpu_window_block;

#define PVGPU_WINDOW_MAX_COPY_THREADS	8

struct pvgpu_window_map {
	uint8_t *base;
	uint64_t size;
	uint64_t window_id;		/* 0: our own memfd (shm://) */
	int dev_fd;			/* /dev/pvgpuN, held (and locked) while mapped */
	int borrowed;			/* the channel's memory (Xen grants): not ours to unmap */
	/*
	 * The backend maps the window at our address too (window_attach's
	 * same_address): the GPU reaches its pinned parts by our pointers,
	 * and managed memory can live here.
	 */
	int same_address;
	struct pvgpu_window_header *hdr;
	uint64_t staging_offset;
	uint32_t slot_size, nslots;
	uint64_t h2d_seq, d2h_seq;	/* blocks through the ring so far */

	/*
	 * Helper threads copy parts of each large staging block: one core's
	 * memcpy, not the DMA, is what limits a pageable copy through the
	 * window.  copy_threads in the config counts this thread too (1: no
	 * helpers).
	 */
	struct pvgpu_copy_helper *helpers[PVGPU_WINDOW_MAX_COPY_THREADS];
	unsigned int nhelpers;

	pthread_mutex_t lock;		/* the allocator */
	struct pvgpu_window_block *blocks;	/* arena, sorted by offset */
	size_t nblocks, cap;
};

/*
 * A new window in a memfd: size and staging slots from cfg (a value out of
 * range takes the default: 1G, 8 slots of 4M).  Returns the map and the
 * fd to hand to the backend, or NULL with one line in err.
 */
struct pvgpu_window_map *pvgpu_window_create(const struct pvgpu_client_config *cfg,
					     int *fd, char *err, size_t errlen);
/*
 * In a VM: the window of a pvgpu device (cfg->window_device, else the
 * first of /dev/pvgpu0..15 that is free), whose layout the host wrote.
 * One process of the guest uses a window at a time (an flock on the
 * device): the staging ring has one writer per direction.  NULL with one
 * line in err when there is none to use.
 */
struct pvgpu_window_map *pvgpu_window_open_device(const struct pvgpu_client_config *cfg,
						  char *err, size_t errlen);
/*
 * A window the channel set up itself (Xen: granted pages, header written
 * by the transport): mapped at base for size bytes and the channel's to
 * unmap.  NULL with one line in err when its header is no usable layout.
 */
struct pvgpu_window_map *pvgpu_window_from_memory(void *base, uint64_t size,
						  const struct pvgpu_client_config *cfg,
						  char *err, size_t errlen);
void pvgpu_window_destroy(struct pvgpu_window_map *w);

/* Pinned memory for cudaMallocHost; NULL when the arena is full. */
void *pvgpu_window_alloc(struct pvgpu_window_map *w, uint64_t size);
/* 0, or -1 if p is not an allocation of this window. */
int pvgpu_window_free(struct pvgpu_window_map *w, void *p);
/*
 * Whether [p, p+len) lies inside the window's arena; *offset is then its
 * offset from the window's start.
 */
int pvgpu_window_holds(const struct pvgpu_window_map *w, const void *p,
		       uint64_t len, uint64_t *offset);

/*
 * The guest's half of a staged copy, run between sending the request and
 * reading its reply.  `quiet` is polled while waiting and returns 0 once
 * anything arrived from the backend (a refusal, or a hang-up).  0, or -1
 * when the wait ended without the backend's progress.  `id` is the
 * request's, for the trace build's marks (common/trace.h).
 */
int pvgpu_window_stage_in(struct pvgpu_window_map *w, uint64_t id,
			  const void *src, uint64_t size,
			  int (*quiet)(void *), void *arg);
int pvgpu_window_stage_out(struct pvgpu_window_map *w, uint64_t id, void *dst,
			   uint64_t size, int (*quiet)(void *), void *arg);

/*
 * After the reply: the backend's count of ring blocks is the truth (a
 * refused copy moved nothing); set ours, and the counter we publish, to it.
 */
void pvgpu_window_ring_sync(struct pvgpu_window_map *w, int h2d, uint64_t seq);

#endif /* PVGPU_GUEST_WINDOW_H */
