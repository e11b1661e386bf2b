/*
 * fuzz_ring.c - libFuzzer target: the worker's end of a control ring
 * (transport/shm/ring.h) against a guest that writes anything anywhere in
 * the ring region, in any order, between the worker's sends and receives.
 *
 * The input is a script of steps, each one byte of opcode and a u64:
 *   0 set the guest's producer index      1 set the guest's consumer index
 *   2 write 8 bytes into the request data 3 set the worker's own indexes
 *   4 worker receives (value % 8192) bytes  5 worker sends (value % 8192)
 *   6 raise a sleeping flag
 * The worker must never read or write outside the region (ASan watches a
 * region allocated to the byte), must never deliver more bytes than the
 * guest published, and once it reports -EPROTO the session is over.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "shm/ring.h"

#define CAP	4096u

static int kick(void *arg)
{
	(void)arg;
	return 0;
}

/* Nobody will ever wake us: blocking is the guest gone. */
static int wait_kick(void *arg)
{
	(void)arg;
	return -ECONNRESET;
}

static uint64_t get_u64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static uint8_t buf[8192];
	struct pvgpu_ring_waiter wt = { kick, wait_kick, NULL, 0, 0 };
	uint64_t region_size = pvgpu_ring_region_size(CAP);
	uint8_t *region = malloc(region_size);
	struct pvgpu_ring_shared *sh = (struct pvgpu_ring_shared *)region;
	struct pvgpu_ring r;

	if (!region)
		return 0;
	pvgpu_ring_init_region(region);
	pvgpu_ring_attach(&r, region, CAP, PVGPU_RING_WORKER, &wt);
	while (size >= 9) {
		uint64_t v = get_u64(data + 1), before;
		int rc = 0;

		switch (data[0] % 7) {
		case 0:
			__atomic_store_n(&sh->dir[0].prod, v, __ATOMIC_RELEASE);
			break;
		case 1:
			__atomic_store_n(&sh->dir[1].cons, v, __ATOMIC_RELEASE);
			break;
		case 2:
			memcpy(region + PVGPU_RING_HDR_SIZE + (v % (CAP - 8)),
			       data + 1, 8);
			break;
		case 3:
			__atomic_store_n(&sh->dir[0].cons, v, __ATOMIC_RELAXED);
			__atomic_store_n(&sh->dir[1].prod, v, __ATOMIC_RELAXED);
			break;
		case 4:
			before = r.rx_pos;
			rc = pvgpu_ring_recv(&r, buf, v % sizeof(buf));
			if (r.rx_pos > r.rx_peer || r.rx_pos - before > v % sizeof(buf))
				abort();
			break;
		case 5:
			rc = pvgpu_ring_send(&r, buf, v % sizeof(buf));
			if (r.tx_pos - r.tx_peer > CAP)
				abort();
			break;
		case 6:
			__atomic_store_n(&sh->dir[1].cons_sleeping, (uint32_t)v, __ATOMIC_RELAXED);
			__atomic_store_n(&sh->dir[0].prod_sleeping, (uint32_t)(v >> 32), __ATOMIC_RELAXED);
			break;
		}
		if (rc == -EPROTO && !r.error)
			abort();
		if (rc)
			break;		/* the session would end here */
		data += 9;
		size -= 9;
	}
	free(region);
	return 0;
}
