/*
 * fuzz_ring.c - libFuzzer target: the worker's end of a control ring
 * (transport/ring.h) against a guest that writes anything anywhere in
 * the ring region, in any order, between the worker's sends and receives.
 *
 * The input is a script of steps, each one byte of opcode and a u64:
 *   0 publish a tag near the worker's next record (any length)
 *   1 set the guest's consumer index      2 write 8 bytes into the requests
 *   3 scribble on the worker's own words  4 worker receives (value % 8192)
 *   5 worker sends (value % 8192)         6 raise a sleeping flag
 * The worker must never read or write outside the region (ASan watches a
 * region allocated to the byte), must never take bytes past a record it
 * accepted nor accept one the ring cannot hold, and once it reports
 * -EPROTO the session is over.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ring.h"

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
	uint8_t *requests, *replies;
	struct pvgpu_ring r;

	if (!region)
		return 0;
	requests = region + PVGPU_RING_HDR_SIZE;
	replies = requests + CAP;
	pvgpu_ring_init_region(region, CAP);
	pvgpu_ring_attach(&r, region, CAP, PVGPU_RING_WORKER, &wt);
	while (size >= 9) {
		uint64_t v = get_u64(data + 1), before, at;
		int rc = 0;

		switch (data[0] % 7) {
		case 0:
			/* Mostly the right position, sometimes one line off. */
			at = r.rx_next + ((v >> 32) % 3 == 2 ? PVGPU_RING_ALIGN : 0);
			memcpy(requests + (at % CAP),
			       &(uint64_t){ pvgpu_ring_tag(at, v & 0x1fff) }, 8);
			break;
		case 1:
			__atomic_store_n(&sh->dir[1].cons, v, __ATOMIC_RELEASE);
			break;
		case 2:
			memcpy(requests + (v % (CAP - 8)), data + 1, 8);
			break;
		case 3:
			__atomic_store_n(&sh->dir[0].cons, v, __ATOMIC_RELAXED);
			memcpy(replies + (v % (CAP - 8)), data + 1, 8);
			break;
		case 4:
			before = r.rx_next;
			rc = pvgpu_ring_recv(&r, buf, v % sizeof(buf));
			/* Within the record taken, which fits the ring. */
			if (r.rx_pos > r.rx_end || r.rx_end > r.rx_next ||
			    r.rx_next - r.rx_end >= PVGPU_RING_ALIGN ||
			    r.rx_end - r.rx_pos > pvgpu_ring_max_record(CAP) ||
			    r.rx_next < before)
				abort();
			break;
		case 5:
			rc = pvgpu_ring_send(&r, buf, v % sizeof(buf));
			if (r.tx_pos - r.tx_peer > CAP || r.tx_pos % PVGPU_RING_ALIGN)
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
