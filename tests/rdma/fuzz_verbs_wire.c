/*
 * fuzz_verbs_wire.c - libFuzzer target: what a verbs:// peer sends before
 * and around the ring (transport/verbs/verbs_wire.h): the connect
 * request's private data, the accept's, and ring slot headers, all from
 * an untrusted peer.
 *
 * Whatever is accepted must be within the limits the header promises (a
 * printable token of at most PVGPU_VERBS_TOKEN_MAX bytes, a ring shape in
 * range, a slot length that fits its slot), and must survive a round trip
 * through the encoders unchanged.  ASan/UBSan watch every byte read.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "verbs_wire.h"

static void check_ring(const struct pvgpu_verbs_ring *r)
{
	if (r->nslots < PVGPU_VERBS_MIN_SLOTS || r->nslots > PVGPU_VERBS_MAX_SLOTS ||
	    r->slot_size < PVGPU_VERBS_MIN_SLOT || r->slot_size > PVGPU_VERBS_MAX_SLOT ||
	    (r->slot_size & (r->slot_size - 1)))
		abort();
}

/* Field by field: the struct has padding. */
static int same_ring(const struct pvgpu_verbs_ring *a, const struct pvgpu_verbs_ring *b)
{
	return a->addr == b->addr && a->rkey == b->rkey && a->nslots == b->nslots &&
	       a->slot_size == b->slot_size && a->features == b->features;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct pvgpu_verbs_hello h, h2;
	struct pvgpu_verbs_ring r, r2;
	uint8_t out[PVGPU_VERBS_CONNECT_PD], acc[PVGPU_VERBS_ACCEPT_PD];
	uint8_t *copy;
	char err[160];
	uint32_t len;

	/* An exact-size copy, so that ASan sees a read one byte past it. */
	copy = malloc(size ? size : 1);
	if (!copy)
		return 0;
	memcpy(copy, data, size);

	if (!pvgpu_verbs_hello_decode(copy, size, &h, err, sizeof(err))) {
		size_t tl = strlen(h.token);

		check_ring(&h.ring);
		if (tl > PVGPU_VERBS_TOKEN_MAX)
			abort();
		for (size_t i = 0; i < tl; i++)
			if (h.token[i] < 0x21 || h.token[i] > 0x7e)
				abort();
		pvgpu_verbs_hello_encode(out, &h);
		if (pvgpu_verbs_hello_decode(out, sizeof(out), &h2, err, sizeof(err)) ||
		    !same_ring(&h.ring, &h2.ring) || strcmp(h.token, h2.token))
			abort();
	} else if (!err[0]) {
		abort();	/* refused without saying why */
	}
	if (!pvgpu_verbs_ring_decode(copy, size, &r, err, sizeof(err))) {
		check_ring(&r);
		pvgpu_verbs_ring_encode(acc, &r);
		if (pvgpu_verbs_ring_decode(acc, sizeof(acc), &r2, err, sizeof(err)) ||
		    !same_ring(&r, &r2))
			abort();
	}
	/* A slot header: the first 16 bytes, sequence and slot size from the rest. */
	if (size >= PVGPU_VERBS_SLOT_HDR + 8) {
		uint32_t seq, slot;

		memcpy(&seq, copy + PVGPU_VERBS_SLOT_HDR, 4);
		memcpy(&slot, copy + PVGPU_VERBS_SLOT_HDR + 4, 4);
		int kind = pvgpu_verbs_slot_check(copy, seq, slot, &len);
		struct pvgpu_verbs_ref ref;

		if (kind >= 0 &&
		    (slot < PVGPU_VERBS_SLOT_HDR || len > slot - PVGPU_VERBS_SLOT_HDR))
			abort();
		if (kind >= 0 && (kind & ~(int)PVGPU_VERBS_SLOT_MORE) > (int)PVGPU_VERBS_SLOT_REF)
			abort();
		if (kind >= 0 && (kind & ~(int)PVGPU_VERBS_SLOT_MORE) == PVGPU_VERBS_SLOT_REF &&
		    len != PVGPU_VERBS_REF_LEN)
			abort();
		/* A reference from the bytes after the header: never empty or huge. */
		if (!pvgpu_verbs_ref_decode(copy + PVGPU_VERBS_SLOT_HDR,
					    (uint32_t)(size - PVGPU_VERBS_SLOT_HDR), &ref) &&
		    (!ref.len || ref.len > PVGPU_VERBS_REF_MAX))
			abort();
	}
	free(copy);
	return 0;
}
