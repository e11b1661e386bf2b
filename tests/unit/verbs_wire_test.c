/*
 * verbs_wire_test.c - what a verbs:// peer may send, checked without any
 * RDMA device: the connect request's private data (ring shape, token) and
 * the header of each ring slot.  Everything malformed is refused.
 */
#include <stdio.h>
#include <string.h>

#include "verbs/verbs_wire.h"

#include "unit_check.h"

int main(void)
{
	struct pvgpu_verbs_hello h = {
		.ring = { 0x7f0012345000ull, 0xabcd, 16, 256 << 10 },
		.token = "vm-a",
	}, back;
	struct pvgpu_verbs_ring r;
	uint8_t pd[PVGPU_VERBS_CONNECT_PD], slot[PVGPU_VERBS_SLOT_HDR];
	char err[160];
	uint32_t len;

	CHECK(pvgpu_verbs_hello_encode(pd, &h) == PVGPU_VERBS_CONNECT_PD);
	CHECK(pvgpu_verbs_hello_decode(pd, sizeof(pd), &back, err, sizeof(err)) == 0);
	CHECK(back.ring.addr == h.ring.addr && back.ring.rkey == h.ring.rkey);
	CHECK(back.ring.nslots == 16 && back.ring.slot_size == (256u << 10));
	CHECK(!strcmp(back.token, "vm-a"));

	/* Too short, wrong magic, wrong version, bad shape, bad token. */
	CHECK(pvgpu_verbs_hello_decode(pd, 10, &back, err, sizeof(err)) < 0);
	CHECK(pvgpu_verbs_hello_decode(pd, 0, &back, err, sizeof(err)) < 0);
	pd[0] ^= 1;
	CHECK(pvgpu_verbs_hello_decode(pd, sizeof(pd), &back, err, sizeof(err)) < 0);
	CHECK(strstr(err, "magic") != NULL);
	pd[0] ^= 1;
	pd[4] = 9;
	CHECK(pvgpu_verbs_hello_decode(pd, sizeof(pd), &back, err, sizeof(err)) < 0);
	pd[4] = PVGPU_VERBS_VERSION;
	pd[6] = 40;		/* a slot of 2^40 bytes */
	CHECK(pvgpu_verbs_hello_decode(pd, sizeof(pd), &back, err, sizeof(err)) < 0);
	pd[6] = 3;		/* 8 bytes: smaller than a header */
	CHECK(pvgpu_verbs_hello_decode(pd, sizeof(pd), &back, err, sizeof(err)) < 0);
	pd[6] = 18;
	pd[7] = 0;		/* one slot */
	CHECK(pvgpu_verbs_hello_decode(pd, sizeof(pd), &back, err, sizeof(err)) < 0);
	pd[7] = 15;
	CHECK(pvgpu_verbs_hello_decode(pd, sizeof(pd), &back, err, sizeof(err)) == 0);
	pd[20] = 200;		/* token longer than the private data */
	CHECK(pvgpu_verbs_hello_decode(pd, sizeof(pd), &back, err, sizeof(err)) < 0);
	pd[20] = 40;		/* over the token limit */
	CHECK(pvgpu_verbs_hello_decode(pd, sizeof(pd), &back, err, sizeof(err)) < 0);
	pd[20] = 4;
	pd[22] = 0x01;		/* not printable */
	CHECK(pvgpu_verbs_hello_decode(pd, sizeof(pd), &back, err, sizeof(err)) < 0);
	pd[22] = 'm';
	CHECK(pvgpu_verbs_hello_decode(pd, 22, &back, err, sizeof(err)) < 0);

	CHECK(pvgpu_verbs_ring_encode(pd, &h.ring) == PVGPU_VERBS_ACCEPT_PD);
	CHECK(pvgpu_verbs_ring_decode(pd, PVGPU_VERBS_ACCEPT_PD, &r, err, sizeof(err)) == 0);
	CHECK(r.addr == h.ring.addr && r.nslots == 16);

	/* Slot headers: sequence, magic, length within the slot. */
	pvgpu_verbs_slot_encode(slot, 7, 1000);
	CHECK(pvgpu_verbs_slot_check(slot, 7, 4096, &len) == 0 && len == 1000);
	CHECK(pvgpu_verbs_slot_check(slot, 8, 4096, &len) < 0);
	CHECK(pvgpu_verbs_slot_check(slot, 7, 1000, &len) < 0);
	pvgpu_verbs_slot_encode(slot, 7, 4096 - PVGPU_VERBS_SLOT_HDR);
	CHECK(pvgpu_verbs_slot_check(slot, 7, 4096, &len) == 0);
	pvgpu_verbs_slot_encode(slot, 7, 4096 - PVGPU_VERBS_SLOT_HDR + 1);
	CHECK(pvgpu_verbs_slot_check(slot, 7, 4096, &len) < 0);
	pvgpu_verbs_slot_encode(slot, 7, 0xffffffffu);
	CHECK(pvgpu_verbs_slot_check(slot, 7, 4096, &len) < 0);
	pvgpu_verbs_slot_encode(slot, 7, 10);
	slot[9] ^= 0x10;
	CHECK(pvgpu_verbs_slot_check(slot, 7, 4096, &len) < 0);
	slot[9] ^= 0x10;
	slot[12] = 1;
	CHECK(pvgpu_verbs_slot_check(slot, 7, 4096, &len) < 0);
	/* MORE beside the kind: the sender's message goes on in the next slot. */
	pvgpu_verbs_slot_encode(slot, 7, 10);
	pvgpu_verbs_slot_more(slot);
	CHECK(pvgpu_verbs_slot_check(slot, 7, 4096, &len) == (int)PVGPU_VERBS_SLOT_MORE &&
	      len == 10);
	slot[13] |= 0x02;	/* an unknown bit beside it */
	CHECK(pvgpu_verbs_slot_check(slot, 7, 4096, &len) < 0);

	/* REF slots: where the bytes are, for the receiver's RDMA READ. */
	{
		uint8_t rs[PVGPU_VERBS_SLOT_HDR + PVGPU_VERBS_REF_LEN];
		struct pvgpu_verbs_ref ref = { 0x7f0000001000ull, 0x1234, 8u << 20 }, got;

		pvgpu_verbs_ref_encode(rs, 9, &ref);
		CHECK(pvgpu_verbs_slot_check(rs, 9, 4096, &len) == PVGPU_VERBS_SLOT_REF &&
		      len == PVGPU_VERBS_REF_LEN);
		CHECK(pvgpu_verbs_ref_decode(rs + PVGPU_VERBS_SLOT_HDR, len, &got) == 0);
		CHECK(got.addr == ref.addr && got.rkey == ref.rkey && got.len == ref.len);
		CHECK(pvgpu_verbs_ref_decode(rs + PVGPU_VERBS_SLOT_HDR, 15, &got) < 0);
		ref.len = 0;
		pvgpu_verbs_ref_encode(rs, 9, &ref);
		CHECK(pvgpu_verbs_ref_decode(rs + PVGPU_VERBS_SLOT_HDR, 16, &got) < 0);
		ref.len = PVGPU_VERBS_REF_MAX + 1;
		pvgpu_verbs_ref_encode(rs, 9, &ref);
		CHECK(pvgpu_verbs_ref_decode(rs + PVGPU_VERBS_SLOT_HDR, 16, &got) < 0);
		rs[12] = 2;		/* no such kind */
		CHECK(pvgpu_verbs_slot_check(rs, 9, 4096, &len) < 0);
		/* Features: known bits pass, unknown ones are refused. */
		h.ring.features = PVGPU_VERBS_F_REF;
		pvgpu_verbs_ring_encode(pd, &h.ring);
		CHECK(pvgpu_verbs_ring_decode(pd, PVGPU_VERBS_ACCEPT_PD, &r, err, sizeof(err)) == 0 &&
		      r.features == PVGPU_VERBS_F_REF);
		pd[5] = 0x80;
		CHECK(pvgpu_verbs_ring_decode(pd, PVGPU_VERBS_ACCEPT_PD, &r, err, sizeof(err)) < 0);
	}

	/* verbs://HOST:PORT?timeout=N: the bound on a peer that stops answering. */
	{
		char hp[64];
		uint32_t ms = 7;

		CHECK(pvgpu_verbs_addr_options("10.0.0.1:7471", hp, sizeof(hp), &ms, err, sizeof(err)) == 0);
		CHECK(!strcmp(hp, "10.0.0.1:7471") && ms == 7);
		CHECK(pvgpu_verbs_addr_options("[fd00::1]:7471?timeout=3", hp, sizeof(hp), &ms, err, sizeof(err)) == 0);
		CHECK(!strcmp(hp, "[fd00::1]:7471") && ms == 3000);
		CHECK(pvgpu_verbs_addr_options("h:1?timeout=250ms", hp, sizeof(hp), &ms, err, sizeof(err)) == 0 && ms == 250);
		CHECK(pvgpu_verbs_addr_options("h:1?timeout=0", hp, sizeof(hp), &ms, err, sizeof(err)) < 0);
		CHECK(pvgpu_verbs_addr_options("h:1?timeout=-1", hp, sizeof(hp), &ms, err, sizeof(err)) < 0);
		CHECK(pvgpu_verbs_addr_options("h:1?timeout=3601", hp, sizeof(hp), &ms, err, sizeof(err)) < 0);
		CHECK(pvgpu_verbs_addr_options("h:1?timeout=99999999999999999999", hp, sizeof(hp), &ms, err, sizeof(err)) < 0);
		CHECK(pvgpu_verbs_addr_options("h:1?timeout=3x", hp, sizeof(hp), &ms, err, sizeof(err)) < 0);
		CHECK(pvgpu_verbs_addr_options("h:1?speed=3", hp, sizeof(hp), &ms, err, sizeof(err)) < 0);
		CHECK(strstr(err, "timeout=SECONDS") != NULL);
		CHECK(pvgpu_verbs_addr_options("a-very-long-host-name-that-does-not-fit-in-sixty-four-bytes:7471",
					       hp, sizeof(hp), &ms, err, sizeof(err)) < 0);
	}

	printf("%d passed, %d failed\n", passed, failed);
	return failed != 0;
}
